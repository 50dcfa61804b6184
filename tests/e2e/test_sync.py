"""``aioenv.SyncPool``: the blocking facade, against real worker processes and real envs.

Timeouts are hang guards only. Where a call must be blocked, ProbeEnv's *gated* slow action
holds it until the test opens the gate; nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import aioenv
from aioenv import EnvError, InvalidAction, PoolClosed, SyncPool, UsageError
from aioenv._compat import AutoresetMode
from aioenv.core.coordinator import SPIN_AT_MOST, Coordinator, spin_budget
from aioenv.core.launcher import LocalProcess
from tests.envs.faulty import SLOW, make_probe
from tests.support.procs import HANG, process_gone
from tests.support.waits import WaitsHere

PROBE = "tests.envs.faulty:make_probe"
ROOT = Path(__file__).resolve().parents[2]


def worker_pids(sp: SyncPool) -> list[int]:
    coord = sp.pool._runner
    assert coord is not None
    return [slot.proc.pid for slot in coord.slots if slot.proc is not None and isinstance(slot.proc.pid, int)]


def wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + HANG  # hang guard
    while not all(process_gone(p) for p in pids):
        assert time.monotonic() < deadline, f"worker processes still alive: {pids}"
        time.sleep(0.02)


# ---------------------------------------------------------------- basics


def test_same_trajectory_as_sync_vector_env() -> None:
    steps = 40
    with SyncPool("CartPole-v1", 4, num_workers=2, seed=7, env_kwargs={"max_episode_steps": 15}) as sp:
        ref = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=15)] * 4)
        obs, info = sp.reset()
        ref_obs, _ = ref.reset(seed=7)
        np.testing.assert_array_equal(obs, ref_obs)
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        sp.action_space.seed(3)
        for _ in range(steps):
            action = sp.action_space.sample()
            got = sp.step(action)
            want = ref.step(action)
            for g, w in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(g, w)
        ref.close()


def test_attributes_mirror_the_pool() -> None:
    with aioenv.make_sync(PROBE, 3, executor="inline", num_workers=2, batch_size=2, autoreset_mode="same_step") as sp:
        pool = sp.pool
        assert (sp.num_envs, sp.batch_size, sp.num_workers) == (3, 2, 2)
        assert sp.single_observation_space == pool.single_observation_space
        assert sp.single_action_space == pool.single_action_space
        assert sp.observation_space == pool.observation_space
        assert sp.action_space == pool.action_space
        assert sp.autoreset_mode is AutoresetMode.SAME_STEP
        assert sp.metadata == pool.metadata
        assert sp.metadata["render_fps"] == 7
        assert sp.render_mode is None
        assert not sp.closed
    assert sp.closed


def test_send_recv_and_per_env_futures() -> None:
    with SyncPool(PROBE, 4, executor="inline", num_workers=2, batch_size=2, seed=0) as sp:
        sp.send_reset()
        seen: list[int] = []
        for _ in range(2):
            obs, reward, _terminated, _truncated, info = sp.recv()
            assert obs.shape == (2, 4)
            assert reward.dtype == np.float64
            seen += info["env_id"].tolist()
        assert sorted(seen) == [0, 1, 2, 3]
        sp.send(np.zeros(2, np.int64), [1, 3])
        obs, *_, info = sp.recv(min_results=2)
        assert sorted(info["env_id"].tolist()) == [1, 3]

        fut = sp.step_env(2, 1)
        assert isinstance(fut, concurrent.futures.Future)
        result = fut.result(HANG)
        assert isinstance(result, aioenv.StepResult)
        assert result.env_id == 2
        assert result.reward == 1.5
        assert result.obs[0] == 2
        rfut = sp.reset_env(0, seed=42)
        reset = rfut.result(HANG)
        assert isinstance(reset, aioenv.ResetResult)
        assert reset.env_id == 0
        assert reset.obs[0] == 42


def test_call_get_set_attr_and_render() -> None:
    with SyncPool(PROBE, 3, executor="inline", seed=10, env_kwargs={"render_mode": "rgb_array"}) as sp:
        sp.reset()
        assert sp.call("describe", 2, scale=3) == [{"ident": i, "value": 6} for i in (10, 11, 12)]
        sp.set_attr("tag", [5, 6, 7])
        assert sp.get_attr("tag") == [5, 6, 7]
        sp.set_attr("tag", 9, env_ids=[1])
        assert sp.get_attr("tag", env_ids=[1, 0]) == [9, 5]
        frames = sp.render()
        assert frames.shape == (3, 5, 6, 3)
        assert frames.dtype == np.uint8
        assert frames[:, 0, 0, 0].tolist() == [10, 11, 12]


# ---------------------------------------------------------------- errors


def test_exceptions_propagate_unchanged() -> None:
    with SyncPool(PROBE, 2, executor="inline", num_workers=2, seed=0, env_kwargs={"fail_at": 1}) as sp:
        sp.reset()
        with pytest.raises(EnvError) as caught:
            sp.step(np.array([0, 0]))
        err = caught.value
        assert type(err) is EnvError
        assert err.env_id == 0
        assert err.remote_type == "RuntimeError"
        assert "explode_on_purpose" in err.remote_traceback
        assert set(err.errors) == {0, 1}
        # the traceback of the exception object starts on the loop thread, inside the async core
        files = [frame.filename for frame in traceback.extract_tb(err.__traceback__)]
        core = (os.path.join("aioenv", "pool.py"), os.path.join("aioenv", "core", "sinks.py"))
        assert any(f.endswith(core) for f in files), files

        with pytest.raises(InvalidAction):
            sp.step(np.array([0, 7]))
        sp.reset()
        fut = sp.step_env(1, 0)
        with pytest.raises(EnvError) as caught_env:
            fut.result(HANG)
        assert caught_env.value.env_id == 1


def test_busy_env_raises_at_dispatch(gate: Any) -> None:
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        fut = sp.step_env(0, SLOW)
        with pytest.raises(UsageError, match="env 0"):
            sp.step_env(0, 0)
        gate.open()
        assert fut.result(HANG).env_id == 0


def test_call_from_the_loop_thread_is_refused(gate: Any) -> None:
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        caught: list[BaseException] = []
        done = threading.Event()

        def callback(_fut: Any) -> None:
            try:
                sp.step(np.array([0, 0]))
            except UsageError as exc:
                caught.append(exc)
            finally:
                done.set()

        fut = sp.step_env(0, SLOW)  # held by the gate: the callback is attached before it is done
        fut.add_done_callback(callback)
        assert not fut.done()
        gate.open()
        assert done.wait(HANG)
        assert len(caught) == 1
        assert isinstance(caught[0], UsageError)
        assert "deadlock" in str(caught[0])
        sp.step(np.array([0, 0]))  # the pool is unharmed


async def test_works_inside_a_running_event_loop() -> None:
    """A Jupyter cell: the caller's thread already runs an event loop."""
    asyncio.get_running_loop()
    with SyncPool("CartPole-v1", 2, seed=0) as sp:
        obs, _ = sp.reset()
        assert obs.shape == (2, 4)
        _, reward, *_ = sp.step(np.array([0, 1]))
        assert reward.tolist() == [1.0, 1.0]
        assert sp.step_env(0, 1).result(HANG).env_id == 0


def test_bad_arguments_raise_before_any_thread() -> None:
    before = threading.active_count()
    with pytest.raises(ValueError, match="batch_size"):
        SyncPool(PROBE, 2, executor="inline", batch_size=5)
    assert threading.active_count() == before


def test_failed_start_leaves_nothing_behind() -> None:
    before = threading.active_count()
    with pytest.raises(Exception, match="nonexistent"):
        SyncPool("tests.envs.nonexistent:make", 2)
    assert threading.active_count() == before


# ---------------------------------------------------------------- submit


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_submit_takes_the_pools_method_with_its_arguments(executor: str) -> None:
    with SyncPool(PROBE, 2, executor=executor, seed=10, batch_size=1) as sp:
        obs, info = sp.wait(sp.submit(sp.pool.reset, [1, 0], seed=[20, 30], options=None))  # a starter, by keyword
        assert info["env_id"].tolist() == [1, 0]
        assert obs[:, 0].tolist() == [20, 30]
        obs, reward, _term, _trunc, info = sp.wait(sp.submit(sp.pool.step, np.array([0, 0]), env_ids=None))
        assert reward.tolist() == [0.5, 0.5]
        assert obs[:, 1].tolist() == [1, 1]
        described = sp.wait(sp.submit(sp.pool.call, "describe", 2, scale=3, env_ids=[1]))  # a coroutine method
        assert described == [{"ident": 20, "value": 6}]
        assert sp.wait(sp.submit(sp.pool.send, np.array([0]), [1])) is None  # a plain method
        *_, info = sp.wait(sp.submit(sp.pool.recv, min_results=1, timeout=HANG))
        assert info["env_id"].tolist() == [1]
        result = sp.wait(sp.submit(sp.pool.step_env, 0, 0))  # a method that returns a future: its result
        assert isinstance(result, aioenv.StepResult)
        assert result.obs[1] == 2


def test_submit_of_a_step_or_a_reset_takes_no_task_per_call(gate: Any) -> None:
    # step and reset dispatch on the loop thread at once and hand their result's future over (the light path);
    # any other call runs as a task of its own
    with SyncPool(PROBE, 2, executor="inline", seed=0, batch_size=1, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        loop = sp.loop

        async def count() -> int:
            return len(asyncio.all_tasks()) - 1  # less this coroutine's own task

        def tasks() -> int:
            return asyncio.run_coroutine_threadsafe(count(), loop).result(HANG)

        idle = tasks()
        sp.send(np.array([SLOW]), [0])
        received = sp.submit(sp.pool.recv)
        gate.wait_started(0)
        assert tasks() == idle + 1  # the recv waits in a task
        stepped = sp.submit(sp.pool.step, np.array([SLOW]), [1])
        gate.wait_started(1)
        assert tasks() == idle + 1  # the step has none
        gate.open()
        assert sp.wait(received, HANG)[-1]["env_id"].tolist() == [0]
        assert sp.wait(stepped, HANG)[-1]["env_id"].tolist() == [1]


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_submit_refuses_a_methods_name(executor: str) -> None:
    with SyncPool(PROBE, 1, executor=executor) as sp:
        with pytest.raises(TypeError, match=r"sp\.submit\(sp\.pool\.step, actions\)"):
            sp.submit("step", np.array([0]))  # type: ignore[call-overload]
        with pytest.raises(TypeError, match=r"SyncPool\.submit takes a callable, such as sp\.pool\.step; got int"):
            sp.submit(42)  # type: ignore[call-overload]
        with pytest.raises(TypeError, match=r"sp\.answer\(sp\.pool\.step, actions\)"):
            sp.answer("step", np.array([0]))  # type: ignore[call-overload]
        with pytest.raises(TypeError, match=r"SyncPool\.answer takes a callable, such as sp\.pool\.step; got int"):
            sp.answer(42)  # type: ignore[call-overload]
        sp.reset()  # refused before anything was sent
        assert sp.runs_in_caller


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_answer_runs_the_call_to_its_end_in_the_callers_thread(executor: str) -> None:
    # for an adapter's step_async, whose step_wait follows: no hop, and the loop stays lent
    with SyncPool(PROBE, 2, executor=executor, seed=0) as sp:
        sp.reset()
        fut = sp.answer(sp.pool.step, np.array([0, 0]))
        assert fut.done()
        assert sp.wait(fut)[0][:, 1].tolist() == [1, 1]
        assert sp.runs_in_caller


# ---------------------------------------------------------------- interruption


def test_wait_timeout_does_not_corrupt_the_pool(gate: Any) -> None:
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        fut = sp.submit(sp.pool.step, np.array([SLOW, 0]))
        gate.wait_started(0)
        with pytest.raises(TimeoutError):
            sp.wait(fut, timeout=0.01)  # the gate is closed: it cannot finish
        assert fut.cancelled()
        gate.open()
        # the interrupted step finishes in the background; this one waits for it (never a busy env)
        obs, *_ = sp.step(np.array([0, 0]))
        assert obs[:, 1].tolist() == [2, 2]  # both envs advanced twice


def test_interrupted_recv_loses_no_rows(gate: Any) -> None:
    with SyncPool(PROBE, 2, executor="inline", seed=0, batch_size=2, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        sp.send(np.array([SLOW, 0]))
        fut = sp.submit(sp.pool.recv)
        gate.wait_started(0)
        with pytest.raises(TimeoutError):
            sp.wait(fut, timeout=0.01)
        gate.open()
        *_, info = sp.recv()
        assert sorted(info["env_id"].tolist()) == [0, 1]


@pytest.mark.usefixtures("ctrl_c_raises")
def test_keyboard_interrupt_does_not_corrupt_the_pool(gate: Any) -> None:
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        assert sp.runs_in_caller  # the loop runs in this (main) thread, where the SIGINT lands

        def interrupt() -> None:
            gate.wait_started(0)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            sp.step(np.array([SLOW, 0]))
        assert not sp.runs_in_caller  # the step goes on in its worker: its reply comes between calls
        gate.open()
        obs, *_ = sp.step(np.array([0, 0]))
        assert obs[:, 1].tolist() == [2, 2]


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_ctrl_c_that_lands_while_a_step_goes_out_stops_its_wait(gate: Any) -> None:
    # the SIGINT comes before the call waits for anything (here: inside the dispatch): the wait it then begins is
    # stopped at once, as if the Ctrl-C had come during it, rather than lasting until the step ends
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs(slow_seconds=HANG)) as sp:
        sp.reset()
        assert sp.runs_in_caller
        start = sp.pool._start_step

        def interrupted_start(*args: Any, **kwargs: Any) -> Any:
            signal.raise_signal(signal.SIGINT)  # handled here, before the step goes out
            return start(*args, **kwargs)

        sp._rt.starters[sp.pool.step] = interrupted_start
        with pytest.raises(KeyboardInterrupt):
            sp.step(np.array([SLOW, 0]))  # env 0's step waits for the gate (HANG seconds at most)
        assert not sp.runs_in_caller  # the step goes on in its worker
        sp._rt.starters[sp.pool.step] = start
        gate.open()
        obs, *_ = sp.step(np.array([0, 0]))
        assert obs[:, 1].tolist() == [2, 2]


# ---------------------------------------------------------------- envs in this process: calls in the caller's thread


class ThreadEnv(gym.Env[np.ndarray, np.int64]):
    """Says in its info which thread ran its step; calls ``NESTED[0]`` (a SyncPool) from inside action 2."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        if action == 2:
            NESTED[0].step(np.zeros(NESTED[0].num_envs, np.int64))
        return np.zeros(1, np.float32), 1.0, False, False, {"thread": threading.get_ident()}


NESTED: list[SyncPool] = []


def test_a_pool_whose_envs_run_here_runs_each_call_in_the_callers_thread() -> None:
    """The calls run in the caller's thread (no hop to the loop thread and back); the env code on the pool's env
    thread, which the call waits for (answered inside it: nothing left for a loop to deliver)."""
    with SyncPool(ThreadEnv, 3, executor="in_process", max_loop_hold=HANG) as sp:
        assert sp.runs_in_caller
        me, loop_thread = threading.get_ident(), sp._rt.thread.ident
        sp.reset()
        *_, info = sp.step(np.array([0, 1, 0]))
        (env_thread,) = set(info["thread"].tolist())
        assert env_thread not in (me, loop_thread)
        fut = sp.step_env(1, 0)
        assert fut.done()
        assert fut.result().info["thread"] == env_thread
        sp.send(np.array([0, 0]), [0, 2])
        *_, info = sp.recv(min_results=2)
        assert sorted(info["env_id"].tolist()) == [0, 2]
        assert info["thread"].tolist() == [env_thread] * 2
        assert sp.call("reset", seed=1)[0][0].shape == (1,)  # a coroutine call runs the loop here
        called = sp.run_coroutine(sp.pool.call("step", 0, env_ids=[0])).result(HANG)  # env.step as a method
        assert called[0][4]["thread"] == env_thread


def test_asking_for_the_loop_gives_it_back_to_its_thread_for_good() -> None:
    with SyncPool(ThreadEnv, 2, executor="in_process") as sp:
        sp.reset()
        loop = sp.loop
        assert not sp.runs_in_caller
        *_, info = sp.step(np.array([0, 0]))
        (env_thread,) = set(info["thread"].tolist())  # the env code's own thread, as before
        # work of the caller's own on the loop runs there now
        result = asyncio.run_coroutine_threadsafe(sp.pool.step(np.array([1, 1])), loop).result(HANG)
        assert result[4]["thread"].tolist() == [env_thread] * 2
        assert sp.run_coroutine(sp.pool.reset()).result(HANG)[0].shape == (2, 1)


def test_a_pool_with_worker_processes_runs_its_calls_in_the_callers_thread() -> None:
    # no hop to the loop thread and back; the envs still step in the worker process
    with SyncPool(PROBE, 2, executor="inline", num_workers=1) as sp:
        assert sp.runs_in_caller
        _, info = sp.reset()
        for _ in range(3):
            sp.step(np.array([0, 0]))
        assert sp.runs_in_caller
        assert info["pid"].tolist() == worker_pids(sp) * 2
        assert os.getpid() not in info["pid"].tolist()


@pytest.mark.parametrize(
    "options",
    [{"executor": "inline", "num_workers": 2}, {}, {"executor": "thread", "num_workers": 2}],
    ids=["two-workers-done-pipe", "default-placement", "thread-workers-no-shared-rows"],
)
def test_a_lock_step_step_of_worker_processes_waits_for_its_replies_without_the_loop(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the replies (on the pool's done pipe, or on the worker's own pipe for the worker that timed an env for the
    # default placement) are read in the caller's thread as the loop would read them; the same trajectory
    waits = WaitsHere(monkeypatch)
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=15)] * 4
    ref = SyncVectorEnv(fns)
    rng = np.random.default_rng(3)
    with SyncPool(fns, **options) as sp:
        assert sp.runs_in_caller
        assert sp.pool.envs_in_process == 0
        np.testing.assert_array_equal(sp.reset(seed=3)[0], ref.reset(seed=3)[0])
        for t in range(60):
            actions = rng.integers(0, 2, 4)
            got, want = sp.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"step {t} {name}", strict=True)
        assert sp.runs_in_caller
    ref.close()
    assert waits.done >= 60  # every step (the reset let the loop run)


def test_the_loop_still_runs_its_callbacks_while_calls_wait_without_it() -> None:
    # what is queued on the loop between calls (a timer, a callback) runs within 50 ms of calls, not never
    with SyncPool(PROBE, 2, executor="inline", num_workers=1, seed=0) as sp:
        sp.reset()
        ran = threading.Event()
        sp._rt.loop.call_soon(ran.set)
        deadline = time.monotonic() + HANG
        while not ran.is_set():
            assert time.monotonic() < deadline, "the callback never ran"  # hang guard
            sp.step(np.zeros(2, np.int64))
        assert sp.runs_in_caller


def test_a_step_of_a_worker_process_past_step_timeout_in_the_callers_thread_fails_and_the_pool_goes_on(
    gate: Any,
) -> None:
    # the wait without the loop ends at the deadline: the loop's timer fails the step and restarts the worker
    with SyncPool(PROBE, 2, executor="inline", num_workers=1, seed=0, step_timeout=0.5, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        assert sp.runs_in_caller
        with pytest.raises(aioenv.StepTimeout):
            sp.step(np.array([SLOW, 0]))
        with pytest.raises(aioenv.EnvRemade):
            sp.step(np.zeros(2, np.int64))
        sp.reset()
        obs, *_ = sp.step(np.zeros(2, np.int64))
        assert obs[:, 1].tolist() == [1, 1]


def test_a_worker_killed_while_a_call_waits_without_the_loop_fails_that_call(gate: Any) -> None:
    # its exit is the loop's to take in: the call lets the loop run, which fails the worker's rows as crashed
    with SyncPool(PROBE, 4, executor="inline", num_workers=2, seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        assert sp.runs_in_caller
        victim = worker_pids(sp)[0]

        def kill() -> None:
            gate.wait_started(0)
            os.kill(victim, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
        with pytest.raises(aioenv.WorkerCrashed) as caught:
            sp.step(np.array([SLOW, 0, 0, 0]))
        assert sorted(caught.value.errors) == [0, 1]  # worker 0's envs; worker 1's rows came whole
        assert caught.value.partial is not None
        sp.reset()
        obs, *_ = sp.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [1, 1, 1, 1]


def test_lane_messages_a_worker_forges_are_refused_by_a_call_that_waits_without_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what the call reads in the caller's thread is judged as the loop judges it (tests/e2e/test_lane.py): a DONE
    # for a request no one sent and records with a made-up token on the done pipe are dropped (the worker blocks
    # on a full done pipe meanwhile, until the call reads it), a lane message that answers nothing fails the
    # worker that sent it
    waits = WaitsHere(monkeypatch)
    with SyncPool("tests.envs.faulty:PipeVandalEnv", 4, num_workers=2, executor="inline") as sp:
        sp.reset()
        assert sp.runs_in_caller
        for t, action in enumerate([4, 5, 6, 0], start=1):
            obs, *_ = sp.step(np.array([action, 0, 0, action]))
            assert obs[:, 0].tolist() == [t] * 4
        with pytest.raises(aioenv.WorkerCrashed) as caught:
            sp.step(np.array([0, 0, 3, 0]))
        assert sorted(caught.value.errors) == [2, 3]
        assert "a lane message that answers no step" in str(caught.value)
    assert waits.done > 0


def test_a_send_to_worker_processes_gives_the_loop_back_to_its_thread() -> None:
    # its replies come between calls: only a running loop takes them (and judges their deadlines) as they come
    with SyncPool(PROBE, 2, executor="inline", num_workers=1, batch_size=2, seed=0) as sp:
        sp.reset()
        assert sp.runs_in_caller
        sp.send(np.array([0, 0]))
        assert not sp.runs_in_caller
        *_, info = sp.recv()
        assert sorted(info["env_id"].tolist()) == [0, 1]
        sp.step(np.array([0, 0]))
        assert not sp.runs_in_caller  # for good


def test_a_submit_to_worker_processes_returns_at_once_and_gives_the_loop_back(gate: Any) -> None:
    # submit() starts a call without waiting (the workers step while the caller goes on): in the caller's thread
    # nothing would take its reply, so the loop goes back to its thread
    with SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs()) as sp:
        sp.reset()
        assert sp.runs_in_caller
        fut = sp.submit(sp.pool.step, np.array([SLOW, 0]))
        gate.wait_started(0)  # the step runs, gated, while this thread goes on
        assert not fut.done()
        assert not sp.runs_in_caller
        gate.open()
        obs, *_ = sp.wait(fut, timeout=HANG)
        assert obs[:, 1].tolist() == [1, 1]


def wait_dead(sp: SyncPool, pid: int) -> None:
    """Until this process can tell that worker ``pid`` has exited (the pool's exit descriptor for it is readable:
    a pidfd at once, a forked worker's template reports it a moment later), which no loop has taken in yet: the
    pool runs no loop between calls in the caller's thread."""
    coord = sp.pool._runner
    assert isinstance(coord, Coordinator)
    (proc,) = (slot.proc for slot in coord.slots if slot.proc is not None and slot.proc.pid == pid)
    assert isinstance(proc, LocalProcess)
    assert select.select([proc.exit_fd], [], [], HANG)[0], f"worker {pid} still runs"  # hang guard


def test_a_worker_killed_between_calls_in_the_callers_thread_reads_as_on_the_loop_thread() -> None:
    # the loop, not running between calls, has not reaped it: the next call takes that in before its request goes
    # out, so the step is never sent (EnvRemade, as on the loop thread), not failed in flight (WorkerCrashed)
    with SyncPool(PROBE, 4, executor="inline", num_workers=2, seed=0) as sp:
        sp.reset()
        _, before, *_ = sp.step(np.zeros(4, np.int64))
        assert sp.runs_in_caller
        pid = worker_pids(sp)[0]
        os.kill(pid, signal.SIGKILL)
        wait_dead(sp, pid)
        with pytest.raises(aioenv.EnvRemade, match="while it had no request in flight"):
            sp.step(np.zeros(4, np.int64))
        sp.reset()
        _, reward, *_ = sp.step(np.zeros(4, np.int64))
        assert reward.tolist() == before.tolist()
        assert sp.runs_in_caller


def test_a_worker_restarted_by_a_call_from_a_thread_that_ends_outlives_that_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a worker started afresh dies with the thread that started it (PR_SET_PDEATHSIG): one restarted inside a
    # call that runs the loop in its caller's thread must still be started on the pool's own loop thread
    monkeypatch.setenv("AIOENV_WORKER_START", "exec")  # a forked worker dies with its template instead
    with SyncPool(PROBE, 2, executor="inline", num_workers=1, seed=0) as sp:
        sp.reset()
        assert sp.runs_in_caller
        old = worker_pids(sp)[0]
        os.kill(old, signal.SIGKILL)
        wait_dead(sp, old)
        errors: list[BaseException] = []

        def restart() -> None:
            try:
                with pytest.raises(aioenv.EnvRemade):
                    sp.step(np.zeros(2, np.int64))  # takes the crash in and restarts the worker
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        caller = threading.Thread(target=restart)
        caller.start()
        caller.join(HANG)
        assert not errors
        new = worker_pids(sp)[0]
        assert new != old
        time.sleep(0.3)  # time for a SIGKILL from the ended thread to land
        assert not process_gone(new)
        _, info = sp.reset()
        assert info["pid"].tolist() == [new, new]
        assert worker_pids(sp) == [new]


def test_calls_from_several_threads_take_turns() -> None:
    with SyncPool(PROBE, 4, executor="in_process", seed=0) as sp:
        assert sp.runs_in_caller
        sp.reset()
        errors: list[BaseException] = []

        def steps(env_id: int) -> None:
            try:
                for _ in range(40):
                    sp.step(np.array([0]), [env_id])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=steps, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG)
        assert errors == []
        obs, *_ = sp.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [41] * 4  # every step of every thread reached its own env


def test_a_call_from_inside_a_call_is_refused_and_the_pool_goes_on() -> None:
    with SyncPool(ThreadEnv, 2, executor="in_process") as sp:
        NESTED[:] = [sp]
        try:
            sp.reset()
            with pytest.raises(UsageError) as caught:  # raised by the env's own step: its row's error
                sp.step(np.array([0, 2]))
            assert caught.value.env_id == 1
            assert "from inside one of its own calls" in str(caught.value)
            sp.reset()
            _, reward, *_ = sp.step(np.array([0, 0]))
            assert reward.tolist() == [1.0, 1.0]
        finally:
            NESTED.clear()


async def test_a_call_in_the_callers_thread_leaves_the_callers_own_loop_running() -> None:
    outer = asyncio.get_running_loop()
    with SyncPool(ThreadEnv, 2, executor="in_process") as sp:
        assert sp.runs_in_caller
        sp.reset()
        sp.step(np.array([0, 0]))
        assert sp.call("reset")[0][0].shape == (1,)  # runs the pool's loop here, then gives this one back
        assert asyncio.get_running_loop() is outer
        await asyncio.sleep(0)


def test_ctrl_c_inside_a_step_in_the_callers_thread_leaves_the_pool_usable() -> None:
    from tests.e2e.test_in_process import Interrupted

    with SyncPool(Interrupted, 3, executor="in_process") as sp:
        assert sp.runs_in_caller
        sp.reset(seed=0)
        with pytest.raises(KeyboardInterrupt):
            sp.step(np.array([0, 1, 0]))
        with pytest.raises(UsageError, match="reset it first"):
            sp.step(np.array([0, 0, 0]))
        sp.reset(seed=1)
        _, reward, *_ = sp.step(np.array([0, 0, 0]))
        assert reward.tolist() == [1.0, 1.0, 1.0]


def test_a_call_in_the_callers_thread_first_waits_for_an_interrupted_one() -> None:
    # As on the loop thread: what an interrupted call left in flight (an orphan) ends before the next call runs
    with SyncPool(ThreadEnv, 2, executor="in_process") as sp:
        sp.reset()
        loop = sp._rt.loop
        orphan = loop.create_future()
        loop.call_later(0.05, orphan.set_result, None)  # the loop runs only inside calls now
        sp._rt._adopt([orphan])
        sp.step(np.zeros(2, np.int64))
        assert orphan.done()
        assert not sp._rt.orphans


class CtrlCEnv(gym.Env[np.ndarray, np.int64]):
    """Counts its steps; action ``k`` sends ``k`` SIGINTs to the main thread from inside its step (Ctrl-C
    pressed while the step runs), each taken there before the step goes on; action 3 sends one, then fails.

    Its code runs on a thread of its own, not the main thread that takes a SIGINT: it waits for the main thread
    to take each (two sent at once would reach Python's handler as one, unlike two presses of a key)."""

    observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        if action == 3:
            self.press_ctrl_c_then_fail()
        for _ in range(int(action)):
            self.press_ctrl_c()
        return np.array([self.t], np.float64), 1.0, False, False, {}

    def press_ctrl_c(self) -> int:
        ctrl_c = signal.getsignal(signal.SIGINT).__self__  # type: ignore[union-attr]  # SyncPool's, in a call
        second = ctrl_c.hit
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        deadline = time.monotonic() + HANG  # hang guard
        while time.monotonic() < deadline and (second or not ctrl_c.hit):  # a second is raised in here
            time.sleep(0.001)
        return self.t

    def press_ctrl_c_then_fail(self) -> None:
        self.press_ctrl_c()
        raise ValueError("failed after Ctrl-C")


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_in_the_callers_thread_raises_once_the_call_is_done() -> None:
    # The call finishes (every env stepped, nothing broken) and raises KeyboardInterrupt when it returns: a
    # KeyboardInterrupt inside the coordinator's or the event loop's code would corrupt the pool.
    with SyncPool(CtrlCEnv, 3, executor="in_process") as sp:
        assert sp.runs_in_caller
        sp.reset()
        with pytest.raises(KeyboardInterrupt):
            sp.step(np.array([0, 1, 0]))
        obs, *_ = sp.step(np.array([0, 0, 0]))  # no env needs a reset
        assert obs[:, 0].tolist() == [2, 2, 2]  # the interrupted step happened, for every env
        with pytest.raises(KeyboardInterrupt):
            sp.call("press_ctrl_c", env_ids=[1])  # a call that runs the event loop here: the same
        obs, *_ = sp.step(np.array([0, 0, 0]))
        assert obs[:, 0].tolist() == [3, 3, 3]
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C wins over the call's own error, as on the loop thread
            sp.call("press_ctrl_c_then_fail", env_ids=[1])
        with pytest.raises(KeyboardInterrupt) as caught:
            sp.step(np.array([0, 3, 0]))
        assert isinstance(caught.value.__context__, EnvError)  # the step's error stays as its context
        with pytest.raises(UsageError, match="env 1 cannot be stepped: its last step raised ValueError"):
            sp.step(np.array([0, 0, 0]))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("ctrl_c_raises")
@pytest.mark.parametrize("hold", [None, 1e-6], ids=["default-hold", "env-takes-it-late"])
def test_a_second_ctrl_c_in_one_call_raises_at_once(hold: float | None) -> None:
    # For a step that would not end: the second Ctrl-C raises inside the env, which needs a reset after it. When
    # the env code takes the interruption after max_loop_hold (1e-6: as a machine under load takes over 10 ms),
    # its request is answered later, from the loop, with the interruption; the caller had its KeyboardInterrupt
    # already, so the next call gets the env's error, not a second KeyboardInterrupt.
    with SyncPool(CtrlCEnv, 3, executor="in_process", max_loop_hold=hold) as sp:
        sp.reset()
        with pytest.raises(KeyboardInterrupt):
            sp.step(np.array([0, 2, 0]))
        with pytest.raises(UsageError, match="env 1 cannot be stepped: its last step raised KeyboardInterrupt"):
            sp.step(np.array([0, 0, 0]))
        sp.reset()
        obs, *_ = sp.step(np.array([0, 0, 0]))
        assert obs[:, 0].tolist() == [1, 1, 1]


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_at_any_moment_of_calls_in_the_callers_thread_leaves_the_pool_usable() -> None:
    # Ctrl-C at random moments of steps, resets and attribute reads (which run the event loop here). SIGINT is
    # blocked in this thread except during a call, so each lands inside one (or at its very start); the next
    # comes once this one was caught. Each call either completes or raises KeyboardInterrupt; none fails.
    interrupts, caught = 60, threading.Event()
    block = {signal.SIGINT}

    def press() -> None:
        rng = random.Random(0)
        for _ in range(interrupts):
            time.sleep(rng.uniform(0.0, 0.002))
            caught.clear()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            assert caught.wait(HANG), "a Ctrl-C was never raised"

    with SyncPool("CartPole-v1", 4, executor="in_process", seed=0) as sp:
        sp.reset()
        presser = threading.Thread(target=press, daemon=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, block)
        try:
            presser.start()
            hits, calls = 0, 0
            while presser.is_alive():
                try:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, block)
                    try:
                        calls += 1
                        if calls % 4 == 0:
                            sp.reset()
                        elif calls % 4 == 1:
                            sp.get_attr("render_mode")
                        else:
                            sp.step(np.zeros(4, np.int64))
                    finally:
                        signal.pthread_sigmask(signal.SIG_BLOCK, block)
                except KeyboardInterrupt:
                    signal.pthread_sigmask(signal.SIG_BLOCK, block)
                    hits += 1
                    caught.set()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, block)
        presser.join(HANG)
        assert hits == interrupts
        assert sp._rt._driver is None
        assert asyncio._get_running_loop() is None
        obs, *_ = sp.step(np.zeros(4, np.int64))
        assert obs.shape == (4, 4)
        assert sp.get_attr("render_mode") == [None] * 4


class GatedEnv(ThreadEnv):
    """Its steps wait for :data:`GATE` (set by the test) to return."""

    def step(self, action: Any) -> Any:
        assert GATE.wait(HANG)
        return super().step(action)


GATE = threading.Event()


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_in_a_recv_waiting_for_env_code_in_this_process_loses_no_rows() -> None:
    # the steps of a send() outlast max_loop_hold and go on on their thread; a Ctrl-C in the recv() that waits
    # for them stops it at once, and the rows come to the next recv()
    GATE.clear()
    with SyncPool(GatedEnv, 2, executor="in_process", batch_size=2) as sp:
        assert sp.runs_in_caller
        sp.reset()
        sp.send(np.zeros(2, np.int64))

        def press() -> None:
            deadline = time.monotonic() + HANG
            while sp._rt._driver is None and time.monotonic() < deadline:  # until recv() runs the loop here
                time.sleep(0.001)
            time.sleep(0.05)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

        presser = threading.Thread(target=press, daemon=True)
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            sp.recv(timeout=HANG)
        presser.join(HANG)
        GATE.set()
        *_, info = sp.recv(timeout=HANG)
        assert sorted(info["env_id"].tolist()) == [0, 1]


def test_a_step_past_step_timeout_in_the_callers_thread_fails_and_the_pool_goes_on() -> None:
    # env code runs on a thread of this process, the loop in the caller's thread while a call waits for it:
    # the deadline fires there, and the env is made again on a fresh thread
    with SyncPool("tests.envs.turning:TurningEnv", 2, executor="in_process", step_timeout=0.3, seed=0) as sp:
        assert sp.runs_in_caller
        sp.reset()
        sp.set_attr("seconds", [20.0, 0.0])
        sp.set_attr("fault", ["slow", ""])
        with pytest.raises(aioenv.StepTimeout):
            sp.step(np.zeros(2, np.int64))
        with pytest.raises(aioenv.EnvRemade):
            sp.step(np.zeros(2, np.int64))
        sp.reset()
        _, reward, *_ = sp.step(np.zeros(2, np.int64))
        assert reward.tolist() == [1.0, 1.0]


# ---------------------------------------------------------------- shutdown


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_close_is_idempotent_and_stops_everything(executor: str) -> None:
    sp = SyncPool(PROBE, 2, executor=executor, num_workers=2 if executor == "inline" else None)
    assert sp.runs_in_caller
    pids = worker_pids(sp)
    thread = sp._rt.thread
    sp.close()
    sp.close()
    assert sp.closed
    assert not thread.is_alive()
    wait_gone(pids)
    with pytest.raises(PoolClosed):
        sp.reset()


def test_close_fails_a_blocked_call_with_pool_closed(gate: Any) -> None:
    sp = SyncPool(PROBE, 2, executor="inline", seed=0, env_kwargs=gate.kwargs())
    sp.reset()
    fut = sp.submit(sp.pool.step, np.array([SLOW, 0]))
    gate.wait_started(0)
    closer = threading.Thread(target=sp.close)
    closer.start()
    with pytest.raises(PoolClosed):
        fut.result(HANG)  # failed as soon as close begins, while the env is still inside its step
    gate.open()  # lets the worker answer CLOSE promptly
    closer.join(HANG)
    assert not closer.is_alive()
    assert sp.closed


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_garbage_collected_pool_is_closed(executor: str) -> None:
    sp = SyncPool(PROBE, 2, executor=executor, num_workers=2 if executor == "inline" else None)
    pids = worker_pids(sp)
    thread = sp._rt.thread
    del sp
    gc.collect()
    thread.join(HANG)
    assert not thread.is_alive()
    wait_gone(pids)


@pytest.mark.parametrize("how", ["return", "exception"])
def test_no_worker_outlives_a_program_that_forgot_close(tmp_path: Path, how: str) -> None:
    script = tmp_path / "forgot.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            import aioenv
            pool = aioenv.SyncPool({PROBE!r}, 3, num_workers=3, executor="inline")
            pool.reset()
            print(" ".join(str(s.proc.pid) for s in pool.pool._runner.slots), flush=True)
            if {how!r} == "exception":
                raise SystemExit(3)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=HANG * 2, cwd=ROOT, env=env
    )
    assert proc.returncode == (3 if how == "exception" else 0), proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 3
    wait_gone(pids)


def test_make_sync_with_callables() -> None:
    fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    with aioenv.make_sync(fns) as sp:
        assert sp.num_envs == 2
        obs, _ = sp.reset(seed=1)
        assert obs.shape == (2, 4)


class PollSpy:
    """The poller of a pool's waits in the caller's thread, recording each ``poll`` timeout it is given."""

    def __init__(self, poller: select.epoll) -> None:
        self.poller = poller
        self.timeouts: list[float] = []

    def poll(self, timeout: float) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return self.poller.poll(timeout)

    def close(self) -> None:
        self.poller.close()


def spied(sp: SyncPool) -> PollSpy:
    """Make the pool's wait set (a step does) and put a :class:`PollSpy` on it."""
    coord = sp.pool._runner
    assert isinstance(coord, Coordinator)
    blocking = coord._blocks_on
    assert blocking is not None, "a step waited in this thread"
    spy = PollSpy(blocking.poller)
    coord._blocks_on = blocking._replace(poller=spy)
    return spy


@pytest.mark.parametrize("cpus", [1, 64])
def test_a_wait_in_the_callers_thread_polls_first_only_with_a_cpu_to_spare(
    cpus: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one worker process: with 64 usable CPUs the waiting thread has one to itself and polls (timeout 0) before it
    # sleeps; with 1 it sleeps at once, leaving the CPU to the worker
    monkeypatch.setattr("aioenv.core.coordinator.usable_cpus", lambda: cpus)
    monkeypatch.setattr("aioenv.core.coordinator.SPIN_AT_MOST", HANG)  # no slow moment of the machine ends it early
    waits = WaitsHere(monkeypatch)
    with SyncPool(PROBE, 2, executor="inline", num_workers=1, seed=0) as sp:
        sp.reset()
        sp.step(np.zeros(2, np.int64))
        spy = spied(sp)
        coord = sp.pool._runner
        assert isinstance(coord, Coordinator)
        for _ in range(5):
            coord._waits = -1.0  # nothing known of the waits: the bound
            sp.step(np.zeros(2, np.int64))
            assert coord._waits > 0  # the wait, until its reply, measured
    assert waits.done >= 6
    assert spy.timeouts
    assert (0 in spy.timeouts) is (cpus == 64), spy.timeouts[:10]


def test_waits_longer_than_the_bound_sleep_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # steps of 50 ms against a bound of 20 ms: the first wait (nothing known yet) polls for the bound, then sleeps
    # until its reply; the waits after it are known to be long and sleep at once
    monkeypatch.setattr("aioenv.core.coordinator.usable_cpus", lambda: 64)
    monkeypatch.setattr("aioenv.core.coordinator.SPIN_AT_MOST", 0.02)
    WaitsHere(monkeypatch)
    slow = np.array([SLOW, 0], np.int64)
    fns = [functools.partial(make_probe, slow_seconds=0.05)] * 2
    with SyncPool(fns, executor="inline", num_workers=1, seed=0) as sp:
        sp.reset()
        sp.step(np.zeros(2, np.int64))
        spy = spied(sp)
        coord = sp.pool._runner
        assert isinstance(coord, Coordinator)
        coord._waits = -1.0
        sp.step(slow)
        assert 0 in spy.timeouts  # polled for the bound...
        assert spy.timeouts[-1] > 0  # ...then slept until the reply
        assert coord._waits >= 0.045
        spy.timeouts.clear()
        for _ in range(3):
            sp.step(slow)
        assert spy.timeouts
        assert 0 not in spy.timeouts


def test_the_spin_budget() -> None:
    assert spin_budget(False, -1.0) == 0.0  # no CPU to spare: never
    assert spin_budget(False, 1e-5) == 0.0
    assert spin_budget(True, -1.0) == SPIN_AT_MOST  # nothing known: the bound
    assert spin_budget(True, 3e-5) == pytest.approx(6e-5)  # twice the recent waits
    assert spin_budget(True, SPIN_AT_MOST * 0.75) == SPIN_AT_MOST  # ...at most the bound
    assert spin_budget(True, SPIN_AT_MOST * 1.01) == 0.0  # longer waits sleep at once

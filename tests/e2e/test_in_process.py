"""Envs in the caller's own process (``executor="in_process"``) and the placement ``executor="auto"`` chooses.

Trajectories against SyncVectorEnv are in test_equivalence.py (``in_process`` and ``shared``); here: what the
caller gives up and keeps (errors stay per env, a stopped in-process worker is re-made, nothing is left
behind), and that ``auto`` picks thread, async or inline placements for real envs, and in-process or shared
ones only for a pool that allows it (``allow_in_process=True``; that the default never does is
test_default_isolation.py's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import threading
import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

import aioenv
import aioenv.pool as pool_module
from aioenv.core import costs
from aioenv.core.coordinator import SPIN_AT_MOST
from aioenv.errors import AioEnvError, EnvError, EnvRemade, UsageError, WorkerCrashed
from aioenv.transport.spawn import usable_cpus
from tests.support.placement import placed
from tests.support.procs import HANG, worker_processes

ASYNC_SLEEP = "aioenv.envs.latency:AsyncSleepEnv"


def _workers() -> list[int]:
    """This process's worker processes (forked from its template or started afresh)."""
    return [pid for pid, _, _ in worker_processes()]


class Flaky(gym.Env[np.ndarray, int]):
    """Raises on the step where its action is 1; counts its closes in ``closed`` (a class list)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)
    closed: ClassVar[list[int]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if action == 1:
            raise ValueError("this env refuses action 1")
        return np.ones(2, np.float32), 1.0, False, False, {"seen": int(action)}

    def close(self) -> None:
        Flaky.closed.append(1)


class Blocking(Flaky):
    """Each step sleeps 2 ms, holding no CPU (an env waiting on I/O)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(0.002)
        return super().step(0)


async def guard(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, HANG)


async def test_an_env_error_fails_its_own_row_only_and_no_process_is_started() -> None:
    before = set(_workers())  # what earlier tests left (SB3's forkserver, say) is not this pool's
    async with aioenv.Pool(Flaky, 3, executor="in_process") as pool:
        assert set(_workers()) <= before  # no worker process: the envs are this process's
        await guard(pool.reset(seed=0))
        with pytest.raises(EnvError) as caught:
            await guard(pool.step(np.array([0, 1, 0])))
        err = caught.value
        assert err.env_id == 1
        assert sorted(err.errors) == [1]
        assert err.remote_type == "ValueError"
        assert "this env refuses action 1" in err.remote_traceback
        _, rew, *_ = err.partial
        np.testing.assert_array_equal(rew, [1.0, 1.0])
        *_, info = await guard(pool.step(np.array([0, 0]), env_ids=[0, 2]))
        np.testing.assert_array_equal(info["env_id"], [0, 2])
        np.testing.assert_array_equal(info["seen"], [0, 0])


async def test_a_plain_step_in_process_serialises_nothing_and_a_step_with_infos_still_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step's request and reply between a pool and its in-process worker are ids and flags: they pass as
    they are (``protocol.Local``). A reply with infos is encoded as for any worker (so what cannot cross a
    wire fails here too: test_failures.py)."""
    import aioenv.core.coordinator as coordinator
    import workers.runtime as runtime

    encoded: list[str] = []
    for module in (coordinator, runtime):
        real = module.encode
        monkeypatch.setattr(module, "encode", lambda op, *a, _real=real, **k: encoded.append(op) or _real(op, *a, **k))
    async with aioenv.Pool(Flaky, 3, executor="in_process") as pool:
        await guard(pool.reset(seed=0))
        encoded.clear()
        obs, rew, *_ = await guard(pool.step(np.zeros(3, dtype=np.int64)))  # Flaky's step has an info
        assert encoded == ["result"]  # that reply alone
    async with aioenv.Pool("CartPole-v1", 3, executor="in_process") as pool:
        await guard(pool.reset(seed=0))
        encoded.clear()
        for _ in range(5):
            obs, rew, *_ = await guard(pool.step(np.zeros(3, dtype=np.int64)))
        assert obs.shape == (3, 4)
        assert rew.tolist() == [1.0, 1.0, 1.0]
        assert encoded == []


def _count_messages(monkeypatch: pytest.MonkeyPatch, threads: set[int] | None = None) -> list[str]:
    """The ops of the requests the pool's in-process worker answers from now on (what crossed as a message);
    ``threads`` gets the ident of each thread that answered one."""
    import workers.runtime as runtime
    from aioenv.wire.protocol import Key, decode

    ops: list[str] = []
    real = runtime.Worker.handle

    def handle(self: runtime.Worker, frames: Any) -> Any:
        ops.append(decode(frames, trusted=True)[0][Key.OP])
        if threads is not None:
            threads.add(threading.get_ident())
        return real(self, frames)

    monkeypatch.setattr(runtime.Worker, "handle", handle)
    return ops


async def test_steps_of_a_pool_whose_every_env_runs_here_run_on_a_thread_of_its_own_within_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every env in this process: a step (whole, partial, send/recv, one env, with infos and errors) is a request
    to the in-process worker, whose env code runs on a thread of this process, not the loop's; a quick one is
    answered inside the call (a lock-step ``step()`` finds its result ready, with no turn of the loop)."""
    threads: set[int] = set()
    ops = _count_messages(monkeypatch, threads)
    async with aioenv.Pool(Flaky, 4, executor="in_process", batch_size=2) as pool:
        ops.clear()  # the envs' MAKE and the like
        await guard(pool.reset(seed=0))
        assert ops == ["reset"]
        assert pool._start_step(np.zeros(4, dtype=np.int64)).done()
        *_, info = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        np.testing.assert_array_equal(info["seen"], [0, 0, 0, 0])  # infos as a worker's reply carries them
        *_, info = await guard(pool.step(np.array([0, 0]), env_ids=[3, 1]))
        np.testing.assert_array_equal(info["env_id"], [3, 1])
        with pytest.raises(EnvError) as caught:
            await guard(pool.step(np.array([0, 1]), env_ids=[0, 2]))
        assert (caught.value.env_id, caught.value.remote_type) == (2, "ValueError")
        assert "this env refuses action 1" in caught.value.remote_traceback
        pool.send(np.zeros(2, dtype=np.int64), env_ids=[0, 1])
        *_, info = await guard(pool.recv())
        np.testing.assert_array_equal(info["env_id"], [0, 1])
        one = await guard(pool.step_env(3, 0))
        assert (one.env_id, one.reward, one.info) == (3, 1.0, {"seen": 0})
        assert ops == ["reset"] + ["step"] * 6
        assert len(threads) == 1  # the pool's env thread
        assert threading.get_ident() not in threads


async def test_under_a_concurrency_limit_steps_here_give_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seeded CartPole pool in this process gives the same trajectory under ``max_concurrency`` (its rows
    beyond the limit wait their turn) as without."""
    ops = _count_messages(monkeypatch)
    trajectories = []
    for limit in (None, 3):
        async with aioenv.Pool("CartPole-v1", 4, executor="in_process", max_concurrency=limit) as pool:
            ops.clear()  # the envs' MAKE and the like
            await guard(pool.reset(seed=3))
            assert ops == (["reset"] if limit is None else ["reset", "reset"])  # 3 rows, then the fourth
            rows = [await guard(pool.step(np.array([t % 2, 1, 0, t % 3 % 2]))) for t in range(40)]
            trajectories.append(rows)
    for here, sent in zip(*trajectories, strict=True):
        for a, b in zip(here[:4], sent[:4], strict=True):
            np.testing.assert_array_equal(a, b, strict=True)
        np.testing.assert_array_equal(here[4]["env_id"], sent[4]["env_id"], strict=True)


async def test_an_in_process_pool_under_a_concurrency_limit_below_its_size_steps_every_env() -> None:
    """Rows beyond ``max_concurrency`` wait for others to finish; here the others finish inside the call that
    sent them, before any row waits: the waiting rows must still go."""
    async with aioenv.Pool("CartPole-v1", 4, executor="in_process", max_concurrency=3) as pool:
        obs, info = await guard(pool.reset(seed=3))
        assert obs.shape == (4, 4)
        np.testing.assert_array_equal(info["env_id"], [0, 1, 2, 3])
        for _ in range(3):
            _, rew, *_, info = await guard(pool.step(np.array([0, 1, 0, 1])))
            np.testing.assert_array_equal(rew, [1.0] * 4)
        pool.send(np.zeros(4, dtype=np.int64))
        *_, info = await guard(pool.recv())
        assert sorted(info["env_id"].tolist()) == [0, 1, 2, 3]


async def test_closing_an_in_process_pool_closes_its_envs() -> None:
    Flaky.closed.clear()
    pool = await aioenv.make(Flaky, 4, executor="in_process")
    await guard(pool.reset())
    await guard(pool.aclose())
    assert len(Flaky.closed) == 4


async def test_a_stopped_in_process_worker_is_made_again_and_its_envs_say_so() -> None:
    async with aioenv.Pool("CartPole-v1", 2, executor="in_process", seed=0) as pool:
        await guard(pool.reset())
        coord = pool._runner
        assert coord is not None
        old = coord.slots[0].proc
        assert old is not None
        old.kill()  # what a deadline or max_worker_rss would do to a worker: its envs are closed and re-made
        async with asyncio.timeout(HANG):
            while coord.slots[0].proc is old or not coord.slots[0].ready:
                await asyncio.sleep(0.01)
        with pytest.raises(EnvRemade) as caught:
            await guard(pool.step(np.array([0, 1])))
        assert sorted(caught.value.errors) == [0, 1]
        await guard(pool.reset(seed=1))
        obs, *_ = await guard(pool.step(np.array([0, 1])))
        assert obs.shape == (2, 4)


async def test_send_recv_and_single_env_calls_work_in_process() -> None:
    async with aioenv.Pool("CartPole-v1", 4, executor="in_process", batch_size=2, seed=0) as pool:
        pool.send_reset()
        *_, info = await guard(pool.recv())
        assert info["env_id"].size == 2
        *_, info2 = await guard(pool.recv())
        assert sorted([*info["env_id"], *info2["env_id"]]) == [0, 1, 2, 3]
        first = await guard(pool.step_env(3, 1))
        assert first.env_id == 3
        assert first.obs.shape == (4,)
        assert await guard(pool.get_attr("render_mode", env_ids=[0])) == [None]
        await guard(pool.set_attr("marker", [7, 8], env_ids=[1, 2]))
        assert await guard(pool.get_attr("marker", env_ids=[1, 2])) == [7, 8]


@pytest.mark.parametrize("executor", ["in_process", "inline"])
async def test_rewards_and_flags_land_on_their_own_envs_whatever_the_order_of_env_ids(executor: str) -> None:
    # The worker writes rewards and flags into the shared rows by slice for an ascending run of ids and by
    # an index array otherwise: every order of env_ids must put each env's values on its own row.
    kwargs = {"max_steps": 3}  # envs 1, 2 and 3 reach it in the last call, none earlier
    async with aioenv.Pool("tests.envs.faulty:make_probe", 6, env_kwargs=kwargs, executor=executor) as pool:
        await guard(pool.reset(seed=100))
        calls = (([1, 2, 3], [0, 1, 0]), ([0, 2, 1, 3], [1, 0, 1, 0]), ([5, 4], [1, 0]), (None, [0, 1] * 3))
        for ids, acts in calls:
            obs, reward, terminated, truncated, info = await guard(pool.step(np.array(acts), ids))
            expected_ids = list(range(6)) if ids is None else ids
            assert info["env_id"].tolist() == expected_ids
            assert obs[:, 0].tolist() == [100 + e for e in expected_ids]  # each row is its env's observation
            assert reward.tolist() == [a + 0.5 for a in acts]
            assert truncated.tolist() == (obs[:, 1] >= 3).tolist()
            assert not terminated.any()


def test_the_sync_facade_runs_an_in_process_pool() -> None:
    with aioenv.SyncPool("CartPole-v1", 3, executor="in_process", seed=5) as pool:
        obs, _ = pool.reset()
        expected = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
        e_obs, _ = expected.reset(seed=5)
        np.testing.assert_array_equal(obs, e_obs)
        for t in range(30):
            action = np.array([t % 2, 1, 0])
            np.testing.assert_array_equal(pool.step(action)[0], expected.step(action)[0])
        expected.close()


@pytest.mark.parametrize(
    ("env", "n", "options", "executor", "here"),
    [
        (Blocking, 8, {}, "thread", 0),  # waits 2 ms a step, mostly off the CPU
        (ASYNC_SLEEP, 8, {"env_kwargs": {"mean": 0.001}}, "async", 0),  # a coroutine step
        ("CartPole-v1", 2, {"step_timeout": 5.0}, "inline", 0),  # a deadline needs worker processes
        ("CartPole-v1", 2, {"num_workers": 1}, "inline", 0),  # worker processes asked for by number
        (Blocking, 8, {"num_workers": 1}, "thread", 0),  # ... of the executor the probe suggests
        ("CartPole-v1", 2, {}, "inline", 0),  # cheap: worker processes unless the pool allows this one
        ("CartPole-v1", 2, {"allow_in_process": True, "step_timeout": 5.0}, "inline", 0),  # a deadline still does
    ],
    ids=["blocking", "coroutine", "deadline", "workers", "blocking-workers", "cheap", "allowed-deadline"],
)
async def test_auto_places_real_envs_by_what_they_cost(
    env: Any, n: int, options: dict, executor: str, here: int
) -> None:
    async with aioenv.Pool(env, n, seed=0, **options) as pool:  # executor="auto" is the default
        assert (pool.executor, pool.envs_in_process) == (executor, here)
        assert pool.num_workers == options.get("num_workers", pool.num_workers)
        assert pool.placement_reason
        await guard(pool.reset())
        result = await guard(pool.step(np.zeros(n, dtype=np.int64)))
        assert result[1].shape == (n,)


async def test_auto_keeps_cheap_real_envs_in_this_process_when_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 CartPole steps cost a few µs, less than a round trip to a worker process: no message pays, and with
    ``allow_in_process=True`` both envs run here. The probe times a mean of wall seconds, which one preemption
    of its process on a loaded machine (tens of ms) can swell past the round trip; the CPU seconds it measures
    beside them cannot grow so. So: the real probe's CPU seconds are cheap, the pool is placed as its
    measurement says, and that measurement, timed without preemption (wall = CPU), places both envs here."""
    measured: list[costs.Cost] = []
    real_probe = costs.probe

    async def recorded(*args: Any) -> costs.Probed:
        probed = await real_probe(*args)
        measured.append(probed.cost)
        return probed

    monkeypatch.setattr(costs, "probe", recorded)
    async with aioenv.Pool("CartPole-v1", 2, seed=0, allow_in_process=True) as pool:  # executor="auto"
        (cost,) = measured
        assert 0 < 2 * cost.cpu < cost.round_trip
        # both round trips were measured (a PING's time plus the pool's own work), not the estimates taken
        for measured_seconds in (cost.round_trip, cost.busy_round_trip, cost.message_cpu, cost.busy_message_cpu):
            assert measured_seconds > costs.MESSAGE_WORK
        assert (cost.round_trip, cost.busy_round_trip) != (costs.ROUND_TRIP, costs.BUSY_ROUND_TRIP)
        # and a message among several sent at once: its own CPU, no wake-up of its own, nor MESSAGE_WORK added
        assert 0 < cost.queued_message_cpu < cost.message_cpu
        assert cost.queued_message_cpu != costs.QUEUED_MESSAGE_CPU
        choice = costs.choose(cost, 2, usable_cpus(), allow_in_process=True)
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == (
            choice.executor,
            choice.num_workers,
            choice.in_process,
        )
        assert pool.placement_reason == choice.why
        unpreempted = costs.choose(dataclasses.replace(cost, step=cost.cpu), 2, usable_cpus(), allow_in_process=True)
        assert (unpreempted.executor, unpreempted.in_process) == ("in_process", 2)
        await guard(pool.reset())
        result = await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert result[1].shape == (2,)


def test_auto_places_a_sync_pool_and_an_awaited_one_for_waits_that_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's calls poll for their replies where a CPU is left to the waiting thread: a ``SyncPool``'s in the
    caller's thread (``Coordinator.wait_here``), an awaited ``aioenv.Pool``'s through its loop's turns
    (``Runner.poll_budget``). ``auto`` tells the model so for both: the same probe (32 CartPoles on 2 CPUs) places
    each on one worker, which polls, where a pool whose waits slept would take two."""
    seen: list[float] = []
    real_choose = costs.choose

    async def measured(*_: Any) -> costs.Probed:  # CartPole on the 2-vCPU VM, 2026-11-30 (no process kept)
        us = 1e-6
        return costs.Probed(
            costs.Cost(6 * us, 6 * us, False, 150 * us, 100 * us, 120 * us, 90 * us, 14 * us), None, None
        )

    def recorded(*args: Any, **kwargs: Any) -> costs.Choice:
        seen.append(kwargs["polls"])
        return real_choose(*args, **kwargs)

    monkeypatch.setattr(pool_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(costs, "probe", measured)
    monkeypatch.setattr(costs, "choose", recorded)
    with aioenv.SyncPool("CartPole-v1", 32, seed=0) as blocking:
        assert (blocking.pool.executor, blocking.num_workers) == ("inline", 1)
        blocking.reset()
        assert blocking.step(np.zeros(32, dtype=np.int64))[1].shape == (32,)

    async def in_a_loop() -> int:
        async with aioenv.Pool("CartPole-v1", 32, seed=0) as pool:
            return pool.num_workers

    assert aioenv.run(in_a_loop()) == 1
    assert seen == [SPIN_AT_MOST, SPIN_AT_MOST]
    probed = aioenv.run(measured())
    assert real_choose(probed.cost, 32, 2).num_workers == 2  # were its waits to sleep


async def test_a_choice_that_fails_stops_the_process_that_timed_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's process is kept for the pool only once a placement was chosen; if choosing raises (here a
    stand-in; a Ctrl-C could land there too), the pool does not start and that process is stopped, not left
    behind (the suite's teardown checks that no worker process outlives its test)."""

    def broken(*_: Any, **__: Any) -> costs.Choice:
        raise RuntimeError("no choice")

    monkeypatch.setattr(costs, "choose", broken)
    before = _workers()
    with pytest.raises(RuntimeError, match="no choice"):
        await aioenv.make("CartPole-v1", 4, seed=0)
    assert _workers() == before


async def test_a_probe_cut_short_with_a_ping_out_stops_its_process_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's time limit cancels the wait for a PING's answer, leaving that PING's future done (cancelled) in
    the queue of PINGs out; the process is then stopped, and its exit fails every PING still waiting, skipping the
    cancelled one. The pool goes on as after any timing that ran out (inline workers), and nothing is raised in
    the loop. The stand-in below is the burst as the time limit leaves it."""

    async def cut_short(_proc: Any, pong: Any) -> float:
        waiting = asyncio.get_running_loop().create_future()
        pong.append(waiting)
        waiting.cancel()  # what asyncio.timeout does to the wait it cuts short
        raise TimeoutError

    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    monkeypatch.setattr(costs, "_burst", cut_short)
    try:
        async with aioenv.Pool("CartPole-v1", 2, seed=0) as pool:
            assert "timing one env took over" in pool.placement_reason
            assert pool.executor == "inline"
            await guard(pool.reset(seed=0))
        await asyncio.sleep(0.1)  # callbacks of the exit, if any were late
    finally:
        loop.set_exception_handler(None)
    assert reported == []


async def test_auto_shares_cheap_envs_between_this_process_and_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    async def five_microseconds(*_: Any) -> costs.Probed:  # as measured on a quiet machine (no process kept)
        return costs.Probed(costs.Cost(5e-6, 5e-6, round_trip=150e-6, message_cpu=80e-6), None, None)

    monkeypatch.setattr(pool_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(costs, "probe", five_microseconds)
    before = _workers()
    async with aioenv.Pool("CartPole-v1", 200, seed=0, allow_in_process=True) as pool:
        assert pool.executor == "inline"
        assert pool.num_workers == 1
        assert 0 < pool.envs_in_process < 200
        assert "this process shares the work" in pool.describe_placement()
        assert len(_workers()) == len(before) + 1
        await guard(pool.reset())
        obs, rew, *_ = await guard(pool.step(np.ones(200, dtype=np.int64)))
        assert obs.shape == (200, 4)
        assert rew.sum() == 200


async def test_auto_weighs_the_steps_against_a_round_trip_measured_on_this_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe's process answers PINGs; their round trip (plus the pool's own work per message, here
    made half a second) is what the envs' batch is weighed against, not a fixed estimate."""
    monkeypatch.setattr(costs, "MESSAGE_WORK", 0.5)
    async with aioenv.Pool(
        "CartPole-v1", 300, seed=0, allow_in_process=True
    ) as pool:  # 300 steps of µs: far less than 0.5 s
        assert (pool.executor, pool.envs_in_process) == ("in_process", 300)
        trip = re.search(r"less than a round trip \((\d+) µs\)", pool.placement_reason)
        assert trip is not None, pool.placement_reason
        assert int(trip.group(1)) > 500_000  # 0.5 s plus the PINGs' measured median


async def first_refused_step(pool: aioenv.Pool) -> Exception:
    """Step every env until a step fails as after a crash: with WorkerCrashed (the step was in flight) or
    EnvRemade (the next step, once the exit was noticed and the envs made again)."""
    while True:
        try:
            await guard(pool.step(np.zeros(pool.num_envs, dtype=np.int64)))
        except (EnvRemade, WorkerCrashed) as exc:
            return exc
        await asyncio.sleep(0.05)


async def test_the_process_that_timed_the_env_goes_on_as_the_first_worker() -> None:
    """``auto`` starts no process of its own for envs that go to inline workers: the one that timed the env
    serves, and a crash of it is handled as any worker's."""
    before = set(_workers())
    async with aioenv.Pool("CartPole-v1", 4, seed=0, num_workers=2) as pool:  # inline workers, however cheap
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == ("inline", 2, 0)
        started = {pid: cmd for pid, _, cmd in worker_processes() if pid not in before}
        assert len(started) == 2, started  # no third process was started, and none is left over
        probe_pid = next(pid for pid, cmd in started.items() if "--name probe" in cmd)
        await guard(pool.reset())
        obs, rew, *_ = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert obs.shape == (4, 4)
        assert rew.tolist() == [1.0] * 4
        os.kill(probe_pid, signal.SIGKILL)  # the adopted worker dies: its envs are made again elsewhere
        crash = await first_refused_step(pool)
        assert "re-made" in str(crash)
        await guard(pool.reset())
        _, rew, *_ = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert rew.tolist() == [1.0] * 4
    assert set(_workers()) <= before  # the pool's workers are gone (a leftover of earlier tests may be, too)


async def test_envs_that_stay_in_this_process_leave_no_process_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costs, "MESSAGE_WORK", 0.5)  # a round trip dearer than any batch, however busy the machine
    before = set(_workers())
    async with aioenv.Pool("CartPole-v1", 2, seed=0, allow_in_process=True) as pool:
        assert (pool.executor, pool.envs_in_process) == ("in_process", 2)
        assert set(_workers()) <= before  # the process that timed the env is gone


class Hangs(Flaky):
    """Every step sleeps for a minute (an env stuck in a call)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(60)
        return super().step(0)


async def test_an_env_that_hangs_costs_the_probe_process_not_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costs, "PROBE_LIMIT", 1.0)
    before = _workers()
    async with aioenv.Pool(Hangs, 2) as pool:
        assert pool.executor == "inline"
        assert pool.envs_in_process == 0
        assert "timing one env took over 1 s" in pool.placement_reason
        obs, _ = await guard(pool.reset())
        assert obs.shape == (2, 2)
        assert len(_workers()) == len(before) + pool.num_workers  # the probe's process is gone


@pytest.mark.parametrize(("lie", "named"), [("nan", "step=nan"), ("reply", "step='x'")])
async def test_timings_an_env_lied_about_are_refused_and_the_process_that_took_them_is_stopped(
    lie: str, named: str
) -> None:
    """The process timing an env runs the env's code, which can reach that process's modules (here: its median
    of the timed runs answers NaN) and its pipe (here: a forged answer of "x" seconds ahead of the true one). What it
    answers is checked: the pool goes to inline workers, saying why, and the process is stopped (before, a NaN was
    taken as the step's time, and "x" raised past the code that stops the process, which was left running)."""
    before = _workers()
    async with aioenv.Pool("tests.envs.faulty:ProbeLiarEnv", 2, env_kwargs={"lie": lie}) as pool:
        assert pool.executor == "inline"
        assert pool.placement_reason.startswith(
            f"timing one env failed (ValueError: the process timing the env reported {named}, expected a finite"
        )
        obs, _ = await guard(pool.reset(seed=0))
        assert obs.shape == (2, 1)
        assert len(_workers()) == len(before) + pool.num_workers  # the probe's process is gone


def test_what_the_process_timing_an_env_answers_is_checked() -> None:
    assert costs.timings({"step": 6e-6, "cpu": 5e-6}) == (False, 6e-6, 5e-6)
    assert costs.timings({"step": 0, "cpu": 0}) == (False, 0.0, 0.0)  # a clock too coarse for the step
    assert costs.timings({"async": True}) == (True, 0.0, 0.0)
    for values, named in [
        ({"step": float("inf"), "cpu": 0.0}, "step=inf"),
        ({"step": 1e-6, "cpu": -1e-6}, "cpu=-1e-06"),
        ({"step": True, "cpu": 0.0}, "step=True"),
        ({"step": 1e-6}, "cpu=None"),
        ({"async": 1, "step": "fast"}, "step='fast'"),  # only True says async
    ]:
        with pytest.raises(ValueError, match=f"reported {named}, expected a finite number of seconds >= 0"):
            costs.timings(values)
    with pytest.raises(ValueError, match=r"answered list \[1, 2\], expected \{'step'"):
        costs.timings([1, 2])


async def test_an_env_that_fails_to_be_timed_goes_to_worker_processes_which_report_it() -> None:
    def broken() -> gym.Env[Any, Any]:
        raise RuntimeError("cannot make this env")

    pool = aioenv.Pool(broken, 2)
    with pytest.raises(Exception, match="cannot make this env"):
        await guard(pool.start())
    assert pool.executor == "inline"
    assert "timing one env failed" in pool.placement_reason


#: A ``max_loop_hold`` for the pools of the Ctrl-C tests: their envs' steps run inside the call that a Ctrl-C in
#: one cuts short, however loaded the machine (with the default 10 ms a step the env thread finishes later is
#: answered from the loop, and its KeyboardInterrupt stops the loop, as a Ctrl-C there would: the test's process).
HOLD_ALL = float(HANG)


class Interrupted(Flaky):
    """Raises KeyboardInterrupt on action 1 (Ctrl-C arriving while this env steps in the caller's thread)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if action == 1:
            raise KeyboardInterrupt
        return super().step(0)


#: The pid of the process whose :class:`InterruptedHere` envs raise (the test's, not a worker's).
INTERRUPT_PID = "AIOENV_TEST_INTERRUPT_PID"


class InterruptedHere(Flaky):
    """Raises KeyboardInterrupt on action 1 in the process named by ``INTERRUPT_PID`` only (the pool's own); in a
    worker process, or the one that times the env for ``auto``, it steps as usual."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if action == 1 and os.environ.get(INTERRUPT_PID) == str(os.getpid()):
            raise KeyboardInterrupt
        return super().step(0)


async def read_rows_one_by_one(pool: aioenv.Pool, n: int) -> tuple[list[int], dict[int | None, AioEnvError]]:
    """``n`` rows read one ``recv`` at a time: the env ids answered, and each failed row's error by env id."""
    answered: list[int] = []
    failed: dict[int | None, AioEnvError] = {}
    for _ in range(n):
        try:
            *_, info = await guard(pool.recv(min_results=1, max_results=1))
            answered += info["env_id"].tolist()
        except AioEnvError as err:
            failed[err.env_id] = err
    return answered, failed


@pytest.mark.parametrize("limit", [None, 1, 2])
async def test_ctrl_c_inside_an_env_here_of_a_pool_shared_with_a_worker_answers_every_row_once(
    monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    """2 envs here, 2 on a worker process: ``send`` steps none of the envs here (they wait for ``recv``), so the
    ``recv`` that steps them gets the Ctrl-C inside env 1, and ``recv`` then answers each env of the call exactly
    once, env 1 with the interruption. Under ``max_concurrency`` the rows held back go out as room frees (the
    interruption frees it), never lost: nothing stays in flight or busy, and the pool goes on."""
    monkeypatch.setenv(INTERRUPT_PID, str(os.getpid()))
    monkeypatch.setattr(costs, "choose", placed(costs.Choice("inline", 1, 2, "the test's placement")))
    async with aioenv.Pool(
        InterruptedHere, 4, batch_size=4, max_concurrency=limit, allow_in_process=True, max_loop_hold=HOLD_ALL
    ) as pool:
        assert (pool.envs_in_process, pool.num_workers) == (2, 1)
        await guard(pool.reset(seed=0))
        pool.send(np.array([0, 1, 0, 0]))
        # In this task, not one of guard's (the loop would stop). It waits for all 4 rows, so it steps the envs
        # here even if the worker's 2 rows arrived first.
        with pytest.raises(KeyboardInterrupt):
            await pool.recv(min_results=4, max_results=4)
        answered, failed = await read_rows_one_by_one(pool, 4)
        assert None not in failed, failed  # every error names its env
        assert sorted(answered + [e for e in failed if e is not None]) == [0, 1, 2, 3]  # each env once
        assert isinstance(failed[1], EnvError)
        assert failed[1].remote_type == "KeyboardInterrupt"
        assert {2, 3} <= set(answered)  # the worker's envs stepped, under every limit
        assert (pool._recv.in_flight, pool._recv.ready) == (0, 0)
        with pytest.raises(UsageError, match="can never be satisfied"):
            await guard(pool.recv(min_results=1))
        await guard(pool.reset(seed=1))
        pool.send(np.zeros(4, dtype=np.int64))
        _, rew, *_, info = await guard(pool.recv())
        assert sorted(info["env_id"].tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(rew, [1.0] * 4)


async def test_ctrl_c_inside_an_env_here_cuts_a_lock_step_call_short_and_never_sends_what_it_held_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lock-step ``step()`` of a share steps its envs here inside the call: under ``max_concurrency=2`` envs 0
    and 1 (here) go first, the Ctrl-C inside env 1 reaches the caller, and envs 2 and 3 never go out (their
    rows are answered with it). Nothing stays busy: after a reset the pool steps every env again."""
    monkeypatch.setenv(INTERRUPT_PID, str(os.getpid()))
    monkeypatch.setattr(costs, "choose", placed(costs.Choice("inline", 1, 2, "the test's placement")))
    hold = {"max_loop_hold": HOLD_ALL}
    async with aioenv.Pool(InterruptedHere, 4, max_concurrency=2, allow_in_process=True, **hold) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(KeyboardInterrupt):  # in this task, not one of guard's (the loop would stop)
            await pool.step(np.array([0, 1, 0, 0]))
        assert not pool._core().sched.held
        with pytest.raises(UsageError, match="reset it first") as caught:
            await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert sorted(caught.value.errors) == [1]
        await guard(pool.reset(seed=1))
        _, rew, *_ = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        np.testing.assert_array_equal(rew, [1.0] * 4)


async def test_ctrl_c_inside_an_in_process_step_reaches_the_caller_and_leaves_the_pool_usable() -> None:
    async with aioenv.Pool(Interrupted, 3, executor="in_process", max_loop_hold=HOLD_ALL) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(KeyboardInterrupt):
            await pool.step(np.array([0, 1, 0]))
        # every env was released (none is left "busy"); the interrupted one needs a reset, as after any error
        with pytest.raises(UsageError, match="its last step raised KeyboardInterrupt; reset it first") as caught:
            await guard(pool.step(np.array([0, 0, 0])))
        assert sorted(caught.value.errors) == [1]
        await guard(pool.reset(seed=1))
        _, rew, *_ = await guard(pool.step(np.array([0, 0, 0])))
        np.testing.assert_array_equal(rew, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("limit", [None, 2])
async def test_ctrl_c_inside_an_in_process_send_answers_every_row_once(limit: int | None) -> None:
    """``send`` that a Ctrl-C cuts short raises it, and every row of the call is answered once, the ones cut off
    with the interruption: no env is left in flight, and once they are read ``recv`` returns the rows of the
    next ``send``, not stale ones; under ``max_concurrency`` too (the rows it held back are answered with it)."""
    async with aioenv.Pool(
        Interrupted, 3, executor="in_process", batch_size=3, max_concurrency=limit, max_loop_hold=HOLD_ALL
    ) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(KeyboardInterrupt):
            pool.send(np.array([0, 1, 0]))
        assert (pool._recv.in_flight, pool._recv.ready) == (0, 3)
        answered, failed = await read_rows_one_by_one(pool, 3)
        assert sorted(answered + [e for e in failed if e is not None]) == [0, 1, 2]
        assert isinstance(failed[1], EnvError)
        assert failed[1].remote_type == "KeyboardInterrupt"
        await guard(pool.reset(seed=1))  # no env is "in flight" or has an unread result
        pool.send(np.array([0, 0, 0]))
        _, rew, *_, info = await guard(pool.recv())
        np.testing.assert_array_equal(info["env_id"], [0, 1, 2])
        np.testing.assert_array_equal(rew, [1.0, 1.0, 1.0])


def test_an_interrupt_lands_in_the_env_code_that_runs_never_in_the_thread_that_runs_it() -> None:
    # what a second Ctrl-C in a SyncPool call does to env code on its thread (InProcessWorker.interrupt_env_code)
    from workers.inproc import _EnvThread

    runs = _EnvThread("test")
    started = threading.Event()

    def spin() -> None:
        started.set()
        while True:  # Python code: takes the interrupt between two bytecodes
            pass

    job = runs.submit(spin)
    assert started.wait(HANG)
    assert runs.interrupt() is job
    assert job.wait(HANG)
    assert isinstance(job.error, KeyboardInterrupt)
    quick = runs.submit(lambda: 1)
    assert quick.wait(HANG)
    assert runs.interrupt() is None  # nothing runs: nothing to cut short, and nothing left pending
    after = runs.submit(lambda: 2)
    assert after.wait(HANG)
    assert (after.result, after.error) == (2, None)  # the thread lives on and runs what comes next
    runs.stop()

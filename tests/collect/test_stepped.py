"""A lock-step collector over a SyncPool that runs its calls in the caller's thread: each pull after the first runs
there too, and waits for every step as ``SyncPool.step`` does, without running the event loop
(``SyncPool._run_stepped``). Real worker processes; a spy on ``Coordinator.wait_here`` says how each step waited.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest

import aioenv
import aioenv.sync
from aioenv.collect import Collector
from aioenv.core.coordinator import Coordinator
from tests.collect import refs
from tests.envs.faulty import SLOW
from tests.support.procs import HANG
from tests.support.waits import WaitsHere

pytestmark = pytest.mark.timeout(120)

N = 4
SEED = 7
PROBE = "tests.envs.faulty:make_probe"


def test_lock_step_pulls_wait_for_each_step_without_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    waits = WaitsHere(monkeypatch)
    with (
        aioenv.SyncPool("CartPole-v1", N, executor="inline", num_workers=2, seed=SEED) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=N * 25, total_frames=N * 75) as collector,
    ):
        assert pool.runs_in_caller
        first = next(collector)  # the first pull runs the loop here: its generator is the loop's
        assert waits.done == 0
        rest = list(collector)
        assert waits.done == 50  # every step of the two pulls after it, one wait each
        assert waits.not_done == 0
        assert pool.runs_in_caller  # the loop is still lent to this thread's calls: they too wait without it
        before = waits.done
        obs, _ = pool.reset(seed=SEED)
        pool.step(np.zeros(N, dtype=np.int64))
        assert waits.done == before + 2  # the reset's and the step's
    batches = [first, *rest]
    assert [b.shape for b in batches] == [(25, N)] * 3
    refs.replay(batches, N, "next_step", SEED)  # the transitions SyncVectorEnv gives, row for row
    for batch in batches:
        refs.assert_trajectories_consistent(batch)
    assert obs.shape == (N, 4)


@pytest.mark.parametrize("autoreset", ["same_step", "disabled"])
def test_stepped_pulls_reset_and_record_as_on_the_loop(autoreset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # disabled: the collector resets ended envs itself (pool.reset, waited for here too); same_step: the final
    # observations come in the step's infos
    waits = WaitsHere(monkeypatch)
    with (
        aioenv.SyncPool(
            "CartPole-v1", N, executor="inline", num_workers=2, seed=SEED, autoreset_mode=autoreset
        ) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=N * 20, total_frames=N * 60) as collector,
    ):
        batches = list(collector)
    assert waits.done >= 40
    assert waits.not_done == 0
    refs.replay(batches, N, autoreset, SEED)
    assert sum(int(b.done.sum()) for b in batches) >= N  # episodes ended, and the envs went on


async def _timed_policy(obs: np.ndarray) -> np.ndarray:
    """An async policy that needs a task of its own: ``asyncio.timeout`` raises without one."""
    assert asyncio.current_task() is not None
    async with asyncio.timeout(HANG):
        await asyncio.sleep(0)
    return refs.cart_policy(obs)


def test_an_async_policy_runs_in_a_task_even_when_staged_after_stepped_pulls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = WaitsHere(monkeypatch)
    with (
        aioenv.SyncPool("CartPole-v1", N, executor="inline", num_workers=2, seed=SEED) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=N * 10, total_frames=N * 40) as collector,
    ):
        batches = [next(collector), next(collector)]
        assert waits.done == 10  # the second pull was stepped
        collector.update_policy(_timed_policy)  # staged: it replaces the policy inside the next pull
        batches += list(collector)
        assert collector.policy_version == 1
    assert [b.shape for b in batches] == [(10, N)] * 4
    refs.replay(batches, N, "next_step", SEED)


@pytest.mark.timeout(HANG)
def test_a_pull_that_awaits_more_than_the_pools_calls_hands_the_rest_to_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SyncPool._run_stepped's own contract: a bare yield (asyncio.sleep(0)) and a future no reply completes hand
    # the rest of the coroutine to a task on the loop, run here; the pool's calls before them were waited for here.
    # With nothing in flight, no wait for replies begins at all (it could only end at its timeout: 4 * HANG here)
    waits = WaitsHere(monkeypatch, block_at_most=4 * HANG)
    with aioenv.SyncPool("CartPole-v1", N, executor="inline", num_workers=2, seed=SEED) as sp:
        sp.reset(seed=SEED)
        ran: list[str] = []

        async def mixed() -> int:
            pool = sp.pool
            await pool.step(np.zeros(N, dtype=np.int64))
            ran.append("stepped")
            loop = asyncio.get_running_loop()
            later = loop.create_future()
            loop.call_soon(later.set_result, 5)  # nothing in flight: no reply could complete it
            value: int = await later
            ran.append("future")
            await asyncio.sleep(0)
            assert asyncio.current_task() is not None  # a task runs the rest
            obs, *_ = await pool.step(np.ones(N, dtype=np.int64))
            ran.append("on the loop")
            return value + int(obs.shape[0])

        assert sp._run_stepped(mixed()).result(HANG) == 5 + N
        assert ran == ["stepped", "future", "on the loop"]
        assert (waits.done, waits.not_done) == (1, 1)
        assert sp.runs_in_caller


@pytest.mark.parametrize("presses", [1, 2])
@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_in_a_stepped_pull_leaves_the_pool_usable(
    presses: int, gate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # env 0 takes the slow action at its 6th step (in the second pull, which is stepped) and waits for the gate.
    # One Ctrl-C ends the pull with KeyboardInterrupt once the wait without the loop gives up (50 ms); a second one
    # (the wait without the loop lasting HANG here) raises out of that wait at once. Either way the collector's
    # generator is closed, and the step still in flight is one the pool's next call waits for, never a busy env
    if presses == 2:
        WaitsHere(monkeypatch)

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = np.zeros(len(obs), dtype=np.int64)
        actions[(obs[:, 0] == 0) & (obs[:, 1] == 5)] = SLOW
        return actions

    with (
        aioenv.SyncPool(PROBE, 2, executor="inline", num_workers=2, seed=0, env_kwargs=gate.kwargs()) as pool,
        Collector(pool, policy, frames_per_batch=2 * 4, total_frames=2 * 40) as collector,
    ):
        first = next(collector)
        assert first.obs[:, :, 1].max() == 3  # steps 0..3 of each env

        def interrupt() -> None:
            gate.wait_started(0)
            main = threading.main_thread().ident or 0
            signal.pthread_kill(main, signal.SIGINT)
            if presses == 2:
                deadline = time.monotonic() + HANG
                ctrl_c = signal.getsignal(signal.SIGINT).__self__  # type: ignore[union-attr]  # SyncPool's, in a call
                while not ctrl_c.hit:  # the first one was taken: the call goes on waiting
                    assert time.monotonic() < deadline, "the first Ctrl-C was never taken"
                    time.sleep(0.005)
                signal.pthread_kill(main, signal.SIGINT)

        presser = threading.Thread(target=interrupt, daemon=True)
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            next(collector)
        presser.join(HANG)
        gate.open()
        obs, _ = pool.reset(seed=0)  # waits for the interrupted step first: no env is busy
        assert obs[:, 0].tolist() == [0, 1]
        with pytest.raises(StopIteration):
            next(collector)  # the interrupted pull closed the collector's generator


def test_a_worker_killed_during_a_stepped_pull_cuts_its_envs_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    # the policy kills worker 1 (envs 2 and 3) before the 4th step of the second pull: the wait without the loop
    # stops at its exit, the loop takes it in, those envs' rows of that step fail and are cut (on_error="reset"),
    # a new worker is started and reset, and the pulls go on stepped; the other worker's envs never notice
    waits = WaitsHere(monkeypatch)
    calls = 0
    with aioenv.SyncPool("CartPole-v1", N, executor="inline", num_workers=2, seed=SEED) as pool:
        coord = pool.pool._runner
        assert isinstance(coord, Coordinator)

        def policy(obs: np.ndarray) -> np.ndarray:
            nonlocal calls
            calls += 1
            if calls == 10 + 4:
                os.kill(coord.slots[1].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            return refs.cart_policy(obs)

        with Collector(pool, policy, frames_per_batch=N * 10, total_frames=N * 40, on_error="reset") as collector:
            batches = list(collector)
        pool.step(np.zeros(N, dtype=np.int64))  # the new worker steps
    assert waits.not_done >= 1  # the exit: the loop's to take in
    assert waits.done >= 20
    hit = batches[1]
    assert hit.valid[3].tolist() == [True, True, False, False]  # the failed rows are no transitions
    assert (hit.traj_id[3, 2:] >= 0).all()  # but show the trajectory they cut
    assert hit.traj_end[2, 2:].all()  # whose chain stops before them
    assert (hit.step_count[4, 2:] == 0).all()  # and the reset envs start new ones
    for batch in batches:
        refs.assert_trajectories_consistent(batch)
    failed = [((b.traj_id >= 0) & ~b.valid).sum() for b in batches]  # (next_step's reset rows show no trajectory)
    assert failed == [0, 2, 0, 0]  # those two rows only: the replaced worker's envs step on
    assert sum(b.valid[:, 2:].sum() for b in batches[2:]) > 0


def test_a_step_past_its_deadline_in_a_stepped_pull_fails_that_env_only(
    gate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # env 0 takes the slow action (held by the gate, never opened here) at its 6th step, in the second pull: the
    # wait without the loop ends at the deadline, the loop's timer fails that row with StepTimeout, and the
    # collector cuts it and goes on (on_error="reset"); env 1 never notices
    waits = WaitsHere(monkeypatch)
    slow = [True]

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = np.zeros(len(obs), dtype=np.int64)
        if slow[0] and obs[0, 1] == 5:
            actions[0], slow[0] = SLOW, False
        return actions

    kwargs = gate.kwargs(slow_seconds=HANG)
    with (
        aioenv.SyncPool(
            PROBE, 2, executor="inline", num_workers=2, seed=0, env_kwargs=kwargs, step_timeout=2.0
        ) as pool,
        Collector(pool, policy, frames_per_batch=2 * 4, total_frames=2 * 16, on_error="reset") as collector,
    ):
        batches = list(collector)
    assert waits.not_done >= 1  # the deadline: the loop's to judge
    hit = batches[1]
    assert hit.valid[1].tolist() == [False, True]  # env 0's 6th step (t = 5) failed
    assert [int(((b.traj_id >= 0) & ~b.valid).sum()) for b in batches] == [0, 1, 0, 0]
    for batch in batches:
        assert batch.obs[:, 1, 0].tolist() == [1.0] * 4  # env 1 stepped on, every row

"""An awaited ``pool.step()`` or ``pool.recv()`` polls for its replies through the event loop's turns before it
sleeps, where the pool's worker processes and the loop's thread fit on the usable CPUs, for up to twice the recent
waits (``Runner.poll_budget``, the rule ``SyncPool``'s waits poll by); where they do not fit, or the waits are
long, it sleeps at once. The loop's other tasks run while a call polls, and a task cancelled while it polls cancels
its call, as one cancelled while it sleeps does.

Real worker processes and real envs. Which CPUs there are is set (``usable_cpus``), so that the suite means the
same on any machine; the bound on polling is set to the hang guard where a poll must last until its reply, however
slow the machine. Nothing asserts on wall-clock speed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import aioenv
import aioenv.pool as pool_module
from aioenv import UsageError
from aioenv.core.coordinator import Coordinator
from tests.envs.faulty import SLOW, make_probe
from tests.support.procs import HANG


async def guard(awaitable: Any) -> Any:
    """Await with a hang guard."""
    return await asyncio.wait_for(awaitable, HANG)


class Polls:
    """How often an awaited call polled for its replies (``aioenv.pool._poll_until``), and how many of those polls
    ended with what they waited for in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.polls = self.answered = 0
        real = pool_module._poll_until

        async def counting(done: Callable[[], bool], until: float) -> None:
            self.polls += 1
            await real(done, until)
            self.answered += done()

        monkeypatch.setattr(pool_module, "_poll_until", counting)


def cpus(monkeypatch: pytest.MonkeyPatch, count: int, *, bound: float = HANG) -> None:
    """The pool's process may use ``count`` CPUs; a poll lasts ``bound`` seconds at most."""
    monkeypatch.setattr("aioenv.core.coordinator.usable_cpus", lambda: count)
    monkeypatch.setattr("aioenv.core.coordinator.SPIN_AT_MOST", bound)


def coordinator(pool: aioenv.Pool) -> Coordinator:
    coord = pool._runner
    assert isinstance(coord, Coordinator)
    return coord


@pytest.mark.parametrize("count", [64, 1])
async def test_an_awaited_step_polls_where_a_cpu_is_to_spare_and_steps_the_same(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one worker process: with 64 CPUs the loop's thread has one to itself and each step polls (the first for the
    # bound, the rest for twice the recent waits); with 1 every step sleeps at once, and no wait is timed. Either
    # way the trajectories are SyncVectorEnv's.
    cpus(monkeypatch, count)
    polls = Polls(monkeypatch)
    steps = 30
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=12)] * 4)
    async with aioenv.Pool(
        "CartPole-v1", 4, executor="inline", num_workers=1, seed=5, env_kwargs={"max_episode_steps": 12}
    ) as pool:
        obs, _ = await guard(pool.reset())
        np.testing.assert_array_equal(obs, ref.reset(seed=5)[0])
        coord = coordinator(pool)
        assert coord._waits == -1.0  # nothing known yet
        pool.action_space.seed(1)
        for _ in range(steps):
            action = pool.action_space.sample()
            got = await guard(pool.step(action))
            want = ref.step(action)
            for g, w in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(g, w)
        if count == 64:
            assert polls.polls == steps
            assert polls.answered >= 1  # the first poll, for the bound, lasted until its reply at least
            assert coord._waits > 0  # each wait timed, polling and then asleep
        else:
            assert polls.polls == 0
            assert coord._waits == -1.0
    ref.close()


async def test_the_loop_runs_other_tasks_while_a_step_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    # a step whose reply takes 0.2 s, polled for until it comes: the loop keeps running another task meanwhile
    cpus(monkeypatch, 64)
    polls = Polls(monkeypatch)
    fns = [functools.partial(make_probe, slow_seconds=0.2)] * 2
    async with aioenv.Pool(fns, executor="inline", num_workers=1, seed=0) as pool:
        await guard(pool.reset())
        turns = 0
        stop = False

        async def ticker() -> None:
            nonlocal turns
            while not stop:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = turns
        result = await guard(pool.step(np.array([SLOW, 0])))
        stop = True
        await task
        assert result[0][:, 0].tolist() == [0.0, 1.0]  # each env's own row
        assert (polls.polls, polls.answered) == (1, 1)  # polled until the reply came
        assert turns - before >= 10  # the other task ran on, turn after turn
        assert coordinator(pool)._waits >= 0.19


async def test_waits_longer_than_the_bound_sleep_at_once_and_are_still_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    # steps of 50 ms against a bound of 20 ms: the first (nothing known) polls for the bound and then sleeps; the
    # steps after it sleep at once, their waits still timed, so that shorter waits would poll again
    cpus(monkeypatch, 64, bound=0.02)
    polls = Polls(monkeypatch)
    fns = [functools.partial(make_probe, slow_seconds=0.05)] * 2
    slow = np.array([SLOW, 0])
    async with aioenv.Pool(fns, executor="inline", num_workers=1, seed=0) as pool:
        await guard(pool.reset())
        coord = coordinator(pool)
        await guard(pool.step(slow))
        assert (polls.polls, polls.answered) == (1, 0)  # polled for the bound, then slept until the reply
        assert coord._waits >= 0.045
        for _ in range(3):
            await guard(pool.step(slow))
        assert polls.polls == 1  # slept at once
        coord._waits = 0.001  # were the recent waits short, the next would poll again
        await guard(pool.step(np.zeros(2, np.int64)))
        assert polls.polls == 2


async def test_a_task_cancelled_while_it_polls_cancels_its_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cpus(monkeypatch, 64)
    polls = Polls(monkeypatch)
    gate = tmp_path / "gate"
    fns = [functools.partial(make_probe, gate=str(gate))] * 2
    futures: list[asyncio.Future[Any]] = []
    real_start = pool_module.Pool._start_step

    def recording(self: aioenv.Pool, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        futures.append(real_start(self, *args, **kwargs))
        return futures[-1]

    monkeypatch.setattr(pool_module.Pool, "_start_step", recording)
    async with aioenv.Pool(fns, executor="inline", num_workers=1, seed=0) as pool:
        await guard(pool.reset())
        task = asyncio.create_task(pool.step(np.array([SLOW, 0])))
        while polls.polls == 0:  # the step went out and polls for its reply, which waits for the gate
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert futures[0].cancelled()  # the step's own future, as a cancel while it slept would
        gate.touch()

        async def step_again() -> Any:  # the envs are the pool's again once the cancelled step's rows came back
            while True:
                try:
                    return await pool.step(np.zeros(2, np.int64))
                except UsageError as exc:
                    refused.append(str(exc))
                    await asyncio.sleep(0.01)

        refused: list[str] = []

        result = await guard(step_again())
        assert result[0][:, 1].tolist() == [2.0, 2.0]  # both envs stepped twice: the cancelled step went out
        assert all("already has a request in flight" in why for why in refused), refused[:3]  # until then: busy


@pytest.mark.parametrize("count", [64, 1])
async def test_recv_polls_where_a_cpu_is_to_spare(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # send/recv of 8 envs on one worker process, 4 rows a recv: every row comes back once, in either case; with
    # 64 CPUs the recvs that had to wait polled and their waits were timed, with 1 none did
    cpus(monkeypatch, count)
    polls = Polls(monkeypatch)
    async with aioenv.Pool("CartPole-v1", 8, executor="inline", num_workers=1, batch_size=4, seed=0) as pool:
        await guard(pool.reset())
        coord = coordinator(pool)
        rows = {i: 0 for i in range(8)}
        pool.send(np.zeros(8, np.int64))
        for _ in range(20):
            *_, info = await guard(pool.recv())
            ids = info["env_id"]
            assert ids.size == 4
            for i in ids.tolist():
                rows[i] += 1
            pool.send(np.zeros(ids.size, np.int64), ids)
        *_, info = await guard(pool.recv(min_results=8, max_results=8))
        for i in info["env_id"].tolist():
            rows[i] += 1
        assert sum(rows.values()) == 20 * 4 + 8
        if count == 64:
            assert polls.polls >= 1
            assert coord._waits > 0
        else:
            assert polls.polls == 0
            assert coord._waits == -1.0


async def test_a_pool_with_envs_in_this_process_does_not_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus(monkeypatch, 64)
    polls = Polls(monkeypatch)
    async with aioenv.Pool("CartPole-v1", 2, executor="in_process", seed=0) as pool:
        await guard(pool.reset())
        for _ in range(5):
            await guard(pool.step(np.zeros(2, np.int64)))
        assert coordinator(pool).poll_budget() is None
    assert polls.polls == 0


async def test_a_recv_with_a_timeout_polls_no_longer_than_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the bound on polling is the hang guard and the step waits for a gate: recv(timeout=0.05) returns what is
    # ready when its time is up (nothing), polling for that long at most; the row comes to a later recv
    cpus(monkeypatch, 64)
    polls = Polls(monkeypatch)
    gate = tmp_path / "gate"
    fns = [functools.partial(make_probe, gate=str(gate))] * 2
    async with aioenv.Pool(fns, executor="inline", num_workers=1, batch_size=1, seed=0) as pool:
        await guard(pool.reset())
        pool.send(np.array([SLOW]), [0])
        *_, info = await guard(pool.recv(timeout=0.05))
        assert info["env_id"].tolist() == []
        assert polls.polls == 1
        gate.touch()
        *_, info = await guard(pool.recv())
        assert info["env_id"].tolist() == [0]

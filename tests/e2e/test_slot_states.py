"""Which real event moves a worker slot (:class:`aioenv.core.recovery.SlotState`) along which transition: real
worker processes, killed with real signals; the slot's lifecycle keeps the path it took
(:func:`tests.support.lifecycles.record`). The table itself is walked in tests/core/test_lifecycle.py."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv import WorkerCrashed
from aioenv.core.lifecycle import InvalidTransition
from aioenv.core.recovery import SLOT, Slot, SlotState
from aioenv.wire.protocol import Key, Op, encode
from tests.envs.faulty import SLOW
from tests.support.lifecycles import record
from tests.support.procs import HANG, process_gone, wait_new_worker, worker_pid

PROBE = "tests.envs.faulty:make_probe"
S = SlotState


async def guard(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, HANG)


async def until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(HANG):
        while not done():
            await asyncio.sleep(0.01)


async def test_a_pools_slots_are_ready_once_it_started_and_closed_by_its_close() -> None:
    pool = await aioenv.make(PROBE, 4, executor="inline", num_workers=2)
    slots = pool._runner.slots
    assert [s.state for s in slots] == [S.READY, S.READY]
    paths = [record(s, SLOT).path for s in slots]
    await guard(pool.aclose())
    assert paths == [[S.CLOSED], [S.CLOSED]]


async def test_a_killed_worker_takes_its_slot_through_lost_and_starting_back_to_ready() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        coord = pool._runner
        slot, other = coord.slots
        path, untouched = record(slot, SLOT).path, record(other, SLOT).path
        old_proc = slot.proc
        os.kill(worker_pid(pool, 0), signal.SIGKILL)
        await wait_new_worker(pool, 0, old_proc.pid)
        assert path == [S.LOST, S.STARTING, S.READY]
        assert untouched == []
        coord._on_exit(old_proc)  # its exit told again: that process is no slot's any more, nothing restarts
        assert path == [S.LOST, S.STARTING, S.READY]
        assert slot.restarts == 1


async def test_a_replacement_killed_at_once_is_replaced_again() -> None:
    """The fresh worker dies too, before or after its HELLO (STARTING or READY): LOST, and started again."""
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        slot = pool._runner.slots[0]
        path = record(slot, SLOT).path
        first = worker_pid(pool, 0)
        os.kill(first, signal.SIGKILL)
        await until(lambda: slot.proc is not None and slot.proc.pid != first)
        second = worker_pid(pool, 0)
        os.kill(second, signal.SIGKILL)
        await wait_new_worker(pool, 0, second)
        assert path in (
            [S.LOST, S.STARTING, S.LOST, S.STARTING, S.READY],
            [S.LOST, S.STARTING, S.READY, S.LOST, S.STARTING, S.READY],
        )
        assert slot.restarts == 2
        obs, _ = await guard(pool.reset(seed=[5, 6]))
        assert obs[:, 0].tolist() == [5, 6]


async def test_a_crash_loop_gives_the_slot_up_and_nothing_starts_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import aioenv.core.recovery

    monkeypatch.setattr(aioenv.core.recovery, "MAX_RESTARTS", 1)
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        coord = pool._runner
        slot = coord.slots[0]
        path = record(slot, SLOT).path
        pid = worker_pid(pool, 0)
        os.kill(pid, signal.SIGKILL)
        pid = await wait_new_worker(pool, 0, pid)
        last = slot.proc
        os.kill(pid, signal.SIGKILL)  # the second death within the window: given up
        await until(lambda: slot.state is S.GIVEN_UP)
        assert path == [S.LOST, S.STARTING, S.READY, S.LOST, S.GIVEN_UP]
        assert slot.dead_reason == "died 2 times in 60 s; aioenv gave up restarting it"
        assert slot.proc is None
        assert process_gone(pid)
        # refused: a late exit notice and room freeing up are ignored; a bug that would restart it is stopped
        coord._on_exit(last)
        assert coord._revive(slot) is True  # moot: it does not wait for room
        with pytest.raises(InvalidTransition, match="the worker slot 0 cannot go from GIVEN_UP to LOST"):
            coord._restart(slot, "died again")
        assert path[-1] is S.GIVEN_UP
        assert slot.proc is None
        with pytest.raises(WorkerCrashed, match="aioenv gave up restarting it"):
            await guard(pool.step_env(0, 0))
        obs, *_ = await guard(pool.step(np.zeros(2, np.int64), env_ids=[2, 3]))  # the other slot goes on
        assert obs[:, 1].tolist() == [1, 1]
    assert path[-1] is S.CLOSED


async def test_a_worker_over_its_memory_drains_then_is_replaced() -> None:
    """Every worker is over a 1 MiB max_worker_rss: once idle, the slot's worker is replaced (and so on)."""
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1, max_worker_rss=1 << 20) as pool:
        slot = pool._runner.slots[0]
        path = record(slot, SLOT).path
        await until(lambda: S.READY in path)
        assert path[:4] == [S.DRAINING, S.LOST, S.STARTING, S.READY]


async def test_a_draining_worker_that_crashes_is_replaced_once_not_twice(gate: Any) -> None:
    """A worker marked for recycling (DRAINING) dies while a step is in flight: its replacement is a fresh
    worker and must not be recycled as well. It was: the slot kept the old worker's recycle mark, and the fresh
    worker was replaced after its first reply (its envs re-made twice)."""
    async with aioenv.Pool(
        PROBE, 2, executor="inline", num_workers=1, env_kwargs=gate.kwargs(), max_worker_rss=1 << 40
    ) as pool:
        await guard(pool.reset(seed=[10, 11]))
        coord = pool._runner
        slot = coord.slots[0]
        old = worker_pid(pool, 0)
        slow = pool.step_env(0, SLOW)
        await gate.started(10)
        coord._over_memory(0, 1 << 41)  # what the memory watch calls when it reads an RSS over the limit
        assert worker_pid(pool, 0) == old  # busy: kept until idle
        os.kill(old, signal.SIGKILL)
        with pytest.raises(WorkerCrashed):
            await guard(slow)
        new = await wait_new_worker(pool, 0, old)
        obs, _ = await guard(pool.reset(seed=[20, 21]))
        assert obs[:, 0].tolist() == [20, 21]
        obs, *_ = await guard(pool.step(np.zeros(2, np.int64)))
        assert obs[:, 1].tolist() == [1, 1]
        assert worker_pid(pool, 0) == new
        assert slot.restarts == 1, "the fresh worker was recycled too"
        assert slot.state is S.READY
        gate.open()


async def test_a_hello_again_keeps_a_ready_slot_as_it_is() -> None:
    """A worker that reconnects says HELLO again: its slot stays READY, nothing moves."""
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        slot = pool._runner.slots[0]
        path = record(slot, SLOT).path
        pool._runner._on_message(slot.name.encode(), encode(Op.HELLO, {Key.NAME: slot.name}))
        assert path == []
        assert slot.state is S.READY
        obs, *_ = await guard(pool.step(np.zeros(2, np.int64)))
        assert obs[:, 1].tolist() == [1, 1]


def test_a_refused_move_names_the_slot_and_changes_nothing() -> None:
    slot = Slot(3)
    with pytest.raises(InvalidTransition, match="the worker slot 3 cannot go from EMPTY to LOST"):
        slot.move(S.LOST, "died")
    assert (slot.state, slot.why, slot.ready, slot.dead_reason) == (S.EMPTY, "", False, "")

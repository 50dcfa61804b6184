"""Which real event takes a pool and its coordinator through which state (:mod:`aioenv.core.lifecycle`), and what
each state refuses: real worker processes, a real server.

The tables themselves are walked pair by pair in ``tests/core/test_lifecycle.py``.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import aioenv
from aioenv.core.coordinator import Coordinator
from aioenv.core.lifecycle import InvalidTransition, Phase
from aioenv.errors import EnvError, PoolClosed, UsageError
from tests.support.procs import HANG, process_gone, workers_of

ACTIONS = np.zeros(2, dtype=np.int64)


def _coordinator(pool: aioenv.Pool) -> Coordinator:
    runner = pool._runner
    assert isinstance(runner, Coordinator)
    return runner


async def _until_starting(pool: aioenv.Pool, task: asyncio.Task[aioenv.Pool]) -> None:
    deadline = asyncio.get_running_loop().time() + HANG
    while pool._runner is None or _coordinator(pool).life.state is not Phase.STARTING:
        assert not task.done(), "the pool started before the test could see it start"
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.005)


async def test_start_run_close_move_pool_and_coordinator_through_their_states() -> None:
    pool = aioenv.Pool("tests.envs.faulty:make_probe", 2, num_workers=1, env_kwargs={"init_seconds": 0.5})
    assert pool._life.state is Phase.NEW
    assert not pool.closed
    assert "not started" in repr(pool)
    with pytest.raises(UsageError, match="not started"):
        await pool.step(ACTIONS)
    task = asyncio.create_task(pool.start())
    await _until_starting(pool, task)
    assert pool._life.state is Phase.STARTING
    with pytest.raises(UsageError, match="not started"):  # a call while it starts: not yet
        await pool.reset()
    assert await asyncio.wait_for(task, HANG) is pool
    coord = _coordinator(pool)
    assert pool._life.state is Phase.RUNNING
    assert coord.life.state is Phase.RUNNING
    assert await pool.start() is pool  # started: start() again returns it as it is
    await pool.reset()
    await pool.aclose()
    assert pool._life.state is Phase.CLOSED
    assert coord.life.state is Phase.CLOSED
    assert pool.closed
    await pool.aclose()  # idempotent
    with pytest.raises(PoolClosed):
        await pool.step(ACTIONS)
    with pytest.raises(PoolClosed, match="make a new one"):
        await pool.start()
    with pytest.raises(InvalidTransition, match="the pool cannot go from CLOSED to RUNNING"):
        pool._life.move(Phase.RUNNING)  # what no public call can do: closed is final


async def test_a_pool_closed_before_it_started_starts_no_worker_and_removes_its_directory() -> None:
    pool = aioenv.Pool("CartPole-v1", 2)
    private_dir = pool._private_dir
    assert private_dir is not None
    assert os.path.isdir(private_dir)
    await pool.aclose()
    assert pool._life.state is Phase.CLOSED
    assert pool._runner is None
    assert not os.path.exists(private_dir)
    with pytest.raises(PoolClosed):
        await pool.start()


async def test_a_start_that_fails_closes_pool_and_coordinator() -> None:
    pool = aioenv.Pool("tests.envs.faulty:make_probe", 2, num_workers=1, env_kwargs={"no_such_argument": 1})
    with pytest.raises(EnvError):
        await asyncio.wait_for(pool.start(), HANG)
    coord = _coordinator(pool)
    assert pool._life.state is Phase.CLOSED
    assert coord.life.state is Phase.CLOSED
    assert not workers_of(os.getpid())


async def test_a_pool_closed_while_it_starts_refuses_to_run_and_leaves_no_worker() -> None:
    pool = aioenv.Pool("tests.envs.faulty:make_probe", 2, num_workers=1, env_kwargs={"init_seconds": 1.0})
    task = asyncio.create_task(pool.start())
    await _until_starting(pool, task)
    pids = [slot.proc.pid for slot in _coordinator(pool).slots if slot.proc is not None]
    await asyncio.wait_for(pool.aclose(), HANG)
    with pytest.raises(PoolClosed):
        await asyncio.wait_for(task, HANG)
    assert pool._life.state is Phase.CLOSED
    assert _coordinator(pool).life.state is Phase.CLOSED
    assert all(isinstance(pid, int) and process_gone(pid) for pid in pids)

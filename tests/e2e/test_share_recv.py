"""A share (envs stepped in this process while a worker process steps the rest) under ``send``/``recv``.

``send`` does not step the envs here: they wait until the caller would wait (``recv``), which first reads the
worker's replies that have arrived, or for the loop's second turn. Stepped inside ``send`` they would always be
ready first, and a first-finished ``recv`` would hand them out again and again while the worker's reply waited.
Real worker processes, real pipes and CartPole.
"""

from __future__ import annotations

import asyncio
import select
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.core import costs
from aioenv.core.coordinator import Coordinator
from aioenv.transport.pipe import PipePort
from tests.support.placement import placed
from tests.support.procs import HANG

N, HERE = 4, 2  # envs 0 and 1 here, 2 and 3 on one worker process


@pytest.fixture
def share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pool of the test shares its envs: the first ``HERE`` in this process, the rest on one worker."""
    monkeypatch.setattr(costs, "choose", placed(costs.Choice("inline", 1, HERE, "the test's placement")))


async def guard(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, HANG)


def _coordinator(pool: aioenv.Pool) -> Coordinator:
    coord = pool._core()
    assert isinstance(coord, Coordinator)
    return coord


def _wait_for_reply(coord: Coordinator) -> None:
    """Block (no turn of the loop) until the worker's reply waits in its pipe."""
    port = getattr(coord.slots[1].proc, "port", None)
    assert isinstance(port, PipePort)
    readable, _, _ = select.select([port._sock], [], [], HANG)
    assert readable, "the worker did not answer"


async def test_recv_hands_out_the_workers_rows_that_arrived_before_stepping_the_envs_here(share: None) -> None:
    async with aioenv.Pool("CartPole-v1", N, batch_size=2, seed=0, allow_in_process=True) as pool:
        assert (pool.envs_in_process, pool.num_workers) == (HERE, 1)
        await guard(pool.reset())
        coord = _coordinator(pool)
        pool.send(np.zeros(N, dtype=np.int64))
        assert coord.deferred_here()  # send stepped nothing here
        _wait_for_reply(coord)
        *_, info = await pool.recv()
        assert sorted(info["env_id"].tolist()) == [2, 3]  # the worker's, read first
        assert coord.deferred_here()  # and the envs here were not stepped for it
        *_, info = await pool.recv()
        assert sorted(info["env_id"].tolist()) == [0, 1]
        assert not coord.deferred_here()


async def test_rows_no_recv_asked_for_are_stepped_on_the_loops_second_turn(share: None) -> None:
    async with aioenv.Pool("CartPole-v1", N, batch_size=2, seed=0, allow_in_process=True) as pool:
        await guard(pool.reset())
        coord = _coordinator(pool)
        pool.send(np.zeros(HERE, dtype=np.int64), np.arange(HERE))
        assert coord.deferred_here()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not coord.deferred_here()
        assert pool._recv.ready == HERE  # stepped with no recv waiting: queued for the next one
        *_, info = await guard(pool.recv(timeout=0))
        assert sorted(info["env_id"].tolist()) == [0, 1]


async def test_a_recv_in_a_task_of_its_own_gets_every_row(share: None) -> None:
    """``asyncio.wait_for`` runs the recv in a task of its own, a turn after the send: the rows still come."""
    async with aioenv.Pool("CartPole-v1", N, batch_size=N, seed=0, allow_in_process=True) as pool:
        await guard(pool.reset())
        for _ in range(20):
            pool.send(np.zeros(N, dtype=np.int64))
            obs, *_, info = await guard(pool.recv())
            assert sorted(info["env_id"].tolist()) == list(range(N))
            assert obs.shape == (N, 4)


async def test_first_finished_recv_steps_every_env_of_a_share(share: None) -> None:
    """The EnvPool loop (recv the first 2 rows, send them back): the worker's envs step too. Had send stepped the
    envs here, they would be the first 2 rows of every recv, and the worker's would never step again."""
    async with aioenv.Pool("CartPole-v1", N, batch_size=2, seed=0, allow_in_process=True) as pool:
        await guard(pool.reset())
        steps = np.zeros(N, dtype=np.int64)
        pool.send(np.zeros(N, dtype=np.int64))
        for _ in range(20_000):
            *_, info = await pool.recv()  # in this task: no turn of the loop unless it waits (pytest-timeout guards)
            ids = info["env_id"]
            steps[ids] += 1
            if steps.min() >= 5:
                break
            pool.send(np.zeros(ids.size, dtype=np.int64), ids)
        assert steps.min() >= 5, steps
        await guard(pool.recv(min_results=N - 2, max_results=N, timeout=HANG))


async def test_closing_with_rows_deferred_answers_them(share: None) -> None:
    """A pool closed while the envs here still wait to step: their recv is failed, nothing hangs."""
    pool = aioenv.Pool("CartPole-v1", N, batch_size=N, seed=0, allow_in_process=True)
    async with pool:
        await guard(pool.reset())
        pool.send(np.zeros(HERE, dtype=np.int64), np.arange(HERE))
    with pytest.raises(aioenv.PoolClosed):
        await guard(pool.recv())

"""The seam's contract (:class:`aioenv.core.runner.Runner`), held by every runner: a local coordinator (a worker
process) and a remote one (a client of a real ``aioenv serve``).

What the contract promises about claims: a call that raises has claimed nothing and sent nothing; a call that
returns answers every row once. The tests drive each runner as a pool does (``pool._runner``), then check through
the pool's public calls that no env was left claimed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.core.lifecycle import Phase
from aioenv.core.runner import Runner
from aioenv.core.sinks import Gather
from aioenv.errors import ConnectionLost, PoolClosed, UsageError
from tests.support.procs import HANG
from tests.support.servers import ServerProcess

N = 3


@pytest.fixture(params=["local", "remote"])
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[aioenv.Pool]:
    endpoint = request.getfixturevalue("cartpole_server").endpoint if request.param == "remote" else None
    options: dict[str, Any] = {"endpoint": endpoint} if endpoint else {"num_workers": 1, "executor": "inline"}
    p = await asyncio.wait_for(aioenv.make("CartPole-v1", N, seed=0, **options), HANG)
    try:
        await asyncio.wait_for(p.reset(), HANG)
        yield p
    finally:
        await asyncio.wait_for(p.aclose(), HANG)


def _runner(pool: aioenv.Pool) -> Runner:
    runner = pool._runner
    assert runner is not None
    return runner


def _sink(pool: aioenv.Pool, ids: np.ndarray) -> Gather:
    return Gather("step", ids, pool.single_observation_space)


async def _all_free(pool: aioenv.Pool) -> None:
    """Every env takes a step: none was left claimed."""
    obs, reward, *_ = await asyncio.wait_for(pool.step(np.zeros(N, dtype=np.int64)), HANG)
    assert obs.shape == (N, 4)
    assert reward.shape == (N,)


async def test_a_call_with_a_busy_env_raises_and_claims_none_of_its_envs(pool: aioenv.Pool) -> None:
    runner = _runner(pool)
    busy = pool.step_env(0, 1)  # in flight: its reply needs a turn of the loop
    ids = runner.resolve([1, 0, 2])
    sink = _sink(pool, ids)
    with pytest.raises(UsageError, match="env 0 already has a request in flight") as caught:
        runner.step(ids, [np.zeros(3, dtype=np.int64)], sink, info_list=False, timeout=None)
    assert caught.value.env_id == 0
    assert not sink.future.done()  # nothing came to the sink
    await asyncio.wait_for(busy, HANG)
    await _all_free(pool)  # envs 1 and 2 were not claimed by the refused call


async def test_a_call_the_wire_cannot_carry_raises_and_leaves_every_env_free(pool: aioenv.Pool) -> None:
    runner = _runner(pool)
    ids = runner.resolve(None)
    with pytest.raises(UsageError, match="cannot"):
        runner.call(ids, {"kind": "call", "name": "reset", "args": [object()], "kw": {}}, None, _sink(pool, ids))
    await _all_free(pool)


async def test_a_call_that_returns_answers_every_row_once(pool: aioenv.Pool) -> None:
    runner = _runner(pool)
    ids = runner.resolve([2, 0])
    sink = Gather("step", ids, pool.single_observation_space)
    runner.step(ids, [np.array([1, 0], dtype=np.int64)], sink, info_list=False, timeout=None)
    obs, reward, _terminated, _truncated, info = await asyncio.wait_for(sink.future, HANG)
    assert info["env_id"].tolist() == [2, 0]  # rows at their positions in the call
    assert reward.tolist() == [1.0, 1.0]
    assert obs.shape == (2, 4)
    await _all_free(pool)


async def test_a_closed_runner_refuses_calls_and_claims_nothing(pool: aioenv.Pool) -> None:
    runner = _runner(pool)
    ids = runner.resolve(None)
    await asyncio.wait_for(runner.aclose(), HANG)
    with pytest.raises(PoolClosed):
        runner.step(ids, [np.zeros(N, dtype=np.int64)], _sink(pool, ids), info_list=False, timeout=None)
    with pytest.raises(PoolClosed):
        runner.reset(ids, [None] * N, None, _sink(pool, ids), timeout=None)
    assert runner.life.state is Phase.CLOSED  # type: ignore[attr-defined]


async def test_action_rows_that_do_not_fit_the_shared_rows_free_their_claim() -> None:
    """An adapter hands the pool its own checked leaves (``checked=True``); leaves that do not fit the pool's
    shared rows raise, and their envs are free again (they stayed claimed, every later step refused)."""
    async with aioenv.Pool("CartPole-v1", N, num_workers=1, executor="inline", seed=0) as pool:
        await pool.reset()
        with pytest.raises(ValueError, match="broadcast"):
            pool._start_step([np.zeros((N, 3), dtype=np.int64)], None, checked=True)
        await _all_free(pool)


async def test_a_remote_runner_that_lost_its_server_raises_connection_lost() -> None:
    srv = ServerProcess("--allow-env", "CartPole-v1")
    try:
        pool = await asyncio.wait_for(aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint), HANG)
    finally:
        srv.stop()  # tells its clients it shuts down
    try:
        runner = _runner(pool)
        deadline = asyncio.get_running_loop().time() + HANG
        while runner.life.state is not Phase.LOST:  # type: ignore[attr-defined]
            assert asyncio.get_running_loop().time() < deadline, "the client never heard the server was gone"
            await asyncio.sleep(0.02)
        ids = runner.resolve(None)
        with pytest.raises(ConnectionLost, match="shut down"):
            runner.step(ids, [np.zeros(2, dtype=np.int64)], _sink(pool, ids), info_list=False, timeout=None)
        with pytest.raises(ConnectionLost):
            await pool.step(np.zeros(2, dtype=np.int64))
    finally:
        await asyncio.wait_for(pool.aclose(), HANG)
    assert runner.life.state is Phase.CLOSED  # type: ignore[attr-defined]

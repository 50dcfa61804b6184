"""A pool over envs whose space is huge (a 40 MiB ``Box``): its description crosses from the worker process, and a
server: in a few bytes with uniform bounds, with bounds that differ element by element as frames (a header of
them would pass the protocol's limit); observations of the whole size arrive."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import aioenv
from tests.envs.hugebox import SHAPE, HugeBoxEnv, make_ramped
from tests.envs.hugebox import make_huge as make_plain
from tests.support.servers import ServerProcess

FACTORIES = ["tests.envs.hugebox:make_huge", "tests.envs.hugebox:make_ramped"]


async def _one_pool(env: str, endpoint: str | None) -> None:
    # Made before the pool opens, and compared in a thread: building the ramped bounds, and comparing two spaces of
    # them, take seconds on a loaded machine, and a remote pool whose loop sends no heartbeat for the server's client
    # timeout (10 s) is dropped by the server.
    expected = make_huge(env).observation_space
    async with aioenv.Pool(env, 1, num_workers=1, executor="inline", endpoint=endpoint) as pool:
        assert await asyncio.to_thread(lambda: pool.single_observation_space == expected)
        obs, _ = await pool.reset(seed=0)
        assert obs.shape == (1, *SHAPE)
        assert obs.dtype == np.uint8
        obs, *_ = await pool.step(np.ones(1, dtype=np.int64))
        low = pool.single_observation_space.low
        assert obs[0, 0, 0, 0] == low[0, 0, 0] + 1
        np.testing.assert_array_equal(obs[0, 1:], low[1:])


def make_huge(env: str) -> HugeBoxEnv:
    return make_ramped() if env.endswith("ramped") else make_plain()


@pytest.mark.parametrize("env", FACTORIES)
async def test_a_local_pool_over_a_worker_process(env: str) -> None:
    await _one_pool(env, None)


@pytest.mark.parametrize("env", FACTORIES)
async def test_a_remote_pool(env: str) -> None:
    srv = ServerProcess("--allow-env", "tests.envs.hugebox:*")
    try:
        await _one_pool(env, srv.endpoint)
    finally:
        srv.stop()

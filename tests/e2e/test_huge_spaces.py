"""A pool over envs whose space is huge (a 40 MiB ``Box`` with uniform bounds): its description crosses from the
worker process, and a server, in a few bytes, and observations of the whole size arrive."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces as gs

import aioenv
from tests.envs.hugebox import SHAPE
from tests.support.servers import ServerProcess

HUGE = "tests.envs.hugebox:make_huge"


async def _one_pool(endpoint: str | None) -> None:
    async with aioenv.Pool(HUGE, 1, num_workers=1, executor="inline", endpoint=endpoint) as pool:
        assert pool.single_observation_space == gs.Box(0, 255, SHAPE, np.uint8)
        obs, _ = await pool.reset(seed=0)
        assert obs.shape == (1, *SHAPE)
        assert obs.dtype == np.uint8
        obs, *_ = await pool.step(np.ones(1, dtype=np.int64))
        assert obs[0, 0, 0, 0] == 1
        assert not obs[0, 1:].any()


async def test_a_local_pool_over_a_worker_process() -> None:
    await _one_pool(None)


async def test_a_remote_pool() -> None:
    srv = ServerProcess("--allow-env", "tests.envs.hugebox:make_huge")
    try:
        await _one_pool(srv.endpoint)
    finally:
        srv.stop()

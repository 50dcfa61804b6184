"""``max_worker_rss``: a worker whose envs leak is replaced once over the limit, its envs re-made and their
callers told (EnvRemade at the next step); a reset and the pool goes on. Real worker processes, real memory."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import aioenv
from aioenv.core.memory import rss_bytes
from aioenv.errors import EnvRemade
from tests.support.procs import HANG, worker_pid

MIB = 1 << 20
LIMIT = 160 * MIB


async def test_a_worker_over_max_worker_rss_is_recycled_and_its_envs_say_so() -> None:
    async with aioenv.Pool(
        "tests.envs.leaky:LeakyEnv", 2, num_workers=1, max_worker_rss=LIMIT, env_kwargs={"leak_mib": 8}
    ) as pool:
        await pool.reset(seed=0)
        first = worker_pid(pool, 0)
        remade: EnvRemade | None = None
        async with asyncio.timeout(HANG):
            while remade is None:
                try:
                    await pool.step(np.zeros(2, np.int64))
                except EnvRemade as err:
                    remade = err
                await asyncio.sleep(0.05)
        assert worker_pid(pool, 0) != first
        assert sorted(remade.errors) == [0, 1]
        message = remade.errors[0].message
        assert f"its worker {pool._runner.slots[0].name.rsplit('.', 1)[0]}." in message
        assert "was recycled: its memory (RSS" in message
        assert "passed max_worker_rss (160 MiB)" in message
        await pool.reset(seed=1)
        obs, *_ = await pool.step(np.zeros(2, np.int64))
        assert obs[:, 0].tolist() == [1.0, 1.0]  # fresh envs: one step kept
        fresh = rss_bytes(worker_pid(pool, 0))
        assert fresh is not None
        assert fresh < LIMIT


def test_max_worker_rss_must_be_a_positive_number_of_bytes() -> None:
    with pytest.raises(ValueError, match=r"max_worker_rss must be a positive number of bytes, got -1"):
        aioenv.Pool("CartPole-v1", 2, max_worker_rss=-1)

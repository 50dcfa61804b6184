"""A lock-step recorded whole (``Engine._record_all``) keeps each row's info when asked (``keep_info``), as the
row-by-row recording does: row i of a whole step is row i of its batched info."""

from __future__ import annotations

import asyncio

import numpy as np

import aioenv
from aioenv.collect.chunk import row_info
from aioenv.collect.engine import Engine
from aioenv.collect.options import Options
from aioenv.collect.policy import PolicyRunner
from tests.support.procs import HANG


async def test_a_whole_lock_step_keeps_each_rows_info_when_asked() -> None:
    async with aioenv.Pool("tests.envs.faulty:make_info", 3, num_workers=1, seed=0) as pool:
        runner = PolicyRunner(lambda obs: np.zeros(3, dtype=np.int64), pool.single_action_space)
        engine = Engine(pool, runner, Options.checked(frames_per_batch=3), keep_info=True)
        await asyncio.wait_for(engine.start(), HANG)
        chunk = await asyncio.wait_for(engine.lockstep(), HANG)
        assert chunk.info is not None
        assert chunk.info_row is not None
        assert chunk.info_row.tolist() == [0, 1, 2]
        rows = [row_info(chunk.info, int(r)) for r in chunk.info_row]
        assert all(rows), rows  # every row's own info, none empty

"""Worker processes raise the cyclic collector's first threshold (``workers.__main__.GC_THRESHOLD``: every step
in flight would otherwise be walked by hundreds of young-generation collections a second); the pool's own
process, and envs stepped in it, keep the interpreter's.

The thresholds are read inside real worker processes of every executor, through an env method.
"""

from __future__ import annotations

import gc

import pytest

import aioenv
from tests.envs.waiting import AsyncWaitEnv, WaitEnv
from tests.support.procs import HANG
from workers.__main__ import GC_THRESHOLD


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
async def test_worker_processes_collect_young_objects_less_often(executor: str) -> None:
    env = AsyncWaitEnv if executor == "async" else WaitEnv
    ours = gc.get_threshold()
    async with aioenv.Pool(env, 2, num_workers=2, executor=executor) as pool:
        thresholds = [tuple(t) for t in await pool.call("gc_threshold")]
    assert thresholds == [(GC_THRESHOLD, 10, 10)] * 2  # only the first changed (CPython starts at 700, 10, 10)
    assert gc.get_threshold() == ours


@pytest.mark.timeout(HANG)
async def test_envs_stepped_in_the_callers_process_keep_its_collector() -> None:
    async with aioenv.Pool(WaitEnv, 2, executor="in_process") as pool:
        assert [tuple(t) for t in await pool.call("gc_threshold")] == [gc.get_threshold()] * 2

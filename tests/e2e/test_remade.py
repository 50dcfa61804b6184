"""An env that was idle when its worker died is re-made; its next step says so as a crash (EnvRemade, a
WorkerCrashed), naming the worker and how it died, not as a usage error. Real worker processes, real
SIGKILLs; local pools of every executor, and a remote pool through a real server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.errors import EnvRemade, WorkerCrashed
from tests.support.procs import HANG, wait_new_worker, worker_pid
from tests.support.servers import ServerProcess

ASYNC_SLEEP = "aioenv.envs.latency:AsyncSleepEnv"
EXECUTORS = [("inline", "CartPole-v1", {}), ("thread", "CartPole-v1", {}), ("async", ASYNC_SLEEP, {"mean": 0.001})]


async def guard(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, HANG)


def _check(err: EnvRemade, env_ids: list[int], worker: str) -> None:
    assert isinstance(err, WorkerCrashed)  # one `except WorkerCrashed` handles every crash
    assert sorted(err.errors) == env_ids
    for env_id, each in err.errors.items():
        assert isinstance(each, EnvRemade)
        assert each.worker == worker
        assert each.exitcode == -signal.SIGKILL
        assert (
            f"env {env_id} was re-made on a fresh worker since its last reset, while it had no request in flight: "
            f"its worker {worker} (pid" in each.message
        )
        assert "was killed by SIGKILL; reset it before stepping" in each.message


@pytest.mark.parametrize(("executor", "env", "kwargs"), EXECUTORS, ids=[e for e, _, _ in EXECUTORS])
async def test_an_idle_env_whose_worker_died_says_so_as_a_crash(executor: str, env: str, kwargs: dict) -> None:
    async with aioenv.Pool(env, 4, num_workers=2, executor=executor, env_kwargs=kwargs, seed=0) as pool:
        await guard(pool.reset())
        actions = np.zeros(4, np.int64)
        await guard(pool.step(actions))
        lost = sorted(pool._runner.sched.envs_of(1).tolist())
        old, name = worker_pid(pool, 1), pool._runner.slots[1].name
        os.kill(old, signal.SIGKILL)  # no request in flight: nobody is told now
        await wait_new_worker(pool, 1, old)
        with pytest.raises(EnvRemade) as caught:
            await guard(pool.step(actions))
        _check(caught.value, lost, name)
        kept = [i for i in range(4) if i not in lost]
        assert caught.value.partial[4]["env_id"].tolist() == kept  # the other worker's rows came through
        await guard(pool.reset(env_ids=lost))  # a reset is all it takes
        _, reward, *_ = await guard(pool.step(actions))
        assert reward.shape == (4,)


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess("--allow-env", "CartPole-v1")
    try:
        yield srv
    finally:
        srv.stop()


async def test_a_remote_pool_hears_of_it_as_a_crash_too(server: ServerProcess) -> None:
    async with aioenv.Pool("CartPole-v1", 2, endpoint=server.endpoint, num_workers=2, seed=0) as pool:
        await guard(pool.reset())
        before = sorted(server.workers())
        assert len(before) == 2
        os.kill(before[1], signal.SIGKILL)  # one of the server's two workers, idle
        async with asyncio.timeout(HANG):
            while len(set(server.workers()) - set(before)) < 1 or len(server.workers()) < 2:
                await asyncio.sleep(0.05)  # the server has started a fresh worker
        remade: EnvRemade | None = None
        while remade is None:  # until the fresh worker has re-made the env (a step before that waits behind it)
            try:
                await guard(pool.step(np.zeros(2, np.int64)))
            except EnvRemade as err:
                remade = err
            await asyncio.sleep(0.05)
        assert len(remade.errors) == 1
        ((env_id, err),) = remade.errors.items()
        assert isinstance(err, EnvRemade)
        assert err.exitcode == -signal.SIGKILL
        assert "was killed by SIGKILL" in err.message
        await guard(pool.reset(env_ids=[env_id]))
        await guard(pool.step(np.zeros(2, np.int64)))

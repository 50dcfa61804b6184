"""Processes an env starts (a browser, a simulator) end with its worker: each worker leads a process group of
its own, ended when the worker exits, is killed or its pool closes. Local pools and worker hosts alike."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import aioenv
from tests.support.procs import HANG, process_gone, wait_new_worker, worker_pid
from tests.support.servers import ServerProcess, WorkerHostProcess

SPAWNING = "tests.envs.spawning:SpawningEnv"


async def _gone(pids: list[int]) -> None:
    async with asyncio.timeout(HANG):
        while not all(process_gone(pid, marker="sleep") for pid in pids):
            await asyncio.sleep(0.05)


async def test_an_envs_processes_end_with_its_worker_and_its_pool() -> None:
    async with aioenv.Pool(SPAWNING, 4, num_workers=2) as pool:
        _, info = await pool.reset()
        children = info["child_pid"].tolist()
        assert not any(process_gone(pid, marker="sleep") for pid in children)
        lost = pool._runner.sched.envs_of(1).tolist()
        old = worker_pid(pool, 1)
        os.kill(old, signal.SIGKILL)  # the worker dies: the processes its envs started go with it
        await wait_new_worker(pool, 1, old)
        await _gone([children[i] for i in lost])
        assert not any(process_gone(children[i], marker="sleep") for i in range(4) if i not in lost)
        _, info = await pool.reset()
        children = info["child_pid"].tolist()
    await _gone(children)  # closed: every env's process is gone too


@pytest.mark.timeout(120)
def test_on_a_worker_host_too() -> None:
    srv = ServerProcess(
        "--allow-env", "tests.envs.*:*", "--worker-bind", "tcp://127.0.0.1:0", "--local-capacity", "0"
    )  # fmt: skip
    host = WorkerHostProcess(srv.worker_endpoint, name="host-a", capacity=8)
    try:
        host.wait_joined()

        async def main() -> list[int]:
            async with aioenv.Pool(SPAWNING, 2, endpoint=srv.endpoint, num_workers=1) as pool:
                _, info = await pool.reset()
                return [int(pid) for pid in info["child_pid"]]

        children = aioenv.run(main())
        aioenv.run(_gone(children))  # the pool closed: its worker on the host ended, and its envs' processes
    finally:
        host.stop()
        srv.stop()

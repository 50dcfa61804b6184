"""The soak's two scenarios: a local pool of one executor, and a server with worker hosts and clients.

Each returns a :class:`~tests.chaos.harness.Tally`; see :mod:`tests.chaos.harness` for the traffic, the
faults and the invariants.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import zmq

import aioenv
from aioenv.core import remote
from aioenv.server.status import fetch_status
from tests.chaos.harness import (
    STEP_TIMEOUT,
    Leaks,
    Tally,
    drive_pool,
    hit_workers,
    pause,
    settled_leaks,
    worker_pids,
)
from tests.support.procs import HANG
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess, WorkerHostProcess

ENVS = {
    "inline": "tests.envs.chaotic:ChaosEnv",
    "thread": "tests.envs.chaotic:ChaosEnv",
    "async": "tests.envs.chaotic:AsyncChaosEnv",
}
OPTIONS = {"step_timeout": STEP_TIMEOUT, "reset_timeout": 2 * STEP_TIMEOUT}
#: Seconds a remote client waits for a silent server in the soak (the default is 10): a paused server
#: outlasts it, so the clients see ConnectionLost and open new pools.
PATIENCE = 2.5


async def _run_for(seconds: float, stop: asyncio.Event, *tasks: Awaitable[Any]) -> None:
    """Run ``tasks`` for ``seconds``, then set ``stop`` and wait for them (the hang guard on top)."""
    running = [asyncio.ensure_future(t) for t in tasks]
    await asyncio.wait(running, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    stop.set()
    ended = await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), HANG + 3 * STEP_TIMEOUT)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome


async def _warm_up() -> None:
    """Start what this process keeps for its whole life once it is first used (ZeroMQ's I/O thread and its
    descriptors, the event loop's /dev/null for subprocesses), so that it does not count as leaked."""
    zmq.Context.instance().socket(zmq.DEALER).close(linger=0)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )  # as the doomed clients are started (uvloop keeps a /dev/null descriptor from the first on)
    assert proc.stdout is not None
    await proc.stdout.read()
    await proc.wait()


async def local_soak(
    executor: str, seconds: float, seed: int, *, num_envs: int = 16, workers: int = 4, tally: Tally | None = None
) -> Tally:
    """A local pool of ``num_envs`` chaos envs on ``workers`` worker processes, its workers SIGKILLed and
    SIGSTOPped at random for ``seconds``. Counts go to ``tally`` (a new one by default) as they happen."""
    tally, rng, stop = tally or Tally(), random.Random(seed), asyncio.Event()
    await _warm_up()
    before = Leaks.now()
    pool = await aioenv.make(ENVS[executor], num_envs, num_workers=workers, executor=executor, **OPTIONS)
    try:
        me = os.getpid()
        await _run_for(
            seconds, stop, drive_pool(pool, rng, stop, tally), hit_workers(lambda: worker_pids(me), rng, stop, tally)
        )
    finally:
        await pool.aclose()
    tally.leaks = await settled_leaks(before)
    return tally


# A client process that opens a pool and steps it until it is SIGKILLed.
_DOOMED_CLIENT = """
import sys, numpy as np, aioenv
async def main():
    async with aioenv.Pool("tests.envs.chaotic:ChaosEnv", 4, endpoint=sys.argv[1], num_workers=1) as pool:
        await pool.reset()
        print("stepping", flush=True)
        while True:
            await pool.step(np.ones(4, np.int64))
aioenv.run(main())
"""


async def _doomed_clients(endpoint: str, rng: random.Random, stop: asyncio.Event, tally: Tally) -> None:
    """Every 1-3 s a client process opens a pool, steps, and is SIGKILLed 0.3-1.5 s into its steps."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(1.0, 3.0))
        if stop.is_set():
            return
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _DOOMED_CLIENT, endpoint, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.stdout.readline(), HANG)
            await asyncio.sleep(rng.uniform(0.3, 1.5))
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        tally.faults["client process SIGKILL mid-step"] += 1


async def _remote_client(endpoint: str, executor: str, rng: random.Random, stop: asyncio.Event, tally: Tally) -> None:
    """A client in this process: a pool of 8 envs, driven; after ConnectionLost it opens a new one."""
    while not stop.is_set():
        try:
            pool = await aioenv.make(ENVS[executor], 8, endpoint=endpoint, num_workers=2, executor=executor, **OPTIONS)
        except (aioenv.ConnectionLost, aioenv.CapacityError):  # the server is paused, or its hosts rejoin
            await asyncio.sleep(0.2)
            continue
        except aioenv.WorkerCrashed as exc:  # placed on a host SIGKILLed a moment before, which is then dropped
            if "while making its envs" not in str(exc):
                raise
            await asyncio.sleep(0.2)
            continue
        try:
            await drive_pool(pool, rng, stop, tally)
        finally:
            await pool.aclose()


async def _pause_hosts(hosts: list[WorkerHostProcess], rng: random.Random, stop: asyncio.Event, tally: Tally) -> None:
    """Every 3-6 s a worker host is stopped for 0.5-1.5 s (less than the server's --worker-timeout)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(3.0, 6.0))
        if not stop.is_set():
            tally.faults["worker host SIGSTOP 0.5-1.5 s"] += 1
            await pause(rng.choice(hosts).proc.pid, rng.uniform(0.5, 1.5))


async def _kill_hosts(
    hosts: list[WorkerHostProcess],
    retired: list[WorkerHostProcess],
    first: float,
    rng: random.Random,
    stop: asyncio.Event,
    tally: Tally,
) -> None:
    """``first`` seconds in, then every 8-15 s: a worker host SIGKILLed (its workers die with it) and a new one
    started under its name, which joins once the server has written the dead one off."""
    wait = first
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
        if stop.is_set():
            return
        i = rng.randrange(len(hosts))
        old = hosts[i]
        old.proc.kill()
        while old.proc.poll() is None:  # (not a thread: the harness counts threads left behind)
            await asyncio.sleep(0.02)
        retired.append(old)
        hosts[i] = WorkerHostProcess(*old.args, name=old.name, capacity=old.capacity)
        tally.faults["worker host SIGKILL, a new one started"] += 1
        wait = rng.uniform(8.0, 15.0)


async def _pause_server(srv: ServerProcess, after: float, stop: asyncio.Event, tally: Tally) -> None:
    """Once, ``after`` seconds in: the server stopped for longer than its clients' patience."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), after)
    if not stop.is_set():
        tally.faults[f"server SIGSTOP {PATIENCE + 1:g} s"] += 1
        await pause(srv.proc.pid, PATIENCE + 1)


@contextlib.contextmanager
def _patience(seconds: float) -> Iterator[None]:
    saved = remote.SERVER_TIMEOUT
    remote.SERVER_TIMEOUT = seconds
    try:
        yield
    finally:
        remote.SERVER_TIMEOUT = saved


async def server_soak(seconds: float, seed: int, *, pause_server: bool = True, tally: Tally | None = None) -> Tally:
    """``aioenv serve`` with two worker hosts, two clients in this process (inline and async pools) and
    client processes that are SIGKILLed mid-step; the hosts' workers SIGKILLed and SIGSTOPped, the hosts
    stopped for a while or SIGKILLed (and started again), the server paused once (``pause_server``). Counts
    go to ``tally`` as they happen."""
    tally, rng, stop = tally or Tally(), random.Random(seed), asyncio.Event()
    await _warm_up()
    before = Leaks.now()
    srv = ServerProcess(
        "--allow-env", "tests.envs.chaotic:*", "--worker-bind", "tcp://127.0.0.1:0", "--local-capacity", "0",
        "--worker-timeout", "3", "--client-timeout", "3",
    )  # fmt: skip
    hosts: list[WorkerHostProcess] = []
    retired: list[WorkerHostProcess] = []
    try:
        for name, executor in (("host-a", "inline"), ("host-b", "async")):  # a host runs one executor
            host = WorkerHostProcess(srv.worker_endpoint, "--executor", executor, name=name, capacity=64)
            hosts.append(host.wait_joined())
        tasks: list[Awaitable[Any]] = [
            _remote_client(srv.endpoint, "inline", random.Random(rng.random()), stop, tally),
            _remote_client(srv.endpoint, "async", random.Random(rng.random()), stop, tally),
            hit_workers(_host_workers(hosts), rng, stop, tally, label="host's worker"),
            _pause_hosts(hosts, rng, stop, tally),
            _kill_hosts(hosts, retired, 0.3 * seconds, random.Random(rng.random()), stop, tally),
            _doomed_clients(srv.endpoint, random.Random(rng.random()), stop, tally),
        ]
        if pause_server:
            tasks.append(_pause_server(srv, 0.6 * seconds, stop, tally))
        with _patience(PATIENCE):
            await _run_for(seconds, stop, *tasks)
        tally.leaks += await _sessions_left(srv.endpoint)
    finally:
        for host in [*retired, *hosts]:
            host.stop()
        srv.stop()
    tally.leaks += await settled_leaks(before)
    return tally


def _host_workers(hosts: list[WorkerHostProcess]) -> Callable[[], list[int]]:
    return lambda: [pid for host in hosts for pid in worker_pids(host.proc.pid)]


async def _sessions_left(endpoint: str) -> list[str]:
    """The server's sessions once every client is closed or reaped (none, unless one leaked)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG
    while (status := await fetch_status(endpoint))["sessions"] and loop.time() < deadline:
        await asyncio.sleep(0.2)
    return [f"server session {pool}" for pool in status["pools"]]


#: The scenarios by name: ``(seconds, seed, tally) -> Tally``.
SCENARIOS: dict[str, Callable[[float, int, Tally], Awaitable[Tally]]] = {
    "local inline": lambda seconds, seed, tally: local_soak("inline", seconds, seed, tally=tally),
    "local thread": lambda seconds, seed, tally: local_soak("thread", seconds, seed, tally=tally),
    "local async": lambda seconds, seed, tally: local_soak("async", seconds, seed, tally=tally),
    "server": lambda seconds, seed, tally: server_soak(seconds, seed, tally=tally),
}

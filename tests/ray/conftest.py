"""What the Ray tests share: Ray's environment (a token to find every process it starts), an aioenv server in
the test's own event loop with its worker port open to the Ray nodes, and the checks that nothing is left.

Each test module starts one Ray cluster for all its tests (``ray.init`` costs seconds); this file starts none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from aioenv.server.server import Server, ServerConfig
from tests.support.procs import HANG, processes_with_env
from tests.support.scripts import ROOT

#: Set in the environment Ray's processes start with: every Ray process, actor, host and worker carries it.
TOKEN_VAR = "AIOENV_RAY_TEST_TOKEN"
#: Seconds of silence before the test server drops a worker host (short: the failure tests wait for it).
WORKER_TIMEOUT = 3.0
ALLOW = ("CartPole-v1", "tests.envs.*:*", "aioenv.envs.*:*")
ALLOW_KWARGS = ("tests.envs.*:*=*",)  # the test envs take any env_kwargs


@contextlib.contextmanager
def ray_environment() -> Iterator[str]:
    """Set, for the cluster about to start, a fresh token and this checkout on ``PYTHONPATH`` (the hosts'
    worker processes import ``tests.envs``); restore both after, and the SIGTERM handler that starting Ray
    replaces in this process. Yields the token."""
    token = uuid.uuid4().hex
    saved = {k: os.environ.get(k) for k in (TOKEN_VAR, "PYTHONPATH")}
    on_sigterm = signal.getsignal(signal.SIGTERM)
    os.environ[TOKEN_VAR] = token
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"] or "") if p)
    try:
        yield token
    finally:
        signal.signal(signal.SIGTERM, on_sigterm)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def host_processes(token: str) -> list[tuple[int, str]]:
    """Live worker hosts (``aioenv.ray.host``) and their worker processes (``-m workers``) of this cluster."""
    return [(pid, cmd) for pid, cmd in processes_with_env(token) if "aioenv.ray.host" in cmd or "-m workers" in cmd]


def wait_no_hosts(token: str, timeout: float = HANG) -> None:
    """Wait until no worker host or worker process of this cluster is left (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while left := host_processes(token):
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)


def wait_no_ray_processes(token: str, timeout: float = HANG) -> None:
    """After ``ray.shutdown()``: wait until no process of the cluster is left."""
    deadline = time.monotonic() + timeout
    while left := processes_with_env(token):
        assert time.monotonic() < deadline, f"Ray processes left behind: {left}"
        time.sleep(0.2)


async def until(predicate: Any, what: str, timeout: float = HANG) -> None:
    """Poll ``predicate()`` (a plain function) until it is true."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {timeout:g} s") from None


def loads(server: Server) -> dict[str, int]:
    """Envs placed on each worker host of ``server``."""
    return {row["name"]: row["envs"] for row in server.status()["hosts"]}


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """An aioenv server in this test's event loop: clients on loopback, worker hosts on every address (the
    hosts dial this node's address, never loopback); it runs no env itself."""
    config = ServerConfig(
        bind="tcp://127.0.0.1:0",
        worker_bind="tcp://0.0.0.0:0",
        insecure=True,  # the test's own Ray cluster, on this machine; test_local.py has a run with auth too
        local_capacity=0,
        allow=ALLOW,
        allow_kwargs=ALLOW_KWARGS,
        worker_timeout=WORKER_TIMEOUT,
    )
    srv = Server(config)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.aclose()

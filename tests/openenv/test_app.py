"""``openenv+app:pkg.module:app``: each worker serves the OpenEnv app from a server process of its own, started
again when it dies and gone when the pool closes; and the names a pool refuses."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid

import numpy as np
import pytest

import aioenv
from aioenv import EnvError, UsageError
from aioenv.core.sources import parse_sources
from aioenv.openenv.env import base_urls
from aioenv.openenv.source import AppEnv, LocalApp
from tests.support.openenv_server import APP, killed_client
from tests.support.procs import HANG, descendants, process_gone, processes_with_env

pytestmark = pytest.mark.timeout(240)


def _app_servers() -> list[int]:
    """Pids of the app servers this process's pools started (children of their workers)."""
    return [pid for pid, cmd in descendants(os.getpid()) if "aioenv.openenv.appserver" in cmd and APP in cmd]


async def _wait_no_app_servers() -> None:
    async with asyncio.timeout(HANG):
        while _app_servers():
            await asyncio.sleep(0.05)


async def test_a_pool_serves_the_app_itself_restarts_it_and_stops_it() -> None:
    async with asyncio.timeout(HANG * 4):  # two app servers start, each importing OpenEnv: seconds of CPU
        pool = await aioenv.make("openenv+app:" + APP, 2, executor="async", num_workers=1)
        try:
            (pid,) = _app_servers()
            await pool.reset()
            obs, rew, *_ = await pool.step_env(1, {"word": "solo", "delay": 0.0, "fail": 0})
            assert obs["echoed"] == "solo"
            assert rew == 0.5
            os.kill(pid, signal.SIGKILL)
            words = np.empty(2, dtype=object)
            words[:] = ["a", "b"]
            with pytest.raises(EnvError, match="OpenEnvConnectionError"):
                await pool.step({"word": words, "delay": np.zeros(2), "fail": np.zeros(2, dtype=np.int64)})
            obs, _ = await pool.reset()  # the app's server is started again
            (new,) = _app_servers()
            assert new != pid
            assert process_gone(pid, "appserver")
            obs, *_ = await pool.step({"word": words, "delay": np.zeros(2), "fail": np.zeros(2, dtype=np.int64)})
            assert obs["echoed"].tolist() == ["a", "b"]
        finally:
            await pool.aclose()
        await _wait_no_app_servers()


async def test_an_app_server_whose_process_runs_but_refuses_sessions_is_replaced() -> None:
    """What a server killed a moment ago looks like until it is reaped: its process is there, its port refuses."""
    app = LocalApp(APP)
    await asyncio.to_thread(app.start)
    env = AppEnv(app)
    sleeper = None
    try:
        assert app.proc is not None
        app.proc.kill()
        app.proc.wait()
        sleeper = app.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        async with asyncio.timeout(HANG * 2):
            obs, _ = await env.reset()
            assert obs["echoed"] == ""
        assert app.proc is not sleeper
        assert app.alive()
        assert sleeper.poll() is not None  # the broken one was stopped, not left behind
    finally:
        await env.close()
        app.stop()
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


async def test_a_killed_client_leaves_no_app_server() -> None:
    """SIGKILL the process that made the pool: its worker dies with it, and the worker's app server follows."""
    token = uuid.uuid4().hex
    async with killed_client("openenv+app:" + APP, token, ready_within=HANG * 4):
        assert any(APP in cmd for _, cmd in processes_with_env(token))  # the app server runs
    async with asyncio.timeout(HANG):
        while processes_with_env(token):
            await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "name",
    ["openenv+ftp://host:1", "openenv+ws://", "openenv+app:nomodule", "openenv+app:a:b:c", "openenv+ws:/x"],
)
def test_a_malformed_name_is_refused_naming_the_forms(name: str) -> None:
    with pytest.raises(ValueError, match=r"openenv\+ws://HOST:PORT|openenv\+app:pkg.module:app"):
        parse_sources(name, 2, None, None)


@pytest.mark.parametrize(
    ("url", "http", "ws"),
    [
        ("ws://h:1", "http://h:1", "ws://h:1/ws"),
        ("http://h:1/", "http://h:1", "ws://h:1/ws"),
        ("https://h/env/ws", "https://h/env", "wss://h/env/ws"),
        ("wss://h:2/a", "https://h:2/a", "wss://h:2/a/ws"),
    ],
)
def test_a_servers_url_gives_its_schema_and_session_urls(url: str, http: str, ws: str) -> None:
    assert base_urls(url) == (http, ws)


def test_a_servers_pool_opens_no_openenv_sessions() -> None:
    with pytest.raises(UsageError, match="does not open OpenEnv sessions"):
        parse_sources("openenv+ws://127.0.0.1:9", 2, None, None, strict=True)

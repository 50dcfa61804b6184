"""A real OpenEnv server process for the tests: :mod:`tests.support.openenv_app` served by ``uvicorn`` on a loopback
port, started, killed and started again (on the same port) by the test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import AsyncIterator, Mapping

from tests.support.procs import HANG
from tests.support.scripts import ROOT

__all__ = ["APP", "CLIENT", "OpenEnvServer", "free_port", "killed_client"]

#: The test app, as uvicorn and ``openenv+app:`` name it.
APP = "tests.support.openenv_app:app"


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpenEnvServer:
    """``python -m uvicorn tests.support.openenv_app:app`` on ``127.0.0.1:port``; :meth:`stop` kills it."""

    def __init__(self, max_sessions: int = 64, port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        self.max_sessions = max_sessions
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``ws://127.0.0.1:PORT``."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OpenEnvServer:
        """Start the process and wait until it answers ``/health``.

        The process serves a socket bound and listening here (``uvicorn --fd``): the port is the server's from now,
        not from when uvicorn has imported (a second later, on a loaded machine), during which another test's
        socket could take it and answer ``/health`` with bytes of its own. A server that does not come up is
        killed before the error goes on, so no process of it outlives the test."""
        env = dict(os.environ, PYTHONPATH=str(ROOT), COUNT_MAX_SESSIONS=str(self.max_sessions))
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            cmd = [sys.executable, "-m", "uvicorn", APP, "--fd", str(listener.fileno()), "--log-level", "warning"]
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, pass_fds=(listener.fileno(),)
            )
        try:
            deadline = time.monotonic() + HANG
            while True:
                assert self.proc.poll() is None, f"the OpenEnv test server exited with {self.proc.returncode}"
                try:
                    self.get("/health")
                    return self
                except OSError:
                    assert time.monotonic() < deadline, "the OpenEnv test server did not answer /health"
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def get(self, path: str) -> object:
        """``GET path``, its JSON."""
        with urllib.request.urlopen(self.http + path, timeout=HANG) as reply:
            return json.loads(reply.read())

    def live(self) -> int:
        """Environments alive in the server (sessions not yet ended)."""
        got = self.get("/live")
        assert isinstance(got, dict)
        return int(got["live"])

    def wait_live(self, n: int) -> None:
        """Wait until exactly ``n`` environments are alive in the server."""
        deadline = time.monotonic() + HANG
        while (live := self.live()) != n:
            assert time.monotonic() < deadline, f"{live} sessions alive on the OpenEnv server, expected {n}"
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGKILL the process and reap it."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait(HANG)


#: A client process: a pool of 3 envs of ``argv[1]`` (an ``openenv+...`` name; ``argv[2]``, its env_kwargs as JSON),
#: reset and stepped once; it prints ``ready`` and waits to be killed.
CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys
    import numpy as np
    import aioenv

    async def main():
        kwargs = json.loads(sys.argv[2])
        pool = await aioenv.make(sys.argv[1], 3, executor="async", num_workers=1, env_kwargs=kwargs)
        await pool.reset()
        words = np.empty(3, dtype=object)
        words[:] = ["a", "b", "c"]
        await pool.step({"delay": np.zeros(3), "fail": np.zeros(3, dtype=np.int64), "word": words})
        print("ready", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


@contextlib.asynccontextmanager
async def killed_client(
    env_name: str, token: str, ready_within: float = HANG, env_kwargs: Mapping[str, object] | None = None
) -> AsyncIterator[int]:
    """Run :data:`CLIENT` on ``env_name`` (``token`` in its environment and its descendants'), wait until its pool
    stepped, yield its pid, then SIGKILL it and reap it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), AIOENV_TEST_TOKEN=token)
    cmd = [sys.executable, "-c", CLIENT, env_name, json.dumps(env_kwargs or {})]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=ROOT, env=env, text=True)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), ready_within)
        assert line.strip() == "ready", f"the client process said {line!r}"
        yield proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

"""The factories workers make the envs of ``openenv+...`` names with (:func:`aioenv.make`).

- ``"openenv+ws://HOST:PORT"`` (or ``openenv+http://``, ``openenv+wss://``, ``openenv+https://``, with a path
  prefix when the server sits behind one): a running OpenEnv server; each env opens a session of its own.
- ``"openenv+app:pkg.module:app"``: an OpenEnv app (what ``create_app`` returned) that each worker process serves
  itself, from a server process of its own (:mod:`aioenv.openenv.appserver`: uvicorn on a loopback port): a child of
  the worker that ends with it (it exits when its parent is gone). A server that died is started again at the next
  reset of one of its envs.

- ``"openenv+image:IMAGE"``: an OpenEnv environment's container image, a container per env, started through podman
  or docker (:mod:`aioenv.openenv.container`).

Each is described by a source ``{"kind": "openenv", "url" | "app" | "image": ...}``
(:func:`aioenv.core.sources.openenv_source`); a server's pool refuses them all (a client over the network would have
the server open connections, start apps or run containers).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any, ClassVar

from aioenv.openenv.env import CONNECT_TIMEOUT, OpenEnvConnectionError, OpenEnvEnv, base_urls

__all__ = ["APP_START_TIMEOUT", "AppEnv", "LocalApp", "factory"]

#: Seconds a local app's server may take to answer ``/health`` after it was started.
APP_START_TIMEOUT = 60.0


def factory(source: dict[str, Any], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A worker's zero-argument factory of the env ``source`` describes (``kwargs`` go to :class:`OpenEnvEnv`)."""
    url, app, image = source.get("url"), source.get("app"), source.get("image")
    if isinstance(url, str) and url:
        return lambda: OpenEnvEnv(url, **kwargs)
    if isinstance(app, str) and app:
        return lambda: AppEnv(LocalApp.of(app), **kwargs)
    if isinstance(image, str) and image:
        from aioenv.openenv.container import image_env

        return lambda: image_env(image, kwargs)
    raise ValueError(f"an openenv source needs 'url', 'app' ('pkg.module:app') or 'image', got {source!r}")


class LocalApp:
    """An OpenEnv app served by a uvicorn process this process started, on a loopback port of its own; one per
    app and process (:meth:`of`)."""

    _apps: ClassVar[dict[str, LocalApp]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, target: str) -> None:
        self.target = target
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.restarting: asyncio.Lock | None = None

    @classmethod
    def of(cls, target: str) -> LocalApp:
        """The running app ``target`` of this process (started now when it is not)."""
        with cls._lock:
            app = cls._apps.get(target)
            if app is None:
                app = cls._apps[target] = cls(target)
                atexit.register(app.stop)
            if not app.alive():
                app.start()
            return app

    @property
    def url(self) -> str:
        """The app's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """Whether its server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the server process on a free loopback port and wait until it answers ``/health``."""
        self.stop()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        cmd = [sys.executable, "-m", "aioenv.openenv.appserver", self.target, str(self.port), str(os.getpid())]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=dict(os.environ))
        deadline = time.monotonic() + APP_START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise OpenEnvConnectionError(
                    f"the OpenEnv app {self.target!r} exited with {self.proc.returncode} as it started (see its stderr)"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0):  # loopback http
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise OpenEnvConnectionError(
                        f"the OpenEnv app {self.target!r} did not answer {self.url}/health within {APP_START_TIMEOUT} s"
                    ) from None
                time.sleep(0.05)

    async def ensure(self, refused: str | None = None) -> None:
        """Start the server again if it died: one restart however many envs ask at once, each waiting until it
        answers (a process that runs may not listen yet).

        ``refused``: the URL a session was just refused at. A server that answered ``/health`` once and now
        refuses is broken even while its process is still there (one killed a moment ago is not reaped yet): it
        is replaced, unless it was replaced meanwhile (its URL changed) or answers ``/health`` now."""
        if self.restarting is None:
            self.restarting = asyncio.Lock()
        async with self.restarting:
            stale = refused is not None and refused == base_urls(self.url)[1] and self.alive()
            if stale and not await asyncio.to_thread(self.answers):
                await asyncio.to_thread(self.stop)
            if not self.alive():
                await asyncio.to_thread(self.start)

    def answers(self) -> bool:
        """Whether the server answers ``/health`` now."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=CONNECT_TIMEOUT):  # loopback http
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server process (SIGTERM, then SIGKILL after a grace period) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(CONNECT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class AppEnv(OpenEnvEnv):
    """A session of a :class:`LocalApp`: a reset finds its server running (started again if it died)."""

    def __init__(self, app: LocalApp, **kwargs: Any) -> None:
        self.app = app
        super().__init__(app.url, **kwargs)

    async def _ensure_server(self) -> None:
        """The app's server runs (started again if it died; a restarted one keeps its port only by chance: the
        session follows it)."""
        await self.app.ensure()
        self._point_at(self.app.url)

    async def _replace_server(self) -> bool:
        """The app's server refused the session: started again unless it answers, or was replaced meanwhile."""
        await self.app.ensure(refused=self.ws_url)
        self._point_at(self.app.url)
        return True

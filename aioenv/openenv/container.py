"""OpenEnv environments packaged as container images: ``aioenv.make("openenv+image:IMAGE", n)`` runs each env in a
container of its own, as OpenEnv's container providers run one per session.

Each env (:class:`ContainerEnv`) starts its container through podman or docker (``engine``: ``"auto"``, the default,
is docker when ``docker version`` reaches a daemon, else podman) with the image's port (``port``, 8000 as OpenEnv's
images serve) published on a loopback port the engine picks, waits until it answers ``/health`` (``start_timeout``)
and opens its session there. Every container carries the label ``aioenv.owner=LABEL`` (``LABEL``: this process and
a generation of its reaper, below) and ``aioenv.pid=PID`` (the process that started it), so that
``podman ps --filter label=aioenv.owner`` lists what aioenv runs.

- The container starts as the env is made (the first one of an image in a process first, in the factory: its
  ``/schema`` gives the spaces of them all), so a replaced env's fresh container is usually up by its next reset.
- A step that overruns ``step_timeout`` has its env replaced: the old env's close removes its container, the new
  env starts one of its own.
- A container that dies (killed, out of memory, its server crashed) fails its env's step with
  :class:`OpenEnvContainerError` naming the container, its image and how it ended (``exited with code 137
  (SIGKILL)``); the env's next reset removes it and starts a fresh one. No other env is touched.
- Closing an env removes its container (``rm -f``), so closing the pool removes every container it started.

A process that dies does not close its envs: a client SIGKILLed takes its workers with it, and nobody is left to
remove their containers (the engine keeps a container running whatever happens to the process that started it:
neither docker nor podman ties one to its client). So each process that starts containers first starts a reaper
(:mod:`aioenv.openenv.reaper`): a small process of the standard library alone, in a session of its own (a signal to
the worker's process group never reaches it), holding a pipe from this process on its stdin. When this process dies
the kernel closes the pipe; the reaper sees its stdin end (or its parent change), waits for any engine command still
creating a container (this process tells it the pid of each one it runs), removes every container of its label
(``ps -aq --filter label=aioenv.owner=LABEL``, ``rm -f``) and exits. While the process lives, its reaper lives as
long as any of its containers may: when the last one is removed this process closes the pipe, and the next
container starts a new reaper with a new label (a generation), so a reaper that is sweeping never meets a container
of its successor's. What would still leave containers behind: SIGKILL of the reaper itself, or of the whole
machine's processes at once (``podman ps -a --filter label=aioenv.owner`` lists them; ``podman rm -f`` them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from aioenv.openenv.env import OpenEnvConnectionError, OpenEnvEnv, server_fields
from aioenv.openenv.reaper import ENGINE_TIMEOUT, OWNER_LABEL
from aioenv.openenv.spaces import ObjectField
from aioenv.wire.options import choice, positive_int, positive_seconds

__all__ = [
    "CONTAINER_OPTIONS",
    "CONTAINER_PORT",
    "ENGINES",
    "PID_LABEL",
    "START_TIMEOUT",
    "Container",
    "ContainerEnv",
    "ContainerSpec",
    "OpenEnvContainerError",
    "Reaper",
    "container_spec",
    "find_engine",
    "image_env",
]

#: ``engine`` choices: ``"auto"`` is docker when ``docker version`` reaches a daemon, else podman.
ENGINES = ("auto", "docker", "podman")
#: The port an OpenEnv image serves on inside its container.
CONTAINER_PORT = 8000
#: Seconds a container may take from ``run`` until it answers ``/health``.
START_TIMEOUT = 120.0
#: The label naming the process that started a container.
PID_LABEL = "aioenv.pid"
#: The options (env_kwargs) of :func:`container_spec`.
CONTAINER_OPTIONS = ("engine", "port", "start_timeout", "environment", "run_args")
#: Lines of a container's output an error quotes.
LOG_LINES = 20
#: Threads of a process that run engine commands and wait for containers to start (one per container starting).
ENGINE_THREADS = 128

REAPER = Path(__file__).with_name("reaper.py")
_T = TypeVar("_T")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class OpenEnvContainerError(OpenEnvConnectionError):
    """A container of an OpenEnv image could not be started, or ended under its env (the text says how)."""


# ---------------------------------------------------------------------------------------------------- the engine


_engines: dict[str, str] = {}
_engines_lock = threading.Lock()


def _answers(engine: str) -> bool:
    if shutil.which(engine) is None:
        return False
    try:
        done = subprocess.run(
            [engine, "version"], capture_output=True, timeout=ENGINE_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def find_engine(engine: str) -> str:
    """The engine command ``engine`` (one of :data:`ENGINES`) means here, looked up once per process;
    :class:`OpenEnvContainerError` when none answers."""
    engine = choice("engine", engine, ENGINES)
    with _engines_lock:
        if engine in _engines:
            return _engines[engine]
        if engine != "auto":
            if shutil.which(engine) is None:
                raise OpenEnvContainerError(f"engine={engine!r}: there is no {engine} command on PATH")
            found = engine
        else:
            found = next((e for e in ("docker", "podman") if _answers(e)), "")
            if not found:
                raise OpenEnvContainerError(
                    "no container engine answers (docker version, podman version fail): install podman or docker, "
                    "or name one with env_kwargs={'engine': ...}"
                )
        _engines[engine] = found
        return found


def _run(
    cmd: list[str], reaper: Reaper | None = None, timeout: float = ENGINE_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run an engine command; ``reaper`` is told of it while it runs (it may create a container)."""
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except OSError as exc:
        raise OpenEnvContainerError(f"cannot run {cmd[0]}: {exc}") from None
    if reaper is not None:
        reaper.tell(f"+{proc.pid}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise OpenEnvContainerError(f"'{cmd[0]} {cmd[1]}' did not finish within {timeout:.0f} s") from None
    finally:
        if reaper is not None:
            reaper.tell(f"-{proc.pid}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


_threads: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_threads_lock = threading.Lock()


def _engine_thread(fn: Callable[[], _T]) -> asyncio.Future[_T]:
    """Run ``fn`` (a container's start, removal or look) on a thread of this process's engine pool: a start holds its
    thread until the container answers ``/health``, so a pool of many envs starts them all at once, which the loop's
    default executor (a few threads) would not."""
    global _threads
    with _threads_lock:
        if _threads is None or _threads[0] != os.getpid():  # a forked process makes its own
            _threads = os.getpid(), concurrent.futures.ThreadPoolExecutor(ENGINE_THREADS, "aioenv-engine")
        pool = _threads[1]
    return asyncio.get_running_loop().run_in_executor(pool, fn)


def _tail(text: str, lines: int = LOG_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------------- the reaper


class Reaper:
    """This process's reaper process for one engine (see the module): the label its containers carry. It lives while
    a container of its label may exist (:meth:`acquire`, :meth:`release`)."""

    _current: ClassVar[dict[str, Reaper]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _generations: ClassVar[itertools.count[int]] = itertools.count()
    _token: ClassVar[str] = ""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.label = f"{self.token()}-{next(self._generations)}"
        self.users = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(REAPER), engine, self.label, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        # Reaped by a thread of its own: it exits whenever its last container is gone, at no call of ours.
        threading.Thread(target=self.proc.wait, name="aioenv-reaper-wait", daemon=True).start()

    @classmethod
    def token(cls) -> str:
        """What the labels and container names of this process start with (new in each forked process)."""
        if not cls._token:
            cls._token = uuid.uuid4().hex[:12]
        return cls._token

    @classmethod
    def _forked(cls) -> None:
        for reaper in cls._current.values():  # the parent's pipes: held here, they would keep its reapers waiting
            with contextlib.suppress(OSError):
                if reaper.proc.stdin is not None:
                    os.close(reaper.proc.stdin.fileno())
        cls._current = {}
        cls._lock = threading.Lock()
        cls._token = ""

    @classmethod
    def acquire(cls, engine: str) -> Reaper:
        """The reaper of ``engine``'s containers of this process (started now when there is none), held until
        :meth:`release`."""
        with cls._lock:
            reaper = cls._current.get(engine)
            if reaper is None or reaper.proc.poll() is not None:
                reaper = cls._current[engine] = cls(engine)
            reaper.users += 1
            return reaper

    def release(self) -> None:
        """Let go of it: the last holder closes its pipe, and it sweeps its label and exits."""
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return
            if self._current.get(self.engine) is self:
                del self._current[self.engine]
            with contextlib.suppress(OSError):
                if self.proc.stdin is not None:
                    self.proc.stdin.close()

    def tell(self, line: str) -> None:
        """Send it one line (``+PID``/``-PID``: an engine command that may create a container runs, or ended)."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()


os.register_at_fork(after_in_child=Reaper._forked)


# ---------------------------------------------------------------------------------------------------- a container


@dataclass(frozen=True)
class ContainerSpec:
    """What a container of an env runs: the image, the engine command, the port inside, extra environment variables
    and ``run`` arguments, and how long it may take to answer ``/health``."""

    image: str
    engine: str
    port: int = CONTAINER_PORT
    environment: tuple[tuple[str, str], ...] = ()
    run_args: tuple[str, ...] = ()
    start_timeout: float = START_TIMEOUT


def container_spec(
    image: str,
    *,
    engine: str = "auto",
    port: int = CONTAINER_PORT,
    start_timeout: float = START_TIMEOUT,
    environment: Mapping[str, str] | None = None,
    run_args: Sequence[str] = (),
) -> ContainerSpec:
    """A checked :class:`ContainerSpec` (the engine found); ``ValueError`` naming the option, what it expects and what
    arrived.

    Args:
        image: the image (``name[:tag]`` or ``name@sha256:...``), pulled by the engine when it has none.
        engine: ``"auto"`` (docker when its daemon answers, else podman), ``"docker"`` or ``"podman"``.
        port: the port the image serves on inside its container.
        start_timeout: seconds a container may take to answer ``/health``.
        environment: variables set in the container.
        run_args: more arguments of the engine's ``run`` (``["--memory", "2g"]``), before the image.
    """
    if not isinstance(image, str) or not image or image.startswith("-") or any(c.isspace() for c in image):
        raise ValueError(f"image must name a container image ('name:tag', 'registry/name@sha256:...'), got {image!r}")
    port = positive_int("port", port)
    if port > 65535:
        raise ValueError(f"port must be a TCP port (1 to 65535), got {port}")
    timeout = positive_seconds("start_timeout", start_timeout)
    if timeout is None:
        raise ValueError("start_timeout must be a positive number of seconds, got None")
    env = dict(environment or {})
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key) or not isinstance(value, str):
            raise ValueError(f"environment must map variable names to strings, got {key!r}: {value!r}")
    if isinstance(run_args, str) or not all(isinstance(a, str) for a in run_args):
        raise ValueError(f"run_args must be a list of strings (arguments of the engine's run), got {run_args!r}")
    return ContainerSpec(image, find_engine(engine), port, tuple(sorted(env.items())), tuple(run_args), timeout)


_names = itertools.count()


class Container:
    """One container of ``spec``: :meth:`start` (blocking: run from a thread), :meth:`remove`."""

    def __init__(self, spec: ContainerSpec) -> None:
        self.spec = spec
        self.name = f"aioenv-openenv-{Reaper.token()}-{next(_names)}"
        self.url = ""
        self.ready = False
        self._closed = False
        self._reaper: Reaper | None = None
        self._lock = threading.Lock()
        self._idle = threading.Event()  # no start running
        self._idle.set()

    def __str__(self) -> str:
        return f"the container {self.name} (image {self.spec.image})"

    def start(self) -> None:
        """Run it, find its loopback port and wait until it answers ``/health``; :class:`OpenEnvContainerError` saying
        why not (the container removed)."""
        spec = self.spec
        reaper = Reaper.acquire(spec.engine)
        with self._lock:
            if self._closed:
                reaper.release()
                raise OpenEnvContainerError(f"{self} was removed before it started")
            self._reaper = reaper
            self._idle.clear()
        try:
            cmd = [spec.engine, "run", "-d", "--name", self.name, "--stop-timeout", "0"]
            cmd += ["--label", f"{OWNER_LABEL}={reaper.label}", "--label", f"{PID_LABEL}={os.getpid()}"]
            cmd += ["-p", f"127.0.0.1::{spec.port}"]
            for key, value in spec.environment:
                cmd += ["-e", f"{key}={value}"]
            ran = _run([*cmd, *spec.run_args, spec.image], reaper)
            if ran.returncode != 0:
                raise OpenEnvContainerError(
                    f"{spec.engine} could not start a container of {spec.image!r}: {_tail(ran.stderr, 5)}"
                )
            self._check_open()
            mapped = _run([spec.engine, "port", self.name, f"{spec.port}/tcp"])
            host_port = mapped.stdout.strip().splitlines()[0].rpartition(":")[2] if mapped.stdout.strip() else ""
            if mapped.returncode != 0 or not host_port.isdigit():
                raise OpenEnvContainerError(
                    f"{self} publishes no port for {spec.port}/tcp: {_tail(mapped.stderr or mapped.stdout, 5)}"
                )
            self.url = f"http://127.0.0.1:{host_port}"
            self._wait_healthy()
            self.ready = True
        except BaseException:
            self._rm()
            raise
        finally:
            self._idle.set()

    def _check_open(self) -> None:
        if self._closed:
            raise OpenEnvContainerError(f"{self} was removed while it started")

    def _wait_healthy(self) -> None:
        timeout = self.spec.start_timeout
        deadline = time.monotonic() + timeout
        look = time.monotonic() + 1.0
        while True:
            self._check_open()
            with contextlib.suppress(OSError), _NO_PROXY.open(self.url + "/health", timeout=1.0):  # loopback http
                return
            now = time.monotonic()
            if now >= look:
                look = now + 1.0
                status, code, oom = self.status()
                if status != "running":
                    ended = _ended(status, code, oom)
                    logs = self.logs()
                    raise OpenEnvContainerError(f"{self} {ended} before it answered /health; its last output:\n{logs}")
            if now > deadline:
                raise OpenEnvContainerError(
                    f"{self} did not answer {self.url}/health within {timeout:g} s; its last output:\n{self.logs()}"
                )
            time.sleep(0.1)

    def status(self) -> tuple[str, int | None, bool]:
        """``(status, exit code, killed for memory)`` as the engine tells (``"gone"``: it knows no such container)."""
        fmt = "{{json .State.Status}} {{json .State.ExitCode}} {{json .State.OOMKilled}}"
        try:
            got = _run([self.spec.engine, "inspect", "--type", "container", "--format", fmt, self.name])
        except OpenEnvContainerError:
            return "unknown", None, False
        parts = got.stdout.split()
        if got.returncode != 0 or len(parts) != 3:
            return "gone", None, False
        try:
            status, code, oom = (json.loads(p) for p in parts)
        except ValueError:
            return "unknown", None, False
        return str(status), code if isinstance(code, int) else None, oom is True

    def running(self) -> bool:
        """Whether it started and runs now."""
        return self.ready and self.status()[0] == "running"

    def account(self) -> str:
        """How it is, in words: ``"... exited with code 137 (SIGKILL)"``, ``"... is gone"``, ``"... runs"``."""
        status, code, oom = self.status()
        return f"{self} {_ended(status, code, oom)}"

    def logs(self) -> str:
        """Its last :data:`LOG_LINES` lines of output (both streams)."""
        try:
            got = _run([self.spec.engine, "logs", "--tail", str(LOG_LINES), self.name])
        except OpenEnvContainerError as exc:
            return str(exc)
        return _tail(got.stdout + got.stderr) or "(none)"

    def _rm(self) -> None:
        with contextlib.suppress(OpenEnvContainerError):
            _run([self.spec.engine, "rm", "-f", self.name])

    def remove(self) -> None:
        """Remove it (``rm -f``), after a start that runs meanwhile has given up; its reaper is let go."""
        with self._lock:
            self._closed = True
            reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        self._idle.wait(ENGINE_TIMEOUT)
        try:
            self._rm()
        finally:
            reaper.release()


def _ended(status: str, code: int | None, oom: bool) -> str:
    if status == "running":
        return "runs"
    if status == "gone":
        return "is gone (removed)"
    if status in ("exited", "stopped") and code is not None:
        how = f"exited with code {code}"
        if code > 128:
            with contextlib.suppress(ValueError):
                how += f" ({signal.Signals(code - 128).name})"
        return how + (", killed for exceeding its memory" if oom else "")
    return f"is {status}"


# ---------------------------------------------------------------------------------------------------- the env


_image_fields: dict[ContainerSpec, tuple[ObjectField, ObjectField]] = {}
_image_fields_lock = threading.Lock()


def image_env(image: str, options: Mapping[str, Any]) -> ContainerEnv:
    """An env of ``image`` (what ``"openenv+image:IMAGE"`` makes): the ``options`` (env_kwargs) of
    :func:`container_spec` (:data:`CONTAINER_OPTIONS`) configure its containers, the others go to
    :class:`OpenEnvEnv`."""
    spec = container_spec(image, **{k: v for k, v in options.items() if k in CONTAINER_OPTIONS})
    return ContainerEnv(spec, **{k: v for k, v in options.items() if k not in CONTAINER_OPTIONS})


class ContainerEnv(OpenEnvEnv):
    """A session of an OpenEnv server in a container of its own, of ``spec`` (see the module); ``kwargs`` are
    :class:`OpenEnvEnv`'s options."""

    def __init__(self, spec: ContainerSpec, **kwargs: Any) -> None:
        self.spec = spec
        self.container: Container | None = None
        self._starting: asyncio.Task[None] | None = None
        super().__init__("http://127.0.0.1:0", **kwargs)
        if self.container is None:
            with contextlib.suppress(RuntimeError):  # no loop runs (a thread's env): its first reset starts it
                self._starting = asyncio.get_running_loop().create_task(self._replace())

    @property
    def container_name(self) -> str | None:
        """The name of the env's container now (None before it has one); ``pool.get_attr("container_name")``."""
        return None if self.container is None else self.container.name

    def _fields(self) -> tuple[ObjectField, ObjectField]:
        """The image's fields, from the ``/schema`` of a first container (this env's) once per process."""
        with _image_fields_lock:
            if self.spec in _image_fields:
                return _image_fields[self.spec]
            container = Container(self.spec)
            try:
                container.start()
                self._point_at(container.url)
                fields = server_fields(self.http_base, self.connect_timeout)
            except BaseException:
                container.remove()
                raise
            self.container = container
            _image_fields[self.spec] = fields
            return fields

    async def _replace(self) -> None:
        """Remove the env's container (if any) and start a new one."""
        old, new = self.container, Container(self.spec)
        self.container = new
        if old is not None:
            await _engine_thread(old.remove)
        try:
            await _engine_thread(new.start)
        except asyncio.CancelledError:
            raise  # its start goes on in its thread: the env's close removes it (after that start gave up)
        except BaseException:
            self.container = None
            await _engine_thread(new.remove)
            raise
        self._point_at(new.url)

    async def _ensure_server(self) -> None:
        """The env's container, started and running (a fresh one when it is not)."""
        task, self._starting = self._starting, None
        if task is not None:
            await task  # the start begun when the env was made: its failure is this reset's, the next one retries
            return
        container = self.container
        if container is not None and await _engine_thread(container.running):
            self._point_at(container.url)
            return
        await self._replace()

    async def _replace_server(self) -> bool:
        """The container refused the session: a fresh one (the old one removed)."""
        await self._replace()
        return True

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            return await super()._call(message)
        except OpenEnvContainerError:
            raise
        except OpenEnvConnectionError as exc:
            container = self.container
            if container is None:
                raise
            account = await _engine_thread(container.account)
            if account.endswith(" runs"):
                raise OpenEnvContainerError(
                    f"{exc} ({account}: the env's next reset opens a new session there)"
                ) from None
            raise OpenEnvContainerError(
                f"{account} during {message['type']}: the env's next reset starts a fresh container"
            ) from None

    async def close(self) -> None:
        """End the session and remove the container (after a start still running has given up)."""
        task, self._starting = self._starting, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # retrieved: the env is closed, nobody else will
        await self._end_session()
        container, self.container = self.container, None
        if container is not None:
            await _engine_thread(container.remove)

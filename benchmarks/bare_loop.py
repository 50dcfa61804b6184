"""A batch loop over bare pipes: thread or coroutine envs in worker processes with no pool, the floor for any pool.

bench_latency.py's ``thread64`` and ``async1k`` cases ask how close aioenv's ``recv()`` loop comes to its
ceiling, the fraction of ideal the same loop reaches with zero overhead. The ceiling is simulated, so it
leaves out what no pool can avoid: the sleeps' own lateness, the GIL, the worker's event loop and the
wake-ups between the client's process, that loop and the env threads. This cell pays exactly those and
nothing else, and shows how much of the gap to the ceiling is left for the pool to close.

- Worker processes (``python benchmarks/bare_loop.py --fd N``, as many as aioenv's pool has) each host their
  share of the same envs, as aioenv's workers do:
  - ``thread``: a ``SleepEnv`` on a thread per env; a finished step's env id reaches the worker's loop by
    ``call_soon_threadsafe``;
  - ``async``: an ``AsyncSleepEnv`` per env, stepped by a coroutine of its own on the worker's loop (uvloop),
    which waits for its next step on a future, as the ``async`` executor's env actors do.
- Ids that finish in the same loop turn go back together, 4 bytes each, over a socketpair.
- Worker processes collect garbage at aioenv's workers' threshold (``workers.__main__.GC_THRESHOLD``).
- The client loop (in this process, on uvloop like every cell) waits for the first ``batch`` ids and writes
  each worker the ids of its envs to step next.
- No actions, observations, rewards, checks or errors are carried.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from queue import SimpleQueue
from typing import Any

from aioenv._loop import new_event_loop
from aioenv.envs.latency import AsyncSleepEnv, SleepEnv
from workers.__main__ import GC_THRESHOLD

__all__ = ["EXECUTORS", "BareLoop", "Frames", "close", "frame", "send_bytes", "serve_envs", "spawn", "wake"]

#: What hosts the envs in a worker process (see the module docstring).
EXECUTORS = ("thread", "async")

_LEN = struct.Struct("<I")
_SCRIPT = Path(__file__).resolve()
_ROOT = _SCRIPT.parent.parent


def frame(body: bytes) -> bytes:
    """``body`` as one message of the stream: its length (4 bytes, little-endian), then itself."""
    return _LEN.pack(len(body)) + body


def _frame(ids: list[int]) -> bytes:
    return frame(struct.pack(f"<{len(ids)}i", *ids))


def send_bytes(sock: socket.socket, data: bytes) -> None:
    """Write ``data`` to a non-blocking socket: at once (a small message always fits), else blocking."""
    try:
        sent = sock.send(data)
    except BlockingIOError:
        sent = 0
    if sent < len(data):
        sock.setblocking(True)
        try:
            sock.sendall(data[sent:])
        finally:
            sock.setblocking(False)


class Frames:
    """Splits a socket's byte stream into the bodies :func:`frame` wrote (on a blocking socket, :meth:`read`
    waits for data)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def read(self) -> list[bytes] | None:
        """The body of every whole message that arrived (none yet: ``[]``); None once the other end closed."""
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        except ConnectionError:
            return None
        if not data:
            return None
        buf = self.buf
        buf.extend(data)
        bodies: list[bytes] = []
        at = 0
        while len(buf) - at >= 4:
            (size,) = _LEN.unpack_from(buf, at)
            if len(buf) - at < 4 + size:
                break
            bodies.append(bytes(buf[at + 4 : at + 4 + size]))
            at += 4 + size
        del buf[:at]
        return bodies


class _Reader(Frames):
    """The env ids of the messages :func:`_frame` wrote."""

    def read_ids(self) -> list[int] | None:
        bodies = self.read()
        if bodies is None:
            return None
        return [i for body in bodies for (i,) in struct.iter_unpack("<i", body)]


def serve_envs(sock: socket.socket, env_ids: list[int], env_kwargs: dict[str, Any], executor: str = "thread") -> None:
    """A worker process: step the envs ``env_ids`` names (on threads of their own, or as coroutines on this
    process's loop: ``executor``) as the client asks, until it closes the socket (see the module docstring)."""
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, second, third)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    finished: list[int] = []

    def flush() -> None:
        ids = finished.copy()
        finished.clear()
        try:
            send_bytes(sock, _frame(ids))
        except OSError:  # the client is gone
            loop.stop()

    def done(env_id: int) -> None:
        if not finished:
            loop.call_soon(flush)  # with every id finished in this loop turn
        finished.append(env_id)

    start, stop = (_on_threads if executor == "thread" else _as_coroutines)(loop, env_ids, env_kwargs, done)
    reader = _Reader(sock)
    sock.setblocking(False)

    def readable() -> None:
        ids = reader.read_ids()
        if ids is None:
            loop.stop()
            return
        for env_id in ids:
            start(env_id)

    loop.add_reader(sock.fileno(), readable)
    try:
        loop.run_forever()
    finally:
        stop()
        sock.close()


Starter = Callable[[int], None]


def _on_threads(
    loop: asyncio.AbstractEventLoop, env_ids: list[int], env_kwargs: dict[str, Any], done: Starter
) -> tuple[Starter, Callable[[], None]]:
    """A ``SleepEnv`` on a thread per env: ``(start a step of env i, stop every thread)``."""
    inboxes: dict[int, SimpleQueue[bool]] = {i: SimpleQueue() for i in env_ids}

    def run(env_id: int) -> None:
        env = SleepEnv(**env_kwargs)
        env.reset(seed=env_id)
        inbox = inboxes[env_id]
        while inbox.get():
            env.step(0)
            loop.call_soon_threadsafe(done, env_id)

    for env_id in env_ids:
        threading.Thread(target=run, args=(env_id,), daemon=True).start()

    def stop() -> None:
        for inbox in inboxes.values():
            inbox.put(False)

    return lambda env_id: inboxes[env_id].put(True), stop


def _as_coroutines(
    loop: asyncio.AbstractEventLoop, env_ids: list[int], env_kwargs: dict[str, Any], done: Starter
) -> tuple[Starter, Callable[[], None]]:
    """An ``AsyncSleepEnv`` per env, each stepped by a coroutine of its own on ``loop`` that waits on a future
    for its next step: ``(start a step of env i, cancel every coroutine)``."""
    inboxes: dict[int, asyncio.Future[None]] = {i: loop.create_future() for i in env_ids}

    async def actor(env_id: int) -> None:
        env = AsyncSleepEnv(**env_kwargs)
        await env.reset(seed=env_id)
        while True:
            await inboxes[env_id]
            inboxes[env_id] = loop.create_future()  # before done(): the next request finds it
            await env.step(0)
            done(env_id)

    tasks = [loop.create_task(actor(env_id)) for env_id in env_ids]

    def stop() -> None:
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))  # the loop has stopped

    return lambda env_id: inboxes[env_id].set_result(None), stop


def spawn(script: Path, fds: list[int], args: list[str]) -> subprocess.Popen[bytes]:
    """Start ``python script ARGS`` that inherits the descriptors ``fds``, with this checkout's aioenv (and
    ``workers``) importable."""
    path = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.Popen([sys.executable, str(script), *args], pass_fds=fds, env=env)


async def close(socks: list[socket.socket], procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop reading ``socks`` and close them (the processes at their other ends see that and exit), then wait
    for ``procs``, killing any still alive 10 s later."""
    loop = asyncio.get_running_loop()
    for sock in socks:
        loop.remove_reader(sock.fileno())
        sock.close()
    for proc in procs:
        try:
            await asyncio.to_thread(proc.wait, 10.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 5.0)


def wake(waiter: asyncio.Future[None] | None, enough: bool) -> None:
    """Resolve a client's pending ``once()`` (``waiter``) when ``enough`` rows are in."""
    if waiter is not None and enough and not waiter.done():
        waiter.set_result(None)


def _spawn(
    sock: socket.socket, env_ids: list[int], env_kwargs: dict[str, Any], executor: str
) -> subprocess.Popen[bytes]:
    """Start a worker process (:func:`main`) that inherits ``sock``."""
    fd = sock.fileno()
    args = ["--fd", str(fd), "--ids", json.dumps(env_ids), "--env-kwargs", json.dumps(env_kwargs)]
    return spawn(_SCRIPT, [fd], [*args, "--executor", executor])


class BareLoop:
    """The client of :func:`serve_envs` workers: ``await once()`` waits for ``batch`` finished envs and steps
    them again, returning how many (see the module docstring). Use as an async context manager.

    ``executor``: ``"thread"`` (a ``SleepEnv`` per thread) or ``"async"`` (``AsyncSleepEnv`` coroutines)."""

    def __init__(
        self, num_envs: int, batch: int, num_workers: int, env_kwargs: dict[str, Any], executor: str = "thread"
    ) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
        self.executor = executor
        self.num_envs = num_envs
        self.batch = batch
        self.num_workers = max(1, min(num_workers, num_envs))
        self.env_kwargs = env_kwargs
        self.owner = [i * self.num_workers // num_envs for i in range(num_envs)]
        self._socks: list[socket.socket] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._ready: list[int] = []
        self._waiter: asyncio.Future[None] | None = None

    async def __aenter__(self) -> BareLoop:
        loop = asyncio.get_running_loop()
        for w in range(self.num_workers):
            mine, theirs = socket.socketpair()
            ids = [i for i in range(self.num_envs) if self.owner[i] == w]
            proc = _spawn(theirs, ids, self.env_kwargs, self.executor)
            theirs.close()
            mine.setblocking(False)
            loop.add_reader(mine.fileno(), self._readable(_Reader(mine)))
            self._socks.append(mine)
            self._procs.append(proc)
        self._send(list(range(self.num_envs)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await close(self._socks, self._procs)

    def _readable(self, reader: _Reader) -> Callable[[], None]:
        def on_readable() -> None:
            ids = reader.read_ids()
            if ids is None:
                raise ConnectionError("a bare-loop worker exited")
            self._ready.extend(ids)
            wake(self._waiter, len(self._ready) >= self.batch)

        return on_readable

    def _send(self, ids: list[int]) -> None:
        per: dict[int, list[int]] = {}
        for env_id in ids:
            per.setdefault(self.owner[env_id], []).append(env_id)
        for w, mine in per.items():
            send_bytes(self._socks[w], _frame(mine))

    async def once(self) -> int:
        """Wait for ``batch`` finished envs, step them again; the number of rows (``batch``)."""
        while len(self._ready) < self.batch:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        batch, self._ready = self._ready[: self.batch], self._ready[self.batch :]
        self._send(batch)
        return len(batch)


def main() -> None:
    """A worker process of :class:`BareLoop` (its socket inherited as ``--fd``)."""
    if len(sys.argv) == 1:
        sys.exit(
            "benchmarks/bare_loop.py runs as a worker process of bench_latency.py's bare-loop cell, which starts it; "
            "to measure, run: .venv/bin/python benchmarks/bench_latency.py --only thread64 --only async1k"
        )
    p = argparse.ArgumentParser(description="a worker process of benchmarks/bare_loop.py's BareLoop")
    p.add_argument("--fd", type=int, required=True, help="the inherited end of the client's socketpair")
    p.add_argument("--ids", type=json.loads, required=True, help="the env ids this worker hosts, as JSON")
    p.add_argument("--env-kwargs", type=json.loads, required=True, help="the env's keyword arguments, as JSON")
    p.add_argument("--executor", choices=EXECUTORS, default="thread", help="envs on threads, or coroutines")
    args = p.parse_args()
    serve_envs(socket.socket(fileno=args.fd), args.ids, args.env_kwargs, args.executor)


if __name__ == "__main__":
    main()

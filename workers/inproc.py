"""A worker that runs in the pool's own process and thread (``executor="in_process"``).

For envs whose step takes microseconds, a message to another process costs more than the step itself:
32 CartPole envs step in ~150 µs, a round trip to a worker process and back takes ~100 µs on a 2-core
machine. An in-process worker is the same :class:`~workers.runtime.Worker` (same autoreset rules, same
errors, same replies), called by the coordinator instead of reading a pipe: a message "sent" to it is
answered at once, and the reply goes straight to the coordinator's handler, so a lock-step ``step()``
finds its result ready and returns without a turn of the event loop.

What the caller gives up, and why it is a choice (``executor="in_process"``, or what ``"auto"`` picks
for cheap envs): a step runs in the caller's thread, so an env that hangs holds the event loop (no
deadline can fire), and an env that crashes the interpreter takes the caller with it. Exceptions raised
by an env are its row's own errors, as in any worker.

It presents the coordinator's ``WorkerProc`` and ``Port`` protocols (:mod:`aioenv.core.launcher`):
``send`` answers a request, ``kill`` closes the envs and reports an exit, ``stop`` waits for it.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from workers.runtime import Worker

__all__ = ["InProcessWorker"]


class _Port(Protocol):
    """Where the coordinator sends this worker's requests (the coordinator's ``Port``: here, the worker itself)."""

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send ``frames`` to ``identity``; False when that peer is not connected."""
        ...


class InProcessWorker:
    """A :class:`~workers.runtime.Worker` served by the running event loop; see the module docstring.

    Args:
        name: the worker's name (the identity its replies are delivered with).
        trusted_dir: the pool's private directory (pickled factories).
        on_exit: called once, from the loop, after it was killed or closed.
        on_message: the coordinator's handler, called with ``(name, reply frames)`` for each reply.
        slab_fd: the pool's shared rows (:mod:`aioenv.transport.slab`); None: arrays travel in the messages.
    """

    def __init__(
        self,
        name: str,
        trusted_dir: str,
        on_exit: Callable[[InProcessWorker], None],
        on_message: Callable[[bytes, list[Any]], None],
        *,
        slab_fd: int | None = None,
    ) -> None:
        self.name = name
        self.exited = asyncio.Event()
        self.port: _Port = self
        self._identity = name.encode()
        self._loop = asyncio.get_running_loop()
        self._on_exit = on_exit
        self._on_message = on_message
        # its own descriptor of the rows: the worker maps them as a process of its own would
        self._slab_fd = os.dup(slab_fd) if slab_fd is not None else None
        self._worker = Worker(-1, name, trusted_dir=trusted_dir, executor="inline", slab_fd=self._slab_fd)
        self._worker.trusted = True
        self._inbox: deque[Sequence[Any]] = deque()
        self._serving = False
        self._code: int | None = None
        self._why = ""
        self._loop.call_soon(self._say_hello)

    @property
    def pid(self) -> str:
        """The pool's own process id, marked as such (a string, so nothing mistakes it for a worker's to kill)."""
        return f"{os.getpid()} (this process)"

    @property
    def returncode(self) -> int | None:
        """0 once closed, -9 once killed, None while it serves."""
        return self._code

    def describe(self) -> str:
        """How it ended, in words."""
        return self._why or "is still running"

    # ------------------------------------------------------------ Port

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Answer a request now, in the caller's thread: its reply reaches the coordinator's handler before
        ``send`` returns, so a lock-step call finds its future done and never waits for the loop. A request
        sent while a reply is being handled (a handler that sends again) is answered right after it, in
        order, as from a pipe. False once ended."""
        if self._code is not None:
            return False
        self._inbox.append(frames)
        if not self._serving:
            self._serve()
        return True

    def _say_hello(self) -> None:
        if self._code is None:
            self._on_message(self._identity, self._worker.hello())

    def _serve(self) -> None:
        """Answer every queued request in order; each reply reaches the coordinator before the next request
        runs, as from a process's pipe."""
        self._serving = True
        inbox = self._inbox
        try:
            while inbox and self._code is None:
                frames = inbox.popleft()
                try:
                    reply, done = self._worker.handle(frames)
                except BaseException as exc:  # Ctrl-C (or SystemExit) inside env code, in the caller's thread:
                    # the request is answered (its envs are released, the one that was running is broken until
                    # reset), then the interrupt goes on to the caller
                    self._on_message(self._identity, self._worker.interrupted(frames, exc))
                    raise
                if done:
                    self._end(0, "exited with code 0")
                self._on_message(self._identity, reply)
        finally:
            self._serving = False

    # ------------------------------------------------------------ WorkerProc

    def kill(self) -> None:
        """Close its envs now and report the exit (the coordinator then makes them again, elsewhere or here)."""
        if self._code is None:
            self._worker.close_all()
            self._end(-9, "was stopped (its envs were closed)")

    def _end(self, code: int, why: str) -> None:
        self._code, self._why = code, why
        self._inbox.clear()
        if self._worker.slab is not None:
            self._worker.slab.close()
        if self._slab_fd is not None:
            os.close(self._slab_fd)
            self._slab_fd = None
        self._loop.call_soon(self._exit)

    def _exit(self) -> None:
        self.exited.set()
        self._on_exit(self)

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """End it (closing its envs if a CLOSE did not) and return once its exit was reported."""
        if self._code is None:
            if ask_first:  # a CLOSE was queued: let it be answered first
                await asyncio.sleep(0)
            self.kill()
        await self.exited.wait()

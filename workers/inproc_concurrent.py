"""Envs on threads or coroutines of the pool's own process: ``executor="thread"`` or ``"async"`` with
``num_workers=0``.

A worker process of the ``thread`` executor costs every step five thread wake-ups on the way: the request
wakes the worker's loop, the loop wakes the env's thread, the thread wakes the loop with its result, the
reply wakes the pool's loop, and the next request starts over. On a small VM each costs tens to hundreds of
microseconds of latency and CPU (64 envs of 20 ms spent 350-430 µs of CPU per step in the pool, 2 vCPUs).
Here the same :class:`~workers.concurrent.ConcurrentWorker` runs on the pool's own event loop: a request is
handled inside ``send`` (its envs' threads start at once), and a reply goes straight to the coordinator's
handler. Two wake-ups per step remain: the loop's to the env's thread and back (none for coroutines).

What the caller gives up, as with ``executor="in_process"``: an env that hangs cannot be interrupted (no
deadline applies: ``step_timeout`` and ``reset_timeout`` are refused), a crash of the interpreter takes the
caller with it, and env code shares the caller's GIL. Coroutine envs share its event loop too: one that
blocks stalls the pool and everything else on that loop.

It presents the coordinator's ``WorkerProc`` and ``Port`` protocols (:mod:`aioenv.core.launcher`), as
:class:`workers.inproc.InProcessWorker` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from aioenv.transport.pipe import LinkClosed
from aioenv.wire.protocol import Local
from workers.concurrent import ConcurrentWorker
from workers.inproc import InProcessProc, Port

__all__ = ["InProcessConcurrentWorker"]


class _ToPool:
    """The worker's :class:`~workers.link.Link` to its coordinator in the same process: ``send`` hands each reply
    to the coordinator's handler at once. Nothing is read from it (requests arrive through
    :meth:`InProcessConcurrentWorker.send`)."""

    edge_triggered = False

    def __init__(self, identity: bytes, on_message: Callable[[bytes, list[Any]], None]) -> None:
        self._identity = identity
        self.on_message = on_message
        self.closed = False

    def send(self, frames: Sequence[Any]) -> None:
        """Deliver one reply to the coordinator (dropped once closed: nobody waits for it)."""
        if not self.closed:
            self.on_message(self._identity, list(frames))

    def recv(self) -> list[Any]:
        """Never called: requests are handed over, not read."""
        raise LinkClosed("an in-process worker's link carries replies only")

    def has_input(self) -> bool:
        """Nothing is ever waiting to be read."""
        return False

    def fileno(self) -> int:
        """No descriptor."""
        return -1

    def close(self) -> None:
        """Deliver nothing more."""
        self.closed = True


class InProcessConcurrentWorker(InProcessProc):
    """A :class:`~workers.concurrent.ConcurrentWorker` served by the running event loop; see the module docstring.

    Args:
        name: the worker's name (the identity its replies are delivered with).
        trusted_dir: the pool's private directory (pickled factories).
        executor: ``"thread"`` (each env on a thread of its own) or ``"async"`` (``aioenv.AsyncEnv`` coroutines).
        on_exit: called once, from the loop, after it was closed or killed (its envs closed).
        on_message: the coordinator's handler, called with ``(name, reply frames)`` for each reply.
    """

    def __init__(
        self,
        name: str,
        trusted_dir: str,
        executor: str,
        on_exit: Callable[[InProcessConcurrentWorker], None],
        on_message: Callable[[bytes, list[Any]], None],
    ) -> None:
        self.name = name
        self.exited = asyncio.Event()
        self.port: Port = self
        self._on_exit = on_exit
        self._worker = ConcurrentWorker(-1, name, trusted_dir=trusted_dir, executor=executor)
        self._worker.same_process = True
        self._link = _ToPool(name.encode(), on_message)
        self._worker.attach(self._link)
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Handle a request now: its envs' steps start before ``send`` returns, and its rows reach the
        coordinator's handler as they finish. The frames are copied first (a request's array frames may be
        the caller's own arrays, which it may change once ``send`` returned; a ``Local`` step carries copies
        already). False once ended."""
        if self._code is not None:
            return False
        self._worker.handle([f if isinstance(f, bytes | Local) else bytes(f) for f in frames])
        return True

    async def _serve(self) -> None:
        try:
            await self._worker.serve()
        finally:
            self._link.close()
            if self._code is None:
                self._code, self._why = 0, "exited with code 0"
            self.exited.set()
            self._on_exit(self)

    def kill(self) -> None:
        """Stop answering and close its envs (in the background: a thread's env closes on its thread); the exit is
        reported once they are closed."""
        if self._code is None:
            self._code, self._why = -9, "was stopped (its envs were closed)"
            self._link.close()
            self._worker.stop()

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """End it (closing its envs if a CLOSE did not) and return once its exit was reported."""
        if self._code is None:
            if ask_first:  # a CLOSE was sent: let it be answered first
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.exited.wait()), grace)
            self.kill()
        await self.exited.wait()

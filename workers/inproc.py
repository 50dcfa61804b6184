"""A worker that runs in the pool's own process and thread (``executor="in_process"``).

For envs whose step takes microseconds, a message to another process costs more than the step itself:
32 CartPole envs step in ~150 µs, a round trip to a worker process and back takes ~100 µs on a 2-core
machine. An in-process worker is the same :class:`~workers.runtime.Worker` (same autoreset rules, same
errors, same replies), called by the coordinator instead of reading a pipe: a message "sent" to it is
answered at once, and the reply goes straight to the coordinator's handler, so a lock-step ``step()``
finds its result ready and returns without a turn of the event loop. When it hosts every env of its pool,
a step skips the message too (:meth:`InProcessWorker.step_now`): the envs are stepped by the same
:meth:`~workers.runtime.Worker.step_rows` and their rows handed back as arrays. When it shares a pool with
worker processes, the steps whose rows go to ``recv()`` wait instead (:meth:`InProcessWorker.defer`) until the
coordinator answers them (``Coordinator.answer_here``: when ``recv()`` would wait, or on the loop's second turn).

What the caller gives up, and why it is a choice (``executor="in_process"``, or what ``"auto"`` picks
for cheap envs with ``allow_in_process=True``; never by default): a step runs
in the caller's thread, so an env that hangs holds the event loop (no
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

import numpy as np

from aioenv.wire.errors import error_fields
from aioenv.wire.protocol import Key, decode
from workers.runtime import Worker, encode_reply

__all__ = ["InProcessProc", "InProcessWorker", "Port", "Stepped"]


#: The rows of a step answered in this process without a message (:meth:`InProcessWorker.step_now`):
#: ``(obs, extras, infos, errors)``. ``obs``: observation leaves, ``extras``: ``[reward (k,) float64, terminated
#: (k,) bool, truncated (k,) bool]``, all fresh arrays of k rows (None: every row failed); ``infos``: each env's
#: info dict or None, decoded from the wire's encoding (None: no env had an info); ``errors``: row -> error fields.
#: A plain tuple: a step of a few cheap envs feels every object it makes.
Stepped = tuple[list[np.ndarray] | None, list[np.ndarray] | None, list[Any] | None, dict[int, Any]]


class Port(Protocol):
    """Where the coordinator sends this worker's requests (the coordinator's ``Port``: here, the worker itself)."""

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send ``frames`` to ``identity``; False when that peer is not connected."""
        ...


class InProcessProc:
    """What a worker in the pool's own process shows the coordinator as its process: this process's id, and
    how it ended (``_code``, ``_why``: set by the worker)."""

    _code: int | None = None
    _why: str = ""

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


class InProcessWorker(InProcessProc):
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
        self.port: Port = self
        self._identity = name.encode()
        self._loop = asyncio.get_running_loop()
        self._on_exit = on_exit
        self._on_message = on_message
        # its own descriptor of the rows: the worker maps them as a process of its own would
        self._slab_fd = os.dup(slab_fd) if slab_fd is not None else None
        self._worker = Worker(-1, name, trusted_dir=trusted_dir, executor="inline", slab_fd=self._slab_fd)
        self._worker.trusted = True
        self._worker.env_failures = (Exception,)  # a SystemExit goes on to the caller, as a Ctrl-C does
        self._inbox: deque[Sequence[Any]] = deque()
        self._serving = False
        self._loop.call_soon(self._say_hello)

    # ------------------------------------------------------------ Port

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Answer a request now, in the caller's thread: its reply reaches the coordinator's handler before
        ``send`` returns, so a lock-step call finds its future done and never waits for the loop. A request
        sent while a reply is being handled (a handler that sends again) is answered right after it, in
        order, as from a pipe. False once ended."""
        if not self.defer(frames):
            return False
        self.answer_deferred()
        return True

    def defer(self, frames: Sequence[Any]) -> bool:
        """Queue a request without answering it: :meth:`answer_deferred` answers it later (the coordinator says
        when, see ``Coordinator.answer_here``). A request sent meanwhile (:meth:`send`) is answered after it, in
        order. False once ended."""
        if self._code is not None:
            return False
        self._inbox.append(frames)
        return True

    @property
    def deferred(self) -> bool:
        """Whether requests wait to be answered (:meth:`defer`)."""
        return bool(self._inbox) and not self._serving

    def answer_deferred(self) -> None:
        """Answer every request waiting, in order, now (unless they are being answered already)."""
        if self.deferred:
            self._serve()

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
                    # reset), and so is every request queued behind it (sent while this one was answered,
                    # rows the pool held back under max_concurrency): none runs, each gets the interruption as
                    # its reply. Then the interrupt goes on to the caller.
                    self._on_message(self._identity, self._worker.interrupted(frames, exc))
                    while inbox and self._code is None:
                        self._on_message(self._identity, self._worker.interrupted(inbox.popleft(), exc))
                    raise
                if done:
                    self._end(0, "exited with code 0")
                self._on_message(self._identity, reply)
        finally:
            self._serving = False

    def idle(self) -> bool:
        """Whether it serves and answers nothing right now: a step may then run at once (:meth:`step_now`)."""
        return self._code is None and not self._serving and not self._inbox

    def step_now(self, env_ids: list[int], leaves: list[np.ndarray]) -> Stepped:
        """Step ``env_ids`` with the checked action ``leaves`` (row ``i`` for ``env_ids[i]``) now, with no
        message: what a STEP request would answer, for a pool whose every env runs here (see
        ``Coordinator.step_here``).

        The same :meth:`Worker.step_apart` steps the envs, as a worker process steps a STEP without shared rows.
        Infos still make the trip through the wire's encoding that a reply from a worker process makes: a value
        msgpack cannot carry fails its row here too, and the caller gets values of their own, not the objects
        the env keeps. A ``KeyboardInterrupt`` in an env goes on to the caller."""
        worker = self._worker
        try:
            group = worker.group(env_ids)
            obs, extras, infos, errors = worker.step_apart(env_ids, group, leaves)
            if infos is None:
                return obs, extras, None, errors
            # Each env's own dict crosses (as for "ilist"), and the sink batches the decoded dicts if its caller
            # wants them batched (Part.batched_info): the same values as batching first and encoding the batch,
            # at half the cost (a batch's object columns, final_obs and final_info above all, cost a Python
            # call per element to encode and decode).
            fields: dict[str, Any] = {Key.INFO: infos, Key.ERRORS: errors}
            header, _ = decode(encode_reply(fields, [], env_ids, True, trusted=True), trusted=True)
        except Exception as exc:  # noqa: BLE001 - what Worker.handle answers with an ERROR: every row fails with it
            return None, None, None, {i: error_fields(exc, e) for i, e in enumerate(env_ids)}
        return obs, extras, header.get(Key.INFO), header.get(Key.ERRORS) or {}

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

"""Local worker processes: start ``python -m workers``, notice their death at once, stop them for sure.

A worker starts as a fresh interpreter, or, with ``AIOENV_WORKER_START=fork``, is forked from this
process's template (:mod:`aioenv.transport.zygote`: milliseconds instead of ~0.5 s of imports). Death is
noticed through a descriptor registered with the event loop (no polling): a pidfd, or the template's status pipe; the
callback runs as soon as the process exits, whatever killed it. Stopping escalates: the coordinator
first asks politely (CLOSE), then :meth:`LocalProcess.stop` sends SIGTERM, waits, and SIGKILLs. Workers
also ask the kernel to kill them if the process that started them dies (``PR_SET_PDEATHSIG``), and a
template ends its workers when the coordinator's process is gone, so none outlive it.

A coordinator starts its workers through a *launch* function (:func:`launch_local` by default) that
takes a :class:`LaunchSpec` and returns a :class:`WorkerProc`; a server with remote worker hosts
passes its own (:mod:`aioenv.server.fleet`), which may start the process on another machine;
:func:`launch_in_process` runs the worker runtime in this very process (``executor="in_process"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aioenv.errors import UsageError
from aioenv.transport.pipe import PipePort
from aioenv.transport.spawn import check_worker_env, launch_worker
from aioenv.wire.lane import DONE_PIPE_EXECUTORS

__all__ = [
    "HereWorker",
    "LaunchSpec",
    "LocalProcess",
    "Spawn",
    "WorkerProc",
    "describe_exit",
    "in_process_unavailable",
    "launch_in_process",
    "launch_local",
    "spawn_here",
]

log = logging.getLogger("aioenv.launcher")

T = TypeVar("T")

#: Seconds a worker that closed its end of the pipe has to exit before it is killed.
EOF_GRACE = 2.0


class Port(Protocol):
    """Where a coordinator sends a worker's messages: its pipe (:class:`~aioenv.transport.pipe.PipePort`) or a
    server's worker port (:class:`~aioenv.transport.router.Router`)."""

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send ``frames`` to ``identity``; False when that peer is not connected."""
        ...


class WorkerProc(Protocol):
    """A coordinator's handle on one worker process, wherever it runs."""

    name: str
    exited: asyncio.Event
    #: The socket to reach it through.
    port: Port

    @property
    def pid(self) -> int | str:
        """Its process id (on its own host), or ``"?"`` before it is known."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit code once exited (negative: the signal that killed it; None: unknown)."""
        ...

    def describe(self) -> str:
        """How it ended, in words (``"was killed by SIGKILL"``)."""
        ...

    def kill(self) -> None:
        """SIGKILL it now."""
        ...

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """Wait for it to exit, escalating; returns once it has."""
        ...


class HereWorker(WorkerProc, Protocol):
    """The ``inline`` worker a pool runs in its own process (:class:`workers.inproc.InProcessWorker`), as the
    coordinator drives it: its env code runs on a thread of this process, and a share's requests for ``recv()``
    may wait to be answered until the caller would wait (see
    :meth:`aioenv.core.coordinator.Coordinator.answer_waiting`).

    Named here, so that the coordinator needs the worker runtime's behaviour, not its module: only
    :func:`launch_in_process` imports the runtime (the one edge from ``core`` to ``workers``, see
    ``tests/test_layers.py``)."""

    @property
    def deferred(self) -> bool:
        """Whether requests wait to be answered."""
        ...

    def defer(self, frames: Sequence[Any]) -> bool:
        """Queue a request without answering it yet; False when it cannot wait (then send it)."""
        ...

    def answer_deferred(self) -> None:
        """Answer the requests that wait, now."""
        ...

    def runs_env_code(self) -> bool:
        """Whether its env code runs, or is queued, now."""
        ...

    def runs_env_code_here(self) -> bool:
        """Whether the calling thread is the one its env code runs on."""
        ...

    def interrupt_env_code(self) -> None:
        """Raise ``KeyboardInterrupt`` inside the env code that runs now, if any."""
        ...


class Spawn(Protocol):
    """Where a local worker's process is started: ``spawn(start)`` calls ``start()`` (which starts the process and
    returns it) and returns what it returned, or raises what it raised. A worker asks the kernel to kill it when
    the *thread* that started it ends (``PR_SET_PDEATHSIG``), so a pool whose loop runs in its callers' threads
    (:class:`aioenv.SyncPool`) starts every process on its own long-lived loop thread."""

    def __call__(self, start: Callable[[], T]) -> T:
        """``start()``'s value, on the thread that owns the pool's processes."""
        ...


def spawn_here(start: Callable[[], T]) -> T:
    """The default :class:`Spawn`: in the calling thread, which runs the pool's event loop for good."""
    return start()


@dataclass
class LaunchSpec:
    """What a coordinator asks for when it needs a worker process.

    Attributes:
        name: the worker's name (the identity its messages come with), unique per launcher.
        executor: ``inline``, ``thread`` or ``async``.
        envs: how many envs it will host (for placement).
        private_dir: the pool's private directory (pickled factories; local workers only).
        on_exit: called once in the loop thread when the process has exited (or was lost).
        on_message: the coordinator's handler for the worker's messages (``identity``: its name).
        slab_fd: the pool's shared-memory rows (:mod:`aioenv.transport.slab`), inherited by a local worker; None: none.
        done_fd: the write end of the pool's done pipe (:mod:`aioenv.wire.lane`), inherited by a local worker with
            ``slab_fd``; None: none.
        quiet_fds: the write end of the pool's quiet pipe and the read end of its countdown pipe, inherited by a
            local inline worker with ``done_fd`` (its quiet calls: :data:`aioenv.wire.lane.QUIET`); None: none.
        hold: for a worker in this process (:func:`launch_in_process`): the most seconds a request holds the
            event loop (None: :data:`workers.inproc.HOLD`).
        quick: for a local worker's pipe: the messages of one size handled before any parsing (see
            :class:`aioenv.transport.pipe.PipePort`); None: none.
        spawn: where a local worker's process is started (:class:`Spawn`).
    """

    name: str
    executor: str
    envs: int
    private_dir: str
    on_exit: Callable[[WorkerProc], None]
    on_message: Callable[[bytes, list[Any]], None]
    slab_fd: int | None = None
    hold: float | None = None
    quick: Quick | None = None
    done_fd: int | None = None
    spawn: Spawn = spawn_here
    quiet_fds: tuple[int, int] | None = None


#: A pipe's handler of the messages of one size (see :class:`aioenv.transport.pipe.PipePort`): ``(size, handler)``.
Quick = tuple[int, Callable[[bytes, memoryview], bool]]


def launch_local(spec: LaunchSpec) -> LocalProcess:
    """Start the worker as a child process of this one, talking to the coordinator over a pipe of its own."""
    return LocalProcess(
        spec.name,
        spec.private_dir,
        spec.executor,
        spec.on_exit,
        spec.on_message,
        slab_fd=spec.slab_fd,
        quick=spec.quick,
        done_fd=spec.done_fd,
        spawn=spec.spawn,
        quiet_fds=spec.quiet_fds,
    )


#: Where aioenv's worker runtime lives: beside the ``aioenv`` package (both are installed side by side).
_RUNTIME_DIR = Path(__file__).resolve().parents[2] / "workers"


def in_process_unavailable() -> str | None:
    """Why this process cannot run the worker runtime itself, or None when it can.

    The runtime is the top-level package ``workers``; in a caller's process a module of the user's with
    that name (a ``workers.py`` beside their script) would stand in for it. Worker processes cannot be
    fooled that way (they start with aioenv's root first on their path), and neither may this check: it
    finds the package without importing it, so a user's module is never run."""
    try:
        spec = importlib.util.find_spec("workers")
    except (ImportError, ValueError) as exc:
        return f"the module 'workers' cannot be looked up here ({exc})"
    origin = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if origin != _RUNTIME_DIR:
        where = spec.origin if spec is not None else "nowhere"
        return (
            f"the module named 'workers' this process imports is {where}, not aioenv's worker runtime "
            f"({_RUNTIME_DIR}): rename your module, or let the envs run in worker processes"
        )
    return None


def launch_in_process(spec: LaunchSpec) -> WorkerProc:
    """Run the worker in this process, served by the running event loop: no process, no pipe. The ``inline``
    executor steps the envs inside the calls (``executor="in_process"``, :mod:`workers.inproc`); ``thread`` and
    ``async`` run them on threads or coroutines of this process (``num_workers=0``,
    :mod:`workers.inproc_concurrent`). :class:`UsageError` when a module of the caller's shadows the runtime
    (:func:`in_process_unavailable`)."""
    if (why := in_process_unavailable()) is not None:
        asked = "executor='in_process'" if spec.executor == "inline" else f"executor={spec.executor!r}, num_workers=0"
        raise UsageError(f"{asked} cannot run here: {why}")
    # imported here, not at import: only once the runtime is known to be aioenv's
    if spec.executor != "inline":
        from workers.inproc_concurrent import InProcessConcurrentWorker

        return InProcessConcurrentWorker(spec.name, spec.private_dir, spec.executor, spec.on_exit, spec.on_message)
    from workers.inproc import HOLD, InProcessWorker

    hold = HOLD if spec.hold is None else spec.hold
    here: HereWorker = InProcessWorker(
        spec.name, spec.private_dir, spec.on_exit, spec.on_message, slab_fd=spec.slab_fd, hold=hold
    )
    return here


def describe_exit(code: int | None) -> str:
    """Human words for a process exit code (negative: killed by a signal)."""
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class LocalProcess:
    """One worker process on this machine.

    Messages go both ways over a ``socketpair`` made here (:mod:`aioenv.transport.pipe`): the child inherits one
    end, :attr:`port` (a :class:`~aioenv.transport.pipe.PipePort`) is the other.

    Args:
        name: the worker's name (the identity its messages are delivered with).
        trusted_dir: the pool's private directory (pickled factories).
        executor: ``inline``, ``thread`` or ``async``.
        on_exit: called in the loop thread once, when the process has exited.
        on_message: called in the loop thread with each message the worker sends.
        slab_fd: the pool's shared-memory rows (:mod:`aioenv.transport.slab`), passed on as ``--slab``; None: none.
        done_fd: the write end of the pool's done pipe (:mod:`aioenv.wire.lane`), passed on as ``--done`` with
            ``slab_fd``; None: none.
        quiet_fds: the write end of the pool's quiet pipe and the read end of its countdown pipe, passed on as
            ``--quiet`` to an inline worker with ``done_fd``; None: none.
        quick: the messages of one size its pipe hands over before any parsing (see :data:`Quick`).

    Raises:
        UsageError: ``AIOENV_WORKER_SCHED`` holds a value other than ``batch`` or ``default``, or
            ``AIOENV_WORKER_START`` one other than ``fork`` or ``exec``.
    """

    def __init__(
        self,
        name: str,
        trusted_dir: str,
        executor: str,
        on_exit: Callable[[LocalProcess], None],
        on_message: Callable[[bytes, list[Any]], None],
        *,
        slab_fd: int | None = None,
        quick: Quick | None = None,
        done_fd: int | None = None,
        spawn: Spawn = spawn_here,
        quiet_fds: tuple[int, int] | None = None,
    ) -> None:
        check_worker_env()  # a bad setting fails here, not in the child
        self.name = name
        self._loop = asyncio.get_running_loop()
        self._on_exit = on_exit
        self.exited = asyncio.Event()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = ["--fd", str(theirs.fileno()), "--name", name, "--executor", executor]
        args += ["--trusted-dir", trusted_dir]
        inherit = [theirs.fileno()]
        if slab_fd is not None:
            args += ["--slab", str(slab_fd)]
            inherit.append(slab_fd)
            if done_fd is not None and executor in DONE_PIPE_EXECUTORS:
                args += ["--done", str(done_fd)]
                inherit.append(done_fd)
                if quiet_fds is not None and executor == "inline":
                    args += ["--quiet", f"{quiet_fds[0]},{quiet_fds[1]}"]
                    inherit += quiet_fds
        try:
            self.proc = spawn(lambda: launch_worker(args, inherit))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._broken = ""  # why the pipe broke while the process ran, if it did
        self._pipe = PipePort(ours, name.encode(), on_message, self._pipe_lost, quick=quick)
        self.port: Port = self._pipe
        #: Sends a message framed already for the pipe (:meth:`aioenv.transport.pipe.PipePort.send_framed`): False
        #: once the pipe is closed. The pipe's own method, not a method calling it: a lock-step batch sends one per
        #: worker.
        self.send_framed: Callable[[bytes], bool] = self._pipe.send_framed
        #: The pool's end of the worker's pipe itself, for a call that writes several workers' pipes at once
        #: (:func:`aioenv.transport.pipe.send_framed_each`).
        self.pipe: PipePort = self._pipe
        self.pid: int = self.proc.pid
        #: Readable once the process has exited (closed once it is reaped): a pidfd, or the template's status pipe.
        self.exit_fd: int = self.proc.exit_fd
        #: The pool's end of the worker's pipe: readable when a message (or the pipe's end) is in.
        self.pipe_fd: int = self._pipe.fileno()
        self._loop.add_reader(self.proc.exit_fd, self._reap)

    def rebind(
        self,
        name: str,
        on_message: Callable[[bytes, list[Any]], None],
        on_exit: Callable[[LocalProcess], None],
        quick: Quick | None = None,
    ) -> None:
        """Hand the running worker to a new owner: its messages reach ``on_message`` (and ``quick``) under ``name``,
        its exit ``on_exit`` (the process that timed an env for ``executor="auto"`` goes on as a pool's worker)."""
        self.name = name
        self._on_exit = on_exit
        self._pipe.rebind(name.encode(), on_message, quick)

    def drain(self, reads: int | None = None) -> None:
        """Read and handle what the worker's pipe holds, as the loop does when it is readable
        (:meth:`aioenv.transport.pipe.PipePort.drain`)."""
        self._pipe.drain(reads)

    @property
    def pipe_closed(self) -> bool:
        """Whether the worker's pipe has ended (closed by either side): :attr:`pipe_fd` is no longer its."""
        return self._pipe.closed

    @property
    def returncode(self) -> int | None:
        """The exit code once exited (negative: the signal that killed it)."""
        return self.proc.returncode

    def describe(self) -> str:
        """How it ended, in words."""
        if self._broken:
            return f"{self._broken}, so it was stopped ({describe_exit(self.proc.returncode)})"
        return describe_exit(self.proc.returncode)

    def _pipe_lost(self, reason: str, eof: bool) -> None:
        """Its pipe ended or broke. An exiting worker closes its end first, so an end of stream gets
        :data:`EOF_GRACE` seconds for the exit to follow; garbage on the pipe stops the worker at once.
        Either way its exit (and a restart) follows."""
        if eof:
            self._loop.call_later(EOF_GRACE, self._stop_broken, reason)
        else:
            self._stop_broken(reason)

    def _stop_broken(self, reason: str) -> None:
        if self.proc.returncode is None and not self.exited.is_set():
            self._broken = reason
            log.error("worker %s %s; stopping it", self.name, reason)
            self.kill()

    def _reap(self) -> None:
        self._loop.remove_reader(self.proc.exit_fd)
        self.proc.finish()  # its envs' own processes go with it, and it is reaped
        with contextlib.suppress(Exception):  # what it sent before it exited is still handled
            self._pipe.drain()
        self._pipe.close()
        self.exited.set()
        self._on_exit(self)

    def kill(self) -> None:
        """SIGKILL now (a hung worker)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """Wait ``grace`` s for a voluntary exit (when it was asked to exit), then SIGTERM, wait, then SIGKILL."""
        stages = (None, signal.SIGTERM, signal.SIGKILL) if ask_first else (signal.SIGTERM, signal.SIGKILL)
        for sig in stages:
            if self.exited.is_set():
                return
            if sig is not None and self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.exited.wait(), grace)
            except TimeoutError:
                continue

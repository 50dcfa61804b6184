"""A worker whose envs run in the pool's own process (``executor="in_process"``).

For envs whose step takes microseconds, a message to another process costs more than the step itself:
32 CartPole envs step in ~150 µs, a round trip to a worker process and back takes ~100 µs on a 2-core
machine. An in-process worker is the same :class:`~workers.runtime.Worker` (same autoreset rules, same
errors, same replies), called by the coordinator instead of reading a pipe, and its reply goes straight to
the coordinator's handler. When it shares a pool with worker processes, the steps whose rows go to ``recv()``
wait (:meth:`InProcessWorker.defer`) until the coordinator answers them (``Coordinator.answer_here``: when
``recv()`` would wait, or on the loop's second turn).

**The loop is never held longer than** ``hold`` **seconds** (the pool's ``max_loop_hold``, :data:`HOLD` by
default). Env code cannot be interrupted, so a bound that holds for a single slow step cannot run the step on
the loop's thread: every request (a step, a reset, a call, a CLOSE) runs on a thread of this process that the
worker keeps for its envs (:class:`_EnvThread`, which makes, steps and closes them), while the loop's thread
waits for it up to ``hold`` s. A request done by then is answered inside the call, as before: a lock-step
``step()`` finds its result ready and returns without a turn of the loop. One that takes longer is answered
from the loop once it is done (the env thread wakes it), and the loop runs everything else meanwhile:
``asyncio.wait_for`` fires, a heartbeat keeps its beat. A step past the pool's ``step_timeout`` is handled as a
hung worker process is (``Recovery._free_late``): its rows fail with ``StepTimeout`` (or come back truncated),
the worker is stopped (:meth:`InProcessWorker.kill`: the thread, stuck in env code, is abandoned, and closes
the envs if the call ever returns) and its envs are made again on a fresh worker and thread. ``aclose`` gives
a CLOSE its grace, then abandons the thread the same way. Yielding to the loop between envs instead would
bound the hold to one env's step only, which a single slow step breaks.

What it costs: two thread wake-ups per request (the env thread's and the loop thread's; a wait is one lock
acquire in C, :meth:`_Job.wait`), and a request's bookkeeping where the loop's thread used to step the envs
with no request at all. Lock-step ``step()`` of CartPole-v1 in this process, alternated in 0.2 s slices
against the loop-thread design it replaced (a 2-vCPU VM, lightly loaded, ``benchmarks/bench_isolation.py
--tree-before``, two runs): n = 8 0.45x and 0.49x as fast (96,000 -> 42,000 env-steps/s), n = 32 0.67x and
0.66x; under load the gap narrows (0.63x and 0.93x on a busy minute), and a worker process costs more (0.45x
and 0.58x of in-process stepping on the loop's thread). What it buys: 8 envs whose steps become 2 s each held a
10 ms heartbeat 16,003 ms late and ``wait_for(step(), 0.5)`` returned after 16 s; now the heartbeat is 11 ms
late (about ``hold``) and ``wait_for`` returns after 0.50 s.

A Ctrl-C lands in the main thread, never here: :meth:`InProcessWorker.interrupt_env_code` raises
``KeyboardInterrupt`` inside the env code that runs (``PyThreadState_SetAsyncExc``; taken back by
:meth:`_EnvThread._disarm` if the code returned first), as a Ctrl-C did when env code ran on the loop's
thread; ``SyncPool`` does it on a second Ctrl-C in one call.

What the caller still gives up, and why it is a choice (``executor="in_process"``, or what ``"auto"`` picks
for cheap envs with ``allow_in_process=True``; never by default): env code shares the caller's GIL, so a step
that keeps the GIL (a C call that does not release it) holds the loop until it returns, whatever ``hold`` says
(Python code lets the GIL go every few milliseconds); an env stuck for good keeps its thread and memory; an
env that crashes the interpreter (a segfault, ``os._exit``) takes the caller with it, and a leak is the
caller's. Exceptions raised by an env are its row's own errors, as in any worker; a ``KeyboardInterrupt`` or
``SystemExit`` raised in env code reaches the caller.

It presents the coordinator's ``WorkerProc`` and ``Port`` protocols (:mod:`aioenv.core.launcher`):
``send`` answers a request, ``kill`` reports an exit (its envs are closed on their thread), ``stop`` waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from workers.runtime import Worker

__all__ = ["InProcessProc", "InProcessWorker", "Port"]


class Port(Protocol):
    """Where the coordinator sends this worker's requests (the coordinator's ``Port``: here, the worker itself)."""

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send ``frames`` to ``identity``; False when that peer is not connected."""
        ...


#: Seconds a call may hold the event loop for env code in this process by default (``max_loop_hold``).
HOLD = 0.01


class _Job:
    """One piece of env code for the env thread: its outcome (``result`` or ``error``), and what to call from
    the env thread once it is done if the loop stopped waiting for it (:meth:`wait`, :meth:`later`)."""

    __slots__ = ("_done", "_gate", "_lock", "error", "fn", "interrupted", "late", "result")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.late: Callable[[], None] | None = None
        #: Whether a KeyboardInterrupt was raised in it (:meth:`_EnvThread.interrupt`).
        self.interrupted = False
        self._lock = threading.Lock()
        self._done = False
        # held until it is done: a wait is one acquire in C (an Event's wait costs a Condition's Python code)
        self._gate = threading.Lock()
        self._gate.acquire()

    def finish(self) -> None:
        """Mark it done (on the env thread); then, if the loop went on without it, call what :meth:`later` set."""
        with self._lock:
            self._done = True
            late = self.late
        self._gate.release()
        if late is not None:
            late()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for it; whether it is done."""
        if not self._gate.acquire(timeout=seconds):
            return False
        self._gate.release()  # open for the next wait too
        return True

    def later(self, then: Callable[[], None]) -> bool:
        """Have the env thread call ``then`` once it is done; False (and nothing set) when it is done already."""
        with self._lock:
            if self._done:
                return False
            self.late = then
            return True


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Have ``exc`` raised in the thread ``thread_id`` at its next bytecode (None: take back one not raised yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


class _EnvThread:
    """The thread of this process that runs an in-process worker's env code, one job after another.

    A daemon: an env stuck in a call keeps it for ever, and it must not keep the process from exiting."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._current: _Job | None = None  # the job whose code runs now, which interrupt() may cut short
        self._thread = threading.Thread(target=self._run, name=f"aioenv-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> _Job:
        """Queue ``fn``; its :class:`_Job`."""
        job = _Job(fn)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """End the thread once the jobs queued before this are done."""
        self._jobs.put(None)

    def runs_here(self) -> bool:
        """Whether the calling thread is this one (env code calling back into its pool)."""
        return threading.get_ident() == self._thread.ident

    def interrupt(self) -> _Job | None:
        """Raise ``KeyboardInterrupt`` in the job that runs now, as a Ctrl-C raises it in code of the main
        thread (once a job, between two of its bytecodes: a call into C finishes first); that job, or None when
        none runs."""
        with self._lock:
            job = self._current
            if job is None or job.interrupted or self._thread.ident is None:
                return job
            job.interrupted = True
            _raise_in(self._thread.ident, KeyboardInterrupt)
            return job

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                self._current = job
            try:  # an interrupt raised anywhere in here is the job's outcome, never the thread's end
                try:
                    job.result = job.fn()
                finally:
                    self._disarm(job)
            except BaseException as exc:  # noqa: BLE001 - the loop thread raises it, as if the env ran there
                job.error = exc
            job.finish()

    def _disarm(self, job: _Job) -> None:
        """No interrupt lands in ``job`` from here on: one asked for and not raised yet is taken back."""
        with self._lock:
            self._current = None
            if job.interrupted and self._thread.ident is not None:
                _raise_in(self._thread.ident, None)


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
        hold: the most seconds a request holds the event loop (see the module docstring).
    """

    def __init__(
        self,
        name: str,
        trusted_dir: str,
        on_exit: Callable[[InProcessWorker], None],
        on_message: Callable[[bytes, list[Any]], None],
        *,
        slab_fd: int | None = None,
        hold: float = HOLD,
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
        self._hold = hold
        self._thread = _EnvThread(name)
        self._loop.call_soon(self._say_hello)

    # ------------------------------------------------------------ Port

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Answer a request now if its env code is done within ``hold`` s: its reply reaches the coordinator's
        handler before ``send`` returns, so a lock-step call finds its future done and never waits for the loop;
        else from the loop once it is done (:meth:`_serve`). A request sent while a reply is being handled (a
        handler that sends again), or while one runs past ``hold``, is answered after it, in order, as from a
        pipe. False once ended."""
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
        runs, as from a process's pipe. Each runs on the env thread while this one waits up to ``hold`` s: a
        request answered by then is answered here and now; one that takes longer is answered from the loop once
        it is done (:meth:`_answer_late`), and the loop goes on meanwhile."""
        self._serving = True
        inbox = self._inbox
        waiting = False  # a request runs past hold: the loop answers it (and those behind it) once it is done
        try:
            while inbox and self._code is None:
                frames = inbox.popleft()
                job = self._thread.submit(functools.partial(self._worker.handle, frames))
                try:
                    done = job.wait(self._hold)
                except BaseException as exc:  # a Ctrl-C while waiting: the env goes on, and is answered once
                    # done, unless it was interrupted too (interrupt_env_code): then it is answered here, as when
                    # it ran in this thread, if its code takes the interrupt within hold (Python code does), and
                    # so is every request queued behind it, with the interruption (none runs)
                    if job.interrupted and job.wait(self._hold):
                        self._answer(frames, job)
                        while inbox and self._code is None:
                            self._on_message(self._identity, self._worker.interrupted(inbox.popleft(), exc))
                    else:
                        waiting = True
                        self._answer_later(frames, job)
                    raise
                if not done:
                    waiting = True
                    self._answer_later(frames, job)
                    return
                self._answer(frames, job)
        finally:
            self._serving = waiting

    def _answer_later(self, frames: Sequence[Any], job: _Job) -> None:
        """Answer ``job`` (the request ``frames``) from the loop once it is done; it stays first in the queue."""
        self._inbox.appendleft(frames)
        if not job.later(functools.partial(self._wake, job)):
            self._loop.call_soon(self._answer_late, job)  # done meanwhile

    def _wake(self, job: _Job) -> None:
        """From the env thread: have the loop answer ``job`` (nothing once the loop is closed: nobody waits)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._answer_late, job)

    def _answer_late(self, job: _Job) -> None:
        """A request that took longer than ``hold`` is done: answer it (unless this worker ended meanwhile), then
        the requests queued behind it."""
        if self._code is not None:
            return  # stopped while it ran (a deadline passed): its envs are being made again elsewhere
        frames = self._inbox.popleft()
        self._serving = False
        # interrupted by a second Ctrl-C (interrupt_env_code), which raised in its caller already: answered with
        # the interruption, not raised again in whatever call runs the loop now
        self._answer(frames, job, reraise=not job.interrupted)
        self.answer_deferred()

    def _answer(self, frames: Sequence[Any], job: _Job, *, reraise: bool = True) -> None:
        """Hand a request's reply to the coordinator. A Ctrl-C (or SystemExit) inside env code, in this
        process: the request is answered (its envs are released, the one that was running is broken until
        reset), and so is every request queued behind it (sent while this one was answered, rows the pool held
        back under max_concurrency): none runs, each gets the interruption as its reply. Then the interrupt
        goes on to the caller (from the loop, for a request answered after ``hold``), unless not ``reraise``
        (the caller had it already)."""
        exc = job.error
        if exc is not None:
            self._on_message(self._identity, self._worker.interrupted(frames, exc))
            while self._inbox and self._code is None:
                self._on_message(self._identity, self._worker.interrupted(self._inbox.popleft(), exc))
            if reraise:
                raise exc
            return
        reply, done = job.result
        if done:
            self._end(0, "exited with code 0")
        self._on_message(self._identity, reply)

    def runs_env_code(self) -> bool:
        """Whether a request is being answered (its env code runs, or runs past ``hold`` and is answered
        later) or waits to be."""
        return self._code is None and (self._serving or bool(self._inbox))

    def interrupt_env_code(self) -> None:
        """Raise ``KeyboardInterrupt`` inside the env code that runs now, if any, as a Ctrl-C in this thread
        raised it when env code ran on the loop's thread: the env that was running is broken until reset, and
        its request is answered with the interruption (a second Ctrl-C in a call of ``SyncPool``, for an env
        whose step never ends). Python code takes it at once; a call into C finishes first."""
        if self._code is None:
            self._thread.interrupt()

    def runs_env_code_here(self) -> bool:
        """Whether the calling thread is the one that runs this worker's env code (an env calling its pool)."""
        return self._thread.runs_here()

    # ------------------------------------------------------------ WorkerProc

    def kill(self) -> None:
        """Report the exit now (the coordinator then makes its envs again, elsewhere or here) and have the env
        thread close the envs once the env code it runs returns: an env stuck in a call keeps the thread, and
        its envs, for ever, but not the pool."""
        if self._code is None:
            self._thread.submit(self._worker.close_all)
            self._end(-9, "was stopped (its envs were closed)")

    def _end(self, code: int, why: str) -> None:
        self._code, self._why = code, why
        self._inbox.clear()
        self._thread.submit(self._release)  # on the env thread: a step still running there may write the rows
        self._thread.stop()
        self._loop.call_soon(self._exit)

    def _release(self) -> None:
        """Unmap the shared rows and close their descriptor (on the env thread, after its last env code)."""
        if self._worker.slab is not None:
            self._worker.slab.close()
        if self._slab_fd is not None:
            os.close(self._slab_fd)
            self._slab_fd = None

    def _exit(self) -> None:
        self.exited.set()
        self._on_exit(self)

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """End it (closing its envs if a CLOSE did not within ``grace`` s) and return once its exit was
        reported."""
        if self._code is None:
            if ask_first:  # a CLOSE was queued: let it be answered first
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.exited.wait()), grace)
            self.kill()
        await self.exited.wait()

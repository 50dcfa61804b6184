"""``aioenv.SyncPool``: the :class:`aioenv.Pool` API as blocking calls, for synchronous code.

A :class:`SyncPool` owns one private event-loop thread (uvloop when installed) that
starts the pool, runs every call and owns the worker processes; its methods hand the
call to that thread and block until it is done (the pattern of anyio's
``start_blocking_portal``). It therefore works from plain scripts, from several
threads at once, and from code whose own thread already runs an event loop (a
Jupyter cell): the caller's loop is simply blocked for the duration of the call.

Calls in the caller's thread: a call of a local pool needs its event loop only while it waits for its own
replies. Nothing happens on the loop between calls unless the pool keeps in touch with a server (``endpoint``:
its heartbeats) or runs envs on threads or coroutines of this process (``num_workers=0`` with ``thread`` or
``async``). So for every other pool, envs in worker processes (the default) as much as envs stepped inside
the calls in this process (``executor="in_process"``), the loop thread is parked after the start and each
call runs the loop in the caller's own thread, one call at a time (:attr:`SyncPool.runs_in_caller`): handing
each call to another thread and back costs two thread wake-ups (50-500 µs on a small VM, against ~200 µs for
8 CartPole steps on a worker). The caller's own running loop, if any, is set aside for the call and restored.
The rules below hold in both ways. With worker processes:

- a call first lets the loop take in whatever happened since the last one (one ``epoll_wait`` over the
  workers' exit descriptors; a turn of the loop if one is readable), so a worker whose exit this process has
  learned of between calls (at once through a pidfd; a forked worker's template reports it a moment later)
  reads as it does on the loop thread, which took it in at once: the next step of its envs raises
  ``EnvRemade``, its request never sent, rather than ``WorkerCrashed`` as if the worker died under it;
- a call waits for its replies without running the loop at all while all that comes is replies
  (:meth:`aioenv.core.runner.Runner.wait_here`: one ``epoll_wait`` over the workers' pipes, the pool's done pipe
  and their exits; what arrives is read here as the loop's readers would read it), for up to
  :data:`_BLOCK_AT_MOST` (50 ms): a worker's exit, a deadline due, a change of workers, a longer wait, and a
  call that comes 50 ms or more after the loop last ran let the loop run instead, so its timers (deadlines,
  ``max_worker_rss``) and the callbacks queued meanwhile are never late by more. A lock-step step of cheap envs
  then costs no run of the loop, whose setup in the main thread (uvloop's signal wake-up) cost as much as the
  rest of the call. Where the pool's worker processes leave a CPU to spare and its recent waits were short, the
  wait polls for up to twice their length (at most :data:`aioenv.core.coordinator.SPIN_AT_MOST`, 0.5 ms)
  before it sleeps, and so takes a reply as it comes rather than after the kernel wakes it
  (:func:`aioenv.core.coordinator.spin_budget`);
- the worker processes are still started on the loop thread, which serves such starts while parked: a worker
  dies with the thread that started it (``PR_SET_PDEATHSIG``), and one restarted inside a call from a
  short-lived thread must not;
- a call that leaves replies to come (``send``, ``send_reset``, a call cut short by Ctrl-C), and a call
  started without waiting (:meth:`SyncPool.submit`: the workers step while the caller goes on), give the loop
  back to its thread for good: only a running loop takes replies as they come and judges their deadlines on
  time. :meth:`SyncPool.answer` (and ``submit_step_checked``, for the adapters, whose wait follows at once)
  runs the call to its end in the caller's thread instead.

Reading :attr:`SyncPool.loop` (to schedule work of one's own there) gives the loop back to its thread for good,
and so does a ``step_env`` whose result is still to come.

Rules:

- Calling a SyncPool method from its own loop thread (e.g. from a done-callback of a
  :meth:`SyncPool.step_env` future, which runs there) raises :class:`UsageError`:
  the call would wait for the very thread that has to run it (a deadlock); so does a
  call from inside another call (an env's own code, when calls run in the caller's thread).
- Exceptions from the async core propagate unchanged: same type, same attributes
  (``env_id``, ``partial``, ``remote_traceback``, ...); the exception object is the
  one raised on the loop thread, so its traceback starts with the loop-side frames.
- A call is handed to the loop thread in one hop: ``step`` and ``reset`` dispatch
  there at once and their result future completes the caller's
  ``concurrent.futures.Future`` (no task per call); the other calls run as a
  coroutine (``run_coroutine_threadsafe``).
- Interrupting a blocked call (``KeyboardInterrupt``, or the ``timeout`` of
  :meth:`SyncPool.wait`) never corrupts the pool. The caller's future is
  cancelled (and with it the call's task, if it has one). For ``recv`` that is all:
  rows not yet taken stay queued for the next ``recv``. Requests already sent to
  envs (``reset``, ``step``, ``call``, ``get_attr``, ``set_attr``, ``render``) cannot
  be taken back: they finish in the background, their results are discarded (the
  envs did advance), and the next call first waits for them to finish, so it never
  sees a busy env. Per-env futures (:meth:`SyncPool.step_env`) are unaffected.
  When calls run in the caller's thread, Ctrl-C (SIGINT in the main thread) does not
  raise wherever it lands, which could be inside the pool's own bookkeeping or the
  event loop: the call finishes (its env code, which runs on a thread of its own, ends
  first; a call waiting on anything else, a ``recv`` among them, stops waiting, its
  requests go on as above) and raises ``KeyboardInterrupt`` as it returns. A second
  Ctrl-C in the same call raises at once, and inside the env code that runs, for an env
  whose step never ends (that env then needs a reset). A SIGINT handler of the
  program's own is left alone.
- :meth:`SyncPool.close` (idempotent) awaits ``Pool.aclose()`` on the loop thread,
  then stops and joins the thread. A pool that is never closed is closed when it is
  garbage-collected and, at the latest, at interpreter exit (``weakref.finalize``,
  which runs through ``atexit``), so no worker process outlives the program. Worker
  processes are started from the loop thread, parked or not, and are bound to it (their
  ``PR_SET_PDEATHSIG`` follows the thread that started them), so the thread lives
  exactly as long as the pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import logging
import queue
import signal
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import MethodType
from typing import Any, Literal, ParamSpec, TypeVar, overload

import numpy as np

from aioenv._compat import AutoresetMode
from aioenv._loop import consume, new_event_loop
from aioenv.core.sinks import ResetResult, StepResult
from aioenv.errors import PoolClosed, UsageError
from aioenv.pool import ForkGuard, Pool

__all__ = ["SyncPool", "make_sync"]

log = logging.getLogger("aioenv.sync")

T = TypeVar("T")
P = ParamSpec("P")

#: What a step returns: ``(obs, reward, terminated, truncated, info)``, info a dict of batched values.
StepRows = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]
#: A step whose ``info`` is a list with each env's own info dict, in row order (Stable-Baselines3's infos).
StepRowsListed = tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]

#: A pool call that dispatches synchronously (``Pool._start_step``): it returns the future of its result (done
#: already when it was answered inside the call: every env in this process, quick enough).
_Starter = Callable[..., "asyncio.Future[Any]"]

#: What :meth:`_Runtime.call_here` returns when the loop was taken back before the call could run here.
_TAKEN_BACK: Any = object()

_NESTED = (
    "a SyncPool method was called from inside one of its own calls (from an env's code, or a callback run by "
    "the call): it would wait for the call it is part of. Call it once that call has returned"
)

#: Upper bound on waiting for ``Pool.aclose()`` (which escalates to SIGKILL by itself, so it never hangs).
_CLOSE_BOUND = 120.0


def _settle(done: concurrent.futures.Future[Any], fut: asyncio.Future[Any]) -> None:
    """Hand the loop-side ``fut``'s outcome to ``done`` (unless ``done`` was cancelled: then it is dropped)."""
    if not done.set_running_or_notify_cancel():
        consume(fut)
        return
    if fut.cancelled():
        done.set_exception(concurrent.futures.CancelledError())
    elif (exc := fut.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(fut.result())


#: The longest a call in the caller's thread waits for its replies without running the event loop (see
#: ``_Runtime._waited_here``): long enough for a lock-step step of cheap envs, short enough that the loop's timers
#: and a first Ctrl-C wait for it unnoticed; a longer call then runs the loop for the rest.
_BLOCK_AT_MOST = 0.05


class _CtrlC:
    """Ctrl-C during a call that runs the pool in the caller's own (main) thread, held until the call is done.

    A KeyboardInterrupt raised wherever the main thread happens to be would land inside the coordinator's
    bookkeeping or inside the event loop's own code (uvloop then stays marked as running, and every later call
    fails): on the loop thread that code never sees a signal. So, as ``asyncio.run`` does for its main task,
    the first SIGINT only cancels what the call waits for, if anything but env code the call runs (which runs
    on a thread of its own, :mod:`workers.inproc`, and ends as it did when it ran in this thread: the call
    finishes with it; a ``recv`` stops waiting at once, its rows stay queued), and the call raises
    KeyboardInterrupt when it returns (its envs have stepped: the result is
    dropped, as for an interrupted call on the loop thread). A second SIGINT in the same call raises at once,
    wherever it lands, and inside the env code that runs now (an env that hangs inside its step is then broken
    until reset). Only in the main thread, and only over Python's default handler: a handler of the program's
    own is left alone."""

    __slots__ = ("_armed", "_loop", "_pool", "ends_with_env_code", "hit", "waited")

    def __init__(self, loop: asyncio.AbstractEventLoop, pool: Pool) -> None:
        self._loop = loop
        self._pool = pool
        self._armed = False
        self.hit = False
        #: The future the call waits for while the loop runs here (cancelled by the first SIGINT).
        self.waited: asyncio.Future[Any] | None = None
        #: Whether :attr:`waited` is a call that runs env code (shielded: a step, a reset, a call), which the
        #: first SIGINT lets end; else (a ``recv``) it stops waiting at once and loses nothing.
        self.ends_with_env_code = False

    def __enter__(self) -> _CtrlC:
        self._armed = (
            threading.current_thread() is threading.main_thread()
            and _getsignal(signal.SIGINT) is signal.default_int_handler
        )
        if self._armed:
            _setsignal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.hit:  # a second Ctrl-C: the user insists
            self._pool._interrupt_env_code()
            raise KeyboardInterrupt
        self.hit = True
        self._stop_waiting()

    def wait_begins(self) -> None:
        """The call now waits for :attr:`waited`: a first Ctrl-C that landed before (while the call went out)
        stops that wait now, as it would have had it landed during it."""
        if self.hit:
            self._stop_waiting()

    def _stop_waiting(self) -> None:
        waited = self.waited
        if waited is None or waited.done():
            return
        if not (self.ends_with_env_code and self._pool._runs_env_code()):
            waited.cancel()
            self._loop.call_soon_threadsafe(_nothing)  # wake the loop if it sleeps in its poll

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._armed:
            _setsignal(signal.SIGINT, signal.default_int_handler)
        if not self.hit or (exc_type is not None and issubclass(exc_type, KeyboardInterrupt)):
            return
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            raise KeyboardInterrupt from None  # the wait it cancelled
        raise KeyboardInterrupt  # over the call's own error, if any (its context), as on the loop thread


def _nothing() -> None:
    pass


class _Stepped:
    """A coroutine for :meth:`_Runtime._outcome` to run by hand in the caller's thread (:meth:`_Runtime._stepped`),
    each wait for a call of the pool's done without running the loop: what :meth:`SyncPool._run_stepped` hands
    over. Elsewhere (on the loop thread) it is the coroutine itself."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro


class _Resumed(Coroutine[Any, Any, Any]):
    """The rest of a coroutine that a call ran by hand until it awaited ``waiting`` (a future; None: a bare
    ``yield``, the loop's turn), for a task on the loop to run from there: the task first waits for ``waiting``,
    as it would had it run the coroutine all along, then drives the coroutine itself. A cancellation before that
    goes into the coroutine where it waits, so its ``finally`` blocks run as under a task of its own."""

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: asyncio.Future[Any] | None) -> None:
        self._coro = coro
        self._waiting = waiting

    def send(self, value: Any) -> Any:
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.done():
            return waiting  # what the coroutine yielded (its _asyncio_future_blocking still set): the task waits
        return self._coro.send(value)

    def throw(self, *exc: Any) -> Any:
        self._waiting = None
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._waiting = None
        self._coro.close()

    def __await__(self) -> Any:  # (a task drives it by send and throw; nothing awaits it)
        raise TypeError("_Resumed is run by a task, not awaited")


def _check_method(fn: object, name: str) -> None:
    """``SyncPool.submit``'s (or ``answer``'s) ``fn`` is a callable, not a method's name."""
    if isinstance(fn, str):
        raise TypeError(
            f"SyncPool.{name} takes the pool's method itself, not its name: sp.{name}(sp.pool.step, actions) "
            f"rather than sp.{name}('step', actions); got {fn!r}"
        )
    if not callable(fn):
        raise TypeError(f"SyncPool.{name} takes a callable, such as sp.pool.step; got {type(fn).__name__}")


# signal's own getsignal/signal wrap these C functions in enum conversions that cost ~4 µs a call (an exception
# raised and caught inside): twice per call of a pool whose calls run in the caller's thread, that was 7% of a
# step of 8 CartPole envs
_C_SIGNAL = importlib.import_module("_signal")
_getsignal: Callable[[int], object] = _C_SIGNAL.getsignal
_setsignal: Callable[[int, Callable[[int, Any], None]], object] = _C_SIGNAL.signal


class _Runtime:
    """The loop thread and the pool it runs. Holds no reference to the :class:`SyncPool`, so a
    ``weakref.finalize`` on the SyncPool can close it."""

    def __init__(self, pool: Pool, name: str) -> None:
        self.pool = pool
        #: The calls that take the light path (:meth:`start`: no task per call), keyed by the bound method a caller
        #: passes, each with the pool's starter that dispatches it at once (same arguments) and returns the future
        #: of its result; a starter passed itself is one too (the adapters' step, :meth:`SyncPool.step_checked`).
        self.starters: dict[Callable[..., Any], _Starter] = {
            pool.step: pool._start_step,
            pool.reset: pool._start_reset,
            pool._start_step: pool._start_step,
        }
        #: The one call that is not shielded: an interrupted ``recv`` stops waiting, and its rows stay queued.
        self.recv = pool.recv
        self.started_here = ForkGuard()  # a forked child's calls are refused (check_caller): no loop thread there
        self.loop = new_event_loop()
        self.closed = False
        self._close_lock = threading.Lock()
        #: Tasks of interrupted calls whose requests are still in flight (loop thread only).
        self.orphans: set[asyncio.Future[Any]] = set()
        #: Direct mode (see :meth:`go_direct`): the loop thread is parked and each call runs the loop in its own
        #: thread, one at a time (``_drive``); ``_driver`` is the thread inside a call.
        self.direct = False
        #: In direct mode, whether envs run in worker processes (else every env runs in this process, where nothing
        #: happens between calls). With workers, a call first lets the loop take in what happened since the last
        #: one (a worker process that exited, :meth:`_settled_then`), so that it is answered as on the loop thread,
        #: which took that in at once; a call that leaves a reply to come, and a call started without waiting
        #: (:meth:`submit`, :meth:`start`; the workers step while the caller goes on), give the loop back to its
        #: thread for good. Without, such a call runs to its end before it returns (nothing to overlap it with).
        self.in_workers = False
        #: When the loop last ran here (``time.monotonic``): a call that waits without it (:meth:`_waited_here`) does
        #: so only within :data:`_BLOCK_AT_MOST` of then, so that its timers and callbacks run that often.
        self._ran = 0.0
        self._drive = threading.Lock()
        self._driver: int | None = None
        self._parked = threading.Event()
        #: What the parked loop thread does (direct mode): start a worker process (:meth:`spawn`), or, None, take
        #: the loop back.
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        try:
            self.loop.run_forever()
            while self.direct:  # stopped to lend the loop to the callers' threads: wait until it is taken back
                self._parked.set()
                while (job := self._jobs.get()) is not None:
                    job()  # a worker process to start from this thread (see spawn)
                self.loop.run_forever()
        finally:
            try:
                tasks = asyncio.all_tasks(self.loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                self.loop.close()

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def starter(self, fn: Callable[..., Any]) -> _Starter | None:
        """The pool's starter for ``fn`` when ``fn`` takes the light path (:attr:`starters`), else None."""
        return self.starters.get(fn) if isinstance(fn, MethodType) else None

    def driven_here(self) -> bool:
        """Whether this thread is inside a call of this pool: one that runs the loop here (direct mode), or the
        env code of an env in this process, which its call waits for."""
        return self._driver == threading.get_ident() or self.pool._in_env_code()

    async def invoke(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], shield: bool) -> Any:
        """Run ``fn(*args, **kwargs)`` on the loop (awaiting it if it returns an awaitable).

        Waits first for interrupted calls still in flight. With ``shield``, a cancellation does not
        cancel the pool's call itself: it finishes in the background as an orphan.
        """
        if self.orphans:
            await self._orphans_done()
        result = fn(*args, **kwargs)
        if isinstance(result, _Stepped):  # on the loop thread: the coroutine itself
            result = result.coro
        if not inspect.isawaitable(result):
            return result
        if not shield:
            return await result
        inner = asyncio.ensure_future(result)
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            self._adopt([inner])
            raise

    def start(
        self, starter: _Starter, args: tuple[Any, ...], kwargs: dict[str, Any], *, here: bool = False
    ) -> concurrent.futures.Future[Any]:
        """Like :meth:`submit` with ``shield``, for a call that dispatches synchronously and returns the
        future of its result (a :data:`_Starter`): no coroutine and no task per call, one hop each way.

        The returned future stays pending until the result is in, so it can be cancelled (an interrupted
        wait): the call then becomes an orphan that the next call waits for, as with :meth:`submit`.
        """
        self.check_caller()
        if self.direct and (done := self._here(starter, args, kwargs, shield=True, here=here)) is not None:
            return done
        done = concurrent.futures.Future()
        inner: list[asyncio.Future[Any]] = []  # the loop-side future, once dispatched (loop thread only)

        def run() -> None:
            if done.cancelled():
                return  # interrupted before it was sent: nothing to do
            try:
                fut = (
                    self.loop.create_task(self._after_orphans(done, starter, args, kwargs))
                    if self.orphans
                    else starter(*args, **kwargs)
                )
            except Exception as exc:  # noqa: BLE001 - any error of the call goes to its caller (InvalidAction, ...)
                if done.set_running_or_notify_cancel():
                    done.set_exception(exc)
                return
            inner.append(fut)
            if fut.done():  # answered inside the call (envs in this process): no callback, no extra loop turn
                _settle(done, fut)
            else:
                fut.add_done_callback(lambda f: _settle(done, f))

        def interrupted(f: concurrent.futures.Future[Any]) -> None:
            if f.cancelled():
                self.loop.call_soon_threadsafe(self._adopt, inner)

        done.add_done_callback(interrupted)
        self.loop.call_soon_threadsafe(run)
        return done

    async def _after_orphans(
        self,
        done: concurrent.futures.Future[Any],
        starter: _Starter,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        await self._orphans_done()
        if done.cancelled():
            return None  # interrupted while it waited: nothing was sent
        return await starter(*args, **kwargs)

    def _orphans_done(self) -> asyncio.Future[list[Any]]:
        """Done once every interrupted call still in flight has ended (their outcomes are discarded)."""
        return asyncio.gather(*list(self.orphans), return_exceptions=True)

    def _adopt(self, inner: list[asyncio.Future[Any]]) -> None:
        """The loop-side futures of an interrupted call: they finish in the background (their outcome is
        discarded) and later calls wait for them first."""
        for fut in inner:
            fut.add_done_callback(consume)
            if not fut.done():
                self.orphans.add(fut)
                fut.add_done_callback(self.orphans.discard)

    def check_caller(self) -> None:
        """Refuse a call from a forked child, from inside a call of this pool, from the loop thread, or after
        close."""
        self.started_here.check()
        if self.driven_here():
            raise UsageError(_NESTED)
        if self.in_loop_thread():
            raise UsageError(
                "a SyncPool method was called from the SyncPool's own event-loop thread (e.g. from a future's "
                "done-callback): it would wait for the thread that has to run it, a deadlock. Use the async "
                "aioenv.Pool (SyncPool.pool) there, or call from another thread"
            )
        if self.closed or self.loop.is_closed():
            raise PoolClosed("the SyncPool is closed")

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        shield: bool = True,
        here: bool = False,
    ) -> concurrent.futures.Future[Any]:
        self.check_caller()
        if self.direct and (done := self._here(fn, args, kwargs, shield=shield, here=here)) is not None:
            return done
        return asyncio.run_coroutine_threadsafe(self.invoke(fn, args, kwargs, shield), self.loop)

    # ------------------------------------------------------------ direct mode

    def go_direct(self) -> None:
        """Park the loop thread: from now on each call runs the loop in the caller's own thread.

        For a pool whose envs all run in this process (nothing then happens on the loop between calls: every
        request is answered inside the call that sent it), so a call costs no thread hop at all. The loop
        thread stays, parked, until :meth:`to_thread` or :meth:`close` takes the loop back.
        """
        with self._drive:  # held until the loop thread is out of the loop: no call may run here before
            self.direct = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._parked.wait()

    def to_thread(self) -> None:
        """Leave direct mode for good: the loop runs on its own thread again (what callers queued on it
        meanwhile runs there). For callers that schedule work of their own on the loop (:attr:`SyncPool.loop`)."""
        if self.driven_here():
            raise UsageError(_NESTED)
        with self._drive:
            self._hand_back()

    def _hand_back(self) -> None:
        """Leave direct mode for good (``_drive`` held): the loop thread runs the loop again."""
        if self.direct:
            self.direct = False
            self._jobs.put(None)

    def spawn(self, start: Callable[[], T]) -> T:
        """``start()`` on the loop thread (the pool's :class:`aioenv.core.launcher.Spawn`): the worker processes it
        starts die with that thread (``PR_SET_PDEATHSIG``), which lives as long as the pool, not with a caller's
        thread that runs the loop in direct mode (a worker restarted after a crash, or recycled)."""
        if self.in_loop_thread() or not self.direct:
            return start()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job() -> None:
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - the caller's to raise
                done.set_exception(exc)

        self._jobs.put(job)  # the loop thread is parked (direct mode): it runs the job and waits for the next
        return done.result()

    def _here(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, shield: bool, here: bool
    ) -> concurrent.futures.Future[Any] | None:
        """:meth:`call_here` as a done future (for :meth:`submit` and :meth:`start`); None when the loop was taken
        back meanwhile, or is now (envs in worker processes and not ``here``, see :attr:`in_workers`): the
        caller then hands the call to the loop thread."""
        if self.in_workers and not here:
            self.to_thread()
            return None
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            value = self.call_here(fn, args, kwargs, shield=shield)
        except Exception as exc:  # noqa: BLE001 - the call's error is its caller's (Ctrl-C goes on as it is)
            done.set_exception(exc)
            return done
        if value is _TAKEN_BACK:
            return None
        done.set_result(value)
        return done

    def call_here(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, shield: bool) -> Any:
        """Run ``fn(*args, **kwargs)`` in this thread, on the loop the parked loop thread lent (direct mode), and
        return what it returned, awaited (its error raised as it is); :data:`_TAKEN_BACK` when the loop was taken
        back meanwhile. The loop is this thread's running loop for the length of the call only."""
        with self._drive:
            if not self.direct:
                return _TAKEN_BACK
            prev = asyncio._get_running_loop()
            ctrl_c = _CtrlC(self.loop, self.pool)
            try:  # set inside the try: a Ctrl-C landing anywhere here must not leave this thread marked
                self._driver = threading.get_ident()
                asyncio._set_running_loop(self.loop)
                with ctrl_c:
                    if self.orphans:  # as on the loop thread (invoke): an interrupted call finishes first
                        self._outcome(self._orphans_done(), shield=True, ctrl_c=ctrl_c)
                    if self.in_workers and not self.pool._settled():
                        call = self._settled_then(fn, args, kwargs)
                    else:
                        call = fn(*args, **kwargs)
                    return self._outcome(call, shield, ctrl_c=ctrl_c)
            finally:
                asyncio._set_running_loop(prev)
                self._driver = None
                if self.in_workers and self.pool._waits_for_replies():  # only a running loop takes that reply
                    self._hand_back()

    @staticmethod
    async def _settled_then(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn(*args, **kwargs)``, awaited, after one turn of the loop: events that came while no call ran the loop
        (a worker process's exit) are taken in first, so a crash between calls reads as it does on the loop
        thread (the next step raises ``EnvRemade``, its request never sent), not as one during this call."""
        await asyncio.sleep(0)  # the loop polls its descriptors before this task goes on
        result = fn(*args, **kwargs)
        if isinstance(result, _Stepped):  # run by this task, on the loop, as a whole
            result = result.coro
        return await result if inspect.isawaitable(result) else result

    def _outcome(self, result: Any, shield: bool, ctrl_c: _CtrlC) -> Any:
        """What a call returned, awaited: a future answered inside the call (envs in this process) at once,
        anything else by running the loop here until it is done. Ctrl-C cancels the wait (``ctrl_c``): with
        ``shield`` the call itself goes on as an orphan, as on the loop thread; without, it is cancelled."""
        if isinstance(result, asyncio.Future):
            if result.done():
                return result.result()
            if self.in_workers and self._waited_here(result, shield):
                return result.result()
        elif isinstance(result, _Stepped):
            return self._stepped(result.coro, shield, ctrl_c)
        elif not inspect.isawaitable(result):
            return result
        inner = asyncio.ensure_future(result)
        ctrl_c.waited = waited = asyncio.shield(inner) if shield else inner
        ctrl_c.ends_with_env_code = shield
        ctrl_c.wait_begins()
        asyncio._set_running_loop(None)  # run_until_complete refuses a thread whose loop is running
        try:
            self._ran = time.monotonic()
            return self.loop.run_until_complete(waited)
        except BaseException:
            if inner.done():
                pass
            elif shield:
                self._adopt([inner])
            else:
                inner.cancel()
            raise
        finally:
            ctrl_c.waited = None
            asyncio._set_running_loop(self.loop)

    def _stepped(self, coro: Coroutine[Any, Any, T], shield: bool, ctrl_c: _CtrlC) -> T:
        """Run ``coro`` to its end in this thread by hand, as a task would, but each future of this loop it awaits
        is waited for as a call's own (:meth:`aioenv.Pool._wait_here`: the workers' replies read here, no run of
        the loop), within :data:`_BLOCK_AT_MOST` of the loop's last run; past that, the loop runs here until that
        future is done. Anything else it awaits (a bare ``yield``, a foreign future), and a first Ctrl-C, hand the
        rest of it to a task on the loop (:class:`_Resumed`), run here by :meth:`_outcome`. The code between its
        waits runs with no current task: a coroutine that needs one (``asyncio.timeout``) is not for this."""
        loop = self.loop
        waiting: Any = None
        while not ctrl_c.hit:
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                value: T = stop.value
                return value
            if not isinstance(waiting, asyncio.Future) or waiting.get_loop() is not loop:
                break
            if ctrl_c.hit:  # (landed in the code that just ran) a call it waits for is later calls' to wait for
                self._adopt([waiting])
                break
            try:
                if not self._waits_here(waiting):
                    self._outcome(asyncio.wait((waiting,)), True, ctrl_c)  # the loop's turn: until it is done
            except BaseException:  # Ctrl-C: the rest goes on as a task, as the whole would have on the loop
                self._adopt([waiting])  # the call it waits for: later calls wait for it first
                rest = asyncio.ensure_future(_Resumed(coro, waiting))
                if shield:
                    self._adopt([rest])
                else:
                    rest.cancel()
                raise
            waiting._asyncio_future_blocking = False  # as a task leaves a future it waited for
            waiting = None
        return self._outcome(_Resumed(coro, waiting), shield, ctrl_c)  # type: ignore[no-any-return]

    def _waited_here(self, future: asyncio.Future[Any], shield: bool) -> bool:
        """Whether the call's ``future`` is done after waiting for it without running the loop, for up to
        :data:`_BLOCK_AT_MOST` (:meth:`aioenv.Pool._wait_here`: the workers' replies are read here, as the loop's
        readers would). Not when the loop last ran longer ago than that: this call runs it, so that its timers
        and the callbacks queued meanwhile are never late by more. A first Ctrl-C meanwhile is applied by the
        loop's wait that follows; a second one raises here, the call going on as an orphan (``shield``) or
        cancelled, as from the loop's wait."""
        try:
            return self._waits_here(future)
        except BaseException:
            if shield:
                self._adopt([future])
            else:
                future.cancel()
            raise

    def _waits_here(self, future: asyncio.Future[Any]) -> bool:
        """Whether ``future`` is done after waiting for it without running the loop (:meth:`aioenv.Pool._wait_here`),
        for up to :data:`_BLOCK_AT_MOST`; not at all when the loop last ran longer ago than that. Signals raise."""
        if time.monotonic() - self._ran > _BLOCK_AT_MOST:  # the loop's turn: timers, callbacks queued meanwhile
            return False
        return self.pool._wait_here(future, _BLOCK_AT_MOST)

    @staticmethod
    def wait(future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        try:
            return future.result(timeout)
        except BaseException:
            if not future.done():  # interrupted or timed out while waiting: cancel the loop-side task
                future.cancel()
            raise

    def close(self) -> None:
        """Close the pool on the loop thread, then stop and join the thread (idempotent)."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        if not self.thread.is_alive() or self.loop.is_closed():
            return
        self.to_thread()  # the pool closes on the loop thread, which joins afterwards
        if self.in_loop_thread():  # finalized on its own thread: cannot block here, so let the loop do it

            async def close_then_stop() -> None:
                try:
                    await self.pool.aclose()
                finally:
                    self.loop.stop()

            self.loop.create_task(close_then_stop())
            return
        try:
            asyncio.run_coroutine_threadsafe(self.pool.aclose(), self.loop).result(_CLOSE_BOUND)
        except BaseException:
            log.exception("closing the aioenv pool failed")
            raise
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(_CLOSE_BOUND)


class SyncPool:
    """A :class:`aioenv.Pool` driven by blocking calls; see the module docstring for the rules.

    ``SyncPool(env, num_envs=None, **options)`` takes exactly the arguments of :class:`aioenv.Pool`
    (``batch_size``, ``num_workers``, ``executor``, ``autoreset_mode``, ``seed``, ``env_kwargs``,
    ``step_timeout``, ``endpoint``) and starts the pool before returning. Every method has the
    signature and return values of its ``Pool`` twin; B is the number of rows (``len(env_ids)``).
    ``num_envs``, ``batch_size``, ``num_workers``, ``single_observation_space``, ``single_action_space``,
    ``observation_space``, ``action_space`` (batched over ``num_envs``), ``autoreset_mode``, ``metadata``,
    ``render_mode`` and ``closed`` are as on :class:`aioenv.Pool`.

    Attributes:
        pool: the underlying :class:`aioenv.Pool` (use it only from coroutines run on the loop thread).
    """

    def __init__(self, env: Any, num_envs: int | None = None, **options: Any) -> None:
        pool = Pool(env, num_envs, **options)  # argument errors raise here, before any thread exists
        self._rt = _Runtime(pool, name=f"aioenv-sync-{id(self):x}")
        pool._spawn = self._rt.spawn
        self._finalizer = weakref.finalize(self, _Runtime.close, self._rt)
        try:
            self._rt.wait(self._rt.submit(pool.start, (), {}, shield=False))
        except BaseException:
            self._finalizer()
            raise
        if pool._idle_between_calls():
            self._rt.in_workers = pool.envs_in_process < pool.num_envs
            self._rt.go_direct()

    # ------------------------------------------------------------ plumbing

    @property
    def pool(self) -> Pool:
        """The underlying async pool (for coroutines scheduled on :attr:`loop`)."""
        return self._rt.pool

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private event loop that runs the pool, on its own thread (for coroutines and callbacks of your
        own: ``asyncio.run_coroutine_threadsafe(coro, sp.loop)``). A pool whose calls run in the caller's thread
        (:attr:`runs_in_caller`) gives the loop back to its thread for good when asked for ``loop``, so that what
        you schedule on it runs."""
        self._rt.to_thread()
        return self._rt.loop

    @property
    def runs_in_caller(self) -> bool:
        """True while calls run in the calling thread rather than on the loop thread: a local pool whose loop has
        nothing to do between calls (envs in worker processes or stepped inside the calls here; not a remote
        pool, nor envs on threads or coroutines of this process), until something gives the loop back to its
        thread for good (a ``send``, a :meth:`submit`, :attr:`loop`). See the module docstring."""
        return self._rt.direct

    def run_coroutine(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` (which may use :attr:`pool`) on the pool's loop; a ``concurrent.futures.Future`` of
        its result. When calls run in the caller's thread (:attr:`runs_in_caller`), ``coro`` runs to its end
        before this returns; otherwise it runs on the loop thread and this returns at once."""

        async def run() -> T:
            return await coro

        future: concurrent.futures.Future[T] = self._rt.submit(run, (), {}, shield=False, here=True)
        return future

    def _run_stepped(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """:meth:`run_coroutine` for a coroutine that awaits little but this pool's calls, and needs no current task
        between them (no ``asyncio.timeout``): where calls run in the caller's thread with worker processes, it
        runs here by hand and waits for each call's replies as the call itself would, without running the loop
        (``_Runtime._stepped``; a collector's lock-step batch). Elsewhere it runs on the loop thread, which it
        takes back for good where calls ran here, as a coroutine on :attr:`loop` would."""
        rt = self._rt
        if not (rt.direct and rt.in_workers):
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

        def stepped() -> _Stepped:
            return _Stepped(coro)

        future: concurrent.futures.Future[T] = rt.submit(stepped, (), {}, shield=False, here=True)
        return future

    @overload
    def submit(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]: ...
    @overload
    def submit(
        self, fn: Callable[P, None], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[None]: ...
    def submit(self, fn: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[Any]:
        """Start ``fn(*args, **kwargs)``, a method of :attr:`pool` (``sp.submit(sp.pool.step, actions)``), on the
        loop thread without waiting for it. Where calls run in the caller's thread (:attr:`runs_in_caller`), envs
        stepped inside the calls in this process make it run here, done when this returns; envs in worker
        processes give the loop back to its thread for good, so that they step while the caller goes on (for a
        wait that follows at once, :meth:`answer` keeps the call here). A type checker checks the arguments
        against ``fn``'s own.

        Returns a ``concurrent.futures.Future`` with the call's result (a coroutine method's, or a returned
        future's, awaited) or exception; wait for it with :meth:`wait`. A later call first waits for this one
        if it was interrupted; an interrupted ``pool.recv`` loses no rows. ``pool.step`` and ``pool.reset`` take
        the light path (no task per call). For the building of ``step_async``/``step_wait`` style adapters.

        Raises:
            TypeError: ``fn`` is a method's name (the form this method took before): pass the method itself; or
                ``fn`` is not callable at all.
        """
        _check_method(fn, "submit")
        return self._submit(fn, args, kwargs)

    @overload
    def answer(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]: ...
    @overload
    def answer(
        self, fn: Callable[P, None], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[None]: ...
    def answer(self, fn: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[Any]:
        """:meth:`submit`, for a caller that waits for the result before it does anything else (an adapter's
        ``step_async``, whose ``step_wait`` follows): where calls run in the caller's thread
        (:attr:`runs_in_caller`), the call runs to its end here, with no hop to the loop thread and none back, even
        for envs in worker processes (which :meth:`submit` would leave stepping while the caller goes on, handing
        the loop back to its thread for good); elsewhere just as :meth:`submit`.

        Raises:
            TypeError: as :meth:`submit`.
        """
        _check_method(fn, "answer")
        return self._submit(fn, args, kwargs, here=True)

    def _submit(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], here: bool = False
    ) -> concurrent.futures.Future[Any]:
        rt = self._rt
        starter = rt.starter(fn)
        if starter is not None:  # the common calls take the lighter path (no task per call)
            return rt.start(starter, args, kwargs, here=here)
        return rt.submit(fn, args, kwargs, shield=fn != rt.recv, here=here)

    @overload
    def _run(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def _run(self, fn: Callable[P, None], /, *args: P.args, **kwargs: P.kwargs) -> None: ...
    def _run(self, fn: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """``fn(*args, **kwargs)`` (a method of the pool) run to its end: its result, awaited, or its error."""
        rt = self._rt
        if rt.direct:  # in this thread, with no future to hand the outcome over (see _Runtime.call_here)
            rt.check_caller()
            value = rt.call_here(rt.starter(fn) or fn, args, kwargs, shield=fn != rt.recv)
            if value is not _TAKEN_BACK:
                return value
        return rt.wait(self._submit(fn, args, kwargs))

    def wait(self, future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
        """Block until ``future`` (from :meth:`submit`) is done and return its result.

        Raises:
            TimeoutError: after ``timeout`` seconds; the call is cancelled as described in the module
                docstring (its env requests finish in the background and are discarded).
        """
        return self._rt.wait(future, timeout)

    # ------------------------------------------------------------ attributes

    @property
    def num_envs(self) -> int:
        """Number of envs, ids ``0 .. num_envs - 1``."""
        return self._rt.pool.num_envs

    @property
    def batch_size(self) -> int:
        """Rows :meth:`recv` returns by default."""
        return self._rt.pool.batch_size

    @property
    def num_workers(self) -> int:
        """Number of worker processes."""
        return self._rt.pool.num_workers

    @property
    def single_observation_space(self) -> Any:
        """One env's observation space."""
        return self._rt.pool.single_observation_space

    @property
    def single_action_space(self) -> Any:
        """One env's action space."""
        return self._rt.pool.single_action_space

    @property
    def observation_space(self) -> Any:
        """The observation space batched over ``num_envs`` (as gymnasium's vector envs)."""
        return self._rt.pool.observation_space

    @property
    def action_space(self) -> Any:
        """The action space batched over ``num_envs``."""
        return self._rt.pool.action_space

    @property
    def autoreset_mode(self) -> AutoresetMode:
        """The autoreset mode, as gymnasium's enum."""
        return self._rt.pool.autoreset_mode

    @property
    def metadata(self) -> dict[str, Any]:
        """The env's metadata plus ``"autoreset_mode"``."""
        return self._rt.pool.metadata

    @property
    def render_mode(self) -> str | None:
        """The env's render mode."""
        return self._rt.pool.render_mode

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began (or the pool was closed otherwise)."""
        return self._rt.closed or self._rt.pool.closed

    # ------------------------------------------------------------ batched calls

    def reset(
        self,
        env_ids: Any = None,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset ``env_ids`` (all when None) and wait; returns ``(obs, info)``, obs with B rows,
        ``info["env_id"]`` ``(B,)`` int32. See :meth:`aioenv.Pool.reset`."""
        return self._run(self._rt.pool.reset, env_ids, seed=seed, options=options)

    def step(self, actions: Any, env_ids: Any = None) -> StepRows:
        """Step ``env_ids`` (all when None) and wait; returns ``(obs, reward, terminated, truncated, info)``:
        reward ``(B,)`` float64, flags ``(B,)`` bool. See :meth:`aioenv.Pool.step`."""
        return self._run(self._rt.pool.step, actions, env_ids)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps (returns once they are sent); results come through :meth:`recv`."""
        self._run(self._rt.pool.send, actions, env_ids)

    def send_reset(
        self,
        env_ids: Any = None,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Dispatch resets; their rows come through :meth:`recv` with reward 0."""
        self._run(self._rt.pool.send_reset, env_ids, seed=seed, options=options)

    def recv(
        self, *, min_results: int | None = None, max_results: int | None = None, timeout: float | None = None
    ) -> StepRows:
        """Rows of :meth:`send`/:meth:`send_reset` in the order they finished (B between ``min_results`` and
        ``max_results``). An interrupted ``recv`` loses nothing: rows stay queued. See :meth:`aioenv.Pool.recv`."""
        return self._run(self._rt.pool.recv, min_results=min_results, max_results=max_results, timeout=timeout)

    # ------------------------------------------------------------ for the adapters in aioenv.compat

    @overload
    def step_checked(self, leaves: Sequence[np.ndarray], *, info_list: Literal[False] = False) -> StepRows: ...
    @overload
    def step_checked(self, leaves: Sequence[np.ndarray], *, info_list: Literal[True]) -> StepRowsListed: ...
    def step_checked(self, leaves: Sequence[np.ndarray], *, info_list: bool = False) -> StepRows | StepRowsListed:
        """Step every env with actions checked already, and wait: :meth:`step` for the adapters in
        :mod:`aioenv.compat`, which check a whole batch in their own terms first.

        ``leaves``: what :func:`aioenv.wire.spaces.check_actions` returned for the actions of every env in
        order, taken as they are (the pool does not check them again; the caller must not change them until the
        step is sent). With ``info_list``, ``info`` is a list with each env's own info dict, in row order, as
        Stable-Baselines3 wants (still one message per worker). When calls run in the caller's thread
        (:attr:`runs_in_caller`), the step is answered inside this call, with no future to hand it over."""
        rows: StepRows | StepRowsListed = self._run(
            self._rt.pool._start_step, leaves, None, info_list=info_list, checked=True
        )
        return rows

    @overload
    def submit_step_checked(
        self, leaves: Sequence[np.ndarray], *, info_list: Literal[False] = False, here: bool = False
    ) -> concurrent.futures.Future[StepRows]: ...
    @overload
    def submit_step_checked(
        self, leaves: Sequence[np.ndarray], *, info_list: Literal[True], here: bool = False
    ) -> concurrent.futures.Future[StepRowsListed]: ...
    def submit_step_checked(
        self, leaves: Sequence[np.ndarray], *, info_list: bool = False, here: bool = False
    ) -> concurrent.futures.Future[StepRows] | concurrent.futures.Future[StepRowsListed]:
        """:meth:`step_checked` without waiting, as :meth:`submit` starts a call (``here``: as :meth:`answer`, for
        an adapter's step whose wait follows at once): the future of its result."""
        fields = {"info_list": info_list, "checked": True}
        return self._submit(self._rt.pool._start_step, (leaves, None), fields, here)

    # ------------------------------------------------------------ per-env futures

    def _future(self, dispatch: Callable[[], asyncio.Future[T]]) -> concurrent.futures.Future[T]:
        loop = self._rt.loop

        def start() -> concurrent.futures.Future[T]:
            source = dispatch()  # raises at once for a busy env or a bad action
            dest: concurrent.futures.Future[T] = concurrent.futures.Future()

            def copy(src: asyncio.Future[T]) -> None:
                if dest.cancelled():
                    return
                if src.cancelled():
                    dest.cancel()
                    dest.set_running_or_notify_cancel()
                elif src.exception() is not None:
                    dest.set_exception(src.exception())
                else:
                    dest.set_result(src.result())

            def cancel_source(d: concurrent.futures.Future[T]) -> None:
                if d.cancelled() and not loop.is_closed():
                    loop.call_soon_threadsafe(source.cancel)

            if source.done():  # answered inside the call (envs in this process): no loop turn to wait for
                copy(source)
            else:
                source.add_done_callback(copy)
                dest.add_done_callback(cancel_source)
            return dest

        fut: concurrent.futures.Future[T] = self._rt.wait(self._rt.submit(start, (), {}, here=True))
        if not fut.done():
            self._rt.to_thread()  # a result to come between calls: only a running loop can deliver it
        return fut

    def step_env(self, env_id: int, action: Any) -> concurrent.futures.Future[StepResult]:
        """Step one env; returns a ``concurrent.futures.Future`` resolved with its :class:`StepResult`
        (or the env's exception). Its done-callbacks run on the loop thread (or at once in the caller's thread
        when added to a future already done). Cancelling it drops the result."""
        return self._future(lambda: self._rt.pool.step_env(env_id, action))

    def reset_env(
        self, env_id: int, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> concurrent.futures.Future[ResetResult]:
        """Reset one env; returns a ``concurrent.futures.Future`` resolved with its :class:`ResetResult`."""
        return self._future(lambda: self._rt.pool.reset_env(env_id, seed=seed, options=options))

    # ------------------------------------------------------------ methods and attributes

    def call(self, name: str, *args: Any, env_ids: Any = None, **kwargs: Any) -> list[Any]:
        """Call method ``name`` on each env; a list with one result per env. See :meth:`aioenv.Pool.call`."""
        return self._run(self._rt.pool.call, name, *args, env_ids=env_ids, **kwargs)

    def get_attr(self, name: str, env_ids: Any = None) -> list[Any]:
        """Attribute ``name`` of each env (one per env in ``env_ids`` order)."""
        return self._run(self._rt.pool.get_attr, name, env_ids)

    def set_attr(self, name: str, values: Any, env_ids: Any = None) -> None:
        """Set attribute ``name``: a list/tuple gives one value per env, anything else is set on all."""
        self._run(self._rt.pool.set_attr, name, values, env_ids)

    def render(self, env_ids: Any = None) -> np.ndarray:
        """RGB frames, shape ``(B, H, W, 3)`` uint8 (envs made with ``render_mode="rgb_array"``)."""
        return self._run(self._rt.pool.render, env_ids)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the pool (``Pool.aclose()`` on the loop thread), then stop and join the thread. Idempotent.

        Calls blocked in other threads fail with :class:`PoolClosed`.
        """
        if self._rt.in_loop_thread():
            raise UsageError("SyncPool.close() was called from its own event-loop thread: call it from another thread")
        if self._rt.driven_here():
            raise UsageError(_NESTED)
        self._finalizer()

    def __enter__(self) -> SyncPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running"
        return f"<aioenv.SyncPool num_envs={self.num_envs} workers={self.num_workers} {state}>"


def make_sync(env: Any, num_envs: int | None = None, **options: Any) -> SyncPool:
    """Create and start a :class:`SyncPool` (the blocking twin of :func:`aioenv.make`); same arguments."""
    return SyncPool(env, num_envs, **options)

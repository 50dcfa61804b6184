"""The ``thread`` and ``async`` executors: a worker whose envs' steps overlap.

The worker runs an asyncio loop (uvloop when installed). Its link to the coordinator
(:mod:`workers.link`: an inherited pipe, or a ZeroMQ DEALER socket for a remote server)
is read through ``loop.add_reader`` and drained without blocking, so the loop stays
free for the envs.

- ``thread``: each env lives on its own long-lived daemon thread (:class:`EnvThread`);
  everything done to that env (make, reset, step, call, close) runs on that thread,
  as envs tied to their creating thread (Playwright's sync API) require.
- ``async``: envs are ``aioenv.AsyncEnv`` objects; their ``reset``/``step`` run as
  tasks in the loop, thousands per process.

Every row of a STEP or RESET request starts at once. Rows that finish in the same
loop turn go back together in one RESULT, whichever requests they belong to:
``"multi": [[request id, [rows]], ...]`` names them, and the other fields are
indexed over all of them in that order. So never one message per env, nor per
request, and a slow env never holds back a fast one. A worker of a local pool
shares the pool's slab (``--slab``, :mod:`aioenv.transport.slab`): a request that
says ``"sh"`` has its actions in the envs' rows, and its rows' observations, rewards
and flags go there as they finish, the RESULT (also ``"sh"``) carrying only infos
and errors. A ``thread`` worker started with the pool's done pipe too (``--done``,
:mod:`aioenv.wire.lane`) lets each env's thread put its own step's row there and tell
the pool with a row record, one write, when the row has neither an info nor an error:
the row skips the hop to the worker's loop and its RESULT, and the thread does not
wake the loop: it counts the row when it next handles a message. (Timers fire on the loop's
millisecond ticks, so rows of waiting envs finish in clusters: 1,024 envs stepping
every 20 ms make about 1,500 replies a second, not 50,000.)

``CANCEL {"env": ids, "ended": ids}``: the coordinator gave up on those envs'
requests (a deadline passed) and answered them itself. Their running steps are
cancelled (``async``) or abandoned (``thread``: the coordinator restarts the whole
worker instead, as a hung thread cannot be stopped), their late results are
dropped, and each env is replaced by a fresh one from its factory (those in
``ended`` behave as after a truncation; the others need a reset).

MAKE and CANCEL are barriers: messages that arrive while envs are being made
wait and are handled, in order, afterwards, so a request never finds its env
half-made.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from aioenv._loop import run as run_loop
from aioenv.errors import ProtocolError
from aioenv.transport.pipe import LinkClosed
from aioenv.transport.slab import Slab
from aioenv.wire import lane
from aioenv.wire.errors import error_fields
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_from_wire, local, pickle_allowed
from workers.hosted import AsyncHostedEnv, HostedEnv, check_executor
from workers.link import Link, open_link
from workers.runtime import (
    CallSpec,
    Group,
    batch_reply,
    checked_value,
    describe_env,
    done_pipe_as,
    encode_reply,
    extra_arrays,
    mapped_slab,
    no_slab,
    put_obs,
    shared_reply,
    shared_rows,
)
from workers.sources import resolve

if TYPE_CHECKING:  # (a worker on its pool's pipe never imports ZeroMQ: see workers.link)
    import zmq

log = logging.getLogger("aioenv.worker")

#: Seconds an env's close may take at shutdown or replacement before it is abandoned.
CLOSE_GRACE = 5.0
#: What an env's step on its thread returns once it recorded its row on the done pipe (see
#: :meth:`ConcurrentWorker._record_on_thread`).
_RECORDED = object()
_DRAIN_BATCH = 256


class EnvThread:
    """A daemon thread that runs one env's calls in order; results come back to the loop as futures.

    A call that returns :data:`_RECORDED` has answered its row itself (on the pool's done pipe): its future is put
    in ``recorded`` for the loop to settle when it next handles a message
    (:meth:`ConcurrentWorker._settle_recorded`), and the loop is not woken for it: each wake-up from a thread costs
    the worker's process a write, a loop turn and the GIL handed back and forth, and the loop's turn delays the
    threads of the next request (docs/performance.md, "A recorded row wakes no worker loop")."""

    def __init__(
        self, name: str, loop: asyncio.AbstractEventLoop, recorded: collections.deque[asyncio.Future[Any]]
    ) -> None:
        self._loop = loop
        self._recorded = recorded
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = queue.SimpleQueue()
        self._ended: asyncio.Future[Any] = loop.create_future()  # set by the thread as it returns
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn()`` on this thread; the future (of the loop) gets its result or exception."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._queue.put((fn, fut))
        return fut

    def stop(self) -> None:
        """Let the thread end after the calls already queued."""
        self._queue.put(None)

    async def ended(self, grace: float) -> bool:
        """Wait (at most ``grace`` seconds), after :meth:`stop`, until the thread has ended; False if it did not (a
        call still runs). Whoever closed a pool may then count on its env threads being gone."""
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), grace)
        except TimeoutError:
            return False
        self._thread.join(grace)  # it has returned from its function: the join only sees it finish
        return not self._thread.is_alive()

    def _serve(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                fn, fut = item
                try:
                    ok, value = True, fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the loop as the call's outcome
                    ok, value = False, exc
                if value is _RECORDED:  # answered on the done pipe already: the loop settles it, unwoken
                    self._recorded.append(fut)
                    continue
                try:
                    self._loop.call_soon_threadsafe(_settle, fut, ok, value)
                except RuntimeError:  # the loop is closed: the worker is exiting
                    return
        finally:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_settle, self._ended, True, None)


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class _Env:
    """One hosted env and where its calls run: its thread (``thread`` executor), or its actor task fed
    through ``inbox`` (``async``: one long-lived task per env is cheaper than a task per step)."""

    __slots__ = ("env_id", "group", "hosted", "inbox", "task", "thread")

    def __init__(self, env_id: int, group: Group, hosted: HostedEnv | AsyncHostedEnv, thread: EnvThread | None) -> None:
        self.env_id = env_id
        self.group = group
        self.hosted = hosted
        self.thread = thread
        self.task: asyncio.Future[Any] | None = None  # thread: the running call; async: the actor
        self.inbox: asyncio.Future[tuple[Any, ...]] | None = None


class _OpenRequest:
    """A STEP or RESET request this worker is answering, its rows finishing one by one."""

    __slots__ = ("done", "env_ids", "group", "id", "ilist", "kind", "left", "shared")

    def __init__(self, req_id: Any, kind: str, env_ids: list[int], group: Group, ilist: bool, shared: bool) -> None:
        self.id = req_id
        self.shared = shared  # its actions are in the pool's shared rows, and its results go there
        self.kind = kind
        self.env_ids = env_ids
        self.group = group
        self.ilist = ilist
        self.left = len(env_ids)
        self.done: list[tuple[int, bool, Any]] = []  # (row, ok, outcome)


class ConcurrentWorker:
    """Hosts envs for one coordinator with the ``thread`` or ``async`` executor; see the module docstring."""

    def __init__(
        self,
        endpoint: str | int,
        name: str,
        *,
        trusted_dir: str | None = None,
        executor: str = "async",
        configure: Callable[[zmq.Socket[Any]], None] | None = None,
        slab_fd: int | None = None,
        done_fd: int | None = None,
    ) -> None:
        self.configure = configure  # socket options before connect (CURVE keys for a remote server)
        if executor not in ("thread", "async"):
            raise ValueError(f"ConcurrentWorker runs the 'thread' or 'async' executor, got {executor!r}")
        self.endpoint = endpoint  # a ZeroMQ endpoint, or the descriptor of an inherited pipe
        self.name = name
        self.trusted_dir = trusted_dir
        self.executor = executor
        self.mode = "next_step"
        self.envs: dict[int, _Env] = {}
        self.groups: dict[str, Group] = {}
        self._open: dict[Any, _OpenRequest] = {}
        self._recorded: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._dirty: list[_OpenRequest] = []
        self._flush_scheduled = False
        self._drain_scheduled = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._barrier: list[list[Any]] | None = None  # messages waiting for a MAKE/CANCEL to finish
        #: Run by a pool in its own process (:mod:`workers.inproc_concurrent`): pickled values cross as in
        #: a worker process its pool started (:func:`aioenv.wire.protocol.trust_parent_pipe`), and rows
        #: without infos or errors go back as they are (``protocol.Local``).
        self.same_process = False
        #: The pool's shared rows (:mod:`aioenv.transport.slab`): its descriptor, inherited, and the rows once
        #: the pool says how they lie (SLAB, or a MAKE's ``"slab"``).
        self.slab_fd = slab_fd
        self.slab: Slab | None = None
        #: The pool's done pipe (a ``thread`` worker's, inherited), and as which slot, with what token, its env
        #: threads write row records there once the pool says so (see the module docstring).
        self.done_fd = done_fd
        self._done_as: tuple[int, int] | None = None

    # ------------------------------------------------------------------ loop and socket

    def run(self) -> None:
        """Connect, say HELLO, serve until CLOSE."""
        run_loop(self._main())

    async def _main(self) -> None:
        link = open_link(self.endpoint, self.name, self.configure)
        self.attach(link)
        fd = link.fileno()
        self.loop.add_reader(fd, self._drain)
        try:
            await self.serve()
        finally:
            self.loop.remove_reader(fd)
            link.close()

    def attach(self, link: Link) -> None:
        """Send through ``link`` from the running loop; messages come in through :meth:`handle`."""
        self.loop = asyncio.get_running_loop()
        self._stopped = self.loop.create_future()
        self.link: Link = link

    async def serve(self) -> None:
        """Say HELLO through the link (:meth:`attach`), answer messages until CLOSE (or :meth:`stop`), then
        close every env."""
        try:
            self._send(encode(Op.HELLO, {Key.NAME: self.name, Key.PID: os.getpid(), Key.EXECUTOR: self.executor}))
            await self._stopped
        finally:
            await self._close_all()

    def stop(self) -> None:
        """End :meth:`serve` (its envs are closed on the way out)."""
        if not self._stopped.done():
            self._stopped.set_result(None)

    def _send(self, frames: list[Any]) -> None:
        try:
            self.link.send(frames)
        finally:
            if self.link.edge_triggered and not self._drain_scheduled:
                # a send, even one that fails, may consume the descriptor's edge: look once after the burst
                self._drain_scheduled = True
                self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        link = self.link
        try:
            for _ in range(_DRAIN_BATCH):
                if self._stopped.done() or not link.has_input():
                    return
                self.handle(link.recv())
        except LinkClosed:  # the coordinator is gone: stop serving
            log.debug("worker %s: the coordinator closed the pipe", self.name)
            if not self._stopped.done():
                self._stopped.set_result(None)
            return
        self._drain_scheduled = True
        self.loop.call_soon(self._drain)

    def handle(self, frames: list[Any]) -> None:
        """Answer one message (its replies go out through the link as its rows finish)."""
        if self._recorded:
            self._settle_recorded()
        if self._barrier is not None:
            self._barrier.append(frames)
            return
        req_id: Any = None
        try:
            header, arrays = decode(frames, trusted=self.same_process)
            req_id = header.get(Key.ID)
            op = header[Key.OP]
            if op == Op.STEP or op == Op.RESET:
                self._start_rows(op, header, arrays)
            elif op == Op.PING:
                self._send(encode(Op.PONG, {Key.ID: req_id}))
            elif op == Op.SLAB:
                self.slab = mapped_slab(self.name, self.slab_fd, self.slab, header[Key.SLAB])
                self._done_as = done_pipe_as(self.name, self.done_fd, header, self._done_as)
                self._send(encode(Op.RESULT, {Key.ID: req_id}))
            elif op == Op.CANCEL:
                self._reply_when(req_id, self._on_cancel(header), barrier=True)
            elif op == Op.MAKE:
                self._reply_when(req_id, self._on_make(header), barrier=True)
            elif op == Op.CALL:
                self._reply_when(req_id, self._on_call(header))
            elif op == Op.CLOSE:
                self._reply_when(req_id, self._on_close())
            else:
                raise ProtocolError(f"worker {self.name} got unknown op {op!r}")
        except Exception as exc:
            log.debug("request %s failed", req_id, exc_info=True)
            self._send(encode(Op.ERROR, {Key.ID: req_id, Key.ERROR: error_fields(exc, None)}))

    def _settle_recorded(self) -> None:
        """Settle the calls whose env threads recorded their rows on the done pipe since the last message
        (:class:`EnvThread`), where each thread used to wake the loop for it: their done callbacks (:meth:`_settled`)
        then count the rows and close their requests, as a wake-up's settling did."""
        recorded = self._recorded
        while recorded:
            fut = recorded.popleft()
            if not fut.done():  # (a cancelled one was settled as it was cancelled)
                fut.set_result(_RECORDED)

    def _reply_when(self, req_id: Any, work: Any, *, barrier: bool = False) -> None:
        """Run the coroutine ``work`` (returning reply fields) and send its RESULT, or an ERROR.
        ``barrier``: hold later messages until it is done (see the module docstring)."""
        if barrier:
            self._barrier = []

        async def reply() -> None:
            try:
                fields = await work
            except Exception as exc:
                log.debug("request %s failed", req_id, exc_info=True)
                fields = None
                self._send(encode(Op.ERROR, {Key.ID: req_id, Key.ERROR: error_fields(exc, None)}))
            finally:
                if barrier:
                    self._lift_barrier()
            if fields is None:
                return
            stop = fields.pop("_stop", False)
            fields[Key.ID] = req_id
            self._send(encode(Op.RESULT, fields, trusted=self.same_process))
            if stop and not self._stopped.done():
                self._stopped.set_result(None)

        self._spawn(reply())

    def _lift_barrier(self) -> None:
        waiting, self._barrier = self._barrier or [], None
        for i, frames in enumerate(waiting):
            if self._barrier is not None:  # a held MAKE/CANCEL raised the barrier again
                self._barrier.extend(waiting[i:])
                return
            self.handle(frames)

    def _spawn(self, coro: Any) -> asyncio.Future[Any]:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ rows (step, reset)

    def _start_rows(self, op: str, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        env_ids: list[int] = header[Key.ENV]
        envs = [self.envs.get(e) for e in env_ids]
        known = next((e for e in envs if e is not None), None)
        if known is None:
            raise ProtocolError(f"worker {self.name} hosts none of the envs {env_ids[:8]}")
        shared = bool(header.get(Key.SHARED))
        slab = (self.slab or no_slab(self.name)) if shared else None
        req = _OpenRequest(header.get(Key.ID), op, env_ids, known.group, bool(header.get(Key.INFO_LIST)), shared)
        self._open[req.id] = req
        step = op == Op.STEP
        if step:
            acts = leaves_from_wire(header[Key.ACT], arrays) if slab is None else [a[env_ids] for a in slab.act]
            read = known.group.read_action
            args: list[Any] = [read(acts, i) for i in range(len(env_ids))]
        else:
            args = header.get(Key.SEED) or [None] * len(env_ids)
        options = header.get(Key.OPT)
        # A step's rows whose envs' threads may record them on the done pipe themselves (see _record_on_thread).
        records = self._done_as if step and slab is not None and type(req.id) is int else None
        for row, env in enumerate(envs):
            if env is None:
                err = ProtocolError(f"worker {self.name} hosts no env {env_ids[row]}", env_id=env_ids[row])
                self._row_done(req, row, False, err)
                continue
            if env.thread is None:
                inbox = env.inbox
                if inbox is None or inbox.done():
                    err = ProtocolError(f"env {env.env_id} is busy with another request", env_id=env.env_id)
                    self._row_done(req, row, False, err)
                else:
                    inbox.set_result((req, row, step, args[row], options))
                continue
            if records is not None and row < lane.ROW_RECORD_ROWS:
                assert slab is not None
                record = lane.row_record(*records, req.id, row)
                fut = self._record_on_thread(env, env.thread, args[row], slab, record)
            else:
                fut = self._start_on_thread(env, env.thread, step, args[row], options)
            env.task = fut
            fut.add_done_callback(functools.partial(self._settled, req, row, env))

    @staticmethod
    def _start_on_thread(env: _Env, thread: EnvThread, step: bool, arg: Any, options: Any) -> asyncio.Future[Any]:
        """Start one env's step (``arg``: its action) or reset (``arg``: its seed) on its thread."""
        hosted = env.hosted
        assert isinstance(hosted, HostedEnv)  # an env with a thread is a sync one
        if step:
            return thread.run(lambda: hosted.step(arg))
        return thread.run(lambda: hosted.reset(arg, options))

    def _record_on_thread(
        self, env: _Env, thread: EnvThread, action: Any, slab: Slab, record: bytes
    ) -> asyncio.Future[Any]:
        """Start one env's step on its thread, which puts the row in the slab and writes ``record`` (a row record of
        the pool's done pipe) itself when the step ends with neither an info nor an error; the future then gets
        :data:`_RECORDED` (the row is answered: :meth:`_settled` only counts it), else the step's outcome for the
        worker's RESULT, as :meth:`_start_on_thread`'s. A write that fails (the pool closed the pipe) leaves the row
        to the RESULT as well."""
        hosted = env.hosted
        assert isinstance(hosted, HostedEnv)  # an env with a thread is a sync one
        write_obs, env_id, done_fd = env.group.write_obs, env.env_id, self.done_fd
        assert done_fd is not None, "a worker records rows only on the done pipe it was started with"

        def step() -> Any:
            out = hosted.step(action)
            obs, reward, terminated, truncated, info = out
            if type(info) is not dict or info or self.envs.get(env_id) is not env:  # (a replaced env's row: dropped)
                return out
            try:
                write_obs(slab.obs, env_id, obs)
                slab.put_extras(env_id, reward, terminated, truncated)
            except Exception:  # noqa: BLE001 - an observation that does not fit: the RESULT says which way
                return out
            try:
                os.write(done_fd, record)
            except OSError as exc:  # the pipe is gone (an env closed it): this worker's own pipe carries its rows
                log.debug("worker %s: the done pipe failed (%s): rows go in RESULTs from now on", self.name, exc)
                self._done_as = None
                return out
            return _RECORDED

        return thread.run(step)

    async def _actor(self, env: _Env) -> None:
        """Run an async env's steps and resets, one job from its inbox at a time, until cancelled."""
        hosted = env.hosted
        assert isinstance(hosted, AsyncHostedEnv)
        assert env.inbox is not None
        while True:
            req, row, step, arg, options = await env.inbox
            env.inbox = self.loop.create_future()
            out: Any
            try:
                out = await (hosted.astep(arg) if step else hosted.areset(arg, options))
            except asyncio.CancelledError:
                self._abandon(req)  # replaced: the coordinator already answered this row
                raise
            except BaseException as exc:  # noqa: BLE001 - the env's failure is its row's outcome
                ok, out = False, exc
            else:
                ok = True
            if self.envs.get(env.env_id) is not env:  # replaced while its step ignored the cancellation
                self._abandon(req)
                return
            self._row_done(req, row, ok, out)

    def _settled(self, req: _OpenRequest, row: int, env: _Env, fut: asyncio.Future[Any]) -> None:
        if env.task is fut:
            env.task = None
        if fut.cancelled() or self.envs.get(env.env_id) is not env:
            self._abandon(req)  # cancelled or replaced: the coordinator already answered this row
            return
        exc = fut.exception()
        if exc is None and fut.result() is _RECORDED:
            self._abandon(req)  # its thread put it in the slab and told the pool (see _record_on_thread)
            return
        self._row_done(req, row, exc is None, fut.result() if exc is None else exc)

    def _row_done(self, req: _OpenRequest, row: int, ok: bool, outcome: Any) -> None:
        if not req.done:
            self._dirty.append(req)
        req.done.append((row, ok, outcome))
        if not self._flush_scheduled:  # at the end of this loop turn, with every row finished in it
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _abandon(self, req: _OpenRequest) -> None:
        """One row of ``req`` is answered without this worker's RESULT (by the coordinator, or by a row record)."""
        req.left -= 1
        if req.left == 0 and not req.done:
            self._open.pop(req.id, None)

    def _flush(self) -> None:
        """Send every row finished since the last flush: one RESULT for all requests (per kind)."""
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        batches: dict[tuple[str, bool, bool], list[tuple[_OpenRequest, list[tuple[int, bool, Any]]]]] = {}
        for req in dirty:
            done, req.done = req.done, []
            req.left -= len(done)
            if req.left == 0:
                self._open.pop(req.id, None)
            batches.setdefault((req.kind, req.ilist, req.shared), []).append((req, done))
        for (kind, ilist, shared), items in batches.items():
            with contextlib.suppress(OSError):  # the link is closing (LinkClosed is one): nobody waits for this
                self._send(self._encode_rows(kind, ilist, items, self.slab if shared else None))

    def _encode_rows(
        self,
        kind: str,
        ilist: bool,
        items: list[tuple[_OpenRequest, list[tuple[int, bool, Any]]]],
        slab: Slab | None = None,
    ) -> list[Any]:
        """One RESULT carrying finished rows of several requests: ``"multi": [[request id, [rows]], ...]``
        names them in order; obs, rewards, infos and errors are indexed over all of them together."""
        k = sum(len(done) for _, done in items)
        group = items[0][0].group  # every env of a pool has the same spaces
        step = kind == Op.STEP
        # Gathered in lists and batched at the end, as Worker.step_rows does (see workers.runtime.put_obs).
        outs: list[Any] = [None] * k
        rewards: list[Any] = [0.0] * k
        terminated: list[Any] = [False] * k
        truncated: list[Any] = [False] * k
        infos: list[Any] | None = None
        errors: dict[int, Any] = {}
        env_ids: list[int] = []
        multi: list[list[Any]] = []
        j = 0
        for req, done in items:
            multi.append([req.id, [row for row, _, _ in done]])
            for row, ok, outcome in done:
                env_id = req.env_ids[row]
                env_ids.append(env_id)
                if not ok:
                    errors[j] = error_fields(outcome, env_id)
                elif step:
                    outs[j], rewards[j], terminated[j], truncated[j], info = outcome
                else:
                    outs[j], info = outcome
                if ok and info:
                    if infos is None:
                        infos = [None] * k
                    infos[j] = info
                j += 1
        extras_in = (rewards, terminated, truncated) if step else None
        if slab is not None:  # the rows go to the envs' shared rows; only infos and errors travel
            _, infos = put_obs(group, slab.obs, env_ids, outs, env_ids, extras_in, infos, errors)
            if step:
                slab.put_extras(shared_rows(env_ids), rewards, terminated, truncated)
            fields, arrays = shared_reply(infos, errors)
        else:
            obs, infos = put_obs(group, None, range(k), outs, env_ids, extras_in, infos, errors)
            extras = extra_arrays(rewards, terminated, truncated) if step else []
            fields, arrays = batch_reply(obs, infos, errors, extras)
        fields[Key.MULTI] = multi
        fields[Key.ROWS_KIND] = kind
        if self.same_process and infos is None and not errors:  # fresh arrays, ids and flags: nothing to encode
            return local(Op.RESULT, fields, arrays)
        # One-env requests (step_env/reset_env futures) want each env's own info dict, not a batched slice.
        as_list = ilist or any(len(req.env_ids) == 1 for req, _ in items)
        return encode_reply(fields, arrays, env_ids, as_list, trusted=self.same_process)

    # ------------------------------------------------------------------ make, call, drop, cancel, close

    async def _new_env(self, env_id: int, group: Group) -> _Env:
        if self.executor == "thread":
            thread = EnvThread(f"aioenv-env-{env_id}", self.loop, self._recorded)
            try:
                obj = await thread.run(group.factory)
                check_executor(obj, self.executor)
            except BaseException:
                thread.stop()
                raise
            hosted: HostedEnv | AsyncHostedEnv = HostedEnv(env_id, obj, self.mode)
        else:
            thread = None
            obj = group.factory()
            check_executor(obj, self.executor)
            hosted = AsyncHostedEnv(env_id, obj, self.mode)
        group.adopt_spaces(obj)
        env = _Env(env_id, group, hosted, thread)
        if thread is None:
            env.inbox = self.loop.create_future()
            env.task = self.loop.create_task(self._actor(env))
        return env

    async def _on_make(self, header: dict[str, Any]) -> dict[str, Any]:
        if Key.SLAB in header:  # a re-made worker: the pool's rows exist already
            self.slab = mapped_slab(self.name, self.slab_fd, self.slab, header[Key.SLAB])
            self._done_as = done_pipe_as(self.name, self.done_fd, header, self._done_as)
        self.mode = str(header.get(Key.AUTORESET, self.mode))
        for key, source in dict(header.get(Key.SOURCES, {})).items():
            if key not in self.groups:
                self.groups[key] = Group(resolve(source, self.trusted_dir))
        ended = set(header.get(Key.ENDED) or ())
        remade = header.get(Key.REMADE) if isinstance(header.get(Key.REMADE), dict) else None
        pairs = list(header[Key.ENVS])
        made = await asyncio.gather(
            *(self._new_env(env_id, self.groups[key]) for env_id, key in pairs), return_exceptions=True
        )
        errors: dict[int, Any] = {}
        described: dict[str, Any] = {}
        for row, ((env_id, key), env) in enumerate(zip(pairs, made, strict=True)):
            if isinstance(env, BaseException):
                errors[row] = error_fields(env, env_id)
                continue
            self._retire(self.envs.pop(env_id, None))
            self.envs[env_id] = env
            if env_id in ended:
                env.hosted.mark_ended()
            elif remade is not None:
                env.hosted.mark_remade(remade)
            if key not in described:
                described[key] = describe_env(env.hosted.env, self.same_process or pickle_allowed())
        return {Key.SPACES: described, Key.ERRORS: errors}

    async def _on_call(self, header: dict[str, Any]) -> dict[str, Any]:
        spec = CallSpec(header)

        async def one(row: int, env_id: int) -> Any:
            env = self.envs.get(env_id)
            if env is None:
                raise ProtocolError(f"worker {self.name} hosts no env {env_id}", env_id=env_id)
            obj = env.hosted.env
            if env.thread is not None:
                return checked_value(await env.thread.run(lambda: spec.apply(obj, row)))
            value = spec.apply(obj, row)
            if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                value = await value
            return checked_value(value)

        outcomes = await asyncio.gather(*(one(i, e) for i, e in enumerate(header[Key.ENV])), return_exceptions=True)
        values: list[Any] = []
        errors: dict[int, Any] = {}
        for i, (env_id, out) in enumerate(zip(header[Key.ENV], outcomes, strict=True)):
            if isinstance(out, BaseException):
                values.append(None)
                errors[i] = error_fields(out, env_id)
            else:
                values.append(out)
        return {Key.VALUES: values, Key.ERRORS: errors}

    async def _on_cancel(self, header: dict[str, Any]) -> dict[str, Any]:
        """Give up the envs' running requests and replace each env with a fresh one (see the module)."""
        errors: dict[int, Any] = {}
        ended = set(header.get(Key.ENDED) or ())
        for row, env_id in enumerate(header[Key.ENV]):
            old = self.envs.pop(env_id, None)
            if old is None:
                continue
            if old.task is not None:
                old.task.cancel()
            self._retire(old)
            try:
                env = await self._new_env(env_id, old.group)
            except Exception as exc:  # noqa: BLE001 - the env stays absent: its requests get a clear error
                errors[row] = error_fields(exc, env_id)
                continue
            if env_id in ended:
                env.hosted.mark_ended()
            else:
                env.hosted.mark_replaced()
            self.envs[env_id] = env
        return {Key.ERRORS: errors}

    async def _on_close(self) -> dict[str, Any]:
        await self._close_all()
        return {"_stop": True}

    def _retire(self, env: _Env | None) -> None:
        """Close a replaced env in the background (its close must not hold up its successor)."""
        if env is not None:
            self._spawn(self._close_env(env))

    async def _close_env(self, env: _Env | None) -> None:
        if env is None:
            return
        if env.task is not None and not env.task.done():
            env.task.cancel()
        hosted = env.hosted
        closed = False
        try:
            if isinstance(hosted, AsyncHostedEnv):
                await asyncio.wait_for(hosted.aclose(), CLOSE_GRACE)
            elif env.thread is not None:
                await asyncio.wait_for(env.thread.run(hosted.close), CLOSE_GRACE)
            closed = True
        except (TimeoutError, asyncio.CancelledError):
            log.warning("env %d did not close within %.0f s; abandoned", env.env_id, CLOSE_GRACE)
        finally:
            if env.thread is not None:
                env.thread.stop()
        if closed and env.thread is not None:  # a closed env's thread ends at once: its close is over when it has
            await env.thread.ended(CLOSE_GRACE)

    async def _close_all(self) -> None:
        envs = list(self.envs.values())
        self.envs.clear()
        await asyncio.gather(*(self._close_env(e) for e in envs))

"""The one seam between a pool and what runs its envs: :class:`Runner`.

A :class:`aioenv.Pool` checks what its caller gave (actions against the action space, seeds, options), chooses
where the rows go (a future of its own, ``recv()``'s queue, one env's future) and hands the rest to a runner:
a local :class:`~aioenv.core.coordinator.Coordinator` (worker processes, or envs in this process) or a
:class:`~aioenv.core.remote.RemoteCoordinator` (a client of ``aioenv serve``). A server does the same for its
clients' sessions, over a local coordinator. Pool and server alike call :meth:`Runner.step`,
:meth:`Runner.reset` and :meth:`Runner.call`; behind them, once, the runner claims the envs, builds each worker's
message and sends it (:class:`Requests`). Neither holds the runner's scheduler, slab or workers.

Design: the pool stays the only place that knows about spaces and results' shapes (sinks assemble them,
:mod:`aioenv.core.sinks`); the runner only ever sees checked leaves, ids and sinks. A new way to run envs (a
Ray actor, a Kubernetes job) is one more runner, and every pool feature works over it unchanged.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from aioenv.core.lifecycle import Lifecycle, Phase
from aioenv.core.scheduler import Build, Request, Scheduler
from aioenv.core.sinks import RecvQueue, Sink
from aioenv.transport.slab import Slab
from aioenv.wire import spaces
from aioenv.wire.protocol import Key, leaves_to_wire

__all__ = ["Requests", "Runner", "SharedStep", "call_builder", "reset_builder", "step_builder"]


class Runner(Protocol):
    """What a pool (or a server's session) needs from whatever runs its envs.

    Env ids are ``0 .. num_envs - 1``. Every method is called on the event loop the runner was started on; the
    runner is started by its owner (how differs: worker processes, or a server's OPEN) before any call here.

    **Claims.** An env takes one request at a time. :meth:`step`, :meth:`reset` and :meth:`call` claim their
    ``ids`` first; an env that is busy, or whose last result waits unread in :meth:`recv_queue`'s queue, makes
    the call raise ``UsageError`` naming it. A call that raises has claimed nothing and sent nothing, and its
    sink gets nothing (one exception: ``KeyboardInterrupt`` or ``SystemExit`` raised inside env code this
    process runs; the call went out and every row is answered, the rows it cut off with the interruption). A
    call that returns answers every row of ``ids`` exactly once through its sink (``deliver`` at the row's
    position in ``ids``, or ``fail``), possibly before it returns (envs stepped in this process, a worker known
    to be gone); the env is free again when its row is delivered.

    **Errors** raised by the calls: ``UsageError`` (a busy env, an id out of range, a value the wire cannot
    carry, a message over a server's limit), ``PoolClosed`` (the runner is closing), ``ConnectionLost`` (a
    remote runner lost its server). Failures of envs (``EnvError``, ``StepTimeout``, ``WorkerCrashed``...)
    never raise here: they come through the sink, one per row, and harm no other env.
    """

    @property
    def num_envs(self) -> int:
        """How many envs it runs."""
        ...

    def resolve(self, env_ids: object) -> np.ndarray:
        """``env_ids`` (None: every env, in order) as an int64 array of distinct ids, shape ``(B,)`` (the caller
        does not write to it: every env in order may be one array, shared).

        Raises:
            UsageError: not a 1-D sequence of ints, empty, an unknown id, an id named twice.
        """
        ...

    def one(self, env_id: object) -> np.ndarray:
        """One env id as an array of shape ``(1,)``.

        Raises:
            UsageError: not an int, or no such env.
        """
        ...

    def recv_queue(self, obs_space: Any) -> RecvQueue:
        """A queue for ``recv()`` whose unread rows keep their envs claimed (see **Claims**)."""
        ...

    def step(
        self, ids: np.ndarray, leaves: list[np.ndarray], sink: Sink, *, info_list: bool, timeout: float | None
    ) -> None:
        """Step ``ids`` (from :meth:`resolve`) with checked action ``leaves`` (``len(ids)`` rows each, owned by the
        call); ``info_list``: each row's own info dict; ``timeout``: seconds from dispatch (None: none)."""
        ...

    def reset(
        self,
        ids: np.ndarray,
        seeds: list[int | None],
        options: dict[str, Any] | None,
        sink: Sink,
        *,
        timeout: float | None,
    ) -> None:
        """Reset ``ids`` with one seed per row (None: no seed) and the call's ``options``."""
        ...

    def call(self, ids: np.ndarray, fields: dict[str, Any], per_env: list[Any] | None, sink: Sink) -> None:
        """Call, get or set on each env of ``ids``: ``fields`` are the CALL's (kind, name, args, kw), ``per_env``
        one value per row (``set``), or None. Each row's value comes to the sink."""
        ...

    def answer_waiting(self, enough: Callable[[], bool]) -> None:
        """``recv()`` is about to wait: run now the requests for envs in this process that wait for this moment
        (a share's rows, see :meth:`Coordinator.answer_here`), unless rows that arrived meanwhile make ``enough``
        true. A runner with no envs in this process does nothing."""
        ...

    def in_env_code(self) -> bool:
        """Whether the calling thread runs env code of this runner (an env that calls its own pool)."""
        ...

    def waits_for_replies(self) -> bool:
        """Whether a request is out, or held to go out later: a reply is still to come."""
        ...

    def settled(self) -> bool:
        """Whether the event loop has taken in everything that happened to the runner's processes so far (False: a
        worker process exited and the loop, not running since, has not reaped it yet). Cheap: one system call."""
        ...

    def wait_here(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """Block the calling thread, with the event loop not running, until ``future`` (a call's) is done, taking
        in what arrives meanwhile itself as the loop's readers would, as long as that is all there is (a local
        pool's worker pipes and done pipe); returns whether ``future`` is done. False, within ``timeout`` seconds,
        as soon as anything needs the loop (a worker's exit, a deadline due, a change of workers), and at once when
        there is nothing this runner can wait for so (no request in flight, whose reply would come): the caller
        then runs the loop until ``future`` is done. For a caller that lends the loop only during its calls
        (:class:`aioenv.SyncPool` in the caller's thread): a lock-step step of cheap envs costs no turn of the
        loop. It may poll for a short while before it blocks (a local pool with a CPU to spare:
        :func:`aioenv.core.coordinator.spin_budget`). Signal handlers run while it blocks; one that raises ends it."""
        ...

    def poll_budget(self) -> float | None:
        """How long a call awaited on the event loop may poll for its replies before it sleeps until they come (s;
        0: sleep at once), or None where no wait of this runner is worth polling for, nor timing (a remote runner,
        envs in this process, nothing in flight, no CPU to spare). The caller polls by yielding to the loop, whose
        every turn reads what arrived and runs the other tasks as usual: replies due within tens of microseconds are
        taken as they come, where a loop asleep in the kernel wakes ~50-150 µs after them on a VM whose idle CPU
        halts. After a wait that got a budget, the caller reports how long it took (:meth:`note_wait`)."""
        ...

    def note_wait(self, seconds: float) -> None:
        """An awaited call that :meth:`poll_budget` gave a budget waited ``seconds`` for its replies, polling and
        then asleep: the budgets of the calls after it follow the recent waits."""
        ...

    def runs_env_code(self) -> bool:
        """Whether env code of this runner runs, or waits to run, in this process now."""
        ...

    def interrupt_env_code(self) -> None:
        """Raise ``KeyboardInterrupt`` inside env code of this runner that runs in this process now, if any."""
        ...

    async def aclose(self) -> None:
        """Fail what is in flight with ``PoolClosed``, stop what it started; never hangs. Idempotent."""
        ...


class Requests(abc.ABC):
    """:class:`Runner`'s calls for a runner that has a scheduler and a ``submit`` (the local and the remote
    coordinator): claim, build, submit, once, with the claim released when building fails."""

    #: The pool's shared rows (None: arrays travel in the messages).
    slab: Slab | None
    #: NEW, STARTING, RUNNING (requests go out), ... (see :mod:`aioenv.core.lifecycle`).
    life: Lifecycle[Phase]

    def __init__(self, sched: Scheduler) -> None:
        #: The env table and the in-flight requests.
        self.sched = sched
        #: See :meth:`Runner.resolve`: the scheduler's own, bound once (a call checks its ids with no hop between).
        self.resolve: Callable[[object], np.ndarray] = sched.resolve
        #: See :meth:`Runner.one`: likewise.
        self.one: Callable[[object], np.ndarray] = sched.one

    @property
    def num_envs(self) -> int:
        """How many envs it runs."""
        return self.sched.num_envs

    @abc.abstractmethod
    def check_open(self) -> None:
        """Raise ``PoolClosed`` (or ``ConnectionLost``) if no request may go out now (the calls below ask only
        when :attr:`life` is not RUNNING)."""

    @abc.abstractmethod
    def submit(self, kind: str, env_ids: np.ndarray, sink: Sink, build: Build, *, timeout: float | None) -> None:
        """Send ``env_ids`` (claimed) as requests built by ``build`` (``req.positions`` index into ``env_ids``);
        their rows come to ``sink``. On an exception nothing was sent and their claim is released."""

    def waits_for_replies(self) -> bool:
        """See :meth:`Runner.waits_for_replies`."""
        sched = self.sched
        return sched.in_flight > 0 or bool(sched.held)

    def settled(self) -> bool:
        """See :meth:`Runner.settled` (a runner with no local worker processes: always)."""
        return True

    def wait_here(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """See :meth:`Runner.wait_here` (a runner with no local worker processes: only a call answered already)."""
        return future.done()

    def recv_queue(self, obs_space: Any) -> RecvQueue:
        """See :meth:`Runner.recv_queue`."""
        return RecvQueue(obs_space, self.sched)

    def step(
        self, ids: np.ndarray, leaves: list[np.ndarray], sink: Sink, *, info_list: bool, timeout: float | None
    ) -> None:
        """See :meth:`Runner.step`."""
        if self.life.state is not Phase.RUNNING:
            self.check_open()
        sched = self.sched
        sched.claim(ids)  # first: none of these envs' shared rows is in use once they are claimed
        try:  # the actions go into the shared rows now: a row that does not fit frees the claim again
            build = step_builder(self.slab, ids, leaves, info_list, ids is sched.all_ids)
        except BaseException:
            sched.release(ids)
            raise
        self.submit("step", ids, sink, build, timeout=timeout)

    def reset(
        self,
        ids: np.ndarray,
        seeds: list[int | None],
        options: dict[str, Any] | None,
        sink: Sink,
        *,
        timeout: float | None,
    ) -> None:
        """See :meth:`Runner.reset`."""
        if self.life.state is not Phase.RUNNING:
            self.check_open()
        self.sched.claim(ids)
        self.submit("reset", ids, sink, reset_builder(seeds, options, self.slab is not None), timeout=timeout)

    def call(self, ids: np.ndarray, fields: dict[str, Any], per_env: list[Any] | None, sink: Sink) -> None:
        """See :meth:`Runner.call`."""
        if self.life.state is not Phase.RUNNING:
            self.check_open()
        self.sched.claim(ids)
        self.submit("call", ids, sink, call_builder(fields, per_env), timeout=None)


def step_builder(slab: Slab | None, ids: np.ndarray, leaves: list[np.ndarray], info_list: bool, every: bool) -> Build:
    """How to build each worker's STEP for ``ids`` (claimed already) with the checked action ``leaves``
    (``len(ids)`` rows each; ``every``: ``ids`` is every env, in order). With a ``slab`` the actions go
    into the envs' shared rows now and a STEP carries none; else each STEP carries its rows as arrays.
    ``info_list``: the caller wants each env's own info dict (``"ilist"``)."""
    if slab is not None:
        slab.put_actions(ids, leaves, every)
        return _SHARED_STEPS[info_list]
    flags: dict[str, Any] = {Key.INFO_LIST: True} if info_list else {}
    n = ids.size

    def carried(req: Request) -> tuple[dict[str, Any], list[np.ndarray]]:
        arrays: list[np.ndarray] = []
        at = req.positions  # increasing row indices: all of them means every row, in order
        part = leaves if at is None or at.size == n else spaces.take_rows(leaves, at)
        return {Key.ACT: leaves_to_wire(part, arrays), **flags}, arrays

    return carried


class SharedStep:
    """How to build each worker's STEP when the actions are in the envs' shared rows already: ``"sh": 1`` (and
    ``"ilist"``), no arrays. The coordinator may send it as a lane message instead (:mod:`aioenv.wire.lane`),
    which needs nothing built: it tells this builder by its type."""

    __slots__ = ("info_list",)

    def __init__(self, info_list: bool) -> None:
        #: The caller wants each env's own info dict (``"ilist"``).
        self.info_list = info_list

    def __call__(self, _req: Request) -> tuple[dict[str, Any], list[np.ndarray]]:
        fields: dict[str, Any] = {Key.SHARED: 1}
        if self.info_list:
            fields[Key.INFO_LIST] = True
        return fields, []


#: The two builders a step over shared rows needs (without and with ``info_list``): one each, not one a call.
_SHARED_STEPS = (SharedStep(False), SharedStep(True))


def reset_builder(seeds: list[int | None], options: dict[str, Any] | None, shared: bool) -> Build:
    """How to build each worker's RESET: its rows' ``seeds`` (one per row of the call), the call's
    ``options``; ``shared``: the observations go to the envs' shared rows (a slab)."""

    def build(req: Request) -> tuple[dict[str, Any], list[np.ndarray]]:
        pos = req.positions if req.positions is not None else range(len(seeds))
        fields: dict[str, Any] = {Key.SEED: [seeds[int(p)] for p in pos]}
        if options is not None:
            fields[Key.OPT] = options
        if shared:
            fields[Key.SHARED] = 1
        return fields, []

    return build


def call_builder(fields: dict[str, Any], per_env: list[Any] | None) -> Build:
    """How to build each worker's CALL: the call's ``fields`` (kind, name, args, kw) and, for a ``set``, the
    values of its rows (``per_env``: one per row of the call)."""

    def build(req: Request) -> tuple[dict[str, Any], list[np.ndarray]]:
        out = dict(fields)
        if per_env is not None:
            pos = req.positions if req.positions is not None else range(len(per_env))
            out[Key.VALUES] = [per_env[int(p)] for p in pos]
        return out, []

    return build

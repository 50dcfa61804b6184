"""What the coordinator does when a worker fails it: the pool's side of crash recovery and deadlines.

A worker *slot* (:class:`Slot`) is a position that survives its processes: when one dies (its pidfd says
so at once), sends bytes that are no message, or overruns a request's deadline, :class:`Recovery` answers
every request the process took with it (:class:`WorkerCrashed`, :class:`StepTimeout`, or a truncated row
with ``on_timeout="truncate"``), starts a fresh process in the same slot and re-makes its envs there,
which then need a reset. A slot whose process keeps dying by itself (over :data:`MAX_RESTARTS` within
:data:`RESTART_WINDOW`) is given up: its envs fail fast with the reason. An ``async`` worker is asked to
cancel its late steps and replace those envs instead of being killed (within :data:`CANCEL_GRACE`).
What a slot is doing is one :class:`SlotState`, moved along :data:`SLOT` (see :mod:`aioenv.core.lifecycle`).

:class:`Recovery` is the part of :class:`aioenv.core.coordinator.Coordinator` that handles this (a mixin: it
shares the coordinator's tables); the coordinator routes requests and replies, this module decides what a
failure answers and what is started again.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from aioenv.core.deadlines import DeadlineTimer, Truncation, cancel_fields, timeout_error
from aioenv.core.launcher import WorkerProc
from aioenv.core.lifecycle import Lifecycle, Transitions
from aioenv.core.scheduler import Request, Scheduler, SetupFuture
from aioenv.core.sinks import Part, Sink
from aioenv.errors import AioEnvError, ProtocolError, WorkerCrashed
from aioenv.wire.protocol import Key, Op, encode

__all__ = [
    "CANCEL_GRACE",
    "MAX_RESTARTS",
    "RESTART_WINDOW",
    "SETUP",
    "SLOT",
    "Lost",
    "Recovery",
    "Slot",
    "SlotState",
]

log = logging.getLogger("aioenv.coordinator")

#: A slot whose worker died by itself more than this many times within ``RESTART_WINDOW`` seconds is
#: crash-looping and given up (its envs fail fast). Restarts after a deadline are aioenv's own and do not count.
MAX_RESTARTS = 20
RESTART_WINDOW = 60.0
#: Requests that set a worker up (their sink is a future, or None for a re-made worker).
SETUP = frozenset(("make", "slab"))
#: Seconds an ``async`` worker gets to cancel and replace envs after a deadline before it is restarted.
CANCEL_GRACE = 5.0


class SlotState(enum.Enum):
    """What a worker slot (:class:`Slot`) is doing.

    ``EMPTY``: made, no worker yet. ``STARTING``: its worker process is launched and has not said HELLO:
    messages for it wait in the slot's outbox. ``READY``: its worker said HELLO; messages go to it (a worker
    that reconnects says HELLO again and stays as it is). ``DRAINING``: ready, and replaced as soon as no request
    is in flight on it (its memory passed ``max_worker_rss``: :mod:`aioenv.core.memory`). ``LOST``: its worker is
    gone (it died, or was killed: a deadline, a message this side cannot read, recycling) and the requests it took
    are answered; the same call starts a fresh one or gives the slot up. ``GIVEN_UP``: no worker, for good (it
    crash-looped, or could not be restarted and nothing says when room frees): its envs fail fast.
    ``WAITING_FOR_ROOM``: no worker until a worker host has room (a fleet's launcher had none); then started
    again. ``CLOSED``: the pool closed (its worker, if it had one, is stopped); final.
    """

    EMPTY = "empty"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    LOST = "lost"
    GIVEN_UP = "given up"
    WAITING_FOR_ROOM = "waiting for room"
    CLOSED = "closed"


_EMPTY, _STARTING, _READY, _DRAINING, _LOST, _GIVEN_UP, _WAITING, _CLOSED = (
    SlotState.EMPTY,
    SlotState.STARTING,
    SlotState.READY,
    SlotState.DRAINING,
    SlotState.LOST,
    SlotState.GIVEN_UP,
    SlotState.WAITING_FOR_ROOM,
    SlotState.CLOSED,
)

#: A worker slot: a worker replaced when it is lost, and a pool that may close in any state (also between a
#: failed restart's LOST and what should have followed it).
SLOT: Transitions[SlotState] = {
    _EMPTY: frozenset((_STARTING, _READY, _CLOSED)),  # READY: a worker taken over that said HELLO already
    _STARTING: frozenset((_READY, _LOST, _CLOSED)),
    _READY: frozenset((_DRAINING, _LOST, _CLOSED)),
    _DRAINING: frozenset((_LOST, _CLOSED)),
    _LOST: frozenset((_STARTING, _GIVEN_UP, _WAITING, _CLOSED)),
    _GIVEN_UP: frozenset((_CLOSED,)),
    _WAITING: frozenset((_STARTING, _CLOSED)),
}
#: The states in which a slot's worker said HELLO: messages go to it, not to the outbox.
_HEARD = frozenset((_READY, _DRAINING))
#: The states in which a slot has no worker and its envs' requests fail fast.
_NO_WORKER = frozenset((_GIVEN_UP, _WAITING))


class Slot:
    """A worker position; its process is replaced when it dies. Its :class:`SlotState` says what it is doing
    and changes only through :meth:`move`."""

    def __init__(self, index: int, in_process: bool = False) -> None:
        self.index = index
        self.in_process = in_process  # its worker runs in this process (see workers.inproc)
        self.life = Lifecycle(f"worker slot {index}", SlotState.EMPTY, SLOT)
        #: The words of its state: DRAINING: why its worker is replaced; LOST: how its worker ended; GIVEN_UP,
        #: WAITING_FOR_ROOM: why it has no worker (what its envs' errors say). "" in the other states.
        self.why = ""
        self.generation = 0
        self.name = ""
        self.proc: WorkerProc | None = None  # its worker: STARTING, READY, DRAINING (and CLOSED: being stopped)
        self.outbox: list[list[Any] | bytes] = []  # frames, or a local worker's message framed already
        self.restarts = 0  # every restart, for the metrics
        self.deaths: deque[float] = deque()  # when its workers died by themselves, within RESTART_WINDOW
        # Two views of the state, read on every request and kept by move() alone (plain attributes: no call):
        #: Whether its worker said HELLO (READY, DRAINING): messages go to it rather than to the outbox.
        self.ready = False
        #: Why it has no worker and its envs fail fast (GIVEN_UP, WAITING_FOR_ROOM); "" while it has one.
        self.dead_reason = ""

    @property
    def state(self) -> SlotState:
        """What it is doing now."""
        return self.life.state

    def move(self, to: SlotState, why: str = "") -> None:
        """Enter ``to``, with the words that state gives (:attr:`why`).

        Raises:
            InvalidTransition: :data:`SLOT` does not allow it (nothing changes).
        """
        self.life.move(to)
        self.why = why
        self.ready = to in _HEARD
        self.dead_reason = why if to in _NO_WORKER else ""


class Lost(NamedTuple):
    """A worker process that is gone, as the errors of its lost requests name it."""

    name: str
    pid: object
    code: int | None
    how: str  # how it ended, in words ("was killed by SIGKILL")

    def remade(self) -> dict[str, Any]:
        """How the envs it hosted come to be re-made (a MAKE's ``remade``: their next step says so)."""
        return {"why": f"its worker {self.name} (pid {self.pid}) {self.how}", "worker": self.name, "code": self.code}

    def crashed(self, env_id: int, kind: str) -> WorkerCrashed:
        """The error of env ``env_id``'s ``kind`` request, lost with this process."""
        return WorkerCrashed(
            f"{kind} failed for env {env_id}: its worker {self.name} (pid {self.pid}) {self.how} while the request "
            "was in flight; the env is re-made on a fresh worker: reset it before stepping",
            env_id=env_id,
            worker=self.name,
            exitcode=self.code,
        )


class Recovery:
    """Worker failures and deadlines, for :class:`~aioenv.core.coordinator.Coordinator` (see the module
    docstring). It reads and changes the coordinator's tables, declared here; the coordinator's methods it
    calls (starting a process, sending, delivering rows) are declared for the type checker only."""

    sched: Scheduler
    slots: list[Slot]
    loop: asyncio.AbstractEventLoop
    executor: str
    truncation: Truncation | None
    on_remade: Callable[[np.ndarray], None]
    _by_name: dict[bytes, Slot]
    _retired: list[WorkerProc]
    _timer: DeadlineTimer
    _when_room: Callable[[Callable[[], bool]], None] | None

    if TYPE_CHECKING:

        @property
        def closing(self) -> bool: ...

        def _spawn(self, slot: Slot, envs: int) -> None: ...

        def _send_make(
            self,
            slot: Slot,
            env_ids: np.ndarray,
            sink: SetupFuture | None,
            ended: np.ndarray | None = None,
            remade: dict[str, Any] | None = None,
        ) -> None: ...

        def _send(self, slot: Slot, frames: list[Any]) -> None: ...

        def _pump(self) -> None: ...

        def _spill_lanes(self, due: float | None = None, worker: int | None = None) -> None: ...

        def _read_done_pipe(self) -> None: ...

        def _set_token(self, slot: Slot, token: int) -> None: ...

        def _workers_changed(self) -> None: ...

        def _deliver_part(self, req: Request, part: Part, positions: np.ndarray | None = None) -> None: ...

        @staticmethod
        def _fail_make(req: Request, err: BaseException, more: int = 0) -> None: ...

    # ------------------------------------------------------------ failures

    def _no_worker(self, slot: Slot, env_id: int, kind: str) -> WorkerCrashed:
        later = " (it is started as soon as a host has room)" if slot.state is SlotState.WAITING_FOR_ROOM else ""
        return WorkerCrashed(
            f"{kind} failed for env {env_id}: it has no worker: worker slot {slot.index} {slot.dead_reason}{later}",
            env_id=env_id,
            worker=slot.name,
        )

    def _on_malformed(self, slot: Slot, exc: ProtocolError) -> None:
        """A worker's message this side cannot read: whatever it answered is lost, so the worker is replaced and
        its requests fail with WorkerCrashed now (dropping the message would leave them waiting for ever)."""
        log.error("malformed message from worker %s: %s", slot.name, exc)
        if slot.proc is None or self.closing:
            return
        slot.proc.kill()
        self._restart(slot, f"sent a message this pool cannot read ({exc}) and was replaced")

    def _on_exit(self, proc: WorkerProc) -> None:
        slot = next((s for s in self.slots if s.proc is proc), None)
        if slot is None or self.closing:
            return  # a retired process (already replaced), or shutdown
        log.warning("worker %s (pid %s) %s", slot.name, proc.pid, proc.describe())
        self._restart(slot, proc.describe())

    def _restart(self, slot: Slot, how: str, timed_out: list[Request] | None = None, *, crash: bool = True) -> None:
        """Fail the slot's in-flight requests with WorkerCrashed, start a fresh worker, re-make its envs.

        ``timed_out``: the requests whose deadline caused this restart (already answered). In truncate
        mode the envs it replaces end their episodes with a truncated row instead of an error.
        """
        lost = self._retire(slot, how)
        truncation = self.truncation if timed_out is not None else None
        must_reset, answered = self._fail_lost(slot, lost, truncation, timed_out or [])
        slot.restarts += 1
        env_ids = self.sched.envs_of(slot.index)
        if crash and timed_out is None and self._crash_looping(slot):
            self._give_up(slot, f"died {len(slot.deaths)} times in {RESTART_WINDOW:g} s; aioenv gave up restarting it")
            return
        if not self._respawn(slot, env_ids):
            return
        ended = truncation.owe(env_ids, must_reset, answered) if truncation is not None else None
        self._send_make(slot, env_ids, None, ended, lost.remade())
        self.on_remade(env_ids)

    def _crash_looping(self, slot: Slot) -> bool:
        """Count a death of the slot's worker; True when there were more than MAX_RESTARTS in the window."""
        now = self.loop.time()
        slot.deaths.append(now)
        while slot.deaths and slot.deaths[0] < now - RESTART_WINDOW:
            slot.deaths.popleft()
        return len(slot.deaths) > MAX_RESTARTS

    def _retire(self, slot: Slot, how: str) -> Lost:
        """The slot's worker is lost (LOST): forget its process (``aclose`` still reaps it if it has not exited
        yet); returns what the errors of its lost requests say about it."""
        self._read_done_pipe()  # the replies it wrote to the done pipe before it ended count
        self._set_token(slot, 0)
        proc = slot.proc
        lost = Lost(slot.name, proc.pid if proc else "?", proc.returncode if proc else None, how)
        slot.move(SlotState.LOST, how)
        slot.proc = None
        self._workers_changed()
        if proc is not None and not proc.exited.is_set():
            self._retired.append(proc)  # killed, not yet reaped: aclose waits for it
        self._by_name.pop(slot.name.encode(), None)
        return lost

    def _fail_lost(
        self, slot: Slot, lost: Lost, truncation: Truncation | None, timed_out: list[Request]
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Answer the requests the slot's worker took with it: a lost MAKE fails ``start()``; a step gets a
        truncated row (``truncation``: the restart is a deadline's) or, as any other request, WorkerCrashed.

        Returns the env ids whose reset was lost (they must not start as truncated) and those whose caller
        was told already (the ``timed_out`` steps and the steps answered here)."""
        must_reset = [r.env_ids for r in timed_out if r.kind == "reset"]
        answered = [r.env_ids for r in timed_out if r.kind == "step"]
        self._spill_lanes(worker=slot.index)
        for req in self.sched.lose_worker(slot.index):
            if req.kind in SETUP:
                self._fail_make(
                    req, WorkerCrashed(f"worker {lost.name} {lost.how} while making its envs", worker=lost.name)
                )
                continue
            crashed = lambda e, k=req.kind: lost.crashed(e, k)  # noqa: E731
            if truncation is not None and req.kind == "step":
                self._deliver_truncated(truncation, req, {"env_replaced": True}, crashed)
                answered.append(req.env_ids)
            else:
                if req.kind == "reset":
                    must_reset.append(req.env_ids)
                self._deliver_part(req, Part.failed(req.env_ids, crashed))
        return must_reset, answered

    def _respawn(self, slot: Slot, env_ids: np.ndarray) -> bool:
        """Start a fresh worker for ``slot``; False when no host has room for its envs (the slot is given up,
        and started again once room frees up, with a launcher that says when)."""
        try:
            self._spawn(slot, env_ids.size)
        except AioEnvError as exc:
            when_room = self._when_room
            self._give_up(slot, f"could not be restarted: {exc}", when_room is not None)
            if when_room is not None:
                when_room(lambda: self._revive(slot))
            return False
        return True

    def _give_up(self, slot: Slot, reason: str, waits_for_room: bool = False) -> None:
        """The slot's envs fail fast from now on (requests get ``WorkerCrashed`` saying why); ``waits_for_room``:
        until room frees up on a worker host (:meth:`_revive`), else for good."""
        slot.move(SlotState.WAITING_FOR_ROOM if waits_for_room else SlotState.GIVEN_UP, reason)
        self._by_name.pop(slot.name.encode(), None)
        log.error("worker slot %d %s", slot.index, reason)

    def _revive(self, slot: Slot) -> bool:
        """Try again to start the worker of a slot given up for want of room; True when done (or moot)."""
        if self.closing or slot.state is not SlotState.WAITING_FOR_ROOM:
            return True
        env_ids = self.sched.envs_of(slot.index)
        reason = slot.why
        try:
            self._spawn(slot, env_ids.size)
        except AioEnvError:
            return False
        log.warning("worker slot %d started again on %s: re-making envs %s", slot.index, slot.name, env_ids.tolist())
        why = f"its worker slot {slot.index} had no worker for a while ({reason})"
        self._send_make(slot, env_ids, None, remade={"why": why, "worker": slot.name, "code": None})
        self.on_remade(env_ids)
        return True

    # ------------------------------------------------------------ deadlines (see aioenv.core.deadlines)

    def _arm_timer(self) -> None:
        self._timer.arm(self.sched.next_deadline())

    def _on_timer(self) -> None:
        """Answer the requests past their deadline, then free their envs: an ``async`` worker cancels and
        replaces them; any other worker (stuck inside env code) is killed and restarted."""
        late: dict[int, list[Request]] = {}
        now = self.loop.time()
        self._spill_lanes(due=now)
        for req in self.sched.expire(now):
            late.setdefault(req.worker, []).append(req)
            if req.kind != "cancel":
                self._time_out(req)
        for worker, reqs in late.items():
            self._free_late(self.slots[worker], reqs)
        self._arm_timer()
        if self.sched.held:
            self._pump()

    def _free_late(self, slot: Slot, reqs: list[Request]) -> None:
        """Free the envs of ``slot``'s late ``reqs`` (answered already)."""
        if slot.proc is None:
            return
        if self.executor == "async" and all(r.kind != "cancel" for r in reqs):
            self._send_cancel(slot, reqs)
        else:  # stuck inside the env's code (or its loop is): only a new process frees the slot
            slot.proc.kill()
            self._restart(slot, "was killed because a request overran its deadline", reqs)

    def _time_out(self, req: Request) -> None:
        """Answer a late request: StepTimeout, or in truncate mode a step's truncated rows."""
        slot = self.slots[req.worker]
        cancels = self.executor == "async"
        # slot.name read when the error is made: after a restart, the name of the worker that was stuck
        late = lambda e, k=req.kind: timeout_error(k, e, cancels=cancels, worker=slot.name)  # noqa: E731
        if self.truncation is not None and req.kind == "step":
            self._deliver_truncated(self.truncation, req, {"timeout": True}, late)
        else:
            self._deliver_part(req, Part.failed(req.env_ids, late))

    def _send_cancel(self, slot: Slot, reqs: list[Request]) -> None:
        """Ask an ``async`` worker to cancel the late requests' envs and replace them; if it does not answer
        within ``CANCEL_GRACE`` it is stuck and gets restarted."""
        fields = cancel_fields(reqs, self.truncation)
        if fields is None:
            return
        no_envs = self.sched.all_ids[:0]  # the envs are not busy with the cancel: they are free for new requests
        req = self.sched.open(slot.index, "cancel", no_envs, deadline=self.loop.time() + CANCEL_GRACE)
        fields[Key.ID] = req.id
        self._send(slot, encode(Op.CANCEL, fields))

    # ------------------------------------------------------------ truncate mode (on_timeout="truncate")

    def _deliver_truncated(
        self, truncation: Truncation, req: Request, info: dict[str, Any], otherwise: Callable[[int], AioEnvError]
    ) -> None:
        """Answer ``req``'s rows as truncated (envs with a last observation) or with ``otherwise(env_id)``."""
        for part, positions in truncation.answer(req, info, otherwise):
            self._deliver_part(req, part, positions)

    def _pay_debts(
        self, truncation: Truncation, kind: str, env_ids: np.ndarray, at: np.ndarray | None, sink: Sink
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Envs replaced behind the caller's back owe a truncated row: a step gets it here (the next one
        starts a new episode); a reset simply clears the debt. Returns the rows still to send."""
        env_ids, at, paid = truncation.settle(kind, env_ids, at)
        if paid is not None:
            part, positions = paid
            self.sched.release(part.env_ids)
            sink.deliver(part, positions)
        return env_ids, at

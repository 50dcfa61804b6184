"""The coordinator: routes requests to worker processes and replies back to sinks.

It owns a connection to each of its workers (a socketpair to a local child, :mod:`aioenv.transport.pipe`; the
fleet's ZeroMQ port for a worker host's, through a server's ``launch``), the worker processes
(:mod:`aioenv.core.launcher`) and the env/request tables (:mod:`aioenv.core.scheduler`).
It never runs env code. What it does when a worker fails it (a process that exits, a message it cannot
read, a request past its deadline: answer what was lost, start a fresh process in the slot, re-make the
envs) is :mod:`aioenv.core.recovery`'s, a part of this class. Under ``max_concurrency``, rows beyond the
limit wait in the scheduler and go out, in order, as others finish. Shutdown: CLOSE, wait, SIGTERM, wait,
SIGKILL; never hangs.

Messages to a worker that has not said HELLO yet wait in its outbox. A pool's own worker processes (any
executor) exchange step and reset rows through shared memory (:mod:`aioenv.transport.slab`), their messages
carrying only what is not an array; inline ones step runs of envs by lane messages (:mod:`aioenv.wire.lane`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import secrets
import select
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

import numpy as np

from aioenv.core.deadlines import DeadlineTimer, Truncation
from aioenv.core.failures import for_env, unsendable
from aioenv.core.launcher import (
    HereWorker,
    LaunchSpec,
    LocalProcess,
    Quick,
    Spawn,
    WorkerProc,
    launch_in_process,
    launch_local,
    spawn_here,
)
from aioenv.core.lifecycle import COORDINATOR, Lifecycle, Phase
from aioenv.core.make_errors import start_failure
from aioenv.core.memory import MemoryWatch
from aioenv.core.recovery import SETUP, Recovery, Slot, SlotState
from aioenv.core.replies import Block, Relayed, Segment, int_lists, route_block
from aioenv.core.runner import Requests, SharedStep
from aioenv.core.scheduler import (
    THROTTLED,
    Build,
    HeldCall,
    LaneCall,
    Request,
    Scheduler,
    SetupFuture,
)
from aioenv.core.sinks import Gather, Part, RecvQueue, Sink
from aioenv.core.sources import EnvSources
from aioenv.errors import (
    AioEnvError,
    PoolClosed,
    ProtocolError,
    UsageError,
)
from aioenv.transport.pipe import PipePort, send_framed_each
from aioenv.transport.slab import Slab
from aioenv.transport.slab_infos import plan as plan_info_area
from aioenv.transport.spawn import usable_cpus
from aioenv.wire import lane
from aioenv.wire.errors import error_fields, from_wire
from aioenv.wire.info_wire import binfo_of
from aioenv.wire.infos import batch_infos
from aioenv.wire.options import AutoresetName, Executor, OnTimeout
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_from_wire, local
from aioenv.wire.spaces import space_from_description

log = logging.getLogger("aioenv.coordinator")
#: The most bytes one read of the done pipe takes (a pipe holds 64 KiB): 2,730 records.
_DONE_READ = 65536
#: How long a quiet call (:data:`aioenv.wire.lane.QUIET`) may wait for its last worker's wake-up before the pool reads
#: its replies as they come instead: between one and two of these (:meth:`Coordinator._sweep_quiet`).
QUIET_PATIENCE = 1.0
#: The longest a wait polls for a reply before it sleeps until one comes (:func:`spin_budget`).
SPIN_AT_MOST = 500e-6

_OPS = {"step": Op.STEP, "reset": Op.RESET, "call": Op.CALL}


class Coordinator(Recovery, Requests):
    """The workers of one pool, each on a connection of its own (see the module docstring).

    Args:
        num_envs: size of the env table.
        sources: how to make each env.
        autoreset_mode: ``"next_step"``, ``"same_step"`` or ``"disabled"``.
        executor: the workers' executor.
        on_remade: called with the env ids re-made after a crash or a timeout.
        max_concurrency: at most this many steps/resets in flight across the pool (None: no limit).
        on_timeout: ``"error"`` (a late step fails with ``StepTimeout``) or ``"truncate"`` (it comes back
            as a truncated row with the env's last observation and ``info["timeout"]`` True).
        launch: starts a worker process (default: a local child process); a server passes its fleet's,
            which may place it on another host and raises ``CapacityError`` when no host has room.
        name_prefix: prefixed to worker names (unique names across the pools sharing a launcher).
        when_room: with a launcher that can run out of room: ``when_room(retry)`` calls ``retry()`` each
            time room may have freed up, until it returns True (a worker that could not be restarted for
            want of room is started then, and its envs re-made).
        in_process: the first this many envs run in this process, served on the event loop by a worker of
            its own (``inline``: :mod:`workers.inproc`, stepped inside the calls; ``thread``/``async``:
            :mod:`workers.inproc_concurrent`); the others on the launched workers. Requests to launched
            workers go out first, so they step while this process steps its own share.
        adopt: a running local ``inline`` worker with no envs and the shared rows' descriptor it inherited
            (``executor="auto"``'s probe, see :class:`aioenv.core.costs.Probed`): it becomes the first launched
            worker, and the descriptor the pool's rows. Both are the coordinator's from here on.
        max_loop_hold: the most seconds a request to the ``inline`` worker in this process holds the event loop
            (its env code runs on a thread of this process; see :mod:`workers.inproc`); None: its default.
    """

    def __init__(
        self,
        num_envs: int,
        sources: EnvSources,
        private_dir: str,
        *,
        autoreset_mode: AutoresetName,
        executor: Executor,
        on_remade: Callable[[np.ndarray], None],
        max_concurrency: int | None = None,
        on_timeout: OnTimeout = "error",
        launch: Callable[[LaunchSpec], WorkerProc] = launch_local,
        name_prefix: str = "",
        when_room: Callable[[Callable[[], bool]], None] | None = None,
        max_worker_rss: int | None = None,
        in_process: int = 0,
        adopt: tuple[LocalProcess, int | None] | None = None,
        max_loop_hold: float | None = None,
        spawn: Spawn = spawn_here,
    ) -> None:
        Requests.__init__(self, Scheduler(num_envs, max_concurrency))
        #: Where local worker processes are started (see :class:`aioenv.core.launcher.Spawn`).
        self._spawn_on = spawn
        #: The exit descriptors of the local worker processes (see :meth:`settled`); the kernel drops each from the
        #: set when it is closed, as its process is reaped.
        self._exits = select.epoll()
        #: What :meth:`wait_here` blocks on (the done pipe, the exits, every worker process's pipe), made when it
        #: first waits and again after the worker processes changed (None: to be made).
        self._blocks_on: _Blocking | None = None
        self._waits = -1.0  # how long wait_here's recent waits took until their reply (s; a running mean; -1: none yet)
        #: The most seconds a request to the inline worker in this process holds the loop (None: its default).
        self.max_loop_hold = max_loop_hold
        #: How many envs (the first ones) run in this process, on a thread of their worker's (see workers.inproc).
        self.in_process = in_process
        self.max_worker_rss = max_worker_rss
        self._memory: MemoryWatch | None = None
        #: Truncate mode's last observations and owed rows (None: a late step fails with StepTimeout).
        self.truncation = Truncation(num_envs) if on_timeout == "truncate" else None
        self.sources = sources
        self.private_dir = private_dir
        self.autoreset_mode = autoreset_mode
        self.executor = executor
        self.on_remade = on_remade
        self.slots: list[Slot] = []
        self._by_name: dict[bytes, Slot] = {}
        #: NEW, STARTING (workers start, envs are made), RUNNING, CLOSING, CLOSED (see aioenv.core.lifecycle).
        self.life = Lifecycle("coordinator", Phase.NEW, COORDINATOR)
        self._turn_booked = False  # the loop's second turn will answer a share's deferred rows
        self._plan: _LanePlan | None = None  # how a lock-step step of every env goes as lane messages
        self._retired: list[WorkerProc] = []
        self._launch = launch
        #: Its workers are its own children on pipes of their own (or run in this process): values msgpack
        #: cannot carry travel pickled.
        self._trusted = launch is launch_local
        self._prefix = name_prefix
        self._when_room = when_room
        self.loop = asyncio.get_running_loop()
        self._timer = DeadlineTimer(self.loop, self._on_timer)
        #: The shared rows of this pool's local worker processes (None: arrays travel in the messages).
        self.slab: Slab | None = None
        self._slab_fd: int | None = None
        #: Lane replies with infos still to look at for an info area's keys (see _plan_info_area); 0: none.
        self._info_area_tries = _INFO_AREA_TRIES
        #: A lane step's reply, read by a local worker's pipe before any parsing (see aioenv.wire.lane).
        self._quick: Quick = (lane.FRAMED_DONE_SIZE, self._on_quick)
        self._adopt = adopt[0] if adopt is not None else None
        if adopt is not None:
            self._slab_fd = adopt[1]
        elif self._trusted and (executor == "inline" or not in_process):
            # (envs on threads or coroutines of this process take their rows as they are: no slab for them)
            self._slab_fd = Slab.try_new_fd()
        #: Steps may go as lane messages (aioenv.wire.lane): its workers are inline ones, which step a run of envs
        #: in one go; a thread or async worker's rows finish one by one, and answer in its RESULTs.
        self._lanes = executor == "inline"
        #: The done pipe (read end, write end) its local inline workers write their lane DONEs to, and its thread
        #: workers' env threads their rows' records, and what the last read left of a record; each slot's worker's
        #: token (0: none that may write). See aioenv.wire.lane.
        self._done_pipe: tuple[int, int] | None = None
        self._done_rest = b""
        self._done_dropped = 0  # bytes of it that were no record, so far (logged as the total passes a power of 2)
        #: A lane step's flags (aioenv.wire.lane.step_flags) by its sink's type, info_list and quiet: they change only
        #: when the slab gets its info area (see _plan_info_area), which empties this.
        self._lane_flags: dict[tuple[type, bool, bool], int] = {}
        #: Whether some slot may be DRAINING (its worker replaced after its next reply): a reply's slot is asked only
        #: then, not reply by reply in every batch.
        self._draining = False
        self._tokens: list[int] = []
        #: The quiet and countdown pipes of its quiet calls (aioenv.wire.lane.QUIET; None: it makes none); the base of
        #: the quiet call out (0: none); whether the quiet pipe is watched, as the done pipe is (a quiet call went
        #: another way: see _watch_quiet); what the last read of it left of a record.
        self._quiet: _Quiet | None = None
        self._quiet_base = 0
        self._quiet_watched = False
        self._quiet_rest = b""
        #: The sweep that gives up a quiet call out for longer than QUIET_PATIENCE (None: not running), and the call
        #: it saw out last.
        self._quiet_sweep: asyncio.TimerHandle | None = None
        self._quiet_seen = 0
        if self._slab_fd is not None and executor in lane.DONE_PIPE_EXECUTORS:
            self._open_done_pipe()

    @property
    def closing(self) -> bool:
        """Whether :meth:`aclose` began."""
        return self.life.state is Phase.CLOSING or self.life.state is Phase.CLOSED

    def check_open(self) -> None:
        """Raise ``PoolClosed`` unless requests may go out (the coordinator runs)."""
        if self.life.state is not Phase.RUNNING:
            raise PoolClosed(f"the pool's coordinator is {self.life.state.value}: it takes no requests")

    @staticmethod
    def private_directory() -> str:
        """A fresh 0700 directory for pickled factories."""
        return tempfile.mkdtemp(prefix="aioenv-")

    # ------------------------------------------------------------ start

    async def start(self, num_workers: int) -> dict[str, Any]:
        """Start ``num_workers`` launched workers (plus one in this process when ``in_process`` envs run here),
        make every env; returns the env description ({"obs", "act", "metadata", ...}).

        Raises:
            PoolClosed: :meth:`aclose` began meanwhile. Any error of the workers' start (``EnvError``...).
        """
        self.life.move(Phase.STARTING)
        here = 1 if self.in_process else 0
        blocks = self.sched.place(num_workers + here, self.in_process)
        for index, ids in enumerate(blocks):
            slot = Slot(index, in_process=index < here)
            self.slots.append(slot)
            if index == here and self._adopt is not None:
                self._take(slot, self._adopt)
                self._adopt = None
            else:
                self._spawn(slot, ids.size)
        makes = [self._make(slot, ids) for slot, ids in zip(self.slots, blocks, strict=True)]
        replies = await asyncio.gather(*makes, return_exceptions=True)
        failed = [r for r in replies if isinstance(r, BaseException)]
        if failed:
            raise start_failure(failed, self.sched.num_envs)
        described: dict[str, Any] = {}
        for reply in replies:
            assert isinstance(reply, dict)
            described.update(reply)
        await self._share_rows(described)
        if self.closing:
            raise PoolClosed("the pool was closed while its workers started")
        self.life.move(Phase.RUNNING)
        self._watch_memory()
        return described

    async def _share_rows(self, described: dict[str, Any]) -> None:
        """Size the slab for the envs' spaces and have every worker map it (see :mod:`aioenv.transport.slab`); pools
        whose envs disagree on their spaces (refused by the pool) or have text leaves keep messages."""
        if self._slab_fd is None:
            return
        found = [(space_from_description(d["obs"]), space_from_description(d["act"])) for d in described.values()]
        finals = self.autoreset_mode == "same_step"  # an area for the final observations (see Slab)
        layout = Slab.plan(self.sched.num_envs, *found[0], finals) if all(f == found[0] for f in found[1:]) else None
        if layout is None:
            os.close(self._slab_fd)
            self._slab_fd = None
            self._close_done_pipe()
            return
        self.slab = Slab.create(self._slab_fd, layout)
        mapped = []
        for slot in self.slots:
            fut: SetupFuture = self.loop.create_future()
            req = self.sched.open(slot.index, "slab", self.sched.all_ids[:0], sink=fut)
            self._send(slot, encode(Op.SLAB, self._with_done_pipe(slot, {Key.ID: req.id, Key.SLAB: layout})))
            mapped.append(fut)
        await asyncio.gather(*mapped)

    def _spawn(self, slot: Slot, envs: int) -> None:
        """Start a worker process for ``slot`` (may raise CapacityError from a fleet's launcher)."""
        slot.generation += 1
        slot.name = f"{self._prefix}w{slot.index}.{slot.generation}"
        slot.outbox = []
        done_fd = None
        quiet_fds = None
        if self._done_pipe is not None and not slot.in_process and self._launch is launch_local:
            done_fd = self._done_pipe[1]
            self._set_token(slot, secrets.randbits(64) or 1)  # this process's alone: its records say it wrote them
            if self._quiet is not None:
                quiet_fds = (self._quiet.write, self._quiet.count_read)
        spec = LaunchSpec(
            slot.name,
            self.executor,
            envs,
            self.private_dir,
            self._on_exit,
            self._on_message,
            self._slab_fd,
            self.max_loop_hold,
            self._quick,
            done_fd,
            self._spawn_on,
            quiet_fds,
        )
        slot.proc = launch_in_process(spec) if slot.in_process else self._launch(spec)
        self._watch_exit(slot.proc)
        slot.move(SlotState.STARTING)
        self._by_name[slot.name.encode()] = slot

    def _watch_exit(self, proc: WorkerProc) -> None:
        """``proc`` became a slot's process: :meth:`settled` watches its exit, and :meth:`wait_here` its pipe."""
        if isinstance(proc, LocalProcess):
            self._exits.register(proc.exit_fd, select.EPOLLIN)
        self._workers_changed()

    def _workers_changed(self) -> None:
        """A slot's process was replaced or lost: :meth:`wait_here` watches the pipes of the ones there are now."""
        if self._blocks_on is not None:
            self._blocks_on.poller.close()
            self._blocks_on = None

    def wait_here(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """See :meth:`aioenv.core.runner.Runner.wait_here`: what the done pipe and the local workers' pipes bring is
        taken in here, as the loop's readers would (:meth:`_read_done_pipe`, ``drain``), until ``future`` is done. A
        worker's exit, the deadline timer's time and a change of worker processes are the loop's to handle: this
        returns False then, having read nothing of the exit. A pool with envs in this process does not wait so:
        their worker answers a step that outlasts its hold from its env thread, through the loop."""
        if future.done():
            return True
        blocking = self._blocking()
        if blocking is None:
            return False
        done_fd = self._done_fd()
        poll, drains, exits = blocking.poller.poll, blocking.drains, self._exits.fileno()
        now = time.monotonic()
        end = now + timeout
        due = self._timer.at
        if due is not None:
            end = min(end, now + due - self.loop.time())
        spin_until = now + spin_budget(blocking.spins, self._waits)
        while True:
            at = time.monotonic()
            left = end - at
            if left <= 0:
                return False
            if at < spin_until:  # a core to spare, and replies come soon: look again rather than sleep
                events = poll(0)
                if not events:
                    continue
            else:
                events = poll(left)
                if not events:
                    return False  # the time is up
            for fd, _ in events:
                if fd == exits:
                    return False  # a worker exited: the loop reaps it (its pipe is drained first)
            for fd, _ in events:
                if fd == done_fd:
                    self._read_done_pipe()
                    continue
                proc = drains[fd]
                proc.drain(64)
                if proc.pipe_closed:  # its pipe ended: the loop sees to its exit, and this set is made again
                    self._workers_changed()
                    return future.done()
            if future.done():
                self.note_wait(time.monotonic() - now)
                return True
            if self._blocks_on is not blocking:  # a worker was replaced or lost meanwhile
                return False

    def poll_budget(self) -> float | None:
        """See :meth:`aioenv.core.runner.Runner.poll_budget`: by the rule :meth:`wait_here` polls by
        (:func:`spin_budget`), None where it would not poll at all (envs in this process, nothing in flight, or
        the local worker processes and the waiting thread more than the CPUs this process may use)."""
        blocking = self._blocking()
        if blocking is None or not blocking.spins:
            return None
        return spin_budget(True, self._waits)

    def note_wait(self, seconds: float) -> None:
        """See :meth:`aioenv.core.runner.Runner.note_wait`: the running mean of the recent waits, over the last
        eight or so, that :func:`spin_budget` reads."""
        waits = self._waits
        self._waits = seconds if waits < 0 else waits + (seconds - waits) / 8

    def _blocking(self) -> _Blocking | None:
        """What a wait for replies may block on (:meth:`_block_on`), or None where no wait of this pool is a wait for
        its processes' replies alone: it is closing, its envs are here (a late step is answered through the loop) or
        nothing is in flight (no reply can come)."""
        if self.closing or self.in_process or not self.sched.in_flight or self._quiet_watched:
            return None
        return self._blocks_on or self._block_on(self._done_fd())

    def _done_fd(self) -> int:
        """The read end of the done pipe (-1: a pool without shared rows has none)."""
        pipe = self._done_pipe
        return -1 if pipe is None else pipe[0]

    def _block_on(self, done_fd: int) -> _Blocking:
        """What :meth:`wait_here` blocks on: the done pipe (``done_fd``; -1: none), the exits (:attr:`_exits`,
        itself readable when one of its descriptors is) and the pipe of every local worker process there is now,
        with how to read each."""
        poller = select.epoll()
        if done_fd >= 0:  # (a pool without shared rows has no done pipe)
            poller.register(done_fd, select.EPOLLIN)
        poller.register(self._exits.fileno(), select.EPOLLIN)
        drains: dict[int, LocalProcess] = {}
        for slot in self.slots:
            proc = slot.proc
            if isinstance(proc, LocalProcess) and not proc.pipe_closed:
                poller.register(proc.pipe_fd, select.EPOLLIN)
                drains[proc.pipe_fd] = proc
        workers = len(drains)
        self._blocks_on = _Blocking(poller, drains, workers + 1 <= usable_cpus())
        return self._blocks_on

    def settled(self) -> bool:
        """See :meth:`aioenv.core.runner.Runner.settled`: no local worker process has exited unnoticed (one
        ``epoll_wait`` over their exit descriptors, which are readable from the moment a process exits until the
        loop reaps it)."""
        return not self._exits.poll(0)

    def _take(self, slot: Slot, proc: LocalProcess) -> None:
        """Make the running worker ``proc`` (it said HELLO to its first owner) ``slot``'s worker."""
        slot.generation += 1
        slot.name = f"{self._prefix}w{slot.index}.{slot.generation}"
        slot.outbox = []
        proc.rebind(slot.name, self._on_message, self._on_exit, self._quick)
        self._watch_exit(proc)
        slot.proc = proc
        slot.move(SlotState.READY)
        self._by_name[slot.name.encode()] = slot

    async def _make(self, slot: Slot, env_ids: np.ndarray) -> dict[str, Any]:
        fut: SetupFuture = self.loop.create_future()
        self._send_make(slot, env_ids, fut)
        return await fut

    def _send_make(
        self,
        slot: Slot,
        env_ids: np.ndarray,
        sink: SetupFuture | None,
        ended: np.ndarray | None = None,
        remade: dict[str, Any] | None = None,
    ) -> None:
        """Ask ``slot``'s worker to make ``env_ids``; ``sink`` gets the spaces (None: a re-make, only logged).
        ``ended``: envs to start as if just truncated (see ``on_timeout``); ``remade``: why the envs are made
        again (see :meth:`Lost.remade`), which their next step reports as :class:`EnvRemade`."""
        pairs, sources = self.sources.for_envs(env_ids.tolist())
        req = self.sched.open(slot.index, "make", env_ids, sink=sink)
        fields = {Key.ID: req.id, Key.ENVS: pairs, Key.SOURCES: sources, Key.AUTORESET: self.autoreset_mode}
        if ended is not None and ended.size:
            fields[Key.ENDED] = ended.tolist()
        if remade is not None:
            fields[Key.REMADE] = remade
        if self.slab is not None:  # a re-made worker maps the pool's rows before it makes its envs
            fields[Key.SLAB] = self.slab.layout
            self._with_done_pipe(slot, fields)
        self._send(slot, encode(Op.MAKE, fields))

    # ------------------------------------------------------------ the done pipe (see aioenv.wire.lane)
    #
    # Every local inline worker started with it writes its lane steps' DONEs to one pipe, as records that carry
    # its slot and a token only its process was told (over its own pipe). The pool reads them many at a time:
    # one wake-up and one read for the replies of every worker that finished meanwhile, where each worker's own
    # pipe would take one of each per reply. Any process holding the write end could write to it, so a record
    # counts only with its slot's current token, and bytes that are no such record are skipped (the next record
    # is found after them). A worker's records are read before its exit is handled (see Recovery._retire).

    def _open_done_pipe(self) -> None:
        read, write = os.pipe2(os.O_CLOEXEC)  # the write end stays blocking: the workers' writes wait for room
        os.set_blocking(read, False)
        self._done_pipe = (read, write)
        self.loop.add_reader(read, self._read_done_pipe)
        if self._lanes:
            self._quiet = _open_quiet()

    def _close_done_pipe(self) -> None:
        pipe, self._done_pipe = self._done_pipe, None
        if pipe is not None:
            with contextlib.suppress(Exception):  # the loop may be closed already
                self.loop.remove_reader(pipe[0])
            os.close(pipe[0])
            os.close(pipe[1])
        quiet, self._quiet = self._quiet, None
        if self._quiet_sweep is not None:
            self._quiet_sweep.cancel()
            self._quiet_sweep = None
        if quiet is not None:
            if self._quiet_watched:
                with contextlib.suppress(Exception):
                    self.loop.remove_reader(quiet.read)
            for fd in quiet[:4]:
                os.close(fd)

    # Quiet calls (aioenv.wire.lane.QUIET): a lock-step step of every env on two or more worker processes, when
    # nothing else is out, wakes this process once, when its last worker answers, instead of once per group of
    # workers that answer together. The books of the call are the same; only where its records are read from
    # differs. Whatever goes another way (a reply on a worker's own pipe, a worker lost, a deadline, a spill) makes
    # the quiet pipe watched as the done pipe is, until the next quiet call: from then on no record waits unread.

    def _count_quietly(self, workers: int) -> bool:
        """Before a quiet call of ``workers`` messages goes out: its countdown (``workers - 1`` bytes), after what an
        earlier call that went another way left is emptied out. False: the countdown could not be written whole
        (the call goes as any other)."""
        quiet = self._quiet
        assert quiet is not None, "only a pool with the quiet pipes makes quiet calls"
        if self._quiet_watched:
            self._quiet_watched = False
            self.loop.remove_reader(quiet.read)
            _empty(quiet.count_read)
        try:
            written = os.write(quiet.count_write, bytes(workers - 1))
        except OSError:  # (no room: only a countdown never taken fills it)
            written = -1
        if written != workers - 1:
            self._watch_quiet()  # (the next quiet call empties what went in)
            return False
        if self._quiet_sweep is None:
            self._quiet_sweep = self.loop.call_later(QUIET_PATIENCE, self._sweep_quiet)
        return True

    def _sweep_quiet(self) -> None:
        """Every :data:`QUIET_PATIENCE` seconds while a quiet call is out: one out since the last sweep is given up
        (:meth:`_watch_quiet`), what its workers wrote taken; with none out the sweep stops, and the next quiet call
        starts it again. No worker of the pool's own fails to count
        down, but a process that holds the countdown pipe (an env's code in a worker) could make the last worker
        miss its wake-up: the call's replies then wait two of these at most, never for good."""
        base = self._quiet_base
        if base and base == self._quiet_seen:
            log.debug("a quiet call out for %.1f s or more: its replies are read as they come", QUIET_PATIENCE)
            self._watch_quiet()
            self._read_quiet_pipe()
        self._quiet_seen = self._quiet_base
        self._quiet_sweep = self.loop.call_later(QUIET_PATIENCE, self._sweep_quiet) if self._quiet_base else None

    def _watch_quiet(self) -> None:
        """The quiet call went another way: read what the quiet pipe brings as it comes, until the next quiet call
        (:meth:`_count_quietly`)."""
        self._quiet_base = 0
        quiet = self._quiet
        if quiet is not None and not self._quiet_watched:
            self._quiet_watched = True
            self._workers_changed()  # (a wait in the caller's thread does not watch the quiet pipe: see _blocking)
            self.loop.add_reader(quiet.read, self._read_quiet_pipe)

    def _read_quiet(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The DONE records the quiet pipe holds now (one read), plain and with infos (:func:`lane.read_records`)."""
        quiet = self._quiet
        assert quiet is not None, "only a pool with the quiet pipes reads one"
        got = self._read_records(quiet.read, self._quiet_rest)
        if got is None:
            return [], []
        records, with_infos, rows, self._quiet_rest = got
        if rows:  # (no worker records rows there)
            self._dropped_from_done_pipe(len(rows) * lane.RECORD.size)
        return records, with_infos

    def _read_records(self, fd: int, rest: bytes) -> _Records | None:
        """The records one read of the record pipe ``fd`` brought after ``rest`` (what the last read of it left of a
        record), by :func:`lane.read_records`: ``(records, with_infos, rows, rest)``, the bytes that were no record
        dropped and logged; None: it held nothing."""
        try:
            data = os.read(fd, _DONE_READ)
        except BlockingIOError:
            return None
        if rest:
            data = rest + data
        records, with_infos, rows, used, skipped = lane.read_records(data, self._tokens)
        if skipped:
            self._dropped_from_done_pipe(skipped)
        return records, with_infos, rows, data[used:]

    def _read_quiet_pipe(self) -> None:
        """Take the records the quiet pipe holds now, while it is watched (:meth:`_watch_quiet`)."""
        records, with_infos = self._read_quiet()
        if records:
            self._take_lane_replies(records)
        if with_infos:
            self._take_lane_replies(with_infos, area=True)

    def _set_token(self, slot: Slot, token: int) -> None:
        """``slot``'s worker writes its records with ``token`` from now on (0: no worker of it may)."""
        if len(self._tokens) <= slot.index:
            self._tokens.extend([0] * (slot.index + 1 - len(self._tokens)))
        self._tokens[slot.index] = token

    def _with_done_pipe(self, slot: Slot, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` of a message that maps the shared rows, with as which slot and token ``slot``'s worker writes
        to the done pipe, when it was started with it."""
        token = self._tokens[slot.index] if slot.index < len(self._tokens) else 0
        if token:
            fields[Key.DONE_PIPE] = [slot.index, token]
        return fields

    def _read_done_pipe(self) -> None:
        """Take the records the done pipe holds now (one read), and while a quiet call is out those of the quiet
        pipe."""
        pipe = self._done_pipe
        if pipe is None:
            return
        got = self._read_records(pipe[0], self._done_rest)
        base = self._quiet_base
        if got is None:
            if not base:
                return
            # (nothing here while a quiet call is out: a worker's exit is handled, and its quiet record counts too)
            got = [], [], [], self._done_rest
        records, with_infos, rows, self._done_rest = got  # (kept before any record is handled: that may read again)
        if base:  # a quiet call is out: its last worker woke this (the others' records are in the quiet pipe)
            if records or with_infos or rows:  # (a record here while it is out: some worker answers another way)
                self._watch_quiet()
            quiet, quiet_infos = self._read_quiet()
            records += quiet
            with_infos += quiet_infos
        if records:
            self._take_lane_replies(records)
        if with_infos:
            self._take_lane_replies(with_infos, area=True)
        if rows:
            self._take_row_records(rows)
        if base and base not in self.sched.lane_calls:
            self._quiet_base = 0

    def _dropped_from_done_pipe(self, skipped: int) -> None:
        """Log bytes of the done pipe that were no record: the first, then once each time their total passes the next
        power of two (an env that floods the pipe cannot flood the log)."""
        before = self._done_dropped
        self._done_dropped += skipped
        if before.bit_length() < self._done_dropped.bit_length():
            log.warning(
                "dropped %d bytes of the done pipe that are no lane reply of this pool's workers (%d in all; logged "
                "again once that total passes the next power of two)",
                skipped,
                self._done_dropped,
            )

    # ------------------------------------------------------------ requests

    def submit(self, kind: str, env_ids: np.ndarray, sink: Sink, build: Build, *, timeout: float | None) -> None:
        """Send one request per worker covering ``env_ids`` (already claimed); replies go to ``sink``.

        ``build(req)`` returns the request's fields and arrays for its rows (``req.positions`` index into
        ``env_ids``). Under a concurrency limit, rows beyond it wait and go out as others finish.
        """
        sched = self.sched
        if sched.limit is None or kind not in THROTTLED or (room := sched.room(env_ids.size)) >= env_ids.size:
            self._send_rows(kind, env_ids, None, sink, build, timeout)
            return
        positions = np.arange(env_ids.size)
        if room:
            try:  # the rows that fit now: a value the wire cannot carry fails the whole call here
                self._send_rows(kind, env_ids[:room], positions[:room], sink, build, timeout)
            except UsageError:
                sched.release(env_ids[room:])  # the rows that would have waited are the caller's again
                raise
            except BaseException as exc:  # Ctrl-C inside an env in this process: the rows sent were answered
                self._answer_unsent(kind, env_ids[room:], positions[room:], sink, exc)
                raise
        sched.hold(HeldCall(kind, sink, build, timeout), env_ids[room:], positions[room:])
        # Rows answered inside the send above (envs in this process) freed their room before any row was
        # held, so no reply will come to pump these: send what fits now.
        self._pump()

    def _send_rows(
        self, kind: str, env_ids: np.ndarray, at: np.ndarray | None, sink: Sink, build: Build, timeout: float | None
    ) -> None:
        """Send ``env_ids`` (at positions ``at`` of the caller's call; None: all of it, in order)."""
        if self.truncation is not None and self.truncation.replaced_count:
            env_ids, at = self._pay_debts(self.truncation, kind, env_ids, at, sink)
            if env_ids.size == 0:
                return
        deadline = None if timeout is None else self.loop.time() + timeout
        if (
            env_ids is self.sched.all_ids
            and type(build) is SharedStep
            and self._lanes
            and type(sink) is Gather
            and self.truncation is None
            and (plan := self._lane_plan()) is not None
        ):  # a lock-step step() of every env, each worker's a run of shared rows: one lane call
            quiet = (
                plan.quiet
                and self._quiet is not None
                and not self.sched.in_flight
                and self._count_quietly(len(plan.workers))
            )
            self._send_lanes(plan, sink, build.info_list, deadline, quiet=quiet)
            if deadline is not None:
                self._arm_timer()
            return
        if (
            type(sink) is RecvQueue
            and type(build) is SharedStep
            and self._lanes
            and at is None
            and self.truncation is None
            and (runs := self._lane_runs(env_ids)) is not None
        ):  # a send(), each worker's part a run of shared rows: one lane call whose rows go to recv() as they come
            self._send_lanes(runs, sink, build.info_list, deadline, each=True)
            if deadline is not None:
                self._arm_timer()
            return
        prepared = self._prepare(kind, env_ids, at, sink, build, deadline)
        # A share's rows for recv() wait until the caller would wait (see Pool.recv and InProcessWorker.defer).
        defer = isinstance(sink, RecvQueue) and self._here is not None
        if len(prepared) > 1 and prepared[0][0].in_process:  # may be answered inside send: the others go first
            prepared.append(prepared.pop(0))
        for slot, req, positions, frames in prepared:
            if frames is None:  # its worker is gone for good
                self.sched.finish(req.id)
                dead = lambda e, s=slot: self._no_worker(s, e, kind)  # noqa: E731
                sink.deliver(Part.failed(req.env_ids, dead), positions)
            elif slot.in_process and defer and type(frames) is list:  # (a lane message goes to a worker process)
                self._defer(slot, frames)
            else:
                self._send(slot, frames)
        if deadline is not None:
            self._arm_timer()

    def _prepare(
        self, kind: str, env_ids: np.ndarray, at: np.ndarray | None, sink: Sink, build: Build, deadline: float | None
    ) -> list[tuple[Slot, Request, np.ndarray, list[Any] | bytes | None]]:
        """Open one request per worker and encode its message (None for a worker that is gone).

        Every message is built before any is sent: a value the wire cannot carry (an int beyond 64 bits,
        an object msgpack does not know) fails the whole call here, with every request closed and every
        env released, so nothing stays claimed and no worker got half of a call.
        """
        prepared: list[tuple[Slot, Request, np.ndarray, list[Any] | bytes | None]] = []
        opened: list[Request] = []
        # A step over shared rows may go as lane messages (aioenv.wire.lane): nothing to build for those.
        lane_step = build if type(build) is SharedStep and self._lanes else None  # (made only for a pool with a slab)
        finals = lane_step is not None and self._finals_in_slab(sink)
        infos = lane_step is not None and self._infos_in_slab(sink)
        every = env_ids is self.sched.all_ids
        try:
            for worker, rows in self.sched.split(env_ids):
                ids = env_ids[rows] if rows.size != env_ids.size else env_ids
                positions = rows if at is None else at[rows]
                req = self.sched.open(worker, kind, ids, sink=sink, positions=positions, deadline=deadline)
                opened.append(req)
                slot = self.slots[worker]
                frames: list[Any] | bytes | None = None  # its worker is gone for good
                if not slot.dead_reason:  # the request's frames: its builder's fields and arrays, its id and envs
                    if (
                        lane_step is not None
                        and slot.ready
                        and isinstance(slot.proc, LocalProcess)
                        and _is_run(ids, every)
                    ):  # a run of envs over shared rows, to a worker process of its own: a lane message
                        data = lane.framed_step(req.id, int(ids[0]), ids.size, lane_step.info_list, finals, infos)
                        prepared.append((slot, req, positions, data))
                        continue
                    fields, arrays = build(req)
                    fields[Key.ID] = req.id
                    fields[Key.ENV] = ids.tolist()
                    frames = (
                        _local_step(fields, arrays, self._trusted)
                        if slot.in_process and kind == "step"
                        else encode(_OPS[kind], fields, arrays, trusted=self._trusted)
                    )
                prepared.append((slot, req, positions, frames))
        except Exception as exc:
            for req in opened:
                self.sched.finish(req.id)
            self.sched.release(env_ids)
            raise unsendable(kind, env_ids, exc) from exc
        return prepared

    def _lane_plan(self) -> _LanePlan | None:
        """How a lock-step step of every env goes as lane messages: every worker a ready worker process of its
        own whose envs are one run (None: some worker is not, and requests go as usual). Made again whenever a
        worker was replaced or is not ready."""
        plan = self._plan
        if plan is not None:
            for slot, was in zip(self.slots, plan.procs, strict=True):
                if slot.proc is not was or not slot.ready:
                    break
            else:
                return plan
        self._plan = None
        plan = self._lane_runs(self.sched.all_ids)
        if plan is None or len(plan.workers) != len(self.slots):  # (a worker with no envs: not in the call)
            return None
        by_worker = dict(zip(plan.workers, plan.by_message, strict=True))
        quiet = self._quiet is not None and 2 <= len(plan.workers) <= self._quiet.most
        tokens = self._tokens
        quiet = quiet and all(w < len(tokens) and tokens[w] for w in plan.workers)  # each writes the done pipe
        self._plan = plan._replace(procs=[by_worker[slot.index] for slot in self.slots], quiet=quiet)
        return self._plan

    def _lane_runs(self, env_ids: np.ndarray) -> _LanePlan | None:
        """How a step of ``env_ids`` goes as lane messages, when each worker's part of them is one run of envs on a
        ready worker process of its own (None: one is not, and requests go as usual). Its ``procs`` are those of
        the messages (a plan kept for later calls holds every slot's: see :meth:`_lane_plan`)."""
        n = env_ids.size
        if n == 0:
            return None
        pieces = self.sched.runs(env_ids)
        if pieces is None:
            return None
        workers, firsts, counts = pieces
        procs: list[LocalProcess] = []
        ports: list[PipePort] = []
        slots = self.slots
        for worker in workers:
            slot = slots[worker]
            proc = slot.proc
            if not slot.ready or not isinstance(proc, LocalProcess):
                return None
            procs.append(proc)
            ports.append(proc.pipe)
        return _LanePlan(workers, firsts, counts, procs, procs, ports)

    def _send_lanes(
        self,
        plan: _LanePlan,
        sink: Gather | RecvQueue,
        info_list: bool,
        deadline: float | None,
        each: bool = False,
        quiet: bool = False,
    ) -> None:
        """Send a step of envs claimed, their actions in the shared rows, as one lane call (``each``: see
        :class:`aioenv.core.scheduler.LaneCall`; ``quiet``: as a quiet call, its countdown written already)."""
        call = self.sched.open_lanes(plan.workers, plan.firsts, plan.counts, sink, deadline, each)
        base, slots = call.base, self.slots
        key = (type(sink), info_list, quiet)
        flags = self._lane_flags.get(key)
        if flags is None:  # (once per kind of call, and again once the slab has its info area)
            flags = lane.step_flags(info_list, self._finals_in_slab(sink), self._infos_in_slab(sink), quiet)
            self._lane_flags[key] = flags
        if quiet:
            self._quiet_base = base
        datas = lane.framed_steps(base, plan.firsts, plan.counts, flags)
        for k in send_framed_each(plan.ports, datas):
            slots[plan.workers[k]].outbox.append(datas[k])  # its worker is gone: its exit fails it (see _fail_lost)

    def _finals_in_slab(self, sink: Sink) -> bool:
        """Whether a lane step's ended envs may leave their final observations in the slab (``lane.FINALS``): a
        same_step pool's slab has an area for them, and ``sink`` builds ``final_obs`` from it, as a lane DONE's
        rows go to a :class:`Gather` or :class:`RecvQueue` (see :meth:`_on_done`)."""
        slab = self.slab
        return (
            slab is not None
            and slab.final is not None
            and isinstance(sink, (Gather, RecvQueue))
            and self.truncation is None
        )

    def _infos_in_slab(self, sink: Sink) -> bool:
        """Whether a lane step's envs may leave their infos in the slab's info area (``lane.INFOS``,
        :mod:`aioenv.transport.slab_infos`): the pool has one, and ``sink`` reads it, as a :class:`Gather` (of batched
        infos, or of each env's own dict) or :class:`RecvQueue` does (see :meth:`_on_done`); not in a pool that
        truncates late steps. (In a same_step pool a step whose envs ended says their final observations and infos,
        which no column holds: the worker answers it with a RESULT as before.)"""
        slab = self.slab
        return (
            slab is not None
            and slab.info is not None
            and self.truncation is None
            and (type(sink) is RecvQueue or type(sink) is Gather)
        )

    def _plan_info_area(self, binfo: dict[str, Any]) -> None:
        """Add an info area to the slab for the keys of ``binfo`` (a lane reply's batched info), and have every worker
        map it (:mod:`aioenv.transport.slab_infos`): once per pool. Infos whose keys cannot all be columns make none;
        the next reply's are looked at, up to :data:`_INFO_AREA_TRIES` replies (an env whose first step said
        something of another kind, an episode's statistics, still gets one; one whose infos never fit stops
        costing the look)."""
        self._info_area_tries -= 1
        slab, fd = self.slab, self._slab_fd
        if slab is None or fd is None:
            return
        area = plan_info_area(binfo, slab.num_envs, slab.info_offset())
        if area is None:
            log.debug("the envs' infos keep their messages: some key is no numeric column")
            return
        self._info_area_tries = 0
        try:
            slab.add_infos(fd, area)
        except (OSError, ValueError) as exc:  # (no room for the file to grow: the infos keep their messages)
            log.warning("the envs' infos keep their messages: no info area in the shared rows (%s)", exc)
            return
        self._lane_flags.clear()  # (steps may leave their infos there from now on: _infos_in_slab)
        layout = slab.layout
        for slot in self.slots:
            if slot.dead_reason or slot.in_process:
                continue  # (a re-made worker maps the area with its MAKE)
            self._send(slot, encode(Op.SLAB, self._with_done_pipe(slot, {Key.ID: _INFO_AREA_ID, Key.SLAB: layout})))

    def _spill_lanes(self, due: float | None = None, worker: int | None = None, req_id: int | None = None) -> None:
        """Turn the lane calls still out (past ``due``, with a message out to ``worker``, or with the message
        ``req_id`` unanswered, when given) into ordinary requests (:meth:`Scheduler.spill_lanes`), the rows
        answered already taken by their sinks."""
        if not self.sched.lane_calls:
            return
        if self._quiet_base:  # what its workers answered goes first: only what they did not is spilled
            self._read_quiet_pipe()
            if self._quiet_base in self.sched.lane_calls:
                self._watch_quiet()
            self._quiet_base = 0
        slab = self.slab
        assert slab is not None, "lane calls are made over shared rows"
        for call, answered in self.sched.spill_lanes(due, worker, req_id):
            sink = call.sink
            if call.in_area is not None:  # (before their rows are taken: their infos with them)
                self._keep_lane_areas(call, answered)
            for k in answered:
                assert isinstance(sink, Gather), "only a Gather's answered rows wait in the slab"
                sink.take_shared(slab, call.firsts[k], call.run(k), self.sched.release)

    def _inline_here(self) -> HereWorker | None:
        """The ``inline`` worker in this process, if this pool has one."""
        if self.executor != "inline" or not self.slots or not self.slots[0].in_process:
            return None
        return cast("HereWorker | None", self.slots[0].proc)

    def in_env_code(self) -> bool:
        """Whether the calling thread runs env code of this pool's ``inline`` worker in this process (an env
        that calls its own pool: a call that would wait for the very thread it runs on)."""
        proc = self._inline_here()
        return proc is not None and proc.runs_env_code_here()

    def runs_env_code(self) -> bool:
        """Whether the ``inline`` worker in this process runs (or has queued) env code now."""
        proc = self._inline_here()
        return proc is not None and proc.runs_env_code()

    def interrupt_env_code(self) -> None:
        """Raise ``KeyboardInterrupt`` inside the env code that the ``inline`` worker in this process runs now, if
        any (:meth:`workers.inproc.InProcessWorker.interrupt_env_code`)."""
        if (proc := self._inline_here()) is not None:
            proc.interrupt_env_code()

    def _answer_unsent(
        self, kind: str, env_ids: np.ndarray, positions: np.ndarray, sink: Sink, exc: BaseException
    ) -> None:
        """Rows of a call that an interrupt (``exc``: Ctrl-C or SystemExit inside an env stepped in this process)
        cut off before they went out: released, and answered with it (each row of a call gets its reply)."""
        self.sched.release(env_ids)
        desc = error_fields(exc, None)
        desc["message"] = f"not sent: the call was cut short by this {type(exc).__name__} in an env stepped here"
        cut = lambda e: from_wire({**desc, "env_id": e}, context=kind)  # noqa: E731
        sink.deliver(Part.failed(env_ids, cut), positions)

    def _pump(self) -> None:
        """Send held rows that fit under the concurrency limit now (rows that cannot be sent fail their own
        sink: their caller returned long ago)."""
        fits = self.sched.unhold()
        for i, held in enumerate(fits):
            kind, sink, build, timeout = held.item
            try:
                self._send_rows(kind, held.env_ids, held.positions, sink, build, timeout)
            except UsageError as err:
                sink.deliver(Part.failed(held.env_ids, functools.partial(for_env, err)), held.positions)
            except BaseException as exc:  # Ctrl-C inside an env in this process: the rows taken out to go now
                for rest in fits[i + 1 :]:  # and not sent yet are answered with it
                    self._answer_unsent(rest.item.kind, rest.env_ids, rest.positions, rest.item.sink, exc)
                raise

    # ------------------------------------------------------------ a share's rows for recv()
    #
    # A share steps some envs here while worker processes step the rest. Stepped inside send(), the rows here
    # would be ready before any worker's reply, and a first-finished recv() would hand them out, the next
    # send() step them again, and so on while the workers' replies wait unread. So requests for the envs here
    # whose rows go to recv() wait (InProcessWorker.defer) until the caller would wait: recv() first reads the
    # replies that arrived (their envs step again as soon as the caller sends them), then steps the envs here
    # only if it still lacks rows (Pool.recv). The loop's second turn after the send answers what no recv()
    # took (a caller that awaits something else, or a recv() in a task of its own), workers' replies first.

    def _defer(self, slot: Slot, frames: list[Any]) -> None:
        proc = cast("HereWorker", slot.proc)
        if not slot.ready or not proc.defer(frames):
            self._send(slot, frames)
        elif not self._turn_booked:
            self._turn_booked = True
            self.loop.call_soon(self.loop.call_soon, self._on_turn)

    def _on_turn(self) -> None:
        self._turn_booked = False
        self.answer_waiting()

    @property
    def _here(self) -> HereWorker | None:
        """The worker in this process of a pool that shares its envs with worker processes (None: no share)."""
        if len(self.slots) < 2 or not self.slots[0].in_process or self.executor != "inline":
            return None
        return cast("HereWorker | None", self.slots[0].proc)

    def deferred_here(self) -> bool:
        """Whether steps of the envs in this process wait to be answered (a share's rows for ``recv()``)."""
        here = self._here
        return here is not None and here.deferred

    def answer_waiting(self, enough: Callable[[], bool] = lambda: False) -> None:
        """Step the envs in this process whose requests wait (:meth:`deferred_here`) now, once the replies that
        local worker processes' pipes hold are handled (without waiting for the loop), unless those made
        ``enough`` true: the workers' rows go first (:meth:`aioenv.core.runner.Runner.answer_waiting`)."""
        here = self._here
        if here is None or not here.deferred:
            return
        for slot in self.slots:
            port = getattr(slot.proc, "port", None)
            if isinstance(port, PipePort):
                port.drain()
        self._read_done_pipe()
        if not enough():
            here.answer_deferred()

    def _send(self, slot: Slot, frames: list[Any] | bytes) -> None:
        """Send one message to ``slot``'s worker: its frames, or (bytes) a local worker's message framed already."""
        if not slot.ready:
            slot.outbox.append(frames)
            return
        proc = slot.proc
        assert proc is not None
        if type(frames) is bytes:
            assert isinstance(proc, LocalProcess), "a message framed for a pipe goes to a local worker"
            sent = proc.send_framed(frames)
        else:
            sent = proc.port.send(slot.name.encode(), frames)
        if not sent:
            slot.outbox.append(frames)  # reconnecting; flushed at its next HELLO

    # ------------------------------------------------------------ replies

    def _on_message(self, identity: bytes, frames: list[Any]) -> None:
        slot = self._by_name.get(identity)
        if slot is None:
            log.warning("dropping a message from unknown peer %r", identity)
            return
        first = frames[0]
        if type(first) is memoryview and lane.is_lane(first):  # a lane message that came with others
            done = lane.read_done(first)
            self._on_lane_reply(slot, None if done is None else done[0], done is not None and done[1])
            return
        try:
            header, arrays = decode(frames, trusted=self._trusted)
        except ProtocolError as exc:
            self._on_malformed(slot, exc)
            return
        op = header[Key.OP]
        if op == Op.HELLO:
            if slot.life.state is SlotState.STARTING:  # else a worker that reconnected: READY or DRAINING, it stays
                slot.move(SlotState.READY)
            outbox, slot.outbox = slot.outbox, []
            for queued in outbox:
                self._send(slot, queued)
            return
        multi = header.get(Key.MULTI)
        if multi is not None:
            self._on_rows(slot, op, header, arrays, multi)
        else:
            req_id = header.get(Key.ID)
            req = self.sched.finish(req_id)
            if req is None and type(req_id) is int and req_id in self.sched.lanes:
                if self._quiet_base:  # a quiet call is out, and a worker answers over its own pipe
                    self._watch_quiet()
                if self._lane_infos(slot, op, header, arrays, req_id):
                    return  # answered as a DONE with an info: its call goes on as lane messages
                # A lane message answered with rows the slab does not hold alone (errors, each env's own info): its
                # call goes on as requests, and this reply answers its own.
                self._spill_lanes(req_id=req_id)
                req = self.sched.finish(req_id)
            if req is None:
                if req_id == _INFO_AREA_ID and op == Op.ERROR:
                    log.warning("worker %s did not map the infos' shared rows: %s", slot.name, header.get(Key.ERROR))
                return  # a late reply to a request that timed out or was failed: dropped
            try:
                if op == Op.RESULT and req.kind in THROTTLED:  # a step's or reset's rows: what every step takes
                    self._deliver_result(req, header, arrays)
                else:
                    self._deliver(req, op, header, arrays)
            except Exception as exc:
                log.exception("bad reply from worker %s", slot.name)
                err = ProtocolError(f"malformed reply from worker {slot.name}: {exc}")
                self._deliver_part(req, Part.failed(req.env_ids, lambda e: _with_env(err, e)), req.positions)
        if self.sched.held:
            self._pump()
        if slot.life.state is SlotState.DRAINING:
            self._recycle_if_idle(slot)

    def _lane_infos(self, slot: Slot, op: str, header: dict[str, Any], arrays: list[np.ndarray], req_id: int) -> bool:
        """A lane message answered with a RESULT whose rows are all in the slab, none failed, and a batched info (an
        env that returns one every step: MuJoCo's): taken as a DONE, its info kept for a lock-step call's ``Gather``
        to merge when it copies the batch (:meth:`Gather.keep_info`), or queued with the rows for ``recv()``, so that
        the call goes on as lane messages and its rows are copied once. Returns False where it is any other reply
        (the call is spilled), or a reply of a call of each env's own dict or of a same_step pool's: those are only
        looked at for an info area's keys (:meth:`_plan_info_area`), until one is planned."""
        call = self.sched.lanes[req_id]
        k = req_id - call.base
        sink = call.sink
        slab = self.slab
        if (
            op != Op.RESULT
            or call.workers[k] != slot.index
            or self.truncation is not None
            or slab is None
            or not header.get(Key.SHARED)
            or header.get(Key.ROWS_KIND, "step") != "step"
            or Key.ERRORS in header
        ):
            return False
        # Taken as a DONE: a lock-step call's of batched infos, or recv()'s; not in a same_step pool (an ended row's
        # final info and observation go as before). Else only looked at for an info area's keys.
        takes = (
            type(sink) is RecvQueue if call.each else type(sink) is Gather and sink.batches_infos
        ) and slab.final is None
        if not takes and not self._info_area_tries:
            return False  # (the call is spilled: this reply is a request's)
        try:
            if Key.BATCHED_INFO in header:
                binfo = binfo_of(header, arrays)
            else:  # a worker of one env of the call, or a call for each env's own dict, sends the dicts as they are
                infos = header.get(Key.INFO)
                if type(infos) is not list or len(infos) != call.counts[k] or not any(infos):
                    return False
                binfo = batch_infos(infos, len(infos))
        except (TypeError, ValueError):  # malformed: the call is spilled, and this reply fails as a request's would
            return False
        if type(binfo) is not dict:
            return False
        if self._info_area_tries:  # the envs' infos: the next calls' may lie in the shared rows
            self._plan_info_area(binfo)
        if not takes:
            return False
        if isinstance(sink, Gather):
            sink.keep_info(binfo, call.run(k))
            self._take_lane_replies([(slot.index, req_id)])
        else:  # its rows go to recv()'s queue with their info
            self._take_lane_replies([(slot.index, req_id)], binfo)
        return True

    def _on_quick(self, identity: bytes, data: memoryview) -> bool:
        """A local worker's message of a lane reply's size, before any parsing: a lane step's reply is taken
        here (True); anything else goes the way of every message (False)."""
        req_id = lane.read_framed_done(data)
        infos = False
        if req_id is None:
            req_id = lane.read_framed_done_infos(data)
            if req_id is None:
                return False
            infos = True
        slot = self._by_name.get(identity)
        if slot is None:
            log.warning("dropping a message from unknown peer %r", identity)
            return True
        self._on_lane_reply(slot, req_id, infos)
        return True

    def _on_lane_reply(self, slot: Slot, req_id: int | None, infos: bool = False) -> None:
        """A lane message from ``slot``'s worker: the DONE of ``req_id`` (None: a lane message that is no DONE;
        ``infos``: its rows' infos are in the info area)."""
        if req_id is None:
            self._on_malformed(slot, ProtocolError(f"worker {slot.name} sent a lane message that answers no step"))
            return
        if self._quiet_base:  # a quiet call is out, and a worker answers over its own pipe
            self._watch_quiet()
        self._take_lane_replies([(slot.index, req_id)], area=infos)

    def _take_lane_replies(
        self, replies: list[tuple[int, int]], binfo: dict[str, Any] | None = None, area: bool = False
    ) -> None:
        """DONEs ``(slot index, request id)``: lane calls ticked off, closed or their rows queued; a request's
        DONE closes it (:meth:`_on_done`); a DONE for another worker's message replaces the worker that sent it.
        ``binfo``: the batched info of the one reply, to ``recv()``'s queue, of a message of a ``send()``'s call
        (see :meth:`_lane_infos`); ``area``: the replies' infos are in the slab's info area
        (:mod:`aioenv.transport.slab_infos`)."""
        slots = self.slots
        if area:  # (a worker's same reply twice in one read: its rows' infos are kept once, the second is dropped)
            replies = list(dict.fromkeys(replies))
            if self.slab is None or self.slab.info is None:
                replies = self._no_area(replies)
        # (a lock-step call keeps which of its replies said so, for its Gather when the call closes: _close_lanes)
        closed, each, queue, rest = self.sched.lanes_done(replies, area)
        for index, req_id in rest:
            slot = slots[index]
            went = self.sched.sent_to(req_id)
            if went is None or went == index:  # a request's (a lane step of some envs, or of a call spilled since)
                self._on_done(slot, req_id, area)
            else:  # its rows are not this worker's to say are written
                why = f"message {req_id} went to worker {went}, not to worker {index}"
                self._on_malformed(
                    slot, ProtocolError(f"worker {slot.name} sent a lane reply for another worker: {why}")
                )
        if queue is not None:  # rows of send()'s calls: queued where they lie, in the shared rows (see deliver_shared)
            assert self.slab is not None, "lane calls are made over shared rows"
            queue.deliver_shared(self.slab, each, binfo, area)
        for call in closed:
            self._close_lanes(call)
        if self.sched.held:  # rows freed: held rows may go now
            self._pump()
        if self._draining:
            for index, _ in replies:
                self._recycle_if_idle(slots[index])

    def _take_row_records(self, records: list[tuple[int, int, int]]) -> None:
        """Row records ``(slot index, request id, row)`` of a thread worker's env threads (see
        :mod:`aioenv.wire.lane`). A row stays in the slab, its env claimed, for its sink to copy, as a lane reply's
        does: a ``recv()`` step's is queued where it lies, a ``step()``'s counted until the call's last row is in
        (:meth:`Gather.take_shared`). Any other (a ``step_env`` future's, a server's relay, truncate mode's) goes
        as its slot's RESULT naming it in the slab with no info and no error would (:meth:`_on_rows`). A record of
        a request no longer open is late (dropped, as a late reply is); one of a request sent to another worker
        replaces the worker that wrote it."""
        sched, slots, slab = self.sched, self.slots, self.slab
        assert slab is not None, "only a pool with shared rows reads row records"
        requests, finish_rows, release = sched.requests, sched.finish_rows, sched.release
        queue: RecvQueue | None = None
        queued: list[int] = []
        by_slot: dict[int, list[list[Any]]] = {}
        held = self.truncation is None
        for index, req_id, row in records:
            req = requests.get(req_id)
            if req is None:
                continue
            if req.worker != index:
                why = f"request {req_id} went to worker {req.worker}, not to worker {index}"
                self._on_malformed(slots[index], ProtocolError(f"worker {slots[index].name} recorded a row: {why}"))
                continue
            sink = req.sink
            if held and (type(sink) is RecvQueue or type(sink) is Gather):
                try:
                    finish_rows(req_id, [row], keep_claim=True)
                except ValueError as exc:  # out of range, answered already: that row is dropped
                    log.error("malformed row record from worker %s: %s", slots[index].name, exc)
                    continue
                env_id = int(req.env_ids[row])
                if isinstance(sink, RecvQueue):
                    queue = sink
                    queued.append(env_id)
                else:
                    assert isinstance(sink, Gather), "only a RecvQueue or a Gather is held"
                    assert req.positions is not None, "a step has positions"
                    sink.take_shared(slab, env_id, req.positions[row : row + 1], release)
                continue
            multi = by_slot.setdefault(index, [])
            if multi and multi[-1][0] == req_id:
                multi[-1][1].append(row)
            else:
                multi.append([req_id, [row]])
        if queue is not None:
            queue.deliver_shared(slab, queued)
        for index, multi in by_slot.items():
            self._on_rows(slots[index], Op.RESULT, {Key.ROWS_KIND: Op.STEP, Key.SHARED: 1}, [], multi)
        if self._draining:
            for index in {index for index, _, _ in records}:
                self._recycle_if_idle(slots[index])
        if sched.held:
            self._pump()

    def _close_lanes(self, call: LaneCall) -> None:
        """A lane call's last reply came: every row is in the shared rows, for its sink to copy and free."""
        slab, sink = self.slab, call.sink
        assert slab is not None, "lane calls are made over shared rows"
        assert isinstance(sink, Gather), "a call whose rows go to recv() takes them reply by reply"
        if call.in_area is not None:
            self._keep_lane_areas(call, range(len(call.workers)))
        sink.take_every_shared(slab, self.sched.release)

    def _keep_lane_areas(self, call: LaneCall, answered: Iterable[int]) -> None:
        """Tell a lock-step call's :class:`Gather` which of the messages ``answered`` had their rows' infos left in the
        info area (:attr:`LaneCall.in_area`), before it takes their rows: every row's, as one run of every env (one
        read of the area for the batch, :meth:`Gather.take_every_shared`), or message by message."""
        area, in_area, sink = self.slab.info if self.slab is not None else None, call.in_area, call.sink
        assert area is not None, "a reply said its infos are in the info area only where the pool has one"
        assert in_area is not None, "only a call with such replies"
        assert isinstance(sink, Gather), "a call whose rows go to recv() has them queued reply by reply"
        firsts, counts = call.firsts, call.counts
        if call.area_rows == call.env_ids.size and call.left == 0:  # (a call of every env: its runs are 0 .. n - 1)
            sink.keep_area(area, 0, call.area_rows)  # (a lane Gather's positions: its env ids)
            return
        for k in answered:
            if in_area[k]:
                sink.keep_area(area, firsts[k], counts[k])

    def _no_area(self, replies: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """DONEs ``(slot index, request id)`` that say their rows' infos are in the info area, where the pool has none
        for a worker to have written: each worker that sent one is replaced, and none of them counts (returns
        none)."""
        why = "its infos in the shared rows, where this pool has no info area"
        for index in dict.fromkeys(index for index, _ in replies):
            self._on_malformed(self.slots[index], ProtocolError(f"worker {self.slots[index].name} answered with {why}"))
        return []

    def _on_done(self, slot: Slot, req_id: int, area: bool = False) -> None:
        """A lane step's reply (:mod:`aioenv.wire.lane`) from the worker the request ``req_id`` went to (or an id no
        request has open): every row of it is in the slab (``area``: their infos in its info area)."""
        slab = self.slab
        req = self.sched.requests.get(req_id)
        if req is None or req.kind != "step" or slab is None:
            req = self.sched.finish(req_id)
            if req is not None:  # not a step over shared rows: nothing of it is in the slab
                self._fail_answered(req, f"worker {slot.name} answered a {req.kind} as a step over shared rows")
        else:
            # The rows stay in the slab, their envs claimed, until their sink copies them: a lock-step call's once its
            # last row is in, recv()'s queue when recv() takes them (as a lane call's, see _take_lane_replies).
            sink, first = req.sink, int(req.env_ids[0])
            held = isinstance(sink, (Gather, RecvQueue)) and self.truncation is None
            info = slab.info if area else None
            if area and (not held or info is None):  # no sink of this request reads the info area
                self.sched.finish(req_id)
                self._fail_answered(
                    req, f"worker {slot.name} answered a step with its infos in the shared rows unasked"
                )
                return
            self.sched.finish(req_id, keep_claim=held)
            if held and isinstance(sink, Gather):
                assert req.positions is not None, "a step has positions"
                if info is not None:
                    sink.keep_area(info, first, req.env_ids.size, req.positions)
                sink.take_shared(slab, first, req.positions, self.sched.release)
            elif held and isinstance(sink, RecvQueue):
                sink.deliver_shared(slab, list(range(first, first + req.env_ids.size)), area=area)
            else:
                self._deliver_result(req, _SHARED_DONE, [], slice(first, first + req.env_ids.size))

    def _fail_answered(self, req: Request, message: str) -> None:
        """Fail ``req`` (closed already), which its worker answered as it was not asked: a :class:`ProtocolError` with
        ``message``, logged, for each of its envs."""
        err = ProtocolError(message)
        log.error("%s", err)
        self._deliver_part(req, Part.failed(req.env_ids, lambda e: _with_env(err, e)), req.positions)

    # ------------------------------------------------------------ memory (see aioenv.core.memory)

    def _watch_memory(self) -> None:
        if self.max_worker_rss is None or self._launch is not launch_local:
            return  # only local workers' memory can be read here
        self._memory = MemoryWatch(
            self.max_worker_rss,
            lambda: [
                (s.index, s.proc.pid)
                for s in self.slots
                if s.proc is not None and isinstance(s.proc.pid, int) and not s.in_process
            ],
            self._over_memory,
        )

    def _over_memory(self, index: int, rss: int) -> None:
        slot = self.slots[index]
        if slot.life.state is SlotState.READY:  # DRAINING: marked already; STARTING: no HELLO, so no envs made yet
            mib = 1 << 20
            why = (
                f"was recycled: its memory (RSS {rss / mib:.0f} MiB) passed max_worker_rss "
                f"({(self.max_worker_rss or 0) / mib:.0f} MiB)"
            )
            slot.move(SlotState.DRAINING, why)
            self._draining = True
            log.warning("worker %s %s", slot.name, why)
        self._recycle_if_idle(slot)

    def _recycle_if_idle(self, slot: Slot) -> None:
        """Replace the slot's worker now if no request is in flight on it (else after its next reply)."""
        proc = slot.proc
        if self.closing or proc is None or slot.life.state is not SlotState.DRAINING:
            return
        if self.sched.has_work(slot.index):
            return
        how = slot.why
        proc.kill()  # it holds nothing of use now; aclose reaps it (see _retire)
        self._restart(slot, how, crash=False)
        self._draining = any(s.life.state is SlotState.DRAINING for s in self.slots)

    def _on_rows(self, slot: Slot, op: str, header: dict[str, Any], arrays: list[np.ndarray], multi: Any) -> None:
        """A thread/async worker's RESULT with finished rows of several requests (``"multi"``, see
        :mod:`workers.concurrent`): each request gets its slice (see :func:`aioenv.core.replies.route_block`), or,
        when they are in the slab and every one is a step's row for ``recv()``, its queue gets them as they lie
        (:meth:`_queue_shared_rows`)."""
        try:
            if op != Op.RESULT:
                raise ValueError(f"a {op!r} message cannot carry rows")
            shared = header.get(Key.SHARED)
            if shared and self._queue_shared_rows(slot, header, multi):
                return
            segments: list[Segment] = []
            start = 0
            for (req_id, _), at in zip(multi, int_lists([rows for _, rows in multi]), strict=True):
                segments.append((req_id, at, start))
                start += at.size
            block = self._shared_block(header, arrays, segments) if shared else Block.from_header(header, arrays)
        except (ValueError, TypeError, KeyError, ProtocolError) as exc:
            log.error("malformed reply from worker %s: %s", slot.name, exc)
            return

        def bad(exc: ValueError) -> None:
            log.error("malformed reply from worker %s: %s", slot.name, exc)

        remember = self.truncation.remember if self.truncation is not None else None
        route_block(self.sched, block, segments, self._deliver_rows, bad, remember)

    def _queue_shared_rows(self, slot: Slot, header: dict[str, Any], multi: Any) -> bool:
        """Rows of a thread/async worker's RESULT that are in the slab (``"sh"``; ``multi``: ``[[request id, [rows]],
        ...]``, see :mod:`workers.concurrent`), when each is a step's row for ``recv()``, with no info and no error:
        queued where they lie (:meth:`RecvQueue.deliver_shared`: their envs held until ``recv()`` copies them), and
        True. False for any other reply (the caller copies its rows out of the slab); ``TypeError``,
        ``ValueError`` for a malformed one. Lists, not arrays: most such replies carry a row or two."""
        slab = self.slab
        if slab is None:
            raise ProtocolError("it answered in shared rows this pool does not have")
        if (
            self.truncation is not None
            or header.get(Key.ROWS_KIND) != "step"
            or Key.INFO in header
            or Key.BATCHED_INFO in header
            or Key.ERRORS in header
            or type(multi) is not list
        ):
            return False
        requests = self.sched.requests
        sink: RecvQueue | None = None
        for item in multi:
            if type(item) is not list or len(item) != 2 or type(item[1]) is not list:
                raise TypeError(f"expected [request id, [rows]], got {item!r:.80}")
            req = requests.get(item[0]) if type(item[0]) is int else None
            if req is None or type(req.sink) is not RecvQueue:
                return False
            sink = req.sink
        env_ids, refused = self.sched.finish_listed(multi)
        for why in refused:  # that request's rows are dropped; the others go on
            log.error("malformed reply from worker %s: %s", slot.name, why)
        if sink is not None and env_ids:
            sink.deliver_shared(slab, env_ids)
        return True

    def _shared_block(self, header: dict[str, Any], arrays: list[np.ndarray], segments: list[Segment]) -> Block:
        """The block of a RESULT whose rows are in the slab (``"sh"``), its rows copied out of it: the rows of each
        segment's request's envs (a segment of no open request, or out of its range, gets row 0's: its rows are
        dropped). Its arrays are read-only, as a message's are (see :func:`aioenv.core.sinks.whole_result`)."""
        slab = self.slab
        assert slab is not None, "_queue_shared_rows refused a reply in shared rows this pool does not have"
        ids: list[np.ndarray] = []
        for req_id, at, _ in segments:
            req = self.sched.requests.get(req_id) if type(req_id) is int else None
            if req is not None and (at.size == 0 or (int(at.min()) >= 0 and int(at.max()) < req.env_ids.size)):
                ids.append(req.env_ids[at])
            else:
                ids.append(np.zeros(at.size, np.intp))
        env_ids = np.concatenate(ids) if ids else np.zeros(0, np.intp)
        kind = str(header.get(Key.ROWS_KIND, ""))
        obs, extras = slab.results(env_ids, kind != "reset")
        for leaf in (*obs, *(extras or ())):  # read-only, as a message's arrays: the rows may be out of their
            leaf.flags.writeable = False  # requests' order, so no sink may take them as a batch as they are
        return Block(obs, extras or [], header.get(Key.INFO), binfo_of(header, arrays), header.get(Key.ERRORS), kind)

    def _deliver_rows(self, sink: Sink, req: Request | None, part: Part, positions: np.ndarray | None) -> None:
        """Deliver a segment's rows (see :data:`aioenv.core.replies.Deliver`), remembering them in truncate mode."""
        if self.truncation is not None:
            self.truncation.remember(part)
        if req is not None:
            self._deliver_part(req, part, positions)
        else:  # a merged run of rows bound for a RecvQueue (which keeps rows in arrival order, not positions)
            assert isinstance(sink, RecvQueue)
            sink.deliver(part)

    def _deliver(self, req: Request, op: str, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        """A whole-request reply (inline workers, MAKE, CALL, CANCEL, ERROR) for ``req``."""
        kind, env_ids = req.kind, req.env_ids
        if op == Op.ERROR:
            desc = header.get(Key.ERROR)
            part = Part.failed(env_ids, lambda e: from_wire({**(desc or {}), "env_id": e}, context=kind))
            self._deliver_part(req, part, req.positions)
            return
        described = header.get(Key.ERRORS)
        errors = _row_errors(described, kind) if described else {}
        if kind in SETUP:
            self._made(req, header, errors)
        elif kind == "cancel":
            for err in errors.values():
                log.error("replacing env %s after its deadline failed: %s", err.env_id, err)
        elif kind == "call":
            self._deliver_part(req, Part(env_ids, errors=errors, values=header[Key.VALUES]), req.positions)
        else:
            self._deliver_result(req, header, arrays)

    def _deliver_result(
        self, req: Request, header: dict[str, Any], arrays: list[np.ndarray], run: slice | None = None
    ) -> None:
        """The rows of a step or reset answered as a whole (an inline worker's RESULT); ``run``: the request's envs
        are this run of ids (a lane step's: its rows are copied from the slab by slicing)."""
        kind, env_ids = req.kind, req.env_ids
        described = header.get(Key.ERRORS)
        errors = _row_errors(described, kind) if described else {}
        if header.get(Key.SHARED):  # the rows are in the slab
            assert self.slab is not None, "a worker answered in shared rows this pool does not have"
            obs, extras = self.slab.results(env_ids if run is None else run, kind == "step")
        else:
            extras = [arrays[i] for i in header.get(Key.EXTRAS, [])] or None
            obs = leaves_from_wire(header[Key.OBS], arrays)
        binfo = binfo_of(header, arrays)
        sink = req.sink
        if isinstance(sink, Relayed):  # a server's relay: the rows cross to the client as they came
            block = Block(obs, extras or [], header.get(Key.INFO), binfo, header.get(Key.ERRORS), kind)
            if self.truncation is not None:
                self.truncation.remember(block.part(env_ids, 0, env_ids.size))
            at = req.positions if req.positions is not None else np.arange(env_ids.size)
            sink.outlet.forward(block, [(sink, at, 0, env_ids)])
            return
        part = Part(env_ids, obs, extras, header.get(Key.INFO), errors, binfo=binfo)
        if self.truncation is not None:
            self.truncation.remember(part)
        assert req.positions is not None, "a step or reset has positions"
        cast("Sink", req.sink).deliver(part, req.positions)  # a step's or reset's sink (Request.rows_sink)

    def _deliver_part(self, req: Request, part: Part, positions: np.ndarray | None = None) -> None:
        if req.kind in SETUP:  # the whole MAKE failed (e.g. its env source cannot be imported)
            self._made(req, {}, part.errors)
            return
        if req.kind == "cancel":
            return
        at = req.positions if positions is None else positions
        assert at is not None, "a request with rows has positions"
        req.rows_sink().deliver(part, at)

    def _made(self, req: Request, header: dict[str, Any], errors: dict[int, AioEnvError]) -> None:
        if errors:
            first = errors[min(errors)]
            first.errors = {int(req.env_ids[row]): err for row, err in errors.items()}  # see start_failure
            self._fail_make(req, first, more=len(errors) - 1)
        else:
            fut = _setup_future(req)
            if fut is not None and not fut.done():
                fut.set_result(dict(header.get(Key.SPACES) or {}))

    @staticmethod
    def _fail_make(req: Request, err: BaseException, more: int = 0) -> None:
        """A MAKE failed: raise it to ``start()``, or log it for a re-make (nobody awaits that one).

        The envs of a failed re-make stay broken: requests for them get the worker's clear error.
        """
        fut = _setup_future(req)
        if fut is None:
            also = f" (and {more} more envs)" if more else ""
            log.error("re-making envs %s failed%s: %s", req.env_ids.tolist(), also, err)
        elif not fut.done():
            fut.set_exception(err)

    # ------------------------------------------------------------ shutdown

    async def aclose(self, grace: float = 5.0) -> None:
        """Fail what is in flight with PoolClosed, stop every worker for sure, remove the private dir.

        Workers that said HELLO get CLOSE (they close their envs) and ``grace`` seconds; the others
        get SIGTERM at once. Then SIGTERM, then SIGKILL, ``grace`` seconds apart. Idempotent.
        """
        if self.closing:
            return
        self.life.move(Phase.CLOSING)
        self._timer.cancel()
        if self._memory is not None:
            self._memory.close()
        self._spill_lanes()
        for req in self.sched.drain():
            if req.kind == "cancel":
                continue
            if req.kind in SETUP:
                self._fail_make(req, PoolClosed(f"the pool was closed while its workers were set up ({req.kind})"))
            else:
                err = PoolClosed(f"the pool was closed while env {int(req.env_ids[0])}'s {req.kind} was in flight")
                req.rows_sink().fail(err)
        for held in self.sched.drop_held():
            held.item.sink.fail(PoolClosed(f"the pool was closed while env {int(held.env_ids[0])} waited to run"))
        if self._adopt is not None:  # closed before it started: the worker it was given never served
            self._retired.append(self._adopt)
            self._adopt.kill()
            self._adopt = None
        procs = [*self._retired, *(slot.proc for slot in self.slots if slot.proc is not None)]
        stops = [p.stop(grace, ask_first=False) for p in self._retired]
        for slot in self.slots:
            if slot.proc is not None:
                asked = slot.ready and slot.proc.port.send(slot.name.encode(), encode(Op.CLOSE, {Key.ID: 0}))
                stops.append(slot.proc.stop(grace, ask_first=bool(asked)))
            slot.move(SlotState.CLOSED)
        try:
            await asyncio.gather(*stops)
        except asyncio.CancelledError:  # e.g. a server shutting down cancels its sessions' closes
            for proc in procs:
                proc.kill()  # no time left for the gentle stages, but no worker outlives its pool
            raise
        finally:
            self._release_files()
            self._exits.close()
            self._workers_changed()
            self.life.move(Phase.CLOSED)

    def _release_files(self) -> None:
        """Remove the private directory and unmap the shared rows: on every way out of :meth:`aclose`."""
        shutil.rmtree(self.private_dir, ignore_errors=True)
        self._close_done_pipe()
        if self.slab is not None:
            self.slab.close()
        if self._slab_fd is not None:
            os.close(self._slab_fd)
            self._slab_fd = None


#: What a lane step's DONE says, as a RESULT's header would: the rows are in the slab, with no infos and no errors.
_SHARED_DONE: dict[str, Any] = {Key.SHARED: 1}


def spin_budget(spins: bool, waits: float) -> float:
    """How long :meth:`Coordinator.wait_here`, or an awaited call (:meth:`Coordinator.poll_budget`), polls for a reply
    before it sleeps (s): up to twice the recent waits
    (``waits``: their running mean, over the last eight or so; below 0: none yet), at most :data:`SPIN_AT_MOST`,
    and only where the pool's worker processes and the waiting thread fit on the CPUs this process may use
    (``spins``). Sleeping in the kernel, the thread is woken ~50-150 µs after the reply on a VM whose idle CPU halts;
    polling, it takes the reply as it comes, on a CPU no worker needs. Before any wait is known it polls for the
    bound; once the waits take longer than that, they sleep."""
    if not spins:
        return 0.0
    if waits < 0:
        return SPIN_AT_MOST
    return 0.0 if waits > SPIN_AT_MOST else min(2 * waits, SPIN_AT_MOST)


class _Blocking(NamedTuple):
    """What :meth:`Coordinator.wait_here` blocks on (``poller``), and whose pipe each of its descriptors is
    (``drains``: descriptor -> the worker process, whose ``drain`` reads it)."""

    poller: select.epoll
    drains: dict[int, LocalProcess]
    #: Whether the local worker processes and the waiting thread fit on the CPUs this process may use, so that it
    #: may poll for a while rather than sleep (:func:`spin_budget`).
    spins: bool


class _LanePlan(NamedTuple):
    """How a step goes out as lane messages: message ``k`` to ``workers[k]`` (its process ``by_message[k]``), for
    envs ``firsts[k] .. firsts[k] + counts[k] - 1``; ``procs``: a lock-step plan's every slot's process when it was
    made (it holds while they are the same and ready)."""

    workers: list[int]
    firsts: list[int]
    counts: list[int]
    by_message: list[LocalProcess]
    procs: list[LocalProcess]
    #: The pipes of the messages' processes (``by_message[k].pipe``), for one :func:`send_framed_each`.
    ports: list[PipePort]
    #: Whether the step may go as a quiet call (aioenv.wire.lane.QUIET): two or more workers, each with the pipes.
    quiet: bool = False


#: What one read of a record pipe brought (:meth:`Coordinator._read_records`): DONE records, DONE records whose infos
#: are in the info area, row records, and what is left of a record.
_Records = tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int, int]], bytes]


class _Quiet(NamedTuple):
    """A pool's pipes for quiet calls (:data:`aioenv.wire.lane.QUIET`): the quiet pipe's read and write ends, the
    countdown pipe's; ``most``: the most workers a quiet call may have (their records fit half the quiet pipe, and
    its countdown is one write)."""

    read: int
    write: int
    count_read: int
    count_write: int
    most: int


def _open_quiet() -> _Quiet:
    """New pipes for quiet calls. Every end but the quiet pipe's write end is non-blocking (the countdown's read end
    for the workers too, which share its open file): a worker's record waits for room rather than being lost."""
    read, write = os.pipe2(os.O_CLOEXEC)
    count_read, count_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    os.set_blocking(read, False)
    room = fcntl.fcntl(write, fcntl.F_GETPIPE_SZ)  # (as little as a page, for a user past the kernel's soft limit)
    # (a countdown of up to PIPE_BUF bytes goes in whole or not at all)
    return _Quiet(read, write, count_read, count_write, min(room // (2 * lane.RECORD.size), select.PIPE_BUF + 1))


def _empty(fd: int) -> None:
    """Read the non-blocking pipe ``fd`` until it holds nothing."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, _DONE_READ):
            pass


def _is_run(ids: np.ndarray, split_of_all: bool) -> bool:
    """Whether ``ids`` (one worker's envs of a call, unique) are one ascending run of env ids. A worker's part of
    a call of every env is: workers host contiguous blocks (:meth:`aioenv.core.scheduler.Scheduler.place`)."""
    n = ids.size
    if n == 0 or int(ids[-1]) - int(ids[0]) + 1 != n:
        return False
    return split_of_all or n <= 2 or bool((ids[1:] > ids[:-1]).all())


def _row_errors(described: dict[Any, Any], kind: str) -> dict[int, AioEnvError]:
    """A reply's errors by row (``"errs"``: row -> error map), as exceptions."""
    return {int(row): from_wire(d, context=kind) for row, d in described.items()}


def _local_step(fields: dict[str, Any], arrays: list[np.ndarray], trusted: bool) -> list[Any]:
    """The frames of a step for the worker in this process: over shared rows or with numeric actions, its ids,
    flags and arrays passed as they are (``protocol.Local``), its actions copied (the caller may change its own
    once ``send`` returned); else encoded as for any worker."""
    if not arrays and Key.SHARED in fields:
        return local(Op.STEP, fields)
    if all(type(leaf) is int for leaf in fields.get(Key.ACT, [None])):  # every leaf an array
        return local(Op.STEP, fields, [np.array(a) for a in arrays])
    return encode(Op.STEP, fields, arrays, trusted=trusted)


#: The id of the SLAB that adds the info area (:meth:`Coordinator._plan_info_area`): no request waits for its reply, so
#: that no call waits for it (a ``SyncPool``'s calls in the caller's thread hand the loop back while replies are due).
#: A worker that cannot map the area answers with an ERROR, logged, and its infos go in RESULTs, losing nothing.
_INFO_AREA_ID = -1
#: How many lane replies with infos a pool looks at for an info area's keys before it gives up.
_INFO_AREA_TRIES = 8


def _setup_future(req: Request) -> SetupFuture | None:
    """The future a set-up request (MAKE, SLAB) answers (None: a re-make nobody awaits)."""
    fut = req.sink
    assert fut is None or isinstance(fut, asyncio.Future), f"a {req.kind} request answers a future"
    return fut


def _with_env(err: AioEnvError, env_id: int) -> AioEnvError:
    return type(err)(err.message, env_id=env_id)

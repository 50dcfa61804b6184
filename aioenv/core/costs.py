"""``executor="auto"``: where a pool's envs run, decided from what one env's steps cost.

A message to a worker process and back costs ~100-150 µs on a quiet small VM when the worker is kept busy
(two wake-ups of another process, see docs/performance.md), twice that when it waited for the message, as in
a lock-step pool, and several times that on a busy machine. An env whose whole batch steps
faster than that runs fastest in the caller's own process, with no message at all; an env that computes
for longer gains from more cores; an env that mostly waits (I/O) wants threads; an ``aioenv.AsyncEnv``
wants an ``async`` worker.

:func:`probe` starts an ``inline`` worker process for the purpose, which makes one extra env, resets it and
times its steps with sampled actions (about 25 ms of steps, :mod:`workers.probe`), then closes it:
an env that hangs or crashes costs that process (killed after :data:`PROBE_LIMIT`), not the caller.
The same process then answers PINGs, back to back and then each :data:`PING_GAP` after the last: their
median round trips plus :data:`MESSAGE_WORK` are what a batch's message costs on this machine now, to a
worker kept busy (first-finished ``recv()``) and to one that waited (lock-step), in place of the
:data:`BUSY_ROUND_TRIP` and :data:`ROUND_TRIP` estimates; bursts of PINGs sent at once price a message whose
wake-up others share (each further worker of a lock-step batch, and every reply of a busy worker:
:func:`busy_message_cpu`). It was started
with the pool's shared rows, so a pool whose envs go to ``inline`` workers keeps it as its first worker
(:class:`Probed`): ``auto`` then costs no process start of its own.
:func:`choose` turns the timings into a :class:`Choice`, pure arithmetic (unit-tested without envs). By default
no env runs in the caller's process, however cheap: a worker process is what keeps an env that later hangs,
slows down (the probe sees its first ~25 ms only), crashes or leaks from holding the caller's event loop or
ending its program. So, unless the pool allows it (``allow_in_process=True``):

- a coroutine ``step``: ``async`` workers;
- a step that takes over 1 ms of wall time while using under half of it on the CPU: ``thread`` workers;
- a step over :data:`SHARE_LIMIT` on several CPUs: ``inline`` worker processes, one per usable CPU;
- otherwise ``inline`` workers, as many as predict the fewest seconds per batch (:func:`_fewest_workers`: one
  for a few cheap envs, whose whole batch costs less than a second message). A lock-step batch
  (:func:`_lockstep_seconds`) pays each further worker a message among several (the probe's burst of PINGs),
  and half a wake-up more where the workers take every CPU. A first-finished ``recv()`` (:func:`_workers_only`)
  keeps its workers busy: a worker on every usable CPU leaves this process none, so its own work per batch counts
  against theirs. Either way a pool's calls poll for their replies where a CPU is left to the waiting thread
  (``Coordinator.wait_here``, ``Runner.poll_budget``), which saves this process's wake-up (:func:`_polled`).

With ``allow_in_process=True`` the cheap cases are weighed against this process too:

- ``num_envs x step`` under the round trip, or a single usable CPU: every env in this process;
- a step over :data:`SHARE_LIMIT`: ``inline`` worker processes, one per usable CPU;
- otherwise (cheap steps, a batch dearer than a round trip) the predicted seconds of one batch decide between
  every env here, worker processes only, and a share of the envs stepped here while worker processes step the
  rest at the same time (:func:`_share` for a lock-step pool, :func:`_recv_share` for first-finished
  ``recv()``, whose envs here step only when ``recv()`` would wait). Each message costs
  this process CPU of its own (:attr:`Cost.message_cpu`, measured with the PINGs: on a VM it can be half the
  round trip), which the share pays around its own steps (sending before, reading the replies after), and
  processes stepping at the same time each run at :data:`PARALLEL` of their speed alone. A placement with
  workers must predict at most :data:`WORKER_GAIN` of the all-here time (a share :data:`SHARE_GAIN`): a second
  process is worth it only when it clearly pays.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from aioenv.core.launcher import LaunchSpec, LocalProcess, WorkerProc, launch_local
from aioenv.core.sources import EnvSources
from aioenv.errors import WorkerCrashed
from aioenv.transport.slab import Slab
from aioenv.wire.errors import from_wire
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = [
    "BUSY_MESSAGE_CPU",
    "BUSY_ROUND_TRIP",
    "CONTENDED",
    "MESSAGE_CPU",
    "MESSAGE_WORK",
    "PARALLEL",
    "PING_GAP",
    "PROBE_LIMIT",
    "QUEUED_MESSAGE_CPU",
    "RECV_SHARE_MIN",
    "ROUND_TRIP",
    "ROW_WORK",
    "SHARE_GAIN",
    "SHARE_LIMIT",
    "WORKER_GAIN",
    "Choice",
    "Cost",
    "Probed",
    "busy_message_cpu",
    "choose",
    "probe",
    "timings",
]

#: Seconds of a lock-step batch's round trip to a worker process and back (messages, wake-ups, the pool's own
#: work per message) as measured on a quiet 2-vCPU VM, the worker having waited for it; a batch cheaper than
#: this runs faster in-process. The probe measures it for the machine at hand (:attr:`Cost.round_trip`);
#: this is the estimate without.
ROUND_TRIP = 270e-6
#: Seconds of this process's own CPU per such message (sending, waking, reading, routing), as on a quiet
#: 2-vCPU VM; the probe measures it (:attr:`Cost.message_cpu`). This is the estimate without.
MESSAGE_CPU = 160e-6
#: The same two for a worker kept busy, as ``recv()`` of the first rows to finish keeps it (a reply's rows
#: are taken while the worker steps others, and the next request finds it awake):
#: :attr:`Cost.busy_round_trip` and :attr:`Cost.busy_message_cpu`, measured with PINGs back to back (the CPU
#: priced at most as a queued message's, :func:`busy_message_cpu`).
BUSY_ROUND_TRIP = 150e-6
BUSY_MESSAGE_CPU = 80e-6
#: This process's CPU seconds per message when several go out at once and their answers come back together,
#: one wake-up shared by all of them: what each further worker of a lock-step batch adds, sending its message
#: and reading its reply in turn (:attr:`Cost.queued_message_cpu`, measured with a burst of :data:`PINGS`
#: PINGs). 14-30 µs on a 2-vCPU VM; a 16-core machine measured ~41 µs per worker message of a lock-step pool.
#: This is the estimate without.
QUEUED_MESSAGE_CPU = 30e-6
#: The fraction of a waiting worker's message's extra CPU (over a queued one's) that a lock-step batch pays when
#: its workers take every usable CPU (see :func:`_lockstep_seconds`).
CONTENDED = 0.5
#: A worker's own seconds per env row of a lock-step batch beyond the env's step (writing the row to the shared
#: rows, the autoreset's bookkeeping), which the probe does not time: on a 2-vCPU VM one worker stepped
#: CartPole batches at ~7.3 µs an env where the probe timed ~6 µs steps.
ROW_WORK = 1.5e-6
#: The pool's own seconds per message beyond a bare PING's round trip (encoding the batch, routing the
#: reply, gathering the rows), added to the probe's measured PINGs.
MESSAGE_WORK = 50e-6
#: PINGs the probe's process answers, for each median round trip (and in each burst, see :func:`_burst`).
PINGS = 7
#: Bursts of PINGs sent at once (:data:`QUEUED_MESSAGE_CPU`), the cheapest of which counts.
BURSTS = 3
#: Seconds the probe waits before each PING of a waiting worker, as a worker waits in a lock-step pool while
#: this process steps its share, gathers the rows and its caller computes the next actions: a message to a
#: process that just slept costs more than one in a ping-pong (on a 2-vCPU VM ~120 µs back to back, ~220 µs
#: after 1 ms, ~470 µs after 5 ms; this process's CPU per message ~80, ~110, ~280 µs).
PING_GAP = 1e-3
#: The pool's own seconds per call in this process, which a share stepped here adds to that share (a step() of
#: one env that does nothing takes 17-19 µs on a quiet 2-vCPU VM, ~2 µs of it the env's).
CALL_COST = 15e-6
#: Steps dearer than this run in worker processes only (an expensive env gains little from sharing the
#: caller's core, and keeps the safety of a process of its own).
SHARE_LIMIT = 50e-6
#: Each of several processes stepping envs at the same time runs at this fraction of its speed alone (caches
#: and memory shared, a VM's vCPUs on busy hosts): on a 2-vCPU VM two CartPole loops in two processes
#: stepped 1.62-1.69x one loop (``benchmarks/bench_core.py``'s ``cores``), a share of 64 CartPole envs with a
#: worker ran 20% slower than all 64 in one process, 256 ran 27% faster.
PARALLEL = 0.83
#: A placement with worker processes must predict at most this fraction of the seconds all envs take in this
#: process (the model ignores the other process's wake-ups under load, which a VM makes dear and erratic).
WORKER_GAIN = 0.8
#: The same for a lock-step share (:func:`_share`), whose gain the model underestimates: on a 2-vCPU VM,
#: alternated with every env here in one process in 0.2 s slices, CartPole shares of 48, 64 and 128 envs with
#: one worker stepped 1.03x, 1.16x and 1.38x as fast, where the model predicted 0.95x, 0.86x and 0.73x of the
#: all-here time. At :data:`WORKER_GAIN` a pool of 64-100 envs stayed here, and a probe on a busy minute could
#: keep 128 here too.
SHARE_GAIN = 0.9
#: The fewest envs a pool with first-finished ``recv()`` shares with this process (:func:`_recv_share`): on a
#: 2-vCPU VM, CartPole envs alternated in 0.2 s slices against every env here (150 paired rounds each), a share
#: of a quarter of 32 envs (``batch_size=16``) stepped 1.00x as fast, of 48 (24) 0.99x, of 64 (32) 1.08x and
#: 1.16x; the model predicts a gain for all of them.
RECV_SHARE_MIN = 64
#: Seconds the process timing an env gets (making the env, a reset, its steps): past them it is killed
#: and the envs go to ``inline`` worker processes.
PROBE_LIMIT = 5.0


@dataclass(frozen=True)
class Cost:
    """What one env's steps cost: wall and CPU seconds per step (``asynchronous``: a coroutine env); the
    seconds of a batch's round trip to a worker process on this machine and this process's own CPU seconds
    per such message, for a worker that waited for it (``round_trip``, ``message_cpu``: lock-step pools) and
    for one kept busy (``busy_round_trip``, ``busy_message_cpu``: first-finished ``recv()``); and this
    process's CPU seconds per message of several sent at once, whose wake-up they share
    (``queued_message_cpu``: what each further worker of a lock-step batch costs)."""

    step: float = 0.0
    cpu: float = 0.0
    asynchronous: bool = False
    round_trip: float = ROUND_TRIP
    message_cpu: float = MESSAGE_CPU
    busy_round_trip: float = BUSY_ROUND_TRIP
    busy_message_cpu: float = BUSY_MESSAGE_CPU
    queued_message_cpu: float = QUEUED_MESSAGE_CPU


@dataclass(frozen=True)
class Choice:
    """Where a pool's envs run: ``executor`` of its worker processes (``"in_process"``: there are none),
    ``num_workers`` of them, and the first ``in_process`` envs in the caller's process; ``why`` in words."""

    executor: str
    num_workers: int
    in_process: int
    why: str


@dataclass
class Probed:
    """What :func:`probe` found, and the worker process that found it, still running with no envs, with the
    descriptor of the shared rows it inherited (None: none, see :mod:`aioenv.transport.slab`).

    A pool whose envs go to ``inline`` worker processes takes that process as its first worker
    (:meth:`take`), which saves starting one; otherwise it is closed (:meth:`release`)."""

    cost: Cost
    proc: LocalProcess | None
    slab_fd: int | None

    def take(self) -> tuple[LocalProcess, int | None] | None:
        """The process, if it still runs, and the rows' descriptor, for a pool to adopt (both are the pool's
        then); None (and both closed) when it has ended. This object holds neither after."""
        proc, fd, self.proc, self.slab_fd = self.proc, self.slab_fd, None, None
        if proc is not None and proc.returncode is None and not proc.exited.is_set():
            return proc, fd
        _close_fd(fd)
        return None

    async def release(self) -> None:
        """Close the process (a CLOSE, then signals: see ``LocalProcess.stop``) and the descriptor; idempotent."""
        proc, fd, self.proc, self.slab_fd = self.proc, self.slab_fd, None, None
        _close_fd(fd)
        if proc is not None:
            await _close(proc, asked=True)


async def _close(proc: LocalProcess, *, asked: bool) -> None:
    """Stop the probe's process: ``asked``, a CLOSE goes first (it answered, so it reads its pipe)."""
    asked = asked and proc.port.send(proc.name.encode(), encode(Op.CLOSE, {Key.ID: 0}))
    await proc.stop(1.0, ask_first=asked)


def _close_fd(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


async def probe(sources: EnvSources, env_id: int, seed: int | None, private_dir: str) -> Probed:
    """Time env ``env_id``'s steps in an ``inline`` worker process started for this (see :mod:`workers.probe`),
    which goes on running with no envs (see :class:`Probed`); raises :class:`TimeoutError` past
    :data:`PROBE_LIMIT` (the process is killed), :class:`~aioenv.errors.WorkerCrashed` if it dies, or what the
    env raised (the process is stopped). The cost's ``round_trip`` is measured with PINGs to the same process,
    which inherits a descriptor for the pool's shared rows, so that it can go on as the pool's worker."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[dict[str, Any]] = loop.create_future()
    pong: deque[asyncio.Future[None]] = deque()  # one per PING out, answered in order
    _pairs, found = sources.for_envs([env_id])
    request = encode(Op.PROBE, {Key.ID: 1, Key.SOURCES: next(iter(found.values())), Key.SEED: seed}, trusted=True)

    def on_message(identity: bytes, frames: list[Any]) -> None:
        header, _ = decode(frames, trusted=True)
        if header[Key.OP] == Op.HELLO:
            proc.port.send(identity, request)
        elif header[Key.OP] == Op.PONG:
            if pong and not (oldest := pong.popleft()).done():  # (done: its wait was cancelled)
                oldest.set_result(None)
        elif not answer.done():
            answer.set_result(header)

    def on_exit(ended: WorkerProc) -> None:
        crashed = WorkerCrashed(f"the process timing the env {ended.describe()}", worker=ended.name)
        if not answer.done():
            answer.set_exception(crashed)
        while pong:  # it died with PINGs out
            if not (waiting := pong.popleft()).done():  # (done: its wait was cancelled, as by the time limit)
                waiting.set_exception(crashed)

    slab_fd = Slab.try_new_fd()  # as a coordinator makes it for local inline workers
    try:
        proc = launch_local(LaunchSpec("probe", "inline", 1, private_dir, on_exit, on_message, slab_fd))
    except BaseException:
        _close_fd(slab_fd)
        raise
    try:
        async with asyncio.timeout(PROBE_LIMIT):
            header = await answer
            if header[Key.OP] == Op.ERROR:
                raise from_wire(header[Key.ERROR])
            asynchronous, step, cpu = timings(header.get(Key.VALUES))
            busy = await _ping(proc, pong, 0.0)
            waiting = await _ping(proc, pong, PING_GAP)
            queued = await _burst(proc, pong)
    except BaseException:
        _close_fd(slab_fd)
        await _close(proc, asked=answer.done())
        raise
    (round_trip, message_cpu), (busy_round_trip, busy_message_cpu) = waiting, busy
    cost = Cost(step, cpu, asynchronous, round_trip, message_cpu, busy_round_trip, busy_message_cpu, queued)
    return Probed(cost, proc, slab_fd)


def timings(values: object) -> tuple[bool, float, float]:
    """``(asynchronous, step, cpu)`` of what the process timing an env answered: ``{"async": True}`` for a
    coroutine env, else ``{"step": s, "cpu": s}``, the wall and CPU seconds per step (:mod:`workers.probe`).

    That process runs the env's code, which can reach its clocks and its pipe, so nothing in the answer is taken
    on trust. Raises:
        ValueError: ``values`` is no such answer, or a time in it is no finite number of seconds >= 0; naming
            what arrived."""
    if not isinstance(values, dict):
        raise ValueError(
            f"the process timing the env answered {type(values).__name__} {values!r:.80}, "
            "expected {'step': seconds, 'cpu': seconds} or {'async': True}"
        )
    if values.get("async") is True:
        return True, 0.0, 0.0
    return False, _seconds(values, "step"), _seconds(values, "cpu")


def _seconds(values: dict[Any, Any], name: str) -> float:
    value = values.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"the process timing the env reported {name}={value!r:.80}, expected a finite number of seconds >= 0"
        )
    return float(value)


async def _ping(proc: WorkerProc, pong: deque[asyncio.Future[None]], gap: float) -> tuple[float, float]:
    """The median of :data:`PINGS` round trips to the probe's process, each sent ``gap`` seconds after the
    last answer (0: back to back), and this process's CPU seconds per PING; each plus :data:`MESSAGE_WORK`
    (the pool's own work per message, on this process's CPU)."""
    loop = asyncio.get_running_loop()
    times = []
    cpu = 0.0
    for _ in range(PINGS):
        if gap:
            await asyncio.sleep(gap)
        answered = loop.create_future()
        pong.append(answered)
        start, cpu_start = time.perf_counter(), time.process_time()
        proc.port.send(b"probe", encode(Op.PING, {Key.ID: 0}))
        await answered
        times.append(time.perf_counter() - start)
        cpu += time.process_time() - cpu_start
    cpu /= PINGS
    return statistics.median(times) + MESSAGE_WORK, cpu + MESSAGE_WORK


async def _burst(proc: WorkerProc, pong: deque[asyncio.Future[None]]) -> float:
    """This process's CPU seconds per PING of :data:`PINGS` sent at once to the probe's process, their answers
    awaited together: the sending, reading and routing of a message, its wake-ups shared (see
    :data:`QUEUED_MESSAGE_CPU`); the least of :data:`BURSTS` bursts, as a preemption only adds."""
    loop = asyncio.get_running_loop()
    least = float("inf")
    for _ in range(BURSTS):
        answered = [loop.create_future() for _ in range(PINGS)]
        pong.extend(answered)
        cpu_start = time.process_time()
        for _ in answered:
            proc.port.send(b"probe", encode(Op.PING, {Key.ID: 0}))
        await asyncio.gather(*answered)
        least = min(least, (time.process_time() - cpu_start) / PINGS)
    return least


def choose(
    cost: Cost,
    num_envs: int,
    cpus: int,
    batch_size: int | None = None,
    *,
    allow_in_process: bool = False,
    polls: float = 0.0,
) -> Choice:
    """Where ``num_envs`` envs of this ``cost`` run best with ``cpus`` usable CPUs, for a pool whose ``recv``
    returns ``batch_size`` rows (None: all of them); see the module docstring. Envs run in the caller's process
    (all of them, or a share) only with ``allow_in_process``; else in worker processes
    (:func:`_fewest_workers` for cheap envs). ``polls``: the longest the pool's calls poll for their replies before
    they sleep, where a CPU is left to the waiting thread (``Coordinator.wait_here`` for a :class:`aioenv.SyncPool`'s,
    ``Runner.poll_budget`` for an awaited one's); 0: they sleep."""
    workers = max(1, min(num_envs, cpus))
    if cost.asynchronous:
        return Choice("async", workers, 0, "the env's step is a coroutine")
    if cost.step > 1e-3 and cost.cpu < cost.step / 2:
        return Choice("thread", workers, 0, f"a step takes {_us(cost.step)}, mostly waiting")
    first_finished = batch_size is not None and batch_size < num_envs
    if first_finished:  # recv() of the first rows to finish keeps the workers busy
        cost = replace(cost, round_trip=cost.busy_round_trip, message_cpu=busy_message_cpu(cost))
    batch, trip = num_envs * cost.step, cost.round_trip
    if not allow_in_process:
        if cost.step > SHARE_LIMIT and cpus >= 2:
            return Choice("inline", workers, 0, f"a step takes {_us(cost.step)}")
        return _fewest_workers(cost, num_envs, workers, batch_size if first_finished else None, cpus, polls)
    if cpus < 2 or batch <= trip:
        why = (
            "one usable CPU"
            if cpus < 2
            else f"{num_envs} steps take {_us(batch)}, less than a round trip ({_us(trip)})"
        )
        return Choice("in_process", 0, num_envs, why)
    if cost.step > SHARE_LIMIT:
        return Choice("inline", workers, 0, f"a step takes {_us(cost.step)}")
    return _cheapest(cost, num_envs, workers, batch_size if first_finished else None)


def busy_message_cpu(cost: Cost) -> float:
    """This process's CPU seconds per message to a worker kept busy, as a first-finished ``recv()`` keeps it:
    the lesser of the busy PINGs' (:attr:`Cost.busy_message_cpu`) and a queued message's plus the pool's own work
    (:attr:`Cost.queued_message_cpu` + :data:`MESSAGE_WORK`).

    A busy worker's replies come while this process is awake with the others' rows, so they share its wake-ups
    as a burst's do. PINGs back and forth to one idle process each pay a wake-up of their own, and what that
    costs moves from one probe to the next: on a 2-vCPU VM (2026-11-30, twelve probes of CartPole) the busy
    PINGs cost this process 80-157 µs each (MESSAGE_WORK included), in steps of ~25 µs from one probe to the
    next, where the bursts cost 12-22 µs a PING. Priced at the busy PINGs, one probe in twelve put 128 envs with
    ``batch_size=64`` on one worker (0.86x of two); the worker count flips there at ~134 µs a message, and for 32
    envs with ``batch_size=16`` (one worker the faster) at ~30 µs."""
    return min(cost.busy_message_cpu, cost.queued_message_cpu + MESSAGE_WORK)


def _cheapest(cost: Cost, num_envs: int, workers: int, batch_size: int | None) -> Choice:
    """Cheap steps, a batch dearer than a round trip, ``workers`` usable CPUs: the placement of the fewest
    predicted seconds per batch, where one with workers must beat every env here by :data:`WORKER_GAIN` (a
    share by :data:`SHARE_GAIN`);
    ``batch_size``: the rows ``recv()`` returns when fewer than ``num_envs`` (first-finished), else None."""
    all_here = CALL_COST + num_envs * cost.step
    # (predicted seconds, worker processes, envs in this process, the fraction of all_here it must beat) of each
    # placement with workers
    options = [
        (_workers_only(cost, num_envs, workers, PARALLEL if batch_size is None else 1.0), workers, 0, WORKER_GAIN)
    ]
    if batch_size is None:
        options.append((*_share(cost, num_envs, workers), SHARE_GAIN))
    elif num_envs >= RECV_SHARE_MIN:
        options.append((*_recv_share(cost, num_envs, workers, batch_size), SHARE_GAIN))
    paying = [option for option in options if option[0] <= option[3] * all_here]
    if not paying:
        seconds, *_, gain = min(options, key=lambda option: option[0])
        why = (
            f"{num_envs} steps take {_us(all_here)} here; with worker processes {_us(seconds)}, over {gain}x "
            f"of it (a round trip {_us(cost.round_trip)}, {_us(cost.message_cpu)} of this process per message)"
        )
        return Choice("in_process", 0, num_envs, why)
    seconds, num_workers, in_process, _ = min(paying, key=lambda option: option[0])  # a tie: workers only
    if in_process:
        why = f"a step takes {_us(cost.step)}: this process shares the work"
    else:
        why = f"a step takes {_us(cost.step)}, {num_envs} take {_us(seconds)} on {workers} worker processes"
    if batch_size is not None and in_process:
        why += f"; recv() returns the first {batch_size} of {num_envs} rows, and steps the envs here when it would wait"
    return Choice("inline", num_workers, in_process, why)


def _fewest_workers(
    cost: Cost, num_envs: int, workers: int, batch_size: int | None, cpus: int, polls: float = 0.0
) -> Choice:
    """Cheap steps, envs in worker processes only: the number of ``inline`` workers, up to ``workers``, of the
    fewest predicted seconds per batch: :func:`_lockstep_seconds` for a lock-step pool (``polls``: see
    :func:`choose`), :func:`_workers_only` for a first-finished one (``batch_size``: the rows ``recv()`` returns,
    fewer than ``num_envs``; None: lock-step), where one worker steps at its full speed, as this process only waits
    for it, less this process's wake-up where its waits poll (:func:`_polled`). A batch of a few cheap envs is one
    message to one worker: more workers would each cost a message for a share of a batch that is no dearer than the
    message."""

    def seconds(count: int) -> float:
        if batch_size is not None:
            every = _workers_only(cost, num_envs, count, 1.0, cpus)  # every env once: num_envs / batch_size waits
            return _polled(every, cost, count, cpus, polls, batch_size / num_envs)
        return _lockstep_seconds(cost, num_envs, count, cpus, polls)

    best = min(range(1, workers + 1), key=lambda count: (seconds(count), -count))
    further = cost.queued_message_cpu if batch_size is None else cost.message_cpu
    why = (
        f"a step takes {_us(cost.step)}, {num_envs} take {_us(seconds(best))} on {best} worker process(es) "
        f"(a round trip {_us(cost.round_trip)}, {_us(further)} of this process per further worker's message; "
        "envs run in this process only with allow_in_process=True)"
    )
    return Choice("inline", best, 0, why)


def _workers_only(cost: Cost, num_envs: int, workers: int, parallel: float, cpus: int | None = None) -> float:
    """Predicted seconds of a batch on ``workers`` processes: a round trip, their envs in parallel (each process
    at ``parallel`` of its speed alone), and this process's CPU for each further message.

    A lock-step batch waits for its slowest worker, all of them stepping at once: :data:`PARALLEL`. With
    first-finished results (1.0) a batch overlaps the next one's messages; there the plain sum has matched
    what was measured (CartPole n = 128, ``batch_size=64``: predicted 0.72-0.76x of the all-here time, measured
    1.3-1.4x ``SyncVectorEnv``'s speed).

    With as many workers as the ``cpus`` usable CPUs (when given), this process has no CPU of its own: its work
    per batch (:data:`CALL_COST` and a message's CPU for each worker) takes CPU time from the envs' steps, and is
    added to them, and every process runs at :data:`PARALLEL` of its speed alone, first-finished or not. Measured
    on a 2-vCPU VM, two workers against one, each pool in a fresh process for 2 s, 5-6 runs (and two pools
    alternated in one process, 12 rounds of 0.5 s): 8 CartPole envs lock-step 0.70x as fast; 32 with
    ``batch_size=16`` 0.91x (0.85x), lock-step 1.1x (1.04x: even, within the noise); 128 lock-step 1.4-1.7x
    (1.57x), with ``batch_size=64`` 1.54x alternated. Of 15 probes of CartPole there, the plain sum put 32 envs
    with ``batch_size=16`` on two workers for 14 (and 32 lock-step for 4); this puts both on one for all 15, and
    128 on two for all but two lock-step probes (tests/core/test_costs.py)."""
    steps = num_envs * cost.step
    if cpus is not None and workers >= cpus:
        steps += CALL_COST + workers * cost.message_cpu
        parallel = min(parallel, PARALLEL)
    return cost.round_trip + (workers - 1) * cost.message_cpu + steps / (workers * parallel)


def _lockstep_seconds(cost: Cost, num_envs: int, workers: int, cpus: int, polls: float = 0.0) -> float:
    """Predicted seconds of a lock-step batch of ``num_envs`` envs on ``workers`` worker processes, with ``cpus``
    usable CPUs, this process waiting while they step: asleep, or polling for up to ``polls`` seconds where a CPU
    is left to it (see :func:`choose`).

    A round trip (one wake-up each way, the workers woken together), then each further worker's message sent and
    its reply read in turn by this process (:attr:`Cost.queued_message_cpu`), and the envs' steps with their rows'
    own work (:data:`ROW_WORK`), the workers stepping at the same time at :data:`PARALLEL` of their speed alone.
    Unlike :func:`_workers_only`, no work of this process is counted against the workers' steps: in a lock-step
    batch it is done before they start and after they finish.

    With a worker on every usable CPU, this process has no CPU of its own: a worker it wakes may wait for it to
    sleep, and its own wake-up for a worker to finish, a wake-up that no longer overlaps. How often depends on
    the moment: on a 2-vCPU VM (CartPole, one worker and two alternated in one process, rounds of 0.25-0.3 s of
    ``await pool.step``), two workers cost ~90 µs a batch more than one in one run (8 and 16 envs 0.77x as fast
    on two, 48 and 64 1.28x and 1.39x) and ~22 µs in another (8 envs even, 32 1.1x, 64 1.3x, 128 1.5x), each
    env ~6.8 µs on one and ~4 µs on two. So :data:`CONTENDED` of the extra CPU of a waiting worker's message
    (:attr:`Cost.message_cpu`) over a queued one is counted: the placement whose worse minute is the lesser
    (a few envs on one worker, from ~20-30 CartPoles on two, as tests/core/test_costs.py checks).

    A round trip is two wake-ups, the workers' and this process's. A wait that polls takes the replies as they come,
    which saves the second: half the round trip, where the workers leave a CPU to the waiting thread and the batch
    takes no longer than the polling. Measured on that VM (``SyncPool.step``, polling switched off and on in turn),
    it saved 82 µs a batch of 8 CartPoles on one worker and 69 µs of 32, round trips of 120-195 µs: 32 CartPoles of
    a ``SyncPool`` stepped 102k steps/s on one worker, polling, and 80k on two, where neither polls."""
    steps = num_envs * (cost.step + ROW_WORK)
    seconds = cost.round_trip + (workers - 1) * cost.queued_message_cpu
    if workers > 1 and workers >= cpus:
        seconds += CONTENDED * max(0.0, cost.message_cpu - cost.queued_message_cpu)
    seconds += steps / (workers * (PARALLEL if workers > 1 else 1.0))
    return _polled(seconds, cost, workers, cpus, polls, 1.0)


def _polled(seconds: float, cost: Cost, workers: int, cpus: int, polls: float, waits: float) -> float:
    """``seconds`` (predicted for a pool's envs to step once each, on ``workers`` worker processes) less this
    process's own wake-up, half of :attr:`Cost.round_trip`, where its waits poll for their replies: by the rule
    ``Coordinator.wait_here`` and ``Runner.poll_budget`` poll by (``spin_budget``), the workers and the waiting thread
    fit on the ``cpus`` usable CPUs and each wait, ``waits`` of those seconds (a lock-step batch: all of them; a
    first-finished ``recv()``: its rows' share), lasts no longer than ``polls``.

    Measured on a 2-vCPU VM (``benchmarks/bench_placement.py``, 2026-11-30, the awaited calls polling): one worker
    stepped 32 CartPoles with ``batch_size=16`` 1.5x as fast as two (135k against 90k env-steps/s; 98k on one
    before it polled), 64 with ``batch_size=32`` 1.03-1.12x as fast, 128 with ``batch_size=64`` 0.76x; lock-step,
    8 on one 1.5-1.8x as fast as two, 32 even (0.88-1.09x), 64 0.71x."""
    saved = cost.round_trip / 2
    if workers + 1 <= cpus and (seconds - saved) * waits <= polls:
        return seconds - saved
    return seconds


def _share(cost: Cost, num_envs: int, workers: int) -> tuple[float, int, int]:
    """``(predicted seconds, worker processes, envs here)`` of the share of envs stepped here that finishes
    with the workers' envs; ``workers``: the usable CPUs, one of which is this process's.

    This process sends the workers' messages (half of ``others x message_cpu`` of its CPU), steps ``here``
    envs, and once both sides are done reads the replies (the other half); the workers step the rest at the
    same time and answer after a round trip. Stepping at the same time, each process runs at :data:`PARALLEL`
    of its speed alone: ``step' = step / PARALLEL``. Balance ``CALL_COST + half + here x step'`` against
    ``trip + (n - here) x step' / others``:
    ``here = (trip - CALL_COST - half + n x step' / others) / (step' x (1 + 1/others))``.
    (A batch dearer than the round trip leaves the workers at least one env each.)"""
    others = min(workers - 1, num_envs - 1)
    step = max(cost.step, 1e-9) / PARALLEL
    half = others * cost.message_cpu / 2
    mine = CALL_COST + half
    here = round((cost.round_trip - mine + num_envs * step / others) / (step * (1 + 1 / others)))
    here = max(1, min(here, num_envs - others))
    seconds = max(mine + here * step, cost.round_trip + (num_envs - here) * step / others) + half
    return seconds, others, here


def _recv_share(cost: Cost, num_envs: int, workers: int, batch_size: int) -> tuple[float, int, int]:
    """``(predicted seconds for every env to step once, worker processes, envs here)`` of a share under a
    first-finished ``recv()`` of ``batch_size`` rows; ``workers``: the usable CPUs, one of which is this process's.

    This process steps its envs only when ``recv()`` would otherwise wait for the workers' rows (the pool defers
    them, see ``Coordinator._defer``), so it and the workers are all kept busy: the steps, and the pool's own
    work per batch (:data:`CALL_COST` and a message), shared by ``workers`` processes. Its envs, stepped at once
    whenever they are sent, step more often than the workers' (about 1.5-1.8x on a 2-vCPU VM), and it also does
    the pool's work: it takes half a worker's part of the envs, a quarter on two CPUs. Measured on a 2-vCPU VM
    (CartPole, alternated in 0.2 s slices): 32 of 128 envs here with ``batch_size=64`` stepped 1.12-1.17x as
    fast as two workers, 16 of 64 (``batch_size=32``) 1.08-1.16x as fast as all here; larger and smaller shares
    less. Smaller pools gained nothing (:data:`RECV_SHARE_MIN`)."""
    others = min(workers - 1, num_envs - 1)
    here = max(1, min(num_envs // (2 * (others + 1)), num_envs - others))
    per_batch = CALL_COST + cost.message_cpu
    seconds = (num_envs * cost.step + num_envs / batch_size * per_batch) / (others + 1)
    return seconds, others, here


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"

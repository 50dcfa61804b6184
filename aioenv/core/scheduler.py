"""Scheduling as pure bookkeeping: which env lives on which worker, which envs are busy,
which requests are in flight and when they expire.

Nothing here touches a socket, a process or an event loop. The coordinator asks
questions ("split these env ids by worker", "a reply with this id arrived",
"this worker died", "what expired by now?") and performs the I/O the answers
imply. That keeps every rule testable without sockets.

Invariants:
- an env has at most one request in flight (``busy``); a second one is a ``UsageError``, and so
  is a request for an env whose last result waits, unread, for ``recv()`` (``unread``; or, for rows
  that wait in the shared rows, ``busy`` still, with the env in ``held_unread``): whether its reply
  had arrived yet never decides whether a call is accepted;
- every row of an opened request is answered exactly once: by a reply (:meth:`finish`,
  or :meth:`finish_rows` for the replies of thread/async workers that carry some rows
  each), by its worker's death (:meth:`lose_worker`), by its deadline (:meth:`expire`)
  or at shutdown (:meth:`drain`). Closing a request early narrows its ``env_ids`` and
  ``positions`` to the rows still unanswered, so the caller fails exactly those. A reply
  for a request already closed is dropped (``None``);
- with a concurrency limit, at most ``limit`` step/reset rows are in flight; the rest wait,
  in order, in :attr:`held` until rows finish (:meth:`unhold`).

Lane calls: a lock-step step of every env, or a ``send()`` step, whose every worker takes one lane message
(:mod:`aioenv.wire.lane`) is kept as one :class:`LaneCall`, not a request per worker: its messages have the
ids ``base .. base + W - 1`` (message ``k`` to ``workers[k]``), and a reply only ticks it off
(:meth:`lanes_done`), so the books cost per call what a request costs, however many workers it spans. Any
other turn (a worker lost, a deadline, shutdown) first turns the call's unanswered messages into ordinary
requests with the same ids (:meth:`spill_lanes`), and every rule above then holds for them as it is.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np

from aioenv._hot import compiled
from aioenv.core.sinks import Gather, RecvQueue, Sink
from aioenv.errors import UsageError
from aioenv.wire.checks import SMALL_BATCH

#: How many id arrays :meth:`Scheduler.resolve` remembers as checked (and :meth:`Scheduler.runs` as cut), and up to
#: how many ids such an array has: a ``send()``/``recv()`` loop sends the ids of each batch ``recv()`` returned, and
#: over workers that each host a run of envs and answer them together those repeat (two batches alternate for 128
#: envs on two workers). Their bytes are looked up where the checks cost 12-25 µs of CPU inside a running pool (64
#: ids) and the cut 15. Where :mod:`aioenv._hot` found the compiled checks, nothing is remembered: each check and cut
#: is one pass in C, cheaper than the bytes and the lookup, and a first-finished loop over many workers rarely
#: repeats an array (32 CartPoles on 16 workers, batches of 16: 38 of 2,961 cuts were repeats).
KNOWN_ID_SETS = 32
KNOWN_IDS_MAX = 1024

#: What :meth:`Scheduler.runs` cuts an id array into: ``(workers, firsts, counts)``, one run of envs per worker.
Runs = tuple[list[int], list[int], list[int]]

__all__ = ["Build", "Held", "HeldCall", "LaneCall", "Request", "Scheduler", "SetupFuture"]

#: Request kinds counted against the concurrency limit.
THROTTLED = frozenset(("step", "reset"))

_FIRST = np.zeros(1, dtype=np.int64)  # the positions of a one-env call
_FIRST.flags.writeable = False
#: Up to this many workers, :meth:`Scheduler._split` groups rows with a mask per worker (see ``_split_masked``).
_MASKED_SPLIT = 8


#: What a coordinator's set-up request (MAKE, SLAB) answers instead of a sink: the future ``start()`` awaits
#: (resolved with the envs' descriptions), or None for a re-make nobody awaits.
SetupFuture = asyncio.Future[dict[str, Any]]


#: Up to this many rows given as a list (as a reply carries them), :meth:`Scheduler.finish_rows` checks and marks
#: them one by one in Python: ~0.2 µs a row against ~5 µs for numpy's checks of any number (up to 4 given as an
#: array, whose ``tolist`` costs too).
_FEW_LISTED = 16


@dataclass(slots=True, eq=False)
class Request:
    """One message to one worker, covering ``env_ids`` (its rows, in order).

    ``sink`` gets the rows of a step, reset or call; a set-up request has a :data:`SetupFuture` or None, and
    a CANCEL none. ``positions`` (k,): where the rows stand in the caller's call (None: set-up requests).
    """

    id: int
    worker: int
    kind: str
    env_ids: np.ndarray
    sink: Sink | SetupFuture | None = None
    positions: np.ndarray | None = None
    deadline: float | None = None
    left: int = 0
    answered: np.ndarray | None = None  # rows answered so far (only after a partial reply)
    listed: list[int] | None = None  # env_ids as a list, made by the first reply whose rows come as a list
    marks: bytearray | None = None  # the memory of ``answered`` where finish_listed made it: a byte per row

    def rows_sink(self) -> Sink:
        """The sink of a request that has rows to answer (a step, reset or call)."""
        sink = self.sink
        assert sink is not None, f"a {self.kind} request has no sink"
        assert not isinstance(sink, asyncio.Future), f"a {self.kind} request carries a set-up future, not rows"
        return sink

    def unanswered(self) -> np.ndarray:
        """Indices of the rows not answered yet."""
        if self.answered is None:
            return np.arange(self.env_ids.size)
        return np.flatnonzero(~self.answered)


#: How a request's fields and arrays are built, once it is opened (``req.positions`` index into the call).
Build = Callable[[Request], tuple[dict[str, Any], list[np.ndarray]]]


class HeldCall(NamedTuple):
    """How to send held rows later: the call's kind, sink, builder and timeout (seconds, None: none)."""

    kind: str
    sink: Sink
    build: Build
    timeout: float | None


@dataclass(slots=True, eq=False)
class Held:
    """Rows waiting for room under the concurrency limit: ``env_ids``, at ``positions`` of the caller's call."""

    item: HeldCall
    env_ids: np.ndarray
    positions: np.ndarray


@dataclass(slots=True, eq=False)
class LaneCall:
    """A step sent as one lane message per worker: message ``k`` has the id ``base + k`` and goes to
    ``workers[k]``, for its envs ``firsts[k] .. firsts[k] + counts[k] - 1``. ``done[k]``: its reply came; ``left``:
    the messages still out. ``env_ids``: the pool's all ids (a run's ids are a slice of them).

    Its sink is a lock-step ``step()``'s :class:`Gather` of every env (the call's positions are its env ids):
    the rows of answered messages wait in the pool's shared rows, their envs claimed, until the last; or, with
    ``each``, ``recv()``'s queue, which takes each message's rows as its reply comes.

    ``in_area[k]``: message ``k``'s reply said its rows' infos lie in the pool's info area (a call without
    ``each``; its sink reads them when it takes the rows, :mod:`aioenv.transport.slab_infos`); ``area_rows``: the
    rows of those replies (every row of the call: one read of the area for the whole batch)."""

    base: int
    workers: list[int]
    firsts: list[int]
    counts: list[int]
    env_ids: np.ndarray
    sink: Gather | RecvQueue
    deadline: float | None
    done: list[bool]
    left: int
    each: bool = False
    in_area: list[bool] | None = None
    area_rows: int = 0

    def run(self, k: int) -> np.ndarray:
        """Message ``k``'s env ids (and positions in a call of every env), (counts[k],)."""
        first = self.firsts[k]
        return self.env_ids[first : first + self.counts[k]]

    def waits_on(self, worker: int) -> bool:
        """Whether a message of the call to ``worker`` is still unanswered."""
        return any(w == worker and not d for w, d in zip(self.workers, self.done, strict=True))


class Scheduler:
    """The env table and the in-flight request table of one pool.

    Args:
        num_envs: envs are numbered ``0 .. num_envs - 1``.
        limit: at most this many step/reset rows in flight (None: no limit).
    """

    def __init__(self, num_envs: int, limit: int | None = None) -> None:
        self.num_envs = num_envs
        self.limit = limit
        self.running = 0
        self.held: deque[Held] = deque()
        self.worker_of = np.full(num_envs, -1, dtype=np.int64)
        #: ``worker_of`` as a list, for loops over a few envs (reading a list costs less than reading an array).
        self.owners: list[int] = self.worker_of.tolist()
        self._workers = 0  # the workers of the last place()
        self.busy = np.zeros(num_envs, dtype=np.bool_)
        # A result of send()/send_reset() copied out of its reply waits for recv() (rows left in the shared rows are
        # held_unread's instead).
        self.unread = np.zeros(num_envs, dtype=np.bool_)
        self.unread_count = 0
        #: Envs whose step rows wait for ``recv()`` in the shared rows, held busy meanwhile (:meth:`hold_unread`).
        self.held_unread: set[int] = set()
        self.requests: dict[int, Request] = {}
        #: Each unanswered lane message's id -> its call; the calls with messages out, by ``base``.
        self.lanes: dict[int, LaneCall] = {}
        self.lane_calls: dict[int, LaneCall] = {}
        self._next_id = 1
        self._deadlines: list[tuple[float, int]] = []
        self.all_ids = np.arange(num_envs, dtype=np.int64)
        self.all_ids.flags.writeable = False
        self._seen = np.zeros(num_envs, dtype=np.bool_)
        self._split_all: list[tuple[int, np.ndarray]] | None = None
        self._ones: dict[int, np.ndarray] = {}  # env id -> its read-only one-element id array
        self._checked: set[bytes] = set()  # the int64 bytes of id arrays resolve() found valid (see KNOWN_ID_SETS)
        self._known_runs: dict[bytes, Runs | None] = {}  # runs() of id arrays by their int64 bytes, until place()

    # ------------------------------------------------------------ placement

    def place(self, num_workers: int, first: int = 0) -> list[np.ndarray]:
        """Spread envs over ``num_workers`` workers in contiguous blocks; returns each worker's env ids.
        ``first``: the first worker takes exactly this many envs (the others share the rest evenly)."""
        if not 1 <= num_workers <= self.num_envs:
            raise ValueError(f"num_workers must be between 1 and num_envs={self.num_envs}, got {num_workers}")
        ids = np.arange(self.num_envs, dtype=np.int64)
        if first:
            rest = self.num_envs - first
            if not 0 < first <= self.num_envs or (num_workers == 1) != (rest == 0) or rest < num_workers - 1:
                raise ValueError(f"the first worker cannot take {first} of {self.num_envs} envs over {num_workers}")
            blocks = [ids[:first], *np.array_split(ids[first:], num_workers - 1)] if num_workers > 1 else [ids]
        else:
            blocks = np.array_split(ids, num_workers)
        for worker, ids in enumerate(blocks):
            self.worker_of[ids] = worker
        self.owners = self.worker_of.tolist()
        self._workers = num_workers
        self._split_all = None
        self._known_runs.clear()
        return blocks

    def envs_of(self, worker: int) -> np.ndarray:
        """The env ids hosted by ``worker``."""
        return np.flatnonzero(self.worker_of == worker)

    # ------------------------------------------------------------ env ids

    def resolve(self, env_ids: Any) -> np.ndarray:
        """Normalise ``env_ids`` (None = all) to a unique int64 array, or raise ``UsageError``."""
        if env_ids is None or env_ids is self.all_ids:
            return self.all_ids
        ids = np.asarray(env_ids)
        if ids.ndim == 0:
            ids = ids.reshape(1)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise UsageError(f"env_ids must be a 1-D sequence of ints, got {ids.dtype} array of shape {ids.shape}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size == 0:
            raise UsageError("env_ids is empty: name at least one env")
        if compiled is not None and ids.flags.c_contiguous:  # one pass in C: cheaper than remembering
            self._check(ids)
            return ids
        key = ids.tobytes() if ids.size <= KNOWN_IDS_MAX else None
        if key is not None and key in self._checked:  # the same ids as a call before: valid then, valid now
            return ids
        self._check(ids)
        if key is not None:
            if len(self._checked) >= KNOWN_ID_SETS:
                self._checked.clear()
            self._checked.add(key)
        return ids

    def _check(self, ids: np.ndarray) -> None:
        """Raise ``UsageError`` naming the first unknown id of ``ids`` (int64, 1-D, not empty), else its smallest id
        named twice (in C where :mod:`aioenv._hot` found it built: one pass and a sort of a copy)."""
        if compiled is not None and ids.flags.c_contiguous:
            found = compiled.check_ids(ids, self.num_envs)
            if found is None:
                return
            repeated, env = found
            if repeated:
                raise UsageError(f"env id {env} appears more than once in env_ids")
            raise UsageError(f"unknown env id {env}: this pool has env ids 0..{self.num_envs - 1}")
        self._py_check(ids)

    def _py_check(self, ids: np.ndarray) -> None:
        """:meth:`_check` in Python (the twin that defines it)."""
        if ids.size <= SMALL_BATCH:
            # The ids of a send()/recv() loop's batch: Python's min, max and set over the list. Inside a running pool
            # numpy's reductions find their caches cold: resolving 16-64 ids took 25-63 µs of CPU that way and 13-27
            # µs this way (sends of 16, 32 and 64 ids, thread and inline workers; in a tight loop both take ~5 µs).
            listed = ids.tolist()
            unknown = min(listed) < 0 or max(listed) >= self.num_envs
            repeated = not unknown and len(set(listed)) != len(listed)
        else:
            unknown = bool(ids.view(np.uint64).max() >= self.num_envs)  # one reduction: negatives wrap to huge values
            repeated = not unknown and self._repeats(ids)
        if unknown:
            bad = (ids < 0) | (ids >= self.num_envs)
            raise UsageError(f"unknown env id {int(ids[bad][0])}: this pool has env ids 0..{self.num_envs - 1}")
        if repeated:
            values, counts = np.unique(ids, return_counts=True)
            raise UsageError(f"env id {int(values[counts > 1][0])} appears more than once in env_ids")

    def _repeats(self, ids: np.ndarray) -> bool:
        """Whether known ``ids`` name an env twice: marked in a scratch mask and counted, cheaper than ``np.unique``."""
        seen = self._seen
        seen[ids] = True
        distinct = int(np.count_nonzero(seen))
        seen[ids] = False
        return distinct != ids.size

    def one(self, env_id: Any) -> np.ndarray:
        """``resolve([env_id])`` for one env, cheaper: a cached read-only one-element array."""
        ids = self._ones.get(env_id) if type(env_id) is int else None
        if ids is None:
            if not isinstance(env_id, (int, np.integer)) or isinstance(env_id, bool):
                raise UsageError(f"env_id must be an int, got {env_id!r} ({type(env_id).__name__})")
            ids = self.resolve([env_id])
            ids.flags.writeable = False
            self._ones[int(ids[0])] = ids
        return ids

    def claim(self, env_ids: np.ndarray) -> None:
        """Mark ``env_ids`` busy, or raise ``UsageError`` naming an env that already is, or whose last
        result waits for ``recv()``."""
        busy = self.busy
        if env_ids.size == 1 and not busy[env_ids[0]] and not self.unread_count:  # no fancy indexing
            busy[env_ids[0]] = True
            return
        if env_ids is self.all_ids and not self.unread_count and not np.count_nonzero(busy):  # nor here
            busy.fill(True)
            return
        unread = self.unread if self.unread_count else None
        if compiled is not None and env_ids.dtype == np.int64 and env_ids.flags.c_contiguous:
            env = compiled.claim_ids(env_ids, busy, unread)
        else:
            env = py_claim_ids(env_ids, busy, unread)
        if env >= 0:
            if self.unread[env] or env in self.held_unread:  # (first: such an env is held busy too)
                why = f"env {env}'s last result has arrived but recv() has not returned it yet"
            else:
                why = f"env {env} already has a request in flight: an env takes one request at a time"
            raise UsageError(f"{why} (await its result, or recv() it, before sending another)", env_id=env)

    def mark_unread(self, env_ids: np.ndarray) -> None:
        """The results of ``env_ids`` wait in ``recv()``'s queue: no new request for them until read."""
        self.unread[env_ids] = True
        self.unread_count = int(np.count_nonzero(self.unread))

    def mark_read(self, env_ids: np.ndarray) -> None:
        """``recv()`` returned (or raised) the results of ``env_ids``."""
        if self.unread_count:
            self.unread[env_ids] = False
            self.unread_count = int(np.count_nonzero(self.unread))

    def hold_unread(self, env_ids: list[int]) -> None:
        """The step rows of ``env_ids`` wait for ``recv()`` in the shared rows, their envs held busy (so :meth:`claim`
        refuses them already): only remembered, for its error to say why, until :meth:`release_read`."""
        self.held_unread.update(env_ids)

    def release_read(self, env_ids: np.ndarray) -> None:
        """``recv()`` took the rows of ``env_ids`` (intp) from the shared rows: their envs are read, and free."""
        self.held_unread.difference_update(env_ids.tolist())
        self.busy.put(env_ids, False)

    def release(self, env_ids: np.ndarray) -> None:
        """Mark ``env_ids`` idle (a request that could not be sent, or a step answered within the call)."""
        if env_ids is self.all_ids:
            self.busy.fill(False)
        else:
            self.busy[env_ids] = False

    def split(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Group ``env_ids`` by worker: ``[(worker, positions)]`` where positions index into ``env_ids``.

        Positions keep the caller's order within each worker, so they are increasing (callers rely
        on it: a group of every row is every row in order).
        """
        if env_ids is self.all_ids:
            if self._split_all is None:
                self._split_all = self._split(env_ids)
            return self._split_all
        return self._split(env_ids)

    def runs(self, env_ids: np.ndarray) -> Runs | None:
        """``(workers, firsts, counts)``: each worker's part of ``env_ids`` (unique, not empty) as one run of envs
        ``firsts[k] .. firsts[k] + counts[k] - 1`` on ``workers[k]``, in id order; None when some worker's part is not
        one run. On the pure-Python twins, remembered by the ids' bytes for the arrays a ``send()``/``recv()`` loop
        repeats (int64 arrays of up to :data:`KNOWN_IDS_MAX` ids, the last :data:`KNOWN_ID_SETS`), until :meth:`place`
        places the envs anew; the compiled cut runs every time (see :data:`KNOWN_ID_SETS`)."""
        n = env_ids.size
        if n > KNOWN_IDS_MAX or env_ids.dtype != np.int64 or compiled is not None:  # (bytes name int64 ids only;
            return self._cut(env_ids)  # compiled, the cut is one pass in C, cheaper than remembering it)
        known = self._known_runs
        key = env_ids.tobytes()
        try:
            return known[key]
        except KeyError:
            pass
        runs = self._cut(env_ids)
        if len(known) >= KNOWN_ID_SETS:
            known.clear()
        known[key] = runs
        return runs

    def _cut(self, env_ids: np.ndarray) -> Runs | None:
        if compiled is not None and env_ids.dtype == np.int64 and env_ids.flags.c_contiguous:
            return compiled.runs_by_owner(env_ids, self.worker_of)
        return _runs_by_owner(env_ids, self) if env_ids.size > _FEW_IDS else _few_runs_by_owner(env_ids, self.owners)

    def _split(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        if env_ids.size == 1:
            return [(int(self.worker_of[env_ids[0]]), _FIRST)]
        if 0 < self._workers <= _MASKED_SPLIT:
            return self._split_masked(env_ids)
        return self._split_sorted(env_ids)

    def _split_sorted(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """:meth:`_split` of many rows: a stable sort by worker, cut where the worker changes."""
        owners = self.worker_of[env_ids]
        order = np.argsort(owners, kind="stable")
        sorted_owners = owners[order]
        edges = np.flatnonzero(sorted_owners[1:] != sorted_owners[:-1]) + 1
        if not edges.size:
            return [(int(sorted_owners[0]), np.arange(env_ids.size))]
        # Cut with slices (np.split and np.diff cost ~3x as much in Python around the same work: 16 rows of a
        # send over 16 workers, 37 against 13 µs on a small VM).
        bounds = [0, *edges.tolist(), env_ids.size]
        workers = sorted_owners[bounds[:-1]].tolist()
        return [(w, order[a:b]) for w, a, b in zip(workers, bounds, bounds[1:], strict=False)]

    def _split_masked(self, env_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """:meth:`_split` over a few workers: one comparison and one ``flatnonzero`` per worker. For the 16 rows
        of a send to two workers that is ~6-11 µs on a small VM, where a stable sort, ``diff`` and ``split`` take
        ~30-50 µs; the two are even at 8-16 workers, so more than 8 take the sort."""
        owners = self.worker_of[env_ids]
        groups = []
        for worker in range(self._workers):
            positions = np.flatnonzero(owners == worker)
            if positions.size == env_ids.size:
                return [(worker, np.arange(env_ids.size))]
            if positions.size:
                groups.append((worker, positions))
        return groups

    # ------------------------------------------------------------ requests

    def open(
        self,
        worker: int,
        kind: str,
        env_ids: np.ndarray,
        *,
        sink: Sink | SetupFuture | None = None,
        positions: np.ndarray | None = None,
        deadline: float | None = None,
    ) -> Request:
        """Record a request about to be sent to ``worker``."""
        req = Request(self._next_id, worker, kind, env_ids, sink, positions, deadline, left=env_ids.size)
        self._next_id += 1
        self.requests[req.id] = req
        if kind in THROTTLED:
            self.running += env_ids.size
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, req.id))
        return req

    def finish(self, req_id: Any, *, keep_claim: bool = False) -> Request | None:
        """A reply for all its (unanswered) rows arrived, or the request is given up: close it, free its
        envs. ``None`` for an unknown/closed id. See the module docstring for ``env_ids``/``positions``.

        ``keep_claim``: the envs stay busy, their rows left in the pool's shared rows for the call's sink to copy
        once every row of the call is in; the sink frees them then (:meth:`aioenv.core.sinks.Gather.take_shared`).
        No request can write those rows meanwhile."""
        req = self.requests.pop(req_id, None) if isinstance(req_id, int) else None
        if req is None:
            return None
        if req.answered is not None:  # some rows were answered already: keep the others only
            rows = req.unanswered()
            req.env_ids = req.env_ids[rows]
            if req.positions is not None:
                req.positions = req.positions[rows]
            req.answered = req.marks = req.listed = None
        if not keep_claim:
            self.busy[req.env_ids] = False
        if req.kind in THROTTLED:
            self.running -= req.left
        req.left = 0
        return req

    def finish_rows(self, req_id: Any, rows: np.ndarray | list[int], *, keep_claim: bool = False) -> Request | None:
        """A reply for ``rows`` (indices into the request: int64 ``(k,)``, or a list of ints as the reply carried
        them) arrived: free those envs; the request closes with its last row. ``None`` for an unknown/closed id.
        ``ValueError`` for rows out of range, answered already, or not ints (nothing is changed then).
        ``keep_claim``: those envs stay busy, their rows left in the pool's shared rows for ``recv()`` to copy and
        free (:meth:`hold_unread`, :meth:`release_read`)."""
        req = self.requests.get(req_id) if isinstance(req_id, int) else None
        if req is None:
            return None
        n = req.env_ids.size
        answered = req.answered
        k = len(rows)
        # Each kind of ``rows`` is checked for range once: a few of an array's here, a reply's list here, more
        # than a few by numpy's reductions in _finish_many.
        listed: list[int] | None = None
        if isinstance(rows, np.ndarray):
            if k <= 4:
                listed = rows.tolist()
                if not all(0 <= row < n for row in listed):
                    raise ValueError(f"reply rows {listed} out of range for a request of {n}")
        elif not all(type(row) is int and 0 <= row < n for row in rows):
            raise ValueError(f"reply rows {rows[:8]} are not ints in range for a request of {n}")
        elif k > _FEW_LISTED:
            rows = np.array(rows, dtype=np.int64)
        else:
            listed = rows
        if listed is None:
            return self._finish_many(req, np.asarray(rows), keep_claim)
        if answered is None:
            answered = req.answered = np.zeros(n, dtype=np.bool_)
        # The common case (rows finish a few at a time): plain Python is cheaper than numpy reductions.
        for row in listed:
            if answered[row]:
                raise ValueError(f"reply rows {listed} were answered already")
        if k > 1 and len(set(listed)) != k:
            raise ValueError(f"reply rows {listed} were answered already")
        busy, env_ids = self.busy, req.env_ids
        for row in listed:
            answered[row] = True
            if not keep_claim:
                busy[env_ids[row]] = False
        return self._rows_done(req, k)

    def finish_listed(self, replies: list[list[Any]]) -> tuple[list[int], list[str]]:
        """:meth:`finish_rows` with ``keep_claim`` of each ``[request id, [rows]]`` of ``replies`` (a thread or async
        worker's reply: a few rows of each of several requests, as lists), in one call: the env ids of those rows,
        in the order given, and why each refused item was refused (an unknown id, rows out of range, answered
        already or not ints: its rows are dropped and nothing of it is marked; the others are taken). Each row costs
        a few list lookups: no numpy call per item, where such a reply carries ~6 items of ~4 rows (1,024 async envs
        of 20 ms on 2 workers)."""
        requests = self.requests
        out: list[int] = []
        refused: list[str] = []
        for req_id, rows in replies:
            req = requests.get(req_id) if type(req_id) is int else None
            if req is None or type(rows) is not list or len(rows) > _FEW_LISTED:
                try:  # (the general way, or its refusal)
                    done = self.finish_rows(req_id, rows, keep_claim=True)
                except ValueError as exc:
                    refused.append(str(exc))
                    continue
                if done is None:
                    refused.append(f"no open request {req_id!r}")
                else:
                    out += done.env_ids.take(rows).tolist()
                continue
            listed, marks = req.listed, req.marks
            if listed is None:
                listed = req.listed = req.env_ids.tolist()
            if marks is None:  # (answered's bytes, which it then views: a byte is read and set without numpy)
                answered = req.answered
                marks = req.marks = bytearray(len(listed)) if answered is None else bytearray(answered.tobytes())
                req.answered = np.frombuffer(marks, dtype=np.bool_)
            if not take_listed(listed, marks, rows, out):
                why = f"reply rows {rows[:8]} are not ints in range, answered once, of a request of {len(listed)}"
                refused.append(why)
                continue
            self._rows_done(req, len(rows))
        return out, refused

    def _finish_many(self, req: Request, rows: np.ndarray, keep_claim: bool) -> Request | None:
        """:meth:`finish_rows` of more than 4 rows (int64 ``(k,)``), checked and marked with numpy."""
        n, k, answered = req.env_ids.size, rows.size, req.answered
        if answered is None and k == n and self._in_order(rows):
            # Every row of the request at once, in order (an inline worker's reply relayed by a server, a block
            # that finished a whole request): nothing to check row by row, nothing to remember.
            return self.finish(req.id, keep_claim=keep_claim)
        if answered is None:
            answered = req.answered = np.zeros(n, dtype=np.bool_)
        wide = rows.view(np.uint64) if rows.dtype == np.int64 else rows.astype(np.uint64)  # negatives: huge
        if k and wide.max() >= n:
            raise ValueError(f"reply rows {rows.tolist()[:8]} out of range for a request of {n}")
        if answered[rows].any():
            raise ValueError(f"reply rows {rows.tolist()[:8]} were answered already")
        answered[rows] = True
        if int(np.count_nonzero(answered)) != n - req.left + k:  # a row given twice in this reply
            answered[rows] = False
            raise ValueError(f"reply rows {rows.tolist()[:8]} were answered already")
        if not keep_claim:
            self.busy[req.env_ids[rows]] = False
        return self._rows_done(req, k)

    def _rows_done(self, req: Request, k: int) -> Request:
        """``k`` rows of ``req`` were answered (and marked): counted; the request closes with its last."""
        req.left -= k
        if req.kind in THROTTLED:
            self.running -= k
        if req.left == 0:
            del self.requests[req.id]
        return req

    def _in_order(self, rows: np.ndarray) -> bool:
        """Whether ``rows`` is ``0, 1, ..., k-1`` (int64): one comparison of bytes, cheaper than any numpy check."""
        return rows.dtype == np.int64 and rows.tobytes() == self.all_ids[: rows.size].tobytes()

    @property
    def in_flight(self) -> int:
        """Messages out and not yet answered: open requests and unanswered lane messages."""
        return len(self.requests) + len(self.lanes)

    # ------------------------------------------------------------ lane calls

    def open_lanes(
        self,
        workers: list[int],
        firsts: list[int],
        counts: list[int],
        sink: Gather | RecvQueue,
        deadline: float | None,
        each: bool = False,
    ) -> LaneCall:
        """Record a step of envs claimed already, one lane message to each of ``workers`` (``firsts``/``counts``:
        each one's run of envs): a lock-step ``step()`` of every env (a :class:`Gather`), or with ``each`` a
        ``send()``'s rows for ``recv()``."""
        base, w = self._next_id, len(workers)
        self._next_id += w
        call = LaneCall(base, workers, firsts, counts, self.all_ids, sink, deadline, [False] * w, w, each)
        self.lanes.update(dict.fromkeys(range(base, base + w), call))
        self.lane_calls[base] = call
        self.running += sum(counts)
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, base))
        return call

    def sent_to(self, req_id: int) -> int | None:
        """The worker the open request or unanswered lane message ``req_id`` went to (None: none with that id)."""
        call = self.lanes.get(req_id)
        if call is not None:
            return call.workers[req_id - call.base]
        req = self.requests.get(req_id)
        return None if req is None else req.worker

    def lanes_done(
        self, replies: list[tuple[int, int]], area: bool = False
    ) -> tuple[list[LaneCall], list[int], RecvQueue | None, list[tuple[int, int]]]:
        """``(worker, request id)``: ``worker`` answered that lane message. Returns the calls without ``each`` these
        replies closed (every message answered: their envs still claimed, for the sink to copy their rows and
        free them); the env ids of the replies to calls with ``each``, run after run in the order the replies came,
        and those calls' sink (one ``recv()`` queue: None when there are none), for the caller to queue their rows
        where they lie; and the replies that are no unanswered lane message of their worker, which change nothing
        (for the caller to take one by one: a request's, a closed id's, or another worker's message, see
        :meth:`sent_to`). ``area``: these replies' rows have their infos in the info area, which a call without
        ``each`` keeps in :attr:`LaneCall.in_area` for its sink (the caller tells a ``recv()`` queue itself)."""
        lanes = self.lanes
        closed: list[LaneCall] = []
        each: list[int] = []
        queue: Gather | RecvQueue | None = None
        rest: list[tuple[int, int]] = []
        for worker, req_id in replies:
            call = lanes.get(req_id)
            if call is None or call.workers[k := req_id - call.base] != worker:
                rest.append((worker, req_id))
                continue
            del lanes[req_id]
            call.done[k] = True
            call.left -= 1
            count = call.counts[k]
            self.running -= count
            if call.each:
                assert queue is None or call.sink is queue, "every call whose rows go one by one goes to one queue"
                queue = call.sink
                first = call.firsts[k]
                each += range(first, first + count)
            elif area:
                if call.in_area is None:
                    call.in_area = [False] * len(call.workers)
                call.in_area[k] = True
                call.area_rows += count
            if call.left == 0:
                del self.lane_calls[call.base]
                if not call.each:
                    closed.append(call)
        return closed, each, cast("RecvQueue | None", queue), rest

    def spill_lanes(
        self, due: float | None = None, worker: int | None = None, req_id: int | None = None
    ) -> list[tuple[LaneCall, list[int]]]:
        """Turn the lane calls still out (those past ``due``, with a message out to ``worker``, or with the
        unanswered message ``req_id``, when given) into ordinary requests, one per unanswered message with its
        id; returns each call with the messages answered already whose rows its sink has yet to take from the
        pool's shared rows (their envs still claimed: a :class:`Gather`'s; none of a call with ``each``)."""
        out: list[tuple[LaneCall, list[int]]] = []
        if req_id is not None:
            one = self.lanes.get(req_id)
            calls = [] if one is None else [one]
        else:
            calls = list(self.lane_calls.values())
        for call in calls:
            if due is not None and (call.deadline is None or call.deadline > due):
                continue
            if worker is not None and not call.waits_on(worker):
                continue
            del self.lane_calls[call.base]
            answered = []
            for k, w in enumerate(call.workers):
                if call.done[k]:
                    if not call.each:
                        answered.append(k)
                    continue
                req_id = call.base + k
                del self.lanes[req_id]
                ids = call.run(k)
                self.requests[req_id] = Request(req_id, w, "step", ids, call.sink, ids, call.deadline, ids.size)
                if call.deadline is not None:
                    heapq.heappush(self._deadlines, (call.deadline, req_id))
            out.append((call, answered))
        return out

    def has_work(self, worker: int) -> bool:
        """Whether ``worker`` has a request or a lane message out."""
        return any(r.worker == worker for r in self.requests.values()) or self._lanes_wait_on(worker)

    def _lanes_wait_on(self, worker: int) -> bool:
        return any(c.waits_on(worker) for c in self.lane_calls.values())

    # ------------------------------------------------------------ concurrency limit

    def room(self, rows: int) -> int:
        """How many of ``rows`` new step/reset rows may go now (held rows go first)."""
        if self.limit is None:
            return rows
        if self.held:
            return 0
        return max(0, min(rows, self.limit - self.running))

    def hold(self, item: HeldCall, env_ids: np.ndarray, positions: np.ndarray) -> None:
        """Queue rows that found no room; ``item`` is the caller's (how to send them later)."""
        self.held.append(Held(item, env_ids, positions))

    def unhold(self) -> list[Held]:
        """Held rows that fit now, oldest first (a held batch may be split)."""
        out: list[Held] = []
        if self.limit is None:
            return out
        free = self.limit - self.running
        while self.held and free > 0:
            head = self.held[0]
            if head.env_ids.size <= free:
                self.held.popleft()
                out.append(head)
                free -= head.env_ids.size
            else:
                out.append(Held(head.item, head.env_ids[:free], head.positions[:free]))
                self.held[0] = Held(head.item, head.env_ids[free:], head.positions[free:])
                free = 0
        return out

    def drop_held(self) -> list[Held]:
        """Remove and return every held batch, freeing its envs (shutdown)."""
        held = list(self.held)
        self.held.clear()
        for h in held:
            self.busy[h.env_ids] = False
        return held

    def lose_worker(self, worker: int) -> list[Request]:
        """``worker`` died: close and return its in-flight requests (oldest first). Its lane messages must have
        been spilled (:meth:`spill_lanes`) first."""
        assert not self._lanes_wait_on(worker), "its lane messages are spilled first"
        lost = [r for r in self.requests.values() if r.worker == worker]
        for req in lost:
            self.finish(req.id)
        return lost

    def next_deadline(self) -> float | None:
        """The earliest deadline among open requests, if any."""
        while self._deadlines and (top := self._deadlines[0][1]) not in self.requests and top not in self.lane_calls:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expire(self, now: float) -> list[Request]:
        """Close and return the requests whose deadline is ``<= now`` (the lane calls past it must have been
        spilled first: :meth:`spill_lanes`)."""
        expired: list[Request] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, req_id = heapq.heappop(self._deadlines)
            assert req_id not in self.lane_calls, "a lane call past its deadline is spilled before expire()"
            req = self.finish(req_id)
            if req is not None:
                expired.append(req)
        return expired

    def drain(self) -> list[Request]:
        """Close and return every open request (shutdown; lane calls are spilled first)."""
        assert not self.lane_calls, "lane calls are spilled before drain()"
        reqs = list(self.requests.values())
        for req in reqs:
            self.finish(req.id)
        return reqs


#: Up to this many env ids, :func:`_few_runs_by_owner` cuts them into runs in a loop over a list; beyond it
#: :func:`_runs_by_owner` does with a few numpy calls (each costs as much as ~20 turns of that loop).
_FEW_IDS = 96


def py_claim_ids(ids: np.ndarray, busy: np.ndarray, unread: np.ndarray | None) -> int:
    """Mark every env of ``ids`` ``(n,)`` (unique env ids, as :meth:`Scheduler.resolve` gives them) in ``busy``
    ``(num_envs,)`` bool and return -1, when none is ``busy`` or ``unread`` (the same, or None); else change
    nothing and return the first such env in ``ids``' order (``IndexError`` for an id beyond ``busy``). The twin of
    the compiled ``claim_ids`` (:mod:`aioenv._hot`), which :meth:`Scheduler.claim` calls where it was built."""
    # take and put, not fancy indexing: several times cheaper on the few ids of a send()
    taken = busy.take(ids)
    if unread is not None:
        taken |= unread.take(ids)
    if np.count_nonzero(taken):  # (ndarray.any() costs several times as much on small arrays)
        return int(ids[taken][0])
    busy.put(ids, True)
    return -1


def _few_runs_by_owner(env_ids: np.ndarray, owners: list[int]) -> Runs | None:
    """``(workers, firsts, counts)``: each worker's part of ``env_ids`` (unique) as one run of envs ``firsts[k] ..
    firsts[k] + counts[k] - 1`` on ``workers[k]``, in id order (None: some worker's part is not one run).
    ``owners[env]``: the worker of ``env``; workers host blocks of envs that follow each other, so in id order
    each worker's envs are together."""
    workers: list[int] = []
    firsts: list[int] = []
    counts: list[int] = []
    worker, last = -1, -2
    for env in sorted(env_ids.tolist()):
        owner = owners[env]
        if owner != worker:
            worker = owner
            workers.append(owner)
            firsts.append(env)
            counts.append(1)
        elif env == last + 1:
            counts[-1] += 1
        else:  # a gap within one worker's envs
            return None
        last = env
    return workers, firsts, counts


def py_take_listed(listed: list[int], marks: bytearray, rows: list[Any], out: list[int]) -> bool:
    """The rows ``rows`` of one request of :meth:`Scheduler.finish_listed` (``listed``: its env ids, ``marks``: a byte
    per row, 1 once answered): when each is an int in range, not answered and named once, mark each, append its env
    id to ``out`` in order, and return True; else change nothing and return False. The pure-Python twin of the
    compiled ``take_listed`` (:mod:`aioenv._hot`)."""
    n = len(listed)
    for row in rows:
        if type(row) is not int or not 0 <= row < n or marks[row]:
            return False
    if len(set(rows)) != len(rows):
        return False
    for row in rows:
        marks[row] = 1
        out.append(listed[row])
    return True


#: :func:`py_take_listed`, compiled where :mod:`aioenv._hot` found the compiled part built.
take_listed: Callable[[list[int], bytearray, list[Any], list[int]], bool] = (
    py_take_listed if compiled is None else compiled.take_listed
)


def _runs_by_owner(env_ids: np.ndarray, sched: Scheduler) -> Runs | None:
    """:func:`_few_runs_by_owner` of many env ids, with numpy: cut where the worker changes; each piece must be a
    run (sorted, so its span is its size). Past the cuts, the work is per piece (per worker), on lists."""
    ids = env_ids if env_ids is sched.all_ids else np.sort(env_ids)
    owners = sched.worker_of[ids]
    bounds = [0, *((owners[1:] != owners[:-1]).nonzero()[0] + 1).tolist(), ids.size]
    listed, owner = ids.tolist(), owners.tolist()
    workers: list[int] = []
    firsts: list[int] = []
    counts: list[int] = []
    for start, end in itertools.pairwise(bounds):
        first = listed[start]
        if listed[end - 1] - first != end - start - 1:  # some piece is not one run
            return None
        workers.append(owner[start])
        firsts.append(first)
        counts.append(end - start)
    return workers, firsts, counts

"""Rows of several requests in one message, and their delivery to the requests' sinks.

A thread or async worker answers rows as they finish: one RESULT carries a *block* of rows (obs
leaves, reward, terminated, truncated, infos, errors, all with the block's rows) and *segments*
saying which request each run of rows belongs to. A server forwards such a block to its client
as it came (:mod:`aioenv.core.relay`), with the segments translated to the client's requests, so
the same routine delivers blocks in a coordinator and in a remote client:
:func:`route_block` closes each segment's rows in the scheduler and hands them to the request's
sink, merging consecutive segments bound for one :class:`~aioenv.core.sinks.RecvQueue` (``recv``
does not care which request a row came from) and giving every segment whose sink has an
``outlet`` to that outlet in one call per block (a server's relays: the block crosses to the
client without being cut into parts).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from aioenv.core.scheduler import Request, Scheduler
from aioenv.core.sinks import Part, RecvQueue, Sink
from aioenv.wire.errors import from_wire
from aioenv.wire.info_wire import binfo_of
from aioenv.wire.infos import take_info
from aioenv.wire.protocol import Key, leaves_from_wire

__all__ = ["Block", "Deliver", "Outlet", "OutletSegment", "Relayed", "Segment", "int_lists", "route_block"]

#: A segment of a block: ``(request id, rows of that request (k,) int64, first row in the block)``; the id is
#: as the message carried it (an unknown or malformed one finds no request and its rows are dropped).
Segment = tuple[Any, np.ndarray, int]


def int_lists(lists: list[Any]) -> list[np.ndarray]:
    """Each of ``lists`` (lists of ints, as a message's segments carry them) as an int64 array ``(k,)``.

    The arrays are views of one array filled in one pass, which for the many short lists of a block
    (one per request with rows in it) costs half of one ``np.asarray`` each. Raises ``TypeError`` or
    ``ValueError`` for anything but lists of ints (a malformed message).
    """
    sizes = []
    for item in lists:
        if type(item) is not list:
            raise TypeError(f"expected a list of row numbers, got {type(item).__name__}")
        sizes.append(len(item))
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=sum(sizes))
    out = []
    start = 0
    for k in sizes:
        out.append(flat[start : start + k])
        start += k
    return out


class Block:
    """The decoded fields of a block of rows; :meth:`part` slices them.

    ``obs``: leaves with B rows; ``extras``: ``[reward (B,), terminated (B,), truncated (B,)]``;
    ``infos``: one dict per row or None; ``binfo``: the rows' infos batched column-wise or None;
    ``errors``: block row -> error description (wire form); ``kind``: ``"step"`` or ``"reset"``.
    """

    __slots__ = ("binfo", "errors", "extras", "infos", "kind", "obs")

    def __init__(
        self, obs: list[np.ndarray], extras: list[np.ndarray], infos: Any, binfo: Any, errors: Any, kind: str
    ) -> None:
        self.obs = obs
        self.extras = extras
        self.infos = infos
        self.binfo = binfo
        self.errors = {int(row): d for row, d in (errors or {}).items()}
        self.kind = kind or "step"

    @classmethod
    def from_header(cls, header: dict[str, Any], arrays: list[np.ndarray]) -> Block:
        """The block a message's fields describe (``obs``, ``x``, ``info``/``binfo``, ``err``, ``k``);
        raises ``ProtocolError``/``ValueError``/``KeyError``/``TypeError`` when they are malformed."""
        obs = leaves_from_wire(header[Key.OBS], arrays)
        extras = [arrays[i] for i in header.get(Key.EXTRAS, [])]
        n = len(extras[0]) if extras else len(obs[0]) if obs else 0
        if any(a.shape[:1] != (n,) for a in (*obs, *extras)):
            shapes = [a.shape for a in (*obs, *extras)]
            raise ValueError(f"the arrays of a block of rows disagree on its length: {shapes}")
        return cls(
            obs,
            extras,
            header.get(Key.INFO),
            binfo_of(header, arrays),
            header.get(Key.ERRORS),
            str(header.get(Key.ROWS_KIND, "")),
        )

    @property
    def size(self) -> int:
        """B, the block's number of rows."""
        return len(self.extras[0]) if self.extras else len(self.obs[0]) if self.obs else 0

    def error_types(self) -> dict[int, str]:
        """Block row -> the name of the error its description rebuilds to (``EnvError``, ``StepTimeout``, ...),
        for each failed row: what the caller will get, counted and logged by a server."""
        return {row: type(from_wire(desc)).__name__ for row, desc in self.errors.items()}

    def part(self, env_ids: np.ndarray, start: int, stop: int) -> Part:
        """Rows ``start:stop`` as a :class:`Part` for ``env_ids``."""
        errors = self.errors
        return Part(
            env_ids,
            [leaf[start:stop] for leaf in self.obs],
            [x[start:stop] for x in self.extras] or None,
            self.infos[start:stop] if self.infos is not None else None,
            {r - start: from_wire(d, context=self.kind) for r, d in errors.items() if start <= r < stop}
            if errors
            else None,
            binfo=take_info(self.binfo, slice(start, stop)) if self.binfo is not None else None,
        )


#: A segment as an outlet gets it: ``(sink, positions (k,), start, env_ids (k,))``: rows ``start:start+k``
#: of the block, at ``positions`` of the sink's call.
OutletSegment = tuple[Sink, np.ndarray, int, np.ndarray]

#: How :func:`route_block` hands rows over: ``deliver(sink, req, part, positions (k,))``; ``req`` and
#: ``positions`` are None for a merged run of rows bound for one :class:`~aioenv.core.sinks.RecvQueue`.
Deliver = Callable[[Sink, Request | None, Part, np.ndarray | None], None]


def _rows_sink(req: Request | None, on_bad: Callable[[ValueError], None]) -> Sink | None:
    """The sink of ``req`` (None: no request), or None after telling ``on_bad`` when the request takes no rows
    (a set-up request named by a malformed message)."""
    if req is None:
        return None
    sink = req.sink
    if sink is None or isinstance(sink, asyncio.Future):
        on_bad(ValueError(f"rows for request {req.id}, a {req.kind}, which takes none"))
        return None
    return sink


class Outlet(Protocol):
    """Where a sink's rows go wholesale: ``forward(block, segments)`` gets every segment of a block bound
    for it (see :data:`OutletSegment`)."""

    def forward(self, block: Block, segments: list[OutletSegment], /) -> None:
        """Take the segments of ``block`` bound for this outlet, in block order."""


class Relayed:
    """The base of a sink whose rows go on wholesale to its :attr:`outlet`, as they came (a server's relay: the
    block crosses to the client without being decoded here); the rows of any other sink are decoded and
    delivered to it. A base class rather than an attribute looked up on every sink: one ``isinstance`` per
    reply says which."""

    __slots__ = ()
    #: Where its rows go.
    outlet: Outlet


def route_block(
    sched: Scheduler,
    block: Block,
    segments: Iterable[Segment],
    deliver: Deliver,
    on_bad: Callable[[ValueError], None],
    remember: Callable[[Part], None] | None = None,
) -> None:
    """Close each segment's rows in ``sched`` and deliver them, in block order.

    ``deliver(sink, req, part, positions)`` gets a part per segment (``req`` None and ``positions``
    None for a merged run bound for a RecvQueue); rows of unknown or closed requests are dropped;
    ``on_bad`` gets the ``ValueError`` of a segment whose rows are out of range or answered already
    (that segment is dropped). Segments whose sink is :class:`Relayed` go to its outlet (see :class:`Outlet`),
    after ``remember`` (if given) saw their rows as parts.
    """
    run = _RecvRun(block, deliver)
    outlets: dict[int, tuple[Outlet, list[OutletSegment]]] = {}
    for req_id, at, start in segments:
        try:
            req = sched.finish_rows(req_id, at)
        except ValueError as exc:
            on_bad(exc)
            req = None
        sink = _rows_sink(req, on_bad)
        run.end_unless(sink, start)
        if req is None or sink is None:
            continue  # rows of an unknown or closed request: dropped
        stop = start + at.size
        env_ids = req.env_ids[at]
        if isinstance(sink, Relayed):
            outlet = sink.outlet
            outlets.setdefault(id(outlet), (outlet, []))[1].append((sink, _positions(req, at), start, env_ids))
            if remember is not None:
                remember(block.part(env_ids, start, stop))
        elif isinstance(sink, RecvQueue):
            run.add(sink, env_ids, start, stop)
        else:
            deliver(sink, req, block.part(env_ids, start, stop), _positions(req, at))
    run.end()
    for outlet, segs in outlets.values():
        outlet.forward(block, segs)


def _positions(req: Request, at: np.ndarray) -> np.ndarray:
    """Where rows ``at`` (k,) of ``req`` stand in its caller's call, (k,)."""
    return req.positions[at] if req.positions is not None else at


class _RecvRun:
    """Consecutive rows of a block bound for one RecvQueue, delivered as one part: ``recv`` does not care
    which request a row answers, and one part costs less than one per request."""

    __slots__ = ("block", "deliver", "ids", "sink", "start", "stop")

    def __init__(self, block: Block, deliver: Deliver) -> None:
        self.block = block
        self.deliver = deliver
        self.sink: RecvQueue | None = None
        self.ids: list[np.ndarray] = []  # the env ids of each segment in the run
        self.start = self.stop = 0  # the run's rows in the block

    def add(self, sink: RecvQueue, env_ids: np.ndarray, start: int, stop: int) -> None:
        """Rows ``start:stop`` for ``env_ids``, bound for ``sink``, continue the run (or begin one)."""
        if not self.ids:
            self.sink, self.start = sink, start
        self.ids.append(env_ids)
        self.stop = stop

    def end_unless(self, sink: Sink | None, start: int) -> None:
        """Deliver the run unless a segment for ``sink`` at row ``start`` may continue it."""
        if self.ids and (sink is not self.sink or start != self.stop):
            self.end()

    def end(self) -> None:
        """Deliver the rows of the run, if any, and begin none."""
        if self.sink is not None and self.ids:
            ids = self.ids[0] if len(self.ids) == 1 else np.concatenate(self.ids)
            part = self.block.part(ids, self.start, self.stop)
            self.deliver(self.sink, None, part, None)
        self.sink, self.ids = None, []

"""Fixed-size messages for the steps whose rows all lie in shared memory: what a lock-step batch sends most.

A pool's own ``inline`` workers share its rows (:mod:`aioenv.transport.slab`): a step's actions are in the
slab before its request goes out, and the worker writes observations, rewards and flags back there. Such a
step's request carries nothing but which request it is and which envs it steps; its reply, when no env
failed and none had an info, nothing but the request's id. Encoding those as msgpack maps and parsing them
again cost the pool's process more than the socket calls that carry them, once per worker per batch, and a
lock-step pool's process is what its workers wait for on a machine with many cores. So they travel as
fixed-size frames instead:

- a step (:data:`STEP`): ``<B 0xC1><B "S"><H flags><I first env><I count><Q request id>``; it steps the
  envs ``first .. first + count - 1``, one contiguous run (a worker's envs are one run: see
  :meth:`aioenv.core.scheduler.Scheduler.place`); ``flags`` bit 0: each env's own info dict is wanted
  (the ``"ilist"`` of a step's header); bit 1 (:data:`FINALS`): the final observations of a ``same_step``
  pool may go to the slab's area of them (see :mod:`aioenv.transport.slab`), the reply then a DONE; bit 2
  (:data:`INFOS`): the envs' infos may go to the slab's info area (:mod:`aioenv.transport.slab_infos`); bit 3
  (:data:`QUIET`): the reply is a *quiet* record, below;
- its reply (:data:`DONE`): ``<B 0xC1><B "D"><6x><Q request id>``, the rows in the slab; with kind ``"I"``
  instead of ``"D"`` (:func:`done` with ``infos``), the rows and their infos, in the info area; a reply with
  other infos or errors is the protocol's RESULT over shared rows, as for any other step.

A worker started with the pool's *done pipe* (one pipe every local inline worker of the pool writes to, which
the pool reads many replies at a time from) writes a DONE there as a *record* (:data:`RECORD`) instead:
``<B 0xC1><B "R"><H flags><I worker slot><Q token><Q request id>``, 24 bytes (``flags`` 0, or :data:`INFOS_DONE`:
the infos are in the info area), one ``write`` each (a pipe never
interleaves writes of up to ``PIPE_BUF`` bytes, so records from many workers arrive whole). ``token`` is a
random number the pool gave that worker process alone, over its own pipe: a record is that worker's only when
its token is, since any process holding the pipe may write to it. :func:`read_records` takes what the pipe
brought apart, skipping bytes that are no record of a known worker and finding the next record after them.

A lock-step step of every env wakes the pool once, not once per worker (:data:`QUIET`). Each wake-up runs the
pool's loop, reads the pipe and books what it brought, with caches the workers just made cold: for envs whose
steps take as long as a MuJoCo model's, the workers answer one by one, and those wake-ups were about a third of
what the pool's process spent on a batch. So, for a call of ``k`` workers, the pool writes ``k - 1`` bytes to its
*countdown pipe* before it sends the steps, each step with the ``QUIET`` flag. A worker answers such a step as it
would any other, except that its DONE record goes to the *quiet pipe* (which the pool does not watch); then it
takes one byte of the countdown pipe (a non-blocking read of the one open file every worker shares), and when
there is none left it is the last of the call to answer: it writes a *wake* record (:func:`wake`, kind ``"K"``) to
the done pipe. The pool, woken, reads the done pipe, then the quiet pipe: every other worker of the call wrote its
record there before it took its byte, so before the last found none (the pipes' own locks order the writes and
reads), and the pool finds them all. Whatever else a worker answers a quiet step with (a RESULT, an ERROR, over its
own pipe), it takes its byte too. A worker that drains the countdown only wakes the pool earlier and more often.
A call that goes another way (a reply on a worker's own pipe, a worker that exited, a deadline) has the quiet pipe
read at once, and the pool watches it as it watches the done pipe until the next quiet call, which first empties
the countdown pipe of what was left; a worker that takes no byte (its end of the countdown closed under it) would
leave the last without its wake-up, so the pool gives up a quiet call still out after one to two seconds (see
:meth:`aioenv.core.coordinator.Coordinator._count_quietly` and ``_sweep_quiet``).

A ``thread`` worker's envs finish their steps one by one, each on its own thread, so the same pipe carries a
*row record* (:func:`row_record`) too: ``<B 0xC1><B "W"><H row><I worker slot><Q token><Q request id>``, written
by the env's thread itself once it has put that row of a step request into the slab, when the row has neither an
info nor an error (any other row goes in the worker's RESULT, see :mod:`workers.concurrent`). The row reaches the
pool with one write and one wake-up, where a RESULT went from the env's thread to the worker's loop and from
there to the pool: a hop, and a message encoded and parsed, fewer on each row's way.

Both begin with ``0xC1``, the one byte msgpack never uses, so neither can be taken for a header of the
protocol (whose messages begin with a msgpack map) nor the other way round. Only a coordinator and the
worker processes it started on pipes of their own (which map the slab) exchange them; a message over the
network is never one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from aioenv._hot import compiled

__all__ = [
    "DONE",
    "DONE_PIPE_EXECUTORS",
    "FINALS",
    "FRAMED_DONE_SIZE",
    "INFOS",
    "INFOS_DONE",
    "INFO_LIST",
    "MARK",
    "QUIET",
    "STEP",
    "done",
    "framed_step",
    "framed_steps",
    "is_lane",
    "read_done",
    "read_framed_done",
    "read_framed_done_infos",
    "py_framed_steps",
    "py_read_records",
    "read_records",
    "read_step",
    "record",
    "row_record",
    "step",
    "step_flags",
    "wake",
    "RECORD",
    "ReadRecords",
    "ROW_RECORD_ROWS",
]

#: The first byte of every lane message: the one byte msgpack never uses.
MARK = 0xC1
#: A step's frame: mark, ``b"S"``, flags, first env id, count, request id.
STEP = struct.Struct("<BBHIIQ")
#: A step's reply with every row in the slab and nothing else to say: mark, ``b"D"``, padding, request id.
DONE = struct.Struct("<BB6xQ")
#: A record of the pool's done pipe: mark, kind, flags, worker slot, its token, request id. A DONE's kind is ``b"R"``
#: and its flags 0; a row record's kind is ``b"W"`` and its flags the row.
RECORD = struct.Struct("<BBHIQQ")
#: The executors whose workers write the pool's done pipe: ``inline`` workers their DONEs, ``thread`` workers'
#: env threads their rows' records (an ``async`` worker's rows answer in its RESULTs).
DONE_PIPE_EXECUTORS = frozenset({"inline", "thread"})
#: The rows a row record can name: ``0 .. ROW_RECORD_ROWS - 1`` (a later row goes in a RESULT).
ROW_RECORD_ROWS = 1 << 16
#: ``flags`` bit: the caller wants each env's own info dict (``"ilist"``).
INFO_LIST = 1
#: ``flags`` bit: the pool takes the ended envs' final observations from the slab (``same_step``, see above).
FINALS = 2
#: ``flags`` bit: the envs' infos may go to the slab's info area, the reply then a DONE that says so.
INFOS = 4
#: ``flags`` bit: the step is one of a quiet call: its DONE goes to the quiet pipe, and the worker that takes the
#: countdown's last byte wakes the pool (see above).
QUIET = 8
#: A DONE record's ``flags``: the rows' infos are in the slab's info area.
INFOS_DONE = 1
_S = ord("S")
_D = ord("D")
_I = ord("I")
_R = ord("R")
_W = ord("W")
_K = ord("K")
_MARK_BYTE = bytes([MARK])
# A one-frame message on a pipe: ``<u32 1><u64 size>`` then the frame (see aioenv.transport.pipe).
_FRAMED_STEP = struct.Struct("<IQ" + STEP.format.lstrip("<"))
_FRAMED_DONE = struct.Struct("<IQ" + DONE.format.lstrip("<"))
# The same 28 bytes as three words and the id: the first two words (framing, mark, kind and two bytes of
# padding) and the third (the rest of the padding) of every framed DONE are these, so one unpack and two
# comparisons tell one (its reader runs once per worker per lock-step batch).
_FRAMED_DONE_WORDS = struct.Struct("<QQIQ")
_DONE_A, _DONE_B, _, _ = _FRAMED_DONE_WORDS.unpack(_FRAMED_DONE.pack(1, DONE.size, MARK, _D, 0))
#: Bytes of a pipe's message holding exactly a :data:`DONE`, framing included.
FRAMED_DONE_SIZE = _FRAMED_DONE.size


def step_flags(info_list: bool = False, finals: bool = False, infos: bool = False, quiet: bool = False) -> int:
    """The flag bits of a step (the module's docstring) or-ed together: a step's ``flags`` field, and what
    :func:`framed_steps` takes."""
    return (
        (INFO_LIST if info_list else 0) | (FINALS if finals else 0) | (INFOS if infos else 0) | (QUIET if quiet else 0)
    )


def step(
    req_id: int,
    first: int,
    count: int,
    info_list: bool = False,
    finals: bool = False,
    infos: bool = False,
    quiet: bool = False,
) -> bytes:
    """The frame of a step of envs ``first .. first + count - 1`` over shared rows, for request ``req_id``
    (``info_list``, ``finals``, ``infos``, ``quiet``: the flags of the module's docstring)."""
    return STEP.pack(MARK, _S, step_flags(info_list, finals, infos, quiet), first, count, req_id)


def framed_step(
    req_id: int,
    first: int,
    count: int,
    info_list: bool = False,
    finals: bool = False,
    infos: bool = False,
    quiet: bool = False,
) -> bytes:
    """:func:`step` as a pipe carries it (:mod:`aioenv.transport.pipe`'s framing of a one-frame message): the
    bytes to write to a worker's pipe as they are."""
    flags = step_flags(info_list, finals, infos, quiet)
    return _FRAMED_STEP.pack(1, STEP.size, MARK, _S, flags, first, count, req_id)


def py_framed_steps(base: int, firsts: list[int], counts: list[int], flags: int) -> list[bytes]:
    """:func:`framed_step` of each message ``k`` of a lane call: request ``base + k`` for the envs ``firsts[k] ..
    firsts[k] + counts[k] - 1``, ``flags`` the step's flag bits or-ed together (:func:`step_flags`); the
    pure-Python twin of :func:`framed_steps` (see :mod:`aioenv._hot`)."""
    pack, size = _FRAMED_STEP.pack, STEP.size
    return [
        pack(1, size, MARK, _S, flags, first, count, base + k)
        for k, (first, count) in enumerate(zip(firsts, counts, strict=True))
    ]


def read_framed_done(data: memoryview) -> int | None:
    """The request id of a pipe's message holding exactly a :data:`DONE`, framing included, in the first
    :data:`FRAMED_DONE_SIZE` bytes of ``data`` (what arrived), or None when they hold anything else."""
    if len(data) < FRAMED_DONE_SIZE:
        return None
    a, b, c, req_id = _FRAMED_DONE_WORDS.unpack_from(data)
    if a == _DONE_A and b == _DONE_B and c == 0:
        return req_id  # type: ignore[no-any-return]
    return _framed_done_of(data, _D)  # (padding that is not zero)


def read_framed_done_infos(data: memoryview) -> int | None:
    """:func:`read_framed_done` of a DONE whose infos are in the info area (kind ``"I"``), or None."""
    if len(data) < FRAMED_DONE_SIZE:
        return None
    return _framed_done_of(data, _I)


def _framed_done_of(data: memoryview, want: int) -> int | None:
    """The request id of the framed DONE of kind ``want`` in the first :data:`FRAMED_DONE_SIZE` bytes of ``data``
    (there are that many), read field by field, or None when they hold anything else."""
    count, size, mark, kind, req_id = _FRAMED_DONE.unpack_from(data)
    if count != 1 or size != DONE.size or mark != MARK or kind != want:
        return None
    return int(req_id)


def done(req_id: int, infos: bool = False) -> bytes:
    """The frame of a step's reply whose rows are all in the slab, with no errors and no infos (``infos``: with
    their infos in the slab's info area)."""
    return DONE.pack(MARK, _I if infos else _D, req_id)


def is_lane(frame: memoryview | bytes) -> bool:
    """Whether ``frame`` (the first frame of a message) is a lane message rather than a msgpack header."""
    return len(frame) > 0 and frame[0] == MARK


def read_step(frame: memoryview | bytes) -> tuple[int, int, int, bool, bool, bool, bool]:
    """``(request id, first env, count, info_list, finals, infos, quiet)`` of a step's frame.

    Raises:
        ValueError: ``frame`` is no lane step (its size or kind differ), naming what arrived.
    """
    if len(frame) != STEP.size:
        raise ValueError(f"a lane step is {STEP.size} bytes, got {len(frame)}")
    _, kind, flags, first, count, req_id = STEP.unpack(frame)
    if kind != _S:
        raise ValueError(f"expected a lane step (kind {chr(_S)!r}), got kind {chr(kind)!r}")
    return (
        req_id,
        first,
        count,
        bool(flags & INFO_LIST),
        bool(flags & FINALS),
        bool(flags & INFOS),
        bool(flags & QUIET),
    )


def read_done(frame: memoryview | bytes) -> tuple[int, bool] | None:
    """``(request id, infos)`` of a step's reply (:data:`DONE`; ``infos``: they are in the info area), or None when
    ``frame`` is no such reply."""
    if len(frame) != DONE.size or frame[1] not in (_D, _I):
        return None
    req_id: int = DONE.unpack(frame)[2]
    return req_id, frame[1] == _I


def record(slot: int, token: int, req_id: int, infos: bool = False) -> bytes:
    """A DONE of request ``req_id`` as the worker of ``slot`` whose token is ``token`` writes it to the done pipe
    (``infos``: the rows' infos are in the info area)."""
    return RECORD.pack(MARK, _R, INFOS_DONE if infos else 0, slot, token, req_id)


def row_record(slot: int, token: int, req_id: int, row: int) -> bytes:
    """Row ``row`` (``0 <= row < ROW_RECORD_ROWS``) of the step request ``req_id`` is in the slab, with no
    info and no error: as the worker of ``slot`` whose token is ``token`` writes it to the done pipe."""
    return RECORD.pack(MARK, _W, row, slot, token, req_id)


def wake(slot: int, token: int, req_id: int) -> bytes:
    """The record the last worker of a quiet call (:data:`QUIET`) writes to the done pipe: read the quiet pipe now
    (``req_id``: its own step's id, which the record answers nothing of)."""
    return RECORD.pack(MARK, _K, 0, slot, token, req_id)


_Read = tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int, int]], int, int]
#: What :func:`read_records` is: ``(data, tokens) -> (records, infos, rows, used, skipped)``.
ReadRecords = Callable[[bytes, list[int]], _Read]


def py_read_records(data: bytes, tokens: list[int]) -> _Read:
    """The pure-Python twin of :func:`read_records` (see :mod:`aioenv._hot`), which defines it.

    The records at the start of ``data`` (what the done pipe brought, after what an earlier read left):
    ``(records, infos, rows, used, skipped)``.

    ``records``: ``(slot, request id)`` of each DONE record, ``infos``: the same of each DONE record whose infos are in
    the info area (:data:`INFOS_DONE`), ``rows``: ``(slot, request id, row)`` of each row record (a wake record,
    :func:`wake`, is taken and adds nothing), each counted only when its token is ``tokens[slot]`` (a token of 0:
    that slot has no worker that may write, so nothing is its record); ``used``: the bytes taken (what is left,
    fewer than a record's, begins the next read's); ``skipped``: bytes among them that were no such record (garbage,
    or a record with another token), each dropped and the next record looked for from the next ``0xC1`` on."""
    out: list[tuple[int, int]] = []
    infos: list[tuple[int, int]] = []
    rows: list[tuple[int, int, int]] = []
    pos, end, size, skipped = 0, len(data), RECORD.size, 0
    known = len(tokens)
    view = memoryview(data)
    while end - pos >= size:
        # The records back to back from here (what the pipe holds unless a worker wrote garbage), in one unpacking
        # pass checked as it goes; past the first bytes that are no record, the next 0xC1 starts another pass.
        whole = pos + (end - pos) // size * size
        for mark, kind, flags, slot, token, req_id in RECORD.iter_unpack(view[pos:whole]):
            if mark != MARK or slot >= known or not token or tokens[slot] != token:
                break
            if kind == _R and not flags:
                out.append((slot, req_id))
            elif kind == _R and flags == INFOS_DONE:
                infos.append((slot, req_id))
            elif kind == _W:
                rows.append((slot, req_id, flags))
            elif kind != _K or flags:
                break
                break
            pos += size
        else:
            break  # every whole record taken: what is left is shorter than one
        nxt = data.find(_MARK_BYTE, pos + 1)
        nxt = end if nxt < 0 else nxt
        skipped += nxt - pos
        pos = nxt
    return out, infos, rows, pos, skipped


#: :func:`py_framed_steps`, compiled where :mod:`aioenv._hot` found the compiled part built.
framed_steps: Callable[[int, list[int], list[int], int], list[bytes]] = (
    py_framed_steps if compiled is None else compiled.framed_steps
)
#: :func:`py_read_records`, compiled where :mod:`aioenv._hot` found the compiled part built: ``(records, infos, rows,
#: used, skipped)`` of the done pipe's ``data`` (``tokens[slot]``: the token of the worker of ``slot``).
read_records: ReadRecords = py_read_records if compiled is None else compiled.read_records

"""The lane's fixed-size messages (``aioenv.wire.lane``): what they carry, how a pipe frames them, and that no
message of the protocol can be taken for one."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioenv._hot import load
from aioenv.transport.pipe import FrameReader, framed
from aioenv.wire import lane
from aioenv.wire.protocol import Op, encode

ids = st.integers(0, 2**63 - 1)
envs = st.integers(0, 2**32 - 1)


@given(ids, envs, envs, st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_step_reads_back_as_it_was_written(
    req_id: int, first: int, count: int, info_list: bool, finals: bool, infos: bool, quiet: bool
) -> None:
    frame = lane.step(req_id, first, count, info_list, finals, infos, quiet)
    assert len(frame) == lane.STEP.size
    assert lane.is_lane(frame)
    assert lane.read_step(frame) == (req_id, first, count, info_list, finals, infos, quiet)
    assert lane.read_done(frame) is None  # a step is no reply


@given(ids, envs, envs, st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_framed_step_is_what_a_pipe_makes_of_the_step(
    req_id: int, first: int, count: int, info_list: bool, finals: bool, infos: bool, quiet: bool
) -> None:
    frame = lane.step(req_id, first, count, info_list, finals, infos, quiet)
    assert lane.framed_step(req_id, first, count, info_list, finals, infos, quiet) == b"".join(framed([frame])[0])
    reader = FrameReader()
    data = lane.framed_step(req_id, first, count, info_list, finals, infos, quiet)
    reader.buffer()[: len(data)] = data
    [[got]] = reader.advance(len(data))
    assert lane.read_step(got) == (req_id, first, count, info_list, finals, infos, quiet)


@given(ids, st.booleans())
def test_a_done_reads_back_framed_or_not(req_id: int, infos: bool) -> None:
    frame = lane.done(req_id, infos)
    assert lane.is_lane(frame)
    assert lane.read_done(frame) == (req_id, infos)
    data = b"".join(framed([frame])[0])
    assert len(data) == lane.FRAMED_DONE_SIZE
    # each reader takes its own kind only: a DONE with its infos in the info area is no plain DONE, nor the reverse
    plain, with_infos = (None, req_id) if infos else (req_id, None)
    for more in (b"", b"more bytes after it"):  # reads its own bytes only
        assert lane.read_framed_done(memoryview(data + more)) == plain
        assert lane.read_framed_done_infos(memoryview(data + more)) == with_infos


def test_what_is_no_done_reads_as_none() -> None:
    done = b"".join(framed([lane.done(7)])[0])
    two_frames = b"".join(framed([lane.done(7)[:8], lane.done(7)[8:]])[0])
    header = encode(Op.RESULT, {"id": 7})[0]
    others = [
        done[:-1],  # too short
        two_frames,  # the same bytes in two frames
        b"".join(framed([bytes(lane.DONE.size)])[0]),  # a frame of its size that is no lane message
        b"".join(framed([lane.step(7, 0, 1)[: lane.DONE.size]])[0]),  # a step's kind
    ]
    for data in others:
        assert lane.read_framed_done(memoryview(data)) is None, data
        assert lane.read_framed_done_infos(memoryview(data)) is None, data
    assert lane.read_done(header) is None


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        (b"\xc1S", "a lane step is 20 bytes, got 2"),
        (lane.done(5) + b"1234", "expected a lane step (kind 'S'), got kind 'D'"),
    ],
)
def test_a_frame_that_is_no_step_is_refused_with_what_arrived(frame: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        lane.read_step(frame)


@pytest.mark.parametrize(
    "fields",
    [
        {"id": 1},
        {"id": 2**40, "env": list(range(300)), "sh": 1},
        {"id": 3, "info": [{"x": np.float32(1.5)}], "err": {0: {"type": "RuntimeError"}}},
    ],
)
def test_no_message_of_the_protocol_begins_as_a_lane_message(fields: dict[str, object]) -> None:
    for op in (Op.RESULT, Op.STEP, Op.ERROR, Op.HELLO):
        header = encode(op, fields)[0]
        assert not lane.is_lane(header)


TOKENS = [0x1D2C3B4A59687706, 0, 0x0F1E2D3C4B5A6978]  # slot 1 has no worker that may write
_COMPILED = load()
#: The pure-Python twin, and the compiled function where it was built (tests/core/test_speedups.py says it is here).
READ_RECORDS = [lane.py_read_records] + ([] if _COMPILED is None else [_COMPILED.read_records])


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 2]),
            st.integers(1, 2**64 - 1),
            # None: a DONE, -1: a DONE with its infos in the info area, -2: a wake record, else a row record of that row
            st.none() | st.just(-1) | st.just(-2) | st.integers(0, lane.ROW_RECORD_ROWS - 1),
            st.binary(max_size=30),
        ),
        max_size=12,
    ),
    st.integers(1, 97),
)
@pytest.mark.parametrize("read_records", READ_RECORDS)
def test_records_are_read_whole_across_reads_and_garbage_between_them_is_skipped(
    read_records: lane.ReadRecords, written: list[tuple[int, int, int | None, bytes]], cut: int
) -> None:
    stream = b"".join(
        (
            lane.record(slot, TOKENS[slot], req_id, infos=row == -1)
            if row is None or row == -1
            else lane.wake(slot, TOKENS[slot], req_id)
            if row == -2
            else lane.row_record(slot, TOKENS[slot], req_id, row)
        )
        + junk
        for slot, req_id, row, junk in written
    )
    got: list[tuple[int, int]] = []
    got_infos: list[tuple[int, int]] = []
    got_rows: list[tuple[int, int, int]] = []
    skipped = 0
    rest = b""
    for at in range(0, len(stream) + 1, cut):  # what reads of ``cut`` bytes bring, each after what the last left
        records, with_infos, rows, used, skip = read_records(rest + stream[at : at + cut], TOKENS)
        got += records
        got_infos += with_infos
        got_rows += rows
        skipped += skip
        rest = (rest + stream[at : at + cut])[used:]
        assert len(rest) < lane.RECORD.size
    assert got == [(slot, req_id) for slot, req_id, row, _ in written if row is None]
    assert got_infos == [(slot, req_id) for slot, req_id, row, _ in written if row == -1]
    assert got_rows == [(slot, req_id, row) for slot, req_id, row, _ in written if row is not None and row >= 0]
    assert skipped + len(rest) == sum(len(junk) for *_, junk in written)


@pytest.mark.parametrize("read_records", READ_RECORDS)
def test_a_record_with_a_token_not_its_slots_is_no_record(read_records: lane.ReadRecords) -> None:
    stream = b"".join(
        [
            lane.record(0, TOKENS[2], 5),  # another slot's token
            lane.record(1, 0, 6),  # a slot with no worker that may write: no token is its
            lane.record(3, 1, 7),  # no such slot
            lane.row_record(0, TOKENS[2], 9, 1),  # a row record with another slot's token
            lane.RECORD.pack(lane.MARK, ord("R"), 2, 2, TOKENS[2], 4),  # a DONE with flags it does not have
            lane.record(0, TOKENS[2], 11, infos=True),  # a DONE with infos, another slot's token
            lane.RECORD.pack(lane.MARK, ord("X"), 0, 2, TOKENS[2], 4),  # no kind of record
            lane.RECORD.pack(lane.MARK, ord("K"), 1, 2, TOKENS[2], 4),  # a wake record with flags it does not have
            lane.wake(2, TOKENS[2], 13),  # a wake record: taken, adds nothing
            lane.record(2, TOKENS[2], 8),
            lane.record(2, TOKENS[2], 12, infos=True),
            lane.row_record(2, TOKENS[2], 10, 3),
        ]
    )
    got = read_records(stream, TOKENS)
    assert got == ([(2, 8)], [(2, 12)], [(2, 10, 3)], len(stream), 8 * lane.RECORD.size)

"""What a pool reads from its done pipe (:func:`aioenv.wire.lane.read_records`), as it reads it: for tests that
show which replies went as lane records."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from aioenv.wire import lane


class Records(NamedTuple):
    """The records taken so far: ``plain`` DONEs and DONEs whose ``infos`` are in the info area, ``(slot, request
    id)``; row records, ``(slot, request id, row)``."""

    plain: list[tuple[int, int]]
    infos: list[tuple[int, int]]
    rows: list[tuple[int, int, int]]


def record_reads(monkeypatch: pytest.MonkeyPatch) -> Records:
    """Count, until ``monkeypatch`` undoes it, every record the pools of this process read from their done pipes."""
    got = Records([], [], [])
    read_records = lane.read_records

    def counting(
        data: bytes, tokens: list[int]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int, int]], int, int]:
        out = read_records(data, tokens)
        got.plain.extend(out[0])
        got.infos.extend(out[1])
        got.rows.extend(out[2])
        return out

    monkeypatch.setattr(lane, "read_records", counting)
    return got

"""Batched infos cross the wire with their numeric columns as raw arrays (aioenv.wire.info_wire), and
``whole_info`` hands a reply's infos over as gymnasium batches them.

Every batched info, whatever its keys, must come out of encode -> decode exactly as it went in (keys, order,
dtypes, masks, nested dicts, object columns), and a reply taken whole must give what gymnasium's
``_add_info`` gives row by row. A peer's malformed references are refused with a ValueError that says what
was expected."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from aioenv.wire.info_wire import binfo_from_wire, binfo_of, binfo_to_wire, put_binfo
from aioenv.wire.infos import batch_infos, merge_infos, whole_info
from aioenv.wire.protocol import Key, Op, decode, encode, pack
from tests.support.compare import assert_same
from tests.wire.test_infos import _env_info, reference


def _through_wire(binfo: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(decoded header, batched info read back)`` of a RESULT carrying ``binfo`` next to one obs array."""
    arrays: list[Any] = [np.zeros((3, 2))]
    fields: dict[str, Any] = {Key.ID: 1, Key.OBS: [0]}
    put_binfo(fields, binfo, arrays)
    frames = [bytes(frame) for frame in encode(Op.RESULT, fields, arrays)]  # as a socket delivers them
    header, decoded = decode(frames)
    return header, binfo_of(header, decoded)


def _crosses_the_wire(info: Any) -> bool:
    try:
        pack(info)
    except TypeError:  # an object of a type the wire does not carry (the strategy's Opaque)
        return False
    return True


def _ant_like(num_rows: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [
        {
            "x_position": np.float64(rng.normal()),
            "reward_ctrl": np.float32(rng.normal()),
            "steps": i,
            "label": f"env{i}",
            "contact": rng.normal(size=3),
            "nested": {"a": 1.5 * i, "b": "x"},
        }
        for i in range(num_rows)
    ]


def test_numeric_columns_travel_as_arrays_and_the_rest_in_the_header() -> None:
    binfo = batch_infos(_ant_like(3), 3)
    header, back = _through_wire(binfo)
    wire = header[Key.BATCHED_INFO]
    assert sorted(header[Key.INFO_COLUMNS]) == ["contact", "reward_ctrl", "steps", "x_position"]
    assert all(wire[key] is None for key in header[Key.INFO_COLUMNS]), "a column's key keeps its place, as None"
    assert wire["label"].tolist() == ["env0", "env1", "env2"], "object columns stay in the header"
    assert isinstance(wire["nested"], dict), "nested dicts stay in the header"
    assert list(back) == list(binfo), "the keys keep their order"
    assert_same(back, binfo, "batched info through the wire")
    assert back["reward_ctrl"].dtype == np.float32
    assert back["contact"].shape == (3, 3)


def test_a_batched_info_without_numeric_columns_travels_as_before() -> None:
    binfo = batch_infos([{"s": "a"}, {"s": "b"}], 2)
    arrays: list[Any] = []
    wire, refs = binfo_to_wire(binfo, arrays)
    assert (wire, refs, arrays) == (binfo, None, [])
    assert binfo_from_wire(binfo, None, []) is binfo


def test_to_wire_leaves_its_input_alone() -> None:
    binfo = batch_infos(_ant_like(2), 2)
    before = dict(binfo)
    binfo_to_wire(binfo, [])
    assert binfo.keys() == before.keys()
    assert all(binfo[key] is before[key] for key in binfo)


@settings(max_examples=100, deadline=None)
@given(num_rows=st.integers(1, 6), data=st.data())
def test_property_any_info_survives_the_wire_and_a_whole_take_matches_gymnasium(
    num_rows: int, data: st.DataObject
) -> None:
    infos = data.draw(st.lists(st.one_of(st.none(), _env_info()), min_size=num_rows, max_size=num_rows))
    assume(_crosses_the_wire(infos))
    binfo = batch_infos(infos, num_rows)
    _, back = _through_wire(binfo)
    assert list(back) == list(binfo)
    assert_same(back, binfo, "batched info through the wire")
    try:
        expected = reference([(row, info) for row, info in enumerate(infos) if info], num_rows)
    except (ValueError, TypeError, OverflowError):  # gymnasium cannot batch these rows: nor may the pool
        with pytest.raises((ValueError, TypeError, OverflowError)):  # (which row it trips on first may differ)
            whole_info(back, num_rows)
        return
    assert_same(whole_info(back, num_rows), expected, "whole_info")
    assert_same(merge_infos([(back, np.arange(num_rows))], num_rows), expected, "merge_infos")


@pytest.mark.parametrize(
    ("binfo", "refs", "match"),
    [
        ({"a": None}, [["a", 0]], "'bcol' must map info keys to arrays"),
        ([None], {"a": 0}, "'bcol' must map info keys to arrays"),
        ({"b": None}, {"a": 0}, "names info key 'a', which 'binfo' does not hold as None"),
        ({"a": [1, 2]}, {"a": 0}, "names info key 'a', which 'binfo' does not hold as None"),
        ({"a": None}, {"a": 5}, "refers info key 'a' to array 5, not one of 1"),
        ({"a": None}, {"a": -1}, "refers info key 'a' to array -1"),
        ({"a": None}, {"a": "0"}, "refers info key 'a' to array '0'"),
    ],
)
def test_malformed_references_are_refused(binfo: Any, refs: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        binfo_from_wire(binfo, refs, [np.zeros(2)])

"""Properties of the spaces codec over spaces hypothesis makes up (nested Dict/Tuple of every leaf kind):
a description survives msgpack and rebuilds the same space; a batch of samples crosses the wire as raw
arrays and comes back as gymnasium batches it; and arbitrary values given as a description, or as an
error description, never raise anything but the documented error."""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces as gs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioenv._compat import DISCRETE_TAKES_DTYPE, discrete_space
from aioenv.errors import AioEnvError, InvalidAction
from aioenv.wire.checks import SMALL_BATCH
from aioenv.wire.errors import from_wire
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_from_wire, leaves_to_wire
from aioenv.wire.spaces import (
    check_actions,
    describe_space,
    empty_batch,
    from_leaves,
    leaf_specs,
    row_writer,
    space_from_description,
)
from tests.wire.test_protocol import VALUES
from tests.wire.test_spaces import _assert_same, _gym_batch, _msgpack_roundtrip, _sample

BOX_DTYPES = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8]
SHAPES = st.lists(st.integers(1, 3), max_size=3).map(tuple)


@st.composite
def leaf_spaces(draw: st.DrawFn) -> gs.Space[Any]:
    """One space of each leaf kind, with random sizes, dtypes, bounds and starts."""
    kind = draw(st.sampled_from(["box", "discrete", "multidiscrete", "multibinary", "text"]))
    if kind == "box":
        dtype = np.dtype(draw(st.sampled_from(BOX_DTYPES)))
        if dtype.kind == "f":
            low = draw(st.sampled_from([-np.inf, -2.5, 0.0]))
            high = draw(st.sampled_from([np.inf, 1.0, 7.5]))
        else:
            info = np.iinfo(dtype)
            low = draw(st.integers(max(info.min, -100), 0))
            high = draw(st.integers(low, min(info.max, low + 200)))
        return gs.Box(low, high, draw(SHAPES), dtype)
    if kind == "discrete":
        return gs.Discrete(draw(st.integers(1, 20)), start=draw(st.integers(-5, 5)))
    if kind == "multidiscrete":
        nvec = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
        return gs.MultiDiscrete(nvec, start=draw(st.lists(st.integers(-3, 3), min_size=len(nvec), max_size=len(nvec))))
    if kind == "multibinary":
        return gs.MultiBinary(draw(st.integers(1, 6)))
    longest = draw(st.integers(1, 6))
    charset = draw(st.sampled_from(["ab", "xyz01", string.ascii_lowercase]))
    return gs.Text(longest, min_length=draw(st.integers(0, longest)), charset=charset)


SPACES = st.recursive(
    leaf_spaces(),
    lambda inner: st.one_of(
        st.dictionaries(st.text("abcdef", min_size=1, max_size=3), inner, min_size=1, max_size=3).map(gs.Dict),
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: gs.Tuple(parts)),
    ),
    max_leaves=6,
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(space=SPACES)
def test_a_description_survives_msgpack_and_rebuilds_the_space(space: gs.Space[Any]) -> None:
    rebuilt = space_from_description(_msgpack_roundtrip(describe_space(space)))
    assert rebuilt == space
    assert type(rebuilt) is type(space)
    assert leaf_specs(rebuilt) == leaf_specs(space)


@SETTINGS
@given(space=SPACES, seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 5))
def test_a_batch_crosses_the_wire_and_is_what_gymnasium_batches(space: gs.Space[Any], seed: int, rows: int) -> None:
    items = _sample(space, rows, seed)
    leaves = empty_batch(space, rows)
    write = row_writer(space)
    for i, item in enumerate(items):
        write(leaves, i, item)
    arrays: list[np.ndarray] = []
    frames = encode(Op.RESULT, {Key.OBS: leaves_to_wire(leaves, arrays)}, arrays)
    header, received = decode([bytes(memoryview(f)) for f in frames])
    _assert_same(from_leaves(space, leaves_from_wire(header[Key.OBS], received)), _gym_batch(space, items))


@settings(max_examples=300, deadline=None)
@given(desc=st.one_of(VALUES, st.dictionaries(st.sampled_from(["type", "n", "shape", "dtype", "subspaces"]), VALUES)))
def test_any_value_as_a_description_is_a_space_or_a_value_error(desc: Any) -> None:
    try:
        space = space_from_description(desc)
    except ValueError as exc:
        assert str(exc)  # noqa: PT017 - it must say what is wrong
    else:
        assert isinstance(space, gs.Space)


@settings(max_examples=300, deadline=None)
@given(
    desc=st.one_of(VALUES, st.dictionaries(st.sampled_from(["kind", "env_id", "message", "final", "exitcode"]), VALUES))
)
def test_any_value_as_an_error_description_is_an_error_of_the_tree(desc: Any) -> None:
    assert isinstance(from_wire(desc), AioEnvError)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 20),
    start=st.integers(-5, 5),
    # gymnasium 1.0's Discrete is int64 only (dtype came in 1.1)
    dtype=st.sampled_from([np.int64, np.int32, np.int8] if DISCRETE_TAKES_DTYPE else [np.int64]),
    rows=st.integers(1, 2 * SMALL_BATCH + 8),
    data=st.data(),
)
def test_a_discrete_batch_is_checked_alike_on_both_sides_of_the_small_batch_path(
    n: int, start: int, dtype: type, rows: int, data: st.DataObject
) -> None:
    """Batches of up to SMALL_BATCH rows are range-checked in Python, larger ones with numpy: either way an
    action batch passes exactly when every value is in the space, as is, and the error names the first env
    whose action is not."""
    space = discrete_space(n, start, np.dtype(dtype))
    values = data.draw(st.lists(st.integers(start - 3, start + n + 2), min_size=rows, max_size=rows))
    actions = np.array(values, dtype=dtype)
    env_ids = np.arange(100, 100 + rows)
    bad = [i for i, v in enumerate(values) if not start <= v < start + n]
    if not bad:
        assert check_actions(space, actions, env_ids)[0] is actions
        return
    with pytest.raises(InvalidAction) as info:
        check_actions(space, actions, env_ids)
    assert info.value.env_id == 100 + bad[0], (values, info.value)
    assert f"got {values[bad[0]]}" in str(info.value)

"""Tests for aioenv.wire.spaces: descriptions, leaves, row access and action checks."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv._compat import DICT_TAKES_SORT_KEYS, DISCRETE_TAKES_DTYPE
from aioenv.errors import InvalidAction
from aioenv.wire.checks import SMALL_BATCH
from aioenv.wire.protocol import Key, Op, decode, encode
from aioenv.wire.spaces import (
    check_actions,
    concat_leaves,
    describe_space,
    empty_batch,
    from_leaves,
    leaf_specs,
    row_reader,
    row_writer,
    space_from_description,
    take_rows,
    to_leaves,
    write_row,
)

B = 5
ENV_IDS = np.array([10, 11, 12, 13, 14])


def _spaces() -> dict[str, gym.Space[Any]]:
    inf = np.inf
    return (
        {
            "box": gs.Box(-1.0, 1.0, (3,), np.float32),
            "box_perdim_inf": gs.Box(np.array([-1.0, -inf, 0.0]), np.array([1.0, inf, 5.5]), dtype=np.float64),
            "box_uint8_2d": gs.Box(0, 255, (2, 2), np.uint8),
            "box_scalar_free": gs.Box(-inf, inf, (), np.float32),
            "box_int_perdim": gs.Box(np.array([0, -5]), np.array([3, 5]), dtype=np.int32),
            "discrete": gs.Discrete(5),
            "discrete_start": gs.Discrete(3, start=-2),
            "multidiscrete": gs.MultiDiscrete([3, 4]),
            "multidiscrete_start_2d": gs.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, 0], [-1, 2]])),
            "multibinary": gs.MultiBinary(4),
            "multibinary_tuple": gs.MultiBinary([2, 3]),
            "multibinary_list1": gs.MultiBinary([3]),
            "text": gs.Text(5),
            "text_charset": gs.Text(6, min_length=2, charset="zab"),
            "dict_sorted": gs.Dict({"pos": gs.Box(-2, 2, (2,)), "id": gs.Discrete(3)}),
            "tuple": gs.Tuple((gs.Discrete(3), gs.Box(0, 1, (2,)))),
            "nested": gs.Dict(
                {
                    "a": gs.Tuple((gs.Text(4, charset="xy"), gs.MultiBinary(2), gs.Dict({"c": gs.Discrete(2)}))),
                    "b": gs.Box(-1, 1, (1,)),
                }
            ),
        }
        | (
            # gymnasium 1.4 added Dict(sort_keys=...); before, its own batch_space sorted every Dict's keys
            {"dict_unsorted": gs.Dict({"z": gs.Discrete(2), "a": gs.MultiBinary(2)}, sort_keys=False)}
            if DICT_TAKES_SORT_KEYS
            else {}
        )
        | (
            # gymnasium 1.1 added Discrete(dtype=...)
            {"discrete_int32": gs.Discrete(4, start=7, dtype=np.int32)} if DISCRETE_TAKES_DTYPE else {}
        )
    )


SPACES = _spaces()
IDS = list(SPACES)


# ------------------------------------------------------------------ helpers
def _pack_nd(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {"__nd__": [obj.dtype.str, list(obj.shape), obj.tobytes()]}
    raise TypeError(f"not msgpack-able: {type(obj).__name__}")


def _unpack_nd(obj: dict[str, Any]) -> Any:
    if "__nd__" in obj:
        dtype, shape, data = obj["__nd__"]
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return obj


def _msgpack_roundtrip(desc: Any) -> Any:
    # strict_types: a tuple (or any non-plain value) would reach `default` and fail.
    packed = msgpack.packb(desc, default=_pack_nd, strict_types=True)
    return msgpack.unpackb(packed, object_hook=_unpack_nd, strict_map_key=False)


def _assert_same(ours: Any, theirs: Any) -> None:
    """Equal values with identical types (Text: our object array vs gymnasium's tuple)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict)
        assert list(ours) == list(theirs)
        for key in theirs:
            _assert_same(ours[key], theirs[key])
    elif isinstance(theirs, tuple) and isinstance(ours, np.ndarray):
        assert ours.dtype == object
        assert ours.shape == (len(theirs),)
        assert all(type(a) is str and a == b for a, b in zip(ours, theirs, strict=True))
    elif isinstance(theirs, tuple):
        assert type(ours) is tuple
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _assert_same(a, b)
    elif isinstance(theirs, np.ndarray):
        assert type(ours) is np.ndarray
        assert ours.dtype == theirs.dtype
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert type(ours) is type(theirs), (type(ours), type(theirs))
        assert ours == theirs


def _sample(space: gym.Space[Any], n: int, seed: int = 0) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _contains(space: gym.Space[Any], value: Any) -> bool:
    if isinstance(space, gs.Box) and isinstance(value, np.generic):
        value = np.asarray(value)  # shape-() Box rows are numpy scalars, like iterate's
    return space.contains(value)


def _key_order(space: gym.Space[Any]) -> list[Any]:
    """Every ``Dict``'s keys in their order, depth first (a Tuple's children in turn)."""
    if isinstance(space, gs.Dict):
        return [(key, _key_order(sub)) for key, sub in space.spaces.items()]
    if isinstance(space, gs.Tuple):
        return [_key_order(sub) for sub in space.spaces]
    return []


def _gym_batch(space: gym.Space[Any], items: list[Any]) -> Any:
    return concatenate(space, items, create_empty_array(space, len(items), fn=np.zeros))


# -------------------------------------------------------------- descriptions
@pytest.mark.parametrize("name", IDS)
def test_describe_roundtrip(name: str) -> None:
    space = SPACES[name]
    desc = describe_space(space)
    rebuilt = space_from_description(desc)
    assert rebuilt == space
    assert type(rebuilt) is type(space)
    assert _key_order(rebuilt) == _key_order(space)  # Dict equality alone ignores the order of its keys
    assert leaf_specs(rebuilt) == leaf_specs(space)
    # the description survives msgpack (plain values + ndarrays only)
    again = space_from_description(_msgpack_roundtrip(desc))
    assert again == space
    assert describe_space(again).keys() == desc.keys()


def test_describe_exact_values() -> None:
    box = SPACES["box_perdim_inf"]
    desc = describe_space(box)
    assert desc["dtype"] == "<f8"
    assert desc["shape"] == [3]
    rebuilt = space_from_description(_msgpack_roundtrip(desc))
    assert isinstance(rebuilt, gs.Box)
    np.testing.assert_array_equal(rebuilt.low, box.low)
    np.testing.assert_array_equal(rebuilt.high, box.high)
    assert rebuilt.dtype == box.dtype
    if DISCRETE_TAKES_DTYPE:
        d = space_from_description(describe_space(SPACES["discrete_int32"]))
        assert isinstance(d, gs.Discrete)
        assert d.start == 7
        assert d.dtype == np.int32
    mb = space_from_description(_msgpack_roundtrip(describe_space(SPACES["multibinary_list1"])))
    assert isinstance(mb, gs.MultiBinary)
    assert mb.n == (3,)
    text = space_from_description(describe_space(SPACES["text_charset"]))
    assert isinstance(text, gs.Text)
    assert text.character_list == ("z", "a", "b")
    pairs = gs.Dict([("z", gs.Discrete(2)), ("a", gs.MultiBinary(2))])  # pairs keep their order on every release
    unsorted = space_from_description(describe_space(SPACES.get("dict_unsorted", pairs)))
    assert isinstance(unsorted, gs.Dict)
    assert list(unsorted.spaces) == ["z", "a"]
    assert "seed" not in str(describe_space(SPACES["nested"]))


@pytest.mark.parametrize(
    ("desc", "match"),
    [
        ("Box", "not a map"),
        ({"shape": [2]}, "unknown space type None"),
        ({"type": "Graf"}, "unknown space type 'Graf'"),
        ({"type": "Box", "dtype": "<f4", "low": np.zeros(2), "high": np.ones(2)}, "missing field 'shape'"),
        ({"type": "Box", "shape": [2], "low": np.zeros(2), "high": np.ones(2)}, "missing field 'dtype'"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": np.zeros(2)}, "missing field 'high'"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": np.zeros(3), "high": np.ones(2)}, "shape"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": np.zeros(2), "high": np.ones((2, 1))}, "shape"),
        ({"type": "Box", "shape": [2], "dtype": "O", "low": [0, 0], "high": [1, 1]}, "dtype"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": ["a", "b"], "high": [1, 1]}, "low"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": "00", "high": [1, 1]}, "low"),
        ({"type": "Box", "shape": [2], "dtype": "<f4", "low": [2, 2], "high": [1, 1]}, "invalid Box"),
        ({"type": "Box", "shape": "2", "dtype": "<f4", "low": [0, 0], "high": [1, 1]}, "shape"),
        ({"type": "Discrete", "dtype": "<i8", "start": 0}, "missing field 'n'"),
        ({"type": "Discrete", "n": 0, "start": 0, "dtype": "<i8"}, "'n'"),
        ({"type": "Discrete", "n": True, "start": 0, "dtype": "<i8"}, "'n'"),
        ({"type": "Discrete", "n": 3, "start": 0, "dtype": "<f8"}, "dtype"),
        ({"type": "MultiDiscrete", "dtype": "<i8", "nvec": np.array([2, 3]), "start": np.zeros(3, int)}, "shape"),
        ({"type": "MultiDiscrete", "dtype": "<i8", "nvec": np.array([2.5, 3])}, "dtype"),
        ({"type": "MultiBinary", "n": "3"}, "'n'"),
        ({"type": "MultiBinary", "n": [2, -1]}, "'n'"),
        ({"type": "Text", "max_length": 3, "min_length": 0}, "missing field 'charset'"),
        ({"type": "Text", "max_length": 3, "min_length": 0, "charset": ""}, "charset"),
        ({"type": "Text", "max_length": 3, "min_length": 5, "charset": "ab"}, "invalid Text"),
        ({"type": "Dict", "subspaces": {"a": 1}}, "subspaces"),
        ({"type": "Dict", "subspaces": [["a"]]}, "subspace entry"),
        ({"type": "Dict", "subspaces": [["a", {"type": "Discrete"}]]}, "missing field 'n'"),
        ({"type": "Dict", "subspaces": [["a", {"type": "Nope"}]]}, "unknown space type"),
        ({"type": "Tuple"}, "missing field 'subspaces'"),
        ({"type": "Tuple", "subspaces": [None]}, "not a map"),
    ],
)
def test_malformed_descriptions(desc: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        space_from_description(desc)


def test_malformed_deep_nesting() -> None:
    desc: dict[str, Any] = {"type": "Discrete", "n": 2, "start": 0, "dtype": "<i8"}
    for _ in range(100):
        desc = {"type": "Tuple", "subspaces": [desc]}
    with pytest.raises(ValueError, match="nested deeper"):
        space_from_description(desc)


@pytest.mark.parametrize("thing", [object(), 3, gym.make])
def test_what_is_not_a_space_is_refused(thing: Any) -> None:
    for fn in (describe_space, leaf_specs, lambda s: empty_batch(s, 2)):
        with pytest.raises(TypeError, match=r"unsupported space .* not a gymnasium.spaces.Space"):
            fn(thing)


# --------------------------------------------------------------------- leaves
@pytest.mark.parametrize("name", IDS)
def test_rows_match_gymnasium(name: str) -> None:
    space = SPACES[name]
    items = _sample(space, B)
    expected = _gym_batch(space, items)

    leaves = empty_batch(space, B)
    assert [(leaf.shape, leaf.dtype) for leaf in leaves] == [
        ((B,), np.dtype(object)) if dt == "text" else ((B, *shape), np.dtype(dt)) for dt, shape in leaf_specs(space)
    ]
    write = row_writer(space)
    for i, item in enumerate(items[:3]):
        write(leaves, i, item)
    for i, item in enumerate(items[3:], start=3):
        write_row(space, leaves, i, item)
    batched = from_leaves(space, leaves)
    _assert_same(batched, expected)

    # to_leaves/from_leaves round trip without copying numeric leaves
    again = to_leaves(space, batched)
    assert len(again) == len(leaves)
    for a, b in zip(again, leaves, strict=True):
        assert a is b
    rebuilt = from_leaves(space, again)
    _assert_same(rebuilt, expected)
    # gymnasium-style batches (Text as tuple) are accepted too
    for a, b in zip(to_leaves(space, expected), leaves, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)

    # row_reader yields what gymnasium's iterate yields, in type and value
    read = row_reader(space)
    theirs = list(iterate(batch_space(space, B), expected))
    assert len(theirs) == B
    for i in range(B):
        _assert_same(read(leaves, i), theirs[i])
        assert _contains(space, read(leaves, i))


def test_write_row_scalar_types() -> None:
    space = gs.Discrete(4, start=1)
    leaves = empty_batch(space, 3)
    write = row_writer(space)
    write(leaves, 0, 1)
    write(leaves, 1, np.int64(2))
    write(leaves, 2, np.array(4))
    assert leaves[0].tolist() == [1, 2, 4]
    box = gs.Box(-1, 1, (2,))
    bl = empty_batch(box, 2)
    write_row(box, bl, 1, [0.5, -0.5])
    np.testing.assert_array_equal(bl[0][1], np.array([0.5, -0.5], np.float32))


class _MyDict(gs.Dict):
    """A user's subclass of a space with children."""


def test_a_space_of_one_leaf_is_that_leaf_and_a_dict_or_tuple_of_one_leaf_is_still_a_dict_or_tuple() -> None:
    leaf = np.arange(6, dtype=np.float32).reshape(3, 2)
    box = gs.Box(0, 1, (2,), np.float32)
    for _ in range(2):  # (the second time from what was learnt of each space's type the first)
        assert from_leaves(box, [leaf]) is leaf
        assert from_leaves(gs.Discrete(4), [leaf]) is leaf
        for space in (gs.Dict({"a": box}), _MyDict({"a": box})):
            rebuilt = from_leaves(space, [leaf])
            assert isinstance(rebuilt, dict)
            assert rebuilt["a"] is leaf
        rebuilt_tuple = from_leaves(gs.Tuple([box]), [leaf])
        assert isinstance(rebuilt_tuple, tuple)
        assert rebuilt_tuple[0] is leaf


def test_from_leaves_wrong_count() -> None:
    with pytest.raises(ValueError, match="leaves"):
        from_leaves(SPACES["tuple"], [np.zeros(2)])


def test_take_and_concat() -> None:
    space = SPACES["nested"]
    leaves = empty_batch(space, B)
    for i, item in enumerate(_sample(space, B)):
        write_row(space, leaves, i, item)
    idx = np.array([3, 0])
    part = take_rows(leaves, idx)
    assert [p.shape[0] for p in part] == [2] * len(leaves)
    read = row_reader(space)
    _assert_same(read(part, 0), read(leaves, 3))
    whole = concat_leaves([take_rows(leaves, np.arange(2)), take_rows(leaves, np.arange(2, B))])
    for a, b in zip(whole, leaves, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert concat_leaves([leaves])[0] is leaves[0]
    with pytest.raises(ValueError, match="one or more leaf lists of equal length"):
        concat_leaves([])
    with pytest.raises(ValueError, match="one or more leaf lists of equal length"):
        concat_leaves([leaves, leaves[:1]])


# ------------------------------------------------------------- check_actions
def _rejects(space: gym.Space[Any], actions: Any, env_id: int | None, *parts: str) -> InvalidAction:
    with pytest.raises(InvalidAction) as info:
        check_actions(space, actions, ENV_IDS)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.env_id == env_id, str(err)
    for part in parts:
        assert part in str(err), (part, str(err))
    return err


@pytest.mark.parametrize("name", IDS)
def test_check_actions_accepts_samples(name: str) -> None:
    space = SPACES[name]
    batched = _gym_batch(space, _sample(space, B, seed=3))
    out = check_actions(space, batched, ENV_IDS)
    specs = leaf_specs(space)
    assert len(out) == len(specs)
    for leaf, (dt, shape) in zip(out, specs, strict=True):
        assert leaf.flags.c_contiguous
        if dt == "text":
            assert leaf.dtype == object
            assert leaf.shape == (B,)
        else:
            assert leaf.dtype == np.dtype(dt)
            assert leaf.shape == (B, *shape)
    read = row_reader(space)
    for i in range(B):
        assert _contains(space, read(out, i))


@pytest.mark.parametrize("rows", [1, SMALL_BATCH, SMALL_BATCH + 1, 4 * SMALL_BATCH])
def test_check_discrete_edges_on_both_sides_of_the_small_batch_path(rows: int) -> None:
    space = gs.Discrete(3, start=-2)  # -2, -1, 0
    ids = np.arange(rows) + 7
    ok = np.resize(np.array([-2, -1, 0]), rows)
    assert check_actions(space, ok, ids)[0] is ok
    for row in {0, rows // 2, rows - 1}:
        for value in (-3, 1, np.iinfo(np.int64).min, np.iinfo(np.int64).max):
            acts = ok.copy()
            acts[row] = value
            with pytest.raises(InvalidAction) as info:
                check_actions(space, acts, ids)
            assert info.value.env_id == row + 7
            assert f"got {value}" in str(info.value)


def test_check_discrete() -> None:
    space = gs.Discrete(4)
    acts = np.array([0, 1, 2, 3, 0])
    assert check_actions(space, acts, ENV_IDS)[0] is acts  # no copy when already right
    out = check_actions(space, [3, 2, 1, 0, 0], ENV_IDS)[0]
    assert out.dtype == np.int64
    out = check_actions(space, acts.astype(np.uint8), ENV_IDS)[0]
    assert out.dtype == np.int64
    assert out.tolist() == acts.tolist()
    err = _rejects(space, np.array([0, 1, 7, 3, 0]), 12, "env 12", "Discrete(4)", "(5,)", "integer dtype", "got 7")
    assert str(err).startswith("invalid action for env 12: expected an action in Discrete(4)")
    _rejects(space, np.array([0, 1, 2, -1, 0]), 13, "got -1")
    _rejects(space, np.array([0, 1, 2, 3, 2**63], dtype=np.uint64), 14, "env 14")
    _rejects(space, np.array([0, 1, 2, 3, -5], dtype=np.int8), 14, "got -5")
    _rejects(space, np.array([0.0, 1.0, 2.0, 3.0, 0.0]), None, "float64", "integer dtype")
    _rejects(space, np.ones(5, dtype=bool), None, "bool")
    _rejects(space, np.array([0, 1, 2]), None, "(5,)", "shape (3,)")
    _rejects(space, np.zeros((5, 1), dtype=np.int64), None, "shape (5, 1)")
    _rejects(space, 2, None, "shape ()")
    _rejects(space, [[1], [1, 2]], None, "not array-like")
    _rejects(space, ["a"] * 5, None, "<U1")
    one = np.array([99])
    with pytest.raises(InvalidAction) as info:
        check_actions(space, np.array([1, 2]), one)
    assert info.value.env_id == 99  # a one-env batch names its env
    assert check_actions(space, np.zeros(0, np.int64), np.zeros(0, np.int64))[0].shape == (0,)


@pytest.mark.skipif(not DISCRETE_TAKES_DTYPE, reason="gymnasium 1.0's Discrete is int64 only")
def test_check_discrete_start_and_dtype() -> None:
    space = gs.Discrete(3, start=-1)
    check_actions(space, np.array([-1, 0, 1, 1, -1]), ENV_IDS)
    _rejects(space, np.array([-1, 0, 1, 2, -1]), 13, "start=-1", "got 2")
    _rejects(space, np.array([-1, -2, 1, 1, -1]), 11, "got -2")
    small = gs.Discrete(4, start=7, dtype=np.int32)
    out = check_actions(small, np.array([7, 8, 9, 10, 7]), ENV_IDS)[0]
    assert out.dtype == np.int32
    _rejects(small, np.array([7, 8, 9, 11, 7], dtype=np.int32), 13, "got 11")
    _rejects(small, np.array([7, 8, 9, 10, 2**40]), 14, "env 14")


def test_check_box() -> None:
    space = gs.Box(-1.0, 1.0, (2,), np.float32)
    acts = np.zeros((B, 2), dtype=np.float64)
    out = check_actions(space, acts, ENV_IDS)[0]
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    strided = np.zeros((B, 4), np.float32)[:, ::2]
    assert check_actions(space, strided, ENV_IDS)[0].flags.c_contiguous
    assert check_actions(space, np.ones((B, 2), np.int64), ENV_IDS)[0].dtype == np.float32
    assert check_actions(space, np.ones((B, 2), bool), ENV_IDS)[0].dtype == np.float32
    assert check_actions(space, [[1, -1]] * B, ENV_IDS)[0].dtype == np.float32
    bad = acts.copy()
    bad[3, 1] = 1.5
    _rejects(space, bad, 13, "env 13", "Box(-1.0, 1.0, (2,), float32)", "(5, 2)", "element (1,)", "1.5")
    bad[3, 1] = np.nan
    _rejects(space, bad, 13, "nan")
    bad[3, 1], bad[1, 0] = 0.0, -np.inf
    _rejects(space, bad, 11, "-inf")
    _rejects(space, np.zeros((B, 3)), None, "(5, 2)", "shape (5, 3)")
    _rejects(space, np.zeros((B, 2), np.complex64), None, "complex64")
    _rejects(space, np.zeros((B, 2), object), None, "object")
    ints = gs.Box(0, 255, (2,), np.uint8)
    _rejects(ints, np.zeros((B, 2), np.float32), None, "float32")
    out = check_actions(ints, np.full((B, 2), 255, np.int64), ENV_IDS)[0]
    assert out.dtype == np.uint8
    assert out.max() == 255
    _rejects(ints, np.array([[0, 0]] * 4 + [[0, 256]]), 14, "256")
    f64 = gs.Box(-1.0, 1.0, (1,), np.float64)
    assert check_actions(f64, np.zeros((B, 1), np.float32), ENV_IDS)[0].dtype == np.float64


def test_check_box_perdim_and_unbounded() -> None:
    space = SPACES["box_perdim_inf"]  # low [-1, -inf, 0], high [1, inf, 5.5]
    ok = np.array([[1.0, -1e300, 0.0], [-1.0, np.inf, 5.5]] * 2 + [[0.0, 0.0, 2.0]])
    check_actions(space, ok, ENV_IDS)
    bad = ok.copy()
    bad[2, 2] = -0.5  # fine for dims 0/1, out of bounds for dim 2 only
    _rejects(space, bad, 12, "element (2,)", "[0.0, 5.5]")
    bad = ok.copy()
    bad[4, 1] = np.nan
    _rejects(space, bad, 14, "nan")
    free = SPACES["box_scalar_free"]
    check_actions(free, np.array([np.inf, -np.inf, 0.0, 1e30, -3.0]), ENV_IDS)
    _rejects(free, np.array([np.inf, -np.inf, 0.0, np.nan, -3.0]), 13, "nan")
    assert check_actions(free, np.arange(B), ENV_IDS)[0].dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float64 1e300 -> float32 inf: valid, and no overflow warning
        out = check_actions(free, np.array([1e300, 0.0, 0.0, 0.0, -1e300]), ENV_IDS)[0]
    assert out.dtype == np.float32
    assert out[0] == np.inf
    assert out[4] == -np.inf


def test_check_multidiscrete_and_multibinary() -> None:
    md = SPACES["multidiscrete_start_2d"]  # nvec [[2,3],[4,5]] start [[1,0],[-1,2]]
    ok = np.tile(np.array([[1, 2], [2, 6]]), (B, 1, 1))
    check_actions(md, ok, ENV_IDS)
    bad = ok.copy()
    bad[1, 1, 0] = 3
    _rejects(md, bad, 11, "element (1, 0)", "[-1, 2]")
    bad = ok.copy()
    bad[4, 0, 0] = 0
    _rejects(md, bad, 14, "element (0, 0)")
    _rejects(md, ok.astype(np.float32), None, "integer dtype")
    mb = gs.MultiBinary(3)
    out = check_actions(mb, np.ones((B, 3), bool), ENV_IDS)[0]
    assert out.dtype == np.int8
    assert out.sum() == 3 * B
    assert check_actions(mb, np.ones((B, 3), np.int64), ENV_IDS)[0].dtype == np.int8
    bad = np.zeros((B, 3), np.int8)
    bad[2, 2] = 2
    _rejects(mb, bad, 12, "element (2,)", "[0, 1]")
    bad[2, 2] = -1
    _rejects(mb, bad, 12)
    _rejects(mb, np.zeros((B, 3), np.float64), None, "integer or bool")


def test_check_text() -> None:
    space = gs.Text(4, min_length=1, charset="ab")
    out = check_actions(space, ["a", "ab", "bbbb", "b", "a"], ENV_IDS)[0]
    assert out.dtype == object
    assert out.tolist() == ["a", "ab", "bbbb", "b", "a"]
    out = check_actions(space, np.array(["a", "b", "ab", "ba", "aa"]), ENV_IDS)[0]
    assert all(type(s) is str for s in out)
    _rejects(space, ["a", "ab", "abc", "b", "a"], 12, "'abc'", "'c' not in charset")
    _rejects(space, ["a", "", "a", "b", "a"], 11, "length 0")
    _rejects(space, ["a", "a", "a", "aaaaa", "a"], 13, "length 5")
    _rejects(space, ["a", "a", "a", "a", 3], 14, "int")
    _rejects(space, ["a", "a"], None, "2 values")
    _rejects(space, "aaaaa", None, "str")


def test_check_dict_and_tuple() -> None:
    space = SPACES["nested"]  # {a: (Text(xy), MultiBinary(2), {c: Discrete(2)}), b: Box(1,)}
    good = {
        "a": (["x", "xy", "y", "yy", "x"], np.zeros((B, 2), np.int8), {"c": np.zeros(B, np.int64)}),
        "b": np.zeros((B, 1)),
    }
    out = check_actions(space, good, ENV_IDS)
    assert [leaf.dtype for leaf in out] == [np.dtype(object), np.int8, np.int64, np.float32]
    assert check_actions(space, {"b": good["b"], "a": list(good["a"])}, ENV_IDS)[0].shape == (B,)
    bad_c = {"a": (good["a"][0], good["a"][1], {"c": np.array([0, 1, 0, 0, 2])}), "b": good["b"]}
    _rejects(space, bad_c, 14, "env 14 at action['a'][2]['c']", "Discrete(2)")
    _rejects(space, {"a": good["a"]}, None, "missing keys ['b']")
    _rejects(space, {**good, "zz": 1}, None, "unexpected keys ['zz']")
    _rejects(space, [good["a"], good["b"]], None, "dict")
    _rejects(space, {"a": good["a"][:2], "b": good["b"]}, None, "at action['a']", "tuple of 3")
    _rejects(space, {"a": good["a"], "b": np.zeros((B, 2))}, None, "at action['b']", "(5, 1)")


# ------------------------------------------------------------------ hypothesis
@st.composite
def _box_case(draw: st.DrawFn) -> tuple[gs.Box, int]:
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    size = int(np.prod(shape))
    finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
    lows = np.array(draw(st.lists(finite, min_size=size, max_size=size)), dtype=np.float64)
    widths = np.array(draw(st.lists(st.floats(0, 1e3, width=32), min_size=size, max_size=size)))
    highs = lows + widths
    if draw(st.booleans()):
        lows[: draw(st.integers(0, size))] = -np.inf
    if draw(st.booleans()):
        highs[draw(st.integers(0, size)) :] = np.inf
    space = gs.Box(lows.reshape(shape).astype(dtype), highs.reshape(shape).astype(dtype), dtype=dtype)
    return space, draw(st.integers(1, 9))


@settings(max_examples=150, deadline=None)
@given(case=_box_case(), seed=st.integers(0, 2**31), data=st.data())
def test_box_property(case: tuple[gs.Box, int], seed: int, data: st.DataObject) -> None:
    space, n = case
    env_ids = np.arange(n) * 7 + 100
    acts = np.stack(_sample(space, n, seed)).astype(np.float64)
    out = check_actions(space, acts, env_ids)[0]
    assert out.dtype == space.dtype
    assert out.shape == (n, *space.shape)

    row = data.draw(st.integers(0, n - 1))
    elem = data.draw(st.integers(0, max(space.low.size - 1, 0)))
    high = float(space.high.ravel()[elem])
    bad = acts.copy().reshape(n, -1)
    bad[row, elem] = high + max(1.0, abs(high)) if np.isfinite(high) else np.nan
    with pytest.raises(InvalidAction) as info:
        check_actions(space, bad.reshape(acts.shape), env_ids)
    assert info.value.env_id == env_ids[row]
    assert f"env {env_ids[row]}" in str(info.value)


@settings(max_examples=150, deadline=None)
@given(
    n_vals=st.integers(1, 50),
    start=st.integers(-(2**40), 2**40),
    n=st.integers(1, 9),
    dtype=st.sampled_from([np.int64, np.int32, np.uint8, np.uint64]),
    data=st.data(),
)
def test_discrete_property(n_vals: int, start: int, n: int, dtype: Any, data: st.DataObject) -> None:
    space = gs.Discrete(n_vals, start=start)
    env_ids = np.arange(n) + 1000
    acts = np.array(data.draw(st.lists(st.integers(start, start + n_vals - 1), min_size=n, max_size=n)))
    assert check_actions(space, acts, env_ids)[0].tolist() == acts.tolist()
    row = data.draw(st.integers(0, n - 1))
    bad = acts.copy()
    bad[row] = data.draw(st.one_of(st.integers(-(2**62), start - 1), st.integers(start + n_vals, 2**62)))
    with pytest.raises(InvalidAction) as info:
        check_actions(space, bad, env_ids)
    assert info.value.env_id == 1000 + row
    # other integer dtypes: values that fit are validated exactly too
    info_dt = np.iinfo(dtype)
    if info_dt.min <= acts.min() and acts.max() <= info_dt.max:
        assert check_actions(space, acts.astype(dtype), env_ids)[0].dtype == np.int64


# -------------------------------------------------------------- large boxes
HUGE = gs.Box(0, 255, (40, 1024, 1024), np.uint8)  # 40 MiB per observation


def test_a_huge_box_with_uniform_bounds_travels_in_a_small_header() -> None:
    """Its bounds are one value each: the description holds them once, not per element (it used to need a header
    of 83,886,292 bytes, past the protocol's limit), and it is rebuilt equal, through the real codec."""
    frames = encode(Op.RESULT, {Key.SPACES: {"k": {"obs": describe_space(HUGE)}}})
    assert len(frames[0]) < 1024
    header, _ = decode(frames)
    rebuilt = space_from_description(header[Key.SPACES]["k"]["obs"])
    assert rebuilt == HUGE
    assert isinstance(rebuilt, gs.Box)
    assert rebuilt.low.shape == rebuilt.high.shape == HUGE.shape
    mixed = gs.Box(
        np.array([0.0, -np.inf, 1.0]), np.array([1.0, 2.0, np.inf]), dtype=np.float64
    )  # per-element bounds stay per element
    assert describe_space(mixed)["low"].shape == (3,)
    assert space_from_description(decode(encode(Op.RESULT, {"d": describe_space(mixed)}))[0]["d"]) == mixed


@pytest.mark.parametrize(
    ("shape", "low", "match"),
    [
        ([2, 3], np.zeros(3), r"field 'low' has shape \(3,\), expected \(2, 3\) or one value"),
        ([1 << 20, 1 << 20], np.zeros(()), "has 1099511627776 elements: at most 134217728"),
    ],
)
def test_a_box_description_with_one_value_for_its_bounds_is_still_checked(
    shape: list[int], low: np.ndarray, match: str
) -> None:
    desc = {"type": "Box", "shape": shape, "dtype": "<f4", "low": low, "high": np.ones(())}
    with pytest.raises(ValueError, match=match):
        space_from_description(desc)


def test_an_invalid_action_names_a_large_charset_by_its_size() -> None:
    """A Text space of a large charset (OpenEnv's strings: Unicode's basic plane) is named in an error by its lengths
    and the size of its charset, not by tens of thousands of characters."""
    chars = "".join(chr(c) for c in range(0x20, 0x3000))
    space = gs.Dict({"word": gs.Text(64, charset=chars), "n": gs.Discrete(3)})
    for bad in ({"word": ["x"]}, {"word": ["x\x01"], "n": np.array([0])}, {"word": [3], "n": np.array([0])}):
        with pytest.raises(InvalidAction) as err:
            check_actions(space, bad, np.array([0]))
        assert len(str(err.value)) < 600, str(err.value)[:300]
        assert f"charset of {len(chars):,} characters" in str(err.value)


@pytest.mark.skipif(DISCRETE_TAKES_DTYPE, reason="this gymnasium's Discrete takes a dtype (1.1 and newer)")
def test_a_discrete_description_of_another_dtype_is_refused_where_gymnasium_has_int64_only() -> None:
    desc = describe_space(gs.Discrete(4, start=7))
    assert space_from_description(desc) == gs.Discrete(4, start=7)
    with pytest.raises(ValueError, match=r"gymnasium 1\.0\.\d+.s Discrete is int64 only"):
        space_from_description({**desc, "dtype": "<i4"})

"""aioenv.wire.infos.add_info must batch per-env infos exactly as gymnasium's ``VectorEnv._add_info``;
take_info selects rows of a batched info recursively."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import VectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv._compat import HAS_AUTORESET_MODE
from aioenv.wire.infos import add_info, batch_infos, take_info, whole_info
from tests.support.compare import assert_same


class _RefVectorEnv(VectorEnv):  # type: ignore[misc]
    """The smallest VectorEnv that can run gymnasium's own ``_add_info``."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class Opaque:
    """An info value of a type gymnasium does not know (goes into an object array)."""

    def __init__(self, tag: int) -> None:
        self.tag = tag

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)

    def __repr__(self) -> str:
        return f"Opaque({self.tag})"


def gym_add_info(env: VectorEnv, infos: dict[str, Any], info: dict[str, Any], row: int) -> dict[str, Any]:
    """gymnasium's own ``env._add_info``. aioenv batches ``final_obs`` as gymnasium 1.1 and newer do (an object
    array of whole observations, what same-step autoreset leaves), on every release: on gymnasium 1.0 (no such mode,
    and a ``final_obs`` batched like any other key) this does that part itself, as 1.1's ``_add_info`` does."""
    if HAS_AUTORESET_MODE or "final_obs" not in info:
        return env._add_info(infos, info, row)  # type: ignore[no-any-return]
    for key, value in info.items():  # one key at a time, in their order, as _add_info goes
        if key != "final_obs":
            infos = env._add_info(infos, {key: value}, row)
            continue
        final = infos.get(key, np.full(env.num_envs, None, dtype=object))
        final[row] = value
        mask = infos.get(f"_{key}", np.zeros(env.num_envs, dtype=np.bool_))
        mask[row] = True
        infos[key], infos[f"_{key}"] = final, mask
    return infos


def reference(rows: list[tuple[int, dict[str, Any]]], num_rows: int) -> dict[str, Any]:
    ref = _RefVectorEnv(num_rows)
    infos: dict[str, Any] = {}
    for row, info in rows:
        infos = gym_add_info(ref, infos, info, row)
    return infos


def ours(rows: list[tuple[int, dict[str, Any]]], num_rows: int) -> dict[str, Any]:
    infos: dict[str, Any] = {}
    for row, info in rows:
        out = add_info(infos, info, row, num_rows)
        assert out is infos, "add_info returns the dict it filled"
    return infos


def check_same_as_gymnasium(rows: list[tuple[int, dict[str, Any]]], num_rows: int) -> dict[str, Any]:
    """Both implementations on the same sequence: same result, or the same exception type."""
    try:
        expected = reference(rows, num_rows)
    except Exception as exc:  # noqa: BLE001 - compare the failure itself
        with pytest.raises(type(exc)):
            ours(rows, num_rows)
        return {}
    actual = ours(rows, num_rows)
    assert_same(actual, expected)
    return actual


# ---------------------------------------------------------------- add_info examples


def test_python_scalars() -> None:
    rows = [
        (0, {"i": 1, "f": 0.5, "b": True}),
        (2, {"i": -7, "f": 2.0, "b": False}),
        (3, {"i": 3}),
    ]
    info = check_same_as_gymnasium(rows, 4)
    assert info["i"].dtype == np.int64
    assert info["f"].dtype == np.float64
    assert info["b"].dtype == np.bool_
    assert info["_i"].tolist() == [True, False, True, True]
    assert info["_f"].tolist() == [True, False, True, False]


def test_numpy_scalars_keep_their_dtype() -> None:
    rows = [
        (1, {"f32": np.float32(1.5), "i8": np.int8(-3), "u64": np.uint64(2**63), "f16": np.float16(0.25)}),
        (0, {"f32": np.float32(-2.0), "i8": np.int8(4)}),
        (2, {"c": np.complex64(1 + 1j), "npbool": np.bool_(True)}),  # np.bool_ is not an np.number
    ]
    info = check_same_as_gymnasium(rows, 3)
    assert info["f32"].dtype == np.float32
    assert info["i8"].dtype == np.int8
    assert info["u64"].dtype == np.uint64


def test_ndarrays() -> None:
    rows = [
        (0, {"vec": np.arange(3, dtype=np.float32), "img": np.ones((2, 2), np.uint8), "zero_d": np.array(4.0)}),
        (3, {"vec": np.array([7, 8, 9], np.float32), "img": np.zeros((2, 2), np.uint8)}),
        (1, {"empty": np.zeros((0,), np.int32), "zero_d": np.array(-1.0)}),
    ]
    info = check_same_as_gymnasium(rows, 4)
    assert info["vec"].shape == (4, 3)
    assert info["img"].shape == (4, 2, 2)
    assert info["zero_d"].shape == (4,)


def test_nested_dicts() -> None:
    rows = [
        (0, {"episode": {"r": 10.0, "l": 5, "t": np.float32(0.1)}, "deep": {"a": {"b": {"c": 1}}}}),
        (2, {"episode": {"r": -1.0, "l": 7}}),
        (1, {"deep": {"a": {"b": {"c": 2, "d": "x"}}}}),
    ]
    info = check_same_as_gymnasium(rows, 3)
    assert info["_episode"].tolist() == [True, False, True]
    assert info["episode"]["_t"].tolist() == [True, False, False]
    assert info["deep"]["a"]["b"]["_d"].tolist() == [False, True, False]


def test_final_obs_and_final_info() -> None:
    rows = [
        (1, {"final_obs": np.arange(4, dtype=np.float32), "final_info": {"score": 3}, "level": 1}),
        (3, {"final_obs": {"pos": np.zeros(2), "n": np.int64(3)}, "final_info": {}}),
        (0, {"level": 2}),
        (2, {"final_obs": None, "final_info": {"score": 1, "why": "timeout"}}),
    ]
    info = check_same_as_gymnasium(rows, 4)
    assert info["final_obs"].dtype == object
    assert info["_final_obs"].tolist() == [False, True, True, True]
    assert info["final_obs"][0] is None
    assert info["final_info"]["_score"].tolist() == [False, True, True, False]


def test_unknown_objects_go_to_object_arrays() -> None:
    rows = [
        (0, {"s": "hello", "obj": Opaque(1), "lst": [1, 2], "tup": (1, "a"), "none": None}),
        (2, {"s": "bye", "obj": Opaque(2), "bytes": b"\x00"}),
    ]
    info = check_same_as_gymnasium(rows, 3)
    for key in ("s", "obj", "none", "bytes"):
        assert info[key].dtype == object, key


def test_first_row_decides_the_dtype() -> None:
    """Types differ between rows: the first value added fixes the array dtype (later ones are cast)."""
    rows = [
        (1, {"x": 1, "y": 2.5, "z": True, "w": np.int8(1)}),
        (0, {"x": 2.7, "y": 3, "z": 5, "w": 300.0}),
    ]
    check_same_as_gymnasium(rows, 2)


def test_single_row() -> None:
    check_same_as_gymnasium([(0, {"a": 1, "final_obs": np.zeros(2), "n": {"k": np.ones(3)}})], 1)


def test_empty_info_adds_nothing() -> None:
    info = check_same_as_gymnasium([(0, {}), (1, {})], 2)
    assert info == {}


def test_row_written_twice_keeps_last_value() -> None:
    check_same_as_gymnasium([(0, {"a": 1, "b": np.ones(2)}), (0, {"a": 5, "b": np.zeros(2)})], 2)


@pytest.mark.skipif(not HAS_AUTORESET_MODE, reason="gymnasium 1.0 batches final_obs like any other key")
def test_gymnasium_sync_vector_env_instance_agrees() -> None:
    """The same reference through a real SyncVectorEnv instance (not only a bare VectorEnv subclass)."""
    import gymnasium as gym
    from gymnasium.vector import SyncVectorEnv

    sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    try:
        rows = [(2, {"a": np.float32(1), "n": {"x": 1}}), (0, {"final_obs": np.zeros(4, np.float32), "a": 2})]
        expected: dict[str, Any] = {}
        for row, env_info in rows:
            expected = sync._add_info(expected, env_info, row)
        assert_same(ours(rows, 3), expected)
    finally:
        sync.close()


# ---------------------------------------------------------------- add_info property

_KEYS = ["a", "b", "final_obs", "final_info", "nest"]
_SCALAR = st.one_of(
    st.integers(-(2**31), 2**31),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.booleans(),
    st.sampled_from([np.float32(1.5), np.int16(-2), np.uint8(200), np.float64(-0.5), np.int64(9), np.bool_(False)]),
)
_ARRAY = st.sampled_from([np.arange(3, dtype=np.float32), np.ones(3, np.float32) * 2, np.array([1, 2, 3], np.float32)])
_OBJECT = st.sampled_from(["text", "", None, Opaque(1), (1, 2), [3]])
_OBS = st.one_of(st.none(), _ARRAY, st.builds(lambda v: {"pos": v}, _ARRAY))


def _value_for(key: str) -> st.SearchStrategy[Any]:
    if key == "final_obs":
        return _OBS
    if key in ("final_info", "nest"):
        return st.dictionaries(st.sampled_from(["x", "y", "z"]), st.one_of(_SCALAR, _OBJECT), max_size=3)
    if key == "a":
        return _SCALAR
    return st.one_of(_ARRAY, _OBJECT)  # "b": arrays of one shape, or objects


@st.composite
def _env_info(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(_KEYS), unique=True, max_size=len(_KEYS)))
    return {key: draw(_value_for(key)) for key in keys}


@settings(max_examples=200, deadline=None)
@given(
    num_rows=st.integers(1, 6),
    data=st.data(),
)
def test_property_add_info_matches_gymnasium(num_rows: int, data: st.DataObject) -> None:
    rows = data.draw(
        st.lists(st.tuples(st.integers(0, num_rows - 1), _env_info()), max_size=8),
        label="rows",
    )
    check_same_as_gymnasium(rows, num_rows)


# ---------------------------------------------------------------- take_info


_ROWS: dict[int, dict[str, Any]] = {  # row 2 has no info
    0: {"a": 1, "vec": np.arange(2.0), "final_obs": np.zeros(3), "n": {"x": np.float32(1), "deep": {"y": "s"}}},
    1: {"a": 2, "vec": np.arange(2.0) + 10},
    3: {"a": 4, "final_obs": {"k": np.ones(1)}, "n": {"x": np.float32(4)}, "o": Opaque(3)},
}
_ENV_IDS = np.array([5, 6, 7, 8], dtype=np.int32)


def _batched_info() -> dict[str, Any]:
    info = ours(list(_ROWS.items()), 4)
    info["env_id"] = _ENV_IDS.copy()
    return info


def _expected_rows(index: np.ndarray) -> dict[str, Any]:
    """What gymnasium batches from the selected rows alone (a key none of them has is absent)."""
    picked = np.arange(4)[index].tolist()
    expected = reference([(i, _ROWS[row]) for i, row in enumerate(picked) if row in _ROWS], len(picked))
    expected["env_id"] = _ENV_IDS[index]
    return expected


@pytest.mark.parametrize(
    "index",
    [
        np.array([2, 0]),
        np.array([3]),
        np.array([], dtype=np.int64),
        np.array([True, False, True, True]),
        np.array([False, False, False, False]),
        np.array([0, 1, 2, 3]),
        np.array([1, 2]),
    ],
    ids=["ints", "one", "none_int", "mask", "empty_mask", "all", "some_keys_absent"],
)
def test_take_info_selects_rows_recursively(index: np.ndarray) -> None:
    info = _batched_info()
    before = {k: v for k, v in info.items()}
    out = take_info(info, index)
    assert_same(out, _expected_rows(index), "take_info")
    n = int(index.sum()) if index.dtype == np.bool_ else index.size
    assert out["env_id"].shape == (n,)
    assert set(info) == set(before), "take_info must not modify its input"
    assert all(info[k] is before[k] for k in info), "take_info must not modify its input"


def test_take_info_slices_too() -> None:
    out = take_info(_batched_info(), slice(1, 3))
    assert_same(out, _expected_rows(np.array([1, 2])), "take_info")
    assert "final_obs" not in out, "keys rows 1 and 2 lack are left out"
    assert "n" not in out, "keys rows 1 and 2 lack are left out"


def test_take_info_passes_non_arrays_through() -> None:
    info = {"a": np.arange(3), "scalar": 5, "zero_d": np.array(1.5), "nested": {"b": np.arange(3) * 2, "s": "x"}}
    out = take_info(info, np.array([1]))
    assert out["a"].tolist() == [1]
    assert out["scalar"] == 5
    assert out["zero_d"].shape == ()
    assert out["nested"]["b"].tolist() == [2]
    assert out["nested"]["s"] == "x"


def test_take_info_rows_are_copies() -> None:
    info = _batched_info()
    out = take_info(info, np.array([0, 1]))
    out["a"][0] = 999
    assert info["a"][0] == 1


def _random_infos(rng: np.random.Generator, n: int) -> list[dict[str, Any] | None]:
    infos: list[dict[str, Any] | None] = []
    for _ in range(n):
        if rng.random() < 0.2:
            infos.append(None)
            continue
        d: dict[str, Any] = {}
        if rng.random() < 0.8:
            d["a"] = int(rng.integers(5)) if rng.random() < 0.7 else float(rng.random())
        if rng.random() < 0.5:
            d["b"] = np.float32(rng.random())
        if rng.random() < 0.5:
            d["flag"] = bool(rng.random() < 0.5) if rng.random() < 0.5 else np.bool_(True)
        if rng.random() < 0.5:
            d["vec"] = rng.random(3)
        if rng.random() < 0.3:
            d["final_obs"] = rng.random(2)
            d["final_info"] = {"x": 1, "y": "s"}
        if rng.random() < 0.3:
            d["text"] = "str"
        infos.append(d)
    return infos


def _steady_infos(rng: np.random.Generator, n: int) -> list[dict[str, Any] | None]:
    """Every row with the same keys in the same order (MuJoCo, Atari): full columns, no masks on the wire;
    ``a`` is an int in some rows and a float in others, ``v`` a float64 or a float32 array."""
    vec_dtype = np.float64 if rng.random() < 0.7 else np.float32
    return [
        {
            "x": np.float64(rng.random()),
            "a": int(rng.integers(5)) if rng.random() < 0.8 else float(rng.random()),
            "v": rng.random(2).astype(vec_dtype if rng.random() < 0.9 else np.float32),
            "nested": {"k": np.int32(rng.integers(9))},
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", ["random keys", "steady keys", "uniform keys"])
def test_batch_then_merge_equals_gymnasium_row_by_row(seed: int, kind: str) -> None:
    """Workers batch their rows column-wise; the coordinator merges parts at any positions.

    Whatever the split and the order parts arrive in, the result must equal gymnasium's
    _add_info applied row by row in output order (dtype from the first row that has a key,
    even when one part mixes ints and floats). Parts may leave rows out (rows that failed):
    those rows have no info, as gymnasium would never have added one for them.
    """
    from aioenv.wire.infos import batch_infos, merge_infos

    make = {"random keys": _random_infos, "steady keys": _steady_infos, "uniform keys": _uniform_infos}[kind]
    rng = np.random.default_rng(seed)
    ref_env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    for _ in range(300):
        n = 6
        rows = make(rng, n)
        positions = rng.permutation(n)
        if rng.random() < 0.5:
            positions.sort()  # each worker's rows in call order, as a lock-step call splits them
        cuts = sorted(set(rng.integers(1, n, size=int(rng.integers(1, 3))).tolist()))
        parts = np.split(positions, cuts)
        if rng.random() < 0.2:
            parts = parts[1:]  # the rows of a part that never came: no info for them
        items = [(batch_infos([rows[p] for p in part], part.size), part) for part in parts]
        if rng.random() < 0.5:
            items.reverse()  # arrival order must not matter
        ref_env.num_envs = n
        expected: dict[str, Any] = {}
        covered = set(np.concatenate(parts).tolist())
        for row, info in enumerate(rows):
            if info and row in covered:
                expected = gym_add_info(ref_env, expected, info, row)
        got = merge_infos(items, n)
        assert_same(got, expected)
        if kind != "random keys":  # (keys that only some parts have come in the order of the parts)
            assert list(got) == list(expected), "keys (and their masks) in gymnasium's order"


def test_merge_of_typed_columns_gives_new_writable_columns_and_masks_of_their_own() -> None:
    """The common case (every part has every key as a typed column) is built apart from the parts: what the
    caller gets is its own to change."""
    from aioenv.wire.infos import merge_infos

    parts = [
        ({"x": np.array([1.0, 2.0]), "n": np.array([3, 4], dtype=np.int32)}, np.array([2, 0])),
        ({"x": np.array([5.0]), "n": np.array([6], dtype=np.int32)}, np.array([1])),
    ]
    for column, _ in parts:
        for value in column.values():
            value.flags.writeable = False  # as columns decoded from a message are
    out = merge_infos(parts, 3)
    assert list(out) == ["x", "_x", "n", "_n"]
    assert out["x"].tolist() == [2.0, 5.0, 1.0]
    assert out["n"].dtype == np.int32
    assert out["n"].tolist() == [4, 6, 3]
    assert out["_x"].tolist() == [True] * 3
    assert out["_x"] is not out["_n"]
    out["x"][0] = 9.0
    out["_n"][0] = False
    assert parts[1][0]["x"][0] == 5.0
    assert parts[0][0]["x"].tolist() == [1.0, 2.0]
    assert merge_infos(parts, 3)["_n"].tolist() == [True] * 3


@pytest.mark.parametrize("dict_first", [True, False])
def test_a_key_given_as_a_dict_by_some_envs_and_a_value_by_others_is_refused_naming_their_rows(
    dict_first: bool,
) -> None:
    """gymnasium's ``_add_info`` puts the value among the dict's keys, or fails, by which env comes first; a merge
    says which rows gave which, however the envs were spread over workers: rows of a part that lack the key (its
    mask) are neither, and a part whose own envs gave both (an object column) counts each row."""
    from aioenv.wire.infos import UnmergedInfo, merge_infos

    nested, value = {"x": {"a": 1}}, {"x": 2}
    dict_rows, other_rows = (np.array([0, 3]), np.array([1, 4])) if dict_first else (np.array([1, 4]), np.array([0, 3]))
    parts = [
        (batch_infos([nested, None], 2), dict_rows),  # its second row lacks the key
        (batch_infos([value, nested], 2), other_rows),  # both kinds in one worker's batch: an object column
        (batch_infos([{"y": 1.0}], 1), np.array([2])),
    ]
    with pytest.raises(UnmergedInfo, match=r"info key 'x' is a dict at rows .* a value at rows") as caught:
        merge_infos(parts, 5)
    assert caught.value.key == "x"
    assert caught.value.rows == {
        "a dict": sorted([int(dict_rows[0]), int(other_rows[1])]),
        "a value": [int(other_rows[0])],
    }
    assert isinstance(caught.value, ValueError)
    # the same without the part of dicts alone: the object column's dict still stands beside another part's value
    with pytest.raises(UnmergedInfo) as caught:
        merge_infos([parts[1], (batch_infos([value], 1), np.array([2]))], 5)
    assert caught.value.rows == {"a dict": [int(other_rows[1])], "a value": sorted([int(other_rows[0]), 2])}
    # one worker's envs alone, both kinds (its batch an object column of both): the same, wherever the envs run
    with pytest.raises(UnmergedInfo) as caught:
        merge_infos([(batch_infos([value, nested], 2), np.array([1, 0]))], 2)
    assert caught.value.rows == {"a dict": [0], "a value": [1]}


def _uniform_infos(rng: np.random.Generator, n: int) -> list[dict[str, Any] | None]:
    """Every row with the same typed keys (a latency env's timings, a MuJoCo env's rewards): the case
    ``concat_infos`` serves with one concatenation per key."""
    return [
        {
            "t": float(rng.random()),
            "steps": int(rng.integers(9)),
            "v": rng.random(2),
            "ok": np.bool_(rng.random() < 0.4),
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", ["random keys", "steady keys", "uniform keys"])
def test_concat_of_consecutive_parts_equals_gymnasium_row_by_row(seed: int, kind: str) -> None:
    """``recv`` joins the parts it takes, one after another; ``concat_infos`` must give what gymnasium's
    _add_info gives row by row, whether every part has every key (concatenation) or not (the general
    merge), including parts of one row and parts without any info."""
    from aioenv.wire.infos import batch_infos, concat_infos

    make = {"random keys": _random_infos, "steady keys": _steady_infos, "uniform keys": _uniform_infos}[kind]
    rng = np.random.default_rng(seed)
    ref_env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    for _ in range(200):
        n = int(rng.integers(1, 9))
        rows = make(rng, n)
        cuts = sorted(set(rng.integers(1, n, size=int(rng.integers(0, n))).tolist())) if n > 1 else []
        bounds = [0, *cuts, n]
        sizes = [b - a for a, b in itertools.pairwise(bounds)]
        infos: list[dict[str, Any] | None] = []
        for a, b in itertools.pairwise(bounds):
            part = rows[a:b]
            infos.append(batch_infos(part, b - a) if any(part) else None)
        ref_env.num_envs = n
        expected: dict[str, Any] = {}
        for row, info in enumerate(rows):
            if info:
                expected = gym_add_info(ref_env, expected, info, row)
        got = concat_infos(infos, sizes)
        assert_same(got, expected)
        assert list(got) == list(expected), "keys (and their masks) in gymnasium's order"


# ---------------------------------------------------------------- whole_info


@settings(max_examples=100, deadline=None)
@given(num_rows=st.integers(1, 6), data=st.data())
def test_property_whole_info_of_every_row_matches_gymnasium(num_rows: int, data: st.DataObject) -> None:
    infos = data.draw(st.lists(st.one_of(st.none(), _env_info()), min_size=num_rows, max_size=num_rows))
    try:
        expected = reference([(row, info) for row, info in enumerate(infos) if info], num_rows)
    except (ValueError, TypeError, OverflowError):  # gymnasium cannot batch these rows: nor may the pool
        with pytest.raises((ValueError, TypeError, OverflowError)):  # (which row it trips on first may differ)
            whole_info(batch_infos(infos, num_rows), num_rows)
        return
    out = whole_info(batch_infos(infos, num_rows), num_rows)
    assert_same(out, expected, "whole_info")
    assert list(out) == list(expected), "gymnasium's key order"


def test_whole_info_copies_each_column_and_gives_each_its_own_mask() -> None:
    back = batch_infos([{"a": 1.0, "b": 2}, {"a": 3.0, "b": 4}], 2)
    out = whole_info(back, 2)
    assert list(out) == ["a", "_a", "b", "_b"]
    assert out["_a"].tolist() == [True, True]
    assert out["_a"] is not out["_b"]
    out["a"][0] = 99.0  # the caller owns what it got: writable, shared with nothing
    out["_b"][1] = False
    assert back["a"][0] == 1.0
    assert whole_info(back, 2)["_b"].tolist() == [True, True]

"""The slab's info area (``aioenv.transport.slab_infos``): which infos it plans columns for, what a worker may write
there, and that what the pool reads back is gymnasium's own batch of those infos, whatever rows it reads and
whatever keys each env had; then the area in a slab's file, mapped by the pool and by a worker."""

from __future__ import annotations

import itertools
import mmap
import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv.transport.slab import Slab
from aioenv.transport.slab_infos import MAX_AREA_BYTES, MAX_KEYS, InfoArea, plan
from aioenv.wire.infos import batch_infos, merge_infos
from tests.support.compare import assert_same

N = 8

#: One value of each column this test plans: key -> how to make it from an int.
MAKERS: dict[str, Any] = {
    "f": lambda v: v / 4,  # Python float: float64
    "i": lambda v: v * 3,  # Python int: int64
    "b": lambda v: v % 2 == 0,  # Python bool: bool
    "f32": lambda v: np.float32(v),  # numpy scalar: float32
    "u8": lambda v: np.uint8(v),
    "vec": lambda v: np.full(3, v, np.float32),  # an array: its dtype and shape
    "img": lambda v: np.full((2, 2), v, np.int16),
}
#: A value of another type for each key: one that does not fit its column (gymnasium casts it, or makes an object
#: column, by which env comes first: the RESULT the worker then sends is merged the same way).
OTHERS: dict[str, Any] = {
    "f": lambda v: np.float64(v),
    "i": lambda v: float(v),
    "b": lambda v: np.bool_(v),
    "f32": lambda v: v / 2,
    "u8": lambda v: int(v),
    "vec": lambda v: np.full(4, v, np.float32),
    "img": lambda v: np.full((2, 2), v, np.int32),
}


class _Batcher:
    """gymnasium's own ``VectorEnv._add_info`` over ``num_envs`` rows."""

    _add_info = gym.vector.VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def gymnasium_batch(infos: list[dict[str, Any] | None]) -> dict[str, Any]:
    batcher = _Batcher(len(infos))
    out: dict[str, Any] = {}
    for row, info in enumerate(infos):
        if info:
            out = batcher._add_info(out, info, row)  # type: ignore[arg-type]
    return out


def full_info(v: int) -> dict[str, Any]:
    return {key: make(v) for key, make in MAKERS.items()}


def area_for(num_envs: int = N) -> InfoArea:
    layout = plan(batch_infos([full_info(1), full_info(2)], 2), num_envs, 0)
    assert layout is not None
    buffer = mmap.mmap(-1, layout["size"])
    return InfoArea(buffer, layout, num_envs)


def test_a_plan_has_a_column_and_a_mask_per_key_of_the_dtype_gymnasium_gives_it() -> None:
    layout = plan(batch_infos([full_info(1), {"f": 0.5}], 2), N, 4 * mmap.PAGESIZE)
    assert layout is not None
    assert layout["at"] == 4 * mmap.PAGESIZE
    want = gymnasium_batch([full_info(1)])
    cols = {key: (dtype, shape, python) for key, dtype, shape, _, _, python in layout["cols"]}
    assert list(cols) == list(MAKERS)  # in the order of the reply's keys
    for key, (dtype, shape, python) in cols.items():
        assert np.dtype(dtype) == want[key].dtype, key
        assert tuple(shape) == want[key].shape[1:], key
        assert python == (key in ("f", "i", "b")), key
    spans = sorted((at, at + N * np.dtype(d).itemsize * int(np.prod(s))) for _, d, s, at, _, _ in layout["cols"])
    spans += sorted((m, m + N) for *_, m, _ in layout["cols"])
    spans.sort()
    assert all(a_end <= b for (_, a_end), (b, _) in itertools.pairwise(spans))  # none overlaps another
    assert spans[-1][1] <= layout["size"]


@pytest.mark.parametrize(
    ("infos", "why"),
    [
        ([{"s": "text"}], "a string: an object column"),
        ([{"f": 1.0, "sub": {"a": 1}}], "a nested dict"),
        ([{"final_obs": np.zeros(2)}], "final_obs is always an object column"),
        ([{"f": 1.0}, {"f": 2}], "mixed types: an object column"),
        ([{"b": np.bool_(True)}], "np.bool_: gymnasium makes an object column"),
        ([{1: 2.0}], "a key that is no string"),
        ([{f"k{i}": 1.0 for i in range(MAX_KEYS + 1)}], "too many keys"),
        ([{"big": np.zeros(MAX_AREA_BYTES // (8 * N) + 1)}], "too many bytes"),
    ],
)
def test_no_area_is_planned_for_infos_that_are_no_numeric_columns(infos: list[dict[Any, Any]], why: str) -> None:
    assert plan(batch_infos(infos, len(infos)), N, 0) is None, why  # type: ignore[arg-type]


def test_an_area_begins_on_a_page_boundary() -> None:
    assert plan(batch_infos([{"f": 1.0}], 1), N, 100) is None
    assert plan(batch_infos([{"f": 1.0}], 1), N, mmap.PAGESIZE) is not None


def test_a_value_fits_only_as_the_type_that_made_its_column() -> None:
    area = area_for()
    for key, make in MAKERS.items():
        assert area.columns[key].fits(make(3)), key
        assert not area.columns[key].fits(OTHERS[key](3)), key
    assert not area.write([{"f": 1.0, "what": 2.0}], slice(0, 1))  # a key it lacks
    assert not area.write([{"f": "1.0"}], slice(0, 1))


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any] | None]:
    """The infos of N envs' step: each env none, every key or some of them, now and then a value of another type."""
    out: list[dict[str, Any] | None] = []
    clean = draw(st.booleans())  # every value fits (half the examples), else now and then one does not
    for env in range(N):
        kind = draw(st.sampled_from(["none", "every", "some", "every", "every"]))
        if kind == "none":
            out.append(draw(st.sampled_from([None, {}])))
            continue
        keys = list(MAKERS) if kind == "every" else draw(st.lists(st.sampled_from(list(MAKERS)), unique=True))
        info = {}
        for key in keys:
            other = not clean and draw(st.integers(0, 9)) == 0
            info[key] = (OTHERS if other else MAKERS)[key](env + draw(st.integers(0, 50)))
        out.append(info)
    return out


@settings(max_examples=200, deadline=None)
@given(rows(), st.integers(1, N), st.data())
def test_what_a_worker_writes_reads_back_as_gymnasiums_batch_of_any_rows(
    infos: list[dict[str, Any] | None], k: int, data: st.DataObject
) -> None:
    area = area_for()
    for column in area.columns.values():  # what an earlier step left there: overwritten or masked
        column.values[...] = 7
        column.mask[...] = True

    def fits(run: list[dict[str, Any] | None]) -> bool:
        return all(area.columns[key].fits(value) for info in run if info for key, value in info.items())

    for start in range(0, N, k):  # a worker's run of envs at a time: written when every value of the run fits
        at = slice(start, min(start + k, N))
        assert area.write(infos[at], at) == fits(infos[at])
    if not fits(infos):
        return
    # every row, a run of them, and any envs in any order (recv()'s batches): gymnasium's batch of those infos
    picks = data.draw(st.lists(st.integers(0, N - 1), min_size=1, max_size=N, unique=True))
    for where, order in ((slice(0, N), list(range(N))), (slice(1, N - 1), list(range(1, N - 1)))):
        assert_same(area.batch(where), gymnasium_batch([infos[i] for i in order]))
    assert_same(area.batch(np.array(picks, np.intp)), gymnasium_batch([infos[i] for i in picks]))
    # each env's own dict (Stable-Baselines3's infos), any run of rows: what the env returned, value types included
    first = data.draw(st.integers(0, N - 1))
    count = data.draw(st.integers(1, N - first))
    dicts = area.dicts(first, count)
    assert_same(dicts, [dict(info) if info else {} for info in infos[first : first + count]])
    for info in dicts:  # nothing read back is a view of the area, which the env's next step overwrites
        assert not any(
            np.shares_memory(v, c.values)
            for v in info.values()
            if isinstance(v, np.ndarray)
            for c in area.columns.values()
        )
    # as a worker's batched info: merged with another reply's infos, what gymnasium makes of the rows together
    half = N // 2
    theirs = batch_infos([infos[i] for i in range(half)], half) if any(infos[:half]) else None
    ours = area.binfo(slice(half, N))
    parts = [(ours, np.arange(half, N))] if ours else []
    if theirs:
        parts.insert(0, (theirs, np.arange(half)))
    if parts:
        assert_same(merge_infos(parts, N), gymnasium_batch(infos))


#: Scalar values for the keys of an area read in blocks (MuJoCo's infos: np.float64s and an np.float32).
SCALARS: dict[str, Any] = {
    "python float": float,
    "python int": int,
    "python bool": lambda v: v % 3 == 0,
    "np.float64": np.float64,
    "np.float32": np.float32,
    "np.uint8": np.uint8,
}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list(SCALARS)), min_size=1, max_size=6), st.data())
def test_an_area_of_scalar_columns_reads_in_blocks_and_gives_the_same_batches(
    kinds: list[str], data: st.DataObject
) -> None:
    keys = [f"k{j}" for j in range(len(kinds))]
    makers = [SCALARS[kind] for kind in kinds]
    layout = plan(batch_infos([{key: make(1) for key, make in zip(keys, makers, strict=True)}], 1), N, 0)
    assert layout is not None
    area = InfoArea(mmap.mmap(-1, layout["size"]), layout, N)
    assert area.blocks is not None
    masks, groups = area.blocks
    assert masks.shape == (len(keys), N)
    assert sorted(j for _, indices in groups for j in indices) == list(range(len(keys)))
    infos: list[dict[str, Any] | None] = []
    for env in range(N):  # each env every key, some (in any order) or none
        have = data.draw(st.permutations(keys)) if data.draw(st.booleans()) else keys
        have = have[: data.draw(st.integers(0, len(have)))] if data.draw(st.booleans()) else have
        infos.append({key: makers[keys.index(key)](env * 10 + len(key)) for key in have} or None)
    assert area.write(infos, slice(0, N))
    picks = data.draw(st.lists(st.integers(0, N - 1), min_size=1, max_size=N, unique=True))
    assert_same(area.batch(slice(0, N)), gymnasium_batch(infos))
    assert_same(area.batch(slice(2, N)), gymnasium_batch(infos[2:]))
    assert_same(area.batch(np.array(picks, np.intp)), gymnasium_batch([infos[i] for i in picks]))
    assert_same(area.dicts(1, N - 1), [dict(info) if info else {} for info in infos[1:]])
    assert_same(merge_infos([(area.binfo(slice(0, N)), np.arange(N))], N), gymnasium_batch(infos))
    for array in area.batch(slice(0, N)).values():  # the caller's own arrays: none a view of the area
        for block in (masks, *(block for block, _ in groups)):
            assert not np.shares_memory(array, block)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list(SCALARS)), min_size=1, max_size=6), st.data())
def test_rows_with_every_key_are_written_a_block_at_a_time_as_a_column_at_a_time_writes_them(
    kinds: list[str], data: st.DataObject
) -> None:
    """An area of scalar columns takes rows that each have every key in one assignment per dtype (MuJoCo's infos, a
    worker's every step): the same bytes as the general way's column by column, refused where that way refuses."""
    keys = [f"k{j}" for j in range(len(kinds))]
    makers = [SCALARS[kind] for kind in kinds]
    layout = plan(batch_infos([{key: make(1) for key, make in zip(keys, makers, strict=True)}], 1), N, 0)
    assert layout is not None
    buffers = [mmap.mmap(-1, layout["size"]) for _ in range(2)]
    blocks, general = (InfoArea(buffer, layout, N) for buffer in buffers)
    general._write_whole = lambda infos, at: None  # type: ignore[method-assign]  # (the general way, always)
    for area in (blocks, general):  # what an earlier step left there: overwritten
        for column in area.columns.values():
            column.values[...] = 7
            column.mask[...] = False
    first = data.draw(st.integers(0, N - 1))
    at = slice(first, data.draw(st.integers(first + 1, N)))
    infos: list[dict[str, Any] | None] = []
    for env in range(at.stop - at.start):  # every key, in any order; now and then a value of another type
        order = data.draw(st.permutations(keys))
        infos.append({key: makers[keys.index(key)](env * 7 + keys.index(key)) for key in order})
    if data.draw(st.booleans()):
        row, key = data.draw(st.integers(0, len(infos) - 1)), data.draw(st.sampled_from(keys))
        value = infos[row][key]  # type: ignore[index]
        infos[row][key] = float(value) if type(value) is not float else np.float64(value)  # type: ignore[index]
    fits = all(blocks.columns[key].fits(value) for info in infos if info for key, value in info.items())
    assert (blocks._write_whole(infos, at) is not None) == fits  # (every row every key: the block way, if all fit)
    assert blocks.write(infos, at) == general.write(infos, at) == fits
    assert buffers[0][:] == buffers[1][:]
    if fits:
        assert_same(blocks.batch(at), gymnasium_batch(infos))


def test_an_area_with_a_column_of_arrays_reads_each_column_on_its_own() -> None:
    area = area_for()  # (MAKERS: scalars and arrays)
    assert area.blocks is None
    infos = [full_info(v) for v in range(N)]
    assert area.write(infos, slice(0, N))
    assert_same(area.batch(slice(0, N)), gymnasium_batch(infos))


def test_a_failed_write_leaves_nothing_a_reader_sees() -> None:
    area = area_for()
    assert area.write([full_info(1), full_info(2)], slice(0, 2))
    before = area.batch(slice(0, 2))
    assert not area.write([full_info(5), {**full_info(6), "i": 2**70}], slice(0, 2))  # beyond int64
    assert not area.write([full_info(5), {**full_info(6), "extra": 1.0}], slice(0, 2))
    # a failed write is answered by a RESULT, and the pool reads nothing of these rows from the area; the next write
    # that succeeds writes every column and mask of its rows again
    assert area.write([{"f": 0.5}, None], slice(0, 2))
    assert_same(area.batch(slice(0, 2)), gymnasium_batch([{"f": 0.5}, None]))
    assert before  # (what was there before)


def test_a_slab_grows_by_its_info_area_and_a_worker_maps_it_from_the_layout() -> None:
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    fd = Slab.new_fd()
    try:
        pool_side = Slab.create(fd, Slab.plan(N, space, gym.spaces.Discrete(2)))  # type: ignore[arg-type]
        before = pool_side.layout
        area = plan(batch_infos([full_info(1)], 1), N, pool_side.info_offset())
        assert area is not None
        pool_side.add_infos(fd, area)
        assert pool_side.layout == {**before, "info": area}
        assert os.fstat(fd).st_size == area["at"] + area["size"]
        worker_side = Slab.attach(fd, pool_side.layout)
        assert worker_side.info is not None
        assert pool_side.info is not None
        assert worker_side.info.write([full_info(i) for i in range(3)], slice(2, 5))
        assert_same(pool_side.info.batch(slice(2, 5)), gymnasium_batch([full_info(i) for i in range(3)]))
        worker_side.obs[0][2] = 0.25  # the rows themselves are where they were
        assert pool_side.obs[0][2].tolist() == [0.25, 0.25, 0.25]
        with pytest.raises(ValueError, match="has an info area already"):
            pool_side.add_infos(fd, area)
        with pytest.raises(ValueError, match="does not fit the slab file"):
            Slab.attach(fd, {**pool_side.layout, "info": {**area, "size": area["size"] + 10 * mmap.PAGESIZE}})
        cols = [[*area["cols"][0][:3], area["size"], *area["cols"][0][4:]]]  # a column past the area's end
        with pytest.raises(ValueError, match="lies beyond the area"):
            Slab.attach(fd, {**pool_side.layout, "info": {**area, "cols": cols}})
        worker_side.close()
        pool_side.close()
    finally:
        os.close(fd)


@pytest.mark.parametrize("make", [float, np.float64, np.float32], ids=["python float", "np.float64", "np.float32"])
def test_an_area_whose_every_row_has_every_key_of_one_dtype_reads_as_gymnasiums_batch(make: Any) -> None:
    # MuJoCo's nine floats: the area's quickest read (every mask set, one block of values); a row without a key
    # afterwards reads the general way, its mask False.
    keys = ["x_position", "y_position", "reward_ctrl", "reward_survive"]
    layout = plan(batch_infos([{key: make(0.5) for key in keys}], 1), N, 0)
    assert layout is not None
    area = InfoArea(mmap.mmap(-1, layout["size"]), layout, N)
    assert area.blocks is not None
    assert len(area.blocks[1]) == 1
    infos: list[dict[str, Any] | None] = [{key: make(env + j / 8) for j, key in enumerate(keys)} for env in range(N)]
    assert area.write(infos, slice(0, N))
    picks = [N - 1, 0, 3]
    for where, rows in ((slice(0, N), infos), (slice(2, N), infos[2:]), (np.array(picks), [infos[i] for i in picks])):
        got, want = area.batch(where), gymnasium_batch(rows)
        assert_same(got, want)
        assert list(got) == list(want)  # key, _key, ... as gymnasium orders them
        for array in got.values():  # the caller's own arrays: none a view of the area
            assert not any(np.shares_memory(array, block) for block in (area.blocks[0], area.blocks[1][0][0]))
    infos[1] = {key: make(1.0) for key in keys[1:]}
    assert area.write(infos[:2], slice(0, 2))
    got = area.batch(slice(0, N))
    assert_same(got, gymnasium_batch(infos))
    assert got["_x_position"].tolist() == [True, False] + [True] * (N - 2)

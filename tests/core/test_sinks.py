"""RecvQueue: rows of many parts (a worker reply each, some with failed rows) taken by ``recv`` in
batches of any size must be exactly the rows delivered, in order, with gymnasium's batched infos.
Gather and ``whole_result``: a call answered by one part gives what gymnasium would, whichever way it is built."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv.core.sinks import Gather, Part, RecvQueue, whole_result
from aioenv.errors import EnvError, ProtocolError
from aioenv.transport.slab import Slab
from aioenv.wire.infos import batch_infos
from tests.support.compare import assert_same

SPACE = gym.spaces.Dict(
    {"pos": gym.spaces.Box(-10, 10, (2,), np.float32), "k": gym.spaces.Discrete(5)},
)


def _info(kind: str, env: int) -> dict[str, Any]:
    if kind == "uniform":
        return {"t": env * 0.5, "n": env}
    if kind == "mixed":
        return {"t": env * 0.5} if env % 2 else {"name": f"env{env}", "n": np.int16(env)}
    if kind == "odd":  # gymnasium makes an object column of np.bool_ values: other rows' Python floats stay floats
        return {"t": np.bool_(env % 2)}
    return {}


@st.composite
def _parts(draw: st.DrawFn) -> list[tuple[list[int], str, set[int]]]:
    """Parts as (env ids, info kind, failed rows); kind ``"shared"``: rows left in the shared rows (a lane reply's,
    :meth:`RecvQueue.deliver_shared`), no info and no failure; ``"shared uniform"``, ``"shared mixed"``: one lane
    reply's rows left there with their batched info (a RESULT with nothing but infos)."""
    out = []
    env = 0
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(["none", "uniform", "mixed", "odd", "shared", "shared uniform", "shared mixed"]))
        failed = set() if kind.startswith("shared") else set(draw(st.lists(st.integers(0, k - 1), max_size=1)))
        out.append((list(range(env, env + k)), kind, failed))
        env += k
    return out


class _Held:
    """The scheduler's side of a RecvQueue, as sets: envs whose results wait unread, envs held busy meanwhile."""

    def __init__(self) -> None:
        self.unread: set[int] = set()
        self.busy: set[int] = set()

    def mark_unread(self, env_ids: np.ndarray) -> None:
        self.unread |= set(env_ids.tolist())

    def hold_unread(self, env_ids: list[int]) -> None:
        self.unread |= set(env_ids)
        self.busy |= set(env_ids)  # (held by the coordinator: a lane reply's envs stay claimed)

    def mark_read(self, env_ids: np.ndarray) -> None:
        self.unread -= set(env_ids.tolist())

    def release_read(self, env_ids: np.ndarray) -> None:
        assert set(env_ids.tolist()) <= self.busy
        self.busy -= set(env_ids.tolist())
        self.unread -= set(env_ids.tolist())


@contextlib.contextmanager
def _shared_rows(num_envs: int) -> Iterator[Slab]:
    """A pool's shared rows for ``num_envs`` envs of ``SPACE``, each env's row what :func:`_make_part` gives it."""
    layout = Slab.plan(num_envs, SPACE, gym.spaces.Discrete(2))
    assert layout is not None
    fd = Slab.new_fd()
    try:
        slab = Slab.create(fd, layout)
        ids = list(range(num_envs))
        part = _make_part(ids, "none", set())
        assert part.obs is not None
        for store, leaf in zip(slab.obs, part.obs, strict=True):
            store[:] = leaf
        slab.reward[:], slab.terminated[:], slab.truncated[:] = part.reward, part.terminated, part.truncated
        yield slab
        slab.close()
    finally:
        os.close(fd)


def _make_part(ids: list[int], kind: str, failed: set[int]) -> Part:
    k = len(ids)
    obs = [np.array([e % 5 for e in ids], np.int64), np.array([[e, -e] for e in ids], np.float32)]  # leaves: k, pos
    extras = [np.array(ids, np.float64) / 10, np.array([e % 3 == 0 for e in ids]), np.array([e % 4 == 0 for e in ids])]
    infos = [_info(kind, e) for e in ids]
    errors = {row: EnvError(f"env {ids[row]} failed", env_id=ids[row]) for row in failed}
    binfo = batch_infos(infos, k) if any(infos) else None
    return Part(np.array(ids, np.int64), obs, extras, None, errors, binfo=binfo)


def _expected(rows: list[tuple[int, str]]) -> tuple[Any, ...]:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    ref.num_envs = len(rows)
    info: dict[str, Any] = {}
    for i, (env, kind) in enumerate(rows):
        if got := _info(kind, env):
            info = ref._add_info(info, got, i)
    ids = [env for env, _ in rows]
    info["env_id"] = np.array(ids, np.int32)
    obs = {
        "k": np.array([e % 5 for e in ids], np.int64),
        "pos": np.array([[e, -e] for e in ids], np.float32).reshape(-1, 2),
    }
    return (
        obs,
        np.array(ids, np.float64) / 10,
        np.array([e % 3 == 0 for e in ids], bool),
        np.array([e % 4 == 0 for e in ids], bool),
        info,
    )


@settings(max_examples=150, deadline=None)
@given(parts=_parts(), data=st.data())
def test_takes_return_every_row_in_order_with_gymnasium_infos(
    parts: list[tuple[list[int], str, set[int]]], data: st.DataObject
) -> None:
    held = _Held()
    queue = RecvQueue(SPACE, held)
    stream: list[tuple[int, str] | EnvError] = []  # what recv must hand out, in order
    with _shared_rows(sum(len(ids) for ids, _, _ in parts)) as slab:
        for ids, kind, failed in parts:
            queue.expect(len(ids))
            if kind == "shared":  # lane replies of one read of the done pipe: runs in the order they came
                inner = st.sets(st.integers(1, max(1, len(ids) - 1)), max_size=2)
                bounds = [0, *sorted(data.draw(inner, label="cuts") - {len(ids)}), len(ids)]
                runs = [(ids[a], ids[b - 1] + 1) for a, b in itertools.pairwise(bounds)]
                runs = data.draw(st.permutations(runs), label="arrival")
                queue.deliver_shared(slab, [env for first, end in runs for env in range(first, end)])
                stream.extend((env, "none") for first, end in runs for env in range(first, end))
                continue
            if kind.startswith("shared "):  # one reply's run, its infos kept with it
                info_kind = kind.removeprefix("shared ")
                queue.deliver_shared(slab, ids, batch_infos([_info(info_kind, e) for e in ids], len(ids)))
                stream.extend((env, info_kind) for env in ids)
                continue
            part = _make_part(ids, kind, failed)
            queue.deliver(part)
            for row, env in enumerate(ids):
                stream.append(part.errors[row] if row in failed else (env, kind))
        _take_all(queue, held, stream, parts, slab, data)


def _take_all(
    queue: RecvQueue,
    held: _Held,
    stream: list[tuple[int, str] | EnvError],
    parts: list[tuple[list[int], str, set[int]]],
    slab: Slab,
    data: st.DataObject,
) -> None:
    while stream:
        waiting = {row[0] for row in stream if not isinstance(row, EnvError)}
        assert held.busy == waiting & {e for ids, kind, _ in parts if kind.startswith("shared") for e in ids}
        assert held.unread == waiting | {e.env_id for e in stream if isinstance(e, EnvError)}
        assert queue.ready == len(stream)
        most = data.draw(st.integers(1, 6), label="max_rows")
        head = stream[0]
        if isinstance(head, EnvError):
            with pytest.raises(EnvError) as caught:
                queue.take(most)
            assert caught.value is head
            stream.pop(0)
            continue
        rows: list[tuple[int, str]] = []
        while stream and len(rows) < most and not isinstance(stream[0], EnvError):
            row = stream.pop(0)
            assert not isinstance(row, EnvError)
            rows.append(row)
        got = queue.take(most)
        assert_same(got, _expected(rows))
        for array in (*got[0].values(), *got[1:4]):  # the caller's own copies, never views of the shared rows
            assert not any(np.shares_memory(array, rows) for rows in (*slab.obs, slab.reward, slab.terminated))
    assert queue.ready == 0
    assert queue.in_flight == 0
    assert not held.busy
    assert not held.unread


def test_taken_rows_do_not_share_memory_with_the_reply() -> None:
    """A batch handed to the caller is its own: writing to it never reaches a part still queued."""
    queue = RecvQueue(SPACE)
    part = _make_part([0, 1, 2], "uniform", set())
    queue.expect(3)
    queue.deliver(part)
    obs, reward, *_ = queue.take(2)
    obs["pos"][:] = 99
    reward[:] = 99
    rest_obs, rest_reward, *_ = queue.take(2)
    assert rest_obs["pos"].tolist() == [[2, -2]]
    assert rest_reward.tolist() == [0.2]
    assert not np.shares_memory(obs["pos"], part.obs[1])
    assert not np.shares_memory(reward, part.reward)


def _whole_part(ids: list[int], kind: str, batched: bool) -> Part:
    """A part that answers a whole call over ``ids``, with arrays of its own; its infos per env or batched."""
    part = _make_part(ids, kind, set())
    infos = [_info(kind, e) for e in ids]
    if not batched:
        part.binfo, part.infos = None, infos
    return part


def _read_only(part: Part) -> Part:
    """The same rows as views a caller may not keep (as a message's frames are): Gather copies them."""
    leaves = [leaf.copy() for leaf in part.obs or ()]
    extras = [part.reward.copy(), part.terminated.copy(), part.truncated.copy()]
    for a in (*leaves, *extras):
        a.flags.writeable = False
    return Part(part.env_ids, leaves, extras, part.infos, {}, binfo=part.binfo)


@pytest.mark.parametrize("kind", ["none", "uniform", "mixed"])
@pytest.mark.parametrize("batched", [False, True], ids=["per-env infos", "batched infos"])
async def test_a_call_answered_by_one_part_gives_gymnasiums_batch(kind: str, batched: bool) -> None:
    ids = [3, 0, 5, 1, 2]  # the caller's order
    want = _expected([(e, kind) for e in ids])
    part = _whole_part(ids, kind, batched)
    got = whole_result("step", part, SPACE)
    assert_same(got, want)
    assert got[1] is part.reward  # the part's own arrays: no copy
    assert got[0]["pos"] is part.obs[1]
    assert_same(whole_result("reset", part, SPACE), (want[0], want[4]))
    for delivered in (_whole_part(ids, kind, batched), _read_only(part)):  # taken as they are / copied by row
        gather = Gather("step", np.array(ids, np.int64), SPACE)
        gather.deliver(delivered, np.arange(len(ids)))
        assert_same(gather.future.result(), want)


@pytest.mark.parametrize("kind", ["none", "uniform", "mixed"])
async def test_info_list_gives_each_envs_own_dict(kind: str) -> None:
    ids = [2, 0, 1]
    want = [_info(kind, e) for e in ids]
    part = _whole_part(ids, kind, batched=False)
    got = whole_result("step", part, SPACE, info_list=True)[4]
    assert got == want
    assert len({id(d) for d in got}) == len(ids)  # one dict each, even where an env had none
    for delivered in (_whole_part(ids, kind, batched=False), _read_only(part)):
        gather = Gather("step", np.array(ids, np.int64), SPACE, info_list=True)
        gather.deliver(delivered, np.arange(len(ids)))
        assert gather.future.result()[4] == want


def test_a_take_of_one_whole_reply_hands_over_its_arrays() -> None:
    """A take that is exactly one queued reply of arrays of its own gives those arrays (no copy: nothing else
    holds them once taken); a read-only reply is copied, and rows after it are not touched by writes."""
    queue = RecvQueue(SPACE)
    whole = _make_part([0, 1], "uniform", set())
    queue.expect(5)
    queue.deliver(whole)
    queue.deliver(_read_only(_make_part([2, 3], "mixed", set())))
    queue.deliver(_make_part([4], "none", set()))
    obs, reward, _, _, info = queue.take(2)
    assert reward is whole.reward
    assert obs["pos"] is whole.obs[1]
    assert info["env_id"].tolist() == [0, 1]
    obs, reward, *_ = queue.take(2)  # read-only rows: copies the caller may write to
    assert reward.flags.writeable
    reward[:] = 99
    obs["pos"][:] = 99
    assert_same(queue.take(2), _expected([(4, "none")]))


@pytest.mark.parametrize("kind", ["uniform", "mixed"])
async def test_infos_kept_for_a_lane_call_merge_into_gymnasiums_batch_when_its_rows_are_taken(kind: str) -> None:
    """The infos of lane replies that were RESULTs (their rows in the slab, Gather.keep_info), one batched info
    per worker's run, come out of the one copy of the call's rows as gymnasium batches them; the envs are freed."""
    ids = list(range(6))
    with _shared_rows(6) as slab:
        gather = Gather("step", np.array(ids, np.int64), SPACE)
        assert gather.batches_infos
        for run in ([0, 1, 2], [4, 5]):  # (env 3's worker answered with a DONE: no info)
            gather.keep_info(batch_infos([_info(kind, e) for e in run], len(run)), np.array(run))
        freed: list[list[int]] = []
        gather.take_every_shared(slab, lambda env_ids: freed.append(env_ids.tolist()))
        want = _expected([(e, "none" if e == 3 else kind) for e in ids])
        assert_same(gather.future.result(), want)
        assert freed == [ids]


async def test_kept_infos_that_do_not_merge_fail_the_call_with_a_protocol_error() -> None:
    """A worker runs env code, so its infos are a peer's: columns that do not batch (a string where a column
    belongs, rows that do not fit) fail the call, whose envs are still freed, instead of the pool's loop."""
    for bad in ({"t": "not a column"}, {"t": np.arange(3)}):
        with _shared_rows(4) as slab:
            gather = Gather("step", np.arange(4, dtype=np.int64), SPACE)
            gather.keep_info(bad, np.array([0, 1]))
            freed: list[list[int]] = []
            gather.take_every_shared(slab, lambda env_ids, into=freed: into.append(env_ids.tolist()))
            with pytest.raises(ProtocolError, match="a worker's batched infos do not merge"):
                gather.future.result()
            assert freed == [[0, 1, 2, 3]]
    assert not Gather("step", np.arange(2, dtype=np.int64), SPACE, info_list=True).batches_infos


async def test_kept_infos_that_do_not_merge_fail_a_call_spilled_after_them_too() -> None:
    """A lane call whose first reply's info was kept, then turned into requests (a worker lost, a deadline): its
    runs come as taken shared rows, and the infos are merged at the end, failing the call as above."""
    with _shared_rows(4) as slab:
        gather = Gather("step", np.arange(4, dtype=np.int64), SPACE)
        gather.keep_info({"t": "not a column"}, np.array([0, 1]))
        freed: list[list[int]] = []
        for first in (0, 2):
            gather.take_shared(
                slab, first, np.array([first, first + 1]), lambda env_ids: freed.append(env_ids.tolist())
            )
        with pytest.raises(ProtocolError, match="a worker's batched infos do not merge"):
            gather.future.result()
        assert freed == [[0, 1, 2, 3]]


def test_kept_infos_that_do_not_merge_fail_a_recv_and_free_its_envs() -> None:
    held = _Held()
    queue = RecvQueue(SPACE, held)
    with _shared_rows(3) as slab:
        queue.expect(3)
        queue.deliver_shared(slab, [0])
        queue.deliver_shared(slab, [1, 2], {"t": "not a column"})
        assert held.busy == {0, 1, 2}
        with pytest.raises(ProtocolError, match="a worker's batched infos do not merge"):
            queue.take(3)
        assert not held.busy  # the rows are lost with the error; their envs take new steps
        assert queue.ready == 0


def test_kept_infos_that_do_not_merge_beside_a_replys_rows_free_every_env_of_the_take() -> None:
    held = _Held()
    queue = RecvQueue(SPACE, held)
    with _shared_rows(4) as slab:
        queue.expect(4)
        queue.deliver(_make_part([0, 1], "uniform", set()))  # a reply with its rows in the message
        queue.deliver_shared(slab, [2, 3], {"t": "not a column"})
        assert held.unread == {0, 1, 2, 3}
        with pytest.raises(ProtocolError, match="a worker's batched infos do not merge"):
            queue.take(4)
        assert not held.busy
        assert not held.unread  # a send() to any of them is taken again
        assert queue.ready == 0

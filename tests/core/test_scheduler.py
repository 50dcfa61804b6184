"""Tests for aioenv.core.scheduler.Scheduler: pure bookkeeping, no sockets, no event loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from aioenv.core import scheduler
from aioenv.core.scheduler import Request, Scheduler
from aioenv.errors import AioEnvError, UsageError


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def placed(num_envs: int, num_workers: int) -> Scheduler:
    sched = Scheduler(num_envs)
    sched.place(num_workers)
    return sched


def groups_by_worker(sched: Scheduler, env_ids: np.ndarray) -> dict[int, list[int]]:
    """split() as {worker: [env ids in caller order]}, checking the structural rules on the way."""
    out: dict[int, list[int]] = {}
    seen: list[int] = []
    for worker, positions in sched.split(env_ids):
        positions = np.asarray(positions)
        assert positions.ndim == 1
        assert positions.size > 0
        assert worker not in out, f"worker {worker} appears in two groups"
        assert np.all(np.diff(positions) > 0), f"positions {positions} do not keep the caller's order"
        members = env_ids[positions]
        assert np.all(sched.worker_of[members] == worker), f"envs {members} are not all on worker {worker}"
        out[int(worker)] = members.tolist()
        seen.extend(positions.tolist())
    assert sorted(seen) == list(range(env_ids.size)), f"positions {seen} do not cover 0..{env_ids.size - 1} once"
    return out


# ---------------------------------------------------------------- placement


@pytest.mark.parametrize(("num_envs", "num_workers"), [(10, 3), (10, 1), (10, 10), (7, 2), (1, 1), (64, 5)])
def test_place_contiguous_blocks(num_envs: int, num_workers: int) -> None:
    sched = Scheduler(num_envs)
    blocks = sched.place(num_workers)
    assert len(blocks) == num_workers
    assert np.concatenate(blocks).tolist() == list(range(num_envs)), "blocks must cover every env, in order"
    sizes = [b.size for b in blocks]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced blocks {sizes}"
    for worker, block in enumerate(blocks):
        assert block.size > 0
        assert np.all(np.diff(block) == 1), f"block {block} is not contiguous"
        assert np.all(sched.worker_of[block] == worker)
        assert sched.envs_of(worker).tolist() == block.tolist()


@pytest.mark.parametrize("num_workers", [0, -1, 11, 100])
def test_place_invalid_num_workers(num_workers: int) -> None:
    sched = Scheduler(10)
    with pytest.raises(ValueError, match=str(num_workers)):
        sched.place(num_workers)


# ---------------------------------------------------------------- resolve


def test_resolve_none_is_all_envs() -> None:
    sched = placed(5, 2)
    out = sched.resolve(None)
    assert out.tolist() == [0, 1, 2, 3, 4]
    assert out.dtype == np.int64


@pytest.mark.parametrize(
    "env_ids",
    [[3, 1, 2], (4, 0), np.array([2, 4, 0], dtype=np.int32), np.array([1, 0], dtype=np.uint8), range(4, -1, -1)],
    ids=["list", "tuple", "int32", "uint8", "range"],
)
def test_resolve_keeps_order_and_gives_int64(env_ids: Any) -> None:
    out = placed(5, 2).resolve(env_ids)
    assert out.dtype == np.int64
    assert out.ndim == 1
    assert out.tolist() == [int(i) for i in env_ids]


@pytest.mark.parametrize("env_id", [3, np.int64(3), np.array(3)])
def test_resolve_single_int(env_id: Any) -> None:
    assert placed(5, 2).resolve(env_id).tolist() == [3]


@pytest.mark.parametrize("env_id", [3, np.int64(3), np.uint8(3)])
def test_one_is_resolve_of_one_env_cached_and_read_only(env_id: Any) -> None:
    sched = placed(5, 2)
    first = sched.one(env_id)
    assert first.tolist() == [3]
    assert first.dtype == np.int64
    assert not first.flags.writeable
    assert sched.one(3) is sched.one(3)
    assert sched.one(3).tolist() == first.tolist()


@pytest.mark.parametrize(
    ("env_id", "words"),
    [
        (5, "unknown env id 5"),
        (-1, "unknown env id -1"),
        (True, r"env_id must be an int, got True \(bool\)"),
        ("0", r"env_id must be an int, got '0' \(str\)"),
        (1.0, r"env_id must be an int, got 1.0 \(float\)"),
        ([1], r"env_id must be an int, got \[1\] \(list\)"),
    ],
)
def test_one_refuses_what_resolve_refuses(env_id: Any, words: str) -> None:
    sched = placed(5, 2)
    sched.one(1)  # a cached id must not let 1.0 or True through
    with pytest.raises(UsageError, match=words):
        sched.one(env_id)


@pytest.mark.parametrize(("env_ids", "bad"), [([0, 5], 5), ([7], 7), ([-1, 0], -1), (99, 99), ([1, 2, 1000], 1000)])
def test_resolve_unknown_id_names_it(env_ids: Any, bad: int) -> None:
    with pytest.raises(UsageError) as excinfo:
        placed(5, 2).resolve(env_ids)
    assert str(bad) in str(excinfo.value)
    assert "0..4" in str(excinfo.value) or "4" in str(excinfo.value)


@pytest.mark.parametrize(("env_ids", "dup"), [([1, 2, 1], 1), ([4, 4], 4), ([0, 3, 2, 3, 0], 0)])
def test_resolve_duplicates_name_the_id(env_ids: list[int], dup: int) -> None:
    sched = placed(5, 2)
    with pytest.raises(UsageError) as excinfo:
        sched.resolve(env_ids)
    message = str(excinfo.value)
    assert f"env id {dup}" in message or f"{dup}" in message, message
    assert "more than once" in message or "duplicate" in message.lower(), message
    # a failed check leaves nothing behind: valid calls still work, duplicates still caught
    assert sched.resolve([0, 1, 2, 3, 4]).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(UsageError):
        sched.resolve(env_ids)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-3, 203), min_size=1, max_size=150),  # either side of SMALL_BATCH (64): both checks
    st.sampled_from([np.int64, np.int32, np.uint16]),
)
def test_resolve_of_a_batch_of_any_size_refuses_what_it_must(env_ids: list[int], dtype: Any) -> None:
    """Short and long id lists are checked by different code (Python's ``min``/``max``/``set`` up to
    ``SMALL_BATCH`` ids, numpy beyond): both must pass the same lists and name the same id in an error, the first
    unknown one in the caller's order, else the smallest repeated one."""
    sched = placed(200, 3)
    if dtype is np.uint16 and min(env_ids) < 0:
        env_ids = [abs(e) for e in env_ids]
    unknown = [e for e in env_ids if not 0 <= e < 200]
    repeated = sorted(e for e in set(env_ids) if env_ids.count(e) > 1)
    if unknown:
        with pytest.raises(UsageError, match=rf"^unknown env id {unknown[0]}: this pool has env ids 0\.\.199$"):
            sched.resolve(np.array(env_ids, dtype=dtype))
    elif repeated:
        with pytest.raises(UsageError, match=rf"^env id {repeated[0]} appears more than once in env_ids$"):
            sched.resolve(np.array(env_ids, dtype=dtype))
    else:
        ids = sched.resolve(np.array(env_ids, dtype=dtype))
        assert ids.dtype == np.int64
        assert ids.tolist() == env_ids
    assert not sched._seen.any()  # the scratch mask of the long lists' check is left clear


@pytest.mark.parametrize("size", [1, 2, 63, 64, 65, 150, 200])
def test_resolve_at_either_side_of_the_short_list_check(size: int) -> None:
    sched = placed(200, 3)
    ids = np.random.default_rng(size).permutation(200)[:size]
    assert sched.resolve(ids).tolist() == ids.tolist()
    last = ids.copy()
    last[-1] = 200  # the pool's size: the first id past its end
    with pytest.raises(UsageError, match=r"^unknown env id 200: "):
        sched.resolve(last)
    if size > 1:
        twice = ids.copy()
        twice[-1] = twice[0]
        with pytest.raises(UsageError, match=rf"^env id {twice[0]} appears more than once"):
            sched.resolve(twice)
    assert sched.resolve(ids).tolist() == ids.tolist()  # a refused call leaves nothing behind


@pytest.mark.parametrize(
    "env_ids",
    [[], np.array([], dtype=np.int64), [[0, 1]], np.zeros((2, 2), dtype=np.int64), [0.0, 1.0], [0.5], ["0"], [True]],
    ids=["empty_list", "empty_array", "2d_list", "2d_array", "floats", "float", "str", "bool"],
)
def test_resolve_rejects_malformed(env_ids: Any) -> None:
    with pytest.raises(UsageError) as excinfo:
        placed(5, 2).resolve(env_ids)
    assert str(excinfo.value)
    assert isinstance(excinfo.value, RuntimeError)
    assert isinstance(excinfo.value, AioEnvError)


def test_resolve_empty_message() -> None:
    with pytest.raises(UsageError, match="empty"):
        placed(5, 2).resolve([])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=12))
def test_property_resolve_accepts_exactly_unique_in_range_ids(env_ids: list[int]) -> None:
    sched = placed(10, 3)
    valid = bool(env_ids) and len(set(env_ids)) == len(env_ids) and all(0 <= i < 10 for i in env_ids)
    if valid:
        assert sched.resolve(env_ids).tolist() == env_ids
    else:
        with pytest.raises(UsageError):
            sched.resolve(env_ids)
    # the scheduler's own state is untouched by resolve
    assert not sched.busy.any()
    assert sched.resolve(None).tolist() == list(range(10))


# ---------------------------------------------------------------- claim / busy


def test_claim_marks_busy_and_second_claim_names_the_env() -> None:
    sched = placed(6, 2)
    sched.claim(ids(1, 2))
    assert sched.busy.tolist() == [False, True, True, False, False, False]
    with pytest.raises(UsageError) as excinfo:
        sched.claim(ids(3, 2))
    assert excinfo.value.env_id == 2
    assert "env 2" in str(excinfo.value)
    assert not sched.busy[3], "a refused claim must not claim any of its envs"
    sched.release(ids(1, 2))
    assert not sched.busy.any()
    sched.claim(ids(2, 3))
    assert sched.busy.tolist() == [False, False, True, True, False, False]


def test_claim_single_busy_env() -> None:
    sched = placed(3, 1)
    sched.claim(ids(0))
    with pytest.raises(UsageError, match="env 0"):
        sched.claim(ids(0))
    sched.claim(sched.one(2))
    with pytest.raises(UsageError, match="env 2"):
        sched.claim(sched.one(2))
    assert sched.busy.tolist() == [True, False, True]


def test_unread_results_refuse_claims_until_read() -> None:
    sched = placed(4, 2)
    sched.claim(ids(0, 1, 2))
    assert sched.finish(sched.open(0, "step", ids(0, 1)).id) is not None  # replies arrived: not busy...
    sched.mark_unread(ids(0, 1))  # ...but their results wait for recv()
    assert sched.unread_count == 2
    assert not sched.busy[:2].any()
    for claim in (ids(1), sched.one(0), ids(3, 0)):
        with pytest.raises(UsageError, match=r"last result has arrived but recv\(\) has not returned it") as exc:
            sched.claim(claim)
        assert exc.value.env_id in (0, 1)
    with pytest.raises(UsageError, match="env 2 already has a request in flight"):  # in flight: said so
        sched.claim(ids(2, 0))
    assert not sched.busy[3], "a refused claim must not claim any of its envs"
    sched.claim(ids(3))
    sched.mark_read(ids(1))
    sched.claim(ids(1))
    sched.mark_read(ids(0))
    assert sched.unread_count == 0
    sched.claim(sched.one(0))
    assert sched.busy.tolist() == [True, True, True, True]


# ---------------------------------------------------------------- split


def test_split_all_envs() -> None:
    sched = placed(6, 2)
    all_ids = sched.resolve(None)
    assert groups_by_worker(sched, all_ids) == {0: [0, 1, 2], 1: [3, 4, 5]}


def test_split_mixed_order_keeps_caller_order_within_workers() -> None:
    sched = placed(9, 3)  # 0: 0-2, 1: 3-5, 2: 6-8
    env_ids = ids(7, 5, 0, 8, 3, 2)
    assert groups_by_worker(sched, env_ids) == {2: [7, 8], 1: [5, 3], 0: [0, 2]}
    # positions index into env_ids
    for worker, positions in sched.split(env_ids):
        assert np.all(sched.worker_of[env_ids[positions]] == worker)


def test_split_single_worker_fast_path() -> None:
    sched = placed(6, 2)
    env_ids = ids(5, 3)
    groups = sched.split(env_ids)
    assert len(groups) == 1
    worker, positions = groups[0]
    assert worker == 1
    assert np.asarray(positions).tolist() == [0, 1]


def test_split_single_env() -> None:
    sched = placed(6, 3)
    groups = sched.split(ids(4))
    assert [(w, np.asarray(p).tolist()) for w, p in groups] == [(2, [0])]


def test_split_after_placing_again() -> None:
    sched = placed(6, 2)
    all_ids = sched.resolve(None)
    assert groups_by_worker(sched, all_ids) == {0: [0, 1, 2], 1: [3, 4, 5]}  # caches the all-env split
    assert groups_by_worker(sched, ids(4, 1, 0)) == {1: [4], 0: [1, 0]}
    sched.place(3)  # re-placing invalidates the cache
    assert groups_by_worker(sched, sched.resolve(None)) == {0: [0, 1], 1: [2, 3], 2: [4, 5]}


@settings(max_examples=200, deadline=None)
@given(
    num_envs=st.integers(1, 16),
    data=st.data(),
)
def test_property_split_partitions_by_worker(num_envs: int, data: st.DataObject) -> None:
    sched = Scheduler(num_envs)
    sched.place(data.draw(st.integers(1, num_envs), label="num_workers"))
    env_ids = np.array(
        data.draw(st.permutations(range(num_envs)), label="order")[: data.draw(st.integers(1, num_envs))],
        dtype=np.int64,
    )
    groups = groups_by_worker(sched, env_ids)
    expected: dict[int, list[int]] = {}
    for env in env_ids.tolist():
        expected.setdefault(int(sched.worker_of[env]), []).append(env)
    assert groups == expected
    for _, positions in sched.split(env_ids):  # increasing: a group of every row is every row in order
        assert np.all(np.diff(positions) > 0)


@settings(max_examples=100, deadline=None)
@given(num_envs=st.integers(2, 400), data=st.data())
def test_property_split_masked_and_sorted_agree(num_envs: int, data: st.DataObject) -> None:
    """The grouping by a mask per worker (a few workers) and by a stable sort (many) give the same groups, in
    the same order (by worker), whatever the sizes: either may serve a call."""
    sched = Scheduler(num_envs)
    sched.place(data.draw(st.integers(1, min(num_envs, 24)), label="num_workers"))
    order = data.draw(st.permutations(range(num_envs)), label="order")
    env_ids = np.array(order[: data.draw(st.integers(2, num_envs))], dtype=np.int64)
    small, large = sched._split_masked(env_ids), sched._split_sorted(env_ids)
    assert [w for w, _ in small] == [w for w, _ in large] == sorted({int(w) for w, _ in large})
    for (_, a), (_, b) in zip(small, large, strict=True):
        assert a.tolist() == b.tolist()
    assert groups_by_worker(sched, env_ids)  # and the public split (either path) keeps the rules


# ---------------------------------------------------------------- requests


def test_open_and_finish() -> None:
    sched = placed(6, 2)
    sched.claim(ids(0, 1))
    sink = object()
    req = sched.open(0, "step", ids(0, 1), sink=sink, positions=np.arange(2))
    assert isinstance(req, Request)
    assert req.worker == 0
    assert req.kind == "step"
    assert req.sink is sink
    assert req.env_ids.tolist() == [0, 1]
    assert sched.requests[req.id] is req
    sched.claim(ids(3))
    other = sched.open(1, "reset", ids(3))
    assert other.id != req.id

    assert sched.finish(req.id) is req
    assert sched.busy.tolist() == [False, False, False, True, False, False], "only that request's envs are freed"
    assert req.id not in sched.requests
    assert sched.finish(req.id) is None, "a second reply to a closed request is dropped"
    assert sched.finish(other.id) is other
    assert not sched.busy.any()


@pytest.mark.parametrize("req_id", [12345, -1, 0, None, "1", 1.0, b"1"])
def test_finish_unknown_id_is_none(req_id: Any) -> None:
    sched = placed(4, 2)
    sched.claim(ids(0))
    req = sched.open(0, "step", ids(0))
    if req_id == req.id and isinstance(req_id, int):
        pytest.skip("collides with a real id")
    assert sched.finish(req_id) is None
    assert sched.requests == {req.id: req}
    assert sched.busy[0]


def test_request_ids_are_unique_and_never_reused() -> None:
    sched = placed(4, 2)
    seen = set()
    for _ in range(20):
        sched.claim(ids(0))
        req = sched.open(0, "step", ids(0))
        assert req.id not in seen
        seen.add(req.id)
        sched.finish(req.id)


def test_lose_worker_returns_only_its_requests_and_frees_their_envs() -> None:
    sched = placed(6, 2)
    reqs = []
    for worker, env_ids in [(0, ids(0)), (1, ids(3, 4)), (0, ids(1, 2)), (1, ids(5))]:
        sched.claim(env_ids)
        reqs.append(sched.open(worker, "step", env_ids))
    lost = sched.lose_worker(0)
    assert lost == [reqs[0], reqs[2]], "worker 0's requests, oldest first"
    assert sched.busy.tolist() == [False, False, False, True, True, True]
    assert set(sched.requests) == {reqs[1].id, reqs[3].id}
    assert sched.finish(reqs[0].id) is None, "a late reply from the dead worker is dropped"
    assert sched.lose_worker(0) == []
    assert sched.lose_worker(7) == []
    assert sched.lose_worker(1) == [reqs[1], reqs[3]]
    assert not sched.busy.any()
    assert sched.requests == {}


# ---------------------------------------------------------------- deadlines


def test_deadlines_next_and_expire() -> None:
    sched = placed(6, 3)
    assert sched.next_deadline() is None
    assert sched.expire(1e9) == []
    r5 = sched.open(0, "step", ids(0), deadline=5.0)
    r3 = sched.open(1, "step", ids(2), deadline=3.0)
    r_none = sched.open(2, "step", ids(4))
    r7 = sched.open(0, "step", ids(1), deadline=7.0)
    sched.busy[[0, 2, 4, 1]] = True
    assert sched.next_deadline() == 3.0

    assert sched.expire(2.9) == []
    assert sched.expire(4.0) == [r3]
    assert not sched.busy[2], "an expired request frees its env"
    assert sched.finish(r3.id) is None, "the late reply to an expired request is dropped"
    assert sched.next_deadline() == 5.0

    assert sched.finish(r5.id) is r5  # answered in time: never expires
    assert sched.next_deadline() == 7.0
    assert sched.expire(6.0) == []
    assert sched.expire(7.0) == [r7], "a deadline equal to now is due"
    assert sched.next_deadline() is None
    assert sched.expire(1e9) == []
    assert set(sched.requests) == {r_none.id}


def test_expire_returns_due_requests_in_deadline_order() -> None:
    sched = placed(8, 2)
    deadlines = [4.0, 1.0, 3.0, 2.0, 10.0, 1.0]
    reqs = [sched.open(i % 2, "step", ids(i), deadline=d) for i, d in enumerate(deadlines)]
    expired = sched.expire(5.0)
    assert [r.deadline for r in expired] == [1.0, 1.0, 2.0, 3.0, 4.0]
    assert [r.id for r in expired[:2]] == [reqs[1].id, reqs[5].id], "ties keep the order they were opened in"
    assert set(sched.requests) == {reqs[4].id}
    assert sched.next_deadline() == 10.0


def test_finished_and_lost_requests_are_not_expired() -> None:
    sched = placed(4, 2)
    a = sched.open(0, "step", ids(0), deadline=1.0)
    b = sched.open(1, "step", ids(2), deadline=2.0)
    c = sched.open(1, "step", ids(3), deadline=3.0)
    sched.finish(a.id)
    sched.lose_worker(1)
    assert sched.next_deadline() is None
    assert sched.expire(100.0) == []
    assert b.id not in sched.requests
    assert c.id not in sched.requests


# ---------------------------------------------------------------- drain


def test_drain_closes_everything() -> None:
    sched = placed(4, 2)
    reqs = []
    for worker, env in [(0, 0), (1, 2), (1, 3)]:
        sched.claim(ids(env))
        reqs.append(sched.open(worker, "step", ids(env), deadline=float(env)))
    assert sched.drain() == reqs
    assert sched.requests == {}
    assert not sched.busy.any()
    assert sched.drain() == []
    assert sched.next_deadline() is None
    assert sched.expire(1e9) == []
    assert all(sched.finish(r.id) is None for r in reqs)


# ---------------------------------------------------------------- stateful property


NUM_ENVS = 8
NUM_WORKERS = 3


class SchedulerMachine(RuleBasedStateMachine):
    """Random claim/open/finish/lose_worker/expire/drain sequences, as the coordinator drives them.

    Invariant: ``busy[e]`` is True iff ``e`` belongs to an open request, and every env belongs to at
    most one open request.
    """

    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler(NUM_ENVS)
        self.sched.place(NUM_WORKERS)
        self.model: dict[int, tuple[int, frozenset[int], float | None]] = {}  # id -> (worker, envs, deadline)
        self.closed: set[int] = set()
        self.kinds: dict[int, str] = {}
        self.order: dict[int, list[int]] = {}  # id -> env ids in row order
        self.now = 0.0

    def _close(self, reqs: list[Request]) -> None:
        for req in reqs:
            assert req.id in self.model, f"request {req.id} was closed twice"
            # a request closed early hands back exactly its unanswered rows
            assert sorted(req.env_ids.tolist()) == sorted(self.model[req.id][1]), "closed with the wrong rows"
            del self.model[req.id]
            self.kinds.pop(req.id, None)
            self.closed.add(req.id)

    @rule(
        target=requests,
        env_list=st.lists(st.integers(0, NUM_ENVS - 1), min_size=1, max_size=NUM_ENVS, unique=True),
        timeout=st.one_of(st.none(), st.floats(0.5, 10.0)),
        kind=st.sampled_from(["step", "reset", "call"]),
    )
    def submit(self, env_list: list[int], timeout: float | None, kind: str) -> list[int]:
        env_ids = self.sched.resolve(env_list)
        busy_before = self.sched.busy.copy()
        already = [e for e in env_list if any(e in envs for _, envs, _ in self.model.values())]
        if already:
            with pytest.raises(UsageError) as excinfo:
                self.sched.claim(env_ids)
            assert excinfo.value.env_id in already
            assert f"env {excinfo.value.env_id}" in str(excinfo.value)
            assert np.array_equal(self.sched.busy, busy_before), "a refused claim changed busy"
            return []
        self.sched.claim(env_ids)
        deadline = None if timeout is None else self.now + timeout
        opened = []
        for worker, positions in self.sched.split(env_ids):
            part = env_ids[positions]
            req = self.sched.open(worker, kind, part, positions=positions, deadline=deadline)
            assert req.id not in self.model, "request id reused"
            assert req.id not in self.closed, "request id reused"
            self.model[req.id] = (worker, frozenset(part.tolist()), deadline)
            self.kinds[req.id] = kind
            self.order[req.id] = part.tolist()
            opened.append(req.id)
        return opened

    @rule(opened=requests, data=st.data())
    def partial_reply(self, opened: list[int], data: st.DataObject) -> None:
        """A thread/async worker's reply carrying some of a request's rows."""
        open_ids = [r for r in opened if r in self.model]
        if not open_ids:
            return
        req_id = data.draw(st.sampled_from(open_ids))
        worker, envs, deadline = self.model[req_id]
        rows = [i for i, e in enumerate(self.order[req_id]) if e in envs]
        some = data.draw(st.lists(st.sampled_from(rows), min_size=1, unique=True))
        req = self.sched.finish_rows(req_id, np.array(some, dtype=np.int64))
        assert req is not None
        assert req.id == req_id
        left = envs - {self.order[req_id][i] for i in some}
        again = np.array(some, dtype=np.int64)
        if left:
            self.model[req_id] = (worker, left, deadline)
            assert req_id in self.sched.requests
            with pytest.raises(ValueError, match="answered already"):
                self.sched.finish_rows(req_id, again)  # the same rows twice: refused, nothing changes
        else:
            del self.model[req_id]
            self.kinds.pop(req_id, None)
            self.closed.add(req_id)
            assert req_id not in self.sched.requests
            assert self.sched.finish_rows(req_id, again) is None  # closed with its last row

    @rule(opened=consumes(requests))
    def reply(self, opened: list[int]) -> None:
        for req_id in opened:
            req = self.sched.finish(req_id)
            if req_id in self.model:
                assert req is not None
                assert req.id == req_id
                self._close([req])
            else:
                assert req is None, f"request {req_id} was closed already but finish() returned it"

    @rule(opened=requests)
    def duplicate_reply(self, opened: list[int]) -> None:
        """A reply to a request that may be closed already."""
        for req_id in opened:
            req = self.sched.finish(req_id)
            if req is not None:
                assert req_id in self.model
                self._close([req])
            else:
                assert req_id not in self.model

    @rule(req_id=st.one_of(st.integers(-5, 10_000), st.none(), st.text(max_size=3)))
    def stray_reply(self, req_id: Any) -> None:
        if isinstance(req_id, int) and req_id in self.model:
            return
        assert self.sched.finish(req_id) is None

    @rule(worker=st.integers(0, NUM_WORKERS))
    def lose_worker(self, worker: int) -> None:
        expected = sorted(rid for rid, (w, _, _) in self.model.items() if w == worker)
        lost = self.sched.lose_worker(worker)
        assert [r.id for r in lost] == expected
        assert all(r.worker == worker for r in lost)
        self._close(lost)

    @rule(dt=st.floats(0.0, 6.0))
    def tick(self, dt: float) -> None:
        self.now += dt
        due = sorted(
            ((d, rid) for rid, (_, _, d) in self.model.items() if d is not None and d <= self.now),
        )
        expired = self.sched.expire(self.now)
        assert [(r.deadline, r.id) for r in expired] == due
        self._close(expired)

    @rule()
    def drain(self) -> None:
        drained = self.sched.drain()
        assert sorted(r.id for r in drained) == sorted(self.model)
        self._close(drained)

    @invariant()
    def busy_iff_in_open_request(self) -> None:
        owners = np.zeros(NUM_ENVS, dtype=np.int64)
        for _, envs, _ in self.model.values():
            for e in envs:
                owners[e] += 1
        assert owners.max(initial=0) <= 1, f"an env is in two open requests: {owners}"
        assert self.sched.busy.tolist() == (owners == 1).tolist(), (
            f"busy {self.sched.busy.astype(int).tolist()} != envs of open requests {owners.tolist()}"
        )
        assert set(self.sched.requests) == set(self.model)

    @invariant()
    def running_counts_unanswered_step_and_reset_rows(self) -> None:
        expected = sum(len(envs) for rid, (_, envs, _) in self.model.items() if self.kinds[rid] != "call")
        assert self.sched.running == expected

    @invariant()
    def next_deadline_is_earliest_open(self) -> None:
        deadlines = [d for _, _, d in self.model.values() if d is not None]
        assert self.sched.next_deadline() == (min(deadlines) if deadlines else None)


SchedulerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestSchedulerMachine = SchedulerMachine.TestCase


# ---------------------------------------------------------------- partial replies (thread/async workers)


def test_finish_rows_frees_rows_and_closes_with_the_last() -> None:
    sched = placed(4, 1)
    sched.claim(ids(0, 1, 2))
    req = sched.open(0, "step", ids(0, 1, 2), positions=ids(0, 1, 2))
    assert sched.running == 3
    assert sched.finish_rows(req.id, ids(1)) is req
    assert sched.busy.tolist() == [True, False, True, False]
    assert req.id in sched.requests
    assert req.left == 2
    assert sched.running == 2
    assert sched.finish_rows(req.id, ids(2, 0)) is req
    assert req.id not in sched.requests
    assert not sched.busy.any()
    assert sched.running == 0
    assert sched.finish_rows(req.id, ids(0)) is None  # closed: a late reply is dropped


@pytest.mark.parametrize("k", [2, 6], ids=["few rows (Python)", "many rows (numpy)"])
def test_finish_rows_refuses_bad_rows_and_changes_nothing_then(k: int) -> None:
    sched = placed(16, 1)
    req = sched.open(0, "step", np.arange(16, dtype=np.int64))
    sched.claim(np.arange(16, dtype=np.int64))
    some = np.arange(k, dtype=np.int64)
    for bad in (np.append(some[:-1], 16), np.append(some[:-1], -1)):
        with pytest.raises(ValueError, match="out of range"):
            sched.finish_rows(req.id, bad)
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, np.append(some[:-1], 0))  # row 0 twice
    assert sched.busy.all()
    assert req.left == 16
    assert req.answered is not None
    assert not req.answered.any()
    assert sched.finish_rows(req.id, some) is req
    assert sched.busy.tolist() == [False] * k + [True] * (16 - k)
    assert req.left == 16 - k
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, np.append(np.arange(15, 16 - k, -1), 0))  # fresh rows, then one answered
    assert sched.busy.tolist() == [False] * k + [True] * (16 - k)
    assert req.left == 16 - k


@pytest.mark.parametrize("k", [2, 12, 20], ids=["a few rows", "a dozen (still Python)", "many rows (numpy)"])
def test_finish_rows_takes_a_replys_list_as_its_array(k: int) -> None:
    sched = placed(32, 1)
    req = sched.open(0, "step", np.arange(32, dtype=np.int64))
    sched.claim(np.arange(32, dtype=np.int64))
    for bad in ([*range(k - 1), float(k)], [*range(k - 1), str(k)], [*range(k - 1), True], [*range(k - 1), [k]]):
        with pytest.raises(ValueError, match="are not ints in range"):
            sched.finish_rows(req.id, bad)
    for bad in ([*range(k - 1), 32], [*range(k - 1), -1], [*range(k - 1), 2**70]):
        with pytest.raises(ValueError, match="are not ints in range for a request of 32"):
            sched.finish_rows(req.id, bad)
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, [*range(k - 1), 0])  # row 0 twice
    assert sched.busy.all()
    assert req.left == 32
    assert req.answered is None or not req.answered.any()
    assert sched.finish_rows(req.id, list(range(k, 0, -1))) is req
    assert sched.busy.tolist() == [True] + [False] * k + [True] * (31 - k)
    assert req.left == 32 - k
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, [*range(31, 31 - k + 1, -1), 1])  # fresh rows, then one answered
    assert sched.busy.tolist() == [True] + [False] * k + [True] * (31 - k)
    assert req.left == 32 - k


def _open_three(sched: Scheduler) -> list[Request]:
    """Three requests of 8, 8 and 20 envs (ids 0-35, in a scrambled order), claimed, on two workers."""
    order = np.random.default_rng(7).permutation(36).astype(np.int64)
    sched.claim(order)
    return [sched.open(w, "step", order[a:b]) for w, (a, b) in zip((0, 1, 0), ((0, 8), (8, 16), (16, 36)), strict=True)]


def _reply_item(req_ids: list[int]) -> st.SearchStrategy[list[Any]]:
    """One ``[request id, [rows]]`` of a worker's reply, honest or not: a known or unknown id, rows in range or not,
    repeated, of other types, more than a few."""
    row = st.one_of(st.integers(-2, 21), st.integers(-2, 21), st.sampled_from([True, 1.0, "1", None, 2**70]))
    return st.tuples(
        st.one_of(st.sampled_from(req_ids), st.sampled_from([-1, 999, "0", None, 1.5])),
        st.lists(st.integers(0, 19), max_size=20) | st.lists(row, max_size=5),
    ).map(list)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_replys_listed_rows_finish_as_each_item_would_alone(data: st.DataObject) -> None:
    # Scheduler.finish_listed takes a thread or async worker's reply (``[[request id, [rows]], ...]``) in one call;
    # it must do what finish_rows(keep_claim=True) of each item does, refusing what that refuses, item by item.
    ours, theirs = placed(36, 2), placed(36, 2)
    reqs, refs = _open_three(ours), _open_three(theirs)
    assert [r.id for r in reqs] == [r.id for r in refs]
    for _ in range(data.draw(st.integers(1, 4))):  # replies one after another: rows answered by an earlier one
        reply = data.draw(st.lists(_reply_item([r.id for r in reqs]), max_size=8))
        got, refused = ours.finish_listed([list(item) for item in reply])
        want: list[int] = []
        refusals = 0
        for req_id, rows in reply:
            try:
                done = theirs.finish_rows(req_id, rows, keep_claim=True)
            except (ValueError, TypeError):
                refusals += 1
                continue
            if done is None:
                refusals += 1
            else:
                want += done.env_ids.take(rows).tolist()
        assert got == want
        assert len(refused) == refusals
        assert sorted(ours.requests) == sorted(theirs.requests)
        for a, b in zip(reqs, refs, strict=True):
            assert a.left == b.left
            assert (a.answered is None and b.answered is None) or np.array_equal(
                a.answered if a.answered is not None else np.zeros(a.env_ids.size, bool),
                b.answered if b.answered is not None else np.zeros(b.env_ids.size, bool),
            )
        assert np.array_equal(ours.busy, theirs.busy)
        assert ours.running == theirs.running


@pytest.mark.parametrize("rows", [[1], [2, 0], [0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]])
def test_finish_rows_keep_claim_leaves_the_envs_busy(rows: list[int]) -> None:
    sched = placed(8, 1)
    env_ids = np.arange(2, 8, dtype=np.int64)
    sched.claim(env_ids)
    req = sched.open(0, "step", env_ids)
    assert sched.finish_rows(req.id, rows, keep_claim=True) is req
    assert sched.busy.tolist() == [False, False] + [True] * 6  # rows left in the slab: nothing may write them
    assert req.left == 6 - len(rows)
    assert sched.running == 6 - len(rows)
    assert (req.id in sched.requests) == (len(rows) < 6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_a_whole_request_in_order_closes_at_once_and_anything_else_is_checked(dtype: type) -> None:
    sched = placed(16, 1)
    env_ids = np.arange(4, 14, dtype=np.int64)
    sched.claim(env_ids)
    req = sched.open(0, "step", env_ids)
    assert sched.finish_rows(req.id, np.arange(10, dtype=dtype)) is req  # every row, 0..9 in order
    assert req.id not in sched.requests
    assert req.left == 0
    assert not sched.busy.any()
    assert sched.running == 0
    assert sched.finish_rows(req.id, np.arange(10, dtype=dtype)) is None  # closed
    sched.claim(env_ids)
    req = sched.open(0, "step", env_ids)
    for bad in ([0, 1, 2, 3, 4, 5, 6, 7, 8, 8], [0, 1, 2, 3, 4, 5, 6, 7, 8, 10], [1, 0, 2, 3, 4, 5, 6, 7, 8, 8]):
        with pytest.raises(ValueError, match=r"answered already|out of range"):  # as many rows, not every row
            sched.finish_rows(req.id, np.array(bad, dtype=dtype))
        assert sched.busy[env_ids].all()
        assert req.left == 10
    assert sched.finish_rows(req.id, np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], dtype=dtype)) is req  # any order
    assert req.id not in sched.requests
    assert not sched.busy.any()


def test_finish_rows_refuses_bad_rows() -> None:
    sched = placed(4, 1)
    req = sched.open(0, "step", ids(0, 1))
    with pytest.raises(ValueError, match="out of range"):
        sched.finish_rows(req.id, ids(2))
    sched.finish_rows(req.id, ids(0))
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, ids(0))
    with pytest.raises(ValueError, match="answered already"):
        sched.finish_rows(req.id, ids(1, 1))


@pytest.mark.parametrize("closing", ["expire", "lose_worker", "drain", "finish"])
def test_closing_a_partly_answered_request_keeps_only_unanswered_rows(closing: str) -> None:
    """The rows answered already may belong to new requests by now: closing must not touch them."""
    sched = placed(4, 1)
    sched.claim(ids(3, 1, 2))
    req = sched.open(0, "step", ids(3, 1, 2), positions=ids(0, 1, 2), deadline=5.0)
    sched.finish_rows(req.id, ids(1))  # env 1 answered...
    sched.claim(ids(1))  # ...and busy again with a new request
    closed = {
        "expire": lambda: sched.expire(10.0),
        "lose_worker": lambda: sched.lose_worker(0),
        "drain": lambda: sched.drain(),
        "finish": lambda: [sched.finish(req.id)],
    }[closing]()
    assert closed == [req]
    assert req.env_ids.tolist() == [3, 2]
    assert req.positions is not None
    assert req.positions.tolist() == [0, 2]
    assert sched.busy.tolist() == [False, True, False, False]  # env 1's new request is untouched
    assert sched.running == 0


# ---------------------------------------------------------------- concurrency limit


def test_room_hold_unhold_keeps_order_and_limit() -> None:
    sched = Scheduler(8, limit=3)
    sched.place(1)
    assert sched.room(2) == 2
    first = sched.open(0, "step", ids(0, 1))
    assert sched.room(5) == 1  # one row of room left
    sched.hold("a", ids(2, 3, 4, 5), ids(1, 2, 3, 4))
    assert sched.room(1) == 0  # held rows go first, even when there is room
    sched.hold("b", ids(6), ids(0))
    out = sched.unhold()  # one row of room: the head of "a" (split)
    assert [(h.item, h.env_ids.tolist(), h.positions.tolist()) for h in out] == [("a", [2], [1])]
    sched.open(0, "step", out[0].env_ids)
    assert sched.unhold() == []  # full
    sched.finish(first.id)
    out = sched.unhold()  # two rows of room: the next two of "a", in order
    assert [(h.item, h.env_ids.tolist(), h.positions.tolist()) for h in out] == [("a", [3, 4], [2, 3])]
    for h in out:
        sched.open(0, "step", h.env_ids)
    assert sched.running == 3
    assert sched.unhold() == []
    assert [(h.item, h.env_ids.tolist()) for h in sched.held] == [("a", [5]), ("b", [6])]


def test_calls_do_not_count_against_the_limit() -> None:
    sched = Scheduler(4, limit=1)
    sched.place(1)
    sched.open(0, "call", ids(0, 1, 2))
    assert sched.running == 0
    assert sched.room(1) == 1


def test_drop_held_frees_envs() -> None:
    sched = Scheduler(4, limit=1)
    sched.place(1)
    sched.claim(ids(0, 1))
    sched.hold("x", ids(0, 1), ids(0, 1))
    assert [h.item for h in sched.drop_held()] == ["x"]
    assert not sched.busy.any()
    assert not sched.held


def test_no_limit_means_all_rows_go() -> None:
    sched = placed(4, 1)
    assert sched.room(4) == 4
    assert sched.unhold() == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([[0, 1], [1, 0], [5, 6, 7], [7, 7], [0, 9], [-1], [3], [2, 3, 4, 5]]), max_size=60))
def test_resolve_remembers_checked_ids_but_answers_as_a_fresh_check_would(calls: list[list[int]]) -> None:
    """A send()/recv() loop sends the same id arrays again and again: their checks are remembered, and must never
    change an answer (a refused array is refused every time, whatever was resolved before it)."""
    sched, fresh = placed(8, 2), placed(8, 2)
    for env_ids in calls:
        for dtype in (np.int64, np.int32):
            try:
                want: list[int] | str = fresh.resolve(np.array(env_ids, dtype=dtype)).tolist()
            except UsageError as exc:
                want = str(exc)
            fresh._checked.clear()  # a scheduler with no memory
            try:
                got: list[int] | str = sched.resolve(np.array(env_ids, dtype=dtype)).tolist()
            except UsageError as exc:
                got = str(exc)
            assert got == want, (env_ids, dtype)
    assert len(sched._checked) <= scheduler.KNOWN_ID_SETS


def test_resolve_checks_an_id_array_once_and_bounds_what_it_remembers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "compiled", None)  # (the twins remember; the compiled check runs every time)
    sched = placed(200, 2)
    checked: list[list[int]] = []
    check = Scheduler._check

    def counted(self: Scheduler, ids: np.ndarray) -> None:
        checked.append(ids.tolist())
        check(self, ids)

    monkeypatch.setattr(Scheduler, "_check", counted)
    batch = np.arange(64, 128)
    for _ in range(3):  # a loop's batch, sent again and again: checked once
        assert sched.resolve(batch) is batch
    assert sched.resolve(batch.astype(np.int32)).tolist() == batch.tolist()  # the same ids as another dtype
    assert checked == [batch.tolist()]
    assert sched.resolve(batch[::-1].copy()).tolist() == batch[::-1].tolist()  # another order: checked
    assert len(checked) == 2
    many = np.arange(scheduler.KNOWN_IDS_MAX + 1) % 200  # beyond the size remembered (and refused)
    for _ in range(2):
        with pytest.raises(UsageError, match="appears more than once"):
            sched.resolve(many)
    assert len(checked) == 4
    for k in range(scheduler.KNOWN_ID_SETS + 5):  # more arrays than it remembers: it forgets, never grows past
        sched.resolve([k, k + 1])
        assert len(sched._checked) <= scheduler.KNOWN_ID_SETS
    checked.clear()
    sched.resolve(batch)  # forgotten on the way: checked again
    assert checked == [batch.tolist()]


def test_the_compiled_check_of_ids_runs_on_every_call_and_remembers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = placed(200, 2)
    calls: list[tuple[list[int], int]] = []

    class Counted:  # the compiled function's contract (tests/core/test_speedups.py holds it to its twin)
        @staticmethod
        def check_ids(ids: np.ndarray, num_envs: int) -> tuple[bool, int] | None:
            listed = ids.tolist()
            calls.append((listed, num_envs))
            unknown = [i for i in listed if not 0 <= i < num_envs]
            if unknown:
                return False, unknown[0]
            twice = sorted(i for i in set(listed) if listed.count(i) > 1)
            return (True, twice[0]) if twice else None

    monkeypatch.setattr(scheduler, "compiled", Counted)
    batch = np.arange(64, 128)
    for _ in range(3):
        assert sched.resolve(batch) is batch
    assert calls == [(batch.tolist(), 200)] * 3
    assert not sched._checked
    with pytest.raises(UsageError, match="env id 70 appears more than once"):
        sched.resolve(np.array([70, 1, 70]))
    with pytest.raises(UsageError, match="unknown env id 200"):
        sched.resolve(np.array([5, 200]))
    assert sched.resolve(batch[::2]).tolist() == batch[::2].tolist()  # not contiguous: the twin checks it
    assert len(calls) == 5

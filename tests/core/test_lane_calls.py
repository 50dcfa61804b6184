"""Lane calls in the scheduler (aioenv.core.scheduler.LaneCall): one lock-step step of every env kept as one
entry, ticked off reply by reply, and turned into ordinary requests with the same ids whenever anything but a
reply concerns it. Pure bookkeeping: the sink is never touched here, so a placeholder stands for it."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioenv._hot import load
from aioenv.core.scheduler import KNOWN_ID_SETS, LaneCall, Scheduler, _few_runs_by_owner, _runs_by_owner
from aioenv.core.sinks import Gather, RecvQueue

SINK = cast(Gather, object())  # the scheduler only carries it
_COMPILED = load()  # the compiled part, where it was built (tests/core/test_speedups.py)


def lane_call(num_envs: int = 6, workers: int = 3, deadline: float | None = None) -> tuple[Scheduler, LaneCall]:
    sched = Scheduler(num_envs)
    sched.place(workers)
    sched.claim(sched.all_ids)
    runs = [(w, int(rows[0]), rows.size) for w, rows in sched.split(sched.all_ids)]
    ws, firsts, counts = (list(x) for x in zip(*runs, strict=True))
    return sched, sched.open_lanes(ws, firsts, counts, SINK, deadline)


def test_a_lane_call_is_ticked_off_reply_by_reply_and_closes_with_its_last() -> None:
    sched, call = lane_call()
    assert (call.base, call.workers, call.firsts, call.counts) == (1, [0, 1, 2], [0, 2, 4], [2, 2, 2])
    assert sched.in_flight == 3
    assert sched.running == 6
    assert not sched.requests
    assert sched.lanes_done([(1, call.base + 1)]) == ([], [], None, [])
    assert call.done == [False, True, False]
    assert call.left == 2
    assert sched.has_work(0)
    assert not sched.has_work(1)
    # answered already: no lane message has that id now, so the reply is handed back and changes nothing
    assert sched.lanes_done([(1, call.base + 1)]) == ([], [], None, [(1, call.base + 1)])
    assert sched.sent_to(call.base + 1) is None
    assert sched.lanes_done([(0, call.base), (2, call.base + 2)]) == ([call], [], None, [])
    assert call.left == 0
    assert not sched.lane_calls
    assert sched.in_flight == 0
    assert sched.running == 0
    assert sched.busy.all()  # still claimed: its sink copies the rows, then frees them
    assert sched.open(0, "step", sched.all_ids[:1]).id == call.base + 3  # ids are never reused


def test_replies_whose_infos_lie_in_the_area_are_kept_on_the_call_for_its_sink() -> None:
    sched, call = lane_call()
    assert call.in_area is None  # (no reply said so yet: nothing to keep)
    sched.lanes_done([(1, call.base + 1)], area=True)
    assert call.in_area == [False, True, False]
    assert call.area_rows == 2
    sched.lanes_done([(0, call.base), (1, call.base + 2)], area=True)  # another worker's message: not kept
    assert call.in_area == [True, True, False]
    assert call.area_rows == 4
    assert sched.lanes_done([(2, call.base + 2)]) == ([call], [], None, [])  # without infos in the area
    assert call.in_area == [True, True, False]
    assert call.area_rows == 4
    rows = Scheduler(4)
    rows.place(2)
    rows.claim(rows.all_ids)
    each = rows.open_lanes([0, 1], [0, 2], [2, 2], cast(RecvQueue, object()), None, each=True)
    rows.lanes_done([(0, each.base)], area=True)  # recv()'s queue is told by the caller, reply by reply
    assert each.in_area is None
    assert each.area_rows == 0


def test_a_reply_from_another_worker_changes_nothing() -> None:
    sched, call = lane_call()
    assert sched.lanes_done([(0, call.base + 1)]) == ([], [], None, [(0, call.base + 1)])  # handed back as it came
    assert sched.sent_to(call.base + 1) == 1  # lane message 2 went to worker 1, not to worker 0
    assert call.left == 3
    assert call.done == [False, False, False]
    assert sched.running == 6
    assert sched.lanes[call.base + 1] is call


@pytest.mark.parametrize("how", ["worker", "due", "req_id", "all"])
def test_spilling_makes_a_request_of_each_unanswered_message_with_its_id(how: str) -> None:
    sched, call = lane_call(deadline=5.0)
    sched.lanes_done([(1, call.base + 1)])
    spilled = {
        "worker": lambda: sched.spill_lanes(worker=2),
        "due": lambda: sched.spill_lanes(due=5.0),
        "req_id": lambda: sched.spill_lanes(req_id=call.base),
        "all": lambda: sched.spill_lanes(),
    }[how]()
    assert spilled == [(call, [1])]  # message 1's rows are in the shared rows: its sink takes them
    assert not sched.lanes
    assert not sched.lane_calls
    assert sorted(sched.requests) == [call.base, call.base + 2]
    for k in (0, 2):
        req = sched.requests[call.base + k]
        assert sched.sent_to(req.id) == k
        assert (req.worker, req.kind, req.left, req.deadline) == (k, "step", 2, 5.0)
        assert req.env_ids.tolist() == req.positions.tolist() == [2 * k, 2 * k + 1]
    assert sched.running == 4  # the rows of the two requests
    assert sched.next_deadline() == 5.0
    assert [r.id for r in sched.expire(5.0)] == [call.base, call.base + 2]
    assert sched.running == 0


def test_spilling_leaves_the_calls_it_was_not_asked_for() -> None:
    sched, call = lane_call(deadline=5.0)
    sched.lanes_done([(2, call.base + 2)])
    assert sched.spill_lanes(due=4.9) == []
    assert sched.spill_lanes(worker=2) == []  # its message is answered
    assert sched.spill_lanes(req_id=call.base + 2) == []  # answered: no lane message has that id
    assert sched.lane_calls == {call.base: call}
    assert sched.in_flight == 2


def test_a_lane_calls_deadline_is_the_next_one_until_it_closes() -> None:
    sched, call = lane_call(deadline=3.0)
    sched.open(0, "call", sched.all_ids[:0], deadline=4.0)
    assert sched.next_deadline() == 3.0
    for k in range(3):
        sched.lanes_done([(k, call.base + k)])
    assert sched.next_deadline() == 4.0


def test_losing_a_worker_or_expiring_or_draining_a_call_not_spilled_is_refused() -> None:
    sched, _call = lane_call(deadline=1.0)
    with pytest.raises(AssertionError, match="spilled first"):
        sched.lose_worker(1)
    with pytest.raises(AssertionError, match="spilled before expire"):
        sched.expire(2.0)
    with pytest.raises(AssertionError, match="spilled before drain"):
        sched.drain()
    np.testing.assert_array_equal(sched.busy, True)


def test_a_call_whose_rows_go_one_by_one_hands_each_reply_over_and_spills_none_answered() -> None:
    sched = Scheduler(6)
    sched.place(3)
    sched.claim(sched.all_ids[2:6])
    queue = cast(RecvQueue, object())
    call = sched.open_lanes([1, 2], [2, 4], [2, 2], queue, 9.0, each=True)
    assert sched.running == 4
    closed, each, sink, rest = sched.lanes_done([(2, call.base + 1), (0, call.base), (2, 999)])
    assert closed == []
    assert (each, sink) == ([4, 5], queue)  # for the caller to queue (and free) envs 4 and 5 now
    assert rest == [(0, call.base), (2, 999)]  # another worker's message, an id no lane message has
    assert sched.running == 2
    spilled = sched.spill_lanes(worker=1)
    assert spilled == [(call, [])]  # its answered rows were handed over already
    [req] = sched.requests.values()
    assert (req.id, req.worker, req.env_ids.tolist(), req.left) == (call.base, 1, [2, 3], 2)
    assert sched.running == 2
    sched.finish(req.id)
    assert sched.running == 0


def test_the_last_reply_of_a_call_whose_rows_go_one_by_one_closes_it_without_a_close() -> None:
    sched = Scheduler(4)
    sched.place(2)
    sched.claim(sched.all_ids)
    call = sched.open_lanes([0, 1], [0, 2], [2, 2], cast(RecvQueue, object()), None, each=True)
    assert sched.lanes_done([(1, call.base + 1), (0, call.base)]) == ([], [2, 3, 0, 1], call.sink, [])  # as they came
    assert not sched.lane_calls
    assert sched.in_flight == 0


def _runs_by_reference(sched: Scheduler, ids: list[int]) -> tuple[list[int], list[int], list[int]] | None:
    """Each worker's part of ``ids`` as one run, in id order, worked out the plain way (None: some part is not)."""
    parts: dict[int, list[int]] = {}
    for env in sorted(ids):
        parts.setdefault(int(sched.worker_of[env]), []).append(env)
    if any(part[-1] - part[0] + 1 != len(part) for part in parts.values()):
        return None
    order = sorted(parts, key=lambda w: parts[w][0])
    return order, [parts[w][0] for w in order], [len(parts[w]) for w in order]


@given(st.data(), st.integers(1, 300), st.integers(1, 16))
def test_a_sends_ids_are_cut_into_each_workers_run_alike_few_or_many(data: st.DataObject, n: int, workers: int) -> None:
    """The ids of a ``send()`` become one lane message per worker when each worker's part is one run: the loop for
    few ids and the numpy cuts for many agree with each other and with the plain way, runs or not, in any order."""
    sched = Scheduler(n)
    sched.place(min(workers, n))
    if data.draw(st.booleans(), label="whole runs"):  # every env of some workers, or a run of each
        chosen = data.draw(st.sets(st.integers(0, sched._workers - 1), min_size=1), label="workers")
        ids = [e for w in sorted(chosen) for e in sched.envs_of(w).tolist()]
        ids = ids[data.draw(st.integers(0, len(ids) - 1), label="cut") :]
    else:
        ids = data.draw(st.sets(st.integers(0, n - 1), min_size=1), label="ids")
    shuffled = np.array(data.draw(st.permutations(sorted(ids)), label="order"), np.int32)
    want = _runs_by_reference(sched, list(ids))
    assert _few_runs_by_owner(shuffled, sched.owners) == want
    assert _runs_by_owner(shuffled, sched) == want
    if _COMPILED is not None:  # (built wherever this Python has its headers: tests/core/test_speedups.py)
        assert _COMPILED.runs_by_owner(shuffled.astype(np.int64), sched.worker_of) == want
    assert _runs_by_owner(sched.all_ids, sched) == _few_runs_by_owner(sched.all_ids, sched.owners)


@given(st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=12, unique=True), max_size=40), st.data())
def test_the_cuts_remembered_are_the_cuts_of_the_same_ids(calls: list[list[int]], data: st.DataObject) -> None:
    """``Scheduler.runs`` remembers each id array's cut for the loops that send the same arrays again: the cut it
    returns is always the cut of the ids it was given, whatever it cut before, in whichever dtype (the bytes of
    ``[1, 0]`` as int32 are those of ``[1]`` as int64), and after a new placement."""
    sched = Scheduler(12)
    sched.place(3)
    for ids in calls:
        if data.draw(st.booleans(), label="placed anew"):
            sched.place(data.draw(st.integers(1, 6), label="workers"))
        array = np.array(ids, data.draw(st.sampled_from([np.int64, np.int32]), label="dtype"))
        assert sched.runs(array) == _runs_by_reference(sched, ids), ids
        assert len(sched._known_runs) <= KNOWN_ID_SETS


def test_an_int32_array_is_not_taken_for_the_int64_array_of_its_bytes() -> None:
    sched = Scheduler(8)
    sched.place(2)  # envs 0-3 on worker 0, 4-7 on worker 1
    assert sched.runs(np.array([1], np.int64)) == ([0], [1], [1])
    same_bytes = np.array([1, 0], np.int32)
    assert same_bytes.tobytes() == np.array([1], np.int64).tobytes()
    assert sched.runs(same_bytes) == ([0], [0], [2])

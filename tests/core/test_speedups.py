"""The compiled part of the hot path (``aioenv/_speedups.c``) against its pure-Python twins (:mod:`aioenv._hot`).

The twins define what each function does; the compiled ones must give the same answers on any input the pool can
give them, refuse what it never gives with a ``TypeError`` (not a crash), and a pool under each must step the same
trajectories. The read of the done pipe has its own twin tests in tests/wire/test_lane.py, the cut into runs in
tests/core/test_lane_calls.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioenv import _hot
from aioenv.core.scheduler import Scheduler, py_claim_ids, py_take_listed
from aioenv.errors import UsageError
from aioenv.transport import pipe
from aioenv.wire import lane
from tests.support.scripts import ROOT, run_python

_HEADERS = Path(sysconfig.get_path("include")) / "Python.h"


def _compiled() -> _hot.Speedups:
    speedups = _hot.load()
    assert speedups is not None, (
        f"aioenv._speedups is not built, though this Python has its headers ({_HEADERS}): reinstall the package "
        "(pip install -e .) and read what the build of aioenv/_speedups.c said"
    )
    return speedups


def test_the_compiled_part_is_built_where_this_python_has_its_headers_and_is_as_new_as_its_source() -> None:
    """A C compiler is all a fresh machine adds (the README's install builds it): where the headers are, a missing
    module is a broken build, not a choice; and one older than its source is a stale build of other code."""
    assert _HEADERS.exists(), f"this Python's headers are not at {_HEADERS}"
    from aioenv import _speedups

    assert _hot.load() is _speedups
    built = Path(_speedups.__file__ or "")
    assert built.stat().st_mtime >= (ROOT / "aioenv" / "_speedups.c").stat().st_mtime, (
        f"{built} is older than aioenv/_speedups.c: reinstall the package (pip install -e .)"
    )


def test_the_environment_keeps_a_process_on_the_pure_python_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    for pure in ("1", "yes"):
        monkeypatch.setenv(_hot.PURE_ENV, pure)
        assert _hot.load() is None
    for compiled in ("", "0"):
        monkeypatch.setenv(_hot.PURE_ENV, compiled)
        assert _hot.load() is not None


def _checked(num_envs: int, ids: np.ndarray, compiled: bool) -> str | None:
    """What ``Scheduler._check`` said of ``ids``, the compiled way or the pure way: its error, or None."""
    sched = Scheduler(num_envs)
    try:
        if compiled:
            sched._check(ids)
        else:
            sched._py_check(ids)
    except UsageError as exc:
        return str(exc)
    return None


@given(
    st.integers(1, 300),
    st.lists(st.integers(-5, 310), min_size=1, max_size=200),
)
def test_a_batchs_ids_are_checked_alike_compiled_or_not(num_envs: int, ids: list[int]) -> None:
    """The first unknown id in the caller's order, else the smallest named twice, else nothing: few ids (Python's
    set) or many (numpy's reductions) on the pure side, one pass and a sorted copy on the compiled side."""
    array = np.array(ids, np.int64)
    _compiled()
    assert _hot.compiled is not None, f"this process runs with {_hot.PURE_ENV} set: the scheduler checks in Python"
    assert _checked(num_envs, array, True) == _checked(num_envs, array, False)


def test_ids_named_twice_and_unknown_ids_are_named_as_the_caller_gave_them() -> None:
    sched = Scheduler(10)
    with pytest.raises(UsageError, match=r"^unknown env id 12: this pool has env ids 0\.\.9$"):
        sched._check(np.array([3, 12, -1], np.int64))
    with pytest.raises(UsageError, match=r"^env id 2 appears more than once in env_ids$"):
        sched._check(np.array([7, 2, 7, 2], np.int64))
    sched._check(np.arange(10, dtype=np.int64)[::-1].copy())  # every id once, in any order


@given(
    st.integers(0, 2**64 - 64),
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=20),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_a_lane_calls_steps_are_framed_alike_compiled_or_not(
    base: int, runs: list[tuple[int, int]], info_list: bool, finals: bool, infos: bool, quiet: bool
) -> None:
    firsts, counts = [f for f, _ in runs], [c for _, c in runs]
    flags = lane.step_flags(info_list, finals, infos, quiet)
    each = [lane.framed_step(base + k, f, c, info_list, finals, infos, quiet) for k, (f, c) in enumerate(runs)]
    assert lane.py_framed_steps(base, firsts, counts, flags) == each
    assert _compiled().framed_steps(base, firsts, counts, flags) == each


@given(
    st.lists(st.integers(0, 10_000), max_size=12),
    st.data(),
    st.lists(st.integers(-3, 14) | st.booleans() | st.just(2**70) | st.just(1.0) | st.none(), max_size=10),
)
def test_a_replys_rows_of_one_request_are_ticked_off_alike_compiled_or_not(
    listed: list[int], data: st.DataObject, rows: list[object]
) -> None:
    """Rows a thread or async worker's reply lists for one request (``Scheduler.finish_listed``): every row an int in
    range, not answered, named once, and all are taken; any other, and nothing changes."""
    marks = bytearray(data.draw(st.lists(st.sampled_from([0, 1]), min_size=len(listed), max_size=len(listed))))
    before = bytes(marks)
    results = []
    for take in (py_take_listed, _compiled().take_listed):
        mine, out = bytearray(before), [7]
        results.append((take(listed, mine, list(rows), out), bytes(mine), out))
    assert results[0] == results[1]
    taken, after, out = results[0]
    if not taken:
        assert (after, out) == (before, [7])
    else:
        assert out == [7, *(listed[r] for r in rows)]  # type: ignore[call-overload]
    assert marks == before


@given(st.integers(1, 40), st.data())
def test_a_claim_of_envs_marks_them_all_or_names_the_first_taken_alike_compiled_or_not(
    num_envs: int, data: st.DataObject
) -> None:
    """``Scheduler.claim``'s core: unique ids, some busy or unread (or none), some beyond the envs: the same env
    named and nothing marked, or every env marked; an id out of range refused with nothing changed."""
    # (ids that resolve() let through: never negative, which the compiled claim refuses and numpy's take would wrap)
    ids = np.array(data.draw(st.lists(st.integers(0, num_envs + 2), unique=True, max_size=12), label="ids"), np.int64)
    busy = np.array(data.draw(st.lists(st.booleans(), min_size=num_envs, max_size=num_envs), label="busy"))
    unread = None
    if data.draw(st.booleans(), label="with unread"):
        unread = np.array(data.draw(st.lists(st.booleans(), min_size=num_envs, max_size=num_envs), label="unread"))
    results: list[tuple[str, bytes]] = []
    for claim in (py_claim_ids, _compiled().claim_ids):
        mine = busy.copy()
        try:
            got = str(claim(ids, mine, unread))
        except IndexError:
            got = "IndexError"
            assert np.array_equal(mine, busy)
        results.append((got, mine.tobytes()))
    assert results[0] == results[1], (ids, busy, unread)
    got, after = results[0]
    taken = busy | (unread if unread is not None else False)
    if got == "-1":
        assert np.array_equal(np.frombuffer(after, np.bool_), busy | np.isin(np.arange(num_envs), ids))
        assert not taken[ids].any()
    elif got != "IndexError":
        assert after == busy.tobytes()
        assert int(got) == next(i for i in ids.tolist() if taken[i])


def test_sends_to_several_sockets_say_alike_what_did_not_go_whole_compiled_or_not() -> None:
    """Whole messages, one that meets a full socket (EAGAIN, or the part that fitted) and one whose peer is gone (a
    negative errno): the same report, and the same bytes in each socket, from the twin and the compiled sends."""
    reports = []
    for send_each in (pipe.py_send_each, _compiled().send_each):
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(4)]
        for ours, _ in pairs:
            ours.setblocking(False)
        full, gone = pairs[1], pairs[3]
        with contextlib.suppress(BlockingIOError):
            while True:
                full[0].send(bytes(65536))
        gone[1].close()
        datas = [b"a" * 40, b"b" * 40, bytes(1 << 22), b"d" * 40]
        short = send_each([ours.fileno() for ours, _ in pairs], datas)
        pairs[0][1].setblocking(False)
        received = pairs[0][1].recv(100)
        reports.append((short, received))
        for k, (ours, theirs) in enumerate(pairs):
            ours.close()
            if k != 3:
                theirs.close()
    assert reports[0] == reports[1]
    short, received = reports[0]
    assert received == b"a" * 40
    assert [k for k, _ in short] == [1, 2, 3]
    assert dict(short)[1] == -errno.EAGAIN
    assert 0 < dict(short)[2] < 1 << 22  # the part of a large message the socket took
    assert dict(short)[3] in (-errno.EPIPE, -errno.ECONNRESET)
    assert pipe.py_send_each([], []) == _compiled().send_each([], []) == []


def test_the_compiled_functions_refuse_what_the_pool_never_gives_them() -> None:
    """Arguments of the wrong kind raise ``TypeError`` (or, for an id beyond the envs, ``IndexError``), naming what
    was expected; none crashes the process."""
    c = _compiled()
    with pytest.raises(TypeError, match="tokens must be a list of ints, got tuple"):
        c.read_records(b"", (1, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.read_records(None, [])  # type: ignore[arg-type]
    # a token that is no u64 matches no record (as no record's token equals it in Python)
    record = lane.record(0, 5, 9)
    assert c.read_records(record, [2**70]) == lane.py_read_records(record, [2**70]) == ([], [], [], 24, 24)
    assert c.read_records(record, [-5]) == lane.py_read_records(record, [-5])
    with pytest.raises(TypeError, match="ids must be a 1-D contiguous int64 array, got format i"):
        c.check_ids(np.arange(3, dtype=np.int32), 5)
    with pytest.raises(TypeError, match="ids must be a 1-D contiguous int64 array"):
        c.check_ids(np.zeros((2, 2), np.int64), 5)
    with pytest.raises(ValueError, match="contiguous"):  # (numpy's refusal of the buffer)
        c.check_ids(np.arange(6, dtype=np.int64)[::2], 5)
    with pytest.raises(IndexError, match="env id 8 is out of bounds for 4 envs"):
        c.runs_by_owner(np.array([1, 8], np.int64), np.zeros(4, np.int64))
    with pytest.raises(IndexError, match="env id -1 is out of bounds"):
        c.runs_by_owner(np.array([-1], np.int64), np.zeros(4, np.int64))
    with pytest.raises(TypeError, match="worker_of must be a 1-D contiguous int64 array"):
        c.runs_by_owner(np.array([1], np.int64), np.zeros(4, np.float64))
    with pytest.raises(TypeError, match="same length"):
        c.framed_steps(1, [0, 1], [1], 0)
    with pytest.raises(OverflowError):
        c.framed_steps(1, [2**32], [1], 0)
    with pytest.raises(ValueError, match="marks has 2 bytes for 3 listed rows"):
        c.take_listed([1, 2, 3], bytearray(2), [0], [])
    with pytest.raises(TypeError, match="a list, a bytearray, a list and a list"):
        c.take_listed([1], b"\x00", [0], [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes 2 arguments"):
        c.check_ids(np.arange(3))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="two lists of the same length"):
        c.send_each([1, 2], [b"x"])
    with pytest.raises(TypeError, match="item 0 is not an int fd and bytes"):
        c.send_each([1], [bytearray(b"x")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"fds\[0\] is no file descriptor"):  # (nothing sent)
        c.send_each([-1], [b"x"])
    with pytest.raises(TypeError, match="busy must be a 1-D contiguous bool array, got format B"):
        c.claim_ids(np.array([1], np.int64), np.zeros(4, np.uint8), None)
    read_only = np.zeros(4, np.bool_)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # (numpy's refusal of a writable buffer)
        c.claim_ids(np.array([1], np.int64), read_only, None)
    with pytest.raises(IndexError, match="env id 5 is out of bounds for 4 envs"):
        c.claim_ids(np.array([1, 5], np.int64), np.zeros(4, np.bool_), None)
    with pytest.raises(IndexError, match="env id -1 is out of bounds"):
        c.claim_ids(np.array([-1], np.int64), np.zeros(4, np.bool_), None)
    with pytest.raises(IndexError, match="env id 3 is out of bounds"):  # an unread mask shorter than the ids need
        c.claim_ids(np.array([3], np.int64), np.zeros(4, np.bool_), np.zeros(2, np.bool_))


# A send()/recv() loop over 8 CartPoles on 2 inline workers, 150 steps each: every env's own trajectory (its actions
# follow from its own step count, so any order of finishing gives the same), and what a send of bad ids says.
_LOOP = """
import json, sys
import numpy as np
import aioenv
from aioenv import _hot

async def main():
    out = {"compiled": _hot.compiled is not None, "envs": {}, "errors": []}
    pool = await aioenv.make("CartPole-v1", 8, num_workers=2, executor="inline", batch_size=4)
    try:
        obs, _ = await pool.reset(seed=3)
        steps = [0] * 8
        for env in range(8):
            out["envs"][env] = [obs[env].tolist()]
        ids = np.arange(8)
        pool.send(ids % 2, ids)
        out_there = 8
        while out_there:
            obs, rew, term, trunc, info = await pool.recv(min_results=min(4, out_there))
            got = info["env_id"]
            out_there -= got.size
            for row, env in enumerate(got.tolist()):
                steps[env] += 1
                out["envs"][env].append([obs[row].tolist(), float(rew[row]), bool(term[row]), bool(trunc[row])])
            again = got[np.array([steps[e] < 150 for e in got.tolist()], bool)]
            if again.size:
                pool.send(np.array([(steps[e] * 7 + e) % 3 % 2 for e in again.tolist()]), again)
                out_there += again.size
        for bad in ([0, 0], [9], [-1, 2]):
            try:
                pool.send(np.zeros(len(bad), np.int64), np.array(bad))
            except aioenv.UsageError as exc:
                out["errors"].append(str(exc))
    finally:
        await pool.aclose()
    json.dump(out, sys.stdout)

aioenv.run(main())
"""


def test_a_pool_steps_the_same_trajectories_on_the_compiled_path_and_on_the_pure_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real worker processes and the done pipe, under each choice: the same trajectories env by env, the same
    refusals, and each process on the path it was told."""
    got = {}
    for pure in ("1", "0"):
        monkeypatch.setenv(_hot.PURE_ENV, pure)
        proc = run_python("-c", _LOOP, timeout=90)
        assert proc.returncode == 0, proc.stderr
        got[pure] = json.loads(proc.stdout)
    assert got["1"]["compiled"] is False
    assert got["0"]["compiled"] is True
    assert got["1"]["envs"] == got["0"]["envs"]
    assert [len(t) for t in got["0"]["envs"].values()] == [1 + 150] * 8  # the reset, then every step once
    assert got["1"]["errors"] == got["0"]["errors"]
    assert got["0"]["errors"] == [
        "env id 0 appears more than once in env_ids",
        "unknown env id 9: this pool has env ids 0..7",
        "unknown env id -1: this pool has env ids 0..7",
    ]

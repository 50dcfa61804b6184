"""A ``thread`` worker's env threads put their steps' rows in the slab and record them on the pool's done pipe.

Real pools of thread worker processes (:class:`tests.envs.faulty.RowRecordEnv`): a row with no info comes as a
row record (:mod:`aioenv.wire.lane`), one with an info in the worker's RESULT, and every kind of call answers as
before; records nobody may write, rows out of range or of another worker's request, and a done pipe an env
closed are dropped, refused or worked around, each as the module docstring of ``aioenv.wire.lane`` says.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.wire import lane
from tests.support.procs import HANG, wait_new_worker, worker_pid
from tests.support.records import record_reads

ROWS = "tests.envs.faulty:RowRecordEnv"
PLAIN, INFO, FORGE, CLOSE, GATED = range(5)


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(HANG):
        while not check():
            await asyncio.sleep(0.005)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every row record the pool takes from its done pipe, ``(slot, request id, row)``, as it takes them."""
    return record_reads(monkeypatch).rows


def check_rows(t: np.ndarray, acts: np.ndarray, ids: np.ndarray, out: tuple[Any, ...]) -> None:
    """``out`` (a step's or recv's five) is the rows of envs ``ids`` that took ``acts``, at counts ``t[ids]``."""
    obs, reward, terminated, truncated, info = out
    np.testing.assert_array_equal(obs[:, 0], t[ids])
    np.testing.assert_array_equal(reward, t[ids] / 2)
    assert not terminated.any()
    assert not truncated.any()
    if (acts == INFO).any():
        np.testing.assert_array_equal(info["_t"], acts == INFO)
        np.testing.assert_array_equal(info["t"][acts == INFO], t[ids][acts == INFO])
    else:
        assert "t" not in info


async def test_rows_without_infos_come_as_row_records_and_every_call_answers_as_with_results(
    recorded: list[tuple[int, int, int]],
) -> None:
    rng = np.random.default_rng(5)
    t = np.zeros(6)
    plain = 0  # the rows of steps with no info: each comes as one row record
    async with aioenv.Pool(ROWS, 6, num_workers=2, executor="thread") as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        for _ in range(10):  # lock-step: a step() takes its rows from records and RESULTs alike
            acts = rng.integers(0, 2, 6)
            out = await asyncio.wait_for(pool.step(acts), HANG)
            t += 1
            check_rows(t, acts, np.arange(6), out)
            plain += int((acts == PLAIN).sum())
        for _ in range(10):  # a subset, shuffled
            ids = rng.permutation(6)[:4]
            acts = rng.integers(0, 2, 4)
            out = await asyncio.wait_for(pool.step(acts, ids), HANG)
            t[ids] += 1
            check_rows(t, acts, ids, out)
            plain += int((acts == PLAIN).sum())
        for _ in range(10):  # send/recv: rows in the order they came, whichever way
            ids = rng.permutation(6)[:3]
            acts = rng.integers(0, 2, 3)
            pool.send(acts, ids)
            t[ids] += 1
            took: list[int] = []
            while len(took) < 3:
                out = await asyncio.wait_for(pool.recv(min_results=1, max_results=3), HANG)
                got = out[4]["env_id"]
                check_rows(t, acts[[list(ids).index(e) for e in got]], got, out)
                took += got.tolist()
            assert sorted(took) == sorted(ids.tolist())
            plain += int((acts == PLAIN).sum())
        for env_id in range(6):  # per-env futures
            action = env_id % 2
            res = await asyncio.wait_for(pool.step_env(env_id, action), HANG)
            t[env_id] += 1
            assert (res.obs[0], res.reward, res.env_id) == (t[env_id], t[env_id] / 2, env_id)
            assert res.info == ({"t": t[env_id]} if action == INFO else {})
            plain += action == PLAIN
    assert len(recorded) == plain  # no row with an info took that way, and no row without one took another
    assert {slot for slot, _, _ in recorded} == {0, 1}


async def test_row_records_forged_or_misplaced_are_dropped_or_refused_and_a_closed_pipe_leaves_results(
    recorded: list[tuple[int, int, int]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = tmp_path / "gate"
    t = np.zeros(4)
    async with aioenv.Pool(ROWS, 4, num_workers=2, executor="thread", env_kwargs={"gate": str(gate)}) as pool:
        coord: Any = pool._runner
        await asyncio.wait_for(pool.reset(), HANG)
        pids = [worker_pid(pool, 0), worker_pid(pool, 1)]

        # Row records with a token made up, for every request a pool may have out: bytes that are no record.
        with caplog.at_level(logging.WARNING, logger="aioenv.coordinator"):
            for acts in ([FORGE, 0, 0, FORGE], [0, 0, 0, 0]):
                out = await asyncio.wait_for(pool.step(np.array(acts)), HANG)
                t += 1
                check_rows(t, np.array(acts), np.arange(4), out)
        assert "that are no lane reply of this pool's workers" in caplog.text
        assert [worker_pid(pool, 0), worker_pid(pool, 1)] == pids

        # An env closes its worker's done pipe: that row and its worker's later rows come in its RESULTs.
        out = await asyncio.wait_for(pool.step(np.array([CLOSE, 0, 0, 0])), HANG)
        t += 1
        check_rows(t, np.array([CLOSE, 0, 0, 0]), np.arange(4), out)
        before = len(recorded)
        for _ in range(3):
            out = await asyncio.wait_for(pool.step(np.zeros(4, np.int64)), HANG)
            t += 1
            check_rows(t, np.zeros(4), np.arange(4), out)
        assert [slot for slot, _, _ in recorded[before:]] == [1] * 6  # envs 2 and 3, three steps each
        assert [worker_pid(pool, 0), worker_pid(pool, 1)] == pids

        # A request held open (env 0 waits for the gate), and records that name it wrongly.
        pool.send(np.array([GATED]), np.array([0]))
        await until(lambda: len(coord.sched.requests) == 1)
        [(req_id, req)] = coord.sched.requests.items()
        write, tokens = coord._done_pipe[1], coord._tokens
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="aioenv.coordinator"):
            os.write(write, lane.row_record(0, tokens[0], req_id, 3))  # a row the request does not have
            os.write(write, lane.row_record(0, tokens[0], req_id + 1000, 0))  # a request never sent: dropped
            await until(lambda: "malformed row record from worker" in caplog.text)
            assert coord.sched.requests.get(req_id) is req  # still waiting for its own row
            old = worker_pid(pool, 1)
            os.write(write, lane.row_record(1, tokens[1], req_id, 0))  # worker 1 says worker 0's row is in
            await wait_new_worker(pool, 1, old)
        assert "recorded a row: request" in caplog.text
        assert "went to worker 0, not to worker 1" in caplog.text
        assert coord.sched.requests.get(req_id) is req
        assert worker_pid(pool, 0) == pids[0]
        gate.touch()
        out = await asyncio.wait_for(pool.recv(min_results=1, max_results=1), HANG)
        t[0] += 1
        check_rows(t, np.array([GATED]), np.array([0]), out)


async def test_a_step_s_recorded_rows_keep_their_envs_claimed_until_the_call_returns(
    recorded: list[tuple[int, int, int]], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    async with aioenv.Pool(ROWS, 4, num_workers=2, executor="thread", env_kwargs={"gate": str(gate)}) as pool:
        coord: Any = pool._runner
        await asyncio.wait_for(pool.reset(), HANG)
        step = asyncio.ensure_future(pool.step(np.array([GATED, PLAIN, PLAIN, PLAIN])))
        # Rows 1-3 recorded; env 0's waits for the gate.
        await until(lambda: len(recorded) == 3)
        [req] = coord.sched.requests.values()
        assert (req.worker, req.left) == (0, 1)
        assert coord.sched.busy.all()  # the recorded rows' envs are held with the call's
        for env_id in (1, 2):
            with pytest.raises(aioenv.UsageError, match=f"env {env_id} already has a request in flight"):
                pool.send(np.array([PLAIN]), np.array([env_id]))
        gate.touch()
        out = await asyncio.wait_for(step, HANG)
        check_rows(np.ones(4), np.array([GATED, PLAIN, PLAIN, PLAIN]), np.arange(4), out)
        assert not coord.sched.busy.any()
        pool.send(np.array([PLAIN]), np.array([1]))  # free now
        out = await asyncio.wait_for(pool.recv(min_results=1), HANG)
        check_rows(np.array([1.0, 2.0, 1.0, 1.0]), np.array([PLAIN]), np.array([1]), out)


async def test_a_call_that_recorded_its_row_wakes_no_loop_and_is_settled_when_the_worker_next_looks() -> None:
    """An env thread whose step put its row on the done pipe hands its future to the worker's ``recorded`` queue
    instead of waking the loop (one write, a loop turn and the GIL back and forth a row saved); the worker settles
    it before it next handles a message, and skips one that a cancel or a close settled meanwhile."""
    from workers.concurrent import _RECORDED, ConcurrentWorker, EnvThread

    loop = asyncio.get_running_loop()
    worker = ConcurrentWorker(-1, "w", executor="thread")
    thread = EnvThread("t", loop, worker._recorded)
    try:
        first = thread.run(lambda: _RECORDED)
        dropped = thread.run(lambda: _RECORDED)
        after = thread.run(lambda: 5)  # the same thread, so the calls above ran before it
        assert await asyncio.wait_for(after, HANG) == 5
        # A wake-up for the recorded calls would have settled them before this one's (the loop runs them in order).
        assert not first.done()
        assert not dropped.done()
        assert list(worker._recorded) == [first, dropped]
        dropped.cancel()  # as a CANCEL or a close does to a running call
        worker._settle_recorded()
        assert first.result() is _RECORDED
        assert dropped.cancelled()
        assert not worker._recorded
        failed = thread.run(lambda: 1 / 0)  # anything else comes back through the loop, as before
        with pytest.raises(ZeroDivisionError):
            await asyncio.wait_for(failed, HANG)
        assert not worker._recorded
    finally:
        thread.stop()
        assert await thread.ended(HANG)

"""Lock-step steps of a pool's own inline workers go as lane messages (``aioenv.wire.lane``), and a call's rows
wait in shared memory, their envs claimed, until the call's last row is in.

Real pools of worker processes: the lane carries every lock-step step of CartPole and gives SyncVectorEnv's
trajectories; an env whose row is in waits claimed until its call returns; a worker lost or late mid-call
fails its own rows while the others' come back whole and their envs are free after.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import select
import signal
import struct
import termios
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.core import scheduler
from aioenv.core.coordinator import Coordinator
from aioenv.errors import PoolClosed, StepTimeout, UsageError, WorkerCrashed
from aioenv.transport import pipe
from aioenv.wire import lane
from aioenv.wire.protocol import Key, Op, decode, encode
from tests.envs.faulty import SLOW, make_probe
from tests.support.compare import assert_same
from tests.support.lane_worker import worker_with_envs
from tests.support.procs import HANG, wait_new_worker, worker_pid
from workers.runtime import Worker

PROBE = "tests.envs.faulty:make_probe"


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(HANG):
        while not check():
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def gated_pool(gate: Path, num_envs: int) -> AsyncIterator[aioenv.Pool]:
    """``num_envs`` quiet ProbeEnvs, two to each of ``num_envs // 2`` inline worker processes, reset with seed 0;
    their slow action (``SLOW``) ends once ``gate`` exists."""
    kwargs = {"quiet": True, "gate": str(gate)}
    async with aioenv.Pool(PROBE, num_envs, num_workers=num_envs // 2, executor="inline", env_kwargs=kwargs) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        yield pool


def in_flight(pool: aioenv.Pool) -> int:
    """Messages of the pool (requests and lane messages) waiting for their worker's reply."""
    runner: Any = pool._runner
    return runner.sched.in_flight


def quiet_records(pool: aioenv.Pool) -> int:
    """Records waiting unread in the pool's quiet pipe (``aioenv.wire.lane.QUIET``): replies to a quiet call that
    the pool reads once its last worker answers."""
    quiet = pool._runner._quiet  # type: ignore[attr-defined]
    waiting = fcntl.ioctl(quiet.read, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", waiting)[0]) // lane.RECORD.size


def unanswered(pool: aioenv.Pool) -> int:
    """Messages of the pool whose worker has not answered yet: those in flight but for the replies a quiet call's
    workers left in the quiet pipe."""
    return in_flight(pool) - quiet_records(pool)


def never_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lock-step calls go as calls that are not quiet (as when something else is out): the pool reads each reply as
    it comes, for tests of what it does in between."""
    monkeypatch.setattr(Coordinator, "_count_quietly", lambda self, workers: False)


@pytest.fixture
def no_quiet_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`never_quiet` for one test."""
    never_quiet(monkeypatch)


async def test_a_lock_step_step_is_one_lane_message_each_way_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[bytes] = []
    taken: list[tuple[int, int]] = []
    send_each = pipe.send_each  # (a lane call writes its workers' pipes in one call: compiled or not, aioenv._hot)
    read_records = lane.read_records

    def counting_send(fds: list[int], datas: list[bytes]) -> list[tuple[int, int]]:
        sent.extend(bytes(data) for data in datas)
        return send_each(fds, datas)

    def counting_records(
        data: bytes, tokens: list[int]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int, int]], int, int]:
        got = read_records(data, tokens)
        taken.extend(got[0])
        assert got[1] == []  # CartPole has no infos
        assert got[2] == []  # inline workers record whole messages, not rows
        assert got[4] == 0  # nothing on the done pipe but the workers' records
        return got

    monkeypatch.setattr(pipe, "send_each", counting_send)
    monkeypatch.setattr(lane, "read_records", counting_records)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 6)
    rng = np.random.default_rng(4)
    async with aioenv.Pool("CartPole-v1", 6, num_workers=3, executor="inline") as pool:
        obs, _ = await asyncio.wait_for(pool.reset(seed=7), HANG)
        np.testing.assert_array_equal(obs, ref.reset(seed=7)[0])
        for _ in range(40):  # episodes end and reset meanwhile (next_step)
            actions = rng.integers(0, 2, 6)
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            for g, w in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(g, w)
            assert got[0].flags.writeable  # the call's own copy, not a view of the shared rows
            assert not np.shares_memory(got[0], pool._runner.slab.obs[0])  # type: ignore[union-attr]
    ref.close()
    steps = [lane.read_step(data[12:]) for data in sent]
    assert len(steps) == 40 * 3
    assert sorted({(first, count) for _, first, count, *_ in steps}) == [(0, 2), (2, 2), (4, 2)]
    # every reply a record on the done pipe: each step's id once, from the worker it went to (worker k: envs 2k, 2k+1)
    assert sorted(taken) == sorted((first // 2, req_id) for req_id, first, *_ in steps)


async def test_an_env_whose_row_is_in_stays_claimed_until_its_call_returns(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 4) as pool:
        step = asyncio.ensure_future(pool.step(np.array([0, 1, SLOW, SLOW])))
        await until(lambda: unanswered(pool) == 1)  # worker 0's rows are in, worker 1 steps on
        with pytest.raises(UsageError, match="env 0 already has a request in flight"):
            await pool.step_env(0, 0)
        gate.touch()
        obs, reward, _, _, info = await asyncio.wait_for(step, HANG)
        assert obs[:, 0].tolist() == [0, 1, 2, 3]  # each env's own row
        assert obs[:, 2].tolist() == [0, 1, SLOW, SLOW]
        assert reward.tolist() == [0.5, 1.5, 2.5, 2.5]
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        row = await asyncio.wait_for(pool.step_env(0, 0), HANG)  # free once the call returned
        assert row.obs[1] == 2


async def test_a_lock_step_step_given_up_by_its_caller_still_frees_every_env_when_its_rows_come(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 4) as pool:
        sched = pool._runner.sched  # type: ignore[attr-defined]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.step(np.array([0, 1, SLOW, SLOW])), 0.2)
        assert sched.busy.all()  # the step is out: its envs are its own until its rows are in
        gate.touch()
        await until(lambda: not sched.lane_calls)
        assert not sched.busy.any()
        obs, *_ = await asyncio.wait_for(pool.step(np.array([0, 0, 0, 0])), HANG)
        assert obs[:, 1].tolist() == [2, 2, 2, 2]  # each env stepped twice: the call given up ran all the same


@pytest.mark.usefixtures("no_quiet_calls")
async def test_a_lock_step_step_of_every_env_is_one_entry_in_the_books_not_one_per_worker(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 6) as pool:
        sched = pool._runner.sched  # type: ignore[attr-defined]
        step = asyncio.ensure_future(pool.step(np.array([0, 1, 0, 1, SLOW, SLOW])))
        await until(lambda: in_flight(pool) == 1)  # workers 0 and 1 answered; worker 2 steps on
        assert not sched.requests
        [call] = sched.lane_calls.values()
        assert call.done == [True, True, False]
        assert list(sched.lanes) == [call.base + 2]
        gate.touch()
        obs, *_ = await asyncio.wait_for(step, HANG)
        assert obs[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
        assert not sched.lane_calls
        assert not sched.lanes
        assert not sched.busy.any()


async def test_a_send_is_one_lane_call_whose_rows_reach_recv_as_each_worker_answers(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 6) as pool:
        sched = pool._runner.sched  # type: ignore[attr-defined]
        # Each worker's envs in order, the workers not: worker 0's (envs 0 and 1) last, and env 0 is slow.
        pool.send(np.array([1, 1, 0, 0, SLOW, 1]), [4, 2, 3, 5, 0, 1])
        await until(lambda: in_flight(pool) == 1)  # workers 1 and 2 answered: their rows wait in the shared rows
        assert sched.busy.tolist() == [True] * 6  # held, so that nothing writes those rows before recv() copies them
        with pytest.raises(UsageError, match="env 3's last result has arrived but recv"):
            pool.send(np.array([0]), [3])
        obs, *_, info = await asyncio.wait_for(pool.recv(min_results=4, max_results=4), HANG)
        assert sched.busy.tolist() == [True, True, False, False, False, False]
        assert not sched.requests
        [call] = sched.lane_calls.values()
        assert call.each
        assert call.done == [False, True, True]  # worker 0 (envs 0 and 1) steps on
        assert sorted(info["env_id"].tolist()) == [2, 3, 4, 5]
        assert dict(zip(info["env_id"].tolist(), obs[:, 0].tolist(), strict=True)) == {2: 2, 3: 3, 4: 4, 5: 5}
        with pytest.raises(UsageError, match="env 0 already has a request in flight"):
            pool.send(np.array([0]), [0])
        pool.send(np.array([1, 1]), [2, 3])  # taken envs are free again: worker 1's run, a lane call of its own
        gate.touch()
        obs, *_, info = await asyncio.wait_for(pool.recv(min_results=4, max_results=4), HANG)
        assert sorted(info["env_id"].tolist()) == [0, 1, 2, 3]
        assert not sched.lane_calls
        assert not sched.lanes
        assert not sched.busy.any()


async def test_a_send_whose_part_for_some_worker_is_not_one_run_goes_as_requests() -> None:
    kwargs = {"quiet": True}
    async with aioenv.Pool(PROBE, 6, num_workers=2, executor="inline", env_kwargs=kwargs) as pool:  # 0-2, 3-5
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        sched = pool._runner.sched  # type: ignore[attr-defined]
        for ids, lane_call, held in (
            ([5, 3, 4, 2, 1], True, [1, 2, 3, 4, 5]),
            ([2, 0, 4], False, [4]),
            ([3, 5], False, []),
            ([0, 1, 2, 3, 4], True, [0, 1, 2, 3, 4]),
        ):
            pool.send(np.ones(len(ids), np.int64), ids)
            assert (len(sched.lane_calls), len(sched.requests) > 0) == (int(lane_call), not lane_call), ids
            await until(lambda: in_flight(pool) == 0)
            for env in ids:  # every row has come: each env refuses a step until recv() hands its row out
                with pytest.raises(UsageError, match=f"env {env}'s last result has arrived but recv"):
                    pool.send(np.ones(1, np.int64), [env])
            # Rows that lie in the shared rows wait there, their envs held until recv() takes them: a lane call's,
            # and a lane step's (a worker's part of [2, 0, 4] that is a run: [4]); the others were copied out.
            assert np.flatnonzero(sched.busy).tolist() == held, ids
            obs, *_, info = await asyncio.wait_for(pool.recv(min_results=len(ids)), HANG)
            assert sorted(info["env_id"].tolist()) == sorted(ids)
            assert obs[:, 0].tolist() == info["env_id"].tolist()  # each env's own row
            assert not sched.busy.any()


@pytest.mark.parametrize("pure", [True, False], ids=["pure", "as-built"])
async def test_a_sends_ids_are_cut_into_runs_once_while_the_envs_stay_where_they_are(
    monkeypatch: pytest.MonkeyPatch, pure: bool
) -> None:
    # The twins remember each batch's cut; the compiled cut (where aioenv._hot found it) is cheaper than
    # remembering, and cuts every batch anew.
    if pure:
        monkeypatch.setattr(scheduler, "compiled", None)
    cuts: list[list[int]] = []
    cut = scheduler.Scheduler._cut  # (compiled or not: aioenv._hot)

    def counted(self: scheduler.Scheduler, env_ids: np.ndarray) -> tuple[list[int], list[int], list[int]] | None:
        cuts.append(env_ids.tolist())
        return cut(self, env_ids)

    monkeypatch.setattr(scheduler.Scheduler, "_cut", counted)
    async with aioenv.Pool(PROBE, 6, num_workers=2, executor="inline", env_kwargs={"quiet": True}) as pool:  # 0-2, 3-5
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        sched = pool._runner.sched  # type: ignore[attr-defined]
        batches = [[3, 4, 5], [0, 1, 2], [2, 0, 4]]  # a loop's batches (the last no worker's run: requests)
        for round_ in range(3):
            if round_ == 2:  # the envs placed anew (the same blocks: the pool goes on): what was known is not
                sched.place(2)
            for ids in batches:
                pool.send(np.ones(len(ids), np.int64), np.array(ids))
                assert len(sched.lane_calls) == int(ids != [2, 0, 4]), ids
                obs, *_, info = await asyncio.wait_for(pool.recv(min_results=len(ids)), HANG)
                assert sorted(info["env_id"].tolist()) == sorted(ids)
                assert obs[:, 0].tolist() == info["env_id"].tolist()  # each env's own row
                assert not sched.busy.any()
        if scheduler.compiled is None:
            assert cuts == [*batches, *batches]  # each batch cut in the first round and after the placement, only
        else:
            assert cuts == batches * 3


async def test_a_worker_lost_mid_send_fails_its_rows_through_recv_and_the_others_arrive(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 4) as pool:
        pool.send(np.array([0, 1, SLOW, SLOW]))
        *_, info = await asyncio.wait_for(pool.recv(min_results=2, max_results=2), HANG)
        assert sorted(info["env_id"].tolist()) == [0, 1]
        os.kill(worker_pid(pool, 1), signal.SIGKILL)
        with pytest.raises(WorkerCrashed) as caught:
            await asyncio.wait_for(pool.recv(min_results=1), HANG)
        assert caught.value.env_id in (2, 3)
        with pytest.raises(WorkerCrashed):
            await asyncio.wait_for(pool.recv(min_results=1), HANG)
        pool.send(np.array([0, 0]), [0, 1])
        obs, *_ = await asyncio.wait_for(pool.recv(min_results=2), HANG)
        assert sorted(obs[:, 1].tolist()) == [2, 2]


async def test_closing_the_pool_mid_step_answers_the_call_once_and_frees_every_env(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 4) as pool:
        step = asyncio.ensure_future(pool.step(np.array([0, 1, SLOW, SLOW])))
        await until(lambda: unanswered(pool) == 1)
    with pytest.raises(PoolClosed, match="was closed while env 2's step was in flight"):
        await asyncio.wait_for(step, HANG)
    sched = pool._runner.sched  # type: ignore[attr-defined]
    assert not sched.lane_calls
    assert not sched.requests
    assert not sched.busy.any()


@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "not-quiet"])
async def test_a_worker_that_dies_with_its_reply_on_the_done_pipe_unread_is_answered_by_it(
    quiet: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not quiet:
        never_quiet(monkeypatch)
    gate = tmp_path / "gate"
    async with gated_pool(gate, 4) as pool:
        coord: Any = pool._runner
        step = asyncio.ensure_future(pool.step(np.array([1, 0, SLOW, SLOW])))
        await asyncio.sleep(0)  # the call goes out; from here the loop runs nothing until the exit is handled
        proc = coord.slots[0].proc
        # Worker 0's DONE is in the done pipe (a quiet call's: in the quiet pipe), and worker 0 is dead: both before
        # the pool reads either.
        pipe = coord._quiet.read if quiet else coord._done_pipe[0]
        assert select.select([pipe], [], [], HANG)[0]
        os.kill(proc.pid, signal.SIGKILL)
        assert select.select([proc.proc.exit_fd], [], [], HANG)[0]
        proc._reap()  # its exit first, as the loop may take it: the reply it wrote before it died still counts
        [call] = coord.sched.lane_calls.values()  # nothing of the call was failed: it waits for worker 1 alone
        assert call.done == [True, False]
        assert [r.kind for r in coord.sched.requests.values()] == ["make"]  # worker 0's envs, made again
        gate.touch()
        obs, *_ = await asyncio.wait_for(step, HANG)
        assert obs[:, 0].tolist() == [0, 1, 2, 3]
        assert obs[:, 2].tolist() == [1, 0, SLOW, SLOW]


async def test_a_worker_lost_mid_step_fails_its_rows_and_leaves_the_others_whole() -> None:
    async with aioenv.Pool(PROBE, 4, num_workers=2, executor="inline", env_kwargs={"quiet": True}) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        step = asyncio.ensure_future(pool.step(np.array([1, 0, SLOW, SLOW])))
        await until(lambda: unanswered(pool) == 1)
        os.kill(worker_pid(pool, 1), signal.SIGKILL)
        with pytest.raises(WorkerCrashed) as caught:
            await asyncio.wait_for(step, HANG)
        assert sorted(caught.value.errors) == [2, 3]
        obs, reward, *_ = caught.value.partial
        assert obs[:, 0].tolist() == [0, 1]
        assert reward.tolist() == [1.5, 0.5]
        row = await asyncio.wait_for(pool.step_env(1, 0), HANG)  # its claim was freed with the call
        assert row.obs[1] == 2


async def test_a_late_worker_fails_its_rows_and_leaves_the_others_whole() -> None:
    kwargs = {"quiet": True, "slow_seconds": 30.0}
    async with aioenv.Pool(PROBE, 4, num_workers=2, executor="inline", env_kwargs=kwargs, step_timeout=1.0) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        with pytest.raises(StepTimeout) as caught:
            await asyncio.wait_for(pool.step(np.array([0, 0, SLOW, 0])), HANG)
        assert sorted(caught.value.errors) == [2, 3]
        obs, *_ = caught.value.partial
        assert obs[:, 0].tolist() == [0, 1]
        obs, *_ = await asyncio.wait_for(pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 1]), HANG)
        assert obs[:, 1].tolist() == [2, 2]  # their claims were freed with the call


async def test_a_step_with_infos_comes_back_as_a_result_over_shared_rows() -> None:
    async with aioenv.Pool(PROBE, 4, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        obs, _, _, _, info = await asyncio.wait_for(pool.step(np.array([0, 1, 0, 1])), HANG)
        assert info["t"].tolist() == [1, 1, 1, 1]
        assert obs[:, 2].tolist() == [0, 1, 0, 1]
        infos = await asyncio.wait_for(pool._start_step(np.array([1, 1, 1, 1]), info_list=True), HANG)
        assert [i["t"] for i in infos[4]] == [2, 2, 2, 2]


# ---------------------------------------------------------------- a worker's side, over a real slab


def _answer(worker: Worker, frame: bytes) -> list[Any]:
    reply, done = worker.handle([memoryview(frame)])
    assert not done
    return reply


def test_a_worker_answers_a_lane_step_with_done_and_its_rows_in_the_slab() -> None:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    ref.reset(seed=list(range(4)))
    with worker_with_envs(4, slab=True) as (worker, slab):
        assert slab is not None
        for t in range(30):
            actions = np.array([t % 2, 1, 0, (t // 2) % 2])
            slab.act[0][:] = actions
            reply = _answer(worker, lane.step(100 + t, 0, 4))
            assert [bytes(f) for f in reply] == [lane.done(100 + t)]
            obs, reward, term, trunc, _ = ref.step(actions)
            np.testing.assert_array_equal(slab.obs[0], obs)
            np.testing.assert_array_equal(slab.reward, reward)
            np.testing.assert_array_equal(slab.terminated, term)
            np.testing.assert_array_equal(slab.truncated, trunc)
    ref.close()


def test_a_worker_with_the_done_pipe_writes_its_dones_there_and_its_own_pipe_once_it_is_closed() -> None:
    read, write = os.pipe()
    try:
        with worker_with_envs(2, slab=True, done=(write, 3, 777)) as (worker, _):
            for t in range(3):
                assert _answer(worker, lane.step(50 + t, 0, 2)) == []  # nothing on its own pipe
            got = lane.read_records(os.read(read, 4096), [0, 0, 0, 777])
            assert got == ([(3, 50), (3, 51), (3, 52)], [], [], 72, 0)
            os.close(read)
            reply = _answer(worker, lane.step(60, 0, 2))  # the pool's end is gone: its own pipe carries it
            assert [bytes(f) for f in reply] == [lane.done(60)]
            assert worker.slab is not None
            bad = {Key.ID: 9, Key.SLAB: worker.slab.layout, Key.DONE_PIPE: [0, 0]}
            header, _ = decode(worker.handle(encode(Op.SLAB, bad))[0])
            assert header[Key.OP] == Op.ERROR
            assert "got a done pipe as [0, 0] (expected [slot, token])" in header[Key.ERROR]["message"]
    finally:
        os.close(write)
        with contextlib.suppress(OSError):
            os.close(read)


def test_a_worker_answers_a_lane_step_it_cannot_serve_with_an_error_naming_why() -> None:
    with worker_with_envs(4, slab=True) as (worker, _):
        for frame, words in [
            (lane.step(7, 2, 5), "got a lane step of envs 2 to 6: the pool shares rows for envs 0 to 3"),
            (lane.step(8, 0, 0), "got a lane step of no envs (expected 1 to 4)"),
        ]:
            header, _ = decode(_answer(worker, frame))
            assert header[Key.OP] == Op.ERROR
            assert header[Key.ID] == frame_id(frame)
            assert words in header[Key.ERROR]["message"]
    with worker_with_envs(2, slab=False) as (plain, _):
        header, _ = decode(_answer(plain, lane.step(9, 0, 2)))
        assert header[Key.OP] == Op.ERROR
        assert "got a request for shared rows before their layout" in header[Key.ERROR]["message"]


def frame_id(frame: bytes) -> int:
    return lane.read_step(frame)[0]


async def test_lane_messages_a_worker_forges_are_dropped_or_refused(caplog: pytest.LogCaptureFixture) -> None:
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 4, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        for t in range(1, 4):  # a DONE for a request no one sent: dropped, every row still answered by its worker
            obs, *_ = await asyncio.wait_for(pool.step(np.array([4, 0, 0, 4])), HANG)
            assert obs[:, 0].tolist() == [t] * 4
        # On the done pipe: garbage, then records for every id a lane call may have, with a made-up token. Neither
        # is taken for a reply: every row is still answered by its own worker, and no worker is replaced.
        pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
        for t, action in [(4, 5), (5, 6), (6, 5), (7, 0)]:
            with caplog.at_level(logging.WARNING, logger="aioenv.coordinator"):
                obs, *_ = await asyncio.wait_for(pool.step(np.array([action, 0, 0, action])), HANG)
            assert obs[:, 0].tolist() == [t] * 4
        assert [worker_pid(pool, 0), worker_pid(pool, 1)] == pids
        dropped = [r.getMessage() for r in caplog.records if "of the done pipe" in r.getMessage()]
        assert dropped
        assert all("that are no lane reply of this pool's workers" in m for m in dropped)
        # 4 x 40 bytes of garbage and 2 x 8,000 forged records, read a pipe's worth at a time: logged once each time
        # the total (which each line says) passes a power of two, not once per read
        total = 4 * 40 + 2 * 8000 * lane.RECORD.size
        said = [int(m.split("(")[1].split(" in all")[0]) for m in dropped]
        assert all(earlier.bit_length() < later.bit_length() for earlier, later in itertools.pairwise(said))
        assert said[-1] <= total
        assert len(dropped) <= total.bit_length()
        old = worker_pid(pool, 1)
        with pytest.raises(WorkerCrashed) as caught:  # a lane message that is no reply: the stream is not trusted
            await asyncio.wait_for(pool.step(np.array([0, 0, 3, 0])), HANG)
        assert sorted(caught.value.errors) == [2, 3]
        assert "sent a message this pool cannot read" in str(caught.value)
        assert "a lane message that answers no step" in str(caught.value)
        obs, *_ = caught.value.partial
        assert obs[:, 0].tolist() == [8, 8]
        await wait_new_worker(pool, 1, old)


@pytest.mark.usefixtures("no_quiet_calls")  # (a quiet call's replies are read at its end: the lie is the same)
@pytest.mark.parametrize("envs", ["every", "some"])
async def test_a_lane_reply_to_another_workers_request_is_refused(
    envs: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = tmp_path / "gate"
    async with gated_pool(gate, 6) as pool:
        coord: Any = pool._runner
        # every env: one lane call; some envs (those of workers 0 and 1): a request per worker
        ids = None if envs == "every" else [0, 1, 2, 3]
        acts = np.array([SLOW, SLOW, 0, 1, 0, 1][: 6 if ids is None else 4])
        step = asyncio.ensure_future(pool.step(acts, ids))
        await until(lambda: in_flight(pool) == 1)  # the others answered; worker 0 steps on
        out = {**coord.sched.lanes, **coord.sched.requests}
        [(req_id, waiting)] = out.items()
        assert coord.sched.sent_to(req_id) == 0
        old = worker_pid(pool, 1)
        # Worker 1 says worker 0's rows are written (they are not): its DONE as the pipe hands it over.
        framed = struct.pack("<IQ", 1, len(lane.done(req_id))) + lane.done(req_id)
        assert coord._on_quick(coord.slots[1].name.encode(), memoryview(framed))
        assert {**coord.sched.lanes, **coord.sched.requests}.get(req_id) is waiting  # waiting for worker 0's own
        assert (
            f"sent a lane reply for another worker: message {req_id} went to worker 0, not to worker 1" in caplog.text
        )
        await wait_new_worker(pool, 1, old)  # a worker whose stream lies is replaced
        gate.touch()
        obs, *_ = await asyncio.wait_for(step, HANG)
        assert obs[:, 0].tolist() == list(range(acts.size))
        assert obs[:, 2].tolist() == acts.tolist()


# ---------------------------------------------------------------- replies with infos


async def test_a_lock_step_step_whose_envs_return_infos_stays_one_lane_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A RESULT whose rows are all in the slab and that carries nothing but infos (the envs return one every step,
    as MuJoCo's do) ticks its lane message off as a DONE would: the call is not turned into requests, its rows are
    copied once, and its infos are SyncVectorEnv's, two envs a worker (a batched info) or one (its dict)."""
    spills: list[Any] = []
    spill = Coordinator._spill_lanes

    def counting_spill(self: Coordinator, *args: Any, **kwargs: Any) -> None:
        if "req_id" in kwargs:  # a reply that is no DONE (the pool's close spills what is left, with no id)
            spills.append(kwargs["req_id"])
        spill(self, *args, **kwargs)

    monkeypatch.setattr(Coordinator, "_spill_lanes", counting_spill)
    for workers in (2, 4):
        ref = gym.vector.SyncVectorEnv([make_probe] * 4)
        async with aioenv.Pool(PROBE, 4, num_workers=workers, executor="inline") as pool:
            await asyncio.wait_for(pool.reset(seed=0), HANG)
            ref.reset(seed=0)
            for actions in ([0, 1, 0, 1], [1, 1, 0, 0], [1, 0, 1, 0]):
                got = await asyncio.wait_for(pool.step(np.array(actions)), HANG)
                want = ref.step(np.array(actions))
                assert_same(got[:4], want[:4], f"step of {actions} on {workers} workers")
                assert got[4].pop("env_id").tolist() == [0, 1, 2, 3]
                assert_same(got[4], want[4], f"infos of {actions} on {workers} workers")
                assert got[4]["t"].flags.writeable  # the caller's own copy
        ref.close()
    assert spills == []


async def test_a_late_worker_after_another_workers_infos_were_kept_fails_its_rows_alone() -> None:
    kwargs = {"slow_seconds": 30.0}
    async with aioenv.Pool(PROBE, 4, num_workers=2, executor="inline", env_kwargs=kwargs, step_timeout=1.0) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        with pytest.raises(StepTimeout) as caught:
            await asyncio.wait_for(pool.step(np.array([0, 1, SLOW, 0])), HANG)
        assert sorted(caught.value.errors) == [2, 3]
        obs, reward, _, _, info = caught.value.partial
        assert obs[:, 0].tolist() == [0, 1]
        assert reward.tolist() == [0.5, 1.5]
        assert info["t"].tolist() == [1, 1]  # the answered worker's info, kept while the call was a lane call
        obs, *_, info = await asyncio.wait_for(pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 1]), HANG)
        assert info["t"].tolist() == [2, 2]


async def test_a_send_whose_envs_return_infos_stays_one_lane_call_and_recv_gives_each_rows_info(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for ``send``/``recv``: a reply with nothing but infos queues its rows where they lie with their
    info, and a ``recv()`` that ends inside one reply's rows cuts its info with them."""
    spills: list[int] = []
    spill = Coordinator._spill_lanes

    def counting_spill(self: Coordinator, *args: Any, **kwargs: Any) -> None:
        if "req_id" in kwargs:
            spills.append(kwargs["req_id"])
        spill(self, *args, **kwargs)

    monkeypatch.setattr(Coordinator, "_spill_lanes", counting_spill)
    for workers in (2, 4):
        async with aioenv.Pool(PROBE, 4, num_workers=workers, executor="inline", batch_size=3) as pool:
            await asyncio.wait_for(pool.reset(seed=0), HANG)
            steps = [0, 0, 0, 0]
            pool.send(np.zeros(4, dtype=np.int64))
            for _ in range(6):
                obs, reward, _, _, info = await asyncio.wait_for(pool.recv(), HANG)
                ids = info["env_id"].tolist()
                for env in ids:
                    steps[env] += 1
                assert obs[:, 0].tolist() == ids  # (a probe's observation: its env, its step count, the action)
                assert obs[:, 1].tolist() == [steps[env] for env in ids]
                assert info["t"].tolist() == [steps[env] for env in ids]  # each row's own env's step count
                assert info["_t"].all()
                assert reward.tolist() == [0.5] * len(ids)
                pool.send(np.zeros(len(ids), dtype=np.int64), ids)
            await asyncio.wait_for(pool.recv(min_results=4, max_results=4, timeout=HANG), HANG)
    assert spills == []

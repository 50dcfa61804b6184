"""A lock-step step of every env on two or more worker processes goes as a *quiet call* (``aioenv.wire.lane.QUIET``):
every worker's reply waits in the quiet pipe, and the last worker to answer wakes the pool once.

Real pools of worker processes: the pool is woken once per step (one record on its done pipe, every DONE on the
quiet pipe) and steps as SyncVectorEnv does; a step that goes another way (an env's error) leaves the next steps
quiet; and workers that lie on those pipes (one that takes the whole countdown, one that writes garbage and forged
records to the quiet pipe) only cost the pool a wake-up more, never a row. The cases a call's worker is lost, late
or closed in the middle of one are ``tests/e2e/test_lane.py``'s (with quiet calls and without).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.errors import EnvError
from aioenv.wire import lane
from tests.support.procs import HANG, worker_pid


@pytest.fixture
def pipe_reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[aioenv.Pool], tuple[int, int]]:
    """Count the bytes this process reads from each descriptor; the fixture's value gives, for a pool, those of its
    done pipe and of its quiet pipe so far."""
    read = os.read
    got: Counter[int] = Counter()

    def counting(fd: int, size: int) -> bytes:
        data = read(fd, size)
        got[fd] += len(data)
        return data

    def of(pool: aioenv.Pool) -> tuple[int, int]:
        coord: Any = pool._runner
        return got[coord._done_pipe[0]], got[coord._quiet.read]

    monkeypatch.setattr(os, "read", counting)
    return of


async def test_a_lock_step_step_wakes_the_pool_once_however_many_workers_answer(
    pipe_reads: Callable[[aioenv.Pool], tuple[int, int]],
) -> None:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 6)
    rng = np.random.default_rng(11)
    steps = 30
    async with aioenv.Pool("CartPole-v1", 6, num_workers=3, executor="inline") as pool:
        obs, _ = await asyncio.wait_for(pool.reset(seed=3), HANG)
        np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
        before = pipe_reads(pool)
        for _ in range(steps):  # episodes end and reset meanwhile (next_step)
            actions = rng.integers(0, 2, 6)
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            for g, w in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(g, w)
        done, quiet = (after - was for after, was in zip(pipe_reads(pool), before, strict=True))
    ref.close()
    assert done == steps * lane.RECORD.size  # one wake record a step: its last worker's
    assert quiet == steps * 3 * lane.RECORD.size  # every worker's DONE, read at its step's end


async def test_a_step_that_goes_another_way_leaves_the_next_steps_quiet(
    pipe_reads: Callable[[aioenv.Pool], tuple[int, int]],
) -> None:
    kwargs = {"quiet": True, "fail_at": 3}  # every env raises in its third step: each worker answers with a RESULT
    async with aioenv.Pool(
        "tests.envs.faulty:make_probe", 6, num_workers=3, executor="inline", env_kwargs=kwargs
    ) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        for t in (1, 2):
            obs, *_ = await asyncio.wait_for(pool.step(np.zeros(6, dtype=np.int64)), HANG)
            assert obs[:, 1].tolist() == [t] * 6
        with pytest.raises(EnvError) as caught:
            await asyncio.wait_for(pool.step(np.zeros(6, dtype=np.int64)), HANG)
        assert sorted(caught.value.errors) == list(range(6))
        await asyncio.wait_for(pool.reset(seed=10), HANG)
        before = pipe_reads(pool)
        for t in (1, 2):
            obs, *_ = await asyncio.wait_for(pool.step(np.ones(6, dtype=np.int64)), HANG)
            assert obs[:, 1].tolist() == [t] * 6
            assert obs[:, 0].tolist() == list(range(10, 16))
        done, quiet = (after - was for after, was in zip(pipe_reads(pool), before, strict=True))
    # quiet again: a wake record a step (and perhaps the failed step's, written before its RESULTs went)
    assert 2 * lane.RECORD.size <= done <= 3 * lane.RECORD.size
    assert quiet == 2 * 3 * lane.RECORD.size


@pytest.mark.parametrize("action", [8, 9], ids=["takes-the-countdown", "forges-quiet-records"])
async def test_a_worker_that_lies_on_the_quiet_pipes_costs_the_pool_a_wake_up_not_a_row(
    action: int, caplog: pytest.LogCaptureFixture
) -> None:
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 6, num_workers=3, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        pids = [worker_pid(pool, w) for w in range(3)]
        with caplog.at_level(logging.WARNING, logger="aioenv.coordinator"):
            for t in range(1, 13):  # env 2 (worker 1) lies in every other step, each worker first in turn
                acts = np.zeros(6, dtype=np.int64)
                acts[2] = action if t % 2 else 0
                obs, *_ = await asyncio.wait_for(pool.step(acts), HANG)
                assert obs[:, 0].tolist() == [t] * 6  # every row, each its own env's
        assert [worker_pid(pool, w) for w in range(3)] == pids  # no worker is blamed for another's lie
        dropped = [r.getMessage() for r in caplog.records if "of the done pipe" in r.getMessage()]
        if action == 9:  # garbage and records with a made-up token: dropped, and said so
            assert dropped
            assert all("that are no lane reply of this pool's workers" in m for m in dropped)
        else:
            assert not dropped


async def test_a_countdown_that_cannot_be_written_sends_the_step_as_any_other_and_the_next_is_quiet(
    pipe_reads: Callable[[aioenv.Pool], tuple[int, int]],
) -> None:
    kwargs = {"quiet": True}
    async with aioenv.Pool(
        "tests.envs.faulty:make_probe", 6, num_workers=3, executor="inline", env_kwargs=kwargs
    ) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        coord: Any = pool._runner
        with contextlib.suppress(BlockingIOError):  # the countdown pipe full: no room for a step's countdown
            while True:
                os.write(coord._quiet.count_write, bytes(4096))
        for t, (done, quiet) in enumerate([(3, 0), (1, 3), (1, 3)], 1):
            before = pipe_reads(pool)
            obs, *_ = await asyncio.wait_for(pool.step(np.zeros(6, dtype=np.int64)), HANG)
            assert obs[:, 1].tolist() == [t] * 6
            after = pipe_reads(pool)
            # the first step's records on the done pipe, one from each worker; then one wake record a step
            assert (after[0] - before[0], after[1] - before[1]) == (done * lane.RECORD.size, quiet * lane.RECORD.size)


async def test_a_worker_that_cannot_count_down_delays_its_call_and_answers_the_next_ones_another_way() -> None:
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 6, num_workers=3, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        pids = [worker_pid(pool, w) for w in range(3)]
        for t in range(1, 6):  # env 2's code closes its worker's countdown pipe in the first step
            acts = np.zeros(6, dtype=np.int64)
            acts[2] = 10 if t == 1 else 0
            obs, *_ = await asyncio.wait_for(pool.step(acts), HANG)  # (the first waits for the pool's sweep)
            assert obs[:, 0].tolist() == [t] * 6
        assert [worker_pid(pool, w) for w in range(3)] == pids

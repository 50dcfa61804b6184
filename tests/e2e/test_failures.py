"""Failures (design section 5): env errors, killed workers, step timeouts, shutdown.

Real worker processes are killed with real signals. A step is "surely in flight" when the
env's slow action has written its marker file (ProbeEnv), not after some sleep. Timeouts
are hang guards only.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv import (
    AioEnvError,
    EnvError,
    EpisodeEnded,
    PoolClosed,
    StepTimeout,
    UsageError,
    WorkerCrashed,
)
from tests.envs.faulty import SLOW, make_probe
from tests.support.procs import HANG, child_processes, process_gone, wait_new_worker, worker_pid

PROBE = "tests.envs.faulty:make_probe"


async def guard(awaitable: Any) -> Any:
    """Await with a hang guard."""
    return await asyncio.wait_for(awaitable, HANG)


async def drain_recv(pool: aioenv.Pool, expected: int) -> tuple[dict[int, np.ndarray], dict[int, AioEnvError]]:
    """recv until ``expected`` rows or errors came back; returns ``{env_id: obs row}`` and
    ``{env_id: error}``. Fails if an env comes back twice."""
    rows: dict[int, np.ndarray] = {}
    errors: dict[int, AioEnvError] = {}
    while len(rows) + len(errors) < expected:
        try:
            obs, *_, info = await guard(pool.recv(min_results=1, max_results=expected))
        except AioEnvError as err:  # an env's error is one of the rows recv returns, checked like the others
            assert err.env_id is not None, f"a recv error names no env: {err!r}"  # noqa: PT017
            assert err.env_id not in rows, f"env {err.env_id} came back twice"  # noqa: PT017
            assert err.env_id not in errors, f"env {err.env_id} came back twice"  # noqa: PT017
            errors[err.env_id] = err
            continue
        for env_id, row in zip(info["env_id"].tolist(), obs, strict=True):
            assert env_id not in rows, f"env {env_id} came back twice"
            assert env_id not in errors, f"env {env_id} came back twice"
            rows[env_id] = row
    return rows, errors


def faulty_fns(n: int, failing: dict[int, dict[str, Any]]) -> list[Any]:
    """One ProbeEnv factory per env; env k gets the extra kwargs ``failing[k]``."""
    return [functools.partial(make_probe, **failing.get(i, {})) for i in range(n)]


# ------------------------------------------------------------------ env errors


async def test_env_error_in_step_fails_only_its_row() -> None:
    async with aioenv.Pool(faulty_fns(4, {1: {"fail_at": 2}}), num_workers=2, executor="inline") as pool:
        await guard(pool.reset(seed=10))
        await guard(pool.step(np.zeros(4, dtype=np.int64)))
        with pytest.raises(EnvError) as info:
            await guard(pool.step(np.array([1, 0, 1, 0])))
        err = info.value
        assert err.env_id == 1
        assert err.remote_type == "RuntimeError"
        assert "boom at step 2 of env 11" in err.remote_message
        assert "boom at step 2 of env 11" in str(err)
        assert "explode_on_purpose" in err.remote_traceback
        assert "explode_on_purpose" in str(err)
        assert "env 1" in err.message
        assert set(err.errors) == {1}
        assert err.errors[1] is err
        obs, rew, term, trunc, pinfo = err.partial
        assert pinfo["env_id"].tolist() == [0, 2, 3]
        assert obs[:, 0].tolist() == [10, 12, 13]
        assert obs[:, 1].tolist() == [2, 2, 2]
        assert obs[:, 2].tolist() == [1, 1, 0]
        assert rew.tolist() == [1.5, 1.5, 0.5]
        assert term.shape == trunc.shape == (3,)

        # env 1 is broken until reset; the others, including env 0 on the same worker, go on
        with pytest.raises(AioEnvError, match="reset") as info:
            await guard(pool.step(np.array([0]), env_ids=[1]))
        assert info.value.env_id == 1
        obs, *_ = await guard(pool.step(np.zeros(3, dtype=np.int64), env_ids=[0, 2, 3]))
        assert obs[:, 1].tolist() == [3, 3, 3]
        obs, _ = await guard(pool.reset(env_ids=[1], seed=[50]))
        assert obs[0, 0] == 50
        obs, *_, sinfo = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert obs[:, 1].tolist() == [4, 1, 4, 4]
        assert sinfo["env_id"].tolist() == [0, 1, 2, 3]


async def test_env_error_in_reset_fails_only_its_row() -> None:
    async with aioenv.Pool(PROBE, 3, executor="inline", num_workers=1, env_kwargs={"fail_reset_seed": 666}) as pool:
        with pytest.raises(EnvError) as info:
            await guard(pool.reset(seed=[0, 666, 2]))
        err = info.value
        assert err.env_id == 1
        assert err.remote_type == "ValueError"
        assert "reset refused for seed 666" in str(err)
        assert "refuse_reset_on_purpose" in err.remote_traceback
        obs, pinfo = err.partial
        assert pinfo["env_id"].tolist() == [0, 2]
        assert obs[:, 0].tolist() == [0, 2]
        with pytest.raises(AioEnvError, match="reset") as info:
            await guard(pool.step_env(1, 0))
        assert info.value.env_id == 1
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 2]))
        assert obs[:, 1].tolist() == [1, 1]
        obs, _ = await guard(pool.reset(env_ids=[1], seed=[5]))
        assert obs[0, 0] == 5
        obs, *_ = await guard(pool.step(np.zeros(3, dtype=np.int64)))
        assert obs[:, 1].tolist() == [2, 1, 2]


async def test_env_error_in_step_env_future() -> None:
    async with aioenv.Pool(faulty_fns(2, {0: {"fail_at": 2}}), num_workers=1, executor="inline") as pool:
        await guard(pool.reset(seed=3))
        res = await guard(pool.step_env(0, 1))
        assert res.obs[1] == 1
        fut = pool.step_env(0, 1)
        other = pool.step_env(1, 1)
        with pytest.raises(EnvError) as info:
            await guard(fut)
        err = info.value
        assert err.env_id == 0
        assert err.remote_type == "RuntimeError"
        assert "explode_on_purpose" in err.remote_traceback
        assert "boom at step 2 of env 3" in str(err)
        res = await guard(other)
        assert res.env_id == 1
        assert res.obs[1] == 1
        with pytest.raises(AioEnvError, match="reset") as info:
            await guard(pool.step_env(0, 0))
        assert info.value.env_id == 0
        res = await guard(pool.reset_env(0, seed=8))
        assert res.obs[0] == 8
        res = await guard(pool.step_env(0, 0))
        assert res.obs[0] == 8
        assert res.obs[1] == 1
        res = await guard(pool.step_env(1, 0))
        assert res.obs[1] == 2


async def test_env_error_through_send_recv() -> None:
    async with aioenv.Pool(faulty_fns(4, {2: {"fail_at": 1}}), num_workers=2, executor="inline", batch_size=4) as pool:
        await guard(pool.reset(seed=20))
        pool.send(np.zeros(4, dtype=np.int64))
        rows, errors = await drain_recv(pool, 4)
        assert sorted(rows) == [0, 1, 3]
        assert list(errors) == [2]
        err = errors[2]
        assert isinstance(err, EnvError)
        assert err.remote_type == "RuntimeError"
        assert "explode_on_purpose" in err.remote_traceback
        assert [rows[e][1] for e in (0, 1, 3)] == [1, 1, 1]
        with pytest.raises(UsageError):  # the error was handed out once, nothing else is queued
            await guard(pool.recv(min_results=1))
        pool.send(np.zeros(3, dtype=np.int64), env_ids=[0, 1, 3])
        rows, errors = await drain_recv(pool, 3)
        assert sorted(rows) == [0, 1, 3]
        assert not errors


@pytest.mark.parametrize(
    "where",
    [
        {"num_workers": 1, "executor": "inline"},
        {"executor": "in_process"},
        {"num_workers": 0, "executor": "thread"},
        {"num_workers": 1, "executor": "thread"},
    ],
    ids=["worker", "in_process", "thread_here", "thread_worker"],
)
async def test_info_that_cannot_cross_the_wire_fails_only_its_row(where: dict[str, Any]) -> None:
    """Also in the pool's own process, where a step's messages are otherwise passed as they are."""
    async with aioenv.Pool(faulty_fns(3, {1: {"bad_info": True}}), **where) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(EnvError) as info:
            await guard(pool.step(np.zeros(3, dtype=np.int64)))
        err = info.value
        assert err.env_id == 1
        assert "object" in str(err)
        assert err.partial[-1]["env_id"].tolist() == [0, 2]
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 2]))
        assert obs[:, 1].tolist() == [2, 2]


async def test_disabled_autoreset_raises_episode_ended_until_reset() -> None:
    async with aioenv.Pool(
        PROBE, 2, executor="inline", num_workers=1, autoreset_mode="disabled", env_kwargs={"max_steps": 1}
    ) as pool:
        await guard(pool.reset(seed=0))
        *_, trunc, _ = await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert trunc.tolist() == [True, True]
        with pytest.raises(EpisodeEnded) as info:
            await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert isinstance(info.value, EnvError)
        assert info.value.env_id == 0
        assert set(info.value.errors) == {0, 1}
        await guard(pool.reset(env_ids=[1]))
        *_, trunc, _ = await guard(pool.step(np.zeros(1, dtype=np.int64), env_ids=[1]))
        assert trunc.tolist() == [True]
        with pytest.raises(EpisodeEnded):
            await guard(pool.step_env(0, 0))


# ------------------------------------------------------------------ killed workers


async def test_worker_killed_mid_step_fails_in_flight_with_worker_crashed(gate: Any) -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        old, other = worker_pid(pool, 0), worker_pid(pool, 1)
        old_name = pool._runner.slots[0].name
        slow = pool.step_env(0, SLOW)
        queued = pool.step_env(1, 0)  # same worker, behind env 0
        await gate.started(10)
        os.kill(old, signal.SIGKILL)
        for fut, env_id in ((slow, 0), (queued, 1)):
            with pytest.raises(WorkerCrashed) as info:
                await guard(fut)
            err = info.value
            assert err.env_id == env_id
            assert err.worker == old_name
            assert err.exitcode == -signal.SIGKILL
            assert f"env {env_id}" in str(err)
            assert old_name in str(err)
            assert "SIGKILL" in str(err)

        # the other worker was never affected
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3]))
        assert obs[:, 1].tolist() == [1, 1]
        assert worker_pid(pool, 1) == other

        # a fresh process took the slot; its envs (0 and 1) were re-made and need a reset
        new = worker_pid(pool, 0)
        assert new != old
        for env_id in (0, 1):
            with pytest.raises(AioEnvError, match="reset") as info:
                await guard(pool.step_env(env_id, 0))
            assert info.value.env_id == env_id
        obs, rinfo = await guard(pool.reset(env_ids=[0, 1], seed=[20, 21]))
        assert obs[:, 0].tolist() == [20, 21]
        assert rinfo["pid"].tolist() == [new, new]
        obs, *_ = await guard(pool.step(np.ones(4, dtype=np.int64)))
        assert obs[:, 1].tolist() == [1, 1, 2, 2]
        assert process_gone(old)
        gate.open()


async def test_worker_that_corrupts_its_pipe_is_stopped_and_replaced(caplog: pytest.LogCaptureFixture) -> None:
    """Bytes that are no message on a worker's pipe: the pool logs it, stops that worker (its
    in-flight request fails with WorkerCrashed saying why) and starts a fresh one; the other
    worker's envs never notice."""
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 4, num_workers=2) as pool:
        await guard(pool.reset())
        old, other = worker_pid(pool, 0), worker_pid(pool, 1)
        with pytest.raises(WorkerCrashed, match="bytes that are no message") as info:
            await guard(pool.step_env(0, 1))
        assert info.value.env_id == 0
        assert info.value.exitcode == -signal.SIGKILL
        assert any("malformed pipe stream" in r.getMessage() for r in caplog.records)
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3]))
        assert obs[:, 0].tolist() == [1, 1]
        assert worker_pid(pool, 1) == other
        await wait_new_worker(pool, 0, old)
        obs, _ = await guard(pool.reset(env_ids=[0, 1]))
        obs, *_ = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert obs[:, 0].tolist() == [1, 1, 2, 2]
        assert process_gone(old)


async def test_a_reply_the_pool_cannot_read_fails_its_requests_and_replaces_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker's message the pool cannot decode (here a header over the size limit) is not dropped with its
    requests left waiting: the worker is replaced and the requests fail with WorkerCrashed saying why."""
    async with aioenv.Pool("tests.envs.faulty:HugeInfoEnv", 2, num_workers=1) as pool:
        await guard(pool.reset())
        old = worker_pid(pool, 0)
        with pytest.raises(WorkerCrashed, match="sent a message this pool cannot read") as info:
            await guard(pool.step(np.array([1, 0])))
        assert "exceeds the limit" in str(info.value)
        assert any("malformed message from worker" in r.getMessage() for r in caplog.records)
        await wait_new_worker(pool, 0, old)
        await guard(pool.reset())
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert obs[:, 0].tolist() == [1, 1]
        assert process_gone(old)


async def test_worker_alive_after_its_pipe_ended_is_stopped_after_the_grace() -> None:
    """A worker whose pipe ends while it keeps running (here an env shut it down, then hangs) gets
    ``EOF_GRACE`` seconds to exit, then is killed: its request fails with WorkerCrashed, not a hang."""
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 2, num_workers=1) as pool:
        await guard(pool.reset())
        old = worker_pid(pool, 0)
        with pytest.raises(WorkerCrashed, match="closed its end of the pipe, so it was stopped") as info:
            await guard(pool.step_env(0, 2))
        assert info.value.exitcode == -signal.SIGKILL
        await wait_new_worker(pool, 0, old)
        await guard(pool.reset())
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert obs[:, 0].tolist() == [1, 1]


async def test_worker_crash_in_batched_step_keeps_other_rows_in_partial(gate: Any) -> None:
    """Pool.step's contract: ``WorkerCrashed`` fails only the envs concerned; like EnvError,
    ``err.partial`` holds the rows of the envs whose worker is alive."""
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        task = asyncio.ensure_future(pool.step(np.array([SLOW, 0, 1, 1])))
        await gate.started(10)
        os.kill(worker_pid(pool, 0), signal.SIGKILL)
        with pytest.raises(WorkerCrashed) as info:
            await guard(task)
        err = info.value
        assert err.env_id == 0
        obs, _ = await guard(pool.reset(seed=[20, 21, 22, 23]))  # the pool goes on
        assert obs[:, 0].tolist() == [20, 21, 22, 23]
        assert getattr(err, "partial", None) is not None, "the rows of envs 2 and 3 were lost"
        obs, rew, term, trunc, pinfo = err.partial
        assert pinfo["env_id"].tolist() == [2, 3]
        assert obs[:, 1].tolist() == [1, 1]
        assert rew.tolist() == [1.5, 1.5]
        assert term.tolist() == trunc.tolist() == [False, False]
        assert set(getattr(err, "errors", {})) == {0, 1}


async def test_worker_crash_through_send_recv_loses_nothing(gate: Any) -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, batch_size=4, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        pool.send(np.array([SLOW, 0, 0, 0]))
        await gate.started(10)
        os.kill(worker_pid(pool, 0), signal.SIGKILL)
        rows, errors = await drain_recv(pool, 4)
        assert sorted(rows) == [2, 3]
        assert sorted(errors) == [0, 1]
        assert all(isinstance(e, WorkerCrashed) for e in errors.values())
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=1))
        pool.send_reset(env_ids=[0, 1], seed=[30, 31])
        pool.send(np.zeros(2, dtype=np.int64), env_ids=[2, 3])
        rows, errors = await drain_recv(pool, 4)
        assert not errors
        assert rows[0][0] == 30
        assert rows[1][0] == 31
        assert rows[2][1] == 2
        assert rows[3][1] == 2


async def test_idle_worker_killed_then_reset_works() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        old = worker_pid(pool, 1)
        os.kill(old, signal.SIGKILL)
        new = await wait_new_worker(pool, 1, old)
        assert new != old
        assert process_gone(old)
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[0, 1]))  # unaffected
        assert obs[:, 1].tolist() == [1, 1]
        obs, info = await guard(pool.reset(seed=5))
        assert obs[:, 0].tolist() == [5, 6, 7, 8]
        assert info["pid"][2:].tolist() == [new, new]
        obs, *_ = await guard(pool.step(np.ones(4, dtype=np.int64)))
        assert obs[:, 1].tolist() == [1, 1, 1, 1]


async def test_deaths_older_than_the_window_do_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived pool whose worker dies now and then is never given up: only deaths within
    RESTART_WINDOW count toward MAX_RESTARTS (a lifetime count would end any pool that runs long enough)."""
    import aioenv.core.recovery

    monkeypatch.setattr(aioenv.core.recovery, "MAX_RESTARTS", 1)
    monkeypatch.setattr(aioenv.core.recovery, "RESTART_WINDOW", 0.3)
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        pid = worker_pid(pool, 0)
        for _ in range(3):  # three deaths, each more than the window after the one before
            os.kill(pid, signal.SIGKILL)
            pid = await wait_new_worker(pool, 0, pid)
            await asyncio.sleep(0.5)
        assert not pool._runner.slots[0].dead_reason
        await guard(pool.reset(seed=0))
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert obs[:, 1].tolist() == [1, 1]


async def test_a_worker_that_keeps_dying_is_given_up_and_its_envs_fail_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_RESTARTS deaths within RESTART_WINDOW a slot is not started again: its envs' requests fail
    at once with WorkerCrashed saying so (no hang, no spawn loop), the other worker's envs go on, close is
    clean."""
    import aioenv.core.recovery

    monkeypatch.setattr(aioenv.core.recovery, "MAX_RESTARTS", 2)
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        pid = worker_pid(pool, 0)
        for _ in range(2):  # two restarts are allowed
            os.kill(pid, signal.SIGKILL)
            pid = await wait_new_worker(pool, 0, pid)
        os.kill(pid, signal.SIGKILL)  # the third death: given up
        async with asyncio.timeout(HANG):
            while not pool._runner.slots[0].dead_reason:
                await asyncio.sleep(0.01)
        assert process_gone(pid)
        for env_id in (0, 1):
            with pytest.raises(WorkerCrashed) as info:
                await guard(pool.step_env(env_id, 0))
            assert info.value.env_id == env_id
            assert "died 3 times in 60 s; aioenv gave up restarting it" in str(info.value)
        with pytest.raises(WorkerCrashed) as info:
            await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert set(info.value.errors) == {0, 1}
        assert info.value.partial[-1]["env_id"].tolist() == [2, 3]
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3]))
        assert obs[:, 1].tolist() == [2, 2]  # their first step was in the failed batch's partial rows
        assert pool._runner.slots[0].proc is None, "no worker was started again"


async def test_reset_after_crash_uses_recorded_seed() -> None:
    refs = [gym.make("CartPole-v1") for _ in range(4)]
    async with aioenv.Pool("CartPole-v1", 4, num_workers=2, seed=100) as pool:
        first, _ = await guard(pool.reset())
        want = np.stack([refs[i].reset(seed=100 + i)[0] for i in range(4)])
        np.testing.assert_array_equal(first, want)
        second, _ = await guard(pool.reset())  # no seed: each env's RNG goes on
        want = np.stack([refs[i].reset()[0] for i in range(4)])
        np.testing.assert_array_equal(second, want)
        await guard(pool.step(np.zeros(4, dtype=np.int64)))

        old = worker_pid(pool, 0)
        os.kill(old, signal.SIGKILL)
        await wait_new_worker(pool, 0, old)
        obs, _ = await guard(pool.reset())
        # envs 0 and 1 were re-made and reset with their recorded seeds (the make-time ones) ...
        np.testing.assert_array_equal(obs[:2], first[:2])
        # ... envs 2 and 3 were not re-made: no seed, their RNG goes on
        np.testing.assert_array_equal(obs[2:], np.stack([refs[i].reset()[0] for i in (2, 3)]))

        await guard(pool.reset(seed=7))  # records seeds 7 + i
        await guard(pool.reset())
        old = worker_pid(pool, 1)
        os.kill(old, signal.SIGKILL)
        await wait_new_worker(pool, 1, old)
        obs, _ = await guard(pool.reset())
        want = np.stack([gym.make("CartPole-v1").reset(seed=s)[0] for s in (9, 10)])
        np.testing.assert_array_equal(obs[2:], want)
    for env in refs:
        env.close()


# ------------------------------------------------------------------ step_timeout


async def test_step_timeout_fails_the_env_and_the_pool_keeps_working(gate: Any) -> None:
    async with aioenv.Pool(
        PROBE, 4, executor="inline", num_workers=2, step_timeout=2.0, env_kwargs=gate.kwargs()
    ) as pool:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        old, other = worker_pid(pool, 0), worker_pid(pool, 1)
        fut = pool.step_env(0, SLOW)
        await gate.started(10)
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3]))  # while env 0 hangs
        assert obs[:, 1].tolist() == [1, 1]
        with pytest.raises(StepTimeout) as info:
            await guard(fut)
        err = info.value
        assert isinstance(err, TimeoutError)
        assert err.env_id == 0
        assert "env 0" in str(err)
        obs, *_ = await guard(pool.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3]))
        assert obs[:, 1].tolist() == [2, 2]
        assert worker_pid(pool, 1) == other

        new = await wait_new_worker(pool, 0, old)  # the hung worker was replaced
        assert new != old
        assert process_gone(old)
        obs, info2 = await guard(pool.reset(seed=[20, 21, 22, 23]))
        assert obs[:, 0].tolist() == [20, 21, 22, 23]
        assert info2["pid"].tolist() == [new, new, other, other]
        obs, *_ = await guard(pool.step(np.ones(4, dtype=np.int64)))
        assert obs[:, 1].tolist() == [1, 1, 1, 1]


async def test_reset_right_after_step_timeout_works(gate: Any) -> None:
    """The StepTimeout message says "reset it before stepping": doing exactly that, at once,
    must work (not fail with WorkerCrashed because the reset went to the worker being killed)."""
    async with aioenv.Pool(
        PROBE, 2, executor="inline", num_workers=1, step_timeout=1.5, env_kwargs=gate.kwargs()
    ) as pool:
        await guard(pool.reset(seed=[10, 11]))
        fut = pool.step_env(0, SLOW)
        with pytest.raises(StepTimeout):
            await guard(fut)
        obs, _ = await guard(pool.reset(seed=[30, 31]))
        assert obs[:, 0].tolist() == [30, 31]


async def test_step_timeout_in_batched_step_keeps_other_rows_in_partial(gate: Any) -> None:
    async with aioenv.Pool(
        PROBE, 4, executor="inline", num_workers=2, step_timeout=1.5, env_kwargs=gate.kwargs()
    ) as pool:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        old = worker_pid(pool, 0)
        with pytest.raises(StepTimeout) as info:
            await guard(pool.step(np.array([SLOW, 0, 1, 1])))
        err = info.value
        assert err.env_id == 0
        await wait_new_worker(pool, 0, old)
        obs, _ = await guard(pool.reset(seed=[20, 21, 22, 23]))  # the pool goes on
        assert obs[:, 0].tolist() == [20, 21, 22, 23]
        assert getattr(err, "partial", None) is not None, "the rows of envs 2 and 3 were lost"
        obs, _, _, _, pinfo = err.partial
        assert pinfo["env_id"].tolist() == [2, 3]
        assert obs[:, 1].tolist() == [1, 1]
        assert 0 in getattr(err, "errors", {})


# ------------------------------------------------------------------ shutdown


async def test_aclose_leaves_no_process_and_no_temp_dir() -> None:
    pool = await aioenv.make(PROBE, 4, executor="inline", num_workers=2)
    pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
    private = pool._private_dir
    assert os.path.isdir(private)
    assert all(not process_gone(pid) for pid in pids)
    await guard(pool.reset(seed=0))
    await guard(pool.aclose())
    assert pool.closed
    for pid in pids:
        assert process_gone(pid), f"worker {pid} is still there after aclose()"
    assert not os.path.exists(private), "the private temp dir is still there after aclose()"
    await guard(pool.aclose())  # twice is fine


async def test_async_with_body_error_still_closes() -> None:
    with pytest.raises(KeyError):  # noqa: PT012 - the body of `async with` raising is the point
        async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=2) as pool:
            pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
            private = pool._private_dir
            raise KeyError("body failed")
    assert pool.closed
    assert all(process_gone(pid) for pid in pids)
    assert not os.path.exists(private)


async def test_aclose_fails_in_flight_requests_with_pool_closed(gate: Any) -> None:
    pool = await aioenv.make(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs())
    pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
    try:
        await guard(pool.reset(seed=[10, 11, 12, 13]))
        fut = pool.step_env(0, SLOW)
        batched = asyncio.ensure_future(pool.step(np.array([0]), env_ids=[1]))  # queued behind env 0
        pool.send(np.array([SLOW]), env_ids=[2])
        receiving = asyncio.ensure_future(pool.recv(min_results=1))
        await gate.started(10)
        await gate.started(12)
        closing = asyncio.ensure_future(pool.aclose())
        for waiting in (fut, batched, receiving):
            with pytest.raises(PoolClosed):
                await guard(waiting)
        gate.open()
        await guard(closing)
    finally:
        gate.open()
        await pool.aclose()
    assert all(process_gone(pid) for pid in pids)


async def test_calls_after_close_raise_pool_closed() -> None:
    pool = await aioenv.make(PROBE, 2, executor="inline", num_workers=1)
    await guard(pool.reset(seed=0))
    await guard(pool.aclose())
    await guard(pool.aclose())
    zeros = np.zeros(2, dtype=np.int64)
    with pytest.raises(PoolClosed):
        await guard(pool.step(zeros))
    with pytest.raises(PoolClosed):
        await guard(pool.reset())
    with pytest.raises(PoolClosed):
        pool.send(zeros)
    with pytest.raises(PoolClosed):
        pool.send_reset()
    with pytest.raises(PoolClosed):
        await guard(pool.recv(timeout=0.1))
    with pytest.raises(PoolClosed):
        await guard(pool.recv())
    with pytest.raises(PoolClosed):
        pool.step_env(0, 0)
    with pytest.raises(PoolClosed):
        pool.reset_env(0)
    with pytest.raises(PoolClosed):
        await guard(pool.get_attr("tag"))
    with pytest.raises(PoolClosed):
        await guard(pool.set_attr("tag", 1))
    with pytest.raises(PoolClosed):
        await guard(pool.call("describe", 1))
    with pytest.raises(PoolClosed):
        await guard(pool.render())


async def test_start_after_close_raises_pool_closed() -> None:
    """``start()`` is idempotent while the pool runs, but a closed pool cannot be started again:
    it says so instead of handing back a closed pool (``async with`` on it must fail too)."""
    pool = await aioenv.make(PROBE, 2, executor="inline", num_workers=1)
    await guard(pool.aclose())
    with pytest.raises(PoolClosed):
        await guard(pool.start())
    with pytest.raises(PoolClosed):
        async with pool:
            pass


async def test_aclose_stops_a_worker_hanging_in_close() -> None:
    """env.close() sleeps for an hour: CLOSE is not answered, aclose escalates to SIGTERM."""
    pool = await aioenv.make(PROBE, 2, executor="inline", num_workers=1, env_kwargs={"hang_in_close": True})
    pid = worker_pid(pool, 0)
    private = pool._private_dir
    await guard(pool.reset(seed=0))
    await guard(pool.aclose())
    assert process_gone(pid)
    assert not os.path.exists(private)


async def test_coordinator_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    """env.close() ignores SIGTERM and sleeps: only SIGKILL stops it (short grace via Coordinator.aclose)."""
    pool = await aioenv.make(
        PROBE, 2, executor="inline", num_workers=1, env_kwargs={"hang_in_close": True, "ignore_sigterm": True}
    )
    pid = worker_pid(pool, 0)
    private = pool._private_dir
    stopped = False
    try:
        await guard(pool.reset(seed=0))
        await guard(pool._runner.aclose(grace=0.3))
        stopped = True
        assert process_gone(pid)
        assert pool._runner.slots[0].proc.returncode == -signal.SIGKILL
        assert not os.path.exists(private)
    finally:
        if not stopped:
            await pool.aclose()


async def test_remake_that_fails_is_reported_and_the_loop_survives() -> None:
    """A worker may answer a re-make with ERROR (here: the pickled factory vanished). That must be
    logged, not crash the coordinator's socket callback; the envs fail clearly, the others go on."""
    loop = asyncio.get_running_loop()
    callback_errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: callback_errors.append(context))
    async with aioenv.Pool(lambda: gym.make("CartPole-v1"), 4, num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        for name in os.listdir(pool._private_dir):
            if name.endswith(".pkl"):
                os.remove(os.path.join(pool._private_dir, name))
        old = worker_pid(pool, 1)
        os.kill(old, signal.SIGKILL)
        await wait_new_worker(pool, 1, old)
        with pytest.raises(aioenv.ProtocolError, match=r"hosts (no env 2|none of the envs \[2\])"):
            await guard(pool.reset(env_ids=[2]))
        obs, info = await guard(pool.reset(env_ids=[0, 1], seed=3))  # the other worker's envs go on
        assert info["env_id"].tolist() == [0, 1]
        np.testing.assert_array_equal(obs[1], gym.make("CartPole-v1").reset(seed=4)[0])
    assert callback_errors == [], [c.get("message") for c in callback_errors]


class _KeyErrorOnStep(gym.Wrapper):
    """CartPole whose step raises KeyError, like an env with a bug in a dict lookup."""

    def step(self, action: Any) -> Any:
        return {}["missing"]


async def test_env_raising_key_error_is_an_env_error_not_a_missing_env() -> None:
    async with aioenv.Pool(lambda: _KeyErrorOnStep(gym.make("CartPole-v1")), 2, num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(aioenv.EnvError) as caught:
            await guard(pool.step(np.zeros(2, dtype=np.int64)))
        assert caught.value.remote_type == "KeyError"
        assert '{}["missing"]' in caught.value.remote_traceback  # the env's own line, not a protocol error
        assert "hosts no env" not in str(caught.value)


async def test_a_cancelled_close_still_leaves_nothing_behind(gate: Any) -> None:
    """A server shutting down cancels its sessions' closes: the workers must still go and the private
    directory must still be removed (it used to stay in /tmp)."""
    pool = await aioenv.make(PROBE, 2, executor="inline", num_workers=2, env_kwargs=gate.kwargs())
    await guard(pool.reset(seed=0))
    pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
    private = pool._private_dir
    slow = pool.step_env(0, SLOW)  # a worker busy in a step: CLOSE waits for it, so the close takes a while
    await gate.started(0)
    closing = asyncio.ensure_future(pool.aclose())
    await asyncio.sleep(0.2)
    assert not closing.done()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    with pytest.raises(PoolClosed):
        await guard(slow)
    assert private is not None
    assert not os.path.exists(private), "the private dir is still there after a cancelled close"
    deadline = time.monotonic() + HANG
    while not all(process_gone(pid) for pid in pids) or any(state == "Z" for _, state, _ in child_processes()):
        assert time.monotonic() < deadline, "a worker outlived a cancelled close (or was never reaped)"
        await asyncio.sleep(0.05)  # the loop reaps killed workers through their pidfds

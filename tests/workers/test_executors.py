"""The ``thread`` and ``async`` executors: overlapping steps, first-finished results, deadlines that
replace envs, ``on_timeout="truncate"``, ``max_concurrency``, Text end to end.

Real worker processes throughout. Overlap is shown without timing: ``MEET`` steps only return when
several envs are inside ``step`` at once (see ``tests/envs/waiting.py``), and the inline executor is
shown to fail that same test.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.core import recovery
from aioenv.errors import EnvError, EnvRemade, StepTimeout, UsageError
from tests.envs.waiting import HANG as HANG_ACTION
from tests.envs.waiting import INSTANT, MEET, SHORT, AsyncWaitEnv, TextEchoEnv, WaitEnv
from tests.support.procs import HANG, wait_new_worker, worker_pid

EXECUTORS = ["thread", "async"]


def envs(executor: str, n: int, **kwargs: Any) -> list[Any]:
    cls = WaitEnv if executor == "thread" else AsyncWaitEnv
    return [functools.partial(cls, ident=i, **kwargs) for i in range(n)]


def acts(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------- overlap


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_steps_of_one_worker_overlap(executor: str) -> None:
    async with aioenv.Pool(envs(executor, 4, parties=4), num_workers=1, executor=executor) as pool:
        await pool.reset()
        obs, _, _, _, info = await pool.step(acts(MEET, MEET, MEET, MEET))
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 1, 1])
        assert info["running"].max() == 4


async def test_inline_steps_do_not_overlap() -> None:
    """The control for the test above: one after another, the MEET steps cannot all arrive."""
    async with aioenv.Pool(envs("thread", 2, parties=2, meet_timeout=0.5), num_workers=1, executor="inline") as pool:
        await pool.reset()
        with pytest.raises(EnvError, match="never overlapped"):
            await pool.step(acts(MEET, MEET))


async def test_thread_executor_runs_each_env_on_its_own_thread() -> None:
    async with aioenv.Pool(envs("thread", 3), num_workers=1, executor="thread") as pool:
        await pool.reset()
        threads = await pool.call("thread_id")
        assert len(set(threads)) == 3
        _, _, _, _, info = await pool.step(acts(INSTANT, SHORT, INSTANT))
        assert info["thread"].tolist() == threads  # steps (and calls) run on the thread that made the env


# ---------------------------------------------------------------- first finished


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_recv_returns_rows_as_they_finish(executor: str) -> None:
    async with aioenv.Pool(envs(executor, 4, short=1.0), num_workers=1, executor=executor, batch_size=2) as pool:
        await pool.reset()
        pool.send(acts(SHORT, INSTANT, SHORT, INSTANT))  # one request to the one worker
        _, _, _, _, info = await pool.recv()
        assert sorted(info["env_id"].tolist()) == [1, 3]  # the fast rows did not wait for the slow ones
        _, _, _, _, info = await pool.recv()
        assert sorted(info["env_id"].tolist()) == [0, 2]


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_step_env_futures_resolve_independently(executor: str) -> None:
    async with aioenv.Pool(envs(executor, 2, short=1.0), num_workers=1, executor=executor) as pool:
        await pool.reset()
        slow = pool.step_env(0, SHORT)
        fast = pool.step_env(1, INSTANT)
        done, _ = await asyncio.wait([slow, fast], timeout=HANG, return_when=asyncio.FIRST_COMPLETED)
        assert done == {fast}
        assert fast.result().env_id == 1
        assert not slow.done()
        assert (await slow).obs[1] == 1


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_batched_step_gathers_rows_from_partial_replies(executor: str) -> None:
    async with aioenv.Pool(envs(executor, 4, short=0.3), num_workers=2, executor=executor) as pool:
        await pool.reset()
        obs, rew, _, _, info = await pool.step(acts(SHORT, INSTANT, INSTANT, SHORT), env_ids=[3, 2, 1, 0])
        assert info["env_id"].tolist() == [3, 2, 1, 0]  # the caller's order, whatever the finishing order
        np.testing.assert_array_equal(obs[:, 0], [3, 2, 1, 0])
        np.testing.assert_array_equal(rew, [1, 1, 1, 1])


# ---------------------------------------------------------------- deadlines: async


async def test_async_step_timeout_cancels_and_replaces_only_that_env() -> None:
    async with aioenv.Pool(envs("async", 4), num_workers=1, executor="async", step_timeout=1.0) as pool:
        await pool.reset()
        pid = worker_pid(pool, 0)
        with pytest.raises(StepTimeout) as caught:
            await pool.step(acts(HANG_ACTION, INSTANT, INSTANT, INSTANT))
        err = caught.value
        assert isinstance(err, TimeoutError)
        assert err.env_id == 0
        assert "reset it" in str(err)
        assert err.partial is not None
        assert err.partial[4]["env_id"].tolist() == [1, 2, 3]
        # the other envs keep their state; the late one is a fresh env that needs a reset
        obs, *_ = await pool.step(acts(INSTANT, INSTANT, INSTANT), env_ids=[1, 2, 3])
        np.testing.assert_array_equal(obs[:, 1], [2, 2, 2])
        with pytest.raises(UsageError, match="replaced after its last request overran its deadline; reset it"):
            await pool.step(acts(INSTANT), env_ids=[0])
        obs, _ = await pool.reset(env_ids=[0])
        obs, *_ = await pool.step(acts(INSTANT), env_ids=[0])
        assert obs[0, 1] == 1
        assert worker_pid(pool, 0) == pid  # cancelled in place, no restart
        assert (await pool.get_attr("closed", env_ids=[1]))[0] >= 1  # the replaced env was closed


async def test_async_reset_timeout() -> None:
    async with aioenv.Pool(envs("async", 2), num_workers=1, executor="async", reset_timeout=1.0) as pool:
        await pool.reset()
        with pytest.raises(StepTimeout) as caught:
            await pool.reset(env_ids=[1], options={"hang": True})
        assert caught.value.env_id == 1
        obs, _ = await pool.reset(env_ids=[1])
        assert obs[0, 1] == 0
        assert pool.step_timeout is None  # reset_timeout alone does not limit steps
    unbounded = aioenv.Pool(envs("async", 1), executor="async", step_timeout=1.0)
    assert unbounded.reset_timeout is None  # and step_timeout alone does not limit resets
    await unbounded.aclose()


async def test_async_truncate_on_timeout() -> None:
    async with aioenv.Pool(
        envs("async", 3), num_workers=1, executor="async", step_timeout=1.0, on_timeout="truncate"
    ) as pool:
        await pool.reset()
        await pool.step(acts(INSTANT, INSTANT, INSTANT))
        obs, rew, term, trunc, info = await pool.step(acts(HANG_ACTION, INSTANT, INSTANT))
        np.testing.assert_array_equal(trunc, [True, False, False])
        np.testing.assert_array_equal(term, [False, False, False])
        np.testing.assert_array_equal(rew, [0.0, 1.0, 1.0])
        np.testing.assert_array_equal(info["timeout"], [True, False, False])
        np.testing.assert_array_equal(obs[0], [0, 1])  # the last observation the caller saw
        # next_step autoreset: the env's next step starts a new episode (action ignored, reward 0)
        obs, rew, _, trunc, _ = await pool.step(acts(HANG_ACTION, INSTANT, INSTANT))
        np.testing.assert_array_equal(obs[:, 1], [0, 3, 3])
        np.testing.assert_array_equal(rew, [0.0, 1.0, 1.0])
        assert not trunc.any()


async def test_async_worker_whose_loop_is_blocked_is_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery, "CANCEL_GRACE", 0.5)
    async with aioenv.Pool(
        envs("async", 2, block_loop=True), num_workers=1, executor="async", step_timeout=0.5
    ) as pool:
        await pool.reset()
        pid = worker_pid(pool, 0)
        with pytest.raises(StepTimeout):
            await pool.step(acts(HANG_ACTION), env_ids=[0])
        await wait_new_worker(pool, 0, pid)  # the CANCEL went unanswered: the worker was replaced
        obs, _ = await pool.reset()
        obs, *_ = await pool.step(acts(INSTANT, INSTANT))
        np.testing.assert_array_equal(obs[:, 1], [1, 1])


# ---------------------------------------------------------------- deadlines: thread


async def test_thread_hang_restarts_its_worker_only() -> None:
    async with aioenv.Pool(envs("thread", 4), num_workers=2, executor="thread", step_timeout=1.0) as pool:
        await pool.reset()
        pids = [worker_pid(pool, 0), worker_pid(pool, 1)]
        with pytest.raises(StepTimeout) as caught:
            await pool.step(acts(HANG_ACTION, INSTANT, INSTANT, INSTANT))
        assert caught.value.env_id == 0
        assert caught.value.partial[4]["env_id"].tolist() == [1, 2, 3]
        await wait_new_worker(pool, 0, pids[0])
        assert worker_pid(pool, 1) == pids[1]
        obs, *_ = await pool.step(acts(INSTANT, INSTANT), env_ids=[2, 3])  # the other worker's envs go on
        np.testing.assert_array_equal(obs[:, 1], [2, 2])
        with pytest.raises(EnvRemade, match="was killed because a request overran its deadline; reset it"):
            await pool.step(acts(INSTANT), env_ids=[1])  # env 1 shared the restarted worker: re-made


async def test_restarts_after_deadlines_never_give_a_worker_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker restarted because a step overran its deadline did not crash: such restarts do not count
    toward the crash-loop limit, however many there are."""
    monkeypatch.setattr(recovery, "MAX_RESTARTS", 1)
    async with aioenv.Pool(envs("thread", 2), num_workers=1, executor="thread", step_timeout=0.5) as pool:
        await pool.reset()
        for _ in range(3):
            pid = worker_pid(pool, 0)
            with pytest.raises(StepTimeout):
                await pool.step(acts(HANG_ACTION), env_ids=[0])
            await wait_new_worker(pool, 0, pid)
            await pool.reset()
        assert not pool._runner.slots[0].dead_reason
        obs, *_ = await pool.step(acts(INSTANT, INSTANT))
        np.testing.assert_array_equal(obs[:, 1], [1, 1])


async def test_thread_truncate_ends_every_replaced_envs_episode() -> None:
    """Worker 0 hosts envs 0, 1, 2. Env 0 hangs; env 1's step is in flight when the worker is
    restarted; env 2 is idle. Each gets exactly one truncated row, then starts a new episode."""
    async with aioenv.Pool(
        envs("thread", 6), num_workers=2, executor="thread", step_timeout=1.0, on_timeout="truncate"
    ) as pool:
        await pool.reset()
        await pool.step(acts(*[INSTANT] * 6))
        pid = worker_pid(pool, 0)
        late = pool.step_env(0, HANG_ACTION)
        await asyncio.sleep(0.3)
        caught_up = pool.step_env(1, HANG_ACTION)  # its own deadline is later: the restart ends it first
        first, second = await asyncio.gather(late, caught_up)
        assert first.truncated
        assert first.info == {"timeout": True}
        assert first.reward == 0.0
        assert second.truncated
        assert second.info == {"env_replaced": True}
        np.testing.assert_array_equal(first.obs, [0, 1])
        await wait_new_worker(pool, 0, pid)
        obs, rew, _, trunc, info = await pool.step(acts(*[INSTANT] * 6))
        np.testing.assert_array_equal(trunc, [False, False, True, False, False, False])  # env 2's turn
        np.testing.assert_array_equal(info["env_replaced"], [False, False, True, False, False, False])
        np.testing.assert_array_equal(obs[:, 1], [0, 0, 1, 2, 2, 2])  # envs 0, 1: a new episode
        np.testing.assert_array_equal(rew, [0, 0, 0, 1, 1, 1])
        obs, *_ = await pool.step(acts(*[INSTANT] * 6))
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 0, 3, 3, 3])


async def test_truncate_refuses_same_step_mode() -> None:
    with pytest.raises(ValueError, match="same_step"):
        aioenv.Pool(envs("async", 1), executor="async", on_timeout="truncate", autoreset_mode="same_step")


# ---------------------------------------------------------------- max_concurrency


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_max_concurrency_bounds_running_steps(executor: str) -> None:
    async with aioenv.Pool(
        envs(executor, 8, short=0.2), num_workers=1, executor=executor, max_concurrency=3, batch_size=8
    ) as pool:
        await pool.reset()
        _, rew, _, _, info = await pool.step(acts(*[SHORT] * 8))
        np.testing.assert_array_equal(rew, np.ones(8))
        assert 1 <= info["running"].max() <= 3
        pool.send(acts(*[SHORT] * 8))
        _, _, _, _, info = await pool.recv()
        assert info["running"].max() <= 3
        assert sorted(info["env_id"].tolist()) == list(range(8))
        assert pool._runner.sched.running == 0
        assert not pool._runner.sched.held


async def test_max_concurrency_with_deadlines_counts_from_dispatch() -> None:
    """Held steps start their deadline when they are sent, not while they wait."""
    async with aioenv.Pool(
        envs("async", 4, short=0.4), num_workers=1, executor="async", max_concurrency=1, step_timeout=1.0
    ) as pool:
        await pool.reset()
        obs, *_ = await pool.step(acts(SHORT, SHORT, SHORT, SHORT))  # 1.6 s in all, 0.4 s each
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 1, 1])


async def test_close_fails_held_rows() -> None:
    pool = await aioenv.make(envs("async", 2), executor="async", max_concurrency=1)
    await pool.reset()
    pool.send(acts(HANG_ACTION, INSTANT))
    await pool.aclose()
    with pytest.raises(aioenv.PoolClosed):
        await pool.recv(timeout=1)


def test_max_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        aioenv.Pool("CartPole-v1", 2, max_concurrency=0)
    with pytest.raises(ValueError, match="reset_timeout"):
        aioenv.Pool("CartPole-v1", 2, reset_timeout=-1)
    with pytest.raises(ValueError, match="on_timeout"):
        aioenv.Pool("CartPole-v1", 2, on_timeout="ignore")


# ---------------------------------------------------------------- wrong executor, Text


async def test_gymnasium_env_under_async_executor_is_refused_clearly() -> None:
    with pytest.raises(EnvError, match="executor='inline' or 'thread'"):
        await aioenv.make("CartPole-v1", 2, executor="async")


@pytest.mark.parametrize("executor", ["inline", "thread"])
async def test_async_env_under_a_sync_executor_is_refused_clearly(executor: str) -> None:
    with pytest.raises(EnvError, match="use executor='async'"):
        await aioenv.make(envs("async", 2), executor=executor)


async def test_text_observations_and_actions_under_async_executor() -> None:
    async with aioenv.Pool(TextEchoEnv, 3, executor="async", batch_size=2) as pool:
        obs, _ = await pool.reset()
        assert obs.dtype == object
        assert obs.tolist() == ["q:", "q:", "q:"]
        actions = np.array(["abc", "xy", "stop"], dtype=object)
        obs, rew, term, _, info = await pool.step(actions)
        assert obs.tolist() == ["q:cba", "q:yx", "q:pots"]
        np.testing.assert_array_equal(rew, [3, 2, 4])
        np.testing.assert_array_equal(term, [False, False, True])
        assert info["echo"].tolist() == ["abc", "xy", "stop"]
        result = await pool.step_env(0, "hello")
        assert result.obs == "q:olleh"
        assert result.info == {"echo": "hello"}
        pool.send(["a", "b"], env_ids=[0, 1])
        obs, *_ = await pool.recv()
        assert sorted(obs.tolist()) == ["q:a", "q:b"]


# ---------------------------------------------------------------- invariants under a storm of timeouts


@pytest.mark.parametrize(
    ("executor", "on_timeout"), [("async", "error"), ("async", "truncate"), ("thread", "truncate")]
)
async def test_random_timeouts_keep_every_invariant(executor: str, on_timeout: str) -> None:
    """Random instant, short and hanging steps on every env for a while: every request gets exactly
    one reply, no env is left busy, no request or held row is left behind, and no process leaks
    (checked by the autouse fixture)."""
    rng = np.random.default_rng(7)
    n = 6
    async with aioenv.Pool(
        envs(executor, n, short=0.05),
        num_workers=2,
        executor=executor,
        step_timeout=0.4,
        on_timeout=on_timeout,
        max_concurrency=4,
    ) as pool:
        await pool.reset()
        pending: dict[int, asyncio.Future[Any]] = {}
        replies = {"ok": 0, "timeout": 0, "truncated": 0, "crashed": 0, "reset": 0}
        sent = 0
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + 6.0
        while loop.time() < stop_at or pending:
            if loop.time() < stop_at:
                for env_id in range(n):
                    if env_id not in pending:
                        action = int(rng.choice([INSTANT, SHORT, HANG_ACTION], p=[0.5, 0.45, 0.05]))
                        pending[env_id] = pool.step_env(env_id, action)
                        sent += 1
            done, _ = await asyncio.wait(pending.values(), timeout=HANG, return_when=asyncio.FIRST_COMPLETED)
            assert done, "no reply within the hang guard"
            for env_id, fut in list(pending.items()):
                if not fut.done():
                    continue
                del pending[env_id]
                try:
                    result = fut.result()
                except StepTimeout:
                    replies["timeout"] += 1
                except (UsageError, aioenv.WorkerCrashed):  # a re-made env (or a restart) wants a reset
                    replies["crashed"] += 1
                else:
                    key = "truncated" if result.truncated else "ok"
                    replies[key] += 1
                    continue
                await pool.reset_env(env_id)
                replies["reset"] += 1
        assert sum(v for k, v in replies.items() if k != "reset") == sent  # exactly one reply per request
        assert replies["ok"] > 0
        assert replies["timeout" if on_timeout == "error" else "truncated"] > 0
        sched = pool._runner.sched
        async with asyncio.timeout(HANG):  # a CANCEL or a re-make may still be finishing
            while sched.requests:
                await asyncio.sleep(0.02)
        assert not sched.busy.any()
        assert not sched.held
        assert sched.running == 0


async def test_step_env_futures_keep_their_info_when_replies_share_a_message() -> None:
    """Rows of several one-env requests that finish in the same loop turn travel in one message;
    each future still gets its env's own info dict."""
    async with aioenv.Pool(TextEchoEnv, 4, executor="async", num_workers=1) as pool:
        await pool.reset()
        futures = [pool.step_env(i, f"a{i}") for i in range(4)]
        results = await asyncio.gather(*futures)
        assert [r.info for r in results] == [{"echo": f"a{i}"} for i in range(4)]
        assert [r.obs for r in results] == [f"q:{i}a" for i in range(4)]

"""Envs on threads or coroutines of the caller's own process: ``executor="thread"`` or ``"async"`` with
``num_workers=0``.

Trajectories against SyncVectorEnv are in test_equivalence.py (``thread_here``, ``async_here``); here: that no
process is started, that each env keeps a thread of its own (made, stepped and closed there), that a slow env
does not hold back a fast one, that errors stay per env, that the caller's arrays are its own again once
``send`` returned, what is refused and why, and the blocking facade and ``auto`` on top.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.errors import EnvError
from tests.support.procs import HANG, worker_processes

ASYNC_SLEEP = "aioenv.envs.latency:AsyncSleepEnv"
WIDE = 20_000  # float32 actions of 80 KB: over the wire's blob limit, so they travel as frames of their own


async def guard(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, HANG)


class Threaded(gym.Env[np.ndarray, int]):
    """Records the thread of each of its calls in ``calls`` (a class list of ``(name, thread id)``); raises on
    action 2; sleeps 1 ms a step (an env waiting on I/O)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(3)
    calls: ClassVar[list[tuple[str, int, int]]] = []

    def __init__(self) -> None:
        self.me = id(self)
        self._log("make")

    def _log(self, name: str) -> None:
        Threaded.calls.append((name, self.me, threading.get_ident()))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self._log("reset")
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._log("step")
        time.sleep(0.001)
        if action == 2:
            raise ValueError("this env refuses action 2")
        return np.full(2, float(action), np.float32), 1.0, False, False, {}

    def close(self) -> None:
        self._log("close")


class Wide(gym.Env[np.ndarray, np.ndarray]):
    """Its reward is the sum of the action it got, read after a 50 ms wait."""

    observation_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)
    action_space = gym.spaces.Box(-1, 1, (WIDE,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(0.05)
        return np.zeros(1, np.float32), float(action.sum()), False, False, {}


class Napper(aioenv.AsyncEnv[np.ndarray, int]):
    """A coroutine env whose step awaits ``action`` tenths of a second."""

    observation_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(50)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(1, np.float32), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        await asyncio.sleep(int(action) / 10)
        return np.zeros(1, np.float32), float(action), False, False, {}


def _pool_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("aioenv-env-")}


async def test_each_env_is_made_stepped_and_closed_on_a_thread_of_its_own_and_no_process_starts() -> None:
    Threaded.calls.clear()
    before = {pid for pid, _, _ in worker_processes()}  # a leftover may change state or be reaped meanwhile
    pool = await aioenv.make(Threaded, 3, executor="thread", num_workers=0)
    try:
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == ("thread", 0, 3)
        assert pool.describe_placement() == "3 envs in this process, each on a thread of its own"
        assert {pid for pid, _, _ in worker_processes()} - before == set()  # no process started
        assert len(_pool_threads()) == 3
        await guard(pool.reset(seed=0))
        for t in range(4):
            obs, *_ = await guard(pool.step(np.array([t % 2, 1, 0])))
            np.testing.assert_array_equal(obs[:, 0], [t % 2, 1, 0])
    finally:
        await guard(pool.aclose())
    threads_of = {env: {tid for name, e, tid in Threaded.calls if e == env} for _, env, _ in Threaded.calls}
    assert len(threads_of) == 3
    assert all(len(tids) == 1 for tids in threads_of.values())  # one thread per env, for every call
    assert len({next(iter(tids)) for tids in threads_of.values()} | {threading.get_ident()}) == 4  # none the loop's
    assert sorted(name for name, _, _ in Threaded.calls).count("close") == 3
    assert _pool_threads() == set()


async def test_an_env_error_here_fails_its_own_row_only() -> None:
    async with aioenv.Pool(Threaded, 3, executor="thread", num_workers=0) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(EnvError) as caught:
            await guard(pool.step(np.array([1, 2, 0])))
        err = caught.value
        assert (err.env_id, sorted(err.errors), err.remote_type) == (1, [1], "ValueError")
        assert "this env refuses action 2" in err.remote_traceback
        obs, rew, *_, info = err.partial  # the other rows
        np.testing.assert_array_equal(obs[:, 0], [1, 0])
        np.testing.assert_array_equal(rew, [1.0, 1.0])
        np.testing.assert_array_equal(info["env_id"], [0, 2])
        obs, rew, *_ = await guard(pool.step(np.array([0, 0]), env_ids=[0, 2]))  # the others go on
        np.testing.assert_array_equal(rew, [1.0, 1.0])
        await guard(pool.reset(env_ids=[1]))
        obs, rew, *_ = await guard(pool.step(np.array([1, 1, 1])))
        np.testing.assert_array_equal(obs[:, 0], [1, 1, 1])


async def test_a_slow_coroutine_env_does_not_hold_back_a_fast_one() -> None:
    async with aioenv.Pool(Napper, 2, executor="async", num_workers=0) as pool:
        assert pool.describe_placement() == "2 envs in this process, as coroutines on its loop"
        await guard(pool.reset(seed=0))
        slow, fast = pool.step_env(0, 30), pool.step_env(1, 0)
        done, _ = await guard(asyncio.wait([slow, fast], return_when=asyncio.FIRST_COMPLETED))
        assert done == {fast}
        assert (await guard(slow)).reward == 30.0
        pool.send(np.array([20, 1]))
        *_, info = await guard(pool.recv(min_results=1))
        assert info["env_id"].tolist() == [1]


async def test_the_caller_may_change_its_action_array_once_send_returned() -> None:
    async with aioenv.Pool(Wide, 2, executor="thread", num_workers=0) as pool:
        await guard(pool.reset(seed=0))
        actions = np.ones((2, WIDE), np.float32)
        pool.send(actions)
        actions[:] = 0  # while the envs wait: what they read was copied when it was sent
        _, rew, *_ = await guard(pool.recv())
        assert rew.tolist() == [WIDE, WIDE]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"executor": "thread", "num_workers": 0, "step_timeout": 1.0},
            "step_timeout is for envs in worker processes: num_workers=0 runs them in this process",
        ),
        (
            {"executor": "async", "num_workers": 0, "max_worker_rss": 1 << 30},
            "leave num_workers at None or give a count of worker processes",
        ),
        ({"num_workers": 0, "endpoint": "tcp://127.0.0.1:5555"}, "num_workers=0 runs envs in this process"),
        ({"num_workers": -1}, "num_workers must be a positive int, 0 (every env in this process) or None, got -1"),
        ({"num_workers": 1.5}, "got 1.5"),
        ({"executor": "in_process", "num_workers": 2}, "num_workers is for envs in worker processes"),
    ],
    ids=["deadline", "rss", "remote", "negative", "float", "in_process-with-workers"],
)
def test_what_envs_in_this_process_cannot_do_is_refused_with_the_reason(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        aioenv.Pool(Threaded, 2, **options)


async def test_the_inline_executor_with_no_worker_process_is_in_process() -> None:
    async with aioenv.Pool("CartPole-v1", 2, executor="inline", num_workers=0) as pool:
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == ("in_process", 0, 2)


async def test_auto_with_no_worker_process_runs_every_env_here_on_the_executor_it_picks() -> None:
    async with aioenv.Pool(ASYNC_SLEEP, 4, num_workers=0, env_kwargs={"mean": 0.002}) as pool:
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == ("async", 0, 4)
        assert pool.placement_reason.startswith("num_workers=0 keeps every env here")
        await guard(pool.reset(seed=0))
        _, rew, *_ = await guard(pool.step(np.zeros(4, np.int64)))
        assert rew.shape == (4,)
    async with aioenv.Pool("CartPole-v1", 4, num_workers=0) as pool:
        assert (pool.executor, pool.num_workers, pool.envs_in_process) == ("in_process", 0, 4)


def test_the_blocking_facade_runs_envs_on_threads_of_this_process() -> None:
    with aioenv.SyncPool("CartPole-v1", 3, executor="thread", num_workers=0, seed=5) as pool:
        assert not pool.runs_in_caller  # the env threads need the loop between calls
        expected = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
        obs, _ = pool.reset()
        np.testing.assert_array_equal(obs, expected.reset(seed=5)[0])
        for t in range(20):
            action = np.array([t % 2, 1, 0])
            np.testing.assert_array_equal(pool.step(action)[0], expected.step(action)[0])
        expected.close()
    assert _pool_threads() == set()


@pytest.mark.parametrize("executor", ["thread", "async"])
async def test_a_stopped_worker_here_is_made_again_and_its_envs_say_so(executor: str) -> None:
    env = "CartPole-v1" if executor == "thread" else ASYNC_SLEEP
    async with aioenv.Pool(env, 2, executor=executor, num_workers=0, seed=0) as pool:
        await guard(pool.reset())
        coord = pool._runner
        assert coord is not None
        old = coord.slots[0].proc
        assert old is not None
        old.kill()  # its envs are closed, and the coordinator makes them again in this process
        async with asyncio.timeout(HANG):
            while coord.slots[0].proc is old or not coord.slots[0].ready:
                await asyncio.sleep(0.01)
        assert old.returncode == -9
        with pytest.raises(aioenv.EnvRemade) as caught:
            await guard(pool.step(np.array([0, 1])))
        assert sorted(caught.value.errors) == [0, 1]
        await guard(pool.reset(seed=1))
        obs, *_ = await guard(pool.step(np.array([0, 1])))
        assert obs.shape[0] == 2
    assert _pool_threads() == set()


class SlowToLeave(gym.Env[np.ndarray, int]):
    """An env whose thread lingers after its close: the thread's last function takes 0.3 s to return (a profile
    hook of that thread alone, set by ``close``), as a thread the interpreter is slow to schedule would."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def close(self) -> None:
        def linger(frame: Any, event: str, arg: object) -> None:
            if event == "return" and frame.f_code.co_name == "_serve":  # the thread's loop returns
                time.sleep(0.3)

        sys.setprofile(linger)  # this thread's only


async def test_a_closed_pool_of_thread_envs_returns_once_their_threads_have_ended() -> None:
    async with aioenv.Pool(SlowToLeave, 2, executor="thread", num_workers=0) as pool:
        await guard(pool.reset(seed=0))
    assert _pool_threads() == set()


async def test_calls_and_attributes_reach_the_envs_on_their_threads() -> None:
    Threaded.calls.clear()
    async with aioenv.Pool(Threaded, 2, executor="thread", num_workers=0) as pool:
        await guard(pool.set_attr("marker", [7, 8]))
        assert await guard(pool.get_attr("marker")) == [7, 8]
        await guard(pool.call("reset"))
    resets = [(env, tid) for name, env, tid in Threaded.calls if name == "reset"]
    makes = {env: tid for name, env, tid in Threaded.calls if name == "make"}
    assert len(resets) == 2
    assert all(makes[env] == tid for env, tid in resets)  # called on the thread that made the env


async def test_closing_with_steps_in_flight_answers_them_and_leaves_no_thread() -> None:
    pool = await aioenv.make(Napper, 3, executor="async", num_workers=0)
    await guard(pool.reset(seed=0))
    pending = [pool.step_env(i, 40) for i in range(3)]  # 4 s each: still running when the pool closes
    await asyncio.sleep(0.05)
    await guard(pool.aclose())
    outcomes = await guard(asyncio.gather(*pending, return_exceptions=True))
    assert all(isinstance(o, aioenv.AioEnvError) for o in outcomes), outcomes

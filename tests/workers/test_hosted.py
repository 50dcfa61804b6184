"""workers.hosted: the episode bookkeeping of one env, sync and async, through its public calls."""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from aioenv import AsyncEnv
from aioenv.errors import EpisodeEnded, UsageError
from workers.hosted import AsyncHostedEnv, EpisodeState, HostedEnv


class _Closing(AsyncEnv[np.ndarray, int]):
    """Ends its episode every second step; records a coroutine close."""

    observation_space = gym.spaces.Box(0, 10, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0
        self.closed = False

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.t = 0
        return np.zeros(1, np.float32), {"r": 1}

    async def step(self, action: int) -> Any:
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= 2, False, {}

    async def close(self) -> None:
        await asyncio.sleep(0)
        self.closed = True


def test_async_and_sync_hosts_are_siblings_not_substitutes() -> None:
    """Code that takes a HostedEnv calls sync reset/step/close: an async host must not pass for one."""
    assert not issubclass(AsyncHostedEnv, HostedEnv)
    assert issubclass(AsyncHostedEnv, EpisodeState)
    assert issubclass(HostedEnv, EpisodeState)
    for name in ("reset", "step", "close"):
        assert not hasattr(AsyncHostedEnv, name), f"AsyncHostedEnv.{name} would be a sync call on an async env"


async def test_async_host_follows_next_step_autoreset_and_closes_its_env() -> None:
    env = _Closing()
    hosted = AsyncHostedEnv(3, env, "next_step")
    with pytest.raises(UsageError, match="env 3 cannot be stepped: it has not been reset"):
        await hosted.astep(0)
    assert (await hosted.areset(0, None))[1] == {"r": 1}
    await hosted.astep(0)
    _, _, terminated, _, _ = await hosted.astep(0)
    assert terminated
    obs, reward, terminated, truncated, info = await hosted.astep(1)  # the autoreset step
    assert obs.tolist() == [0.0]
    assert reward == 0.0
    assert not terminated
    assert not truncated
    assert info == {"r": 1}
    await hosted.aclose()
    assert env.closed


def test_sync_host_disabled_mode_refuses_a_step_after_the_end() -> None:
    hosted = HostedEnv(1, gym.make("CartPole-v1"), "disabled")
    hosted.reset(0, None)
    ended = False
    while not ended:
        _, _, terminated, truncated, _ = hosted.step(1)
        ended = terminated or truncated
    with pytest.raises(EpisodeEnded, match="env 1's episode ended"):
        hosted.step(0)
    hosted.reset(1, None)
    hosted.step(0)  # a reset clears it
    hosted.close()


class _Scripted(gym.Env[np.ndarray, int]):
    """Steps return the rewards of ``script`` in turn (an exception is raised); the episode ends at its end."""

    observation_space = gym.spaces.Box(0, 10, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.t = 0
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t, self.resets = 0, self.resets + 1
        return np.zeros(1, np.float32), {"reset": self.resets}

    def step(self, action: int) -> Any:
        reward = self.script[self.t % len(self.script)]
        self.t += 1
        if isinstance(reward, BaseException):
            raise reward
        return np.full(1, self.t, np.float32), reward, self.t % len(self.script) == 0, False, {}


def test_sync_host_checks_unusual_rewards_and_ends_episodes_after_an_ordinary_step() -> None:
    """An ordinary step is returned as the env gave it; a one-element array reward becomes its item, the end
    of an episode makes the next step a reset (next_step), and a step that raises breaks the env."""
    env = _Scripted([1.0, np.array([2.5]), 3])
    hosted = HostedEnv(0, env, "next_step")
    hosted.reset(0, None)
    assert hosted.mid_episode()
    assert hosted.step(0)[1:4] == (1.0, False, False)
    reward = hosted.step(0)[1]
    assert reward == 2.5
    assert type(reward) is float
    assert hosted.step(0)[1:3] == (3, True)
    assert not hosted.mid_episode()
    obs, reward, terminated, truncated, info = hosted.step(0)  # the autoreset step
    assert (obs.tolist(), reward, terminated, truncated, info) == ([0.0], 0.0, False, False, {"reset": 2})
    assert hosted.mid_episode()
    broken = HostedEnv(1, _Scripted([1.0, ValueError("boom")]), "next_step")
    broken.reset(0, None)
    broken.step(0)
    with pytest.raises(ValueError, match="boom"):
        broken.step(0)
    assert not broken.mid_episode()
    with pytest.raises(UsageError, match="env 1 cannot be stepped: its last step raised ValueError: boom"):
        broken.step(0)


def test_same_step_host_cut_short_by_a_deadline_steps_on_and_resets_at_its_next_end() -> None:
    """``mark_ended`` in same_step mode: the next steps are ordinary ones, and the next end resets at once."""
    hosted = HostedEnv(2, _Scripted([1.0, 1.0]), "same_step")
    hosted.reset(0, None)
    hosted.mark_ended()
    assert not hosted.mid_episode()
    assert hosted.step(0)[1:3] == (1.0, False)
    obs, _, terminated, _, info = hosted.step(0)
    assert terminated
    assert obs.tolist() == [0.0]  # reset at once
    assert info["final_obs"].tolist() == [2.0]
    assert info["reset"] == 2


class _AsyncScripted(AsyncEnv[np.ndarray, int]):
    """The async twin of ``_Scripted``: rewards from ``script`` in turn, the episode ends at its end."""

    observation_space = gym.spaces.Box(0, 10, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, script: list[Any]) -> None:
        self.sync = _Scripted(script)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.sync.reset(seed=seed)

    async def step(self, action: int) -> Any:
        await asyncio.sleep(0)
        return self.sync.step(action)


async def test_async_host_checks_unusual_rewards_and_resets_at_once_in_same_step_mode() -> None:
    hosted = AsyncHostedEnv(4, _AsyncScripted([np.array([2.5]), 1.0]), "same_step")
    await hosted.areset(0, None)
    reward = (await hosted.astep(0))[1]
    assert (reward, type(reward)) == (2.5, float)
    obs, _, terminated, _, info = await hosted.astep(0)
    assert terminated
    assert obs.tolist() == [0.0]
    assert (info["final_obs"].tolist(), info["reset"]) == ([2.0], 2)
    broken = AsyncHostedEnv(5, _AsyncScripted([1.0, None]), "next_step")
    await broken.areset(0, None)
    await broken.astep(0)
    with pytest.raises(TypeError, match="step returned reward None"):
        await broken.astep(0)
    with pytest.raises(UsageError, match="env 5 cannot be stepped: its last step raised TypeError"):
        await broken.astep(0)

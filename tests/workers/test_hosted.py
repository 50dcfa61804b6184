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

"""Envs whose steps only wait: a model of LLM, web and tool-calling environments.

Each step waits a lognormal time with the given ``mean`` (seconds) and ``sigma`` (of the
underlying normal), capped at ``cap``; ideal pool throughput is ``num_envs / mean`` steps/s.

- :class:`SleepEnv`: a ``gymnasium.Env`` that blocks in ``time.sleep`` (``executor="thread"``).
- :class:`AsyncSleepEnv`: an :class:`aioenv.AsyncEnv` that awaits ``asyncio.sleep`` (``executor="async"``).

Observation: ``Box(-inf, inf, (obs_dim,), float32)`` holding the step count in every entry.
Action: ``Discrete(2)``. Reward 1.0 per step; the episode truncates after ``episode_steps``.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv.env import AsyncEnv

__all__ = ["AsyncSleepEnv", "SleepEnv", "lognormal_params"]


def lognormal_params(mean: float, sigma: float) -> float:
    """The ``mu`` of a lognormal with the given ``mean`` and ``sigma``: ``log(mean) - sigma**2 / 2``."""
    if mean <= 0:
        raise ValueError(f"mean must be positive seconds, got {mean!r}")
    return math.log(mean) - sigma * sigma / 2


class _Latency:
    """Lognormal waits, drawn 256 at a time (one numpy call, not one per step)."""

    def __init__(self, mean: float, sigma: float, cap: float, seed: int | None) -> None:
        self.mu = lognormal_params(mean, sigma)
        self.sigma = sigma
        self.cap = cap
        self.rng = np.random.default_rng(seed)
        self._ahead: list[float] = []

    def draw(self) -> float:
        if not self._ahead:
            self._ahead = np.minimum(self.rng.lognormal(self.mu, self.sigma, 256), self.cap).tolist()
        return self._ahead.pop()


class _Counter:
    def __init__(self, obs_dim: int, episode_steps: int) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode_steps = episode_steps
        self.t = 0
        self.obs_dim = obs_dim

    def obs(self) -> np.ndarray:
        return np.full(self.obs_dim, self.t, dtype=np.float32)

    def advance(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.obs(), 1.0, False, self.t >= self.episode_steps, {}


class _Sleeper:
    """What both sleep envs are made of: a lognormal latency and a step counter (see the module)."""

    observation_space: gym.Space[np.ndarray]
    action_space: gym.Space[np.int64]

    def __init__(
        self,
        mean: float = 0.02,
        sigma: float = 0.5,
        cap: float = 0.2,
        *,
        obs_dim: int = 4,
        episode_steps: int = 1_000,
        latency_seed: int | None = None,
    ) -> None:
        self._latency = _Latency(mean, sigma, cap, latency_seed)
        self._counter = _Counter(obs_dim, episode_steps)
        self.observation_space = self._counter.observation_space
        self.action_space = self._counter.action_space


class SleepEnv(_Sleeper, gym.Env[np.ndarray, np.int64]):
    """A gymnasium env whose ``step`` blocks in ``time.sleep`` for a lognormal time (see the module)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode (no wait)."""
        super().reset(seed=seed)
        self._counter.t = 0
        return self._counter.obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Sleep a lognormal time, then count one step."""
        time.sleep(self._latency.draw())
        return self._counter.advance()


class AsyncSleepEnv(_Sleeper, AsyncEnv[np.ndarray, np.int64]):
    """An async env whose ``step`` awaits ``asyncio.sleep`` for a lognormal time (see the module)."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode (no wait)."""
        self._counter.t = 0
        return self._counter.obs(), {}

    async def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Await a lognormal time, then count one step."""
        await asyncio.sleep(self._latency.draw())
        return self._counter.advance()

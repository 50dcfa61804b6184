"""The latency benchmark's sleep envs, each step's observation saying when it began and ended.

``latency_trace.py`` asks where a latency-bound ``recv()`` loop's time goes between an env's step and its next one.
The envs here are ``aioenv.envs.latency``'s, with one change: a step's observation is ``[start, end]``, the
``time.perf_counter()`` (``CLOCK_MONOTONIC``: one clock for every process of the machine) at which the step began
and ended in its worker, as float64 ``(2,)``; a reset's is ``[0, 0]``. The rows a ``recv()`` returns then say, with no
log of the workers' and nothing else to read, how long each waited to be handed over and how long the actions sent
took to reach their envs.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv.envs.latency import AsyncSleepEnv, SleepEnv

__all__ = ["TimedAsyncSleepEnv", "TimedSleepEnv"]

#: Both envs' observation space: a step's ``[start, end]`` seconds of ``time.perf_counter()``.
TIMES = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)


class TimedSleepEnv(SleepEnv):
    """:class:`aioenv.envs.latency.SleepEnv` (``executor="thread"``) whose observation is its step's
    ``[start, end]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observation_space = TIMES

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: ``[0, 0]`` (no step)."""
        super().reset(seed=seed, options=options)
        return np.zeros(2), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Sleep as :class:`SleepEnv` does; the observation is when that began and ended."""
        start = time.perf_counter()
        _, reward, terminated, truncated, info = super().step(action)
        return np.array([start, time.perf_counter()]), reward, terminated, truncated, info


class TimedAsyncSleepEnv(AsyncSleepEnv):
    """:class:`aioenv.envs.latency.AsyncSleepEnv` (``executor="async"``) whose observation is its step's
    ``[start, end]``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observation_space = TIMES

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: ``[0, 0]`` (no step)."""
        await super().reset(seed=seed, options=options)
        return np.zeros(2), {}

    async def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Await as :class:`AsyncSleepEnv` does; the observation is when that began and ended."""
        start = time.perf_counter()
        _, reward, terminated, truncated, info = await super().step(action)
        return np.array([start, time.perf_counter()]), reward, terminated, truncated, info

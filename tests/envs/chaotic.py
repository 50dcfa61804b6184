"""Envs whose action picks what a step does, for the chaos soak (tests/chaos).

Action ``Discrete(4)``: 0 returns at once, 1 takes ``short`` seconds, 2 raises ``RuntimeError``, 3 hangs
for ``hang`` seconds (past any deadline a test sets). Observation ``[t]`` (float64, the step count). The
same in two flavours: :class:`ChaosEnv` (a gymnasium env: ``executor="inline"`` or ``"thread"``) and
:class:`AsyncChaosEnv` (an :class:`aioenv.AsyncEnv`: ``executor="async"``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv import AsyncEnv

__all__ = ["INSTANT", "RAISE", "SHORT", "STALL", "AsyncChaosEnv", "ChaosEnv"]

INSTANT, SHORT, RAISE, STALL = 0, 1, 2, 3


class _Chaos:
    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, short: float = 0.01, hang: float = 60.0) -> None:
        self.short, self.hang, self.t = short, hang, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t], np.float64)

    def _start(self) -> tuple[np.ndarray, dict[str, Any]]:
        self.t = 0
        return self._obs(), {}

    def _delay(self, action: Any) -> float:
        self.t += 1
        if int(action) == RAISE:
            raise RuntimeError(f"step {self.t} raised on purpose")
        return {INSTANT: 0.0, SHORT: self.short, STALL: self.hang}[int(action)]

    def _out(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self._obs(), 1.0, False, self.t >= 200, {}


class ChaosEnv(_Chaos, gym.Env[np.ndarray, np.int64]):
    """See the module docstring."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._start()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        delay = self._delay(action)
        if delay:
            time.sleep(delay)
        return self._out()


class AsyncChaosEnv(_Chaos, AsyncEnv[np.ndarray, np.int64]):
    """See the module docstring."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        return self._start()

    async def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        delay = self._delay(action)
        if delay:
            await asyncio.sleep(delay)
        return self._out()

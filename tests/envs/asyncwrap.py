"""Any gymnasium env as an ``aioenv.AsyncEnv`` (for running the same trajectories under ``executor="async"``).

Each call yields to the event loop once before running the wrapped env, so rows of one request
really interleave in the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from aioenv import AsyncEnv


class AsyncWrapped(AsyncEnv[Any, Any]):
    """``env``'s reset/step/close as coroutines; spaces, metadata and attributes forwarded."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = dict(env.metadata)  # type: ignore[misc]

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        await asyncio.sleep(0)
        return self.env.reset(seed=seed, options=options)

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.step(action)  # type: ignore[return-value]

    async def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def wrapped(factory: Callable[[], gym.Env[Any, Any]]) -> AsyncWrapped:
    """``AsyncWrapped(factory())``."""
    return AsyncWrapped(factory())

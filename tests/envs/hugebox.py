"""An env whose observation space is a ``Box(0, 255, (40, 1024, 1024), uint8)``: 40 MiB per observation, uniform
bounds (:func:`make_huge`), or with bounds that differ element by element (:func:`make_ramped`: low runs 0, 1, ..., 6,
0, ...; high is low plus 100, 101 or 102). Its observations are its low bound but for a counter in the first byte."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SHAPE = (40, 1024, 1024)


class HugeBoxEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, observation_space: gym.spaces.Box | None = None) -> None:
        if observation_space is not None:
            self.observation_space = observation_space
        self.obs = self.observation_space.low.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.obs[0, 0, 0] = self.observation_space.low[0, 0, 0]
        return self.obs, {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.obs[0, 0, 0] += 1
        return self.obs, float(action), False, False, {}


def make_huge() -> HugeBoxEnv:
    """A :class:`HugeBoxEnv`."""
    return HugeBoxEnv()


def make_ramped() -> HugeBoxEnv:
    """A :class:`HugeBoxEnv` whose bounds differ element by element."""
    ramp = np.arange(np.prod(SHAPE), dtype=np.int64).reshape(SHAPE)
    low = (ramp % 7).astype(np.uint8)
    return HugeBoxEnv(gym.spaces.Box(low, low + (100 + ramp % 3).astype(np.uint8), dtype=np.uint8))

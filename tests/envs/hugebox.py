"""An env whose observation space is a ``Box(0, 255, (40, 1024, 1024), uint8)``: 40 MiB per observation, uniform
bounds. Its observations are all zeros but for a counter in the first byte, so each costs one allocation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SHAPE = (40, 1024, 1024)


class HugeBoxEnv(gym.Env[np.ndarray, int]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.obs = np.zeros(SHAPE, np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.obs[0, 0, 0] = 0
        return self.obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.obs[0, 0, 0] += 1
        return self.obs, float(action), False, False, {}


def make_huge() -> HugeBoxEnv:
    """A :class:`HugeBoxEnv`."""
    return HugeBoxEnv()

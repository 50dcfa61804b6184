"""An env that leaks: every step keeps ``leak_mib`` MiB more (written, so it is resident)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["LeakyEnv"]


class LeakyEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, leak_mib: int = 10) -> None:
        self.leak_mib = leak_mib
        self.kept: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.kept.append(np.ones(self.leak_mib << 17))  # 8-byte floats: leak_mib MiB, every page written
        return np.array([float(len(self.kept))]), 0.0, False, False, {}

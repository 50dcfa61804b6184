"""An env that starts a process of its own (as a browser or simulator env does): ``sleep 600``, whose pid is
in every reset's info as ``child_pid``. Its ``close`` does not stop it: only its worker's process group can."""

from __future__ import annotations

import subprocess
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["SpawningEnv"]


class SpawningEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {"child_pid": self.child.pid}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, False, False, {"child_pid": self.child.pid}

"""An env that tells which modules its worker process has imported (``imported``): for the test that a pool's own
inline worker starts without asyncio or ZeroMQ (``tests/workers/test_worker_imports.py``). It imports gymnasium and
numpy only, as gymnasium's own envs do."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ModulesEnv(gym.Env[np.ndarray, np.int64]):
    """Obs ``[0.0]``; every step ends nothing. ``imported(names)``: those of ``names`` this process has imported."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def imported(self, names: list[str]) -> list[str]:
        """Those of ``names`` in this process's ``sys.modules``."""
        return [name for name in names if name in sys.modules]

"""An env that is cheap until told to turn bad: what ``executor="auto"`` times is not what it later does.

:class:`TurningEnv` steps in microseconds (so the probe finds a whole batch cheaper than a message to a worker
process) until ``fault`` is set (``pool.set_attr("fault", ...)``), after the pool has started:

- ``"exit"``: its next step calls ``os._exit(7)``;
- ``"segfault"``: its next step reads address 0 (``ctypes.string_at(0)``: SIGSEGV);
- ``"system_exit"``: its next step raises ``SystemExit(3)``;
- ``"slow"``: each step sleeps ``seconds`` (an env whose steps became slow: a service that slowed down);
- ``"leak"``: each step keeps 100 MiB more (written, so it is resident);
- ``"hang_close"``: ``close()`` sleeps for an hour.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TurningEnv"]


class TurningEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, np.inf, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.fault = ""
        self.seconds = 0.0
        self.t = 0
        self.kept: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.fault == "exit":
            os._exit(7)
        if self.fault == "segfault":
            ctypes.string_at(0)
        if self.fault == "system_exit":
            raise SystemExit(3)
        if self.fault == "slow":
            time.sleep(self.seconds)
        if self.fault == "leak":
            self.kept.append(np.ones(100 << 17))  # 8-byte floats: 100 MiB, every page written
        self.t += 1
        return np.array([float(self.t)]), 1.0, False, False, {}

    def close(self) -> None:
        if self.fault == "hang_close":
            time.sleep(3600)

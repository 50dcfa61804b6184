"""An env whose infos are numeric columns most steps (as MuJoCo's are), and something else on some: for the slab's
info area (:mod:`aioenv.transport.slab_infos`).

Action (``Discrete(8)``) chooses the step's info: 0 every key, each of exactly one type (a Python float and int, a
bool, an np.float32, an np.float64 and a float32 array of 3); 1 two of them (as its reset's info); 2 none; 3 every
key and a string; 4 ``"n"`` as a float (its column holds ints); 5 ``"flag"`` as an ``np.bool_`` (gymnasium makes an
object column of those); 6 every key and a nested dict ``"sub"``; 7 every key and ``"sub"`` as a float (beside
another env's action 6: infos no batch holds). An episode ends (terminated) every 5th step, so that ``next_step``
resets with their own, smaller infos come among the steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ColumnsEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring; obs ``[ident, t]`` float32 (ident: the seed of its first reset)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(8)
        self.ident = 0
        self.t = 0
        self.episodes = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.ident, self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.ident = seed
        self.t = 0
        self.episodes += 1
        return self._obs(), {"x": self.ident + 0.5, "n": self.episodes}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        self.t += 1
        s, t = self.ident, self.t
        full: dict[str, Any] = {
            "x": s + t / 8,
            "n": s * 1000 + t,
            "flag": t % 3 == 0,
            "x32": np.float32(t / 4),
            "z": np.float64(-s),
            "vec": np.arange(3, dtype=np.float32) * t + s,
        }
        info: dict[str, Any]
        if a == 1:
            info = {"x": full["x"], "n": full["n"]}
        elif a == 2:
            info = {}
        elif a == 3:
            info = {**full, "name": f"env{s}"}
        elif a == 4:
            info = {**full, "n": t + 0.5}
        elif a == 5:
            info = {**full, "flag": np.bool_(t % 2)}
        elif a == 6:
            info = {**full, "sub": {"a": s, "b": float(t)}}
        elif a == 7:
            info = {**full, "sub": float(t)}
        else:
            info = full
        return self._obs(), float(a), t % 5 == 0, False, info


def make_columns() -> ColumnsEnv:
    """Factory for ``"tests.envs.columns:make_columns"``."""
    return ColumnsEnv()

"""A small deterministic-given-seed env with a Dict observation space, for equivalence tests.

- observation: ``Dict({"pos": Box(-10, 10, (3,), float32), "count": Discrete(10), "flag": MultiBinary(2)})``
- action: ``Discrete(3)`` (moves ``pos`` by -0.1, 0 or +0.1 along every axis)
- episode length: drawn from ``np_random`` at each reset (3..11 steps), and whether the
  episode *terminates* or *truncates* at that step is drawn too, so episodes of
  different envs end at different steps, some by termination, some by truncation.
- infos are never empty and mix python ints/floats/bools/str, numpy scalars,
  ndarrays and a nested dict; keys differ between reset, ordinary steps and the
  final step (so the ``_key`` masks of batched infos matter).

Everything random comes from ``self.np_random``, so ``reset(seed=s)`` fixes the
whole future of the env (including later unseeded resets).

Options (all off by default) for focused tests:

- ``zero_d_info=True``: step infos also carry ``"level0d"``, a 0-d ndarray (``np.array(x)``).
- ``int_info``: ``True``/``False`` adds ``"mixed"`` to step infos as a python int / a python
  float, so envs made with different settings disagree on the type of one info key.
- ``step_delay``: seconds each ``step`` sleeps (to make some envs reply later than others).

Use it as ``"tests.envs.dictenv:make_dict_env"`` or call :func:`make_dict_env`.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["DictEnv", "make_dict_env"]


class DictEnv(gym.Env[dict[str, Any], np.int64]):
    """See the module docstring."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium convention

    def __init__(
        self,
        min_len: int = 3,
        max_len: int = 12,
        *,
        zero_d_info: bool = False,
        int_info: bool | None = None,
        step_delay: float = 0.0,
    ) -> None:
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-10.0, 10.0, (3,), np.float32),
                "count": spaces.Discrete(10),
                "flag": spaces.MultiBinary(2),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.min_len = int(min_len)
        self.max_len = int(max_len)
        self.zero_d_info = bool(zero_d_info)
        self.int_info = int_info
        self.step_delay = float(step_delay)
        self._pos = np.zeros(3, dtype=np.float32)
        self._t = 0
        self._limit = 0
        self._terminates = False
        self._total = 0.0

    def _obs(self) -> dict[str, Any]:
        return {
            "pos": self._pos.copy(),
            "count": np.int64(self._t % 10),
            "flag": self.np_random.integers(0, 2, size=2).astype(np.int8),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict]:
        super().reset(seed=seed)
        rng = self.np_random
        self._pos = rng.uniform(-1.0, 1.0, size=3).astype(np.float32)
        self._t = 0
        self._limit = int(rng.integers(self.min_len, self.max_len))
        self._terminates = bool(rng.random() < 0.5)
        self._total = 0.0
        info = {
            "episode_len": self._limit,  # python int
            "start": self._pos.copy(),  # ndarray float32 (3,)
            "level": np.int32(rng.integers(0, 1000)),  # numpy scalar keeps its dtype
        }
        return self._obs(), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r} for {self.action_space}")
        self._t += 1
        delta = (int(action) - 1) * 0.1 + self.np_random.normal(0.0, 0.01)
        self._pos = np.clip(self._pos + np.float32(delta), -10.0, 10.0).astype(np.float32)
        reward = float(-np.abs(self._pos).sum() + self.np_random.random())
        self._total += reward
        ended = self._t >= self._limit
        terminated = ended and self._terminates
        truncated = ended and not self._terminates
        info: dict[str, Any] = {
            "t": self._t,  # python int
            "score": reward * 2.0,  # python float
            "vec": self.np_random.standard_normal(2).astype(np.float32),  # ndarray float32 (2,)
            "np_int": np.int16(self._t * 3),  # numpy scalar keeps its dtype
            "moved": bool(action != 1),  # python bool
            "stats": {"total": self._total, "hits": int(self._t % 3)},  # nested dict
        }
        if self.zero_d_info:
            info["level0d"] = np.array(self._total, dtype=np.float64)  # 0-d ndarray
        if self.int_info is not None:
            info["mixed"] = self._t if self.int_info else self._t + 0.5
        if self.step_delay:
            time.sleep(self.step_delay)
        if ended:
            info["outcome"] = "goal" if terminated else "timeout"  # str -> object array, only on last steps
        return self._obs(), reward, terminated, truncated, info


def make_dict_env(**kwargs: Any) -> DictEnv:
    """Factory for ``"tests.envs.dictenv:make_dict_env"``."""
    return DictEnv(**kwargs)

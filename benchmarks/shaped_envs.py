"""Stand-ins for Ant-v5 that differ from it in one thing at a time, for ``cost_shapes.py``.

Each is made by name in a pool's worker processes (``"shaped_envs:ant_shape"``), which find this module on the
``PYTHONPATH`` that ``cost_shapes.py`` sets for them. They take the same observation and action spaces as Ant-v5
(105 float64 observations, 8 float32 actions) and return a constant observation:

- :func:`ant_shape`: nothing else (no physics, no infos);
- :func:`ant_shape_infos`: Ant-v5's nine float infos every step;
- :func:`ant_shape_infos_work`: those, and each step busy on the CPU for ``work`` seconds (``COST_SHAPES_WORK``,
  default 200 µs) in a loop that touches next to no memory: the time a MuJoCo step takes, without what it does to
  the caches;
- :func:`ant_without_infos`: Ant-v5 itself, its infos dropped.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "INFO_KEYS",
    "INFO_TYPES",
    "ShapedAnt",
    "ant_shape",
    "ant_shape_infos",
    "ant_shape_infos_work",
    "ant_without_infos",
]

#: Ant-v5's info keys, in its order, and the numpy scalar type of each value (gymnasium 1.x: float64 but the
#: control cost's float32, so that the pool's info area holds them in two blocks of columns, as it holds Ant's).
INFO_TYPES: dict[str, type[np.floating[Any]]] = {
    "x_position": np.float64,
    "y_position": np.float64,
    "distance_from_origin": np.float64,
    "x_velocity": np.float64,
    "y_velocity": np.float64,
    "reward_forward": np.float64,
    "reward_ctrl": np.float32,
    "reward_contact": np.float64,
    "reward_survive": np.float64,
}
INFO_KEYS = tuple(INFO_TYPES)
#: An episode's length: Ant-v5's time limit.
_STEPS = 1000


class ShapedAnt(gym.Env[np.ndarray, np.ndarray]):
    """Ant-v5's spaces without its physics: observations ``(105,)`` float64, all zeros; actions ``(8,)`` float32 in
    ``[-1, 1]``; reward 1.0; truncated after 1,000 steps. ``infos``: each step returns Ant-v5's nine info keys, each
    value of the numpy scalar type Ant's has (:data:`INFO_TYPES`); ``work``: each step spins on the CPU for that
    many seconds first."""

    def __init__(self, infos: bool = False, work: float = 0.0) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (105,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
        self.infos = infos
        self.work = work
        self._t = 0
        self._obs = np.zeros(105, np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.work:
            end = time.perf_counter() + self.work
            while time.perf_counter() < end:
                pass
        self._t += 1
        info = {key: kind(i) for i, (key, kind) in enumerate(INFO_TYPES.items())} if self.infos else {}
        return self._obs.copy(), 1.0, False, self._t >= _STEPS, info


class _NoInfos(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """An env whose infos are dropped (``{}`` every step and reset)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, _ = self.env.reset(seed=seed, options=options)
        return obs, {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, {}


def ant_shape() -> ShapedAnt:
    """Ant-v5's spaces, no physics, no infos."""
    return ShapedAnt()


def ant_shape_infos() -> ShapedAnt:
    """Ant-v5's spaces and infos, no physics."""
    return ShapedAnt(infos=True)


def ant_shape_infos_work() -> ShapedAnt:
    """Ant-v5's spaces and infos, each step busy for ``COST_SHAPES_WORK`` seconds (default 0.0002)."""
    return ShapedAnt(infos=True, work=float(os.environ.get("COST_SHAPES_WORK", "0.0002")))


def ant_without_infos() -> gym.Env[np.ndarray, np.ndarray]:
    """Ant-v5, its infos dropped."""
    return _NoInfos(gym.make("Ant-v5"))

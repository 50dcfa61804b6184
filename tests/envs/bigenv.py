"""An env with large observations and actions, for the pipe's big-message and back-pressure paths.

Observation ``Box(0, 255, (96, 96, 3), uint8)`` (27 KiB), action ``Box(-1, 1, (128, 128), float32)``
(64 KiB). Each observation is drawn from the env's seeded generator and shifted by the action's sum,
so a trajectory depends on every byte of every action.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

OBS_SHAPE = (96, 96, 3)
ACT_SHAPE = (128, 128)


class BigEnv(gym.Env[np.ndarray, np.ndarray]):
    """See the module docstring."""

    observation_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
    action_space = gym.spaces.Box(-1.0, 1.0, ACT_SHAPE, np.float32)

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def _obs(self, shift: int) -> np.ndarray:
        base = self.rng.integers(0, 256, OBS_SHAPE, dtype=np.int64)
        return ((base + shift) % 256).astype(np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        return self._obs(0), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        shift = int(np.round(float(np.asarray(action, np.float64).sum()) * 1000))
        return self._obs(shift), float(action[0, 0]), False, False, {}


def make_big() -> BigEnv:
    """A :class:`BigEnv`."""
    return BigEnv()


#: The observation of :class:`FramesEnv`: four stacked 84x84 grey frames, as Atari agents see them.
FRAMES_SHAPE = (4, 84, 84)


class FramesEnv(gym.Env[np.ndarray, np.int64]):
    """Observations ``Box(0, 255, (4, 84, 84), uint8)`` (27.6 KiB; 8 envs answer 221 KiB a call), two actions;
    each observation is filled with the step count, so it costs nothing to make."""

    observation_space = gym.spaces.Box(0, 255, FRAMES_SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(FRAMES_SHAPE, np.uint8), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(FRAMES_SHAPE, self.t % 256, np.uint8), 1.0, False, False, {}


def make_frames() -> FramesEnv:
    """A :class:`FramesEnv`."""
    return FramesEnv()

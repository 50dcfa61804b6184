"""CartPole variants whose ``same_step`` episode ends say more than a final observation, or say it in another type.

A same_step pool's worker leaves an ended env's final observation in the slab only when that and an empty
``final_info`` is all the env's info says (see :mod:`aioenv.transport.slab`). Each variant here breaks one of the
conditions, so its ends must travel in the reply as before:

- :func:`noted`: the step that ends an episode returns ``{"length": steps}`` (a ``final_info``);
- :func:`reset_noted`: every reset returns ``{"episode": count}`` (the same_step reset's info);
- :func:`wide`: observations as float64 arrays, where the space says float32;
- :func:`mimic`: a step that does *not* end an episode returns ``{"final_obs": obs, "final_info": {}}`` of its own
  (the shape of an end's info, on a row that did not end).
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

#: Episodes are short, so that ends come often, by termination and by truncation.
LIMIT = 12


def plain() -> gym.Env[Any, Any]:
    """CartPole-v1 cut at :data:`LIMIT` steps."""
    return gym.make("CartPole-v1", max_episode_steps=LIMIT)


class _Noted(gym.Wrapper[Any, Any, Any, Any]):
    """The step that ends an episode says how long it was."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self._steps = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if terminated or truncated:
            info = {**info, "length": self._steps}
        return obs, reward, terminated, truncated, info


class _ResetNoted(gym.Wrapper[Any, Any, Any, Any]):
    """Every reset says how many came before."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self._resets = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._resets += 1
        return obs, {**info, "episode": self._resets}


class _Wide(gym.ObservationWrapper[Any, Any, Any]):
    """Observations as float64 (the space still says float32, as many hand-written envs do)."""

    def observation(self, observation: Any) -> Any:
        return np.asarray(observation, dtype=np.float64)


class _Mimic(gym.Wrapper[Any, Any, Any, Any]):
    """Mid-episode steps return an info shaped like a same_step end's."""

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            info = {"final_obs": np.array(obs, copy=True), "final_info": {}}
        return obs, reward, terminated, truncated, info


def noted() -> gym.Env[Any, Any]:
    """:func:`plain` whose episode ends carry a ``final_info`` (``{"length": steps}``)."""
    return _Noted(plain())


def reset_noted() -> gym.Env[Any, Any]:
    """:func:`plain` whose resets carry an info (``{"episode": count}``)."""
    return _ResetNoted(plain())


def wide() -> gym.Env[Any, Any]:
    """:func:`plain` whose observations are float64 arrays."""
    return _Wide(plain())


def mimic() -> gym.Env[Any, Any]:
    """:func:`plain` whose steps mid-episode return ``{"final_obs": obs, "final_info": {}}``."""
    return _Mimic(plain())

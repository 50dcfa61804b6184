"""Envs with ``Dict``/``Tuple`` action spaces and every render mode, for the Stable-Baselines3 drop-in tests.

:class:`ActionEchoEnv`: the observation echoes the last action, so a test sees that every env got exactly the
action meant for it. Everything random comes from ``self.np_random``: the same seeds and actions give the same
trajectories in any vector env (``SubprocVecEnv``, ``DummyVecEnv``, ``AioVecEnv``).

- ``action``: ``"dict"`` is ``Dict(move=Discrete(3), force=Box(-1, 1, (2,), float32))``; ``"tuple"`` is
  ``Tuple(Discrete(3), Box(-1, 1, (2,), float32))``; ``"nested"`` is
  ``Tuple(Discrete(2), Dict(force=Box(-1, 1, (2,), float32), flag=MultiBinary(3)))``.
- ``obs``: ``"box"`` is ``Box(-inf, inf, (6,), float32)`` = ``[t, move, force0, force1, drift, noise]``;
  ``"dict"`` is ``Dict(state=Box(-inf, inf, (3,)), echo=Box(-inf, inf, (3,)))`` (both float32, Box only, so
  ``VecNormalize`` and ``VecFrameStack`` take it).
- Episodes last 3..8 steps (drawn at each reset) and end by termination or truncation (drawn too).
- ``render_mode``: ``"rgb_array"`` returns a ``(4, 5, 3)`` uint8 frame filled with ``seed % 256``; ``"human"``
  and ``"ansi"`` count the calls in ``renders`` (``"ansi"`` also returns a str). Any other mode is refused.
- ``step`` raises ``ValueError`` for an action outside the space (as many envs assert).

Use it as ``functools.partial(make_echo_env, action="dict")``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["ActionEchoEnv", "make_echo_env"]

FORCE = spaces.Box(-1.0, 1.0, (2,), np.float32)
ACTIONS: dict[str, spaces.Space[Any]] = {
    "dict": spaces.Dict({"move": spaces.Discrete(3), "force": FORCE}),
    "tuple": spaces.Tuple((spaces.Discrete(3), FORCE)),
    "nested": spaces.Tuple((spaces.Discrete(2), spaces.Dict({"force": FORCE, "flag": spaces.MultiBinary(3)}))),
}
RENDER_MODES = ("rgb_array", "human", "ansi")


def _observation_space(kind: str) -> spaces.Space[Any]:
    if kind == "box":
        return spaces.Box(-np.inf, np.inf, (6,), np.float32)
    if kind == "dict":
        return spaces.Dict({key: spaces.Box(-np.inf, np.inf, (3,), np.float32) for key in ("state", "echo")})
    raise ValueError(f"obs must be 'box' or 'dict', got {kind!r}")


def _move_and_force(kind: str, action: Any) -> tuple[int, np.ndarray]:
    """The discrete part and the force of an action of space ``ACTIONS[kind]``."""
    if kind == "dict":
        return int(action["move"]), np.asarray(action["force"], dtype=np.float32)
    if kind == "tuple":
        return int(action[0]), np.asarray(action[1], dtype=np.float32)
    inner = action[1]
    return int(action[0]) + int(np.sum(inner["flag"])), np.asarray(inner["force"], dtype=np.float32)


class ActionEchoEnv(gym.Env[Any, Any]):
    """See the module docstring."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}  # noqa: RUF012 - gymnasium convention

    def __init__(self, action: str = "dict", obs: str = "box", render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
        self.kind = action
        self.obs_kind = obs
        self.action_space = ACTIONS[action]
        self.observation_space = _observation_space(obs)
        self.render_mode = render_mode
        self.renders = 0
        self.ident = 0
        self._t = 0
        self._limit = 0
        self._terminates = False
        self._drift = 0.0

    def _obs(self, move: int, force: np.ndarray) -> Any:
        noise = self.np_random.normal()
        if self.obs_kind == "box":
            return np.array([self._t, move, force[0], force[1], self._drift, noise], dtype=np.float32)
        state = np.array([self._t, self._drift, noise], dtype=np.float32)
        return {"state": state, "echo": np.array([move, force[0], force[1]], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.ident = seed
        self._t = 0
        self._limit = int(self.np_random.integers(3, 9))
        self._terminates = bool(self.np_random.random() < 0.5)
        self._drift = float(self.np_random.uniform(-1.0, 1.0))
        return self._obs(-1, np.zeros(2, dtype=np.float32)), {"limit": self._limit}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        move, force = _move_and_force(self.kind, action)
        self._t += 1
        self._drift += float(force.sum()) * 0.25
        ended = self._t >= self._limit
        reward = float(move) - abs(self._drift) + float(self.np_random.random())
        info = {"t": self._t, "move": move}
        return self._obs(move, force), reward, ended and self._terminates, ended and not self._terminates, info

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return np.full((4, 5, 3), self.ident % 256, dtype=np.uint8)
        self.renders += 1
        return f"env {self.ident} at step {self._t}" if self.render_mode == "ansi" else None


def make_echo_env(**kwargs: Any) -> ActionEchoEnv:
    """An :class:`ActionEchoEnv` (for ``functools.partial``, pickled by reference)."""
    return ActionEchoEnv(**kwargs)

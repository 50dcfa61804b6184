"""Envs for running ``AioVectorEnv`` and gymnasium's ``AsyncVectorEnv`` side by side.

Both vector envs receive ``functools.partial(PeerEnv, ...)`` factories (pickled by reference to this module),
so the peer's forked processes and aioenv's workers run exactly the same code.

- :class:`PeerEnv`: ``Box(2,)`` observations ``[ident, t]``, ``Discrete(4)`` actions; on demand it raises
  (a builtin or :class:`EnvBoom`) in ``reset``/``step``, kills its own process, or ends episodes after
  ``limit`` steps. Its metadata holds a value msgpack cannot carry.
- :class:`BoundsEnv`: ``Box`` observations whose bounds (or shape) depend on ``high`` (``observation_mode``).
- :class:`ShapeEnv`: a space chosen by name (``observation_mode="same"`` with differing spaces, shared memory).
- :class:`ChildEnv`: starts a ``multiprocessing`` child in ``reset`` (what ``daemon=True`` forbids the peer).
- :class:`Dot`, :class:`DotSpace`: a user-defined space (no shared-memory layout in gymnasium).
- :func:`broken_factory`: an env factory that raises ``KeyError``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["KILL", "BoundsEnv", "ChildEnv", "Dot", "DotSpace", "EnvBoom", "PeerEnv", "ShapeEnv", "broken_factory"]

KILL = 3  #: PeerEnv's action that kills its own process (SIGKILL)


class EnvBoom(Exception):
    """An env's own exception class (user code catches it by this name)."""


class Dot:
    """A value msgpack cannot carry (kept in :class:`PeerEnv`'s metadata, set with ``set_attr``)."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dot) and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)


class DotSpace(gym.Space[Any]):
    """A user-defined space with no shared-memory layout registered with gymnasium."""

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        return Dot(int(self.np_random.integers(10)))

    def contains(self, x: Any) -> bool:
        return isinstance(x, Dot)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DotSpace)

    def __hash__(self) -> int:
        return 7


class PeerEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring.

    Args:
        ident: the first observation value.
        fail_action: ``step`` raises ``exc("Error in step with <action>")`` for this action.
        fail_seed: ``reset`` raises ``exc("Error in reset")`` for this seed.
        exc: the exception class raised.
        limit: episodes end (terminated) after this many steps.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "marker": Dot(1)}

    def __init__(
        self,
        ident: int = 0,
        fail_action: int | None = None,
        fail_seed: int | None = None,
        exc: type[Exception] = ValueError,
        limit: int = 1000,
    ) -> None:
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(4)
        self.ident, self.fail_action, self.fail_seed, self.exc, self.limit = ident, fail_action, fail_seed, exc, limit
        self.t = 0
        self.tag: Any = None

    def _obs(self) -> np.ndarray:
        return np.array([self.ident, self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.fail_seed is not None and seed == self.fail_seed:
            raise self.exc("Error in reset")
        self.t = 0
        return self._obs(), {"seed": -1 if seed is None else seed}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) == KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fail_action is not None and int(action) == self.fail_action:
            raise self.exc(f"Error in step with {int(action)}")
        self.t += 1
        return self._obs(), float(action), self.t >= self.limit, False, {"t": self.t}


class BoundsEnv(gym.Env[np.ndarray, np.int64]):
    """``Box(0, high, (size,))`` observations (``high`` in every element), ``Discrete(2)`` actions."""

    def __init__(self, high: float = 1.0, size: int = 3) -> None:
        self.observation_space = spaces.Box(0.0, high, (size,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.high, self.t = high, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        obs = np.full(self.observation_space.shape, self.high, np.float32)
        return obs, 1.0, False, False, {}


_SPACES = {
    "box": lambda: spaces.Box(-1.0, 1.0, (3,), np.float32),
    "box2": lambda: spaces.Box(-2.0, 2.0, (3,), np.float32),
    "discrete": lambda: spaces.Discrete(5),
    "dot": DotSpace,
    "sequence": lambda: spaces.Sequence(spaces.Discrete(3)),
}


class ShapeEnv(gym.Env[Any, np.int64]):
    """Observations of the space named ``obs`` (``box``, ``box2``, ``discrete``, ``dot``, ``sequence``);
    ``Discrete(act)`` actions."""

    def __init__(self, obs: str = "box", act: int = 2) -> None:
        self.observation_space = _SPACES[obs]()
        self.action_space = spaces.Discrete(act)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, False, False, {}


def _child_main() -> None:
    """What :class:`ChildEnv`'s child process runs."""


class ChildEnv(gym.Env[np.ndarray, np.int64]):
    """Starts (and joins) a ``multiprocessing`` child process in ``reset``; its info says the child's exit code."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        child = multiprocessing.get_context("spawn").Process(target=_child_main)
        child.start()
        child.join(60)
        return np.zeros(1, np.float32), {"child_exitcode": child.exitcode}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, False, False, {}


def broken_factory() -> gym.Env[Any, Any]:
    """An env factory that raises ``KeyError``."""
    raise KeyError("no such env on purpose")

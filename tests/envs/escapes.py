"""A module a server's allow-list names (``tests.envs.escapes:*``), holding both what a client may make (a factory
function and an env class defined here, a gymnasium id registered here) and what it must never reach through
such a pattern: imported modules and functions, a ``functools.partial``, private names. Every payload that a
client could run writes a marker file (the path comes in ``env_kwargs``), so a test can tell that nothing ran.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess  # noqa: F401 (reachable as an attribute of this module: a client must not get it)
from os import system  # noqa: F401 (an imported function: a client must not call it through this module)
from typing import Any

import gymnasium as gym

__all__ = ["EscapeEnv", "Holder", "make_env", "mark", "write_marker"]


def write_marker(path: str, **_: Any) -> None:
    """The payload: leaves a file at ``path``."""
    pathlib.Path(path).write_text("ran")


def _private_factory(path: str = "") -> Any:
    """A private name: a client must not reach it."""
    if path:
        write_marker(path)
    return gym.make("CartPole-v1")


#: A module-level partial: callable, but not a function defined here.
mark = functools.partial(write_marker)

#: An imported module under another name.
shell = os


class EscapeEnv(gym.Env[Any, Any]):
    """An env class defined in this module: a client may make it."""

    def __init__(self, size: int = 3) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,))
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Zeros."""
        super().reset(seed=seed)
        return self.observation_space.low, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Zeros, reward 1."""
        return self.observation_space.low, 1.0, False, False, {}


def make_env(size: int = 3) -> EscapeEnv:
    """A factory function defined in this module: a client may call it."""
    return EscapeEnv(size)


class Holder:
    """A class whose attributes a literal dotted pattern may name (``tests.envs.escapes:Holder.make``)."""

    tool = os  # an imported module behind a class attribute

    @classmethod
    def make(cls, size: int = 3) -> EscapeEnv:
        """Defined here, reached through a class defined here."""
        return EscapeEnv(size)


#: A bound method of an imported object.
mark_bound = pathlib.Path.cwd().joinpath

gym.register("EscapeEnv-v0", entry_point=EscapeEnv)

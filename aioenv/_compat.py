"""What differs between the gymnasium releases aioenv admits (``gymnasium>=1.0,<2``), in one place.

- ``gymnasium.vector.AutoresetMode`` arrived in gymnasium 1.1. On 1.0, :data:`AutoresetMode` is an enum of the same
  name, members and values (``"NextStep"``, ``"SameStep"``, ``"Disabled"``): aioenv carries out every mode itself, so
  its pools offer all three there too; only gymnasium's own vector envs of 1.0 know just the next-step one.
- ``gymnasium.spaces.Dict`` took ``sort_keys`` (and keeps it as an attribute) in gymnasium 1.4. Before, a mapping
  was always sorted (where its keys compare) and a sequence of pairs kept its order: :func:`dict_sort_keys` reads
  the flag as those releases behave (``True``), and :func:`dict_space` passes it only to a release that takes it.
  A space built from ``(key, subspace)`` pairs has their order on every release, so the two agree across a wire
  whose ends run different releases.
- ``gymnasium.Env.set_wrapper_attr`` took ``force`` in gymnasium 1.1 (and says whether it set the attribute): on 1.0
  :func:`set_wrapper_attr` sets it as that release does, always.
- ``gymnasium.spaces.Discrete`` took ``dtype`` in gymnasium 1.1; on 1.0 it is always int64. :func:`discrete_space`
  builds an int64 one on every release and refuses another dtype where the release has none.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import gymnasium
import numpy as np
from gymnasium import spaces as gs
from gymnasium import vector as gv

__all__ = [
    "AutoresetMode",
    "HAS_AUTORESET_MODE",
    "DICT_TAKES_SORT_KEYS",
    "DISCRETE_TAKES_DTYPE",
    "SET_WRAPPER_ATTR_TAKES_FORCE",
    "dict_sort_keys",
    "dict_space",
    "discrete_space",
    "set_wrapper_attr",
]

#: Whether gymnasium has its own ``gymnasium.vector.AutoresetMode`` (1.1 and newer).
HAS_AUTORESET_MODE = "AutoresetMode" in vars(gv)

#: Whether ``gymnasium.spaces.Discrete`` takes ``dtype`` (1.1 and newer).
DISCRETE_TAKES_DTYPE = "dtype" in inspect.signature(gs.Discrete.__init__).parameters

#: Whether ``gymnasium.Env.set_wrapper_attr`` takes ``force`` (1.1 and newer).
SET_WRAPPER_ATTR_TAKES_FORCE = "force" in inspect.signature(gymnasium.Env.set_wrapper_attr).parameters

#: Whether ``gymnasium.spaces.Dict`` takes ``sort_keys`` (1.4 and newer).
DICT_TAKES_SORT_KEYS = "sort_keys" in inspect.signature(gs.Dict.__init__).parameters

if TYPE_CHECKING or HAS_AUTORESET_MODE:
    from gymnasium.vector import AutoresetMode
else:

    class AutoresetMode(enum.Enum):
        """gymnasium 1.1's ``gymnasium.vector.AutoresetMode``, for gymnasium 1.0 (which has none)."""

        NEXT_STEP = "NextStep"
        SAME_STEP = "SameStep"
        DISABLED = "Disabled"


def dict_sort_keys(space: gs.Dict) -> bool:
    """A ``Dict`` space's ``sort_keys`` flag; ``True`` (how a mapping was always built) before gymnasium 1.4."""
    if DICT_TAKES_SORT_KEYS:
        return bool(space.sort_keys)
    return True


def dict_space(pairs: Sequence[tuple[str | int, gs.Space[Any]]], sort_keys: bool) -> gs.Dict:
    """``gymnasium.spaces.Dict`` of ``(key, subspace)`` pairs, in their order, with ``sort_keys`` where the installed
    gymnasium takes it (1.4 and newer)."""
    entries = cast("list[tuple[str, gs.Space[Any]]]", list(pairs))  # int keys work too; gymnasium's hints say str
    if DICT_TAKES_SORT_KEYS:
        return gs.Dict(entries, sort_keys=sort_keys)
    return gs.Dict(entries)


def discrete_space(n: int, start: int, dtype: np.dtype[Any]) -> gs.Discrete:
    """``gymnasium.spaces.Discrete(n, start=start, dtype=dtype)``; before gymnasium 1.1 (no ``dtype``, always
    int64), a ``ValueError`` for any other dtype."""
    if DISCRETE_TAKES_DTYPE:
        return gs.Discrete(n, start=start, dtype=dtype)
    if dtype != np.int64:
        raise ValueError(
            f"gymnasium {gymnasium.__version__}'s Discrete is int64 only (dtype arrived in 1.1), got {dtype}"
        )
    return gs.Discrete(n, start=start)


def set_wrapper_attr(env: gymnasium.Env[Any, Any], name: str, value: Any, force: bool) -> bool:
    """``env.set_wrapper_attr(name, value, force=force)``: whether it set the attribute. Before gymnasium 1.1 (no
    ``force``: the attribute is always set, on the first wrapper that has it or else on the env), ``True``."""
    if SET_WRAPPER_ATTR_TAKES_FORCE:
        return bool(env.set_wrapper_attr(name, value, force=force))
    env.set_wrapper_attr(name, value)
    return True

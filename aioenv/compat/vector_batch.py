"""Batched values of :class:`aioenv.vector.AioVectorEnv`: aioenv's batches in gymnasium's form, the rows a
partial reset keeps, and actions whose unused rows are replaced.

An aioenv pool batches an object leaf (``Text``, and ``Graph``/``Sequence``/``OneOf``/user-defined spaces) as a
numpy object array ``(B,)`` of each env's value; gymnasium batches it as a tuple: :func:`to_gymnasium` converts.
Nothing here runs per step for spaces whose leaves are all numeric arrays
(:func:`aioenv.wire.spaces.has_object_leaves`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import Space

__all__ = ["copy_tree", "replace_rows", "scatter_info", "set_rows", "to_gymnasium", "without_env_id"]

#: Spaces whose batch is one numeric array.
ARRAY_SPACES = (
    gymnasium.spaces.Box,
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)


def to_gymnasium(space: Space[Any], value: Any) -> Any:
    """aioenv's batched obs -> gymnasium's: an object leaf (an ndarray ``(B,)`` of each env's value, e.g. ``Text``)
    becomes a tuple of ``B`` values, as gymnasium batches it."""
    if isinstance(space, gymnasium.spaces.Dict) and isinstance(value, Mapping):
        return {key: to_gymnasium(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gymnasium.spaces.Tuple) and isinstance(value, tuple):
        return tuple(to_gymnasium(sub, v) for sub, v in zip(space.spaces, value, strict=True))
    if isinstance(value, np.ndarray) and value.dtype == object:
        return tuple(value.tolist()) if value.ndim == 1 else tuple(value)
    return value


def copy_tree(value: Any) -> Any:
    """A copy of a batched obs (dicts/tuples of arrays) that shares nothing mutable with it."""
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(copy_tree(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value.copy()
    return copy.deepcopy(value)


def set_rows(full: Any, rows: Any, ids: np.ndarray) -> Any:
    """``full`` (a batch of ``num_envs`` rows) with rows ``ids`` replaced by ``rows`` (``len(ids)`` rows)."""
    if isinstance(full, dict):
        return {k: set_rows(v, rows[k], ids) for k, v in full.items()}
    if isinstance(full, tuple):
        return tuple(set_rows(f, r, ids) for f, r in zip(full, rows, strict=True))
    out = np.array(full, copy=True)
    out[ids] = rows
    return out


def scatter_info(info: dict[str, Any], ids: np.ndarray, n: int) -> dict[str, Any]:
    """A batched info over ``len(ids)`` rows spread to ``n`` rows (rows ``ids``), as gymnasium's
    ``_add_info`` builds it for a partial reset: absent rows are 0 / None with their ``_key`` mask False."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = scatter_info(value, ids, n)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == ids.size:
            if value.dtype == object:
                full = np.full((n, *value.shape[1:]), None, dtype=object)
            else:
                full = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
            full[ids] = value
            out[key] = full
        else:
            out[key] = value
    return out


def without_env_id(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without the ``env_id`` an aioenv pool adds (gymnasium's vector envs have none)."""
    if "env_id" in info:
        info = {k: v for k, v in info.items() if k not in ("env_id", "_env_id")}
    return info


def replace_rows(space: Space[Any], actions: Any, mask: np.ndarray, filler: Any) -> Any:
    """``actions`` (a batch of ``len(mask)`` rows, as the caller gave it) with the rows of ``mask`` set to ``filler``
    (one valid action) and every other row untouched (not cast); None when ``actions`` has not that structure."""
    n = mask.size
    if isinstance(space, gymnasium.spaces.Dict):
        if not isinstance(actions, Mapping) or set(actions) != set(space.spaces):
            return None
        parts = {k: replace_rows(sub, actions[k], mask, filler[k]) for k, sub in space.spaces.items()}
        return None if any(p is None for p in parts.values()) else parts
    if isinstance(space, gymnasium.spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or len(actions) != len(space.spaces):
            return None
        items = [replace_rows(sub, a, mask, f) for sub, a, f in zip(space.spaces, actions, filler, strict=True)]
        return None if any(p is None for p in items) else tuple(items)
    if isinstance(space, ARRAY_SPACES):
        array = np.array(actions, copy=True)
        if array.ndim < 1 or array.shape[0] != n or array.dtype == object:
            return None
        array[mask] = filler
        return array
    if isinstance(actions, (str, bytes)) or not isinstance(actions, (Sequence, np.ndarray)) or len(actions) != n:
        return None
    return tuple(filler if flag else row for flag, row in zip(mask.tolist(), actions, strict=True))

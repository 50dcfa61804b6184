"""Batching per-env ``info`` dicts exactly as gymnasium's vector envs do.

:func:`add_info` mirrors ``gymnasium.vector.VectorEnv._add_info`` (gymnasium 1.x):
each key becomes an array over the batch rows with a boolean mask ``_key`` saying
which rows have it; nested dicts recurse; ``final_obs`` is an object array of
unbatched observations. Pools add ``info["env_id"]`` (int32, shape ``(B,)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["add_info", "take_info"]


def add_info(vector_infos: dict[str, Any], env_info: dict[str, Any], row: int, num_rows: int) -> dict[str, Any]:
    """Add one env's ``env_info`` at batch row ``row`` of ``vector_infos`` (B = ``num_rows``); returns it."""
    for key, value in env_info.items():
        if key == "final_obs":
            array = vector_infos.get("final_obs")
            if array is None:
                array = np.full(num_rows, fill_value=None, dtype=object)
            array[row] = value
        elif isinstance(value, dict):
            array = add_info(vector_infos.get(key, {}), value, row, num_rows)
        else:
            array = vector_infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or issubclass(type(value), np.number):
                    array = np.zeros(num_rows, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((num_rows, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(num_rows, fill_value=None, dtype=object)
            array[row] = value
        mask = vector_infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(num_rows, dtype=np.bool_)
        mask[row] = True
        vector_infos[key], vector_infos[f"_{key}"] = array, mask
    return vector_infos


def take_info(info: dict[str, Any], index: np.ndarray) -> dict[str, Any]:
    """Select rows ``index`` (bool mask or int array) of every array in a batched info dict."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = take_info(value, index)
        elif isinstance(value, np.ndarray) and value.ndim >= 1:
            out[key] = value[index]
        else:
            out[key] = value
    return out

"""Batching per-env ``info`` dicts exactly as gymnasium's vector envs do.

:func:`add_info` mirrors ``gymnasium.vector.VectorEnv._add_info`` (gymnasium 1.x):
each key becomes an array over the batch rows with a boolean mask ``_key`` saying
which rows have it; nested dicts recurse; ``final_obs`` is an object array of
unbatched observations. Pools add ``info["env_id"]`` (int32, shape ``(B,)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["add_info", "batch_infos", "merge_infos", "take_info"]


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


def take_info(info: dict[str, Any], index: np.ndarray | slice) -> dict[str, Any]:
    """Select rows ``index`` (bool mask, int array or slice) of every array in a batched info dict."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = take_info(value, index)
        elif isinstance(value, np.ndarray) and value.ndim >= 1:
            out[key] = value[index]
        else:
            out[key] = value
    return out


#: Key of the list naming typed columns whose values were Python scalars (internal to batch/merge).
_PY = "_aioenv_python_scalars"


def _plain(value: Any) -> bool:
    return type(value) in (int, float, bool) or issubclass(type(value), np.number)


def batch_infos(infos: list[dict[str, Any] | None], num_rows: int) -> dict[str, Any]:
    """Batch per-row info dicts (None = no info) column by column, *losslessly*.

    Keys whose values share one plain type (or are ndarrays of one shape and dtype) become
    typed arrays; nested dicts recurse; anything else (mixed types, str, objects, ``final_obs``)
    becomes an object array of the raw values, so no value is cast before :func:`merge_infos`
    knows which row comes first. Masks ``_key`` as in gymnasium.
    """
    columns: dict[str, list[tuple[int, Any]]] = {}
    for row, info in enumerate(infos):
        if info:
            for key, value in info.items():
                columns.setdefault(key, []).append((row, value))
    out: dict[str, Any] = {}
    for key, cells in columns.items():
        rows = [r for r, _ in cells]
        values = [v for _, v in cells]
        first = values[0]
        if key != "final_obs" and all(isinstance(v, dict) for v in values):
            sub: list[dict[str, Any] | None] = [None] * num_rows
            for r, v in cells:
                sub[r] = v
            out[key] = batch_infos(sub, num_rows)
        elif key != "final_obs" and _plain(first) and all(type(v) is type(first) for v in values):
            array = np.zeros(num_rows, dtype=type(first))
            array[rows] = values
            out[key] = array
            if type(first) in (int, float, bool):
                out.setdefault(_PY, []).append(key)  # rows were Python scalars, not numpy ones
        elif (
            key != "final_obs"
            and isinstance(first, np.ndarray)
            and first.dtype != object
            and all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values)
        ):
            array = np.zeros((num_rows, *first.shape), dtype=first.dtype)
            array[rows] = values
            out[key] = array
        else:
            array = np.full(num_rows, fill_value=None, dtype=object)
            for r, v in cells:
                array[r] = v
            out[key] = array
        mask = np.zeros(num_rows, dtype=np.bool_)
        mask[rows] = True
        out[f"_{key}"] = mask
    return out


def merge_infos(items: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> dict[str, Any]:
    """Merge batched infos (from :func:`batch_infos`) whose rows land at ``positions`` of a batch.

    ``items`` pairs each part's batched info (k rows) with its ``positions`` (k ints). The result
    equals gymnasium's ``_add_info`` applied row by row in output order: a key's dtype comes from
    the value at the lowest output row that has it. Each key costs a few numpy assignments per
    part; no Python loop runs over rows except for object columns.
    """
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for info, _ in items:
        for key in info:
            if key != _PY and not (key.startswith("_") and key[1:] in info):
                keys.setdefault(key)
    for key in keys:
        present = [(info, pos) for info, pos in items if key in info]
        mask = np.zeros(num_rows, dtype=np.bool_)
        for info, pos in present:
            part_mask = info.get(f"_{key}")
            mask[pos] = part_mask if part_mask is not None else True
        if isinstance(present[0][0][key], dict):
            out[key] = merge_infos([(info[key], pos) for info, pos in present], num_rows)
        else:
            out[key] = _merge_column(key, present, num_rows)
        out[f"_{key}"] = mask
    return out


def _merge_column(key: str, present: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> np.ndarray:
    # The column and value at the lowest output row that has the key decide the dtype (gymnasium's rule).
    first_row, first_col, first_value = 1 << 62, present[0][0][key], None
    for info, pos in present:
        mask = info.get(f"_{key}")
        idx = np.flatnonzero(mask) if mask is not None else np.arange(pos.size)
        if idx.size:
            best = idx[int(np.argmin(pos[idx]))]
            if int(pos[best]) < first_row:
                first_row, first_col, first_value = int(pos[best]), info[key], info[key][best]
    if key == "final_obs":
        array = np.full(num_rows, fill_value=None, dtype=object)
    elif first_col.dtype != object:  # a typed column: its dtype is the one gymnasium would pick
        array = np.zeros((num_rows, *first_col.shape[1:]), dtype=first_col.dtype)
    elif _plain(first_value):
        array = np.zeros(num_rows, dtype=type(first_value))
    elif isinstance(first_value, np.ndarray):
        array = np.zeros((num_rows, *first_value.shape), dtype=first_value.dtype)
    else:
        array = np.full(num_rows, fill_value=None, dtype=object)
    for info, pos in present:
        column = info[key]
        if array.dtype == object or column.dtype == object:
            mask = info.get(f"_{key}")
            python = column.dtype != object and key in info.get(_PY, ())
            for i in np.flatnonzero(mask) if mask is not None else range(pos.size):
                array[pos[i]] = column[i].item() if python else column[i]
        else:
            array[pos] = column
    return array

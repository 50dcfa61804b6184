"""Batching per-env ``info`` dicts exactly as gymnasium's vector envs do.

:func:`add_info` mirrors ``gymnasium.vector.VectorEnv._add_info`` (gymnasium 1.x):
each key becomes an array over the batch rows with a boolean mask ``_key`` saying
which rows have it; nested dicts recurse; ``final_obs`` is an object array of
unbatched observations. Pools add ``info["env_id"]`` (int32, shape ``(B,)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["UnmergedInfo", "add_info", "batch_infos", "concat_infos", "merge_infos", "take_info", "whole_info"]


class UnmergedInfo(ValueError):
    """Batched infos that give one key a nested dict at some rows of the batch and a value at others, which no
    batch holds (gymnasium's ``_add_info`` puts the value among the dict's keys, or fails, by which env comes
    first).

    Attributes:
        key: the info's key.
        rows: what each row gave, ``{"a dict": [batch rows], "a value": [batch rows]}``.
    """

    def __init__(self, key: str, rows: dict[str, list[int]]) -> None:
        self.key = key
        self.rows = rows
        said = ", ".join(f"{kind} at rows {at}" for kind, at in rows.items())
        super().__init__(f"info key {key!r} is {said} of the batch: a key's value must be a dict for every env or none")


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
    """Select rows ``index`` (bool mask, int array or slice) of every array in a batched info dict.

    A key that none of the selected rows has (its ``_key`` mask selects no True) is left out with its
    mask, as gymnasium would never have added it for those rows.
    """
    out: dict[str, Any] = {}
    absent: set[str] = set()
    for key in info:
        mask = info.get(f"_{key}")
        if isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.ndim == 1 and not mask[index].any():
            absent.update((key, f"_{key}"))
    for key, value in info.items():
        if key in absent:
            continue
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
    knows which row comes first. Masks ``_key`` as in gymnasium, except that a key every row
    has gets none (:func:`merge_infos` reads a missing mask as "every row"): the common case
    of an env that returns the same keys each step costs one array per key, not two.
    """
    out: dict[str, Any] = {}
    for key, (rows, values) in _columns(infos, num_rows).items():
        full = len(rows) == num_rows
        out[key], python_scalars = _batch_column(key, rows, values, num_rows, full)
        if python_scalars:  # rows were Python scalars, not numpy ones: merge_infos gives them back as such
            out.setdefault(_PY, []).append(key)
        if not full:
            mask = np.zeros(num_rows, dtype=np.bool_)
            mask[rows] = True
            out[f"_{key}"] = mask
    return out


def _columns(infos: list[dict[str, Any] | None], num_rows: int) -> dict[str, tuple[Any, Any]]:
    """``{key: (rows that have it, their values)}``, read column-wise when every row has the same keys."""
    columns = _full_columns(infos, num_rows)
    if columns is not None:
        return columns
    columns = {}
    for row, info in enumerate(infos):
        if info:
            for key, value in info.items():
                rows_of, values_of = columns.setdefault(key, ([], []))
                rows_of.append(row)
                values_of.append(value)
    return columns


def _batch_column(key: str, rows: Any, values: list[Any], num_rows: int, full: bool) -> tuple[Any, bool]:
    """One key's values at ``rows`` as a batched column of ``num_rows``: a nested batch for dicts, a typed
    array for values of one plain type or one array shape and dtype, an object array of the raw values
    otherwise (and always for ``final_obs``). The flag: the values were Python ints, floats or bools."""
    first = values[0]
    if key != "final_obs":
        if all(isinstance(v, dict) for v in values):
            sub: list[dict[str, Any] | None] = [None] * num_rows
            for r, v in zip(rows, values, strict=True):
                sub[r] = v
            return batch_infos(sub, num_rows), False
        kind = type(first)
        if _plain(first) and _one_type(values):
            python_scalars = kind in (int, float, bool)
            if full:
                return np.array(values, dtype=kind), python_scalars
            array = np.zeros(num_rows, dtype=kind)
            array[rows] = values
            return array, python_scalars
        if _same_arrays(first, values):
            array = np.zeros((num_rows, *first.shape), dtype=first.dtype)
            array[rows] = values
            return array, False
    array = np.full(num_rows, fill_value=None, dtype=object)
    for r, v in zip(rows, values, strict=True):
        array[r] = v
    return array, False


def _one_type(values: Any) -> bool:
    """Every value of one type (a set of the types, built in C: a generator's test per value costs ~5x more,
    for each key of every reply a worker sends)."""
    return len(set(map(type, values))) == 1


def _same_arrays(first: Any, values: list[Any]) -> bool:
    """Every value a numeric ndarray of ``first``'s shape and dtype."""
    return (
        isinstance(first, np.ndarray)
        and first.dtype != object
        and all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values)
    )


def _full_columns(infos: list[dict[str, Any] | None], num_rows: int) -> dict[str, tuple[Any, Any]] | None:
    """``{key: (rows, values)}`` when every row has an info with the same keys in the same order (most
    envs), read column-wise in one pass; None otherwise."""
    if num_rows == 0 or len(infos) != num_rows:
        return None
    first = infos[0]
    if not first:
        return None
    keys = tuple(first)
    for info in infos:
        if not info or tuple(info) != keys:
            return None
    rows = range(num_rows)
    columns = zip(*(info.values() for info in infos if info), strict=True)  # every row has len(keys) values
    return {key: (rows, values) for key, values in zip(keys, columns, strict=True)}


def merge_infos(items: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> dict[str, Any]:
    """Merge batched infos (from :func:`batch_infos`) whose rows land at ``positions`` of a batch.

    ``items`` pairs each part's batched info (k rows) with its ``positions`` (k ints). The result
    equals gymnasium's ``_add_info`` applied row by row in output order: a key's dtype comes from
    the value at the lowest output row that has it. Each key costs a few numpy assignments per
    part; no Python loop runs over rows except for object columns.
    """
    uniform = _merge_uniform(items, num_rows)
    if uniform is not None:
        return uniform
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for info, _ in items:
        for key in info:
            if key != _PY and not (key.startswith("_") and key[1:] in info):
                keys.setdefault(key)
    for key in keys:
        present = [(info, pos) for info, pos in items if key in info]
        _same_nesting(key, present)
        full = _merge_full(key, present, num_rows)
        if full is not None:
            out[key], out[f"_{key}"] = full
            continue
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


def _same_nesting(key: str, present: list[tuple[dict[str, Any], np.ndarray]]) -> None:
    """Raise :class:`UnmergedInfo` where the parts that have ``key`` do not all give it a nested dict or all a value (a
    part's object column may hold dicts among its values, where its own envs gave both: those rows count as dicts)."""
    if key == "final_obs":  # (observations, dicts among them: never batched as an info)
        return
    nested = [isinstance(info[key], dict) for info, _ in present]
    if all(nested) or (not any(nested) and not any(_holds_dicts(info[key]) for info, _ in present)):
        return
    rows: dict[str, list[int]] = {"a dict": [], "a value": []}
    for (info, positions), is_dict in zip(present, nested, strict=True):
        at = positions.tolist()
        mask = info.get(f"_{key}")
        there = [True] * len(at) if mask is None else np.asarray(mask, dtype=np.bool_).tolist()
        column = info[key]
        values = column.tolist() if type(column) is np.ndarray and column.dtype.hasobject else [None] * len(at)
        for row, has, value in zip(at, there, values, strict=False):
            if has:
                rows["a dict" if is_dict or isinstance(value, dict) else "a value"].append(row)
    if rows["a dict"] and rows["a value"]:
        raise UnmergedInfo(key, {kind: sorted(at) for kind, at in rows.items()})


def _holds_dicts(column: Any) -> bool:
    """Whether ``column`` (a part's batched values of a key) is an object column holding a dict."""
    return type(column) is np.ndarray and column.dtype.hasobject and any(isinstance(v, dict) for v in column.tolist())


def _merge_uniform(items: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> dict[str, Any] | None:
    """:func:`merge_infos` when the parts hold every row between them and each has the same keys in the same
    order, each key a typed column over all its rows (no masks, nothing nested: MuJoCo's rewards and
    positions, Atari's lives), else None. Each key is then placed part by part into one new column, with an
    all-True mask: no zeroed column and no mask to fill per key.

    ``positions`` of different parts never share a row (each row of a call is answered once), so parts whose
    sizes add up to ``num_rows`` hold every row."""
    first = items[0][0]
    keys = tuple(first)
    total = 0
    for info, positions in items:
        if tuple(info) != keys:
            return None
        total += positions.size
    if total != num_rows:
        return None
    out: dict[str, Any] = {}
    for key in keys:
        if key == _PY:  # only untyped (object) columns need it, and those are not merged here
            continue
        if key == "final_obs" or (key.startswith("_") and key[1:] in first):
            return None
        column = _uniform_column(key, items, num_rows)
        if column is None:
            return None
        out[key] = column
        out[f"_{key}"] = _all_true(num_rows)
    return out


def _uniform_column(key: str, items: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> np.ndarray | None:
    """The parts' typed columns of ``key`` placed at their positions in a new column, or None unless each part
    has it as a column over all its rows, all of one dtype and row shape."""
    first = items[0][0][key]
    if type(first) is not np.ndarray or first.ndim == 0 or first.dtype.hasobject:
        return None
    dtype, tail = first.dtype, first.shape[1:]
    for info, positions in items:
        column = info[key]
        if type(column) is not np.ndarray or column.dtype != dtype or column.shape != (positions.size, *tail):
            return None
    out = np.empty((num_rows, *tail), dtype=dtype)
    for info, positions in items:
        out[positions] = info[key]
    return out


def whole_info(info: dict[str, Any], num_rows: int) -> dict[str, Any]:
    """:func:`merge_infos` of one batched info that holds every row of the batch, in order (a reply taken as
    a whole). A key every row has as a typed column (the common case) is copied with a mask all True, ~1 µs
    where placing it row by row costs several; the other keys (strings, objects, nested dicts, keys some
    rows lack) go through :func:`merge_infos` together. Same result, keys in the same order."""
    fast: set[str] = set()
    rest: dict[str, Any] = {}
    keys = []  # the info's own keys, in order: not the masks and not _PY
    for key, value in info.items():
        if key == _PY or (key.startswith("_") and key[1:] in info):
            rest[key] = value
            continue
        keys.append(key)
        if (
            type(value) is np.ndarray
            and not value.dtype.hasobject
            and value.ndim
            and value.shape[0] == num_rows
            and key != "final_obs"
            and f"_{key}" not in info
        ):
            fast.add(key)
        else:
            rest[key] = value
    merged = merge_infos([(rest, np.arange(num_rows))], num_rows) if len(fast) < len(keys) else {}
    out: dict[str, Any] = {}
    for key in keys:
        if key in fast:
            out[key] = info[key].copy()
            out[f"_{key}"] = _all_true(num_rows)
        elif key in merged:
            out[key] = merged[key]
            out[f"_{key}"] = merged[f"_{key}"]
    return out


#: An all-True mask per batch size, copied for each key (``np.ones`` costs 2.5 µs, a copy 0.3 µs).
_TRUE: dict[int, np.ndarray] = {}


def _all_true(num_rows: int) -> np.ndarray:
    mask = _TRUE.get(num_rows)
    if mask is None:
        mask = np.ones(num_rows, dtype=np.bool_)
        if len(_TRUE) < 64:
            _TRUE[num_rows] = mask
    return mask.copy()


def concat_infos(infos: list[dict[str, Any] | None], sizes: list[int]) -> dict[str, Any]:
    """:func:`merge_infos` for parts whose rows follow each other: part i (batched info or None) holds the
    next ``sizes[i]`` rows of the batch.

    When every part has every key as a typed column over all its rows (an env returning the same keys each
    step, the common case), each key is one ``np.concatenate`` and its mask all True, whatever the number
    of parts; otherwise the parts go through :func:`merge_infos`, with the same result.
    """
    num_rows = sum(sizes)
    every = [info for info in infos if info is not None]
    if every and len(every) == len(infos) and all(len(info) == len(every[0]) for info in every):
        out: dict[str, Any] = {}
        for key in every[0]:
            if key == _PY or (key.startswith("_") and key[1:] in every[0]):
                continue
            column = _concat_full(key, every, sizes)
            if column is None:
                break
            out[key] = column
            out[f"_{key}"] = _all_true(num_rows)
        else:  # every key of the first part concatenated, and no part has more keys
            return out
    items = []
    row = 0
    for info, size in zip(infos, sizes, strict=True):
        if info:
            items.append((info, np.arange(row, row + size)))
        row += size
    return merge_infos(items, num_rows) if items else {}


def _concat_full(key: str, infos: list[dict[str, Any]], sizes: list[int]) -> np.ndarray | None:
    """The parts' typed columns of ``key`` concatenated, or None (see :func:`_typed_columns`)."""
    columns = _typed_columns(key, list(zip(infos, sizes, strict=True)))
    return None if columns is None else np.concatenate(columns)


def _typed_columns(key: str, parts: list[tuple[dict[str, Any], int]]) -> list[np.ndarray] | None:
    """The columns of ``key`` of ``parts`` (``(batched info, its rows)``), or None unless every part has it
    as a typed column over all its rows (no mask), all of one dtype and row shape."""
    first = parts[0][0].get(key)
    if key == "final_obs" or not isinstance(first, np.ndarray) or first.dtype == object or first.ndim == 0:
        return None
    dtype, tail = first.dtype, first.shape[1:]
    mask_key = f"_{key}"
    columns = []
    for info, size in parts:
        column = info.get(key)
        if (
            mask_key in info
            or not isinstance(column, np.ndarray)
            or column.dtype != dtype
            or column.shape != (size, *tail)
        ):
            return None
        columns.append(column)
    return columns


def _merge_full(
    key: str, present: list[tuple[dict[str, Any], np.ndarray]], num_rows: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The common case in a few numpy assignments: every part has the key in all its rows (no mask), as
    typed columns of one dtype and shape. ``(column, mask)``, or None for :func:`_merge_column`."""
    columns = _typed_columns(key, [(info, pos.size) for info, pos in present])
    if columns is None:
        return None
    array = np.zeros((num_rows, *columns[0].shape[1:]), dtype=columns[0].dtype)
    mask = np.zeros(num_rows, dtype=np.bool_)
    for column, (_, pos) in zip(columns, present, strict=True):
        array[pos] = column
        mask[pos] = True
    return array, mask


def _merge_column(key: str, present: list[tuple[dict[str, Any], np.ndarray]], num_rows: int) -> np.ndarray:
    if key == "final_obs":  # always an object array of the rows' own observations: no dtype to decide
        array = np.full(num_rows, fill_value=None, dtype=object)
        for info, pos in present:
            mask = info.get(f"_{key}")
            column = info[key]
            if mask is None:
                array[pos] = column
            else:
                array[pos[mask]] = column[mask]
        return array
    # The column and value at the lowest output row that has the key decide the dtype (gymnasium's rule).
    first_row, first_col, first_value = 1 << 62, present[0][0][key], None
    for info, pos in present:
        mask = info.get(f"_{key}")
        idx = np.flatnonzero(mask) if mask is not None else np.arange(pos.size)
        if idx.size:
            best = idx[int(np.argmin(pos[idx]))]
            if int(pos[best]) < first_row:
                first_row, first_col, first_value = int(pos[best]), info[key], info[key][best]
    if first_col.dtype != object:  # a typed column: its dtype is the one gymnasium would pick
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

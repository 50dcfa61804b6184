"""Infos in the shared rows: the numeric info columns of envs that return the same keys every step.

MuJoCo's envs, Atari's and most others return an info dict on every step, whose values are numbers or small
arrays under the same keys (Ant-v5: nine floats). A worker answering a lane step (:mod:`aioenv.wire.lane`) with such
infos sent them in a RESULT: batched column by column, encoded as msgpack with an array frame per key, decoded by the
pool and merged once per batch. That message was most of what the pool's process spent on a worker's reply: for 32
Ant-v5 on 16 workers, 70 µs a message against 24-33 with the infos dropped, where the floor's lean pool spends
~16 (docs/performance.md, "Envs with infos in the shared rows").

So the infos go where the rows go. Once a lane reply shows the keys (its batched info, every key a typed column:
a number or a numeric array per env; the pool looks at a few replies for one, ``Coordinator._plan_info_area``),
the pool grows its slab's file by an *info area* laid out by :func:`plan`:
for every key, a column of ``(num_envs, *shape)`` of the dtype gymnasium's vector envs would give it, and a mask
``(num_envs,)`` bool of which envs have the key (gymnasium's ``_key``). It sends every worker the slab's layout
again (a SLAB message); a re-made worker gets it with its MAKE. From then on a lane step may say that the area may
hold its infos (:data:`aioenv.wire.lane.INFOS`): a worker whose envs' infos all fit (:meth:`InfoArea.write`: every
key one of the area's, every value of exactly the type that makes its column's dtype) writes them to its rows of the
area and answers with a DONE that says so. Anything else (a key the area lacks, a string, a nested dict, an int
where the column holds floats) goes in a RESULT as before, with the same result: the area only moves what the
RESULT would have said.

Why the result is gymnasium's own: gymnasium's ``_add_info`` gives a key the dtype of the first env's value
(``type(value)``: a Python float makes a float64 column, an np.float32 a float32 one, an ndarray its own dtype and
shape) and zeros where an env lacks the key. A worker writes a value only when its own dtype is the column's, and
zeros and a False mask where an env lacks the key, so every row of a batch read from the area holds what
``_add_info`` would have put there, and a key that no row of the batch has is left out (:meth:`InfoArea.batch`).
For the same reason each env's own dict can be read back as the env returned it (:meth:`InfoArea.dicts`, what
Stable-Baselines3's adapter asks for): the column's type is the one type its values had.

Why the rows are not overwritten while someone reads them: as for the slab's other rows, an env has one request in
flight, and its rows (the area's too) are copied by whoever takes them before the env is freed.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple, cast

import numpy as np

__all__ = ["MAX_AREA_BYTES", "MAX_KEYS", "InfoArea", "InfoColumn", "plan"]

#: The most keys an info area holds (infos with more keep their RESULTs).
MAX_KEYS = 128
#: The most bytes an info area may take (every env's row of every column and mask); bigger infos keep their RESULTs.
MAX_AREA_BYTES = 64 << 20

_ALIGN = 64
#: The masks' key of a column: gymnasium's ``_key``.
_MASK = "_"
#: Key of batched infos' list of Python-scalar columns (see :func:`aioenv.wire.infos.batch_infos`): not a column.
_PY = "_aioenv_python_scalars"


def _scalar_type(dtype: np.dtype[Any], python: bool) -> type | None:
    """The one value type a scalar column of ``dtype`` takes: the Python type that makes that dtype (``python``:
    ``float`` float64, ``int`` the platform's int64, ``bool`` bool) or else the dtype's numpy scalar type (None for
    bool: gymnasium makes an object column of ``np.bool_`` values, so no bool column comes from them)."""
    if python:
        for kind in (bool, int, float):
            if np.dtype(kind) == dtype:
                return kind
        return None
    return None if dtype == np.dtype(np.bool_) else dtype.type


#: An area's masks ``(K, num_envs)`` bool and, per dtype, its scalar columns' values ``(k, num_envs)`` with their
#: indices among the K (see :attr:`InfoArea.blocks`).
_Blocks = tuple[np.ndarray, list[tuple[np.ndarray, list[int]]]]


class InfoColumn(NamedTuple):
    """One key of an info area: its values ``(num_envs, *shape)`` and mask ``(num_envs,)`` bool in shared memory, and
    what a value must be to go there: ``scalar``, the one type of a column of scalars (a Python or a numpy scalar
    type, never both: an object column elsewhere in the batch keeps each value's own type), None for a column of
    arrays (ndarrays of its dtype and row shape)."""

    values: np.ndarray
    mask: np.ndarray
    scalar: type | None
    python: bool

    def fits(self, value: Any) -> bool:
        """Whether ``value`` is of exactly the type and shape this column holds."""
        kind = type(value)
        if self.scalar is not None:
            return kind is self.scalar
        values = self.values
        return kind is np.ndarray and value.dtype == values.dtype and value.shape == values.shape[1:]


def plan(binfo: dict[str, Any], num_envs: int, at: int) -> dict[str, Any] | None:
    """The layout of an info area for the keys of ``binfo`` (one lane reply's batched info, see
    :func:`aioenv.wire.infos.batch_infos`), for ``num_envs`` envs, at byte ``at`` of the slab's file (a multiple of
    the page size): ``{"at": at, "size": bytes, "cols": [[key, dtype str, row shape, offset, mask offset, python],
    ...]}``, offsets within the area, ``python``: the column's values were Python scalars. None when some key is not
    a typed column (a nested dict, strings, objects, ``final_obs``), or the area would exceed :data:`MAX_KEYS` or
    :data:`MAX_AREA_BYTES`: those infos keep their RESULTs."""
    keys = [key for key in binfo if key != _PY and not (type(key) is str and key[:1] == _MASK and key[1:] in binfo)]
    python = binfo.get(_PY) or ()
    if not keys or len(keys) > MAX_KEYS or at % mmap.PAGESIZE:
        return None
    offset = 0

    def place(nbytes: int) -> int:
        nonlocal offset
        start = offset
        offset += -(-nbytes // _ALIGN) * _ALIGN
        return start

    checked: list[tuple[str, np.dtype[Any], list[int], int, bool]] = []  # key, dtype, row shape, row bytes, python
    for key in keys:
        column = binfo[key]
        if type(key) is not str or key == "final_obs" or type(column) is not np.ndarray:
            return None
        if column.ndim == 0 or column.dtype.hasobject or column.dtype.kind not in "biufc":
            return None
        shape = list(column.shape[1:])
        row = int(np.prod(shape, dtype=np.int64)) * column.dtype.itemsize
        if row * num_envs > MAX_AREA_BYTES:
            return None
        scalar = column.ndim == 1
        if scalar and _scalar_type(column.dtype, key in python) is None:
            return None  # (0-d bool arrays: a column of them would take no scalar)
        checked.append((key, column.dtype, shape, row, scalar and key in python))
    # The scalar columns of one dtype back to back, a (keys, num_envs) block, and every mask in one (K, num_envs)
    # block after them (see InfoArea.blocks); a column of arrays on its own.
    values_at: dict[str, int] = {}
    by_dtype: dict[np.dtype[Any], list[tuple[str, int]]] = {}
    for key, dtype, shape, row, _ in checked:
        if shape:
            values_at[key] = place(row * num_envs)
        else:
            by_dtype.setdefault(dtype, []).append((key, row))
    for group in by_dtype.values():
        base = place(sum(row * num_envs for _, row in group))
        for i, (key, row) in enumerate(group):
            values_at[key] = base + i * row * num_envs
    masks = place(len(checked) * num_envs)
    cols = [
        [key, dtype.str, shape, values_at[key], masks + j * num_envs, python]
        for j, (key, dtype, shape, _, python) in enumerate(checked)
    ]
    if offset > MAX_AREA_BYTES:
        return None
    return {"at": at, "size": max(offset, 1), "cols": cols}


class InfoArea:
    """The info area of a slab (see the module docstring), over ``buffer`` (the area's bytes) as ``layout`` (from
    :func:`plan`) lays it out for ``num_envs`` envs.

    Attributes:
        columns: key -> :class:`InfoColumn`, in the order of the reply that planned the area.

    Raises:
        ValueError: ``layout`` is malformed or does not fit ``buffer``.
    """

    def __init__(self, buffer: mmap.mmap, layout: dict[str, Any], num_envs: int) -> None:
        size = len(buffer)
        columns: dict[str, InfoColumn] = {}
        for key, dtype_str, shape, values_at, mask_at, python in layout["cols"]:
            dtype = np.dtype(dtype_str)
            if dtype.hasobject or type(key) is not str:
                raise ValueError(f"an info column {key!r} of dtype {dtype} cannot lie in shared memory")
            rows = (num_envs, *(int(d) for d in shape))
            count = int(np.prod(rows, dtype=np.int64))
            if values_at < 0 or mask_at < 0 or values_at + count * dtype.itemsize > size or mask_at + num_envs > size:
                raise ValueError(f"the info column {key!r} lies beyond the area's {size} bytes")
            values = np.frombuffer(buffer, dtype, count, int(values_at)).reshape(rows)
            mask = np.frombuffer(buffer, np.bool_, num_envs, int(mask_at))
            scalar = _scalar_type(dtype, bool(python)) if values.ndim == 1 else None
            if values.ndim == 1 and scalar is None:
                raise ValueError(f"the info column {key!r} of {dtype} takes no scalar")
            columns[key] = InfoColumn(values, mask, scalar, bool(python))
        self.columns = columns
        #: Where every column is a scalar one, as :func:`plan` lays them out (MuJoCo's nine floats): the masks
        #: ``(K, num_envs)`` bool as one view of the area, and the values as one ``(k, num_envs)`` view per dtype with
        #: the indices of its columns among the K: a batch reads the masks and each dtype's values with one copy each,
        #: and each key's column is a row of those. None otherwise (each column is read on its own).
        self.blocks = _blocks(buffer, layout, columns, num_envs)
        #: Each key and its mask's key, in the order of :meth:`batch`'s output: ``key, _key, ...``.
        self._names = [name for key in columns for name in (key, _MASK + key)]
        #: Whether :attr:`blocks` is one block of values whose rows are the columns in order (one dtype).
        groups = [] if self.blocks is None else self.blocks[1]
        self._one_block = len(groups) == 1 and groups[0][1] == list(range(len(columns)))
        names = list(columns)
        #: With :attr:`blocks`: each dtype's block and the keys of its rows, in order, for a write of every key of every
        #: row in one assignment per block (:meth:`write`); and each key's one value type.
        self._write_groups = [(block, [names[j] for j in indices]) for block, indices in groups]
        self._types: dict[str, type] = {key: column.scalar for key, column in columns.items() if column.scalar}

    # ------------------------------------------------------------ a worker's side

    def write(self, infos: Sequence[dict[str, Any] | None], at: slice) -> bool:
        """Write the infos of the rows ``at`` (one per row, None: the env had none) to the area, when every key is
        one of its columns and every value fits it (:meth:`InfoColumn.fits`); rows that lack a key get a zero and a
        False mask, as gymnasium's batch has them. Returns whether it did (False: nothing is written that a reader
        will see, and the infos go in a RESULT). Where every column is a scalar one
        (:attr:`blocks`) and every row has every key, each dtype's columns are written in one assignment and the masks
        in one (MuJoCo's nine floats: two assignments of values, eight float64 and one float32, and one of masks, where
        a column at a time took eighteen)."""
        if self.blocks is not None:
            whole = self._write_whole(infos, at)
            if whole is not None:
                return whole
        columns = self.columns
        full = True
        for info in infos:
            if not info:
                full = False
                continue
            if len(info) != len(columns):
                full = False
            for key, value in info.items():
                column = columns.get(key) if type(key) is str else None
                if column is None or not column.fits(value):
                    return False
        try:
            if full:  # every row has every key (the area's keys, each once): a column a key
                for key, column in columns.items():
                    column.values[at] = [info[key] for info in infos]  # type: ignore[index]
                    column.mask[at] = True
                return True
            for key, column in columns.items():
                rows = [i for i, info in enumerate(infos) if info and key in info]
                values, mask = column.values[at], column.mask[at]
                values[...] = 0
                mask[...] = False
                if rows:
                    values[rows] = [infos[i][key] for i in rows]  # type: ignore[index]
                    mask[rows] = True
        except (OverflowError, ValueError, TypeError):  # an int beyond the column's range: the RESULT carries it
            return False
        return True

    def _write_whole(self, infos: Sequence[dict[str, Any] | None], at: slice) -> bool | None:
        """:meth:`write` of rows that each have every key of an area of scalar columns (:attr:`blocks`), each value of
        its column's one type: each dtype's block of columns in one assignment, the masks in one. None: some row is
        not such a row (:meth:`write` looks at them the general way)."""
        types = self._types
        keys = len(types)
        for info in infos:
            if not info or len(info) != keys:
                return None
            for key, value in info.items():
                if types.get(key) is not type(value):
                    return None
        assert self.blocks is not None, "only an area of scalar columns is written in blocks"
        try:
            for block, names in self._write_groups:
                block[:, at] = [[info[key] for info in infos] for key in names]  # type: ignore[index]
        except (OverflowError, ValueError, TypeError):  # an int beyond the column's range: the RESULT carries it
            return False
        self.blocks[0][:, at] = True
        return True

    # ------------------------------------------------------------ the pool's side

    def batch(self, rows: slice | np.ndarray) -> dict[str, Any]:
        """The infos of ``rows`` (a slice, or ``(B,)`` intp env ids), in the batch's row order, as gymnasium's vector
        envs batch them: every key some row has, its values ``(B, *shape)`` and its mask ``_key`` ``(B,)`` bool (all
        copies; with :attr:`blocks`, rows of a copy per block). Read before the rows' envs are freed."""
        if self.blocks is not None:
            return self._batch_blocks(self.blocks, rows)
        out: dict[str, Any] = {}
        if type(rows) is slice:  # views: copied
            for key, column in self.columns.items():
                mask = column.mask[rows]
                if mask.any():
                    out[key] = column.values[rows].copy()
                    out[_MASK + key] = mask.copy()
            return out
        assert isinstance(rows, np.ndarray)
        for key, column in self.columns.items():  # (take: copies already)
            mask = column.mask.take(rows)
            if mask.any():
                out[key] = column.values.take(rows, 0)
                out[_MASK + key] = mask
        return out

    def _batch_blocks(self, blocks: _Blocks, rows: slice | np.ndarray) -> dict[str, Any]:
        """:meth:`batch` where the area has :attr:`blocks`: the masks and each dtype's values read with one copy."""
        block_masks, groups = blocks
        if type(rows) is slice:
            masks = block_masks[:, rows].copy()
            taken = [block[:, rows].copy() for block, _ in groups]
        else:
            index = np.asarray(rows, np.intp)
            masks = block_masks.take(index, 1)
            taken = [block.take(index, 1) for block, _ in groups]
        if self._one_block and masks.all():
            # Every row has every key, all of one dtype (MuJoCo's nine floats): each key's values and mask are the
            # rows of the two copies, paired in C loops where the general way below takes a Python turn per key
            # (32 Ant-v5 on 16 workers: 52 µs of the pool's CPU a batch, 9.3 µs in a loop of its own; 7.8 this way).
            return dict(zip(self._names, chain.from_iterable(zip(taken[0], masks, strict=True)), strict=True))
        values: list[Any] = [None] * masks.shape[0]
        for copy, (_, indices) in zip(taken, groups, strict=True):
            for i, j in enumerate(indices):
                values[j] = copy[i]
        out: dict[str, Any] = {}
        any_row = cast("list[bool]", masks.any(axis=1).tolist())
        for j, (key, has) in enumerate(zip(self.columns, any_row, strict=True)):
            if has:
                out[key] = values[j]
                out[_MASK + key] = masks[j]
        return out

    def dicts(self, first: int, count: int) -> list[dict[str, Any]]:
        """The infos of the rows ``first .. first + count - 1`` as each env returned them: one dict per row (``{}``:
        it had none), each value of the type the env gave (:meth:`write` took only values of exactly their column's
        type: a Python scalar back as one, a numpy scalar as one of the column's dtype, an array as a copy of its
        shape), its keys in the area's order. What Stable-Baselines3's adapter asks for (``info_list``). Read before
        the rows' envs are freed."""
        out: list[dict[str, Any]] = [{} for _ in range(count)]
        at = slice(first, first + count)
        if self.blocks is not None:  # the flags in one read, each dtype's values in one
            block_masks, groups = self.blocks
            columns = list(self.columns.values())
            rows: list[list[Any]] = [[] for _ in columns]
            for block, indices in groups:
                part = block[:, at]
                python = part.tolist() if any(columns[j].python for j in indices) else None
                for i, j in enumerate(indices):  # (a view's scalars are copies already)
                    rows[j] = python[i] if python is not None and columns[j].python else list(part[i])
            for key, taken, flags in zip(self.columns, rows, block_masks[:, at].tolist(), strict=True):
                _put(out, key, taken, flags)
            return out
        for key, column in self.columns.items():
            has: list[bool] = column.mask[at].tolist()  # (a list: a few rows' test costs less than numpy's any/all)
            if not any(has):
                continue
            values = column.values[at]
            # (a view's scalars are copies already; an array column's rows are views of one copy, none of the area)
            values_of: list[Any] = (
                values.tolist() if column.python else list(values if column.scalar else values.copy())
            )
            _put(out, key, values_of, has)
        return out

    def binfo(self, rows: slice | np.ndarray) -> dict[str, Any]:
        """:meth:`batch` as a worker's batched info (:func:`aioenv.wire.infos.batch_infos`): a key every row has
        comes without a mask, and the columns of Python scalars are named, for :func:`aioenv.wire.infos.merge_infos`
        to merge with other replies' infos (an object column there holds each row's value as the env gave it)."""
        out = self.batch(rows)
        python = []
        for key, column in self.columns.items():
            mask = out.get(_MASK + key)
            if mask is None:
                continue
            if mask.all():
                del out[_MASK + key]
            if column.python:
                python.append(key)
        if python:
            out[_PY] = python
        return out


def _put(out: list[dict[str, Any]], key: str, values: list[Any], has: list[bool]) -> None:
    """Each row's value of ``key`` into its dict of ``out``, where ``has`` says the row has one."""
    if all(has):
        for info, value in zip(out, values, strict=True):
            info[key] = value
        return
    for info, value, there in zip(out, values, has, strict=True):
        if there:
            info[key] = value


def _blocks(buffer: mmap.mmap, layout: dict[str, Any], columns: dict[str, InfoColumn], num_envs: int) -> _Blocks | None:
    """:attr:`InfoArea.blocks` of an area over ``buffer`` laid out as ``layout`` with these ``columns``, or None."""
    cols = layout["cols"]
    if not cols or any(column.scalar is None for column in columns.values()):
        return None
    masks_at = [int(col[4]) for col in cols]
    if any(at != masks_at[0] + j * num_envs for j, at in enumerate(masks_at)):
        return None
    masks = np.frombuffer(buffer, np.bool_, len(cols) * num_envs, masks_at[0]).reshape(len(cols), num_envs)
    by_dtype: dict[np.dtype[Any], list[int]] = {}
    for j, column in enumerate(columns.values()):
        by_dtype.setdefault(column.values.dtype, []).append(j)
    groups = []
    for dtype, indices in by_dtype.items():
        at = [int(cols[j][3]) for j in indices]
        step = num_envs * dtype.itemsize
        if any(a != at[0] + i * step for i, a in enumerate(at)):
            return None
        block = np.frombuffer(buffer, dtype, len(indices) * num_envs, at[0]).reshape(len(indices), num_envs)
        groups.append((block, indices))
    return masks, groups

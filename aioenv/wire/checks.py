"""Action checks for :mod:`aioenv.wire.spaces`: one closure per leaf of an action space, compiled once.

A check validates the whole batch for its leaf (shape, dtype, bounds; for a value leaf each env's value with
the space's ``contains``) and appends the checked leaf to ``out``. A bad batch is an
:class:`~aioenv.errors.InvalidAction` naming the first offending env (``env_id=None`` for a whole-batch
shape, dtype or structure error), where in the action it is, what was expected and what arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces as gs

from aioenv.errors import InvalidAction
from aioenv.wire.protocol import Pickled

# The reductions of the range checks, called as ufunc methods: ``a.max()`` goes through a Python wrapper
# (numpy's ``_methods._amax``) that costs about as much again on the small batches of a lock-step call.
_MAX = np.maximum.reduce
_MIN = np.minimum.reduce
#: Up to this many rows, a Discrete batch's range is checked with Python's ``min`` and ``max`` over its values
#: (``tolist``) instead of a ufunc reduction. Measured before a lock-step ``step()`` of 8 CartPole envs in the
#: caller's process: the reduction alone costs 1.9 µs and the list 0.9, but the reduction made the whole call
#: ~10 µs dearer and the list ~4.5 (numpy's reduction machinery seems to cost the env steps after it their warm
#: caches); 8 envs went from 0.88-0.93x to 0.94-0.97x ``SyncVectorEnv``'s speed (``benchmarks/bench_small.py``).
SMALL_BATCH = 64

#: A ``Text`` charset longer than this is named by its size in error messages (:func:`space_text`).
CHARSET_SHOWN = 100


def space_text(space: gs.Space[Any]) -> str:
    """``repr(space)`` for an error message, with each ``Text`` charset longer than :data:`CHARSET_SHOWN` named by
    its size: ``Text(0, 64, charset of 63,486 characters)``, not the characters (tens of thousands for a space
    of any Unicode text)."""
    if isinstance(space, gs.Text):
        n = len(space.character_set)
        if n > CHARSET_SHOWN:
            return f"Text({space.min_length}, {space.max_length}, charset of {n:,} characters)"
    elif isinstance(space, gs.Dict):
        return "Dict(" + ", ".join(f"{k!r}: {space_text(v)}" for k, v in space.spaces.items()) + ")"
    elif isinstance(space, gs.Tuple):
        return "Tuple(" + ", ".join(space_text(v) for v in space.spaces) + ")"
    elif isinstance(space, gs.Sequence):
        return f"Sequence({space_text(space.feature_space)}, stack={space.stack})"
    return repr(space)


__all__ = [
    "SMALL_BATCH",
    "Check",
    "Leaf",
    "box_checker",
    "dict_checker",
    "int_checker",
    "object_rows",
    "space_text",
    "text_checker",
    "tuple_checker",
    "value_checker",
]

Leaf = npt.NDArray[Any]
#: ``check(actions, env_ids, out)``: validate a batch of actions for envs ``env_ids``, append the checked leaf.
Check = Callable[[Any, Any, list[Leaf]], None]


def _fmt(x: Any) -> str:
    if isinstance(x, np.ndarray) and x.ndim:
        return np.array2string(x, separator=", ", threshold=24, edgeitems=4)
    s = repr(x.item() if isinstance(x, np.generic) else x)
    return s if len(s) <= 80 else s[:77] + "..."


def _where(path: str) -> str:
    return f" at action{path}" if path else ""


def _batch_error(path: str, env_ids: Any, expected: str, got: str) -> InvalidAction:
    n = len(env_ids)
    ids = ", ".join(str(int(e)) for e in env_ids[:8]) + (", ..." if n > 8 else "")
    return InvalidAction(
        f"invalid action batch for envs [{ids}]{_where(path)}: expected {expected}, got {got}",
        env_id=int(env_ids[0]) if n == 1 else None,
    )


def _row_error(path: str, env_ids: Any, row: int, expected: str, got: str) -> InvalidAction:
    env = int(env_ids[row])
    return InvalidAction(f"invalid action for env {env}{_where(path)}: expected {expected}, got {got}", env_id=env)


def _numeric_checker(
    space: Any,
    path: str,
    dtype_ok: Callable[[np.dtype[Any]], bool],
    dt_desc: str,
    within: Callable[[Leaf], bool],
    low: Leaf,
    high: Leaf,
    quiet_cast: bool = False,
) -> Check:
    """Shape/dtype/bounds checker for one numeric leaf; ``within`` is the fast test."""
    sdt, shape = np.dtype(space.dtype), tuple(space.shape)

    def expected(n: int) -> str:
        return f"an action in {space_text(space)} (batch shape {(n, *shape)}, {dt_desc})"

    def fail(a: Leaf, env_ids: Any) -> InvalidAction:
        bad = ~((a >= low) & (a <= high))  # NaN is bad too
        row = int(np.argmax(bad.reshape(len(env_ids), -1).any(axis=1)))
        got = _fmt(a[row])
        if bad.ndim > 1:
            e = np.unravel_index(int(np.argmax(bad[row].ravel())), bad.shape[1:])
            idx = tuple(int(i) for i in e)
            got += f" (element {idx} is outside [{_fmt(low[e])}, {_fmt(high[e])}])"
        return _row_error(path, env_ids, row, expected(len(env_ids)), got)

    def check(actions: Any, env_ids: Any, out: list[Leaf]) -> None:
        n = len(env_ids)
        a = actions
        if type(a) is not np.ndarray:
            try:
                a = np.asarray(actions)
            except (ValueError, TypeError) as e:
                got = f"{type(actions).__name__} that is not array-like ({e})"
                raise _batch_error(path, env_ids, expected(n), got) from e
        dt = a.dtype
        if a.shape != (n, *shape) or (dt is not sdt and not dtype_ok(dt)):
            got = f"shape {a.shape} dtype {dt}"
            raise _batch_error(path, env_ids, expected(n), got)
        if a.size and not within(a):
            raise fail(a, env_ids)
        if quiet_cast and dt is not sdt:  # float64 1e300 -> float32 inf is in an unbounded Box
            with np.errstate(over="ignore"):
                a = a.astype(sdt)
        out.append(a if a.dtype is sdt and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=sdt))

    return check


def int_checker(space: Any, start: Any, nvec: Any, path: str) -> Check:
    """Discrete/MultiDiscrete/MultiBinary: integer dtype, start <= a < start + nvec."""
    sdt = np.dtype(space.dtype)
    udt = np.dtype(f"u{sdt.itemsize}")
    lo = np.array(np.broadcast_to(np.asarray(start, dtype=sdt), space.shape))
    hi = np.asarray(lo + (np.asarray(nvec, dtype=sdt) - 1), dtype=sdt)
    span = (hi - lo).astype(udt)
    uniform = lo.size > 0 and bool(np.all(lo == lo.flat[0]) & np.all(span == span.flat[0]))
    lo_s = sdt.type(lo.flat[0]) if lo.size else sdt.type(0)
    span_s = int(span.flat[0]) if span.size else 0
    zero_start = not np.any(lo)
    is_mb = isinstance(space, gs.MultiBinary)
    kinds = "biu" if is_mb else "iu"
    first, last = int(lo_s), int(lo_s) + span_s  # a uniform range as Python ints, exact for every int dtype

    def within(a: Leaf) -> bool:
        if a.dtype is sdt or a.dtype == sdt:
            if a.ndim == 1 and uniform and a.size <= SMALL_BATCH:  # a Discrete batch of a few rows (see SMALL_BATCH)
                values: list[int] = a.tolist()
                return first <= min(values) and max(values) <= last
            # One reduction: a - start wraps around, so viewed unsigned it is
            # <= nvec - 1 exactly when start <= a <= start + nvec - 1.
            d = (a if zero_start else a - (lo_s if uniform else lo)).view(udt)
            return bool(_MAX(d, None) <= span_s) if uniform else not (d > span).any()
        # Mixed integer dtypes compare exactly in numpy 2 (no wrap-around).
        return a.dtype.kind == "b" or not ((a < lo) | (a > hi)).any()

    dt_desc = "integer or bool dtype" if is_mb else "integer dtype"
    return _numeric_checker(space, path, lambda dt: dt.kind in kinds, dt_desc, within, lo, hi)


def box_checker(space: gs.Box, path: str) -> Check:
    sdt, low, high = space.dtype, space.low, space.high
    free_low = sdt.kind == "f" and bool(np.all(np.isneginf(low)))
    free_high = sdt.kind == "f" and bool(np.all(np.isposinf(high)))
    lo_need = low.max() if low.size else 0  # pre-test thresholds (exact if uniform)
    hi_need = high.min() if high.size else 0
    uni_low, uni_high = bool(np.all(low == lo_need)), bool(np.all(high == hi_need))

    def within(a: Leaf) -> bool:
        # min/max propagate NaN, and NaN fails every comparison.
        if not free_low and not _MIN(a, None) >= lo_need and (uni_low or not (a >= low).all()):
            return False
        if not free_high and not _MAX(a, None) <= hi_need and (uni_high or not (a <= high).all()):
            return False
        return not (free_low and free_high and a.dtype.kind == "f" and np.isnan(_MIN(a, None)))

    def dtype_ok(dt: np.dtype[Any]) -> bool:
        return dt.kind in "biu" or (dt.kind == "f" and np.can_cast(dt, sdt, "same_kind"))

    desc = f"a real dtype castable to {sdt}"
    quiet = sdt.kind == "f" and bool(np.isinf(low).any() or np.isinf(high).any())
    return _numeric_checker(space, path, dtype_ok, desc, within, low, high, quiet)


def text_checker(space: gs.Text, path: str) -> Check:
    lo, hi, chars = space.min_length, space.max_length, space.character_set
    named = space_text(space)

    def check(actions: Any, env_ids: Any, out: list[Leaf]) -> None:
        n = len(env_ids)
        expected = f"a sequence of {n} str in {named}"
        if isinstance(actions, str | bytes) or not (
            isinstance(actions, Sequence) or (isinstance(actions, np.ndarray) and actions.ndim == 1)
        ):
            raise _batch_error(path, env_ids, expected, type(actions).__name__)
        if len(actions) != n:
            raise _batch_error(path, env_ids, expected, f"{len(actions)} values")
        arr = np.empty(n, dtype=object)
        for row, s in enumerate(actions):
            if not isinstance(s, str):
                why = f"a {type(s).__name__}, not a str"
            elif not lo <= len(s) <= hi:
                why = f"length {len(s)} not in {lo}..{hi}"
            elif not chars.issuperset(s):
                why = f"character {next(c for c in s if c not in chars)!r} not in charset"
            else:
                arr[row] = str(s)
                continue
            got = f"{_fmt(s)} ({why})"
            raise _row_error(path, env_ids, row, f"a str in {named}", got)
        out.append(arr)

    return check


def dict_checker(space: gs.Dict, parts: list[tuple[Any, Check]], path: str) -> Check:
    keys = [k for k, _ in parts]

    def check(actions: Any, env_ids: Any, out: list[Leaf]) -> None:
        if not isinstance(actions, Mapping):
            exp = f"a dict of batched actions with keys {keys} for {space_text(space)}"
            raise _batch_error(path, env_ids, exp, type(actions).__name__)
        if len(actions) != len(keys) or not all(k in actions for k in keys):
            missing = [k for k in keys if k not in actions]
            extra = [k for k in actions if k not in space.spaces]
            got = f"missing keys {missing}, unexpected keys {extra}"
            raise _batch_error(path, env_ids, f"the keys {keys} of {space_text(space)}", got)
        for key, child in parts:
            child(actions[key], env_ids, out)

    return check


def tuple_checker(space: Any, parts: list[Check], path: str) -> Check:
    def check(actions: Any, env_ids: Any, out: list[Leaf]) -> None:
        if not isinstance(actions, tuple | list) or len(actions) != len(parts):
            exp = f"a tuple of {len(parts)} batched actions for {space_text(space)}"
            raise _batch_error(path, env_ids, exp, f"{type(actions).__name__}")
        for child, sub in zip(parts, actions, strict=True):
            child(sub, env_ids, out)

    return check


def object_rows(values: Any) -> Leaf:
    """B per-env values as an object ndarray (B,), one value per row (a tuple or array stays one object)."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    return np.fromiter(values, dtype=object, count=len(values))  # item by item: nothing is broadcast


def value_checker(space: gs.Space[Any], path: str, wrap: bool) -> Check:
    """Graph, Sequence, OneOf and user-defined spaces: a sequence of B values, each in the space (``wrap``: the
    rows of a space that is not portable come out :class:`~aioenv.wire.protocol.Pickled`, ready for the wire)."""
    kind = type(space).__name__

    def check(actions: Any, env_ids: Any, out: list[Leaf]) -> None:
        n = len(env_ids)
        if not isinstance(actions, list | tuple | np.ndarray) or (isinstance(actions, np.ndarray) and not actions.ndim):
            raise _batch_error(path, env_ids, f"a sequence of {n} {kind} values", type(actions).__name__)
        rows = object_rows(actions)
        if len(rows) != n:
            raise _batch_error(path, env_ids, f"{n} {kind} values", f"{len(rows)}")
        for row, value in enumerate(rows):
            try:
                ok = bool(space.contains(value))
            except Exception:  # noqa: BLE001 - a value the space cannot even inspect is not in it
                ok = False
            if not ok:
                raise _row_error(path, env_ids, row, f"a value of {space_text(space)}", _fmt(value))
        if wrap:
            rows = object_rows([Pickled(value) for value in rows])
        out.append(rows)

    return check

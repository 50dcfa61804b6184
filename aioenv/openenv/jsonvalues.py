"""Gymnasium spaces as JSON: one value to JSON and back, checked, and each space's JSON schema.

What the HTTP and WebSocket port (:mod:`aioenv.openenv.serve`) sends and accepts for an env's observations
and actions. A value crosses as plain JSON: ``Box``, ``MultiDiscrete`` and ``MultiBinary`` as nested lists of
the space's shape, ``Discrete`` as an int, ``Text`` as a string, ``Dict`` as an object, ``Tuple`` and
``Sequence`` as arrays. An action that arrives is checked against the action space before any env sees it; the
error names what was expected and what arrived (:class:`JsonValueError`). Spaces with no JSON form (``Graph``,
``OneOf``, user-defined spaces) are refused when the port starts, with the reason (:func:`json_schema` raises).
Non-finite floats cross as ``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json`` reads and writes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["JsonValueError", "from_json", "json_schema", "jsonable", "to_json"]

#: The most items one array of an action may hold (a bound on the work one message asks for).
_MAX_ITEMS = 1 << 20


class JsonValueError(ValueError):
    """A JSON value that is not an element of its space; the message says what was expected and what arrived."""


def _shape_of(space: spaces.Space[Any]) -> str:
    return "x".join(str(d) for d in space.shape) if space.shape else "scalar"


def json_schema(space: spaces.Space[Any]) -> dict[str, Any]:
    """The JSON schema of one element of ``space``.

    Raises:
        TypeError: the space has no JSON form (``Graph``, ``OneOf``, a user-defined space).
    """
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1}
    if isinstance(space, spaces.Box):
        item: dict[str, Any] = {"type": "integer" if np.issubdtype(space.dtype, np.integer) else "number"}
        low, high = np.asarray(space.low), np.asarray(space.high)
        if low.size and np.all(low == low.flat[0]) and math.isfinite(float(low.flat[0])):
            item["minimum"] = low.flat[0].item()
        if high.size and np.all(high == high.flat[0]) and math.isfinite(float(high.flat[0])):
            item["maximum"] = high.flat[0].item()
        return _nested(item, space.shape, f"Box {_shape_of(space)} {space.dtype}")
    if isinstance(space, spaces.MultiBinary):
        return _nested({"type": "integer", "minimum": 0, "maximum": 1}, space.shape, "MultiBinary")
    if isinstance(space, spaces.MultiDiscrete):
        return _nested({"type": "integer", "minimum": 0}, space.shape, "MultiDiscrete")
    if isinstance(space, spaces.Text):
        return {"type": "string", "minLength": int(space.min_length), "maxLength": int(space.max_length)}
    if isinstance(space, spaces.Dict):
        return {
            "type": "object",
            "properties": {str(k): json_schema(s) for k, s in space.spaces.items()},
            "required": [str(k) for k in space.spaces],
            "additionalProperties": False,
        }
    if isinstance(space, spaces.Tuple):
        parts = [json_schema(s) for s in space.spaces]
        return {"type": "array", "prefixItems": parts, "minItems": len(parts), "maxItems": len(parts)}
    if isinstance(space, spaces.Sequence):
        return {"type": "array", "items": json_schema(space.feature_space)}
    raise TypeError(
        f"a {type(space).__name__} space has no JSON form (served: Box, Discrete, MultiDiscrete, "
        "MultiBinary, Text, Dict, Tuple, Sequence)"
    )


def _nested(item: dict[str, Any], shape: tuple[int, ...] | None, what: str) -> dict[str, Any]:
    schema = item
    for size in reversed(shape or ()):
        schema = {"type": "array", "items": schema, "minItems": size, "maxItems": size}
    return {**schema, "description": what}


def to_json(space: spaces.Space[Any], value: Any) -> Any:
    """One element of ``space`` (an observation or an action) as JSON-ready Python values."""
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return np.asarray(value).tolist()
    if isinstance(space, spaces.Text):
        return str(value)
    if isinstance(space, spaces.Dict):
        return {str(k): to_json(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return [to_json(s, v) for s, v in zip(space.spaces, value, strict=True)]
    if isinstance(space, spaces.Sequence):
        return [to_json(space.feature_space, v) for v in value]
    raise TypeError(f"a {type(space).__name__} space has no JSON form")


def from_json(space: spaces.Space[Any], data: Any, where: str = "action") -> Any:
    """The element of ``space`` that the JSON value ``data`` stands for, checked.

    ``where`` names the value in errors (``"action"``, ``"action['pos'][1]"``).

    Raises:
        JsonValueError: ``data`` is not an element of ``space``; the message names ``where``, what was expected
            and what arrived.
    """
    if isinstance(space, spaces.Discrete):
        start, n = int(space.start), int(space.n)
        if isinstance(data, bool) or not isinstance(data, int) or not start <= data < start + n:
            raise JsonValueError(f"{where}: expected an integer in [{start}, {start + n - 1}], got {_shown(data)}")
        return np.int64(data)
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return _array(space, data, where)
    if isinstance(space, spaces.Text):
        if not isinstance(data, str) or not space.contains(data):
            raise JsonValueError(
                f"{where}: expected a string of {space.min_length} to {space.max_length} characters from the "
                f"space's charset, got {_shown(data)}"
            )
        return data
    if isinstance(space, spaces.Dict):
        keys = [str(k) for k in space.spaces]
        if not isinstance(data, dict) or sorted(data) != sorted(keys):
            got = f"an object with keys {sorted(data)}" if isinstance(data, dict) else _shown(data)
            raise JsonValueError(f"{where}: expected an object with keys {sorted(keys)}, got {got}")
        return {k: from_json(s, data[str(k)], f"{where}[{str(k)!r}]") for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(data, list) or len(data) != len(space.spaces):
            raise JsonValueError(f"{where}: expected an array of {len(space.spaces)} items, got {_shown(data)}")
        return tuple(from_json(s, v, f"{where}[{i}]") for i, (s, v) in enumerate(zip(space.spaces, data, strict=True)))
    if isinstance(space, spaces.Sequence):
        if not isinstance(data, list) or len(data) > _MAX_ITEMS:
            raise JsonValueError(f"{where}: expected an array of at most {_MAX_ITEMS} items, got {_shown(data)}")
        return tuple(from_json(space.feature_space, v, f"{where}[{i}]") for i, v in enumerate(data))
    raise TypeError(f"a {type(space).__name__} space has no JSON form")


def _array(space: spaces.Box | spaces.MultiBinary | spaces.MultiDiscrete, data: Any, where: str) -> np.ndarray:
    kind = "number" if isinstance(space, spaces.Box) and not np.issubdtype(space.dtype, np.integer) else "integer"
    expected = f"an array of {kind}s of shape {space.shape}" if space.shape else f"a {kind}"
    if not _is_numbers(data, kind):
        raise JsonValueError(f"{where}: expected {expected}, got {_shown(data)}")
    try:
        value = np.asarray(data, dtype=space.dtype)
    except (ValueError, OverflowError):
        raise JsonValueError(f"{where}: expected {expected} ({space.dtype}), got {_shown(data)}") from None
    if value.shape != space.shape:
        raise JsonValueError(f"{where}: expected {expected}, got shape {value.shape}")
    if not space.contains(value):
        raise JsonValueError(f"{where}: {_shown(data)} is outside the space {space}")
    return value


def _is_numbers(data: Any, kind: str) -> bool:
    """Whether ``data`` is a number (an int for ``kind == "integer"``) or nested lists of them, no bools."""
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > _MAX_ITEMS:
            return False
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or not isinstance(item, int if kind == "integer" else (int, float)):
            return False
    return True


def _shown(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 80 else text[:77] + "..."


def jsonable(value: Any, depth: int = 0) -> Any:
    """An info value as JSON-ready Python values: numpy scalars and arrays as numbers and lists, mappings with
    their keys as strings, anything else as its ``repr`` (an info may hold any Python object)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist() if value.dtype.kind in "biufU" else [jsonable(v, depth + 1) for v in value.tolist()]
    if depth < 32 and isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if depth < 32 and isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    return repr(value)

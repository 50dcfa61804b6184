"""OpenEnv's JSON schemas as gymnasium spaces that cross aioenv's wire, and the values between the two.

An OpenEnv server publishes its action and observation models (pydantic) as JSON schemas at ``/schema``.
:func:`fields_of` turns one into a :class:`Field`: a gymnasium space with the two conversions a pool needs, an
observation's JSON into a value of the space (:meth:`Field.decode`) and an action of the space into the JSON the
server validates (:meth:`Field.encode`). The mapping, property by property:

- ``object`` with ``properties`` (a model, ``$ref``'d or inline): ``Dict`` of its properties;
- ``string``: ``Text`` (``maxLength``/``minLength`` when the schema gives them, else up to
  :data:`TEXT_MAX_LENGTH` characters; any character of Unicode's basic plane but the control characters other than
  tab, newline and carriage return);
- ``integer`` with ``minimum`` and ``maximum``: ``Discrete`` over that range; without: a ``Box`` of shape ``()``,
  int64;
- ``number``: a ``Box`` of shape ``()``, float64, with the schema's bounds (else infinite);
- ``boolean``: ``Discrete(2)`` (0 is false);
- ``array`` of numbers, integers or booleans with ``minItems == maxItems``: a ``Box`` of that length; any other
  ``array``: ``Sequence`` of its items' space;
- ``Optional[X]`` (``anyOf`` X and ``null``): X's space; a null observation value reads as X's empty value
  (``""``, 0, NaN, an empty sequence), and an action always sends X;
- anything else (a ``dict[str, Any]``, a union, an enum of mixed types): ``Text`` carrying the value as JSON,
  decoded with :func:`json.loads` before it is sent (text that is not JSON is sent as a JSON string).

An observation's ``done``, ``reward`` and ``metadata`` are not in its space: they become ``terminated``, the reward
and ``info`` (see :mod:`aioenv.openenv.env`); an action's ``metadata`` is left out likewise (the server's default,
an empty map, applies).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces as gs

__all__ = ["TEXT_CHARSET", "TEXT_MAX_LENGTH", "Field", "SchemaError", "fields_of"]

#: Longest string a ``Text`` space without ``maxLength`` in its schema holds.
TEXT_MAX_LENGTH = 1 << 16

#: The characters a ``Text`` space holds: Unicode's basic plane but surrogates and control characters (tab, newline
#: and carriage return stay). A charset is a space's, so every env of a pool shares one (see :func:`fields_of`).
TEXT_CHARSET = (
    "\t\n\r"
    + "".join(chr(c) for c in range(0x20, 0xD800) if not 0x7F <= c < 0xA0)
    + "".join(chr(c) for c in range(0xE000, 0xFFFE))
)

#: Observation properties that are not the observation's own: they become terminated, reward and info.
OBSERVATION_EXTRAS = ("done", "reward", "metadata")
#: Action properties left out of the space: the server's default applies.
ACTION_EXTRAS = ("metadata",)


@functools.lru_cache(maxsize=64)
def text_space(max_length: int, min_length: int) -> gs.Text:
    """The ``Text`` space of :data:`TEXT_CHARSET` for these lengths, one per process: a charset this size costs
    megabytes per space (gymnasium indexes it), so every field and env of a process shares it."""
    return gs.Text(max_length, min_length=min_length, charset=TEXT_CHARSET)


class SchemaError(ValueError):
    """A JSON schema that is not an object model (what OpenEnv publishes for actions and observations)."""


class Field:
    """A gymnasium space and the conversions between its values and JSON; subclasses per schema type."""

    space: gs.Space[Any]

    def decode(self, value: Any) -> Any:
        """The space's value for an observation's JSON ``value`` (None: the space's empty value)."""
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        """The JSON for an action's ``value`` (a value of the space, as a pool's row or a caller's dict gives it)."""
        raise NotImplementedError


class TextField(Field):
    """``string``: a ``Text`` space."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        hi = schema.get("maxLength", TEXT_MAX_LENGTH)
        lo = schema.get("minLength", 0)
        self.space = text_space(int(hi), min(int(lo), int(hi)))

    def decode(self, value: Any) -> Any:
        return "" if value is None else str(value)

    def encode(self, value: Any) -> Any:
        return str(value)


class JsonField(Field):
    """Whatever fits no other space: ``Text`` carrying JSON."""

    def __init__(self) -> None:
        self.space = text_space(TEXT_MAX_LENGTH, 0)

    def decode(self, value: Any) -> Any:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    def encode(self, value: Any) -> Any:
        text = str(value)
        try:
            return json.loads(text)
        except json.JSONDecodeError:  # not JSON (a sampled action, a plain word): the text itself, as a JSON string
            return text


class ScalarField(Field):
    """``integer`` without both bounds or ``number``: a ``Box`` of shape ``()``."""

    def __init__(self, schema: Mapping[str, Any], integer: bool) -> None:
        self.integer = integer
        dtype = np.int64 if integer else np.float64
        info: Any = np.iinfo(np.int64) if integer else None
        lo, hi = _bounds(schema)
        low = (info.min if lo is None else math.ceil(lo)) if integer else (-np.inf if lo is None else lo)
        high = (info.max if hi is None else math.floor(hi)) if integer else (np.inf if hi is None else hi)
        self.space = gs.Box(np.array(low, dtype=dtype), np.array(high, dtype=dtype), shape=(), dtype=dtype)
        self.empty = np.zeros((), dtype=dtype) if integer else np.full((), np.nan)

    def decode(self, value: Any) -> Any:
        return self.empty.copy() if value is None else np.asarray(value, dtype=self.space.dtype)

    def encode(self, value: Any) -> Any:
        item = np.asarray(value).item()
        return int(item) if self.integer else float(item)


class DiscreteField(Field):
    """``integer`` with both bounds: ``Discrete`` over them."""

    def __init__(self, lo: int, hi: int) -> None:
        self.space = gs.Discrete(hi - lo + 1, start=lo)
        self.start = lo

    def decode(self, value: Any) -> Any:
        return np.int64(self.start if value is None else int(value))

    def encode(self, value: Any) -> Any:
        return int(np.asarray(value).item())


class BoolField(Field):
    """``boolean``: ``Discrete(2)``."""

    def __init__(self) -> None:
        self.space = gs.Discrete(2)

    def decode(self, value: Any) -> Any:
        return np.int64(1 if value else 0)

    def encode(self, value: Any) -> Any:
        return bool(np.asarray(value).item())


class VectorField(Field):
    """A fixed-length ``array`` of numbers: a ``Box`` of that length."""

    def __init__(self, item: ScalarField | DiscreteField | BoolField, length: int) -> None:
        self.item = item
        sub = item.space
        if isinstance(sub, gs.Box):
            dtype: np.dtype[Any] = sub.dtype
            low, high = np.full(length, sub.low), np.full(length, sub.high)
        else:
            assert isinstance(sub, gs.Discrete)
            start, dtype = int(sub.start), np.dtype(np.int64)
            low, high = np.full(length, start), np.full(length, start + int(sub.n) - 1)
        self.space = gs.Box(low.astype(dtype), high.astype(dtype), shape=(length,), dtype=dtype)
        self.length = length

    def decode(self, value: Any) -> Any:
        if value is None:
            return np.zeros(self.length, dtype=self.space.dtype)
        return np.asarray([self.item.decode(v) for v in value], dtype=self.space.dtype)

    def encode(self, value: Any) -> Any:
        return [self.item.encode(v) for v in np.asarray(value).reshape(-1)]


class ListField(Field):
    """Any other ``array``: ``Sequence`` of its items' space."""

    def __init__(self, item: Field) -> None:
        self.item = item
        self.space = gs.Sequence(item.space)

    def decode(self, value: Any) -> Any:
        return tuple(self.item.decode(v) for v in (value or ()))

    def encode(self, value: Any) -> Any:
        return [self.item.encode(v) for v in value]


class ObjectField(Field):
    """An ``object`` with ``properties``: ``Dict`` of them."""

    def __init__(self, fields: dict[str, Field]) -> None:
        self.fields = fields
        self.space = gs.Dict({name: f.space for name, f in fields.items()})

    def decode(self, value: Any) -> Any:
        got = value if isinstance(value, Mapping) else {}
        return {name: f.decode(got.get(name)) for name, f in self.fields.items()}

    def encode(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a dict with keys {list(self.fields)}, got {type(value).__name__}")
        missing = [name for name in self.fields if name not in value]
        if missing:
            raise ValueError(f"expected a dict with keys {list(self.fields)}; missing {missing}")
        return {name: f.encode(value[name]) for name, f in self.fields.items()}


def fields_of(schema: Mapping[str, Any], leave_out: tuple[str, ...] = ()) -> ObjectField:
    """The :class:`ObjectField` of an OpenEnv model's JSON ``schema`` (pydantic's ``model_json_schema()``), without
    the properties in ``leave_out``; :class:`SchemaError` when the schema is not an object model."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"expected a JSON schema (a map), got {type(schema).__name__}")
    defs = schema.get("$defs") or schema.get("definitions") or {}
    top = _deref(schema, defs, 0)
    if top.get("type") != "object" or not isinstance(top.get("properties"), Mapping):
        raise SchemaError(f"expected the JSON schema of an object model (with 'properties'), got {dict(top)!r}"[:300])
    props = {k: v for k, v in top["properties"].items() if k not in leave_out}
    return ObjectField({name: _field(sub, defs, 1) for name, sub in props.items()})


_MAX_DEPTH = 32


def _deref(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
    while isinstance(schema.get("$ref"), str):
        if depth > _MAX_DEPTH:
            raise SchemaError(f"JSON schema nested deeper than {_MAX_DEPTH} levels (a recursive model?)")
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in defs:
            raise SchemaError(f"JSON schema refers to {schema['$ref']!r}, which it does not define")
        schema, depth = defs[name], depth + 1
    return schema


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, float | None]:
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    if "minimum" not in schema and isinstance(lo, int) and schema.get("type") == "integer":
        lo += 1
    if "maximum" not in schema and isinstance(hi, int) and schema.get("type") == "integer":
        hi -= 1
    ok = (int, float)
    return (float(lo) if isinstance(lo, ok) else None), (float(hi) if isinstance(hi, ok) else None)


def _field(schema: Any, defs: Mapping[str, Any], depth: int) -> Field:
    if depth > _MAX_DEPTH or not isinstance(schema, Mapping):
        return JsonField()
    schema = _deref(schema, defs, depth)
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        real = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
        return _field(real[0], defs, depth + 1) if len(real) == 1 else JsonField()
    kind = schema.get("type")
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return TextField({}) if all(isinstance(v, str) for v in values) else JsonField()
    if kind == "string":
        return TextField(schema)
    if kind == "boolean":
        return BoolField()
    if kind == "integer":
        lo, hi = _bounds(schema)
        if lo is not None and hi is not None and hi >= lo and hi - lo < 1 << 31:
            return DiscreteField(math.ceil(lo), math.floor(hi))
        return ScalarField(schema, integer=True)
    if kind == "number":
        return ScalarField(schema, integer=False)
    if kind == "array":
        item = _field(schema.get("items", {}), defs, depth + 1)
        n = schema.get("minItems")
        if (
            isinstance(item, ScalarField | DiscreteField | BoolField)
            and isinstance(n, int)
            and n == schema.get("maxItems")
        ):
            return VectorField(item, n)
        return ListField(item)
    if kind == "object" and isinstance(schema.get("properties"), Mapping) and schema["properties"]:
        return ObjectField({name: _field(sub, defs, depth + 1) for name, sub in schema["properties"].items()})
    return JsonField()

"""Gymnasium spaces and batched values, carried without pickle.

A space crosses the wire as a *description* (:func:`describe_space`): a dict made
only of dict/list/str/int/float/bool/None and numpy ndarrays, rebuilt with
:func:`space_from_description`. Batched values (B rows, one per env) cross it as a
flat list of *leaves*: numeric leaves are ndarrays (sent as raw buffers), text
leaves are object ndarrays of shape (B,) holding Python ``str``.

Batched value conventions, for a single-env space and B rows:

- ``Box``: ndarray (B, *space.shape), dtype space.dtype
- ``Discrete``: ndarray (B,), dtype space.dtype (int64 by default)
- ``MultiDiscrete``: ndarray (B, *nvec.shape), dtype space.dtype
- ``MultiBinary``: ndarray (B, *space.shape), dtype int8
- ``Text``: ndarray (B,) of dtype object holding str. NOTE: gymnasium's vector
  utilities batch Text as a *tuple* of str; aioenv uses an object array so that
  every leaf is an ndarray (fancy indexing, concatenation work the same).
- ``Dict``: dict with the space's keys, in the space's order, of batched children
- ``Tuple``: tuple of batched children
- ``Graph``, ``Sequence``, ``OneOf`` and user-defined ``gymnasium.spaces.Space``
  subclasses: a *value* leaf, an ndarray (B,) of dtype object holding each env's own
  value as gymnasium gives it (a ``GraphInstance``; a tuple, or for ``stack=True`` the
  stacked value; an ``(index, value)`` tuple; whatever the user's space samples).
  gymnasium batches these as a tuple of B values.

Leaves are ordered depth-first: Dict children in key order, Tuple children in
order. Graph, Sequence and OneOf values cross the wire as msgpack (arrays inside
them as raw bytes, a ``GraphInstance`` as an extension type). A user-defined space
and its values can only travel pickled: its description is the space object itself,
which :mod:`aioenv.wire.protocol` carries only between a pool and the workers it
started itself (``trusted``), never over a network socket.

Per-space plans (row writer/reader, flatten, action checker) are compiled once and
cached by space identity: a space must not be mutated after its first use here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces as gs

from aioenv._compat import dict_sort_keys, dict_space, discrete_space
from aioenv.wire.checks import (
    Check,
    Leaf,
    box_checker,
    dict_checker,
    int_checker,
    object_rows,
    text_checker,
    tuple_checker,
    value_checker,
)
from aioenv.wire.options import is_int
from aioenv.wire.protocol import Pickled

__all__ = [
    "MAX_BOX_ELEMENTS",
    "RowReader",
    "is_plain_leaf",
    "is_portable",
    "not_portable",
    "RowWriter",
    "check_actions",
    "concat_leaves",
    "describe_space",
    "for_wire",
    "has_object_leaves",
    "empty_batch",
    "from_leaves",
    "leaf_specs",
    "row_reader",
    "row_writer",
    "space_from_description",
    "take_rows",
    "to_leaves",
    "write_row",
]

RowWriter = Callable[[list[Leaf], int, Any], None]
RowReader = Callable[[list[Leaf], int], Any]
_Flatten = Callable[[Any, list[Leaf]], None]
_Unflatten = Callable[[list[Leaf]], Any]

_SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple, Graph, Sequence, OneOf"
_MAX_DEPTH = 32
#: The most elements a described Box may have (2**27: 128 MiB of uint8 per observation). A description states its
#: bounds in a few bytes when they are uniform, but rebuilding the space allocates them, and more: beyond this a
#: peer's description could exhaust the memory of the side that reads it.
MAX_BOX_ELEMENTS = 1 << 27
_DTYPE_RE = re.compile(r"[<>|=]?[biuf]\d{1,2}")


def _unsupported(space: Any) -> TypeError:
    return TypeError(f"unsupported space {space!r} ({type(space).__name__}): not a gymnasium.spaces.Space")


def is_portable(space: gs.Space[Any]) -> bool:
    """Whether ``space`` and its values can cross a network socket: no user-defined space class
    anywhere inside it (those travel pickled, between a pool and its own workers only)."""
    if isinstance(space, gs.Dict | gs.Tuple | gs.OneOf):
        subs = space.spaces.values() if isinstance(space, gs.Dict) else space.spaces
        return all(is_portable(s) for s in subs)
    if isinstance(space, gs.Sequence):
        return is_portable(space.feature_space)
    if isinstance(space, gs.Graph):
        return space.edge_space is None or is_portable(space.edge_space)
    return isinstance(space, _NATIVE)


def for_wire(space: gs.Space[Any], value: Any) -> Any:
    """One env's ``value`` of ``space`` ready for a message: the parts of user-defined spaces in it wrapped as
    :class:`~aioenv.wire.protocol.Pickled` (a final observation in an info, say); ``value`` itself when
    ``space`` is portable."""
    if _plan(space).portable:
        return value
    if isinstance(space, gs.Dict):
        return {key: for_wire(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gs.Tuple):
        return tuple(for_wire(sub, v) for sub, v in zip(space.spaces, value, strict=True))
    return Pickled(value)


def not_portable(space: gs.Space[Any], where: str) -> str:
    """Why ``space`` cannot be used ``where`` (a server, a remote pool): the words of the UsageError."""
    return (
        f"{where} cannot carry {space!r}: it is (or holds) a user-defined gymnasium space "
        f"({type(space).__module__}.{type(space).__qualname__}), whose values can only travel pickled, and aioenv "
        f"never unpickles what arrives over a network socket. Run this env in a local pool, or describe it with "
        f"gymnasium's own spaces ({_SUPPORTED})"
    )


# ----------------------------------------------------------------- descriptions
def describe_space(space: gs.Space[Any]) -> dict[str, Any]:
    """Describe ``space`` with plain values and ndarrays only (no RNG/seed).

    Shapes are lists, ``dtype`` is ``np.dtype.str`` (e.g. ``'<f4'``); MultiDiscrete nvec/start are ndarrays of
    the space's shape, and so are Box low/high, or one value each (a 0-d ndarray) when every element has it: a
    ``Box(0, 255, (40, 1024, 1024), uint8)`` is described in a few bytes, not twice 40 MiB.
    """
    if isinstance(space, gs.Box | gs.Discrete | gs.MultiDiscrete | gs.MultiBinary):
        dt = np.dtype(space.dtype)
        desc: dict[str, Any] = {"dtype": dt.str, "shape": list(space.shape or ())}
        if isinstance(space, gs.Box):
            desc.update(type="Box", low=_bound(space.low, dt), high=_bound(space.high, dt))
        elif isinstance(space, gs.Discrete):
            desc.update(type="Discrete", n=int(space.n), start=int(space.start))
        elif isinstance(space, gs.MultiDiscrete):
            nvec, start = np.array(space.nvec), np.array(space.start)
            desc.update(type="MultiDiscrete", nvec=nvec, start=start)
        else:
            mb = space.n
            n = int(mb) if isinstance(mb, int | np.integer) else [int(d) for d in mb]
            desc.update(type="MultiBinary", n=n)
        return desc
    if isinstance(space, gs.Text):
        return {
            "type": "Text",
            "min_length": int(space.min_length),
            "max_length": int(space.max_length),
            "charset": "".join(space.character_list),
        }
    if isinstance(space, gs.Dict):
        if not all(isinstance(key, str | int) for key in space.spaces):
            raise TypeError(f"{space!r}: only str/int Dict keys can be described")
        subs = [[key, describe_space(sub)] for key, sub in space.spaces.items()]
        return {"type": "Dict", "sort_keys": dict_sort_keys(space), "subspaces": subs}
    if isinstance(space, gs.Tuple):
        return {"type": "Tuple", "subspaces": [describe_space(s) for s in space]}
    return _describe_variable(space)


def _bound(values: npt.NDArray[Any], dt: np.dtype[Any]) -> npt.NDArray[Any]:
    """A Box bound as it is described: one value (a 0-d array) when every element has it, else every element."""
    bound = np.asarray(values, dtype=dt)
    if bound.size and (bound == bound.flat[0]).all():
        return np.array(bound.flat[0], dtype=dt)
    return bound.copy()


def _describe_variable(space: gs.Space[Any]) -> dict[str, Any]:
    """Graph, Sequence, OneOf, and a user-defined space (described by the space object itself)."""
    if isinstance(space, gs.Graph):
        edges = None if space.edge_space is None else describe_space(space.edge_space)
        return {"type": "Graph", "node_space": describe_space(space.node_space), "edge_space": edges}
    if isinstance(space, gs.Sequence):
        return {"type": "Sequence", "feature_space": describe_space(space.feature_space), "stack": bool(space.stack)}
    if isinstance(space, gs.OneOf):
        return {"type": "OneOf", "subspaces": [describe_space(s) for s in space.spaces]}
    if not isinstance(space, gs.Space):
        raise _unsupported(space)
    return {"type": "Custom", "space": Pickled(space)}


def _bad(kind: str, what: str) -> ValueError:
    return ValueError(f"malformed {kind} space description: {what}")


def _field(desc: Mapping[str, Any], key: str, kind: str) -> Any:
    if key not in desc:
        raise _bad(kind, f"missing field {key!r}")
    return desc[key]


def _int_field(desc: Mapping[str, Any], key: str, kind: str, minimum: int) -> int:
    v = _field(desc, key, kind)
    if not is_int(v) or v < minimum:
        raise _bad(kind, f"field {key!r} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _dtype_field(desc: Mapping[str, Any], kind: str, kinds: str) -> np.dtype[Any]:
    v = _field(desc, "dtype", kind)
    if not isinstance(v, str) or not _DTYPE_RE.fullmatch(v):
        raise _bad(kind, f"field 'dtype' must be a numeric dtype string, got {v!r}")
    try:
        dt = np.dtype(v)
    except TypeError as e:
        raise _bad(kind, f"field 'dtype' {v!r} is not a dtype ({e})") from e
    if dt.kind not in kinds:
        raise _bad(kind, f"field 'dtype' {v!r} is not allowed for {kind}")
    return dt


def _shape_field(desc: Mapping[str, Any], kind: str) -> tuple[int, ...]:
    v = _field(desc, "shape", kind)
    if not isinstance(v, list | tuple) or not all(is_int(d) and d >= 0 for d in v):
        raise _bad(kind, f"field 'shape' must be a list of integers >= 0, got {v!r}")
    return tuple(int(d) for d in v)


def _array_field(desc: Mapping[str, Any], key: str, kind: str, dt: np.dtype[Any], shape: Any) -> Leaf:
    v = _field(desc, key, kind)
    try:
        if not isinstance(v, np.ndarray | list | int | float):
            raise TypeError(type(v).__name__)
        src = np.asarray(v)
    except (ValueError, TypeError) as e:
        raise _bad(kind, f"field {key!r} is not a numeric array ({e})") from e
    if src.dtype.kind not in "biuf" or not np.can_cast(src.dtype, dt, "same_kind"):
        raise _bad(kind, f"field {key!r} has dtype {src.dtype}, expected {dt}")
    if shape is not None and src.shape != shape:
        raise _bad(kind, f"field {key!r} has shape {src.shape}, expected {shape}")
    return src.astype(dt)


def space_from_description(desc: dict[str, Any]) -> gs.Space[Any]:
    """Rebuild the space described by :func:`describe_space` (``==`` the original).

    The description may come from a network peer: anything unknown or malformed
    raises ``ValueError`` saying what is missing or wrong (never ``KeyError``).
    """
    return _build(desc, 0)


def _make(kind: str, ctor: Callable[..., gs.Space[Any]], *a: Any, **kw: Any) -> gs.Space[Any]:
    try:
        return ctor(*a, **kw)
    except (ValueError, TypeError, AssertionError, OverflowError) as e:
        raise ValueError(f"invalid {kind} space description: {e}") from e


def _build(desc: Any, depth: int) -> gs.Space[Any]:
    """The space a description (from :func:`describe_space`) stands for; ``ValueError`` naming what is wrong."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"space description nested deeper than {_MAX_DEPTH} levels")
    if not isinstance(desc, Mapping):
        raise ValueError(f"malformed space description (not a map): {desc!r}")
    kind = desc.get("type")
    builder = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if builder is None:
        raise ValueError(f"unknown space type {kind!r} in description ({_SUPPORTED})")
    return builder(desc, depth)


def _build_box(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    shape = _shape_field(desc, "Box")
    elements = math.prod(shape)
    if elements > MAX_BOX_ELEMENTS:  # its bounds alone would take gigabytes here, whatever the description's size
        raise _bad("Box", f"shape {list(shape)} has {elements} elements: at most {MAX_BOX_ELEMENTS}")
    dt = _dtype_field(desc, "Box", "biuf")
    low = _bound_field(desc, "low", dt, shape)
    high = _bound_field(desc, "high", dt, shape)
    return _make("Box", gs.Box, low=low, high=high, shape=shape, dtype=dt)


def _bound_field(desc: Mapping[str, Any], key: str, dt: np.dtype[Any], shape: tuple[int, ...]) -> Leaf:
    """A Box bound: an array of the space's shape, or one value for every element (see :func:`describe_space`)."""
    bound = _array_field(desc, key, "Box", dt, None)
    if bound.shape == ():
        return np.full(shape, bound, dtype=dt)
    if bound.shape != shape:
        raise _bad("Box", f"field {key!r} has shape {bound.shape}, expected {shape} or one value")
    return bound


def _build_discrete(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    n = _int_field(desc, "n", "Discrete", 1)
    start = _int_field(desc, "start", "Discrete", -(2**63))
    dt = _dtype_field(desc, "Discrete", "iu")
    return _make("Discrete", discrete_space, n, start, dt)


def _build_multi_discrete(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    dt = _dtype_field(desc, "MultiDiscrete", "iu")
    nvec = _array_field(desc, "nvec", "MultiDiscrete", dt, None)
    start = _array_field(desc, "start", "MultiDiscrete", dt, nvec.shape)
    return _make("MultiDiscrete", gs.MultiDiscrete, nvec, dtype=dt, start=start)


def _build_multi_binary(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    nb = _field(desc, "n", "MultiBinary")
    if isinstance(nb, list | tuple) and all(is_int(d) and d >= 0 for d in nb):
        nb = tuple(int(d) for d in nb)
    elif not (is_int(nb) and nb >= 0):
        raise _bad("MultiBinary", f"field 'n' must be an int or a list of ints, got {nb!r}")
    return _make("MultiBinary", gs.MultiBinary, nb)


def _build_text(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    max_len = _int_field(desc, "max_length", "Text", 0)
    min_len = _int_field(desc, "min_length", "Text", 0)
    chars = _field(desc, "charset", "Text")
    if not isinstance(chars, str) or not chars:
        raise _bad("Text", f"field 'charset' must be a non-empty str, got {chars!r}")
    return _make("Text", gs.Text, max_len, min_length=min_len, charset=chars)


def _subspaces(desc: Mapping[str, Any], kind: str) -> tuple[list[Any] | tuple[Any, ...], bool]:
    """A composite space's ``subspaces`` list and its ``sort_keys`` flag, checked."""
    subs, sort_keys = _field(desc, "subspaces", kind), desc.get("sort_keys", True)
    if not isinstance(subs, list | tuple) or not isinstance(sort_keys, bool):
        raise _bad(kind, "'subspaces' must be a list (and 'sort_keys' a bool)")
    return subs, sort_keys


def _build_tuple(desc: Mapping[str, Any], depth: int) -> gs.Space[Any]:
    subs, _ = _subspaces(desc, "Tuple")
    return _make("Tuple", gs.Tuple, [_build(d, depth + 1) for d in subs])


def _build_dict(desc: Mapping[str, Any], depth: int) -> gs.Space[Any]:
    subs, sort_keys = _subspaces(desc, "Dict")
    pairs: list[tuple[str | int, gs.Space[Any]]] = []
    for item in subs:
        if not (isinstance(item, list | tuple) and len(item) == 2) or not (
            isinstance(item[0], str | int) and not isinstance(item[0], bool)
        ):
            raise _bad("Dict", f"subspace entry {item!r} is not [key, description]")
        pairs.append((item[0], _build(item[1], depth + 1)))
    if len({k for k, _ in pairs}) != len(pairs):
        raise _bad("Dict", "duplicate keys in 'subspaces'")
    return _make("Dict", dict_space, pairs, sort_keys)


def _build_graph(desc: Mapping[str, Any], depth: int) -> gs.Space[Any]:
    nodes = _build(_field(desc, "node_space", "Graph"), depth + 1)
    edges_desc = _field(desc, "edge_space", "Graph")
    edges = None if edges_desc is None else _build(edges_desc, depth + 1)
    return _make("Graph", gs.Graph, nodes, edges)


def _build_sequence(desc: Mapping[str, Any], depth: int) -> gs.Space[Any]:
    feature = _build(_field(desc, "feature_space", "Sequence"), depth + 1)
    stack = _field(desc, "stack", "Sequence")
    if not isinstance(stack, bool):
        raise _bad("Sequence", f"field 'stack' must be a bool, got {stack!r}")
    return _make("Sequence", gs.Sequence, feature, stack=stack)


def _build_one_of(desc: Mapping[str, Any], depth: int) -> gs.Space[Any]:
    subs, _ = _subspaces(desc, "OneOf")
    return _make("OneOf", gs.OneOf, [_build(d, depth + 1) for d in subs])


def _build_custom(desc: Mapping[str, Any], _depth: int) -> gs.Space[Any]:
    space = _field(desc, "space", "Custom")  # an object only a trusted (pickle-carrying) decode can produce
    if isinstance(space, Pickled):  # a description that did not cross the wire
        space = space.value
    if not isinstance(space, gs.Space):
        raise _bad("Custom", f"field 'space' must be a gymnasium space, got {type(space).__name__}")
    return space


#: One builder per space type a description may name.
_BUILDERS: dict[str, Callable[[Mapping[str, Any], int], gs.Space[Any]]] = {
    "Box": _build_box,
    "Discrete": _build_discrete,
    "MultiDiscrete": _build_multi_discrete,
    "MultiBinary": _build_multi_binary,
    "Text": _build_text,
    "Tuple": _build_tuple,
    "Dict": _build_dict,
    "Graph": _build_graph,
    "Sequence": _build_sequence,
    "OneOf": _build_one_of,
    "Custom": _build_custom,
}
_NATIVE = (
    gs.Box,
    gs.Discrete,
    gs.MultiDiscrete,
    gs.MultiBinary,
    gs.Text,
    gs.Dict,
    gs.Tuple,
    gs.Graph,
    gs.Sequence,
    gs.OneOf,
)


# -------------------------------------------------------------------- plans
_Parts = tuple[RowWriter, RowReader, Check, _Flatten, _Unflatten]


class _Plan:
    """Closures compiled once per space; leaf indices and paths are baked in."""

    __slots__ = ("check", "flatten", "objects", "portable", "read", "specs", "unflatten", "write")

    def __init__(self, space: gs.Space[Any]) -> None:
        self.specs: list[tuple[str, tuple[int, ...]]] = []
        parts = self._compile(space, "")
        self.write, self.read, self.check, self.flatten, self.unflatten = parts
        self.objects = any(dt in ("text", "value") for dt, _ in self.specs)
        self.portable = is_portable(space)

    def _compile(self, space: gs.Space[Any], path: str) -> _Parts:
        if not isinstance(space, gs.Dict | gs.Tuple):
            return self._leaf(space, path)
        items = space.spaces.items() if isinstance(space, gs.Dict) else enumerate(space)
        subs = [(key, self._compile(sub, f"{path}[{key!r}]")) for key, sub in items]
        keyed = [(key, p[0], p[1], p[3], p[4]) for key, p in subs]

        def write(leaves: list[Leaf], i: int, value: Any) -> None:
            for key, w, _, _, _ in keyed:
                w(leaves, i, value[key])

        def flatten(value: Any, out: list[Leaf]) -> None:
            for key, _, _, f, _ in keyed:
                f(value[key], out)

        if isinstance(space, gs.Dict):

            def read(leaves: list[Leaf], i: int) -> Any:
                return {key: r(leaves, i) for key, _, r, _, _ in keyed}

            def unflatten(leaves: list[Leaf]) -> Any:
                return {key: u(leaves) for key, _, _, _, u in keyed}

            check = dict_checker(space, [(key, p[2]) for key, p in subs], path)
        else:

            def read(leaves: list[Leaf], i: int) -> Any:
                return tuple([r(leaves, i) for _, _, r, _, _ in keyed])

            def unflatten(leaves: list[Leaf]) -> Any:
                return tuple([u(leaves) for _, _, _, _, u in keyed])

            check = tuple_checker(space, [p[2] for _, p in subs], path)
        return write, read, check, flatten, unflatten

    def _leaf(self, space: gs.Space[Any], path: str) -> _Parts:
        k = len(self.specs)
        pickled = False
        if isinstance(space, gs.Text):
            check = text_checker(space, path)
            self.specs.append(("text", ()))
        elif isinstance(space, gs.Box):
            check = box_checker(space, path)
        elif isinstance(space, gs.Discrete):
            check = int_checker(space, space.start, space.n, path)
        elif isinstance(space, gs.MultiDiscrete):
            check = int_checker(space, space.start, space.nvec, path)
        elif isinstance(space, gs.MultiBinary):
            check = int_checker(space, 0, np.full(space.shape, 2), path)
        elif isinstance(space, gs.Space):  # Graph, Sequence, OneOf, user-defined: one object per row
            pickled = not is_portable(space)  # a user-defined space's values: only a trusted pipe carries them
            check = value_checker(space, path, wrap=pickled)
            self.specs.append(("value", ()))
        else:
            raise _unsupported(space)
        if len(self.specs) == k:
            self.specs.append((np.dtype(space.dtype).str, tuple(space.shape or ())))
        kind = self.specs[k][0]

        def write_as_is(leaves: list[Leaf], i: int, value: Any) -> None:
            leaves[k][i] = value

        def write_text(leaves: list[Leaf], i: int, value: Any) -> None:
            leaves[k][i] = value if type(value) is str else str(value)

        def write_pickled(leaves: list[Leaf], i: int, value: Any) -> None:
            leaves[k][i] = Pickled(value)

        write = write_text if kind == "text" else write_pickled if kind == "value" and pickled else write_as_is

        def read(leaves: list[Leaf], i: int) -> Any:
            return leaves[k][i]

        def flatten(value: Any, out: list[Leaf]) -> None:
            if isinstance(space, gs.Text) and not (isinstance(value, np.ndarray) and value.dtype.kind == "O"):
                arr = np.empty(len(value), dtype=object)
                arr[:] = [str(v) for v in value]
                value = arr
            elif kind == "value":
                value = object_rows(value)
            out.append(np.asarray(value))

        def unflatten(leaves: list[Leaf]) -> Any:
            return leaves[k]

        return write, read, check, flatten, unflatten


_PLANS: dict[int, tuple[gs.Space[Any], _Plan]] = {}
_NESTED = (gs.Dict, gs.Tuple)  # the spaces with children (a tuple: ``A | B`` would be built at every call)
#: Whether a space type is one of :data:`_NESTED` (or a subclass), by type: both are ABCs (``Mapping``, ``Sequence``),
#: whose ``isinstance`` runs ``ABCMeta.__instancecheck__`` in Python for any other space, twice each batch ``recv()``
#: returns.
_NESTED_TYPES: dict[type, bool] = {}


def _nested(space: gs.Space[Any]) -> bool:
    kind = type(space)
    nested = _NESTED_TYPES.get(kind)
    if nested is None:
        nested = _NESTED_TYPES[kind] = issubclass(kind, _NESTED)
    return nested


def _plan(space: gs.Space[Any]) -> _Plan:
    entry = _PLANS.get(id(space))
    if entry is not None and entry[0] is space:
        return entry[1]
    plan = _Plan(space)
    if len(_PLANS) >= 256:
        _PLANS.clear()
    _PLANS[id(space)] = (space, plan)  # holding the space keeps its id unique
    return plan


# ---------------------------------------------------------------- public API
def has_object_leaves(space: gs.Space[Any]) -> bool:
    """Whether a batch of ``space`` has a leaf that is not a numeric array (text, or a Graph, Sequence, OneOf or
    user-defined value): such a batch cannot live in shared memory and is not a tree of plain arrays."""
    return _plan(space).objects


def leaf_specs(space: gs.Space[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Per leaf: (``np.dtype.str``, ``"text"`` or ``"value"``, per-row shape); leaf = (B, *shape)."""
    return list(_plan(space).specs)


#: What a row of an object leaf holds before it is written.
_EMPTY: dict[str, Any] = {"text": "", "value": None}


def empty_batch(space: gs.Space[Any], n: int) -> list[Leaf]:
    """Leaves for ``n`` rows: np.empty (n, *shape) numeric, (n,) object of "" text and of None values."""
    return [
        np.full(n, _EMPTY[dt], dtype=object) if dt in _EMPTY else np.empty((n, *shape), dt)
        for dt, shape in _plan(space).specs
    ]


def row_writer(space: gs.Space[Any]) -> RowWriter:
    """Fast ``write(leaves, i, value)`` storing one env's value into row ``i``.

    Build it once per space and call it in hot loops (a single-leaf space costs
    one ``leaves[0][i] = value``).
    """
    return _plan(space).write


def is_plain_leaf(space: gs.Space[Any]) -> bool:
    """True for a space of one numeric leaf (Box, Discrete, MultiDiscrete, MultiBinary): its row ``i`` is read
    as ``leaves[0][i]`` and written with ``leaves[0][i] = value``, which hot loops do without a call. Not a Dict or
    Tuple of one such child: its value is a dict or tuple around the leaf's row."""
    specs = _plan(space).specs
    return not _nested(space) and len(specs) == 1 and specs[0][0] not in ("text", "value")


def write_row(space: gs.Space[Any], leaves: list[Leaf], i: int, value: Any) -> None:
    """Write one env's unbatched value (ndarray/int/dict/tuple/str) into row ``i``."""
    _plan(space).write(leaves, i, value)


def row_reader(space: gs.Space[Any]) -> RowReader:
    """``read(leaves, i)``: row ``i`` as one env's value, as gymnasium's ``iterate``.

    Box/MultiDiscrete/MultiBinary give a row view of shape space.shape (a numpy
    scalar for shape ()), Discrete a numpy integer, Text a str, Dict a dict, Tuple
    a tuple.
    """
    return _plan(space).read


def to_leaves(space: gs.Space[Any], batched: Any) -> list[Leaf]:
    """Flatten a batched value (module conventions) into leaves, without copies.

    A Text child may also be given as a tuple/list of B str (gymnasium style).
    """
    out: list[Leaf] = []
    _plan(space).flatten(batched, out)
    return out


def from_leaves(space: gs.Space[Any], leaves: Sequence[Leaf]) -> Any:
    """Inverse of :func:`to_leaves`: the dict/tuple structure around ``leaves``."""
    if len(leaves) == 1 and not _nested(space):  # a space of one leaf is that leaf
        return leaves[0]
    plan = _plan(space)
    if len(leaves) != len(plan.specs):
        raise ValueError(f"{space!r} has {len(plan.specs)} leaves, got {len(leaves)}")
    return plan.unflatten(list(leaves))


def take_rows(leaves: Sequence[Leaf], index: npt.NDArray[Any]) -> list[Leaf]:
    """Rows ``index`` (int array or bool mask, length K) of every leaf: (K, ...)."""
    return [leaf[index] for leaf in leaves]


def concat_leaves(parts: Sequence[Sequence[Leaf]]) -> list[Leaf]:
    """Row-concatenate leaf lists of one space: (B1, ...), (B2, ...) -> (B1+B2, ...)."""
    if not parts or len({len(p) for p in parts}) != 1:
        raise ValueError("concat_leaves needs one or more leaf lists of equal length")
    if len(parts) == 1:
        return list(parts[0])
    return [np.concatenate(col) for col in zip(*parts, strict=True)]


def check_actions(space: gs.Space[Any], actions: Any, env_ids: npt.NDArray[Any]) -> list[Leaf]:
    """Validate a batch of actions for envs ``env_ids`` (length B) against ``space``.

    ``actions`` follows the batched conventions (array-likes accepted for numeric
    leaves, a sequence of B str for Text, a dict/tuple of batched children).
    Returns contiguous leaves cast to the space dtypes (no copy when already
    right). Raises ``InvalidAction`` (a ``ValueError``) naming the first offending
    env id, or ``env_id=None`` for a whole-batch shape/dtype/structure error.
    """
    out: list[Leaf] = []
    entry = _PLANS.get(id(space))  # _plan's cache, looked up here: every step checks its actions
    (entry[1] if entry is not None and entry[0] is space else _plan(space)).check(actions, env_ids, out)
    return out

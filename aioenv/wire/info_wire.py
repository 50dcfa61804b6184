"""A batched info on the wire: its numeric columns as the message's raw arrays.

An env that returns the same numeric keys every step (MuJoCo's ``x_position``, ``reward_ctrl``, ...; Atari's
``lives``, ``frame_number``) has its infos batched column by column (:func:`aioenv.wire.infos.batch_infos`):
one array of B rows per key. Inside the msgpack header each such array is an extension value, packed and
unpacked on its own (~4 µs each way for a small one), so Ant-v5's nine keys made a worker's reply several
times dearer to encode and decode than its observations. :func:`binfo_to_wire` moves every top-level
numeric column (masks included) to the message's arrays, where it costs what an observation leaf costs
(~1 µs), and leaves ``None`` at its key in ``"binfo"``, which keeps the keys' order; ``"bcol"`` maps each
such key to its array. Object columns, nested dicts and lists stay in the header as before.

The columns a reader gets back are read-only views of the message, like its observation leaves: whatever
hands infos to a caller copies them (:func:`aioenv.wire.infos.whole_info`, ``concat_infos``, ``merge_infos``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioenv.wire.protocol import Key

__all__ = ["binfo_from_wire", "binfo_of", "binfo_to_wire", "put_binfo"]

_NUMERIC = frozenset("biufc")


def binfo_to_wire(binfo: dict[str, Any], arrays: list[Any]) -> tuple[dict[str, Any], dict[str, int] | None]:
    """``(binfo for the header, {key: index in arrays} or None)``: each numeric column of ``binfo`` appended to
    ``arrays`` and ``None`` in its place. ``binfo`` itself is not changed."""
    refs: dict[str, int] = {}
    for key, value in binfo.items():
        if type(value) is np.ndarray and value.ndim and value.dtype.kind in _NUMERIC:
            refs[key] = len(arrays)
            arrays.append(value)
    if not refs:
        return binfo, None
    return {key: None if key in refs else value for key, value in binfo.items()}, refs


def binfo_from_wire(binfo: Any, refs: Any, arrays: list[np.ndarray]) -> Any:
    """The batched info a message's ``"binfo"`` and ``"bcol"`` describe, with the columns from ``arrays`` (the
    message's). A reference that is not ``{key: index}`` of a ``None`` key and an array raises ``ValueError``
    (the message came from a peer)."""
    if refs is None:
        return binfo
    if type(refs) is not dict or type(binfo) is not dict:
        raise ValueError(f"'bcol' must map info keys to arrays, got {type(refs).__name__} for {type(binfo).__name__}")
    out = dict(binfo)
    for key, index in refs.items():
        if key not in out or out[key] is not None:
            raise ValueError(f"'bcol' names info key {key!r}, which 'binfo' does not hold as None")
        if type(index) is not int or not 0 <= index < len(arrays):
            raise ValueError(f"'bcol' refers info key {key!r} to array {index!r}, not one of {len(arrays)}")
        out[key] = arrays[index]
    return out


def put_binfo(fields: dict[str, Any], binfo: dict[str, Any], arrays: list[Any]) -> None:
    """Set a reply's ``"binfo"`` (and ``"bcol"`` when it has numeric columns) in ``fields``, the columns
    appended to the reply's ``arrays`` (see :func:`binfo_to_wire`)."""
    fields[Key.BATCHED_INFO], refs = binfo_to_wire(binfo, arrays)
    if refs is not None:
        fields[Key.INFO_COLUMNS] = refs


def binfo_of(header: dict[str, Any], arrays: list[np.ndarray]) -> Any:
    """The batched info of a decoded message (None: it has none), its columns from the message's ``arrays``;
    ``ValueError`` for malformed references (see :func:`binfo_from_wire`)."""
    refs = header.get(Key.INFO_COLUMNS)
    if refs is None:  # no numeric columns (most replies have no info at all): nothing to put back
        return header.get(Key.BATCHED_INFO)
    return binfo_from_wire(header.get(Key.BATCHED_INFO), refs, arrays)

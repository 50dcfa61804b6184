"""Rows of replies on the wire between a server and its client.

A server relays what its workers answered to the client that asked. ``encode_parts`` turns what became
ready for one client in one turn of the server's loop into one RESULT message, ``{"parts": [entry, ...]}``,
whose entries are of two kinds, each with its arrays among the message's frames:

- a *segment* ``{"id", "pos", "obs", "x", ...}`` (:class:`PartEntry`): rows of one client call, at
  positions ``pos`` of it: a whole-request reply cut by the server (failures, truncated rows);
- a *block* ``{"blk": [[id, pos, start], ...], "obs", "x", "k", ...}`` (:class:`BlockEntry`): the rows of
  one worker reply as the worker sent them (:class:`aioenv.core.replies.Block`), with the client call and
  positions each run of rows answers (rows ``start:start + len(pos)``); the client routes them with
  :func:`aioenv.core.replies.route_block`, as a coordinator routes its workers' replies.

Errors keep their type, message, remote type and traceback (:func:`aioenv.wire.errors.relay_wire`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from aioenv.core.replies import Block, Segment, int_lists
from aioenv.core.sinks import Part
from aioenv.wire.errors import from_wire, relay_wire
from aioenv.wire.info_wire import binfo_of, put_binfo
from aioenv.wire.protocol import Key, Op, encode, leaves_from_wire, leaves_to_wire

__all__ = ["BlockEntry", "PartEntry", "decode_block", "decode_part", "encode_parts", "parts_fields"]


class PartEntry(NamedTuple):
    """Rows of the client's call ``req_id``: ``part``'s rows sit at ``positions`` (k,) of that call."""

    req_id: int
    part: Part
    positions: np.ndarray


class BlockEntry(NamedTuple):
    """A block of rows as a worker sent them; ``segments``: ``(req_id, positions (k,), start)`` per run of
    rows (``start:start + k``) that answers the client's call ``req_id``."""

    block: Block
    segments: list[tuple[int, np.ndarray, int]]


def encode_parts(entries: list[PartEntry | BlockEntry]) -> list[Any]:
    """One RESULT carrying every entry, in order."""
    return encode(Op.RESULT, *parts_fields(entries))


def parts_fields(entries: list[PartEntry | BlockEntry]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header fields and arrays of :func:`encode_parts`'s RESULT, for a sender that adds fields of its own."""
    arrays: list[np.ndarray] = []
    out = [_block(e, arrays) if isinstance(e, BlockEntry) else _segment(e, arrays) for e in entries]
    return {Key.ID: None, Key.PARTS: out}, arrays


def _segment(entry: PartEntry, arrays: list[np.ndarray]) -> dict[str, Any]:
    req_id, part, positions = entry
    fields: dict[str, Any] = {Key.ID: req_id, Key.POS: positions.astype(np.int64, copy=False).tolist()}
    if part.obs is not None:
        extras = [part.reward, part.terminated, part.truncated]
        _put_rows(fields, part.obs, extras, part.infos, part.binfo, arrays)
    if part.values is not None:
        fields[Key.VALUES] = part.values
    if part.errors:
        fields[Key.ERRORS] = {int(row): relay_wire(err) for row, err in part.errors.items()}
    return fields


def _block(entry: BlockEntry, arrays: list[np.ndarray]) -> dict[str, Any]:
    block, segments = entry
    fields: dict[str, Any] = {
        Key.BLOCKS: [
            [req_id, positions.astype(np.int64, copy=False).tolist(), start] for req_id, positions, start in segments
        ],
        Key.ROWS_KIND: block.kind,
    }
    _put_rows(fields, block.obs, block.extras, block.infos, block.binfo, arrays)
    if block.errors:  # rebuilt here as the server's coordinator would, then relayed as such
        fields[Key.ERRORS] = {
            row: relay_wire(from_wire(desc, context=block.kind)) for row, desc in block.errors.items()
        }
    return fields


def _put_rows(
    fields: dict[str, Any], obs: list[np.ndarray], extras: list[np.ndarray], infos: Any, binfo: Any, arrays: list[Any]
) -> None:
    """Describe rows in ``fields``: obs leaves and ``x`` (reward, terminated, truncated) among ``arrays``, and
    ``info`` (each env's own dict: one-env requests, SB3-style info lists) or else ``binfo``."""
    fields[Key.OBS] = leaves_to_wire(obs, arrays)
    fields[Key.EXTRAS] = list(range(len(arrays), len(arrays) + len(extras)))
    arrays.extend(extras)
    if infos is not None:
        fields[Key.INFO] = infos
    elif binfo is not None:
        put_binfo(fields, binfo, arrays)


def decode_part(header: dict[str, Any], arrays: list[np.ndarray], env_ids: np.ndarray) -> Part:
    """The :class:`Part` of one segment of a RESULT from :func:`encode_parts` (``arrays``: the message's),
    for ``env_ids`` (its rows' envs)."""
    errors = {int(row): from_wire(desc) for row, desc in (header.get(Key.ERRORS) or {}).items()}
    if "obs" not in header:
        return Part(env_ids, errors=errors, values=header.get(Key.VALUES))
    obs = leaves_from_wire(header[Key.OBS], arrays)
    extras = [arrays[i] for i in header[Key.EXTRAS]]
    binfo = binfo_of(header, arrays)
    return Part(env_ids, obs, extras, header.get(Key.INFO), errors, binfo=binfo)


def decode_block(header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[Block, list[Segment]]:
    """The rows and segments (``(req_id, positions (k,) int64, start)``) of one block of a RESULT."""
    block = Block.from_header(header, arrays)
    n = block.size
    segments: list[Segment] = []
    blk = header[Key.BLOCKS]
    for (req_id, _, start), at in zip(blk, int_lists([pos for _, pos, _ in blk]), strict=True):
        if type(start) is not int or start < 0 or start + at.size > n:
            raise ValueError(f"a segment of {at.size} rows at {start!r} overruns a block of {n} rows")
        segments.append((req_id, at, start))
    return block, segments

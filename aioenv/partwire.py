"""Rows of a reply (a :class:`~aioenv.results.Part`) on the wire between a server and its client.

A server relays what its workers answered to the client that asked. ``encode_parts`` turns the parts
that became ready for one client in one turn of the server's loop (rows at ``positions`` of the client's
calls, possibly of several calls) into one RESULT message: ``{"parts": [segment, ...]}``, each segment
``{"id", "pos", ...}`` with its arrays among the message's frames. ``decode_part`` rebuilds a segment's
part on the client. Errors keep their type, message, remote type and traceback
(:func:`aioenv.errors.relay_wire`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioenv.errors import from_wire, relay_wire
from aioenv.protocol import Op, encode, leaves_from_wire, leaves_to_wire
from aioenv.results import Part

__all__ = ["decode_part", "encode_parts"]


def encode_parts(parts: list[tuple[int, Part, np.ndarray]]) -> list[Any]:
    """One RESULT carrying every ``(req_id, part, positions)``: the part's rows sit at ``positions`` (int64,
    shape ``(k,)``) of the client's call ``req_id``."""
    arrays: list[np.ndarray] = []
    segments = [_segment(req_id, part, positions, arrays) for req_id, part, positions in parts]
    return encode(Op.RESULT, {"id": None, "parts": segments}, arrays)


def _segment(req_id: int, part: Part, positions: np.ndarray, arrays: list[np.ndarray]) -> dict[str, Any]:
    fields: dict[str, Any] = {"id": req_id, "pos": positions.astype(np.int64, copy=False).tolist()}
    if part.obs is not None:
        fields["obs"] = leaves_to_wire(part.obs, arrays)
        fields["x"] = list(range(len(arrays), len(arrays) + 3))
        arrays.extend([part.reward, part.terminated, part.truncated])
        if part.infos is not None:
            fields["info"] = part.infos  # each env's own dict (one-env requests, SB3-style info lists)
        elif part.binfo is not None:
            fields["binfo"] = part.binfo
    if part.values is not None:
        fields["values"] = part.values
    if part.errors:
        fields["err"] = {int(row): relay_wire(err) for row, err in part.errors.items()}
    return fields


def decode_part(header: dict[str, Any], arrays: list[np.ndarray], env_ids: np.ndarray) -> Part:
    """The :class:`Part` of one segment of a RESULT from :func:`encode_parts` (``arrays``: the message's),
    for ``env_ids`` (its rows' envs)."""
    errors = {int(row): from_wire(desc) for row, desc in (header.get("err") or {}).items()}
    if "obs" not in header:
        return Part(env_ids, errors=errors, values=header.get("values"))
    obs = leaves_from_wire(header["obs"], arrays)
    extras = [arrays[i] for i in header["x"]]
    return Part(env_ids, obs, extras, header.get("info"), errors, binfo=header.get("binfo"))

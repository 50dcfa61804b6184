"""Rows of a reply (a :class:`~aioenv.results.Part`) on the wire between a server and its client.

A server relays what its workers answered to the client that asked: ``encode_part`` turns a part
(rows at ``positions`` of the client's call) into one RESULT message; ``decode_part`` rebuilds it on
the client. Errors keep their type, message, remote type and traceback (:func:`aioenv.errors.relay_wire`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioenv.errors import from_wire, relay_wire
from aioenv.protocol import Op, encode, leaves_from_wire, leaves_to_wire
from aioenv.results import Part

__all__ = ["decode_part", "encode_part"]


def encode_part(req_id: int, part: Part, positions: np.ndarray) -> list[Any]:
    """One RESULT for request ``req_id`` carrying ``part``'s rows, which sit at ``positions`` (int64, shape
    ``(k,)``) of the client's call."""
    arrays: list[np.ndarray] = []
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
    return encode(Op.RESULT, fields, arrays)


def decode_part(header: dict[str, Any], arrays: list[np.ndarray], env_ids: np.ndarray) -> Part:
    """The :class:`Part` a RESULT from :func:`encode_part` carries, for ``env_ids`` (its rows' envs)."""
    errors = {int(row): from_wire(desc) for row, desc in (header.get("err") or {}).items()}
    if "obs" not in header:
        return Part(env_ids, errors=errors, values=header.get("values"))
    obs = leaves_from_wire(header["obs"], arrays)
    extras = [arrays[i] for i in header["x"]]
    return Part(env_ids, obs, extras, header.get("info"), errors, binfo=header.get("binfo"))

"""Asking an aioenv server for its state (``aioenv status``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import zmq

from aioenv.errors import ProtocolError
from aioenv.transport.dial import dial
from aioenv.wire.errors import from_wire
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = ["fetch_status"]


async def fetch_status(
    endpoint: str, timeout: float = 3.0, curve_keys: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The state of the server at ``endpoint`` (see :meth:`aioenv.server.server.Server.status`).

    Raises:
        TimeoutError: no answer within ``timeout`` seconds.
        ProtocolError: the answer was not a status.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[dict[str, Any]] = loop.create_future()

    def on_message(frames: list[zmq.Frame]) -> None:
        try:
            header, _ = decode(frames)
        except ProtocolError as exc:
            if not answer.done():
                answer.set_exception(exc)
            return
        if answer.done():
            return
        if header[Key.OP] == Op.ERROR:
            answer.set_exception(from_wire(header.get(Key.ERROR)))
        else:
            answer.set_result(header)

    def on_lost(reason: str) -> None:
        if not answer.done():
            answer.set_exception(ConnectionError(f"the aioenv server at {endpoint}: {reason}"))

    # raises ConnectionError when nothing listens at a unix:// path
    dealer = dial(endpoint, f"status-{uuid.uuid4().hex[:12]}".encode(), on_message, on_lost, curve_keys)
    try:
        dealer.send(encode(Op.STATUS, {Key.ID: 1}))
        header = await asyncio.wait_for(answer, timeout)
    finally:
        dealer.close()
    return {k: v for k, v in header.items() if k not in ("v", "op", "id")}

"""The asyncio ROUTER socket: a bind that fails leaves no socket open."""

from __future__ import annotations

import gc

import pytest
import zmq

from aioenv.transport.router import Router


async def test_a_router_that_cannot_bind_closes_its_socket() -> None:
    first = Router("tcp://127.0.0.1:0", lambda _identity, _frames: None)
    try:
        with pytest.raises(zmq.ZMQError, match="Address already in use"):
            Router(first.endpoint, lambda _identity, _frames: None)
        gc.collect()  # an unclosed socket warns when collected, and warnings are errors here
    finally:
        first.close()

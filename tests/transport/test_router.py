"""The asyncio ROUTER socket: a bind that fails leaves no socket open; input is read after any send."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
import zmq

from aioenv.transport.router import Router
from tests.support.procs import HANG


async def test_a_router_that_cannot_bind_closes_its_socket() -> None:
    first = Router("tcp://127.0.0.1:0", lambda _identity, _frames: None)
    try:
        with pytest.raises(zmq.ZMQError, match="Address already in use"):
            Router(first.endpoint, lambda _identity, _frames: None)
        gc.collect()  # an unclosed socket warns when collected, and warnings are errors here
    finally:
        first.close()


async def test_input_waiting_behind_a_refused_send_is_still_read() -> None:
    """A send ZeroMQ refuses (a peer that is gone) can consume the descriptor's edge like any send: the
    router must look for input afterwards, or a message already waiting is not read until some other
    event (a steady client then times out while the server is up)."""
    got: asyncio.Queue[bytes] = asyncio.Queue()
    router = Router("tcp://127.0.0.1:0", lambda _identity, frames: got.put_nowait(frames[0].bytes))
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    try:
        peer.connect(router.endpoint)
        peer.send(b"first")
        assert await asyncio.wait_for(got.get(), HANG) == b"first"
        peer.send(b"second")
        deadline = time.monotonic() + HANG
        while not int(router.sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:  # as a send would: takes the edge
            assert time.monotonic() < deadline, "the message never reached the router"
            time.sleep(0.001)
        assert router.offer(b"a peer that is gone", [b"reply"]) == "gone"
        assert router.send(b"a peer that is gone", [b"reply"]) is False
        assert await asyncio.wait_for(got.get(), HANG) == b"second"
    finally:
        peer.close()
        router.close()

"""The asyncio ROUTER socket: a bind that fails leaves no socket open; input is read after any send; a tcp port out
of range is refused before ZeroMQ wraps it round to another port."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import socket
import time

import pytest
import zmq

import aioenv
from aioenv.errors import UsageError
from aioenv.transport.router import Dealer, PeerSocket, Router
from aioenv.transport.zmqio import check_tcp_port
from tests.support.procs import HANG


async def test_a_router_that_cannot_bind_closes_its_socket() -> None:
    first = Router("tcp://127.0.0.1:0", lambda _identity, _frames: None)
    try:
        with pytest.raises(zmq.ZMQError, match="Address already in use"):
            Router(first.endpoint, lambda _identity, _frames: None)
        gc.collect()  # an unclosed socket warns when collected, and warnings are errors here
    finally:
        first.close()


@pytest.mark.parametrize(
    ("endpoint", "bind", "refused"),
    [
        ("tcp://127.0.0.1:99999", True, "port 99999 of 'tcp://127.0.0.1:99999' is out of range: a tcp port is 0-65535"),
        ("tcp://0.0.0.0:65536", True, "port 65536"),
        ("tcp://127.0.0.1:-1", True, "port -1"),
        ("tcp://127.0.0.1:0", False, "port 0 of 'tcp://127.0.0.1:0' is out of range: a tcp port is 1-65535"),
        ("tcp://[::1]:70000", False, "port 70000"),
        ("tcp://127.0.0.1:0", True, None),  # a free port, chosen by the system
        ("tcp://127.0.0.1:65535", False, None),
        ("tcp://127.0.0.1:1", False, None),
        ("tcp://*:*", True, None),
        ("ipc:///tmp/x:99999", True, None),  # not a tcp port
        ("unix:///tmp/x:99999", False, None),
    ],
)
def test_tcp_ports_out_of_range_are_refused(endpoint: str, bind: bool, refused: str | None) -> None:
    if refused is None:
        check_tcp_port(endpoint, bind=bind)
    else:
        with pytest.raises(ValueError, match=re.escape(refused)):
            check_tcp_port(endpoint, bind=bind)


async def test_a_router_or_dealer_refuses_a_port_zeromq_would_wrap_round() -> None:
    # ZeroMQ alone binds tcp://127.0.0.1:99999 as port 34463 (99999 - 65536): the sockets must not
    with pytest.raises(ValueError, match=r"port 99999 .* out of range"):
        Router("tcp://127.0.0.1:99999", lambda _identity, _frames: None)
    with pytest.raises(ValueError, match=r"port 99999 .* out of range"):
        Dealer("tcp://127.0.0.1:99999", b"me", lambda _frames: None)
    gc.collect()  # no socket was opened to warn when collected


@pytest.mark.parametrize("endpoint", ["tcp://ünïcode:5555", "tcp://host:port"])
async def test_an_address_zeromq_cannot_dial_is_a_usage_error_naming_it(endpoint: str) -> None:
    """Not a bare ``zmq.error.ZMQError`` ("Invalid argument"): an aioenv error naming the address, from the socket
    and from the public API, with no socket left open."""
    with pytest.raises(UsageError, match=re.escape(f"cannot connect to {endpoint!r}")):
        Dealer(endpoint, b"me", lambda _frames: None)
    with pytest.raises(UsageError, match=re.escape(f"cannot connect to {endpoint!r}")) as refused:
        await aioenv.make("CartPole-v1", 1, endpoint=endpoint)
    assert "ASCII" in str(refused.value)
    gc.collect()  # no socket was left open to warn when collected


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


def test_cutting_a_peer_whose_descriptor_now_holds_something_else_changes_nothing() -> None:
    # A server cuts a peer it heard from long ago (a silent connection swept away, a dropped one): by then the
    # descriptor number may hold another socket, or a pipe (a worker's). Neither is touched, and nothing raises.
    ours, theirs = socket.socketpair()
    peer = PeerSocket(ours.fileno(), os.fstat(ours.fileno()).st_ino)
    assert peer.cut()  # its own socket: shut down
    assert theirs.recv(1) == b""  # the other end sees the end
    number = ours.fileno()
    ours.close()
    theirs.close()
    r, w = os.pipe()
    try:
        if number not in (r, w):  # the lowest free number is reused: make it hold a pipe's end
            os.dup2(r, number)
        assert not peer.cut()  # a pipe now: not a socket, not cut, no OSError
        os.write(w, b"x")
        assert os.read(number, 1) == b"x"  # the pipe still works
        a, b = socket.socketpair()
        try:
            os.dup2(a.fileno(), number)  # another socket now
            assert not peer.cut()  # another inode: left alone
            b.sendall(b"y")
            assert os.read(number, 1) == b"y"
        finally:
            a.close()
            b.close()
    finally:
        for fd in {r, w, number}:
            with contextlib.suppress(OSError):
                os.close(fd)

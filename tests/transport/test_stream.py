"""The unix-socket transport of ``aioenv serve`` (aioenv.transport.stream), over real sockets in this process."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioenv.transport.dial import dial
from aioenv.transport.router import Dealer
from aioenv.transport.stream import StreamDealer, StreamRouter, is_stream, unix_path
from tests.support.procs import HANG
from tests.support.servers import unix_bind


@pytest.fixture
def endpoint() -> Iterator[str]:
    address, where = unix_bind()
    try:
        yield address
    finally:
        shutil.rmtree(where, ignore_errors=True)


class Ends:
    """A router and what reached it, and one dealer and what reached that."""

    def __init__(self, endpoint: str, max_message_bytes: int | None = None) -> None:
        self.at_router: asyncio.Queue[tuple[bytes, list[bytes]]] = asyncio.Queue()
        self.gone: asyncio.Queue[tuple[bytes, str, bool]] = asyncio.Queue()
        self.at_dealer: asyncio.Queue[list[bytes]] = asyncio.Queue()
        self.lost: asyncio.Queue[str] = asyncio.Queue()
        self.router = StreamRouter(
            endpoint,
            lambda identity, frames: self.at_router.put_nowait((identity, [bytes(f) for f in frames])),
            on_gone=lambda identity, reason, eof: self.gone.put_nowait((identity, reason, eof)),
            max_message_bytes=max_message_bytes,
        )
        self.dealer = self.connect()

    def connect(self) -> StreamDealer:
        def at_dealer(frames: list[Any]) -> None:
            self.at_dealer.put_nowait([bytes(f) for f in frames])

        return StreamDealer(self.router.endpoint, at_dealer, self.lost.put_nowait)

    def close(self) -> None:
        self.dealer.close()
        self.router.close()


async def got(queue: asyncio.Queue[Any]) -> Any:
    return await asyncio.wait_for(queue.get(), HANG)


async def test_messages_cross_both_ways_whole(endpoint: str) -> None:
    ends = Ends(endpoint)
    try:
        big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: received in place, not through the small buffer
        sent = [[b"one"], [b"head", big, b""], [b"x" * 100, b"y"]]
        for frames in sent:
            assert ends.dealer.send(frames)
        received = [await got(ends.at_router) for _ in sent]
        identity = received[0][0]
        assert identity.startswith(b"unix-")
        assert {r[0] for r in received} == {identity}
        assert [r[1] for r in received] == [[bytes(memoryview(f)) for f in frames] for frames in sent]
        assert ends.router.offer(identity, [b"reply", big]) == "sent"
        back = await got(ends.at_dealer)
        assert back[0] == b"reply"
        np.testing.assert_array_equal(np.frombuffer(back[1], np.float32), big)
        other = ends.connect()  # a second client: an identity of its own
        other.send([b"hi"])
        second, _ = await got(ends.at_router)
        assert second != identity
        assert ends.router.connections == 2
        other.close()
    finally:
        ends.close()


async def test_a_client_that_closes_is_gone_and_cut_ends_a_client(endpoint: str) -> None:
    ends = Ends(endpoint)
    try:
        ends.dealer.send([b"hello"])
        identity, _ = await got(ends.at_router)
        other = ends.connect()
        other.send([b"hello"])
        other_id, _ = await got(ends.at_router)
        other.close()
        assert await got(ends.gone) == (other_id, "closed its connection", True)
        assert ends.router.offer(other_id, [b"late"]) == "gone"
        assert ends.router.cut(identity)
        assert "closed the connection" in await got(ends.lost)  # the client learns at once
        assert not ends.router.cut(identity)
        assert not ends.dealer.send([b"after"])
        assert ends.router.connections == 0
        assert ends.gone.empty()  # a cut is the router's own doing: no on_gone
    finally:
        ends.close()


async def test_garbage_or_an_oversized_message_ends_only_that_connection(endpoint: str) -> None:
    ends = Ends(endpoint, max_message_bytes=1 << 16)
    try:
        ends.dealer.send([b"ok"])
        good, _ = await got(ends.at_router)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(unix_path(ends.router.endpoint))
            raw.sendall(struct.pack("<I", 0) + os.urandom(64))  # a message of 0 frames: no framing at all
            _, reason, eof = await got(ends.gone)
            assert not eof
            assert "no message" in reason
        big = ends.connect()
        assert big.send([b"z" * (1 << 18)])  # 256 KiB over a 64 KiB bound
        _, reason, eof = await got(ends.gone)
        assert not eof
        assert f"a message of {(1 << 18) + 12} bytes (the limit is" in reason
        assert "closed the connection" in await got(ends.lost)
        assert ends.router.offer(good, [b"still here"]) == "sent"  # the other client is untouched
        assert await got(ends.at_dealer) == [b"still here"]
        big.close()
    finally:
        ends.close()


async def test_the_socket_file(endpoint: str) -> None:
    path = unix_path(endpoint)
    router = StreamRouter(endpoint, lambda _i, _f: None)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # its owner only: the file is what guards it
        with pytest.raises(OSError, match="already listens"):
            StreamRouter(endpoint, lambda _i, _f: None)
    finally:
        router.close()
    assert not os.path.exists(path)  # removed on close
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # what a server that died leaves: a socket file nobody listens on
    stale.close()
    StreamRouter(endpoint, lambda _i, _f: None).close()
    Path(path).write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        StreamRouter(endpoint, lambda _i, _f: None)


async def test_a_missing_directory_is_made_its_owners_only(endpoint: str) -> None:
    nested = endpoint.replace("/s.sock", "/a/b/s.sock")
    router = StreamRouter(nested, lambda _i, _f: None)
    try:
        made = os.path.dirname(unix_path(nested))
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(unix_path(nested)).st_mode)
    finally:
        router.close()


async def test_addresses_and_a_missing_server(endpoint: str) -> None:
    assert is_stream(endpoint)
    assert not is_stream("tcp://127.0.0.1:5555")
    assert not is_stream("ipc:///tmp/x")  # ZeroMQ's own unix sockets stay ZeroMQ's
    assert unix_path("unix:///run/a.sock") == "/run/a.sock"
    for bad in ("unix://", "tcp://127.0.0.1:5555"):
        with pytest.raises(ValueError, match="unix-socket address"):
            unix_path(bad)
    with pytest.raises(ConnectionError, match=f"cannot connect to the aioenv server at {endpoint}"):
        StreamDealer(endpoint, lambda _f: None, lambda _r: None)


async def test_dial_picks_the_transport_by_address(endpoint: str) -> None:
    """A client's connection is a unix-socket one for ``unix://`` (refused at once with nobody there), a ZeroMQ
    DEALER otherwise; messages cross a dialled unix connection."""
    with pytest.raises(ConnectionError, match=f"cannot connect to the aioenv server at {endpoint}"):
        dial(endpoint, b"client", lambda _f: None, lambda _r: None)
    ends = Ends(endpoint)
    link = dial(endpoint, b"client", ends.at_dealer.put_nowait, ends.lost.put_nowait)
    try:
        assert isinstance(link, StreamDealer)
        assert link.send([b"hello"])
        assert await got(ends.at_router) == (b"unix-2", [b"hello"])  # the second connection, after Ends' own
    finally:
        link.close()
        ends.close()
    zmq_link = dial("tcp://127.0.0.1:9", b"client", lambda _f: None, lambda _r: None)  # connects lazily
    try:
        assert isinstance(zmq_link, Dealer)
    finally:
        zmq_link.close()

"""A peer cannot make the server hold copies of what it sends: request ids are ints, never echoed."""

from __future__ import annotations

import time

import psutil
import zmq

from aioenv.wire.protocol import Key, Op, decode, encode
from aioenv.wire.version import PROTOCOL_VERSION
from tests.support.procs import HANG
from tests.support.servers import ServerProcess

MIB = 1 << 20


def _dealer(endpoint: str, *, reads: bool) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    if not reads:  # take (almost) nothing off the wire: replies pile up on the server's side
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.RCVBUF, 4096)
    sock.connect(endpoint)
    return sock


def test_a_request_id_that_is_not_an_int_is_refused_not_echoed(cartpole_server: ServerProcess) -> None:
    sock = _dealer(cartpole_server.endpoint, reads=True)
    try:
        sock.send_multipart(encode(Op.PING, {Key.ID: b"x" * 1000}))
        frames = sock.recv_multipart()
        header, _ = decode(frames)
        assert header[Key.OP] == Op.ERROR
        assert header[Key.ID] is None
        assert "a request id must be an int, got a bytes" in header[Key.ERROR]["message"]
        assert sum(len(f) for f in frames) < 1000  # the peer's bytes did not come back
        sock.send_multipart(encode(Op.PING, {Key.ID: 7}))
        assert decode(sock.recv_multipart())[0] == {Key.VERSION: PROTOCOL_VERSION, Key.OP: Op.PONG, Key.ID: 7}
    finally:
        sock.close()


def test_a_peer_that_sends_big_ids_and_never_reads_does_not_grow_the_server(cartpole_server: ServerProcess) -> None:
    """400 PINGs whose id is 1 MiB each, from a peer that reads nothing: the server's memory stays put (it
    used to queue a 1 MiB PONG for each, 400 MiB in all)."""
    process = psutil.Process(cartpole_server.proc.pid)
    before = process.memory_info().rss
    sock = _dealer(cartpole_server.endpoint, reads=False)
    try:
        big = b"x" * MIB
        for _ in range(400):
            sock.send_multipart(encode(Op.PING, {Key.ID: big}))
        time.sleep(2.0)  # let the server take them all in (not a speed check: a settling time)
        growth = process.memory_info().rss - before
        assert growth < 150 * MIB, f"the server grew by {growth / MIB:.0f} MiB"
    finally:
        sock.close()

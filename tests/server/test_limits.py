"""A peer cannot make the server hold copies of what it sends: request ids are ints, never echoed."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import psutil
import zmq

import aioenv
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
        pong = decode(sock.recv_multipart())[0]
        assert isinstance(pong.pop(Key.MARK), int)  # every message to a client carries a mark (aioenv.server.peers)
        assert pong == {Key.VERSION: PROTOCOL_VERSION, Key.OP: Op.PONG, Key.ID: 7}
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


def _rss(pid: int) -> int:
    """The resident memory of process ``pid`` in bytes (``VmRSS`` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def test_a_huge_name_and_unread_status_replies_do_not_grow_the_server(cartpole_server: ServerProcess) -> None:
    """One connection opens a pool under a 16 MiB name, a second sends 40 STATUS and reads nothing: the name is
    refused (it used to be copied into every STATUS reply, 640 MiB queued for a peer that counted against no
    bound), the server's memory stays put and another client's pool is made and steps."""
    pid = cartpole_server.proc.pid
    before = _rss(pid)
    opener = _dealer(cartpole_server.endpoint, reads=True)
    flooder = _dealer(cartpole_server.endpoint, reads=False)
    try:
        fields = {Key.ID: -1, Key.ENV: "CartPole-v1", Key.NUM_ENVS: 1, Key.CLIENT: "n" * (16 * MIB)}
        opener.send_multipart(encode(Op.OPEN, fields))
        opened, _ = decode(opener.recv_multipart())
        for i in range(40):
            flooder.send_multipart(encode(Op.STATUS, {Key.ID: i}))
        deadline = time.monotonic() + HANG
        while True:  # the server has answered them all once a PING on the reading connection comes back
            opener.send_multipart(encode(Op.PING, {Key.ID: 7}))
            if decode(opener.recv_multipart())[0][Key.OP] == Op.PONG:
                break
            assert time.monotonic() < deadline
        time.sleep(1.0)  # a settling time, not a speed check
        growth = _rss(pid) - before
        assert growth < 150 * MIB, f"the server grew by {growth / MIB:.0f} MiB"
        assert opened[Key.OP] == Op.ERROR, "a pool was opened under a 16 MiB name"
        error = opened[Key.ERROR]
        assert isinstance(error, dict)
        assert error["type"] == "UsageError"
        assert "client name" in error["message"]
        assert len(error["message"]) < 1000

        async def still_served() -> None:
            async with aioenv.Pool("CartPole-v1", 2, endpoint=cartpole_server.endpoint, num_workers=1) as pool:
                await pool.reset(seed=0)
                obs, *_ = await pool.step(np.zeros(2, np.int64))
                assert obs.shape == (2, 4)

        asyncio.run(asyncio.wait_for(still_served(), HANG))
    finally:
        opener.close()
        flooder.close()


def test_answers_to_a_connection_without_a_pool_count_against_its_unread_bound() -> None:
    """A connection that opens no pool, sends 400 STATUS and reads none: what it leaves unread counts as a pool's
    does (it used to count against no bound), so it is dropped at --max-unread-bytes, once, and others are
    served."""
    srv = ServerProcess("--max-unread-bytes", "64KiB", "--max-queued", "100000")
    flooder = _dealer(srv.endpoint, reads=False)
    try:
        for i in range(400):
            flooder.send_multipart(encode(Op.STATUS, {Key.ID: i}))

        async def still_served() -> None:
            async with aioenv.Pool("CartPole-v1", 2, endpoint=srv.endpoint, num_workers=1) as pool:
                await pool.reset(seed=0)

        deadline = time.monotonic() + HANG
        while not [line for line in srv.log if "dropped" in line]:
            assert time.monotonic() < deadline, "".join(srv.log)
            time.sleep(0.1)
        asyncio.run(asyncio.wait_for(still_served(), HANG))
    finally:
        flooder.close()
        srv.stop()
    dropped = [line for line in srv.log if "dropped" in line]
    assert len(dropped) == 1, "".join(srv.log)
    assert "bytes of replies sent to it would be unread (the bound is 65536" in dropped[0]

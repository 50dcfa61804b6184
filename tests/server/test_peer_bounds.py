"""A client cannot make the server hold more than its bounds (``aioenv serve --max-queued``,
``--max-unread-bytes``, ``--max-message-bytes``): over them it is dropped, told why and logged once, and
other clients are served as before. Real server processes, real remote pools."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

import aioenv
from aioenv.errors import ConnectionLost, UsageError
from aioenv.server.status import fetch_status
from aioenv.wire.protocol import Key, Op, decode, encode
from tests.envs.bigenv import ACT_SHAPE
from tests.support.procs import HANG
from tests.support.servers import ServerProcess

BIG = "tests.envs.bigenv:make_big"  # observations of 27 KiB, actions of 64 KiB
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bounded_server() -> Iterator[ServerProcess]:
    """A server with small bounds: 1 MiB of unread replies, requests of at most 1 MiB."""
    srv = ServerProcess(
        "--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "1MiB", "--max-message-bytes", "1MiB"
    )
    try:
        yield srv
    finally:
        srv.stop()


def _actions(n: int, value: float = 0.001) -> np.ndarray:
    return np.full((n, *ACT_SHAPE), value, np.float32)


async def _still_served(endpoint: str) -> None:
    """Another client's pool opens and steps as if nothing happened."""
    async with aioenv.Pool(BIG, 2, endpoint=endpoint, num_workers=1, seed=3) as pool:
        obs, _ = await pool.reset()
        obs2, reward, *_ = await pool.step(_actions(2, 0.5))
        assert obs.shape == obs2.shape == (2, 96, 96, 3)
        assert reward.tolist() == [0.5, 0.5]


def test_a_client_that_reads_its_replies_is_never_dropped(bounded_server: ServerProcess) -> None:
    """40 times the bound in replies: the client acknowledges the server's marks as it reads, so what it
    has not read stays under 1 MiB all along."""

    async def main() -> int:
        received = 0
        async with aioenv.Pool(BIG, 8, endpoint=bounded_server.endpoint, seed=0) as pool:
            obs, _ = await pool.reset()
            received += obs.nbytes
            for _ in range(200):
                obs, *_ = await pool.step(_actions(8))
                received += obs.nbytes
        return received

    received = asyncio.run(main())
    assert received > 40 << 20


def test_a_client_over_its_unread_bound_is_dropped_told_why_and_released(bounded_server: ServerProcess) -> None:
    """A pool whose one reset answers 1.3 MiB at once, to a server that lets a client leave 1 MiB unread."""

    async def main() -> None:
        pool = await aioenv.make(BIG, 48, endpoint=bounded_server.endpoint, num_workers=1)
        try:
            with pytest.raises(
                ConnectionLost, match=r"dropped this pool: \d+ bytes of replies sent to it would be unread"
            ):
                await pool.reset()
            with pytest.raises(ConnectionLost, match="dropped this pool"):  # and every later call
                await pool.step(_actions(48))
            status = await fetch_status(bounded_server.endpoint)
            assert (status["sessions"], status["envs"]) == (0, 0)  # its envs are released at once
        finally:
            await pool.aclose()
        await _still_served(bounded_server.endpoint)

    asyncio.run(main())


def test_a_dropped_peer_is_cut_off_so_what_was_queued_for_it_is_freed(bounded_server: ServerProcess) -> None:
    """A raw client that opens a pool, asks for a reset of 1.3 MiB and reads nothing: the server drops it and
    ends its connection (ZeroMQ keeps what it queued for a peer until then); when the peer connects again,
    its next message is answered with why it was dropped."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    sock.setsockopt(zmq.IDENTITY, b"raw-client-1")  # as an aioenv client names itself: the same after a reconnect
    events = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    events.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    try:
        sock.connect(bounded_server.endpoint)
        fields = {Key.ID: -1, Key.ENV: BIG, Key.NUM_ENVS: 48, Key.CLIENT: "raw", Key.OPT: {"num_workers": 1}}
        sock.send_multipart(encode(Op.OPEN, fields))
        assert decode(sock.recv_multipart())[0][Key.OP] == Op.RESULT
        sock.send_multipart(encode(Op.RESET, {Key.ID: 1, Key.ENV: list(range(48)), Key.SEED: [None] * 48}))
        assert recv_monitor_message(events)["event"] == zmq.EVENT_DISCONNECTED  # the server ended it
        header: dict[str, object] = {}
        sock.setsockopt(zmq.RCVTIMEO, 1000)
        deadline = time.monotonic() + HANG
        while header.get(Key.EVENT) != "dropped":  # what was sent before the drop may come first
            assert time.monotonic() < deadline, "the server never said why it dropped the client"
            try:
                header = decode(sock.recv_multipart())[0]
            except zmq.Again:  # ZeroMQ reconnects by itself, but a PING sent meanwhile may be lost: as a
                sock.send_multipart(encode(Op.PING, {Key.ID: 2}))  # client's heartbeat does, ask again
        error = header[Key.ERROR]
        assert isinstance(error, dict)
        assert "would be unread (the bound is 1048576" in error["message"]
    finally:
        sock.disable_monitor()
        events.close()
        sock.close()


def test_a_request_larger_than_the_servers_bound_is_refused_before_it_is_sent(bounded_server: ServerProcess) -> None:
    """20 actions of 64 KiB (1.25 MiB) to a server that takes 1 MiB: a UsageError at the client, the envs
    free, and the same pool steps in smaller calls."""

    async def main() -> None:
        async with aioenv.Pool(BIG, 20, endpoint=bounded_server.endpoint, num_workers=1) as pool:
            await pool.reset()
            with pytest.raises(UsageError, match=r"takes at most 1048576 \(aioenv serve --max-message-bytes\)"):
                await pool.step(_actions(20))
            for half in (range(10), range(10, 20)):
                obs, *_ = await pool.step(_actions(10), env_ids=list(half))
                assert obs.shape == (10, 96, 96, 3)

    asyncio.run(main())


def test_a_peer_that_floods_and_never_reads_is_dropped_once_and_others_are_served() -> None:
    """200,000 PINGs from a peer that reads nothing, to a server that queues 50 messages per peer."""
    srv = ServerProcess("--allow-env", "tests.envs.bigenv:*", "--max-queued", "50")
    try:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.RCVBUF, 4096)  # take (almost) nothing off the wire
        sock.connect(srv.endpoint)
        try:
            ping = encode(Op.PING, {Key.ID: 1})
            for _ in range(200_000):
                sock.send_multipart(ping)
            asyncio.run(_still_served(srv.endpoint))
        finally:
            sock.close()
    finally:
        srv.stop()
    dropped = [line for line in srv.log if "dropped" in line]
    assert len(dropped) == 1, "".join(srv.log)
    assert "50 messages are queued for it unread (aioenv serve --max-queued)" in dropped[0]
    assert "client 0x" in dropped[0]  # ZeroMQ's own identity for the peer, readable


def _raw_pool(endpoint: str, name: bytes, envs: int) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
    """A client that speaks the protocol by hand and never reads past its OPEN: its socket and a monitor
    of that socket's disconnects."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    sock.setsockopt(zmq.IDENTITY, name)
    events = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    events.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    sock.connect(endpoint)
    fields = {Key.ID: -1, Key.ENV: BIG, Key.NUM_ENVS: envs, Key.CLIENT: name.decode(), Key.OPT: {"num_workers": 1}}
    sock.send_multipart(encode(Op.OPEN, fields))
    assert decode(sock.recv_multipart())[0][Key.OP] == Op.RESULT
    return sock, events


def _reset_all(sock: zmq.Socket[bytes], req_id: int, envs: int) -> None:
    sock.send_multipart(encode(Op.RESET, {Key.ID: req_id, Key.ENV: list(range(envs)), Key.SEED: [None] * envs}))


def test_all_clients_unread_bytes_are_bounded_together() -> None:
    """Two clients that do not read, each under its own bound (4 MiB) but together over the server's (3 MiB):
    the one with the most unread is dropped, the other keeps its pool."""
    srv = ServerProcess(
        "--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "4MiB", "--max-unread-total", "3MiB"
    )  # fmt: skip
    (a, a_events), (b, b_events) = _raw_pool(srv.endpoint, b"raw-a", 20), _raw_pool(srv.endpoint, b"raw-b", 20)
    try:
        _reset_all(a, 1, 20)  # about 0.5 MiB each
        _reset_all(b, 1, 20)
        time.sleep(1.0)  # both answered (not a speed check: a settling time)
        for req_id in range(2, 6):  # a asks again and again: its replies pile up, 0.5 MiB each
            _reset_all(a, req_id, 20)
            time.sleep(0.3)
        assert recv_monitor_message(a_events)["event"] == zmq.EVENT_DISCONNECTED  # a was dropped
        state = asyncio.run(fetch_status(srv.endpoint))
        assert state["pools"] == [["raw-b", BIG, 20]]
    finally:
        for sock, events in ((a, a_events), (b, b_events)):
            sock.disable_monitor()
            events.close()
            sock.close()
        srv.stop()
    dropped = [line for line in srv.log if "dropped" in line]
    assert len(dropped) == 1, "".join(srv.log)
    assert "client raw-a dropped: the server's clients together have" in dropped[0]
    assert "aioenv serve --max-unread-total), and this client had the most" in dropped[0]

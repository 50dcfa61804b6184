"""A client cannot make the server hold more than its bounds (``aioenv serve --max-queued``,
``--max-unread-bytes``, ``--max-message-bytes``): over them it is dropped, told why and logged once, and
other clients are served as before. Real server processes, real remote pools."""

from __future__ import annotations

import asyncio
import contextlib
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
        # A send that cannot go out for a while ends the flood: the connection was cut and the queue to the server
        # is full, so the peer has sent all it can. What matters is what the server did, checked below.
        sock.setsockopt(zmq.SNDTIMEO, 5000)
        sock.connect(srv.endpoint)
        try:
            ping = encode(Op.PING, {Key.ID: 1})
            # A server starved of CPU (a loaded machine) may read too little of a flood to fill the peer's queue
            # before the flood ends: flood again until it has dropped the peer, which it does once however long
            # the peer goes on.
            deadline = time.monotonic() + HANG
            while not any("dropped" in line for line in srv.log):
                assert time.monotonic() < deadline, "the flooding peer was never dropped"  # hang guard
                with contextlib.suppress(zmq.Again):
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
        assert state["pools"] == [["raw-b", BIG, 20, "raw-b"]]
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


FRAMES = "tests.envs.bigenv:make_frames"  # observations of 4x84x84 uint8: 8 envs answer 221 KiB a call


async def _lock_step(endpoint: str, calls: int, workers: int = 4) -> int:
    """A client of 8 envs that reads every reply before it sends its next request; returns the calls made."""
    async with aioenv.Pool(FRAMES, 8, endpoint=endpoint, num_workers=workers) as pool:
        await pool.reset(seed=0)
        for t in range(calls):
            obs, *_ = await pool.step(np.zeros(8, np.int64))
            assert obs.shape == (8, 4, 84, 84)
            assert int(obs[0, 0, 0, 0]) == (t + 1) % 256
    return calls


def test_a_lock_step_client_is_never_dropped_while_its_replies_fit_the_bound() -> None:
    """Replies of 221 KiB to a client that reads each before it asks again, under a bound of 384 KiB (1.74
    replies): what it has read is never counted as unread, whenever the server's marks reach it."""
    srv = ServerProcess("--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "384KiB")
    try:
        for _ in range(3):
            assert asyncio.run(_lock_step(srv.endpoint, 40)) == 40
    finally:
        srv.stop()
    assert not [line for line in srv.log if "dropped" in line], "".join(srv.log)


def test_eight_lock_step_clients_within_the_total_bound_are_not_dropped() -> None:
    """8 such clients at once, 8 x 221 KiB = 1.77 MiB, under a total bound of 2 MiB."""
    srv = ServerProcess("--allow-env", "tests.envs.bigenv:*", "--max-unread-total", "2MiB")

    async def main() -> list[int]:
        return await asyncio.gather(*(_lock_step(srv.endpoint, 25, workers=1) for _ in range(8)))

    try:
        assert asyncio.run(main()) == [25] * 8
    finally:
        srv.stop()
    assert not [line for line in srv.log if "dropped" in line], "".join(srv.log)


class _LockStepPeer:
    """A client that speaks the protocol by hand, in lock-step: it reads the whole reply to a step (and nothing
    after it) before it sends the next, acknowledging the last mark it has read, wherever the server put it."""

    def __init__(self, endpoint: str, name: bytes) -> None:
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
        self.sock.setsockopt(zmq.IDENTITY, name)
        self.sock.connect(endpoint)
        self.ack: int | None = None
        fields = {Key.ID: -1, Key.ENV: FRAMES, Key.NUM_ENVS: 8, Key.CLIENT: name.decode(), Key.OPT: {"num_workers": 1}}
        self.sock.send_multipart(encode(Op.OPEN, fields))
        assert self._next()[Key.OP] == Op.RESULT

    def _next(self) -> dict[str, object]:
        header = decode(self.sock.recv_multipart())[0]
        mark = header.get("mk")  # a mark carried by a reply itself
        if header[Key.OP] == Op.EVENT and header[Key.EVENT] == "mark":  # a mark of its own
            mark = header[Key.ID]
        if isinstance(mark, int):
            self.ack = mark
        assert header[Key.OP] != Op.EVENT or header[Key.EVENT] == "mark", header
        assert header[Key.OP] != Op.ERROR, header
        return header

    def send_step(self, req_id: int) -> None:
        fields: dict[str, object] = {Key.ID: req_id, Key.ENV: list(range(8)), Key.ACT: [0]}
        if self.ack is not None:
            fields[Key.ACK] = self.ack
        self.sock.send_multipart(encode(Op.STEP, fields, [np.zeros(8, np.int64)]))

    def ping_once_the_reply_is_in(self) -> None:
        """A heartbeat sent after the reply to a step has arrived but before it is read (acknowledging only what
        was read before it): the server's PONG follows the reply."""
        assert self.sock.poll(int(HANG * 1000)) == zmq.POLLIN
        fields: dict[str, object] = {Key.ID: 0}
        if self.ack is not None:
            fields[Key.ACK] = self.ack
        self.sock.send_multipart(encode(Op.PING, fields))

    def read_reply(self) -> None:
        rows = 0
        while rows < 8:
            header = self._next()
            for entry in header.get(Key.PARTS) or []:
                assert isinstance(entry, dict)
                blocks = entry.get(Key.BLOCKS)
                rows += sum(len(pos) for _, pos, _ in blocks) if blocks else len(entry[Key.POS])

    def close(self) -> None:
        self.sock.close()


def test_a_lock_step_client_that_reads_each_reply_before_its_mark_is_not_dropped() -> None:
    """Replies of 221 KiB under a bound of 384 KiB, to a client that sends its next step as soon as it has read
    a reply (a mark sent after the reply may not have reached it yet): it used to be dropped at its second step,
    the reply it had read counted as unread."""
    srv = ServerProcess("--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "384KiB")
    peer = _LockStepPeer(srv.endpoint, b"lock-step")
    try:
        for req_id in range(1, 41):
            peer.send_step(req_id)
            peer.read_reply()
    finally:
        peer.close()
        srv.stop()
    assert not [line for line in srv.log if "dropped" in line], "".join(srv.log)


def test_a_lock_step_client_whose_reply_is_followed_by_a_pong_it_has_not_read_is_not_dropped() -> None:
    """The same client, with a heartbeat crossing each reply: it reads the reply and sends its next step before it
    reads the PONG behind it. The reply's mark is no longer the newest the server sent, and the server used to
    count it for nothing, the reply read as unread: two replies and a PONG over a bound of 384 KiB."""
    srv = ServerProcess("--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "384KiB")
    peer = _LockStepPeer(srv.endpoint, b"lock-step")
    try:
        peer.send_step(1)
        for req_id in range(2, 21):
            peer.ping_once_the_reply_is_in()
            peer.read_reply()  # the reply, not the PONG behind it
            peer.send_step(req_id)
            assert peer._next()[Key.OP] == Op.PONG
        peer.read_reply()
    finally:
        peer.close()
        srv.stop()
    assert not [line for line in srv.log if "dropped" in line], "".join(srv.log)


def test_eight_lock_step_clients_under_the_total_bound_are_not_dropped() -> None:
    """8 such clients with their replies in flight together, 8 x 221 KiB = 1.77 MiB, under a total bound of
    2 MiB (it used to drop half of them, counting each one's last reply read as unread)."""
    srv = ServerProcess(
        "--allow-env", "tests.envs.bigenv:*", "--max-unread-bytes", "1MiB", "--max-unread-total", "2MiB"
    )  # fmt: skip
    peers = [_LockStepPeer(srv.endpoint, f"lock-step-{i}".encode()) for i in range(8)]
    try:
        for req_id in range(1, 21):
            for peer in peers:
                peer.send_step(req_id)
            for peer in peers:
                peer.read_reply()
    finally:
        for peer in peers:
            peer.close()
        srv.stop()
    assert not [line for line in srv.log if "dropped" in line], "".join(srv.log)

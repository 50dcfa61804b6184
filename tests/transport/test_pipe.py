"""The pipe between a pool and its own workers (``aioenv.transport.pipe``): framing, back-pressure, end of stream.

The reader is pure logic and is checked with hypothesis against streams cut at arbitrary points;
the two ends are then run over a real ``socketpair``, with messages large enough that the
coordinator's end must hold a backlog and the reader must receive in place.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv import _hot
from aioenv.errors import ProtocolError
from aioenv.transport import pipe
from aioenv.transport.pipe import (
    BIG_MESSAGE,
    MAX_FRAMES,
    MAX_MESSAGE,
    FrameReader,
    LinkClosed,
    PipeLink,
    PipePort,
    framed,
    send_framed_each,
)
from tests.support.procs import HANG


def stream_of(messages: list[list[bytes]]) -> bytes:
    out = bytearray()
    for frames in messages:
        bufs, total = framed(frames)
        chunk = b"".join(bytes(b) for b in bufs)
        assert len(chunk) == total
        out += chunk
    return bytes(out)


def feed(reader: FrameReader, data: bytes, cuts: list[int]) -> list[list[bytes]]:
    """Feed ``data`` through ``reader`` in pieces no larger than the cuts (and its buffer) allow."""
    got: list[list[bytes]] = []
    pos, i = 0, 0
    while pos < len(data):
        space = reader.buffer()
        n = min(space.nbytes, len(data) - pos, cuts[i % len(cuts)])
        space[:n] = data[pos : pos + n]
        del space
        pos += n
        i += 1
        got.extend([bytes(f) for f in msg] for msg in reader.advance(n))
    return got


frame_sizes = st.one_of(st.integers(0, 300), st.integers(BIG_MESSAGE - 10, BIG_MESSAGE + 3000))
messages_st = st.lists(
    st.lists(frame_sizes.map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)), min_size=1, max_size=4),
    min_size=1,
    max_size=12,
)


@settings(max_examples=30, deadline=None)  # a 1-byte cut through 64 KiB frames costs 0.1 s: 30 is ~10 s
@given(messages=messages_st, cuts=st.lists(st.integers(1, 70_000), min_size=1, max_size=8))
def test_reader_gives_back_every_message_whatever_the_cuts(messages: list[list[bytes]], cuts: list[int]) -> None:
    reader = FrameReader()
    assert feed(reader, stream_of(messages), cuts) == messages
    assert reader.pending == 0


def test_frames_are_read_only_views_and_big_messages_are_not_copied_twice() -> None:
    big = np.arange(BIG_MESSAGE, dtype=np.uint8)
    small = b"header"
    reader = FrameReader()
    got = feed(reader, stream_of([[small, big.tobytes()]]), [1000])
    assert got == [[small, big.tobytes()]]
    # a whole message delivered at once: frames are read-only memoryviews
    reader = FrameReader()
    data = stream_of([[small, b"x" * 10]])
    space = reader.buffer()
    space[: len(data)] = data
    del space
    (frames,) = reader.advance(len(data))
    assert all(isinstance(f, memoryview) and f.readonly for f in frames)


def test_small_messages_do_not_pin_the_reader_buffer() -> None:
    """Each small message is its own copy: a frame kept by the caller survives later reads."""
    reader = FrameReader()
    first = feed(reader, stream_of([[b"A" * 100]]), [100_000])
    keep = reader.advance(0)  # nothing new
    assert keep == []
    # overwrite the reader's buffer with many later messages
    feed(reader, stream_of([[b"B" * 200]] * 3000), [65_536])
    assert first == [[b"A" * 100]]


@pytest.mark.parametrize("count", [0, MAX_FRAMES + 1])
def test_a_corrupt_stream_is_a_protocol_error(count: int) -> None:
    reader = FrameReader()
    space = reader.buffer()
    space[:4] = struct.pack("<I", count)
    del space
    with pytest.raises(ProtocolError, match="malformed pipe stream"):
        reader.advance(4)


def test_a_message_beyond_the_size_limit_is_a_protocol_error() -> None:
    reader = FrameReader()
    space = reader.buffer()
    head = struct.pack("<IQ", 1, MAX_MESSAGE)
    space[: len(head)] = head
    del space
    with pytest.raises(ProtocolError, match="the limit is"):
        reader.advance(len(head))


def test_framed_counts_numpy_and_memoryview_frames() -> None:
    arr = np.zeros((3, 4), dtype=np.float32)
    bufs, total = framed([b"h", arr, memoryview(b"abc")])
    assert total == 4 + 3 * 8 + 1 + arr.nbytes + 3
    assert struct.unpack("<I3Q", bufs[0]) == (3, 1, arr.nbytes, 3)


def _echo(link: PipeLink, stop_after: int) -> None:
    for _ in range(stop_after):
        frames = link.recv()
        link.send(frames)
    link.close()


@pytest.mark.timeout(HANG)
async def test_port_and_link_carry_messages_both_ways_in_order_with_backlog() -> None:
    """A PipePort (event loop) talks to a PipeLink (a thread echoing): 8 MiB messages overflow the socket
    buffer, so the port's sends go through its backlog; order and bytes are kept."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    received: list[tuple[bytes, list[bytes]]] = []
    done = asyncio.Event()
    n = 40

    def on_message(identity: bytes, frames: list[Any]) -> None:
        received.append((identity, [bytes(f) for f in frames]))
        if len(received) == n:
            done.set()

    port = PipePort(ours, b"w0", on_message)
    link = PipeLink(theirs.detach())
    echo = threading.Thread(target=_echo, args=(link, n))
    echo.start()
    big = np.random.default_rng(0).integers(0, 255, 8 << 20, dtype=np.uint8)
    sent = []
    for i in range(n):
        frames: list[Any] = [f"header {i}".encode()] + ([big] if i % 10 == 0 else [bytes([i]) * i])
        sent.append([bytes(f) if isinstance(f, bytes) else f.tobytes() for f in frames])
        assert port.send(b"w0", frames)
    await asyncio.wait_for(done.wait(), HANG)
    assert [ident for ident, _ in received] == [b"w0"] * n
    assert [frames for _, frames in received] == sent
    await asyncio.to_thread(echo.join)
    # the thread closed its end: the port sees end of stream and refuses further sends
    for _ in range(200):
        if port.closed:
            break
        await asyncio.sleep(0.01)
    assert port.closed
    assert not port.send(b"w0", [b"late"])


@pytest.mark.timeout(HANG)
async def test_a_quick_handler_takes_whole_messages_of_its_size_and_the_rest_is_parsed() -> None:
    """A read that brings exactly one message of the quick size goes to the quick handler before any parsing;
    one it declines, a message of that size cut over two reads, or one that came with another, is parsed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    quick_size = len(b"".join(framed([b"Q" * 16])[0]))
    quick: list[tuple[bytes, bytes]] = []
    parsed: list[list[bytes]] = []

    def on_quick(identity: bytes, data: memoryview) -> bool:
        if bytes(data[12:13]) == b"N":  # declined
            return False
        quick.append((identity, bytes(data[:quick_size])))
        return True

    port = PipePort(
        ours, b"w0", lambda _, frames: parsed.append([bytes(f) for f in frames]), quick=(quick_size, on_quick)
    )
    loop = asyncio.get_running_loop()

    async def arrive(data: bytes, count: int) -> None:
        await loop.sock_sendall(theirs, data)
        async with asyncio.timeout(HANG):
            while len(quick) + len(parsed) < count:
                await asyncio.sleep(0.005)

    one = b"".join(framed([b"Q" * 16])[0])
    await arrive(one, 1)
    assert quick == [(b"w0", one)]
    assert parsed == []
    await arrive(b"".join(framed([b"N" * 16])[0]), 2)  # declined: parsed as any message
    assert parsed == [[b"N" * 16]]
    await loop.sock_sendall(theirs, one[:5])  # cut: the first read brings 5 bytes, the second the rest, parsed
    async with asyncio.timeout(HANG):
        while port._reader.pending != 5:
            await asyncio.sleep(0.005)
    await arrive(one[5:], 3)
    assert parsed[-1] == [b"Q" * 16]
    await arrive(one + b"".join(framed([b"x"])[0]), 5)  # two messages in one read: both parsed
    assert parsed[-2:] == [[b"Q" * 16], [b"x"]]
    assert len(quick) == 1
    port.close()
    theirs.close()


@pytest.mark.timeout(HANG)
async def test_send_framed_keeps_order_behind_a_backlog() -> None:
    """Framed messages queue behind what the socket could not take yet, and arrive whole and in order."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    port = PipePort(ours, b"w0", lambda identity, frames: None)
    big = bytes(8 << 20)
    assert port.send(b"w0", [big])  # more than the socket holds: the rest waits in the backlog
    small = [b"".join(framed([bytes([i]) * 20])[0]) for i in range(50)]
    for data in small:
        assert port.send_framed(data)
    link = PipeLink(theirs.detach())
    got = await asyncio.to_thread(lambda: [link.recv() for _ in range(51)])
    assert bytes(got[0][0]) == big
    assert [bytes(frames[0]) for frames in got[1:]] == [bytes([i]) * 20 for i in range(50)]
    port.close()
    assert not port.send_framed(small[0])
    link.close()


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
async def test_messages_to_several_ports_sent_in_one_call_arrive_as_send_framed_sends_them(
    monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """A lane call writes its workers' pipes in one call: each message whole and in order behind what its port holds
    already, whatever the socket took now (a message larger than the socket holds waits in the port's backlog); a
    port closed before or by the call is named, its message not sent."""
    speedups = _hot.load()
    assert speedups is not None, "aioenv._speedups is not built (tests/core/test_speedups.py says why)"
    monkeypatch.setattr(pipe, "send_each", speedups.send_each if compiled else pipe.py_send_each)
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(4)]
    ports = [PipePort(ours, f"w{k}".encode(), lambda identity, frames: None) for k, (ours, _) in enumerate(pairs)]
    links = [PipeLink(theirs.detach()) for _, theirs in pairs]

    def message(k: int, size: int) -> bytes:
        return b"".join(bytes(b) for b in framed([bytes([k]) * size])[0])

    # every port empty: one call for all; port 2's message is more than its socket holds
    first = [message(0, 20), message(1, 20), message(2, 8 << 20), message(3, 20)]
    assert send_framed_each(ports, first) == []
    # port 2 holds a backlog now: the next call goes port by port, behind it
    second = [message(k, 30) for k in range(4)]
    assert send_framed_each(ports, second) == []
    got = await asyncio.to_thread(lambda: [[bytes(link.recv()[0]) for _ in range(2)] for link in links])
    assert got[2] == [bytes([2]) * (8 << 20), bytes([2]) * 30]
    assert [got[k] for k in (0, 1, 3)] == [[bytes([k]) * 20, bytes([k]) * 30] for k in (0, 1, 3)]
    # a worker gone: its port closes within the call and is named, the others' messages arrive
    links[1].close()
    lost_reasons: list[str] = []
    ports[1]._on_lost = lambda why, eof: lost_reasons.append(why)
    assert send_framed_each(ports, [message(k, 10) for k in range(4)]) == [1]
    assert ports[1].closed
    assert len(lost_reasons) == 1
    assert "closed its end of the pipe" in lost_reasons[0]
    assert send_framed_each(ports, [message(k, 11) for k in range(4)]) == [1]  # closed before the call
    got = await asyncio.to_thread(lambda: [[bytes(links[k].recv()[0]) for _ in range(2)] for k in (0, 2, 3)])
    assert got == [[bytes([k]) * 10, bytes([k]) * 11] for k in (0, 2, 3)]
    for port in ports:
        port.close()
    for k in (0, 2, 3):
        links[k].close()


@pytest.mark.timeout(HANG)
def test_link_sends_whole_messages_on_a_non_blocking_descriptor() -> None:
    """uvloop makes a descriptor it watches non-blocking: a send that fills the socket must wait for
    room, not give up half-way (which would corrupt the stream for every later message)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = PipeLink(theirs.detach())
    link.sock.setblocking(False)
    big = np.random.default_rng(2).integers(0, 255, 4 << 20, dtype=np.uint8)
    got: list[list[bytes]] = []

    def read_slowly() -> None:
        reader = FrameReader()
        while len(got) < 2:
            time.sleep(0.001)  # slower than the sender: the socket fills up
            space = reader.buffer()
            n = ours.recv_into(space, min(space.nbytes, 50_000))
            del space
            got.extend([bytes(f) for f in msg] for msg in reader.advance(n))

    thread = threading.Thread(target=read_slowly)
    thread.start()
    link.send([b"first", big])
    link.send([b"second"])
    thread.join(HANG)
    assert got == [[b"first", big.tobytes()], [b"second"]]
    link.close()
    ours.close()


def test_has_input_does_not_ask_an_emptied_socket_twice() -> None:
    """After a read that emptied the socket, has_input answers False once without a syscall (a
    drain on readiness stops there; the level-triggered descriptor calls it back), then asks again."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = PipeLink(theirs.detach())
    assert not link.edge_triggered
    bufs, _ = framed([b"one"])
    ours.sendall(b"".join(bufs))
    assert link.has_input()
    assert [bytes(f) for f in link.recv()] == [b"one"]
    bufs, _ = framed([b"two"])
    ours.sendall(b"".join(bufs))
    assert not link.has_input()  # the read that brought "one" emptied the socket: not asked again
    assert link.has_input()  # asked now
    assert [bytes(f) for f in link.recv()] == [b"two"]
    link.close()
    ours.close()


@pytest.mark.timeout(HANG)
async def test_link_raises_link_closed_when_the_port_closes() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    port = PipePort(ours, b"w0", lambda identity, frames: None)
    link = PipeLink(theirs.detach())
    assert not link.has_input()
    port.send(b"w0", [b"one"])
    port.close()
    assert [bytes(f) for f in link.recv()] == [b"one"]  # sent before the close: still delivered
    with pytest.raises(LinkClosed):
        link.recv()
    with pytest.raises(LinkClosed):
        link.send([b"nobody listens"])
    link.close()


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread"])
async def test_a_pool_moves_large_observations_and_actions_intact(executor: str) -> None:
    """Real workers over their pipes: 512 KiB of actions per worker (more than a socket buffer holds,
    so the pool's end keeps a backlog) and 216 KiB of observations per reply (received in place);
    the trajectories equal SyncVectorEnv's byte for byte."""
    import gymnasium as gym

    import aioenv
    from tests.envs.bigenv import ACT_SHAPE, make_big

    n = 16
    rng = np.random.default_rng(1)
    actions = [rng.uniform(-1, 1, (n, *ACT_SHAPE)).astype(np.float32) for _ in range(3)]
    ref = gym.vector.SyncVectorEnv([make_big] * n)
    ref_obs, _ = ref.reset(seed=list(range(n)))
    async with aioenv.Pool("tests.envs.bigenv:make_big", n, num_workers=2, executor=executor) as pool:
        obs, _ = await asyncio.wait_for(pool.reset(seed=list(range(n))), HANG)
        np.testing.assert_array_equal(obs, ref_obs)
        for act in actions:
            obs, rew, *_ = await asyncio.wait_for(pool.step(act), HANG)
            ref_obs, ref_rew, *_ = ref.step(act)
            np.testing.assert_array_equal(obs, ref_obs)
            np.testing.assert_array_equal(rew, ref_rew)
    ref.close()


@pytest.mark.parametrize(("fd", "words"), [(99, "not an open descriptor"), (0, "not a socket")])
def test_a_worker_refuses_an_fd_that_is_no_pipe(fd: int, words: str) -> None:
    from tests.support.scripts import run_python

    done = run_python("-m", "workers", "--fd", str(fd), timeout=HANG)
    assert done.returncode == 2, done.stderr
    assert f"--fd {fd}: {words}" in done.stderr, done.stderr

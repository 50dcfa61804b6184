"""CURVE under attack: a replayed handshake gets no session, refusals are logged once per key and never in a
flood, and no key is ever logged. (Admitting known keys and refusing others: test_server.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest
import zmq.auth

import aioenv
from aioenv.core import remote
from aioenv.server.status import fetch_status
from aioenv.transport.auth import Refusals
from tests.support.procs import HANG
from tests.support.servers import ServerProcess, keygen


class _RecordingProxy:
    """A tcp proxy in front of the server that records what clients send through it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = bytearray()
        self.recording = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"tcp://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        for pipe in (self._pipe(reader, up_writer, record=True), self._pipe(up_reader, writer, record=False)):
            task = asyncio.ensure_future(pipe)
            self._tasks.add(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, record: bool) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if record and self.recording:
                    self.sent += data
                writer.write(data)
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        self.server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:  # every transport closed and done with before the loop closes
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await self.server.wait_closed()


def test_a_replayed_handshake_and_requests_get_no_session(tmp_path: Path) -> None:
    """Everything an admitted client sent (handshake, OPEN, RESET), captured on the wire and replayed on a
    new connection: CURVE's per-connection cookie refuses it, and the server makes nothing for it."""
    keys = tmp_path / "keys"
    for name in ("server", "alice"):
        keygen(keys, name)
    alice = (str(keys / "alice.key_secret"), str(keys / "server.key"))
    srv = ServerProcess("--allow-env", "CartPole-v1", "--auth", str(keys))
    try:

        async def main() -> None:
            proxy = _RecordingProxy(int(srv.endpoint.rsplit(":", 1)[1]))
            endpoint = await proxy.start()
            try:
                async with aioenv.Pool("CartPole-v1", 3, endpoint=endpoint, curve_keys=alice, num_workers=1) as pool:
                    await pool.reset(seed=0)
                    proxy.recording = False
                    assert len(proxy.sent) > 200, "the handshake and requests went through the proxy"
                    replayed = await _replay(srv.endpoint, bytes(proxy.sent))
                    assert replayed < 1000, "the server said more to the replay than a handshake's refusal"
                    state = await fetch_status(srv.endpoint, curve_keys=alice)
                    assert (state["sessions"], state["envs"]) == (1, 3)  # alice's pool, and nothing else
                    await pool.reset(seed=1)  # alice is not disturbed
            finally:
                await proxy.close()

        aioenv.run(main())
    finally:
        srv.stop()


async def _replay(endpoint: str, data: bytes) -> int:
    """Send ``data`` on a new tcp connection to ``endpoint``; the bytes the server sent back before it hung
    up (or within 2 s)."""
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    got = 0
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(2.0):
            while chunk := await reader.read(65536):
                got += len(chunk)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return got


def test_refused_keys_are_logged_once_and_never_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stranger knocks again and again (its client reconnects for 1.5 s): one log line names the first 8
    characters of its public key; no key file's content ever reaches the log."""
    monkeypatch.setattr(remote, "HEARTBEAT", 0.1)
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 1.5)
    keys, strangers = tmp_path / "keys", tmp_path / "strangers"
    for directory, name in ((keys, "server"), (keys, "alice"), (strangers, "mallory")):
        keygen(directory, name)
    srv = ServerProcess("--allow-env", "CartPole-v1", "--auth", str(keys))
    try:
        mallory = (str(strangers / "mallory.key_secret"), str(keys / "server.key"))
        with pytest.raises(aioenv.ConnectionLost):
            aioenv.run(asyncio.wait_for(aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=mallory), HANG))
    finally:
        srv.stop()
    log = "".join(srv.log)
    public, _ = zmq.auth.load_certificate(strangers / "mallory.key")
    assert log.count(f"refused a CURVE handshake: key {public[:8].decode()}... is not admitted") == 1, log
    for path in [*keys.iterdir(), *strangers.iterdir()]:
        for key in zmq.auth.load_certificate(path):
            if key is not None:
                assert key.decode() not in log, f"{path.name}'s key is in the log"


def test_refusals_are_rate_limited_per_key_and_in_all() -> None:
    refusals = Refusals(every=60.0, burst=3)
    assert refusals.refused(b"AAAAAAAAAA", now=0.0)
    assert not refusals.refused(b"AAAAAAAAAA", now=1.0)  # the same key again: counted, not logged
    assert refusals.refused(b"BBBBBBBBBB", now=2.0)
    assert refusals.refused(b"CCCCCCCCCC", now=3.0)
    assert not refusals.refused(b"DDDDDDDDDD", now=4.0)  # a fourth line in a minute: the burst is spent
    assert refusals.refused(b"DDDDDDDDDD", now=61.0)  # a new minute
    assert refusals.refused(b"AAAAAAAAAA", now=62.0)
    assert refusals.count == 7


def test_a_refusal_line_says_how_many_were_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    refusals = Refusals(every=60.0, burst=1)
    with caplog.at_level("WARNING", logger="aioenv.auth"):
        for i in range(5):
            refusals.refused(f"KEY{i}".encode(), now=float(i))
        refusals.refused(b"LATE", now=100.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "refused a CURVE handshake: key KEY0... is not admitted",
        "refused a CURVE handshake: key LATE... is not admitted (4 more refusals not logged)",
    ]


def test_the_server_port_speaks_only_curve_when_auth_is_on(tmp_path: Path) -> None:
    """A plain (non-CURVE) ZeroMQ peer and a raw tcp peer get nothing from a server with --auth."""
    keys = tmp_path / "keys"
    keygen(keys, "server")
    srv = ServerProcess("--auth", str(keys))
    try:
        host, port = srv.endpoint.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=HANG) as raw:
            raw.sendall(b"\xff" + b"\x00" * 8 + b"\x01\x7f" + b"garbage" * 100)
            raw.settimeout(2.0)
            with contextlib.suppress(TimeoutError, ConnectionError):
                while raw.recv(65536):
                    pass
        with pytest.raises(TimeoutError):
            aioenv.run(fetch_status(srv.endpoint, timeout=1.0))
    finally:
        srv.stop()

"""The server's worker port (:class:`aioenv.server.fleet.Fleet`) against a scripted worker host.

The fleet runs in this event loop on a real tcp socket; the "host" is a raw DEALER socket that this
test drives message by message, so each rule of the protocol is checked on its own: JOIN, SPAWN,
STARTED/EXITED, KILL escalation on stop, heartbeats and the drop of a silent host.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import zmq
import zmq.asyncio

from aioenv.core.launcher import LaunchSpec, WorkerProc
from aioenv.errors import CapacityError
from aioenv.server.fleet import Fleet, RemoteProcess
from aioenv.wire.protocol import Op, decode, encode
from tests.support.procs import HANG


class ScriptedHost:
    """A worker host played by the test."""

    def __init__(self, endpoint: str, name: str) -> None:
        self.sock = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IDENTITY, f"host:{name}".encode())
        self.sock.connect(endpoint)
        self.name = name

    async def send(self, op: str, **fields: Any) -> None:
        await self.sock.send_multipart(encode(op, {"id": 0, **fields}))

    async def recv(self) -> dict[str, Any]:
        frames = await asyncio.wait_for(self.sock.recv_multipart(), HANG)
        return decode(frames)[0]

    async def join(self, capacity: int, executor: str = "inline") -> dict[str, Any]:
        await self.sock.send_multipart(
            encode(Op.JOIN, {"id": 1, "name": self.name, "executor": executor, "capacity": capacity})
        )
        return await self.recv()

    def close(self) -> None:
        self.sock.close()


class Pool:
    """What a coordinator gives the fleet: launch specs, and the exits it is told about."""

    def __init__(self) -> None:
        self.exits: list[WorkerProc] = []
        self.messages: list[bytes] = []

    def spec(self, name: str, envs: int, executor: str = "inline") -> LaunchSpec:
        return LaunchSpec(name, executor, envs, "/nowhere", self.exits.append, self.on_message)

    def on_message(self, identity: bytes, frames: list[Any]) -> None:
        self.messages.append(identity)


@pytest_asyncio.fixture
async def fleet() -> AsyncIterator[Fleet]:
    f = Fleet("tcp://127.0.0.1:0", local_capacity=0, worker_timeout=1.0)
    try:
        yield f
    finally:
        f.close()


async def until(predicate: Any) -> None:
    async with asyncio.timeout(HANG):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_the_join_reply_says_how_often_to_ping(fleet: Fleet) -> None:
    """worker_timeout 1 s: a PING every 0.25 s (a host pinging once a second could be dropped for one late PING)."""
    host = ScriptedHost(fleet.endpoint, "h1")
    try:
        reply = await host.join(capacity=4)
        assert (reply["op"], reply["beat"]) == (Op.RESULT, 0.25)
        for _ in range(12):  # three timeouts, at the pace asked: kept
            await asyncio.sleep(0.25)
            await host.send(Op.PING)
            assert (await host.recv())["op"] == Op.PONG
        assert (fleet.lost, [row["name"] for row in fleet.status()]) == (0, ["h1"])
    finally:
        host.close()


async def test_spawn_started_exited(fleet: Fleet) -> None:
    host = ScriptedHost(fleet.endpoint, "h1")
    pool = Pool()
    try:
        assert (await host.join(capacity=10))["op"] == Op.RESULT
        proc = fleet.launch(pool.spec("p1.w0.1", 6))
        assert isinstance(proc, RemoteProcess)
        assert proc.pid == "?"
        spawn = await host.recv()
        assert (spawn["op"], spawn["name"], spawn["executor"]) == (Op.SPAWN, "p1.w0.1", "inline")
        assert fleet.status()[0]["envs"] == 6
        with pytest.raises(CapacityError, match="room for 5 more inline envs: hosts: h1 6/10"):
            fleet.launch(pool.spec("p2.w0.1", 5))
        await host.send(Op.STARTED, name="p1.w0.1", pid=4242)
        await until(lambda: proc.pid == 4242)
        await host.send(Op.EXITED, name="p1.w0.1", code=-9)
        await until(lambda: pool.exits == [proc])
        assert proc.returncode == -9
        assert proc.describe() == "was killed by SIGKILL on host h1"
        assert fleet.status()[0]["envs"] == 0  # its room is free again
    finally:
        host.close()


async def test_stop_escalates_then_writes_the_process_off(fleet: Fleet) -> None:
    host = ScriptedHost(fleet.endpoint, "h1")
    pool = Pool()
    try:
        await host.join(capacity=4)
        proc = fleet.launch(pool.spec("p1.w0.1", 4))
        await host.recv()  # SPAWN
        stopping = asyncio.ensure_future(proc.stop(0.2, ask_first=False))
        kills = [await host.recv(), await host.recv()]  # the host never confirms an exit
        assert [(k["op"], k["sig"]) for k in kills] == [(Op.KILL, "SIGTERM"), (Op.KILL, "SIGKILL")]
        await asyncio.wait_for(stopping, HANG)
        assert proc.exited.is_set()
        assert "did not confirm its exit on host h1" in proc.describe()
        assert pool.exits == [proc]
        assert fleet.status()[0]["envs"] == 0
    finally:
        host.close()


async def test_a_silent_host_is_dropped_and_a_waiting_pool_retried(fleet: Fleet) -> None:
    a, b = ScriptedHost(fleet.endpoint, "a"), ScriptedHost(fleet.endpoint, "b")
    pool = Pool()
    try:
        await a.join(capacity=4)
        proc = fleet.launch(pool.spec("p1.w0.1", 4))
        await a.recv()  # SPAWN
        retries: list[bool] = []

        def retry() -> bool:
            try:
                fleet.launch(pool.spec("p1.w0.2", 4))
            except CapacityError:
                retries.append(False)
                return False
            retries.append(True)
            return True

        fleet.when_room(retry)
        await until(lambda: pool.exits == [proc])  # a never pings: dropped after worker_timeout
        assert "host a stopped answering heartbeats" in proc.describe()
        assert fleet.lost == 1
        assert fleet.status() == []
        await until(lambda: retries == [False])  # room was freed, but no host is left: still waiting
        told = await a.recv()
        assert (told["op"], told["name"], told["sig"]) == (Op.KILL, "p1.w0.1", "SIGKILL")  # in case it lives
        await b.join(capacity=8)
        await until(lambda: retries[-1:] == [True])  # a host joined: the waiting pool got its worker
        assert (await b.recv())["name"] == "p1.w0.2"
        await a.send(Op.PING)
        assert (await a.recv())["rejoin"] is True  # the dropped host learns it must join again
        await b.send(Op.PING)
        assert (await b.recv())["op"] == Op.PONG
    finally:
        a.close()
        b.close()


async def test_worker_messages_reach_their_pool_and_strays_are_told_to_go(fleet: Fleet) -> None:
    host = ScriptedHost(fleet.endpoint, "h1")
    pool = Pool()
    worker = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    worker.setsockopt(zmq.IDENTITY, b"p1.w0.1")
    stray = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    stray.setsockopt(zmq.LINGER, 0)
    stray.setsockopt(zmq.IDENTITY, b"p9.w0.1")
    try:
        await host.join(capacity=4)
        fleet.launch(pool.spec("p1.w0.1", 2))
        worker.connect(fleet.endpoint)
        stray.connect(fleet.endpoint)
        await worker.send_multipart(encode(Op.HELLO, {"id": 0, "name": "p1.w0.1"}))
        await until(lambda: pool.messages == [b"p1.w0.1"])  # routed to its pool's coordinator
        await stray.send_multipart(encode(Op.HELLO, {"id": 0, "name": "p9.w0.1"}))
        reply = decode(await asyncio.wait_for(stray.recv_multipart(), HANG))[0]
        assert reply["op"] == Op.CLOSE  # a worker of no pool (e.g. from before a restart) is let go
        assert pool.messages == [b"p1.w0.1"]
    finally:
        worker.close()
        stray.close()
        host.close()

"""Rows relayed by a server to its client (:mod:`aioenv.partwire`): several requests' parts in one message."""

from __future__ import annotations

import asyncio

import numpy as np
import zmq
import zmq.asyncio

from aioenv.errors import EnvError, StepTimeout
from aioenv.partwire import decode_part, encode_parts
from aioenv.protocol import Op, decode, encode
from aioenv.results import Part
from aioenv.server import Server, ServerConfig
from tests.conftest import HANG


def test_parts_of_several_requests_travel_in_one_message() -> None:
    obs_a = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    extras_a = [np.array([1.0, 2.0]), np.array([False, True]), np.array([False, False])]
    a = Part(np.array([4, 7]), obs_a, extras_a, binfo={"k": np.array([5, 6])})
    err = EnvError("boom", env_id=9, remote_type="RuntimeError", remote_traceback="Traceback ...")
    b = Part(np.array([9, 2]), [np.ones((2, 3), np.float32)], None, [{"x": 1}, {"y": "z"}], errors={0: err})
    c = Part.failed(np.array([3]), lambda e: StepTimeout(f"env {e} overran", env_id=e))
    frames = encode_parts([(11, a, np.array([0, 2])), (12, b, np.array([1, 0])), (11, c, np.array([1]))])
    header, arrays = decode(frames)  # one message, as the client reads it
    segments = header["parts"]
    assert [(s["id"], s["pos"]) for s in segments] == [(11, [0, 2]), (12, [1, 0]), (11, [1])]

    got_a = decode_part(segments[0], arrays, np.array([4, 7]))
    np.testing.assert_array_equal(got_a.obs[0], obs_a[0])
    np.testing.assert_array_equal(got_a.reward, [1.0, 2.0])
    np.testing.assert_array_equal(got_a.terminated, [False, True])
    assert got_a.binfo["k"].tolist() == [5, 6] and not got_a.errors

    got_b = decode_part(segments[1], arrays, np.array([9, 2]))
    np.testing.assert_array_equal(got_b.obs[0], np.ones((2, 3), np.float32))
    assert got_b.infos == [{"x": 1}, {"y": "z"}]
    assert type(got_b.errors[0]) is EnvError and got_b.errors[0].remote_traceback == "Traceback ..."

    got_c = decode_part(segments[2], arrays, np.array([3]))
    assert got_c.obs is None and type(got_c.errors[0]) is StepTimeout and got_c.errors[0].env_id == 3


async def test_a_servers_queued_rows_leave_before_anything_else_it_sends_that_client() -> None:
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0"))
    await server.start()
    client = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.IDENTITY, b"c1")
    client.connect(server.endpoint)
    try:

        async def receive() -> dict[str, object]:
            return decode(await asyncio.wait_for(client.recv_multipart(), HANG))[0]

        await client.send_multipart(encode(Op.PING, {"id": 1}))
        assert (await receive())["op"] == Op.PONG  # the server knows this peer now
        rows = Part(np.array([0]), [np.zeros((1, 2), np.float32)], None)
        server.relay(b"c1", 5, rows, np.array([0]))
        server.relay(b"c1", 6, rows, np.array([0]))
        server.send(b"c1", encode(Op.ERROR, {"id": 5, "error": None}))  # sent at once, after the queued rows
        first, second = await receive(), await receive()
        assert [s["id"] for s in first["parts"]] == [5, 6] and (second["op"], second["id"]) == (Op.ERROR, 5)
        server.relay(b"c1", 7, rows, np.array([0]))  # alone: sent at the end of this loop turn
        assert [s["id"] for s in (await receive())["parts"]] == [7]
    finally:
        client.close()
        await server.aclose()

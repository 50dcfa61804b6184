"""Rows relayed by a server to its client (:mod:`aioenv.core.relay`): several requests' parts and workers'
blocks of rows in one message, routed on the client as a coordinator routes its workers' replies."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import zmq
import zmq.asyncio

from aioenv.core.relay import BlockEntry, PartEntry, decode_block, decode_part, encode_parts
from aioenv.core.replies import Block, Relayed, int_lists, route_block
from aioenv.core.scheduler import Scheduler
from aioenv.core.sinks import Part, RecvQueue
from aioenv.errors import EnvError, StepTimeout
from aioenv.server.server import Server, ServerConfig
from aioenv.wire.protocol import Op, decode, encode
from tests.support.procs import HANG


def test_parts_of_several_requests_travel_in_one_message() -> None:
    obs_a = [np.arange(6, dtype=np.float32).reshape(2, 3)]
    extras_a = [np.array([1.0, 2.0]), np.array([False, True]), np.array([False, False])]
    a = Part(np.array([4, 7]), obs_a, extras_a, binfo={"k": np.array([5, 6])})
    err = EnvError("boom", env_id=9, remote_type="RuntimeError", remote_traceback="Traceback ...")
    b = Part(np.array([9, 2]), [np.ones((2, 3), np.float32)], None, [{"x": 1}, {"y": "z"}], errors={0: err})
    c = Part.failed(np.array([3]), lambda e: StepTimeout(f"env {e} overran", env_id=e))
    frames = encode_parts(
        [PartEntry(11, a, np.array([0, 2])), PartEntry(12, b, np.array([1, 0])), PartEntry(11, c, np.array([1]))]
    )
    header, arrays = decode(frames)  # one message, as the client reads it
    segments = header["parts"]
    assert [(s["id"], s["pos"]) for s in segments] == [(11, [0, 2]), (12, [1, 0]), (11, [1])]

    got_a = decode_part(segments[0], arrays, np.array([4, 7]))
    np.testing.assert_array_equal(got_a.obs[0], obs_a[0])
    np.testing.assert_array_equal(got_a.reward, [1.0, 2.0])
    np.testing.assert_array_equal(got_a.terminated, [False, True])
    assert got_a.binfo["k"].tolist() == [5, 6]
    assert not got_a.errors

    got_b = decode_part(segments[1], arrays, np.array([9, 2]))
    np.testing.assert_array_equal(got_b.obs[0], np.ones((2, 3), np.float32))
    assert got_b.infos == [{"x": 1}, {"y": "z"}]
    assert type(got_b.errors[0]) is EnvError
    assert got_b.errors[0].remote_traceback == "Traceback ..."

    got_c = decode_part(segments[2], arrays, np.array([3]))
    assert got_c.obs is None
    assert type(got_c.errors[0]) is StepTimeout
    assert got_c.errors[0].env_id == 3


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
        server.queue(b"c1", PartEntry(5, rows, np.array([0])))
        server.queue(b"c1", PartEntry(6, rows, np.array([0])))
        server.send(b"c1", Op.ERROR, {"id": 5, "error": None})  # sent at once, after the queued rows
        first, second = await receive(), await receive()
        assert [s["id"] for s in first["parts"]] == [5, 6]
        assert (second["op"], second["id"]) == (Op.ERROR, 5)
        server.queue(b"c1", PartEntry(7, rows, np.array([0])))  # alone: sent at the end of this loop turn
        assert [s["id"] for s in (await receive())["parts"]] == [7]
    finally:
        client.close()
        await server.aclose()


def _block(n: int) -> Block:
    """A block of ``n`` rows: a Box leaf and a Text leaf, rewards 0..n-1, row 1 failed."""
    text = np.empty(n, dtype=object)
    text[:] = [f"row {i}" for i in range(n)]
    obs = [np.arange(n * 2, dtype=np.float32).reshape(n, 2), text]
    extras = [np.arange(n, dtype=np.float64), np.zeros(n, np.bool_), np.arange(n) % 2 == 0]
    err = {"kind": "EnvError", "env_id": 3, "type": "KeyError", "message": "KeyError: 'x'", "traceback": "Tb..."}
    return Block(obs, extras, None, {"v": np.arange(n), "_v": np.ones(n, np.bool_)}, {1: err}, "step")


def test_a_block_crosses_whole_with_its_segments_and_its_errors_rebuilt_once() -> None:
    block = _block(4)
    frames = encode_parts([BlockEntry(block, [(21, np.array([3, 0]), 0), (22, np.array([5]), 3)])])
    header, arrays = decode(frames)
    (entry,) = header["parts"]
    rows, segments = decode_block(entry, arrays)
    assert [(r, at.tolist(), s) for r, at, s in segments] == [(21, [3, 0], 0), (22, [5], 3)]
    np.testing.assert_array_equal(rows.obs[0], block.obs[0])
    assert rows.obs[1].tolist() == ["row 0", "row 1", "row 2", "row 3"]
    np.testing.assert_array_equal(rows.extras[0], [0.0, 1.0, 2.0, 3.0])
    part = rows.part(np.array([7, 8]), 0, 2)  # the client's view of segment 21
    err = part.errors[1]
    assert type(err) is EnvError
    assert err.remote_type == "KeyError"
    assert err.remote_traceback == "Tb..."
    assert str(err).startswith("step")
    assert err.env_id == 3
    assert part.binfo is not None
    assert part.binfo["v"].tolist() == [0, 1]


def test_a_malformed_block_is_refused_with_what_is_wrong() -> None:
    header, arrays = decode(encode_parts([BlockEntry(_block(3), [(1, np.array([0, 1]), 2)])]))
    with pytest.raises(ValueError, match="overruns a block of 3 rows"):
        decode_block(header["parts"][0], arrays)
    short = _block(3)
    short.obs = [short.obs[0][:2]]  # 2 observations for 3 rewards
    header, arrays = decode(encode_parts([BlockEntry(short, [(1, np.array([0]), 0)])]))
    with pytest.raises(ValueError, match="disagree on its length"):
        decode_block(header["parts"][0], arrays)


@pytest.mark.parametrize(
    "lists",
    [[[0], [2, 1], [], [5, 3, 4]], [[7]], [], [[], []], [[True, 2]]],
    ids=["mixed", "one", "none", "empty", "bool"],
)
def test_int_lists_gives_each_list_as_int64(lists: list[list[int]]) -> None:
    got = int_lists(lists)
    assert [a.tolist() for a in got] == [[int(x) for x in row] for row in lists]
    assert all(a.dtype == np.int64 and a.ndim == 1 for a in got)


@pytest.mark.parametrize("bad", [[3], ["ab"], [b"\x01"], [[1, [2]]], [[1.5, "x"]], [(1, 2)]])
def test_int_lists_refuses_what_is_not_a_list_of_ints(bad: list[Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        int_lists(bad)


def test_a_block_whose_segments_are_not_lists_is_refused() -> None:
    header, arrays = decode(encode_parts([BlockEntry(_block(3), [(1, np.array([0, 1]), 0)])]))
    entry = header["parts"][0]
    entry["blk"][0][1] = "01"
    with pytest.raises(TypeError, match="list of row numbers"):
        decode_block(entry, arrays)


class _Sink:
    """A sink whose rows are decoded and delivered."""


class _Relay(Relayed):
    """A sink whose rows go on wholesale to its outlet."""

    __slots__ = ("outlet",)

    def __init__(self, outlet: Any) -> None:
        self.outlet = outlet


class _Outlet:
    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, list[int], int, list[int]]]] = []

    def forward(self, rows: Block, segments: list[tuple[Any, np.ndarray, int, np.ndarray]]) -> None:
        self.calls.append([(sink, pos.tolist(), start, ids.tolist()) for sink, pos, start, ids in segments])


async def test_route_rows_merges_recv_runs_groups_outlets_and_drops_what_it_cannot_place() -> None:
    sched = Scheduler(8)
    queue = RecvQueue(None)
    outlet = _Outlet()
    relay_a, relay_b, plain = _Relay(outlet), _Relay(outlet), _Sink()
    ids = sched.resolve(None)
    sched.claim(ids)
    q1 = sched.open(0, "step", np.array([0, 1]), sink=queue)
    q2 = sched.open(0, "step", np.array([2]), sink=queue)
    ra = sched.open(0, "step", np.array([3, 4]), sink=relay_a, positions=np.array([5, 6]))
    rb = sched.open(0, "step", np.array([5]), sink=relay_b)
    pl = sched.open(0, "step", np.array([6, 7]), sink=plain, positions=np.array([1, 0]))
    delivered: list[tuple[Any, Any, list[int], Any]] = []
    bad: list[ValueError] = []
    remembered: list[list[int]] = []

    def deliver(sink: Any, req: Any, part: Part, positions: Any) -> None:
        delivered.append((sink, req, part.env_ids.tolist(), None if positions is None else positions.tolist()))

    # rows of a block: q1 (2 rows) and q2 (1 row) back to back, then a closed request (1 row), then
    # relay a, the plain sink (row 1 only), relay b, and a row of q2 given twice (refused)
    segments = [
        (q1.id, np.array([1, 0]), 0),
        (q2.id, np.array([0]), 2),
        (999, np.array([0]), 3),
        (ra.id, np.array([0, 1]), 4),
        (pl.id, np.array([1]), 6),
        (rb.id, np.array([0]), 7),
        (pl.id, np.array([1]), 8),
    ]
    route_block(sched, _block(9), segments, deliver, bad.append, lambda p: remembered.append(p.env_ids.tolist()))
    assert delivered == [(queue, None, [1, 0, 2], None), (plain, pl, [7], [0])]
    assert outlet.calls == [[(relay_a, [5, 6], 4, [3, 4]), (relay_b, [0], 7, [5])]]  # one call for the block
    assert remembered == [[3, 4], [5]]
    assert len(bad) == 1
    assert "answered already" in str(bad[0])
    assert sched.busy.tolist() == [False] * 6 + [True, False]  # env 6 (pl row 0) is still out
    assert set(sched.requests) == {pl.id}

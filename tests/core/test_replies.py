"""route_block with requests that take no rows, and RecvQueue runs cut by such segments."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from aioenv.core.replies import Block, route_block
from aioenv.core.scheduler import Request, Scheduler
from aioenv.core.sinks import Part, RecvQueue, Sink


def _block(n: int) -> Block:
    extras = [np.arange(n, dtype=np.float64), np.zeros(n, np.bool_), np.zeros(n, np.bool_)]
    return Block([np.arange(n, dtype=np.float32)], extras, None, None, None, "step")


async def test_rows_for_a_setup_request_are_refused_and_end_a_recv_run() -> None:
    sched = Scheduler(4)
    sched.place(1)
    queue = RecvQueue(None)
    made: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    q1 = sched.open(0, "step", np.array([0]), sink=queue)
    make = sched.open(0, "make", np.array([1]), sink=made)
    q2 = sched.open(0, "step", np.array([2]), sink=queue)
    delivered: list[tuple[Sink, Request | None, list[int]]] = []
    bad: list[ValueError] = []

    def deliver(sink: Sink, req: Request | None, part: Part, _positions: np.ndarray | None) -> None:
        delivered.append((sink, req, part.env_ids.tolist()))

    segments = [(q1.id, np.array([0]), 0), (make.id, np.array([0]), 1), (q2.id, np.array([0]), 2)]
    route_block(sched, _block(3), segments, deliver, bad.append)
    assert delivered == [(queue, None, [0]), (queue, None, [2])]  # not merged across the refused row
    assert len(bad) == 1
    assert "a make, which takes none" in str(bad[0])
    assert not made.done()
    assert sched.requests == {}

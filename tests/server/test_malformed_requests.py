"""A session survives any malformed request: STEP, RESET and CALL with each field wrong in turn.

Each case sends one request that is valid msgpack and well-formed as a message but has one field of
the wrong type, shape or length; whatever the server answers, the same session must then answer a
correct request (before, a refused request could leave its envs claimed: every later request of that
client failed with "already has a request in flight").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zmq
import zmq.asyncio

import aioenv
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_to_wire
from tests.support.procs import HANG
from tests.support.servers import ServerProcess

N = 3


class _Client:
    """A raw DEALER with an open pool of N CartPole envs on the server."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
        self.sock.connect(endpoint)
        self.next_id = 1
        opened = self.ask(Op.OPEN, {Key.ENV: "CartPole-v1", Key.NUM_ENVS: N, Key.KW: {}, Key.OPT: {}})
        assert opened[Key.OP] == Op.RESULT, opened

    def ask(self, op: str, fields: dict[str, Any], arrays: list[np.ndarray] | None = None) -> dict[str, Any]:
        """Send a request and return the header of the message that answers it (events, such as an env
        re-made after a deadline, are skipped)."""
        req_id = self.next_id
        self.next_id += 1
        self.sock.send_multipart(encode(op, {Key.ID: req_id, **fields}, arrays or []))
        while True:
            header, _ = decode(self.sock.recv_multipart())
            if _answers(header, req_id):
                return header

    def still_served(self) -> None:
        answer = self.ask(Op.RESET, {Key.ENV: list(range(N)), Key.SEED: [1, 2, 3]})
        assert answer[Key.OP] == Op.RESULT, answer


def _answers(header: dict[str, Any], req_id: int) -> bool:
    """Whether a message answers request ``req_id``: by its id, or by a segment or block of its rows."""
    if header.get(Key.ID) == req_id:
        return True
    for entry in header.get(Key.PARTS) or []:
        if entry.get(Key.ID) == req_id or any(block[0] == req_id for block in entry.get(Key.BLOCKS) or []):
            return True
    return False


@pytest.fixture(scope="module")
def client() -> Iterator[_Client]:
    srv = ServerProcess("--allow-env", "CartPole-v1", "--workers", "1")
    try:
        made = _Client(srv.endpoint)
        made.still_served()
        yield made
        made.sock.close()
    finally:
        srv.stop()


WRONG: list[Any] = [None, 0, -1, 1.5, 1e-300, 2**63, True, "x", b"x", [1], [0, 0], [[1]], {"a": 1}, [None, "x", 3]]


def _valid(kind: str) -> tuple[str, dict[str, Any], list[np.ndarray]]:
    """A correct request of ``kind`` for every env."""
    if kind == "step":
        arrays: list[np.ndarray] = []
        act = leaves_to_wire([np.ones(N, dtype=np.int64)], arrays)
        return Op.STEP, {Key.ENV: list(range(N)), Key.ACT: act}, arrays
    if kind == "reset":
        return Op.RESET, {Key.ENV: list(range(N)), Key.SEED: [0, 1, 2], Key.OPT: None}, []
    fields = {Key.ENV: list(range(N)), Key.KIND: "call", Key.NAME: "get_wrapper_attr", Key.ARGS: ["spec_id"]}
    return Op.CALL, {**fields, Key.KW: {}}, []


FIELDS = {
    "step": [Key.ENV, Key.ACT, Key.INFO_LIST, Key.TIMEOUT],
    "reset": [Key.ENV, Key.SEED, Key.OPT, Key.TIMEOUT],
    "call": [Key.ENV, Key.KIND, Key.NAME, Key.ARGS, Key.KW, Key.VALUES],
}
BAD_ACTIONS = [  # leaves of the wrong shape, length or kind
    [np.ones((N, 2), dtype=np.int64)],
    [np.ones(N + 1, dtype=np.int64)],
    [np.full(N, 1.5)],
    [np.ones(N, dtype=np.int64), np.ones(N, dtype=np.int64)],
    [np.array(["a", "b", "c"], dtype=object)],
]


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_a_malformed_request_never_costs_the_session(client: _Client, kind: str) -> None:
    """Every field of the request, in turn, given each wrong value (and a step each wrong set of leaves)."""
    cases: list[tuple[str, Any, list[np.ndarray] | None]] = [
        (key, value, None) for key in FIELDS[kind] for value in WRONG
    ]
    if kind == "step":
        cases += [(Key.ACT, leaves, leaves) for leaves in BAD_ACTIONS]
    for key, value, leaves in cases:
        op, fields, arrays = _valid(kind)
        if leaves is not None:
            arrays = []
            fields[key] = leaves_to_wire(leaves, arrays)
        else:
            fields[key] = value
        answer = client.ask(op, fields, arrays)
        assert answer[Key.OP] in (Op.RESULT, Op.ERROR), (key, value, answer)
        client.still_served()


@pytest.mark.parametrize(
    "spaces", [{"env": {"obs": {"type": "Nope"}, "act": {"type": "Discrete", "n": 2}}}, {"env": {"obs": 3}}]
)
async def test_a_server_that_describes_spaces_wrongly_gets_a_protocol_error(spaces: dict) -> None:
    """A hostile (or broken) server answers OPEN with spaces this client cannot read: make() raises
    ProtocolError, not a bare ValueError or KeyError."""
    router = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    async def answer_open() -> None:
        identity, *frames = await router.recv_multipart()
        header, _ = decode(frames)
        await router.send_multipart([identity, *encode(Op.RESULT, {Key.ID: header[Key.ID], Key.SPACES: spaces})])

    answering = asyncio.ensure_future(answer_open())
    try:
        with pytest.raises(aioenv.ProtocolError, match="space came described in a way this pool cannot read"):
            await asyncio.wait_for(aioenv.make("CartPole-v1", 2, endpoint=f"tcp://127.0.0.1:{port}"), HANG)
        await answering
    finally:
        answering.cancel()
        router.close()

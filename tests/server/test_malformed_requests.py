"""A session survives any malformed request: structure-aware fuzzing of STEP, RESET and CALL.

Each example sends one request that is valid msgpack and well-formed as a message but has one field of
the wrong type, shape or length; whatever the server answers, the same session must then answer a
correct request (before, a refused request could leave its envs claimed: every later request of that
client failed with "already has a request in flight").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        """Send a request and return the header of its answer (rows may come in several RESULTs: the last)."""
        req_id = self.next_id
        self.next_id += 1
        self.sock.send_multipart(encode(op, {Key.ID: req_id, **fields}, arrays or []))
        while True:
            header, _ = decode(self.sock.recv_multipart())
            if header.get(Key.ID) == req_id or header.get(Key.ID) is None:
                return header

    def still_served(self) -> None:
        answer = self.ask(Op.RESET, {Key.ENV: list(range(N)), Key.SEED: [1, 2, 3]})
        assert answer[Key.OP] == Op.RESULT, answer


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


WRONG = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=2), st.none()), max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(-3, 3), max_size=3),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=3),
)


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


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_a_malformed_request_never_costs_the_session(client: _Client, kind: str, data: st.DataObject) -> None:
    op, fields, arrays = _valid(kind)
    key = data.draw(st.sampled_from(FIELDS[kind]), label="field")
    if key == Key.ACT and data.draw(st.booleans(), label="wrong leaves"):
        arrays = []
        fields[key] = leaves_to_wire(data.draw(st.sampled_from(BAD_ACTIONS), label="leaves"), arrays)
    else:
        fields[key] = data.draw(WRONG, label="value")
    answer = client.ask(op, fields, arrays)
    assert answer[Key.OP] in (Op.RESULT, Op.ERROR), answer
    client.still_served()

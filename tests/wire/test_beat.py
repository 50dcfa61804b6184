"""How often a peer PINGs (:mod:`aioenv.wire.beat`): what a server asks for, and what a peer accepts."""

from __future__ import annotations

import math

import pytest

from aioenv.wire.beat import HEARTBEAT, SHORTEST, heard_interval, interval_for


@pytest.mark.parametrize(
    ("timeout", "interval"),
    [(10.0, 1.0), (4.0, 1.0), (2.0, 0.5), (1.0, 0.25), (0.5, 0.125), (0.1, SHORTEST), (3600.0, HEARTBEAT)],
)
def test_a_server_asks_for_a_quarter_of_its_timeout_at_most_every_second(timeout: float, interval: float) -> None:
    assert interval_for(timeout) == interval


@pytest.mark.parametrize(
    ("value", "interval"),
    [
        (0.25, 0.25),
        (1, 1.0),
        (2.0, HEARTBEAT),  # never slower than the peer's own pace: a server cannot make it look dead
        (1e300, HEARTBEAT),
        (0.0, SHORTEST),  # never faster than SHORTEST: a server cannot make its peers flood it
        (-5.0, SHORTEST),
        (math.nan, HEARTBEAT),
        (math.inf, HEARTBEAT),
        (True, HEARTBEAT),
        ("0.25", HEARTBEAT),
        (None, HEARTBEAT),  # a server that sends no such field
        ([0.25], HEARTBEAT),
    ],
)
def test_a_peer_takes_the_interval_only_within_bounds(value: object, interval: float) -> None:
    assert heard_interval(value) == interval


def test_a_peer_configured_faster_keeps_its_own_pace() -> None:
    assert heard_interval(0.5, own=0.1) == 0.1
    assert heard_interval(0.05, own=0.1) == SHORTEST

"""The short chaos soak, on every change: local pools of the three executors and a server with worker hosts
and clients, under random SIGKILLs and SIGSTOPs, raising and hanging envs (see tests/chaos/harness.py).
``make soak`` runs the same scenarios for longer."""

from __future__ import annotations

import pytest

import aioenv
from tests.chaos.harness import Tally
from tests.chaos.scenarios import SCENARIOS

SECONDS = {"local inline": 3.0, "local thread": 3.0, "local async": 3.0, "server": 6.0}
pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_request_gets_one_reply_and_nothing_leaks(name: str) -> None:
    tally = aioenv.run(SCENARIOS[name](SECONDS[name], 20261125, Tally()))
    assert tally.violations == []
    assert tally.leaks == []
    assert tally.replies == tally.requests > 0
    assert tally.outcomes["ok"] > 0
    assert sum(tally.faults.values()) > 0, "no fault was injected"
    if name == "server":
        assert tally.faults["server SIGSTOP 3.5 s"] == 1
        assert tally.outcomes["server lost (ConnectionLost)"] > 0  # the clients gave up on it, and came back

"""A spy on how a ``SyncPool`` call in the caller's thread waited for its replies: without the event loop or not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import aioenv.sync
from aioenv.core.coordinator import Coordinator
from tests.support.procs import HANG


class WaitsHere:
    """How often a call of the pool waited for its replies without running the event loop
    (``Coordinator.wait_here`` answered True), and how often it had to let the loop run. The loop need not run
    for ``block_at_most`` seconds (HANG, not 50 ms): every such wait is one, however slow the machine."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, block_at_most: float = HANG) -> None:
        monkeypatch.setattr(aioenv.sync, "_BLOCK_AT_MOST", block_at_most)
        self.done = self.not_done = 0
        wait_here = Coordinator.wait_here

        def counting(coord: Coordinator, future: asyncio.Future[Any], timeout: float) -> bool:
            done = wait_here(coord, future, timeout)
            if done:
                self.done += 1
            else:
                self.not_done += 1
            return done

        monkeypatch.setattr(Coordinator, "wait_here", counting)

"""A pool is driven from the event loop it was started in; a call from another thread's loop is refused at
once with a UsageError that names the ways out (it used to hang forever), for local and remote pools."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv import UsageError
from tests.support.procs import HANG


def _in_other_thread(make: Callable[[], Coroutine[Any, Any, Any]]) -> BaseException | None:
    """Run ``make()`` with asyncio.run in a new thread; the exception it raised (None if it returned)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            asyncio.run(make())
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the point: hand it back to the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "a call from another loop hung"
    return outcome[0]


@pytest.mark.parametrize("where", ["local", "remote"])
async def test_calls_from_another_threads_loop_are_refused_at_once(where: str, request: pytest.FixtureRequest) -> None:
    endpoint = request.getfixturevalue("cartpole_server").endpoint if where == "remote" else None
    async with aioenv.Pool("CartPole-v1", 2, num_workers=1, endpoint=endpoint) as pool:
        await pool.reset(seed=0)
        calls: list[Callable[[], Coroutine[Any, Any, Any]]] = [
            lambda: pool.step(np.zeros(2, dtype=np.int64)),
            lambda: pool.reset(),
            lambda: pool.recv(timeout=0.1),
            lambda: pool.get_attr("render_mode"),
            lambda: pool.aclose(),
        ]
        for call in calls:
            err = _in_other_thread(call)
            assert isinstance(err, UsageError), repr(err)
            assert "belongs to the event loop it was started in" in str(err)
            assert "SyncPool" in str(err)
            assert "run_coroutine_threadsafe" in str(err)
        obs, *_ = await pool.step(np.ones(2, dtype=np.int64))  # its own loop is still served
        assert obs.shape == (2, 4)
    assert pool.closed


async def test_the_pools_own_loop_reached_from_a_thread_works() -> None:
    """The documented way out: another thread hands the coroutine to the pool's loop."""
    async with aioenv.Pool("CartPole-v1", 2, num_workers=1) as pool:
        await pool.reset(seed=0)
        loop = asyncio.get_running_loop()

        def from_thread() -> Any:
            return asyncio.run_coroutine_threadsafe(pool.step(np.zeros(2, dtype=np.int64)), loop).result(HANG)

        result = await asyncio.to_thread(from_thread)
        assert result[0].shape == (2, 4)

"""A pool used in a child after ``os.fork()`` is refused at once with a UsageError that says so (it used to hang
silently, or talk to the parent's workers), for async pools, SyncPool and AioVectorEnv; the parent's pool goes on.
Real forks, real worker processes."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.vector import AioVectorEnv
from aioenv.wire.options import PoolExecutor
from tests.support.procs import HANG

SAID = "was started in process"


def _report(write_fd: int, call: Callable[[], object]) -> None:
    """In the child: run ``call`` and write what became of it to ``write_fd``."""
    try:
        call()
        said = "returned"
    except BaseException as exc:  # noqa: BLE001 - the point: tell the parent whatever it was
        said = f"{type(exc).__name__}: {exc}"
    os.write(write_fd, said.encode())


def _outcome(read_fd: int, pid: int) -> str:
    """In the parent: what the child said, within HANG seconds (a child that said nothing by then hung)."""
    deadline = time.monotonic() + HANG
    try:
        ready, _, _ = select.select([read_fd], [], [], HANG)
        said = os.read(read_fd, 65536).decode() if ready else "nothing: it hung"
    finally:
        os.close(read_fd)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline + HANG, "the child did not exit"
            time.sleep(0.01)
    return said


def in_child(call: Callable[[], object]) -> str:
    """``call()`` in a forked child; what became of it (``"Type: message"`` or ``"returned"``)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read_fd)
            _report(write_fd, call)
        finally:
            os._exit(0)
    os.close(write_fd)
    return _outcome(read_fd, pid)


def _refused(said: str) -> None:
    assert said.startswith("UsageError: "), said
    assert SAID in said
    assert "os.fork()" in said
    assert "spawn" in said


async def test_an_async_pool_in_a_forked_child_is_refused_at_once() -> None:
    async with aioenv.Pool("CartPole-v1", 2, num_workers=1, executor="inline") as pool:
        await pool.reset(seed=0)
        acts = np.zeros(2, dtype=np.int64)
        # The child has no running loop (asyncio forgets it at fork), so it runs one of its own: without the
        # fork check, the foreign-loop check would refuse it, naming threads and loops, not the fork.
        _refused(in_child(lambda: aioenv.run(pool.step(acts))))
        _refused(in_child(lambda: aioenv.run(pool.reset())))
        obs, *_ = await pool.step(acts)  # the parent's pool is untouched
        assert obs.shape == (2, 4)


def _refused_in_children_then_served(step: Callable[[np.ndarray], Any], reset: Callable[[], object]) -> None:
    """A blocking pool of 2 CartPole envs: its step and reset are refused in forked children; its own step works."""
    reset()
    acts = np.zeros(2, dtype=np.int64)
    _refused(in_child(lambda: step(acts)))
    _refused(in_child(reset))
    obs, *_ = step(acts)
    assert obs.shape == (2, 4)


def test_a_sync_pool_in_a_forked_child_is_refused_at_once() -> None:
    with aioenv.SyncPool("CartPole-v1", 2, num_workers=1, executor="inline") as pool:
        _refused_in_children_then_served(pool.step, pool.reset)


@pytest.mark.parametrize("executor", ["auto", "inline"])
def test_a_vector_env_in_a_forked_child_is_refused_at_once(executor: PoolExecutor) -> None:
    """Whatever runs the envs: even envs in the parent's process would be the child's copies, and a call might
    start worker processes the parent owns."""
    envs = AioVectorEnv([partial(gym.make, "CartPole-v1")] * 2, executor=executor)
    try:
        _refused_in_children_then_served(envs.step, envs.reset)
    finally:
        envs.close()

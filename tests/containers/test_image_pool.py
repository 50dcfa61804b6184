"""Pools of ``openenv+image:`` envs on a real engine: the OpenEnv test env (:mod:`tests.support.openenv_app`) as a
container image, one container per env, through first-finished steps, a container killed mid-episode, a hung step
replaced under ``step_timeout``, closing, and a client SIGKILLed (``make test-containers``)."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest

import aioenv
from aioenv import EnvError, StepTimeout
from tests.conftest import CONTAINER_ENGINE
from tests.containers.conftest import Engine
from tests.containers.image import IMAGE
from tests.support.openenv_server import killed_client
from tests.support.procs import HANG, processes_with_env

#: Containers start in seconds each (OpenEnv's imports), several at once on a loaded machine.
START = HANG * 6
pytestmark = pytest.mark.timeout(START * 3)

NAME = "openenv+image:" + IMAGE
KWARGS = {"engine": CONTAINER_ENGINE}


def _actions(n: int, delays: list[float] | None = None) -> dict[str, object]:
    words = np.empty(n, dtype=object)
    words[:] = [f"w{i}" for i in range(n)]
    return {"delay": np.array(delays or [0.0] * n), "fail": np.zeros(n, dtype=np.int64), "word": words}


async def _make(n: int, **options: object) -> aioenv.Pool:
    async with asyncio.timeout(START):
        return await aioenv.make(NAME, n, executor="async", num_workers=1, env_kwargs=KWARGS, **options)


async def _names(pool: aioenv.Pool) -> list[str]:
    return [str(name) for name in await pool.get_attr("container_name")]


async def test_each_env_runs_in_a_container_of_its_own_and_close_removes_them(engine: Engine) -> None:
    pool = await _make(4, batch_size=2)
    try:
        async with asyncio.timeout(START):
            obs, _ = await pool.reset()
        assert obs["count"].tolist() == [0, 0, 0, 0]
        names = await _names(pool)
        running = {c.name: c for c in engine.owned()}
        assert sorted(running) == sorted(names)  # four containers, one per env, nothing else
        assert len({c.owner for c in running.values()}) == 1  # one worker's, under its reaper's label
        for c in running.values():
            assert c.status == "running"
            (binding,) = c.ports["8000/tcp"]
            assert binding["HostIp"] == "127.0.0.1"  # published on loopback only

        async with asyncio.timeout(HANG):
            pool.send(_actions(4, [3.0, 0.0, 3.0, 0.0]))
            *_, first = await pool.recv()
            assert sorted(first["env_id"].tolist()) == [1, 3]  # whichever finished first
            obs, *_, second = await pool.recv()
            assert sorted(second["env_id"].tolist()) == [0, 2]
            assert obs["count"].tolist() == [1, 1]
    finally:
        await pool.aclose()
    assert engine.owned() == []  # removed by the close itself, not later


async def test_a_container_killed_mid_episode_fails_its_env_only_and_a_reset_starts_a_fresh_one(
    engine: Engine,
) -> None:
    pool = await _make(3)
    try:
        async with asyncio.timeout(START):
            await pool.reset()
        async with asyncio.timeout(HANG):
            await pool.step(_actions(3))
        before = await _names(pool)
        engine.kill(before[1])
        async with asyncio.timeout(HANG):
            obs, *_ = await pool.step_env(0, {"word": "on", "delay": 0.0, "fail": 0})
            assert obs["count"] == 2
            with pytest.raises(EnvError, match="OpenEnvContainerError") as err:
                await pool.step_env(1, {"word": "x", "delay": 0.0, "fail": 0})
        assert err.value.env_id == 1
        message = str(err.value)
        assert before[1] in message, message
        assert "exited with code 137 (SIGKILL) during step" in message, message
        assert "next reset starts a fresh container" in message, message
        async with asyncio.timeout(START):
            obs, _ = await pool.reset(env_ids=[1])
        assert obs["count"].tolist() == [0]
        after = await _names(pool)
        assert after[0] == before[0]
        assert after[2] == before[2]
        assert after[1] != before[1]
        assert sorted(c.name for c in engine.owned()) == sorted(after)  # the dead one is removed
        async with asyncio.timeout(HANG):
            obs, *_ = await pool.step(_actions(3))
        assert obs["count"].tolist() == [3, 1, 2]
    finally:
        await pool.aclose()


async def test_a_hung_step_is_replaced_with_a_fresh_container(engine: Engine) -> None:
    pool = await _make(3, step_timeout=3.0)
    try:
        async with asyncio.timeout(START):
            await pool.reset()
        before = await _names(pool)
        async with asyncio.timeout(HANG):
            with pytest.raises(StepTimeout) as err:
                await pool.step(_actions(3, [600.0, 0.0, 0.0]))
        assert err.value.env_id == 0
        async with asyncio.timeout(START):
            obs, _ = await pool.reset(env_ids=[0])
        assert obs["count"].tolist() == [0]
        after = await _names(pool)
        assert after[0] != before[0]
        assert after[1:] == before[1:]
        async with asyncio.timeout(HANG):
            while before[0] in {c.name for c in engine.owned()}:  # the hung one is removed
                await asyncio.sleep(0.1)
        assert sorted(c.name for c in engine.owned()) == sorted(after)
        async with asyncio.timeout(HANG):
            obs, *_ = await pool.step(_actions(3))
        assert obs["count"].tolist() == [1, 2, 2]
    finally:
        await pool.aclose()


async def test_a_killed_client_leaves_no_container(engine: Engine) -> None:
    """SIGKILL the process that made the pool: its worker dies with it, and the worker's reaper removes every
    container it had started, then exits."""
    token = uuid.uuid4().hex
    async with killed_client(NAME, token, ready_within=START, env_kwargs=KWARGS):
        assert len(engine.owned()) == 3
        assert any("reaper.py" in cmd for _, cmd in processes_with_env(token))
    engine.wait_none()
    async with asyncio.timeout(HANG):
        while processes_with_env(token):  # the worker and its reaper
            await asyncio.sleep(0.05)

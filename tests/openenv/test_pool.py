"""Pools of OpenEnv sessions (``openenv+ws://``) against a real OpenEnv server process: spaces from its schemas,
batched and first-finished steps, episodes that end, and what the server sees when a pool closes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import aioenv
from aioenv import EnvError
from tests.support.openenv_server import OpenEnvServer
from tests.support.procs import HANG


def _actions(words: list[str], delays: list[float] | None = None) -> dict[str, object]:
    n = len(words)
    out = np.empty(n, dtype=object)
    out[:] = words
    return {"delay": np.array(delays or [0.0] * n), "fail": np.zeros(n, dtype=np.int64), "word": out}


async def test_spaces_and_steps_follow_the_servers_models(server: OpenEnvServer) -> None:
    async with asyncio.timeout(HANG):
        pool = await aioenv.make("openenv+" + server.url, 3, seed=10)
        try:
            assert pool.executor == "async"  # executor="auto", without timing an env
            assert pool.num_workers >= 1  # never in this process unless asked
            assert "OpenEnv sessions are async envs" in pool.placement_reason
            space = pool.single_observation_space
            assert list(space.spaces) == ["count", "echoed", "scores"]  # done, reward, metadata are not observations
            assert list(pool.single_action_space.spaces) == ["delay", "fail", "word"]  # metadata left out
            assert pool.single_action_space["word"].max_length == 64
            obs, infos = await pool.reset()
            assert obs["count"].tolist() == [0, 0, 0]
            assert [i["seed"] for i in _info_rows(infos, 3)] == [10, 11, 12]
            obs, rew, term, trunc, infos = await pool.step(_actions(["a", "bé", "猫"]))
            assert obs["echoed"].tolist() == ["a", "bé", "猫"]
            assert obs["count"].tolist() == [1, 1, 1]
            assert rew.tolist() == [0.5, 0.5, 0.5]
            assert not term.any()
            assert not trunc.any()
            assert [list(s) for s in obs["scores"]] == [[1.0], [1.0], [1.0]]
        finally:
            await pool.aclose()


def _info_rows(infos: dict[str, object], n: int) -> list[dict[str, object]]:
    """Per-env info dicts out of gymnasium's batched info (keys with ``_key`` masks)."""
    rows: list[dict[str, object]] = [{} for _ in range(n)]
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        for i in range(n):
            if mask is None or mask[i]:  # type: ignore[index]
                rows[i][key] = values[i]  # type: ignore[index]
    return rows


async def test_done_ends_the_episode_and_the_next_step_starts_one(server: OpenEnvServer) -> None:
    async with asyncio.timeout(HANG):
        pool = await aioenv.make("openenv+" + server.url, 2)
        try:
            await pool.reset(options={"length": 2})
            await pool.step(_actions(["x", "y"]))
            _, _, term, _, _ = await pool.step(_actions(["x", "y"]))
            assert term.tolist() == [True, True]
            obs, rew, term, _, _ = await pool.step(_actions(["x", "y"]))  # next_step autoreset: the reset's row
            assert obs["count"].tolist() == [0, 0]
            assert rew.tolist() == [0.0, 0.0]
            assert not term.any()
        finally:
            await pool.aclose()


async def test_recv_returns_the_first_finished_sessions(server: OpenEnvServer) -> None:
    async with asyncio.timeout(HANG):
        pool = await aioenv.make("openenv+" + server.url, 4, batch_size=2, num_workers=1)
        try:
            await pool.reset()
            pool.send(_actions(["slow", "fast", "slow", "fast"], [3.0, 0.0, 3.0, 0.0]))
            *_, first = await pool.recv()
            assert sorted(first["env_id"].tolist()) == [1, 3]
            *_, second = await pool.recv()
            assert sorted(second["env_id"].tolist()) == [0, 2]
        finally:
            await pool.aclose()


async def test_an_error_reply_is_the_envs_error_and_a_reset_recovers(server: OpenEnvServer) -> None:
    async with asyncio.timeout(HANG):
        pool = await aioenv.make("openenv+" + server.url, 2)
        try:
            await pool.reset()
            with pytest.raises(EnvError, match="asked to fail") as err:
                await pool.step({"delay": np.zeros(2), "fail": np.array([1, 0]), "word": _actions(["a", "b"])["word"]})
            assert err.value.env_id == 0
            obs, _ = await pool.reset(env_ids=[0])
            assert obs["count"].tolist() == [0]
            obs, *_ = await pool.step(_actions(["a", "b"]))
            assert obs["count"].tolist() == [1, 2]
        finally:
            await pool.aclose()


async def test_closing_the_pool_ends_every_session() -> None:
    small = OpenEnvServer(max_sessions=4).start()
    try:
        async with asyncio.timeout(HANG):
            for _ in range(2):  # a second pool gets all 4 sessions: the first left none behind
                pool = await aioenv.make("openenv+" + small.url, 4)
                await pool.reset()
                assert small.live() == 4
                await pool.aclose()
                small.wait_live(0)
    finally:
        small.stop()


async def test_a_full_server_refuses_the_reset_and_the_next_reset_opens_a_session() -> None:
    """A server at its session limit answers the reset with an error and closes the socket: the env says so, and its
    next reset, once a session is free, opens a new one at once."""
    small = OpenEnvServer(max_sessions=2).start()
    try:
        async with asyncio.timeout(HANG):
            first = await aioenv.make("openenv+" + small.url, 2, executor="async", num_workers=1)
            second = await aioenv.make("openenv+" + small.url, 1, executor="async", num_workers=1)
            try:
                await first.reset()
                with pytest.raises(EnvError, match="CAPACITY_REACHED"):
                    await second.reset()
                await first.aclose()
                await asyncio.to_thread(small.wait_live, 0)
                obs, _ = await second.reset()
                assert obs["count"].tolist() == [0]
            finally:
                await first.aclose()
                await second.aclose()
    finally:
        small.stop()


def test_a_sync_pool_steps_sessions(server: OpenEnvServer) -> None:
    with aioenv.make_sync("openenv+" + server.url, 2, executor="async", num_workers=1) as pool:
        obs, _ = pool.reset(seed=1)
        assert obs["count"].tolist() == [0, 0]
        obs, rew, *_ = pool.step(_actions(["p", "q"]))
        assert obs["echoed"].tolist() == ["p", "q"]
        assert rew.tolist() == [0.5, 0.5]

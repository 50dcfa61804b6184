"""What a pool of OpenEnv sessions does when a session hangs, the server dies, or the client does: the caller is told,
the slot is freed, and the server is left with no session of the pool's."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest

import aioenv
from aioenv import EnvError, StepTimeout
from aioenv.collect import EpisodeCollector
from tests.support.openenv_server import OpenEnvServer, killed_client
from tests.support.procs import HANG


def _actions(n: int, delays: list[float] | None = None) -> dict[str, object]:
    words = np.empty(n, dtype=object)
    words[:] = [f"w{i}" for i in range(n)]
    return {"delay": np.array(delays or [0.0] * n), "fail": np.zeros(n, dtype=np.int64), "word": words}


async def test_a_hung_step_times_out_and_its_session_is_replaced(server: OpenEnvServer) -> None:
    """The late step's session is closed (the server ends it once its step returns), a fresh one takes the slot, and
    the other sessions' steps come back."""
    async with asyncio.timeout(HANG):
        before = server.live()
        pool = await aioenv.make("openenv+" + server.url, 3, executor="async", num_workers=1, step_timeout=1.0)
        try:
            await pool.reset()
            with pytest.raises(StepTimeout) as err:
                await pool.step(_actions(3, [4.0, 0.0, 0.0]))
            assert err.value.env_id == 0
            assert err.value.partial is not None
            obs, _ = await pool.reset(env_ids=[0])  # the fresh session of slot 0
            assert obs["count"].tolist() == [0]
            obs, *_ = await pool.step(_actions(3))
            assert obs["count"].tolist() == [1, 2, 2]
            # the hung session ends on the server when its step returns: this pool holds 3 sessions, not 4
            await asyncio.to_thread(server.wait_live, before + 3)
        finally:
            await pool.aclose()
        await asyncio.to_thread(server.wait_live, before)


async def test_a_hung_step_with_on_timeout_truncate_is_a_truncated_row(server: OpenEnvServer) -> None:
    async with asyncio.timeout(HANG):
        pool = await aioenv.make(
            "openenv+" + server.url, 2, executor="async", num_workers=1, step_timeout=1.0, on_timeout="truncate"
        )
        try:
            await pool.reset()
            _, rew, _, trunc, info = await pool.step(_actions(2, [4.0, 0.0]))
            assert trunc.tolist() == [True, False]
            assert rew.tolist() == [0.0, 0.5]
            assert info["timeout"].tolist()[0]
            obs, *_ = await pool.step(_actions(2))  # slot 0 starts a new episode on a fresh session
            assert obs["count"].tolist() == [0, 2]
        finally:
            await pool.aclose()


async def test_a_killed_server_fails_the_steps_and_a_restarted_one_is_reached_on_reset() -> None:
    srv = OpenEnvServer().start()
    try:
        async with asyncio.timeout(HANG):
            pool = await aioenv.make("openenv+" + srv.url, 2, executor="async", num_workers=1)
            try:
                await pool.reset()
                pool.send(_actions(2, [30.0, 30.0]))  # both sessions mid-step when the server dies
                await asyncio.sleep(0.5)
                srv.stop()
                with pytest.raises(EnvError, match=r"closed the session|cannot open") as err:
                    await pool.recv()
                assert "OpenEnvConnectionError" in str(err.value)
                with pytest.raises(EnvError):  # the other env's failure, by the next recv
                    await pool.recv(min_results=1)
                with pytest.raises(EnvError, match="cannot open a session"):  # no server: the reset says so
                    await pool.reset()
                await asyncio.to_thread(srv.start)  # the same port again
                obs, _ = await pool.reset()
                assert obs["count"].tolist() == [0, 0]
                obs, *_ = await pool.step(_actions(2))
                assert obs["count"].tolist() == [1, 1]
            finally:
                await pool.aclose()
            await asyncio.to_thread(srv.wait_live, 0)
    finally:
        srv.stop()


async def test_episodes_collect_over_sessions(server: OpenEnvServer) -> None:
    async def policy(obs: dict[str, object], env_id: int) -> dict[str, object]:
        return {"delay": np.float64(0.0), "fail": np.int64(0), "word": f"{env_id}:{obs['count']}"}

    async with asyncio.timeout(HANG):
        pool = await aioenv.make("openenv+" + server.url, 4, executor="async", num_workers=1)
        try:
            async with EpisodeCollector(pool, policy, num_episodes=8) as episodes:
                records = [ep async for ep in episodes]
        finally:
            await pool.aclose()
    assert len(records) == 8
    assert all(len(ep) == 5 for ep in records)  # the server's episodes: 5 steps, done on the last
    assert all(ep.total_reward == 2.5 for ep in records)
    turn = records[0].turns[-1]
    assert turn.terminated
    assert turn.next_observation["echoed"] == turn.action["word"]


async def test_a_killed_client_leaves_no_session(server: OpenEnvServer) -> None:
    """SIGKILL the process that made the pool: its workers die with it and the server sees their sockets close."""
    before = server.live()
    async with killed_client("openenv+" + server.url, uuid.uuid4().hex):
        assert server.live() == before + 3
    await asyncio.to_thread(server.wait_live, before)

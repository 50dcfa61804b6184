"""Graph, Sequence, OneOf, nestings of them and user-defined spaces through real pools: the trajectories of
``gymnasium.vector.SyncVectorEnv`` for the same seeds and actions, spaces equal to gymnasium's, on every executor
and through a server; a user-defined space is refused by a server with a UsageError that names it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import aioenv
from aioenv._compat import AutoresetMode
from aioenv.errors import InvalidAction, UsageError
from aioenv.vector import AioVectorEnv
from tests.envs.asyncwrap import wrapped
from tests.envs.variable import GraphEnv, SequenceEnv, UserSpaceEnv
from tests.support.compare import assert_same, gym_autoreset
from tests.support.servers import ServerProcess

N = 3
STEPS = 9
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}

CASES: dict[str, tuple[str, dict[str, Any], Callable[[], gym.Env[Any, Any]]]] = {
    "graph_and_one_of": ("tests.envs.variable:graph_env", {}, GraphEnv),
    "sequence": ("tests.envs.variable:sequence_env", {"stack": False}, SequenceEnv),
    "sequence_stacked": ("tests.envs.variable:sequence_env", {"stack": True}, functools.partial(SequenceEnv, True)),
    "user_defined": ("tests.envs.variable:user_env", {}, UserSpaceEnv),
}


def _as_gymnasium(value: Any) -> Any:
    """aioenv's batched obs in gymnasium's form: object rows (B,) become tuples of B values."""
    if isinstance(value, dict):
        return {k: _as_gymnasium(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_as_gymnasium(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        return tuple(value.tolist())
    return value


def _assert_step(ours: tuple[Any, ...], theirs: tuple[Any, ...], where: str) -> None:
    obs, reward, terminated, truncated, info = ours
    assert_same(_as_gymnasium(obs), theirs[0], f"{where} obs")
    for name, a, b in zip(
        ("reward", "terminated", "truncated"), (reward, terminated, truncated), theirs[1:4], strict=False
    ):
        np.testing.assert_array_equal(a, b, err_msg=f"{where} {name}", strict=True)
    info = {k: v for k, v in info.items() if k != "env_id"}
    assert_same(info, theirs[4], f"{where} info")


def _actions(sync: SyncVectorEnv) -> list[Any]:
    sync.action_space.seed(7)
    return [sync.action_space.sample() for _ in range(STEPS)]


async def _same_trajectories(pool: aioenv.Pool, sync: SyncVectorEnv, label: str) -> None:
    assert pool.single_observation_space == sync.single_observation_space
    assert pool.single_action_space == sync.single_action_space
    assert pool.observation_space == sync.observation_space
    assert pool.action_space == sync.action_space
    obs, _info = await pool.reset(seed=11)
    theirs = sync.reset(seed=11)
    assert_same(_as_gymnasium(obs), theirs[0], f"{label} reset obs")
    for t, actions in enumerate(_actions(sync)):
        _assert_step(await pool.step(actions), sync.step(actions), f"{label} step {t}")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
@pytest.mark.parametrize("case", list(CASES))
async def test_trajectories_equal_gymnasiums(case: str, executor: str, mode: str) -> None:
    env, kwargs, factory = CASES[case]
    sync = SyncVectorEnv([factory] * N, **gym_autoreset(MODES[mode]))
    if executor == "async":
        pool = aioenv.Pool(functools.partial(wrapped, factory), N, executor="async", autoreset_mode=mode)
    else:
        pool = aioenv.Pool(env, N, num_workers=2, env_kwargs=kwargs, executor=executor, autoreset_mode=mode)
    try:
        async with pool:
            await _same_trajectories(pool, sync, f"{case}/{executor}/{mode}")
    finally:
        sync.close()


async def test_a_wrong_value_names_its_env_and_leaves_the_others_untouched() -> None:
    async with aioenv.Pool("tests.envs.variable:graph_env", N, num_workers=2) as pool:
        await pool.reset(seed=0)
        good = [(0, np.int64(1))] * N
        with pytest.raises(InvalidAction, match=r"env 1.*OneOf") as info:
            await pool.step([good[0], (7, np.int64(1)), good[2]])
        assert info.value.env_id == 1
        obs, reward, *_ = await pool.step(good)
        assert reward.tolist() == [1.0, 1.0, 1.0]
        assert_same(obs["last"][2], (0, np.int64(1)))


# ------------------------------------------------------------------ through a server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess("--allow-env", "tests.envs.variable:*", "--allow-env-kwargs", "tests.envs.variable:*=*")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("case", ["graph_and_one_of", "sequence_stacked"])
async def test_a_remote_pool_gives_the_same_trajectories(server: ServerProcess, case: str) -> None:
    env, kwargs, factory = CASES[case]
    sync = SyncVectorEnv([factory] * N)
    try:
        async with aioenv.Pool(env, N, endpoint=server.endpoint, env_kwargs=kwargs) as pool:
            await _same_trajectories(pool, sync, f"remote {case}")
    finally:
        sync.close()


async def test_a_server_refuses_a_user_defined_space_and_says_why(server: ServerProcess) -> None:
    with pytest.raises(UsageError, match=r"a server cannot carry .*tests\.envs\.variable\.CardSpace.*local pool"):
        await aioenv.make("tests.envs.variable:user_env", 2, endpoint=server.endpoint)
    async with aioenv.Pool("tests.envs.variable:graph_env", 1, endpoint=server.endpoint) as pool:
        await pool.reset(seed=0)  # the server is fine and serves the next pool


# ------------------------------------------------------------------ the gymnasium drop-in


@pytest.mark.parametrize("case", list(CASES))
def test_aio_vector_env_gives_async_vector_envs_values(case: str) -> None:
    """Side by side with the peer (which needs ``shared_memory=False`` for these spaces, as AioVectorEnv does):
    equal spaces, and the same tuples of per-env values for the same seeds and actions."""
    factory = CASES[case][2]
    peer = gym.vector.AsyncVectorEnv([factory] * N, shared_memory=False)
    ours = AioVectorEnv([factory] * N, shared_memory=False)
    try:
        assert (ours.observation_space, ours.action_space) == (peer.observation_space, peer.action_space)
        assert_same(ours.reset(seed=5), peer.reset(seed=5))
        peer.action_space.seed(3)
        for t in range(STEPS):
            actions = peer.action_space.sample()
            assert_same(ours.step(actions), peer.step(actions), f"step {t}")
    finally:
        ours.close()
        peer.close()

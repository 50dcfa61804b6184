"""An env whose step returns an observation that does not fit its space fails its own row with EnvError naming
the env; observations numpy can cast (a list, another float dtype) are cast, as ``SyncVectorEnv`` casts them.

A worker batches a step's observations in one numpy call and writes them row by row only when that fails: these
tests hold the two ways to the same results, in a worker process (shared rows or messages), on a thread worker
and in the pool's own process."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv import EnvError

SEED = 7


class _StepObs(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose step observation goes through ``change`` (its reset's does not)."""

    def __init__(self, change: Any) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.change = change

    def step(self, action: Any) -> Any:
        obs, *rest = self.env.step(action)
        return (self.change(obs), *rest)


def _good() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def _wide() -> gym.Env[Any, Any]:
    return _StepObs(lambda obs: np.append(obs, np.float32(0)))


def _as_list() -> gym.Env[Any, Any]:
    return _StepObs(lambda obs: obs.tolist())


def _float64() -> gym.Env[Any, Any]:
    return _StepObs(lambda obs: obs.astype(np.float64))


WHERE = {
    "worker": {"executor": "inline", "num_workers": 1},
    "worker_messages": {"executor": "inline", "num_workers": 1, "slab": "off"},
    "thread": {"executor": "thread", "num_workers": 1},
    "in_process": {"executor": "in_process"},
}


def _expected(num_envs: int, actions: np.ndarray) -> np.ndarray:
    """What plain CartPole envs reset with ``SEED + i`` observe after one step of ``actions``, (num_envs, 4)."""
    rows = []
    for i in range(num_envs):
        env = gym.make("CartPole-v1")
        env.reset(seed=SEED + i)
        rows.append(env.step(actions[i])[0])
    return np.array(rows, dtype=np.float32)


async def _pool(factories: list[Any], where: str, monkeypatch: pytest.MonkeyPatch) -> aioenv.Pool:
    kwargs = dict(WHERE[where])
    if kwargs.pop("slab", None) == "off":
        monkeypatch.setenv("AIOENV_SLAB", "off")
    pool = aioenv.Pool(factories, **kwargs)
    await pool.start()
    return pool


@pytest.mark.parametrize("where", list(WHERE))
async def test_an_observation_of_the_wrong_shape_fails_its_env_only(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = await _pool([_good, _wide, _good, _as_list], where, monkeypatch)
    try:
        await pool.reset(seed=SEED)
        actions = np.array([1, 0, 1, 0], dtype=np.int64)
        with pytest.raises(EnvError) as caught:
            await pool.step(actions)
        err = caught.value
        assert err.env_id == 1
        assert "(5,)" in str(err), str(err)  # what arrived
        assert "(4,)" in str(err), str(err)  # and what the row holds
        obs, reward, terminated, truncated, info = err.partial
        assert info["env_id"].tolist() == [0, 2, 3]
        assert obs.dtype == np.float32
        np.testing.assert_array_equal(obs, _expected(4, actions)[[0, 2, 3]])
        assert reward.tolist() == [1.0, 1.0, 1.0]
        assert not terminated.any()
        assert not truncated.any()
        obs, *_ = await pool.step(actions[[0, 2]], env_ids=[0, 2])  # the others go on
        assert obs.shape == (2, 4)
    finally:
        await pool.aclose()


@pytest.mark.parametrize("where", list(WHERE))
async def test_observations_numpy_can_cast_are_cast(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = await _pool([_as_list, _float64, _good], where, monkeypatch)
    try:
        await pool.reset(seed=SEED)
        actions = np.array([0, 1, 1], dtype=np.int64)
        obs, reward, *_ = await pool.step(actions)
        assert obs.dtype == np.float32
        assert obs.shape == (3, 4)
        np.testing.assert_array_equal(obs, _expected(3, actions))
        assert reward.tolist() == [1.0, 1.0, 1.0]
    finally:
        await pool.aclose()


class _DictObs(gym.Env[Any, Any]):
    """Observes ``{"pos": (2,) float32, "n": int}``; with ``bad`` its steps leave out ``"pos"``."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-9, 9, (2,), np.float32), "n": gym.spaces.Discrete(99)})
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: bool = False) -> None:
        self.bad, self.n = bad, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.n = 0
        return {"pos": np.zeros(2, np.float32), "n": 0}, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.n += 1
        obs = {"n": self.n} if self.bad else {"pos": np.full(2, action, np.float32), "n": self.n}
        return obs, 1.0, False, False, {}


@pytest.mark.parametrize("where", list(WHERE))
async def test_a_dict_observation_missing_a_key_fails_its_env_only(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = await _pool([_DictObs, lambda: _DictObs(bad=True), _DictObs], where, monkeypatch)
    try:
        await pool.reset(seed=SEED)
        with pytest.raises(EnvError) as caught:
            await pool.step(np.array([1, 1, 0], dtype=np.int64))
        err = caught.value
        assert err.env_id == 1
        assert "pos" in str(err), str(err)
        obs, *_, info = err.partial
        assert info["env_id"].tolist() == [0, 2]
        assert obs["pos"].tolist() == [[1, 1], [0, 0]]
        assert obs["n"].tolist() == [1, 1]
    finally:
        await pool.aclose()


class _WideReset(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose reset observation has a fifth coordinate."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return np.append(obs, np.float32(0)), info


@pytest.mark.parametrize("where", list(WHERE))
async def test_a_reset_observation_of_the_wrong_shape_fails_its_env_only(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = await _pool([_good, _WideReset, _as_list], where, monkeypatch)
    try:
        with pytest.raises(EnvError) as caught:
            await pool.reset(seed=SEED)
        err = caught.value
        assert err.env_id == 1
        assert "(5,)" in str(err), str(err)
        obs, info = err.partial
        assert info["env_id"].tolist() == [0, 2]
        expected = [gym.make("CartPole-v1").reset(seed=SEED + i)[0] for i in (0, 2)]
        np.testing.assert_array_equal(obs, np.array(expected, dtype=np.float32))
    finally:
        await pool.aclose()

"""An env whose step returns a reward that is not a number fails its own row with EnvError naming the env
and the value (it used to become NaN without a word); the other envs go on."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TransformReward

import aioenv
from aioenv import EnvError


def _good() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def _no_reward() -> gym.Env[Any, Any]:
    return TransformReward(gym.make("CartPole-v1"), lambda _reward: None)


def _array_reward() -> gym.Env[Any, Any]:
    return TransformReward(gym.make("CartPole-v1"), lambda reward: np.array(reward))


def _row_reward() -> gym.Env[Any, Any]:
    return TransformReward(gym.make("CartPole-v1"), lambda reward: np.array([reward], dtype=np.float32))


@pytest.mark.parametrize("executor", ["inline", "thread", "in_process"])
async def test_a_reward_of_none_fails_its_env_only(executor: str) -> None:
    workers = None if executor == "in_process" else 1
    factories = [_good, _no_reward, _array_reward, _row_reward]
    async with aioenv.Pool(factories, num_workers=workers, executor=executor) as pool:
        await pool.reset(seed=0)
        with pytest.raises(EnvError) as caught:
            await pool.step(np.ones(4, dtype=np.int64))
        err = caught.value
        assert err.env_id == 1
        assert err.remote_type == "TypeError"
        assert "step returned reward None (NoneType): a reward must be a real number" in str(err)
        _, reward, _, _, info = err.partial  # the others' rows: a float and one-element arrays all count
        assert info["env_id"].tolist() == [0, 2, 3]
        assert reward.tolist() == [1.0, 1.0, 1.0]

"""``workers.runtime.Group.stack_obs``: a plain space's observations batched in one numpy call, or None when they do
not all fit (the step loop then writes them row by row, which names the row at fault)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from workers.runtime import Group


def _group(obs_space: gym.Space[Any]) -> Group:
    env = gym.make("CartPole-v1")
    env.observation_space = obs_space
    group = Group(lambda: env)
    group.adopt_spaces(env)
    return group


def test_box_rows_become_one_leaf_cast_to_the_space_dtype() -> None:
    group = _group(gym.spaces.Box(-1, 1, (3,), np.float32))
    batch = group.stack_obs([np.zeros(3, np.float64), [0.5, 0.25, 1.0], np.ones(3, np.float32)])
    assert batch is not None
    assert batch.dtype == np.float32
    assert batch.shape == (3, 3)
    assert batch.tolist() == [[0, 0, 0], [0.5, 0.25, 1.0], [1, 1, 1]]
    assert batch.flags.writeable
    assert batch.flags.c_contiguous


def test_discrete_rows_of_python_and_numpy_ints() -> None:
    group = _group(gym.spaces.Discrete(5))
    batch = group.stack_obs([1, np.int64(4), np.int32(0)])
    assert batch is not None
    assert batch.dtype == np.int64
    assert batch.tolist() == [1, 4, 0]


@pytest.mark.parametrize(
    "values",
    [
        [np.zeros(3), np.zeros(4)],  # one row of another shape
        [np.zeros((1, 3)), np.zeros((1, 3))],  # every row of another (broadcastable) shape
        [np.zeros(3), None],  # a failed row's placeholder
        [np.zeros(3), "abc"],  # not a number
    ],
    ids=["ragged", "extra_axis", "none", "text"],
)
def test_rows_that_do_not_fit_give_none(values: list[Any]) -> None:
    assert _group(gym.spaces.Box(-1, 1, (3,), np.float32)).stack_obs(values) is None


def test_a_dict_space_is_not_plain() -> None:
    group = _group(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
    assert not group.plain_obs
    assert group.obs_dtype is None

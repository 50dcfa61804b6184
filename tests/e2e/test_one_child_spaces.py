"""A Dict or Tuple space of one child holds one array leaf, but its values are still a dict or a tuple: the env
gets ``{"m": 2}`` (not ``2``) and returns ``{"a": obs}``, in every placement, as in ``SyncVectorEnv``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import aioenv

BOX = gym.spaces.Box(-10, 10, (2,), np.float32)
SPACES: dict[str, tuple[gym.Space[Any], gym.Space[Any]]] = {
    "dict": (gym.spaces.Dict({"a": BOX}), gym.spaces.Dict({"m": gym.spaces.Discrete(3)})),
    "tuple": (gym.spaces.Tuple((BOX,)), gym.spaces.Tuple((gym.spaces.Discrete(3),))),
}


class EchoEnv(gym.Env[Any, Any]):
    """Observes its last action (both coordinates), wrapped as its one-child spaces say."""

    def __init__(self, kind: str = "dict") -> None:
        self.kind = kind
        self.observation_space, self.action_space = SPACES[kind]

    def _wrap(self, value: float) -> Any:
        obs = np.full(2, value, np.float32)
        return {"a": obs} if self.kind == "dict" else (obs,)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._wrap(-1.0), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        expected = dict if self.kind == "dict" else tuple
        if not isinstance(action, expected):
            raise TypeError(f"expected a {expected.__name__} action, got {action!r}")
        move = action["m"] if self.kind == "dict" else action[0]
        return self._wrap(float(move)), 1.0, False, False, {}


WHERE = {
    "worker": {"executor": "inline", "num_workers": 1},
    "thread": {"executor": "thread", "num_workers": 1},
    "in_process": {"executor": "in_process"},
    "thread_here": {"executor": "thread", "num_workers": 0},
}


@pytest.mark.parametrize("kind", list(SPACES))
@pytest.mark.parametrize("where", list(WHERE))
async def test_one_child_spaces_keep_their_dict_or_tuple(kind: str, where: str) -> None:
    moves = np.array([2, 0, 1], dtype=np.int64)
    actions: Any = {"m": moves} if kind == "dict" else (moves,)
    sync = SyncVectorEnv([lambda: EchoEnv(kind)] * 3)
    sync.reset(seed=0)
    expected = sync.step(actions)[0]
    async with aioenv.Pool([lambda: EchoEnv(kind)] * 3, **WHERE[where]) as pool:
        await pool.reset(seed=0)
        obs, reward, *_ = await pool.step(actions)
    leaf, want = (obs["a"], expected["a"]) if kind == "dict" else (obs[0], expected[0])
    assert type(obs) is type(expected)
    np.testing.assert_array_equal(leaf, want)
    assert leaf.tolist() == [[2, 2], [0, 0], [1, 1]]
    assert reward.tolist() == [1.0, 1.0, 1.0]

"""Envs whose spaces have values of varying structure: Graph, Sequence (stacked or not), OneOf, nestings of them in
Dict and Tuple, and a user-defined ``gymnasium.spaces.Space`` subclass. Every value is drawn from the env's own
``np_random``, so the same seeds give the same trajectories in any vector env; the observation after a step
echoes the action, so actions are checked to have arrived intact."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["Card", "CardSpace", "GraphEnv", "SequenceEnv", "UserSpaceEnv", "graph_env", "sequence_env", "user_env"]

NODE = spaces.Box(0.0, 1.0, (3,), np.float32)


class GraphEnv(gym.Env[Any, Any]):
    """Observation: Dict(graph: Graph(Box(3), Discrete(4)), last: OneOf(Discrete(3), Box(2))); action: the OneOf.

    Episodes end after 3 steps (terminated), so autoreset is exercised."""

    action_space = spaces.OneOf([spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32)])
    observation_space = spaces.Dict(
        {"graph": spaces.Graph(NODE, spaces.Discrete(4)), "last": action_space}  # type: ignore[dict-item]
    )

    def __init__(self) -> None:
        self.t = 0

    def _graph(self) -> spaces.GraphInstance:
        rng = self.np_random
        k, m = int(rng.integers(1, 5)), int(rng.integers(0, 6))
        nodes = rng.random((k, 3), dtype=np.float32)
        return spaces.GraphInstance(nodes, rng.integers(0, 4, m), rng.integers(0, k, (m, 2)))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return {"graph": self._graph(), "last": (0, np.int64(0))}, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        index, value = action
        reward = float(value) if index == 0 else float(np.sum(value))
        return {"graph": self._graph(), "last": action}, reward, self.t >= 3, False, {}


class SequenceEnv(gym.Env[Any, Any]):
    """Observation: Tuple(Sequence(Box(2), stack), Box(1)); action: Sequence(Discrete(5)) (a tuple of ints).

    The observed sequence holds one row per action item; episodes are truncated after 4 steps."""

    action_space = spaces.Sequence(spaces.Discrete(5))

    def __init__(self, stack: bool = False) -> None:
        self.observation_space = spaces.Tuple(
            (spaces.Sequence(spaces.Box(0.0, 10.0, (2,), np.float32), stack=stack), spaces.Box(0, 9, (1,), np.int64))
        )
        self.stack = stack
        self.t = 0

    def _rows(self, items: Any) -> Any:
        rows = [np.array([float(i), self.np_random.random()], np.float32) for i in items]
        if self.stack:
            return np.stack(rows) if rows else np.zeros((0, 2), np.float32)
        return tuple(rows)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        length = int(self.np_random.integers(0, 4))
        return (self._rows(range(length)), np.array([0])), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return (self._rows(action), np.array([self.t])), float(len(action)), False, self.t >= 4, {}


@dataclass(frozen=True)
class Card:
    """A value no msgpack type describes: only pickle carries it."""

    rank: int
    suit: str


class CardSpace(spaces.Space[Card]):
    """A user-defined space: playing cards."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, None, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> Card:
        return Card(int(self.np_random.integers(1, 14)), str(self.np_random.choice(list("SHDC"))))

    def contains(self, x: Any) -> bool:
        return isinstance(x, Card) and 1 <= x.rank <= 13 and x.suit in "SHDC"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CardSpace)

    def __hash__(self) -> int:
        return hash(CardSpace)


class UserSpaceEnv(gym.Env[Any, Any]):
    """Observation and action: cards (a user-defined space). The observed card is the action's rank + 1."""

    observation_space = CardSpace()
    action_space = CardSpace()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Card, dict[str, Any]]:
        super().reset(seed=seed)
        return Card(int(self.np_random.integers(1, 14)), "S"), {}

    def step(self, action: Card) -> tuple[Card, float, bool, bool, dict[str, Any]]:
        return Card(action.rank % 13 + 1, action.suit), float(action.rank), action.rank == 13, False, {}


def graph_env() -> GraphEnv:
    """A :class:`GraphEnv` (for ``"tests.envs.variable:graph_env"``)."""
    return GraphEnv()


def sequence_env(stack: bool = False) -> SequenceEnv:
    """A :class:`SequenceEnv`."""
    return SequenceEnv(stack)


def user_env() -> UserSpaceEnv:
    """A :class:`UserSpaceEnv`."""
    return UserSpaceEnv()

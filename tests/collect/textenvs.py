"""A multi-turn text env for the episode collector's tests (``"tests.collect.textenvs:Dialogue"``).

Each episode is ``turns`` turns (drawn from 1..``longest`` at each reset, from the seed). The observation is a
prompt ``"turn K of N: say WORD"``; the right reply is ``WORD`` (reward 1, else 0). After the last turn the
observation is ``"the end"`` and the episode terminates. ``hang_at``: that turn of every episode waits an
hour (for ``step_timeout``); ``fail_at``: that turn raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import random
import string
from typing import Any

import gymnasium as gym

import aioenv

CHARSET = string.ascii_letters + string.digits + " :'\"?!.,-"
WORDS = ("apple", "river", "stone", "cloud", "ember", "tiger")


class Dialogue(aioenv.AsyncEnv[str, str]):
    """See the module docstring."""

    observation_space = gym.spaces.Text(max_length=4096, min_length=0, charset=CHARSET)
    action_space = gym.spaces.Text(max_length=4096, min_length=0, charset=CHARSET)

    def __init__(self, longest: int = 4, hang_at: int | None = None, fail_at: int | None = None) -> None:
        self.longest = longest
        self.hang_at = hang_at
        self.fail_at = fail_at
        self.rng = random.Random(0)
        self.turns = 1
        self.t = 0
        self.word = ""

    def _prompt(self) -> str:
        self.word = self.rng.choice(WORDS)
        return f"turn {self.t + 1} of {self.turns}: say {self.word}"

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A new dialogue of 1..longest turns."""
        if seed is not None:
            self.rng = random.Random(seed)
        self.turns = self.rng.randint(1, self.longest)
        self.t = 0
        return self._prompt(), {"turns": self.turns}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade the reply; the next prompt, or the end."""
        self.t += 1
        if self.t == self.hang_at:
            await asyncio.sleep(3600)
        if self.t == self.fail_at:
            raise RuntimeError(f"the judge broke at turn {self.t}")
        await asyncio.sleep(0.001)
        reward = float(action == self.word)
        if self.t >= self.turns:
            return "the end", reward, True, False, {"turn": self.t}
        return self._prompt(), reward, False, False, {"turn": self.t}

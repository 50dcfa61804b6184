"""A small OpenEnv environment written with OpenEnv's own server classes, served by ``uvicorn`` for the tests of
:mod:`aioenv.openenv`: a counter that echoes a word, with a step that can wait, raise or (waiting long) hang.

``app`` is what OpenEnv's ``create_app`` makes of it (``COUNT_MAX_SESSIONS`` sessions at most, 64 by default),
with one route of the tests' own: ``GET /live``, the environments alive in the server (made and not yet closed:
OpenEnv closes a session's environment when the session ends).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

#: Steps of an episode unless a reset's ``length`` says otherwise.
LENGTH = 5


class CountAction(Action):
    """A word to echo; ``delay`` seconds to wait first; ``fail``: raise instead."""

    word: str = Field(..., max_length=64, description="echoed back")
    delay: float = Field(0.0, ge=0.0, description="seconds the step waits")
    fail: bool = Field(False, description="the step raises")


class CountObservation(Observation):
    """The step count of the episode and the last word."""

    count: int = Field(0, description="steps taken in this episode")
    echoed: str = Field("", description="the last action's word")
    scores: list[float] = Field(default_factory=list, description="one score per step so far")


_live = [0]


class CountEnvironment(Environment[CountAction, CountObservation, State]):
    """Counts steps; an episode ends after ``length`` of them (a reset keyword, :data:`LENGTH` by default)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        _live[0] += 1
        self._state = State(step_count=0)
        self.length = LENGTH
        self.scores: list[float] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CountObservation:
        self.length = int(kwargs.get("length", LENGTH))
        self._state = State(episode_id=episode_id, step_count=0)
        self.scores = []
        return CountObservation(count=0, echoed="", metadata={"seed": seed})

    def _advance(self, action: CountAction) -> CountObservation:
        if action.fail:
            raise RuntimeError(f"asked to fail at step {self._state.step_count + 1}")
        self._state.step_count += 1
        self.scores.append(float(self._state.step_count))
        n = self._state.step_count
        return CountObservation(
            count=n,
            echoed=action.word,
            scores=list(self.scores),
            done=n >= self.length,
            reward=0.5,
            metadata={"step": n},
        )

    def step(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> CountObservation:
        return self._advance(action)

    async def step_async(self, action: CountAction, timeout_s: float | None = None, **kwargs: Any) -> CountObservation:
        if action.delay:
            await asyncio.sleep(action.delay)
        return self._advance(action)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        _live[0] -= 1


app = create_app(
    CountEnvironment,
    CountAction,
    CountObservation,
    env_name="count",
    max_concurrent_envs=int(os.environ.get("COUNT_MAX_SESSIONS", "64")),
)


@app.get("/live")
def live() -> dict[str, int]:
    """Environments made and not yet closed."""
    return {"live": _live[0]}

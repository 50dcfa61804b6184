"""A plain OpenEnv server of the env ``bench_openenv.py`` serves through aioenv: each step awaits ``--delay``
seconds and counts, written with OpenEnv's own server classes (``Environment``, ``create_app``) and run on uvicorn
as OpenEnv's templates run theirs.

    python benchmarks/openenv_peer.py --port 8001 --delay 10 --max-sessions 4096
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

DELAY = 10.0


class SleepAction(Action):
    """A step's action: 0 or 1, as the aioenv env's Discrete(2)."""

    action: int = Field(default=0, ge=0, le=1)


class SleepObservation(Observation):
    """The step count, four times, as the aioenv env's observation."""

    obs: list[float] = Field(default_factory=lambda: [0.0] * 4)


class SleepEnvironment(Environment):
    """Awaits ``DELAY`` seconds per step (the aioenv side: ``aioenv.envs.latency:AsyncSleepEnv``, sigma 0)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SleepObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return SleepObservation(obs=[0.0] * 4, done=False, reward=0.0)

    def step(self, action: SleepAction, **kwargs: Any) -> SleepObservation:  # type: ignore[override]
        raise NotImplementedError("served through step_async")

    async def step_async(self, action: SleepAction, **kwargs: Any) -> SleepObservation:  # type: ignore[override]
        await asyncio.sleep(DELAY)
        self._state.step_count += 1
        t = float(self._state.step_count)
        return SleepObservation(obs=[t] * 4, done=False, reward=1.0)

    @property
    def state(self) -> State:
        return self._state


def main() -> None:
    global DELAY
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=10.0)
    parser.add_argument("--max-sessions", type=int, default=4096)
    args = parser.parse_args()
    DELAY = args.delay
    app = create_app(
        SleepEnvironment, SleepAction, SleepObservation, env_name="sleep", max_concurrent_envs=args.max_sessions
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", ws_max_size=1 << 20)


if __name__ == "__main__":
    main()

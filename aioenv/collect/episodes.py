"""Whole episodes as records, turn by turn: multi-turn LLM and tool-use trajectories.

:class:`EpisodeCollector` steps a pool the way ``Collector(mode="async", per_env=True)`` does (each env
asks the policy on its own as soon as its last step is back, so thousands of episodes go on at once) and
yields an :class:`Episode` each time one ends, whatever its length: terminated, truncated (by the env,
``max_turns``, or a step past the pool's ``step_timeout`` with ``on_timeout="truncate"``) or cut short by an
error, which is recorded on its turn. Observations and actions may be anything a space holds; with
gymnasium ``Text`` spaces each turn's observation is the prompt and its action the response.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator
from typing import Any

import aioenv.collect._tree as _tree
from aioenv.collect.chunk import Chunk, row_info
from aioenv.collect.driver import Driver
from aioenv.collect.engine import Engine
from aioenv.collect.options import Options
from aioenv.collect.policy import PolicyRunner
from aioenv.pool import Pool
from aioenv.sync import SyncPool

__all__ = ["Episode", "EpisodeCollector", "Turn"]


@dataclasses.dataclass
class Turn:
    """One step of an episode.

    Attributes:
        observation: what the policy saw (the prompt, for a ``Text`` env).
        action: what it answered (None when the policy call itself failed).
        reward: the step's reward (0 for a failed or timed-out step).
        terminated, truncated: as the env (or the pool's deadline, or ``max_turns``) said.
        next_observation: the observation the step produced (the true last one at the episode's end).
        policy_seconds: how long the policy took to answer. env_seconds: how long the env step took.
        timeout: the step overran the pool's ``step_timeout`` and came back truncated.
        error: ``"policy: Type: message"`` or ``"env: Type: message"`` when this turn failed, else None.
        info: the env's info for this step.
    """

    observation: Any
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    next_observation: Any
    policy_seconds: float
    env_seconds: float
    timeout: bool = False
    error: str | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Episode:
    """One whole episode, as its turns.

    Attributes:
        env_id: the env it ran on. traj_id: its trajectory id (unique over the collector's life).
        turns: every step, in order (at least one).
        terminated / truncated: how it ended (both False when an error cut it: see ``error``).
        error: the failed turn's error, when one ended the episode.
        started / ended: ``time.monotonic()`` when its first turn was asked for and when its last came back.
    """

    env_id: int
    traj_id: int
    turns: list[Turn]
    terminated: bool
    truncated: bool
    error: str | None
    started: float
    ended: float

    @property
    def total_reward(self) -> float:
        """The sum of the turns' rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def timeouts(self) -> int:
        """How many turns overran the step deadline."""
        return sum(t.timeout for t in self.turns)

    @property
    def seconds(self) -> float:
        """Wall time from the first turn's policy call to the last turn's end."""
        return self.ended - self.started

    def __len__(self) -> int:
        return len(self.turns)


class _Builder:
    """Turns chunk rows into turns, and finished trajectories into episodes."""

    def __init__(self) -> None:
        self.open: dict[int, tuple[int, float, list[Turn]]] = {}

    def add(self, chunk: Chunk) -> list[Episode]:
        now = time.monotonic()
        out: list[Episode] = []
        for j in range(len(chunk)):
            traj = int(chunk.traj_id[j])
            error = chunk.error[j] if chunk.error is not None else None
            env_s, pol_s = float(chunk.env_seconds[j]), float(chunk.policy_seconds[j])
            env_id, started, turns = self.open.setdefault(traj, (int(chunk.env_id[j]), now - env_s - pol_s, []))
            info = row_info(chunk.info, int(chunk.info_row[j])) if chunk.info_row is not None else {}
            failed_policy = error is not None and error.startswith("policy:")
            turn = Turn(
                observation=_tree.take(chunk.obs, j),
                action=None if failed_policy else _tree.take(chunk.action, j),
                reward=float(chunk.reward[j]),
                terminated=bool(chunk.terminated[j]),
                truncated=bool(chunk.truncated[j]),
                next_observation=_tree.take(chunk.next_obs, j),
                policy_seconds=pol_s,
                env_seconds=env_s,
                timeout=bool(chunk.timeout[j]),
                error=error,
                info=info,
            )
            turns.append(turn)
            if error is not None or turn.terminated or turn.truncated or chunk.cut[j]:
                del self.open[traj]
                out.append(Episode(env_id, traj, turns, turn.terminated, turn.truncated, error, started, now))
        return out


class EpisodeCollector(Driver[Episode]):
    """Iterate whole :class:`Episode` records from ``pool`` with ``policy``, each as soon as it ends.

    ``async for episode in EpisodeCollector(pool, policy, num_episodes=1000)`` over an :class:`aioenv.Pool`;
    ``for episode in ...`` over an :class:`aioenv.SyncPool`. Episodes come in the order they end.

    Args:
        pool: any pool; for LLM and tool envs an ``executor="async"`` pool of :class:`aioenv.AsyncEnv`, with
            ``step_timeout`` and ``on_timeout="truncate"`` so that a hung turn ends its episode truncated
            (the record keeps every turn, the last with ``timeout=True``) instead of stopping the others.
        policy: ``per_env=True`` (default): ``policy(obs_row, env_id) -> action`` for one env (an
            ``async def`` calling a model, say); else ``policy(obs, env_ids) -> actions`` batched, as for
            :class:`~aioenv.collect.Collector`.
        num_episodes: stop after this many episodes (episodes still running then are dropped); None: never.
        max_turns: truncate an episode at this many turns (its env is reset).
        on_error: ``"reset"`` (default): a turn whose policy call or env step raised ends its episode with
            ``error`` set and the env is reset; ``"raise"``: the iteration raises.
        min_results: as for :class:`~aioenv.collect.Collector`.
        max_results: as for :class:`~aioenv.collect.Collector`.
        background: as for :class:`~aioenv.collect.Collector`.
        queue_size: as for :class:`~aioenv.collect.Collector`.
        seed: as for :class:`~aioenv.collect.Collector`.

    Attributes:
        episodes: episodes yielded so far.
    """

    def __init__(
        self,
        pool: Pool | SyncPool,
        policy: Any,
        *,
        num_episodes: int | None = None,
        max_turns: int | None = None,
        per_env: bool = True,
        on_error: str = "reset",
        min_results: int = 1,
        max_results: int | None = None,
        background: bool = False,
        queue_size: int = 64,
        seed: int | None = None,
    ) -> None:
        self.opts = Options.checked(
            frames_per_batch=1,
            total_frames=num_episodes,
            max_frames_per_traj=max_turns,
            mode="async",
            min_results=min_results,
            max_results=max_results,
            per_env=per_env,
            on_error=on_error,
            background=background,
            queue_size=queue_size,
            seed=seed,
        )
        super().__init__(pool, background=self.opts.background, queue_size=self.opts.queue_size)
        self.runner = PolicyRunner(policy, self.pool.single_action_space, per_env=self.opts.per_env)
        self.episodes = 0

    async def _produce(self) -> AsyncGenerator[Episode, None]:
        engine = Engine(self.pool, self.runner, self.opts, keep_info=True)
        builder = _Builder()
        await engine.start()
        try:
            while self.episodes < self.opts.total_frames:
                for chunk in await engine.advance():
                    for episode in builder.add(chunk):
                        if self.episodes >= self.opts.total_frames:
                            return
                        self.episodes += 1
                        yield episode
        finally:
            await engine.drain()

"""``EpisodeCollector``: whole multi-turn text episodes, with the turns that failed or hung kept in the record.

A pool of :class:`tests.collect.textenvs.Dialogue` envs on the ``async`` executor: env 0 plays normally,
env 1 hangs on its second turn (``step_timeout`` with ``on_timeout="truncate"``), env 2's env raises on
its first turn, and the policy fails for env 3. The policy is an ``async def`` called once per env.
"""

from __future__ import annotations

import asyncio
import functools
import re

import pytest

import aioenv
from aioenv.collect import Episode, EpisodeCollector
from tests.collect.textenvs import Dialogue

pytestmark = pytest.mark.timeout(60)


async def answer(prompt: str, env_id: int) -> str:
    """A "model": says the word it was asked for, after a short wait."""
    await asyncio.sleep(0.002)
    match = re.search(r"say (\w+)$", prompt)
    return match.group(1) if match else "?"


async def reply(prompt: str, env_id: int) -> str:
    """:func:`answer`, but the model is down for env 3."""
    if env_id == 3:
        await asyncio.sleep(0.002)
        raise RuntimeError("model unavailable")
    return await answer(prompt, env_id)


def length_of(episode: Episode) -> int:
    match = re.match(r"turn 1 of (\d+)", episode.turns[0].observation)
    assert match, episode.turns[0].observation
    return int(match.group(1))


async def test_episodes_keep_every_turn_including_timeouts_and_errors() -> None:
    fns = [
        Dialogue,
        functools.partial(Dialogue, hang_at=2),
        functools.partial(Dialogue, fail_at=1),
        Dialogue,
    ]
    by_env: dict[int, list[Episode]] = {i: [] for i in range(4)}
    async with (
        aioenv.Pool(fns, executor="async", num_workers=1, seed=0, step_timeout=0.3, on_timeout="truncate") as pool,
        EpisodeCollector(pool, reply) as collector,
    ):
        async for episode in collector:
            by_env[episode.env_id].append(episode)
            if len(by_env[0]) >= 4 and any(e.timeouts for e in by_env[1]) and by_env[2] and by_env[3]:
                break
    # env 0: whole dialogues, every reply right, turns chained
    for ep in by_env[0]:
        assert len(ep) == length_of(ep)
        assert ep.terminated
        assert not ep.truncated
        assert ep.error is None
        assert ep.total_reward == len(ep)
        for a, b in zip(ep.turns, ep.turns[1:], strict=False):
            assert a.next_observation == b.observation
        assert ep.turns[-1].next_observation == "the end"
        assert [t.info["turn"] for t in ep.turns] == list(range(1, len(ep) + 1))
        assert all(t.env_seconds > 0 and t.policy_seconds > 0 for t in ep.turns)
    assert len({ep.traj_id for ep in by_env[0]}) == len(by_env[0])
    # env 1: a dialogue of 2+ turns hangs on turn 2: it comes back truncated with turn 1 kept
    hung = [ep for ep in by_env[1] if ep.timeouts]
    for ep in hung:
        assert len(ep) == 2
        assert ep.truncated
        assert not ep.terminated
        assert ep.error is None
        first, second = ep.turns
        assert first.reward == 1.0
        assert not first.timeout
        assert second.timeout
        assert second.truncated
        assert second.reward == 0.0
        assert second.info.get("timeout") is True
        assert second.env_seconds >= 0.25
    assert all(len(ep) == 1 and ep.terminated for ep in by_env[1] if not ep.timeouts)
    # env 2: the env raised on turn 1: the error is the episode's end, the reply is kept
    for ep in by_env[2]:
        assert len(ep) == 1
        assert ep.error is not None
        assert ep.error.startswith("env: EnvError")
        assert "the judge broke at turn 1" in ep.error
        assert ep.turns[0].action == re.search(r"say (\w+)$", ep.turns[0].observation).group(1)  # type: ignore[union-attr]
        assert not ep.terminated
        assert not ep.truncated
    # env 3: the policy raised: no action, the error names it
    for ep in by_env[3]:
        assert len(ep) == 1
        assert ep.turns[0].action is None
        assert ep.error == "policy: RuntimeError: model unavailable"


def test_episodes_over_a_sync_pool_with_a_turn_limit() -> None:
    with (
        aioenv.SyncPool(functools.partial(Dialogue, longest=6), 8, executor="async", num_workers=1, seed=3) as pool,
        EpisodeCollector(pool, answer, num_episodes=24, max_turns=3) as collector,
    ):
        episodes = list(collector)
    assert len(episodes) == 24
    assert collector.episodes == 24
    for ep in episodes:
        assert 1 <= len(ep) <= 3
        assert ep.total_reward == len(ep)
        if length_of(ep) > 3:
            assert ep.truncated
            assert not ep.terminated
            assert len(ep) == 3
        else:
            assert ep.terminated
            assert len(ep) == length_of(ep)
    assert any(ep.truncated for ep in episodes)

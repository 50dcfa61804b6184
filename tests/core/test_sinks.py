"""RecvQueue: rows of many parts (a worker reply each, some with failed rows) taken by ``recv`` in
batches of any size must be exactly the rows delivered, in order, with gymnasium's batched infos."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv.core.sinks import Part, RecvQueue
from aioenv.errors import EnvError
from aioenv.wire.infos import batch_infos
from tests.support.compare import assert_same

SPACE = gym.spaces.Dict(
    {"pos": gym.spaces.Box(-10, 10, (2,), np.float32), "k": gym.spaces.Discrete(5)},
)


def _info(kind: str, env: int) -> dict[str, Any]:
    if kind == "uniform":
        return {"t": env * 0.5, "n": env}
    if kind == "mixed":
        return {"t": env * 0.5} if env % 2 else {"name": f"env{env}", "n": np.int16(env)}
    return {}


@st.composite
def _parts(draw: st.DrawFn) -> list[tuple[list[int], str, set[int]]]:
    """Parts as (env ids, info kind, failed rows)."""
    out = []
    env = 0
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(["none", "uniform", "mixed"]))
        failed = set(draw(st.lists(st.integers(0, k - 1), max_size=1)))
        out.append((list(range(env, env + k)), kind, failed))
        env += k
    return out


def _make_part(ids: list[int], kind: str, failed: set[int]) -> Part:
    k = len(ids)
    obs = [np.array([e % 5 for e in ids], np.int64), np.array([[e, -e] for e in ids], np.float32)]  # leaves: k, pos
    extras = [np.array(ids, np.float64) / 10, np.array([e % 3 == 0 for e in ids]), np.array([e % 4 == 0 for e in ids])]
    infos = [_info(kind, e) for e in ids]
    errors = {row: EnvError(f"env {ids[row]} failed", env_id=ids[row]) for row in failed}
    binfo = batch_infos(infos, k) if any(infos) else None
    return Part(np.array(ids, np.int64), obs, extras, None, errors, binfo=binfo)


def _expected(rows: list[tuple[int, str]]) -> tuple[Any, ...]:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    ref.num_envs = len(rows)
    info: dict[str, Any] = {}
    for i, (env, kind) in enumerate(rows):
        if got := _info(kind, env):
            info = ref._add_info(info, got, i)
    ids = [env for env, _ in rows]
    info["env_id"] = np.array(ids, np.int32)
    obs = {
        "k": np.array([e % 5 for e in ids], np.int64),
        "pos": np.array([[e, -e] for e in ids], np.float32).reshape(-1, 2),
    }
    return (
        obs,
        np.array(ids, np.float64) / 10,
        np.array([e % 3 == 0 for e in ids], bool),
        np.array([e % 4 == 0 for e in ids], bool),
        info,
    )


@settings(max_examples=150, deadline=None)
@given(parts=_parts(), data=st.data())
def test_takes_return_every_row_in_order_with_gymnasium_infos(
    parts: list[tuple[list[int], str, set[int]]], data: st.DataObject
) -> None:
    queue = RecvQueue(SPACE)
    stream: list[tuple[int, str] | EnvError] = []  # what recv must hand out, in order
    for ids, kind, failed in parts:
        part = _make_part(ids, kind, failed)
        queue.expect(len(ids))
        queue.deliver(part)
        for row, env in enumerate(ids):
            stream.append(part.errors[row] if row in failed else (env, kind))
    while stream:
        assert queue.ready == len(stream)
        most = data.draw(st.integers(1, 6), label="max_rows")
        head = stream[0]
        if isinstance(head, EnvError):
            with pytest.raises(EnvError) as caught:
                queue.take(most)
            assert caught.value is head
            stream.pop(0)
            continue
        rows: list[tuple[int, str]] = []
        while stream and len(rows) < most and not isinstance(stream[0], EnvError):
            row = stream.pop(0)
            assert not isinstance(row, EnvError)
            rows.append(row)
        got = queue.take(most)
        assert_same(got, _expected(rows))
    assert queue.ready == 0
    assert queue.in_flight == 0


def test_taken_rows_do_not_share_memory_with_the_reply() -> None:
    """A batch handed to the caller is its own: writing to it never reaches a part still queued."""
    queue = RecvQueue(SPACE)
    part = _make_part([0, 1, 2], "uniform", set())
    queue.expect(3)
    queue.deliver(part)
    obs, reward, *_ = queue.take(2)
    obs["pos"][:] = 99
    reward[:] = 99
    rest_obs, rest_reward, *_ = queue.take(2)
    assert rest_obs["pos"].tolist() == [[2, -2]]
    assert rest_reward.tolist() == [0.2]
    assert not np.shares_memory(obs["pos"], part.obs[1])
    assert not np.shares_memory(reward, part.reward)

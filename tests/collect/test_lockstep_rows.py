"""A lock-step batch made from each step's own arrays (``aioenv.collect.batch.LockstepRows``): what is marked once
per step (a step that overran, the policy's version) lands in the right rows, object observations stack, and every
batch owns its arrays."""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest

import aioenv
from aioenv.collect import Batch, Collector
from tests.collect import refs
from tests.collect.textenvs import Dialogue

pytestmark = pytest.mark.timeout(90)


def answer(obs: np.ndarray) -> np.ndarray:
    """The word each prompt asks for ("?" for "the end")."""
    return np.array([m.group(1) if (m := re.search(r"say (\w+)$", str(o))) else "?" for o in obs], dtype=object)


async def test_a_step_that_overran_is_marked_in_its_own_row() -> None:
    # env 1 hangs on the second turn of every dialogue; with on_timeout="truncate" that row comes back truncated,
    # reward 0, info["timeout"] True, and the collector marks it in batch.timeout
    fns = [Dialogue, functools.partial(Dialogue, hang_at=2), Dialogue]
    async with (
        aioenv.Pool(fns, executor="async", num_workers=1, seed=0, step_timeout=0.3, on_timeout="truncate") as pool,
        Collector(pool, answer, frames_per_batch=3 * 8, total_frames=3 * 8) as collector,
    ):
        (batch,) = [b async for b in collector]
    assert batch.shape == (8, 3)
    assert batch.obs.dtype == object
    assert isinstance(batch.obs[0, 0], str)
    hung = np.argwhere(batch.timeout)
    assert hung.size, "env 1 reached its second turn"
    assert set(hung[:, 1].tolist()) == {1}
    for t, e in hung.tolist():
        assert batch.truncated[t, e]
        assert batch.done[t, e]
        assert batch.traj_end[t, e]
        assert batch.reward[t, e] == 0.0
        assert batch.step_count[t, e] == 1  # its trajectory's second transition
        assert batch.obs[t, e].startswith("turn 2 of ")
    fine = batch.valid & ~batch.timeout
    assert (batch.reward[fine] == 1.0).all()  # every other reply was right


def fields(batch: Batch) -> dict[str, np.ndarray]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch) if f.name not in ("layout", "frames")}


async def test_every_batch_owns_its_arrays() -> None:
    seen: list[dict[str, np.ndarray]] = []
    async with (
        aioenv.Pool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=4 * 5, total_frames=4 * 15) as collector,
    ):
        async for batch in collector:
            seen.append(fields(batch))
            collector.update_policy(refs.cart_policy)  # the next batch's rows carry the next version
    assert len(seen) == 3
    np.testing.assert_array_equal(seen[0]["policy_version"], 0)
    np.testing.assert_array_equal(seen[2]["policy_version"], 2)
    np.testing.assert_array_equal(seen[0]["env_id"], np.broadcast_to(np.arange(4), (5, 4)))
    for name, a in seen[0].items():
        assert a.shape[:2] == (5, 4), name
        assert a.flags.writeable, name
        for other in seen[1:]:
            for name2, b in other.items():
                assert not np.shares_memory(a, b), (name, name2)
        for name2, b in seen[0].items():
            assert name2 == name or not np.shares_memory(a, b), (name, name2)

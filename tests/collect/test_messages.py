"""How many pool calls the collector makes for what it collects (counted on real pools, never timed).

First-finished collection (``mode="async"``) answers each ``recv`` with one ``send``: under ``next_step``
autoreset, the steps that only reset an env travel in the same message as the policy's actions, as a hand
loop's ``pool.send(policy(obs), env_ids)`` sends them. Lock-step collection calls the policy and ``pool.step``
once per step and nothing else per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.collect import Collector
from tests.collect import refs

pytestmark = pytest.mark.timeout(60)

SEED = 7


class Counted:
    """Counts a pool's ``send``/``recv``/``step`` calls (the pool's own methods still do the work)."""

    def __init__(self, pool: aioenv.Pool) -> None:
        self.calls = {"send": 0, "recv": 0, "step": 0, "send_reset": 0}
        self.rows = {"send": 0, "recv": 0}
        send, recv, step, send_reset = pool.send, pool.recv, pool.step, pool.send_reset

        def counted_send(actions: Any, env_ids: Any = None) -> None:
            self.calls["send"] += 1
            self.rows["send"] += pool.num_envs if env_ids is None else len(env_ids)
            send(actions, env_ids)

        async def counted_recv(**kwargs: Any) -> Any:
            out = await recv(**kwargs)
            self.calls["recv"] += 1
            self.rows["recv"] += int(out[4]["env_id"].size)
            return out

        async def counted_step(actions: Any, env_ids: Any = None) -> Any:
            self.calls["step"] += 1
            return await step(actions, env_ids)

        def counted_send_reset(*args: Any, **kwargs: Any) -> None:
            self.calls["send_reset"] += 1
            send_reset(*args, **kwargs)

        pool.send, pool.recv, pool.step = counted_send, counted_recv, counted_step  # type: ignore[method-assign]
        pool.send_reset = counted_send_reset  # type: ignore[method-assign]


async def test_first_finished_collection_sends_once_per_recv_reset_steps_included() -> None:
    n = 6
    async with aioenv.Pool("CartPole-v1", n, seed=SEED, num_workers=2, executor="inline") as pool:
        counted = Counted(pool)
        async with Collector(pool, refs.cart_policy, frames_per_batch=50, total_frames=300, mode="async") as c:
            batches = [b async for b in c]
        ends = sum(int(b.done.sum()) for b in batches)
        assert ends >= n  # many reset steps were sent
        # at most one send per recv (the first answers the start's resets): no message of its own for a reset step
        assert counted.calls["send"] <= counted.calls["recv"], counted.calls
        assert counted.calls["send_reset"] == 1  # the start's
    # each env's transitions are still its own sequence under the same policy
    want = refs.reference_per_env(refs.cart_policy, n, SEED, 300)
    refs.assert_same_sequences(refs.per_env(batches, n), want, at_least=1)


async def test_lockstep_collection_steps_the_pool_and_calls_the_policy_once_per_step() -> None:
    n, steps = 4, 30
    calls = [0]

    def policy(obs: np.ndarray) -> np.ndarray:
        calls[0] += 1
        return refs.cart_policy(obs)

    async with aioenv.Pool("CartPole-v1", n, seed=SEED) as pool:
        counted = Counted(pool)
        async with Collector(pool, policy, frames_per_batch=n * steps, total_frames=n * steps * 2) as c:
            batches = [b async for b in c]
    assert counted.calls["step"] == calls[0] == 2 * steps
    refs.replay(batches, n, "next_step", SEED)

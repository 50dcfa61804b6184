"""The collector against gymnasium's ``SyncVectorEnv``: same seeds and actions, the same transitions.

Lock-step batches (``mode="sync"``) are replayed row by row into a ``SyncVectorEnv`` (:func:`refs.replay`):
observations, actions, rewards, flags, the true final observation at every episode's end, and which rows
are ``next_step``'s reset steps. First-finished batches (``mode="async"``) and the options that reset envs
themselves are checked env by env against a ``SyncVectorEnv`` driven by the same observation-only policy
(:func:`refs.reference_per_env`). Real pools, real worker processes (where ``executor="auto"`` places
CartPole).
"""

from __future__ import annotations

import numpy as np
import pytest

import aioenv
from aioenv.collect import Batch, Collector
from tests.collect import refs

pytestmark = pytest.mark.timeout(60)

N = 4
SEED = 7


async def collect(
    autoreset: str, *, n: int = N, pool_kwargs: dict[str, object] | None = None, **options: object
) -> list[Batch]:
    """Every batch of a collector over CartPole (``autoreset`` mode) with :func:`refs.cart_policy`."""
    async with (
        aioenv.Pool("CartPole-v1", n, seed=SEED, autoreset_mode=autoreset, **(pool_kwargs or {})) as pool,
        Collector(pool, refs.cart_policy, **options) as collector,  # type: ignore[arg-type]
    ):
        return [batch async for batch in collector]


async def first_finished(autoreset: str, **options: object) -> list[Batch]:
    """Six batches of 50 first-finished transitions of 6 CartPole envs on 2 worker processes."""
    pool_kwargs = {"num_workers": 2, "executor": "inline"}
    return await collect(
        autoreset, n=6, frames_per_batch=50, total_frames=300, mode="async", pool_kwargs=pool_kwargs, **options
    )


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
async def test_lockstep_batches_are_the_sync_vector_env_transitions(mode: str) -> None:
    batches = await collect(mode, frames_per_batch=N * 40, total_frames=N * 120)
    assert len(batches) == 3
    for batch in batches:
        assert batch.shape == (40, N)
        assert batch.obs.shape == (40, N, 4)
        assert batch.obs.dtype == np.float32
        assert batch.action.shape == (40, N)
        assert batch.env_id.tolist() == [list(range(N))] * 40
        valid = batch.valid
        np.testing.assert_array_equal(batch.action[valid], refs.cart_policy(batch.obs[valid]))
        refs.assert_trajectories_consistent(batch)
    refs.replay(batches, N, mode, SEED)
    assert sum(int(b.done.sum()) for b in batches) >= 2 * N  # many episode boundaries were crossed


async def test_next_step_reset_rows_are_invalid_and_cut_the_chain() -> None:
    """BBRL's rule: the step after an episode's end (next_step) only resets; it must not be a transition,
    and nothing may chain from the ended episode into it."""
    (batch,) = await collect("next_step", frames_per_batch=N * 80, total_frames=N * 80)
    t, e = np.nonzero(batch.done[:-1])
    assert t.size >= N
    assert not batch.valid[t + 1, e].any()  # the reset step
    assert (batch.traj_id[t + 1, e] == -1).all()
    assert (batch.step_count[t + 1, e] == -1).all()
    assert batch.traj_end[t, e].all()
    # the row after the reset step starts a new trajectory at step 0 with the reset obs
    ok = t + 2 < batch.shape[0]
    t2, e2 = t[ok] + 2, e[ok]
    assert (batch.step_count[t2, e2] == 0).all()
    np.testing.assert_array_equal(batch.obs[t2, e2], batch.next_obs[t2 - 1, e2])
    assert (batch.traj_id[t2, e2] != batch.traj_id[t[ok], e2]).all()
    # the final obs is the episode's own, not the next episode's first
    np.testing.assert_array_equal(batch.next_obs[t, e], batch.obs[t + 1, e])
    # traj_end: exactly the done rows (nothing else cuts a trajectory here)
    np.testing.assert_array_equal(batch.traj_end, batch.done)


async def test_same_step_next_obs_is_the_final_obs_not_the_reset_obs() -> None:
    (batch,) = await collect("same_step", frames_per_batch=N * 80, total_frames=N * 80)
    t, e = np.nonzero(batch.done[:-1])
    assert t.size >= N
    assert batch.valid.all()
    assert (batch.step_count[t + 1, e] == 0).all()
    assert not (batch.next_obs[t, e] == batch.obs[t + 1, e]).all(axis=-1).any()  # final obs != reset obs
    assert np.abs(batch.next_obs[t, e][:, 2]).max() > 0.2  # CartPole ends on a large angle or position...
    np.testing.assert_array_equal(batch.traj_end, batch.done)


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
async def test_max_frames_per_traj_truncates_like_a_time_limit(mode: str) -> None:
    cap = 9
    batches = await collect(mode, frames_per_batch=N * 30, total_frames=N * 60, max_frames_per_traj=cap)
    for batch in batches:
        assert batch.step_count.max() == cap - 1
        at_cap = batch.valid & (batch.step_count == cap - 1)
        assert at_cap.any()
        assert batch.truncated[at_cap].all()
        assert batch.done[at_cap].all()
    # the same as a SyncVectorEnv of CartPole under TimeLimit(cap): its resets continue the same random streams
    want = refs.reference_per_env(refs.cart_policy, N, SEED, 80, max_episode_steps=cap)
    refs.assert_same_sequences(refs.per_env(batches, N), want, at_least=40)
    if mode == "same_step":  # no reset steps: the grids line up row for row too
        refs.replay(batches, N, mode, SEED, max_episode_steps=cap)


async def test_init_random_frames_samples_the_action_space_then_calls_the_policy() -> None:
    async def run() -> list[Batch]:
        return await collect(
            "next_step", frames_per_batch=N * 10, total_frames=N * 40, init_random_frames=N * 15, seed=3
        )

    batches = await run()
    versions = [set(b.policy_version.ravel().tolist()) for b in batches]
    assert versions == [{-1}, {-1}, {0}, {0}]  # rounded up to whole batches, as TorchRL does
    random_actions = np.concatenate([b.action for b in batches[:2]])
    assert set(random_actions.ravel().tolist()) == {0, 1}
    assert not np.array_equal(random_actions, refs.cart_policy(np.concatenate([b.obs for b in batches[:2]])))
    for b in batches[2:]:
        np.testing.assert_array_equal(b.action[b.valid], refs.cart_policy(b.obs[b.valid]))
    refs.replay(batches, N, "next_step", SEED)
    again = await run()  # seeded: the same random actions
    np.testing.assert_array_equal(
        np.concatenate([b.action for b in again]), np.concatenate([b.action for b in batches])
    )


async def test_reset_at_each_iter_starts_fresh_trajectories_every_batch() -> None:
    batches = await collect("same_step", frames_per_batch=N * 6, total_frames=N * 18, reset_at_each_iter=True)
    seen: set[int] = set()
    for batch in batches:
        assert (batch.step_count[0] == 0).all()
        ids = set(batch.traj_id.ravel().tolist())
        assert not ids & seen  # fresh trajectory ids
        seen |= ids
        assert batch.traj_end[-1].all()  # every trajectory is cut at the batch's end
        refs.assert_trajectories_consistent(batch)
    refs.replay(batches, N, "same_step", SEED, reset_each=True)


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
async def test_first_finished_batches_hold_each_envs_own_transitions(mode: str) -> None:
    """mode="async" interleaves the envs however their steps finish; each env's sequence stays its own."""
    batches = await first_finished(mode)
    assert [b.frames for b in batches] == [50] * 6
    for batch in batches:
        assert batch.layout == "flat"
        assert batch.shape == (50,)
        assert batch.valid.all()  # reset steps are not recorded in a flat batch
        assert (np.diff(batch.env_id) >= 0).all()  # grouped by env
        refs.assert_trajectories_consistent(batch)
        np.testing.assert_array_equal(batch.action, refs.cart_policy(batch.obs))
    want = refs.reference_per_env(refs.cart_policy, 6, SEED, 300)
    refs.assert_same_sequences(refs.per_env(batches, 6), want, at_least=1)
    assert sum(len(s) for s in refs.per_env(batches, 6)) == 300


def test_blocking_iteration_over_a_sync_pool_gives_the_same_batches() -> None:
    with (
        aioenv.SyncPool("CartPole-v1", N, seed=SEED) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=N * 25, total_frames=N * 50) as collector,
    ):
        batches = list(collector)
        assert collector.frames == N * 50
        # the pool is free again afterwards
        obs, _ = pool.reset(seed=SEED)
    assert len(batches) == 2
    refs.replay(batches, N, "next_step", SEED)
    assert obs.shape == (N, 4)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
async def test_first_finished_batches_truncate_like_a_time_limit(mode: str) -> None:
    """mode="async" with max_frames_per_traj: a recv may hold rows the collector resets itself and rows whose
    reset step goes out with the policy's actions; each env's sequence is still its TimeLimit reference."""
    cap = 9
    batches = await first_finished(mode, max_frames_per_traj=cap)
    for batch in batches:
        refs.assert_trajectories_consistent(batch)
        assert batch.step_count.max() <= cap - 1
    assert any((b.step_count == cap - 1).any() for b in batches)
    want = refs.reference_per_env(refs.cart_policy, 6, SEED, 300, max_episode_steps=cap)
    refs.assert_same_sequences(refs.per_env(batches, 6), want, at_least=1)

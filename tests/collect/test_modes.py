"""The collector's modes and options on real pools: first-finished batches, background collection with a
bounded queue, policy updates, policy kinds, failed steps, per-trajectory splits and TensorDict output.

No speed is asserted: the latency test uses envs whose latencies differ by 500x, and the backpressure tests
count batches, not seconds.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.collect import Batch, Collector
from aioenv.envs.latency import AsyncSleepEnv
from tests.collect import refs
from tests.envs.dictenv import make_dict_env
from tests.envs.faulty import make_probe

pytestmark = pytest.mark.timeout(60)


def zeros(obs: Any, env_ids: np.ndarray) -> np.ndarray:
    return np.zeros(len(env_ids), dtype=np.int64)


async def wait_for(predicate: Any, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_async_mode_returns_the_envs_that_finish_first() -> None:
    fast = [functools.partial(AsyncSleepEnv, mean=0.002, sigma=0.0, cap=1.0) for _ in range(4)]
    slow = [functools.partial(AsyncSleepEnv, mean=0.8, sigma=0.0, cap=2.0) for _ in range(4)]
    async with (
        aioenv.Pool([*fast, *slow], executor="async", num_workers=1) as pool,
        Collector(pool, zeros, frames_per_batch=40, total_frames=80, mode="async") as collector,
    ):
        batches = [b async for b in collector]
        # every row came from a fast env: the slow ones (0.8 s a step) were still in their first step
        assert {int(e) for b in batches for e in b.env_id} <= {0, 1, 2, 3}
        assert all(b.shape == (40,) for b in batches)
        assert all((b.env_seconds < 1.0).all() for b in batches)
    # the lock-step mode waits for every env at each step: every env has a row in each step
    async with (
        aioenv.Pool([*fast, *slow], executor="async", num_workers=1) as pool,
        Collector(pool, zeros, frames_per_batch=8, total_frames=8) as collector,
    ):
        (batch,) = [b async for b in collector]
        assert batch.shape == (1, 8)


async def test_async_policy_calls_overlap_with_env_steps() -> None:
    calls = []

    async def policy(obs: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        calls.append(len(env_ids))
        await asyncio.sleep(0.005)
        return refs.cart_policy(obs)

    async with (
        aioenv.Pool("CartPole-v1", 6, seed=1, executor="inline", num_workers=2) as pool,
        Collector(pool, policy, frames_per_batch=30, total_frames=90, mode="async") as collector,
    ):
        batches = [b async for b in collector]
    assert len(calls) > 3
    want = refs.reference_per_env(refs.cart_policy, 6, 1, 90)
    refs.assert_same_sequences(refs.per_env(batches, 6), want, at_least=1)
    assert all((b.policy_seconds >= 0.004).all() for b in batches)


async def test_per_env_policy_gets_one_row_and_its_env_id() -> None:
    seen: list[tuple[int, tuple[int, ...]]] = []

    async def policy(obs_row: np.ndarray, env_id: int) -> int:
        seen.append((env_id, obs_row.shape))
        return int(refs.cart_policy(obs_row))

    async with (
        aioenv.Pool("CartPole-v1", 5, seed=2) as pool,
        Collector(pool, policy, frames_per_batch=25, total_frames=50, mode="async", per_env=True) as collector,
    ):
        batches = [b async for b in collector]
    assert {e for e, _ in seen} == set(range(5))
    assert {s for _, s in seen} == {(4,)}
    refs.assert_same_sequences(refs.per_env(batches, 5), refs.reference_per_env(refs.cart_policy, 5, 2, 60), at_least=1)


async def test_background_queue_is_bounded_and_blocks_the_producer() -> None:
    async with (
        aioenv.Pool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=8, background=True, queue_size=2) as collector,
    ):
        collector.start()
        await wait_for(lambda: collector.batches == 2)
        frames = collector.frames
        await asyncio.sleep(0.3)  # the consumer trains; the producer must not run ahead
        assert collector.batches == 2
        assert collector.frames == frames
        first = await anext(collector)
        await wait_for(lambda: collector.batches == 3)
        await asyncio.sleep(0.2)
        assert collector.batches == 3
        assert first.shape == (2, 4)
        # the batches arrive in order and continue each other
        second = await anext(collector)
        np.testing.assert_array_equal(second.obs[0][second.valid[0]], first.next_obs[-1][second.valid[0]])


def test_background_over_a_sync_pool_collects_while_the_caller_works() -> None:
    with (
        aioenv.SyncPool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=8, total_frames=64, background=True, queue_size=3) as c,
    ):
        c.start()
        deadline = time.monotonic() + 20
        while c.batches < 3:  # filled while this thread does something else
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)
        assert c.batches == 3
        batches = list(c)
        assert c.batches == 8
    assert len(batches) == 8
    refs.replay(batches, 4, "next_step", 0)


def test_update_policy_takes_effect_between_batches_and_copies_the_weights() -> None:
    torch = pytest.importorskip("torch")

    class Constant(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.level = torch.nn.Parameter(torch.zeros(()))

        def forward(self, obs: Any) -> Any:
            return torch.full((obs.shape[0],), int(self.level.item()), dtype=torch.int64)

    with (
        aioenv.SyncPool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, Constant(), frames_per_batch=8, total_frames=80, background=True, queue_size=1) as c,
    ):
        versions = []
        for i, batch in enumerate(c):
            versions.append(int(batch.policy_version.max()))
            np.testing.assert_array_equal(batch.action, np.where(batch.policy_version == 0, 0, 1))
            if i == 1:
                weights = {"level": torch.tensor(1.0)}
                c.update_policy(weights)
                weights["level"] += 5  # the learner goes on changing its copy: the collector took a snapshot
        assert c.policy_version == 1
    assert versions[:2] == [0, 0]
    assert versions[-1] == 1
    assert versions == sorted(versions)


async def test_update_policy_with_a_new_function() -> None:
    async with (
        aioenv.Pool("CartPole-v1", 3, seed=0) as pool,
        Collector(pool, zeros, frames_per_batch=6, total_frames=60, mode="async") as collector,
    ):
        i = 0
        async for batch in collector:
            if i == 2:
                collector.update_policy(lambda obs: np.ones(len(obs), dtype=np.int64))
            if i >= 3:
                np.testing.assert_array_equal(batch.action, batch.policy_version)
            i += 1
    assert collector.policy_version == 1


def test_a_torch_module_policy_gets_tensors() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))

    class Greedy(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, obs: Any) -> Any:
            return self.net(obs).argmax(-1)

    with (
        aioenv.SyncPool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, Greedy(), frames_per_batch=40, total_frames=80) as collector,
    ):
        batches = list(collector)
    for b in batches:
        with torch.no_grad():
            want = net(torch.as_tensor(b.obs)).argmax(-1).numpy()
        np.testing.assert_array_equal(b.action[b.valid], want[b.valid])
    refs.replay(batches, 4, "next_step", 0)


async def test_dict_observations_in_both_modes() -> None:
    def policy(obs: dict[str, np.ndarray]) -> np.ndarray:
        return (np.floor(np.abs(obs["pos"][:, 0]) * 1e3) % 3).astype(np.int64)

    for mode in ("sync", "async"):
        async with (
            aioenv.Pool(make_dict_env, 3, seed=0, autoreset_mode="same_step") as pool,
            Collector(pool, policy, frames_per_batch=30, total_frames=60, mode=mode) as collector,
        ):
            batches = [b async for b in collector]
        for b in batches:
            assert set(b.obs) == {"pos", "count", "flag"}
            assert b.obs["pos"].shape == (*b.shape, 3)
            assert b.done.any()
            for part in b.split():
                np.testing.assert_array_equal(part.next_obs["pos"][:-1], part.obs["pos"][1:])
                np.testing.assert_array_equal(part.step_count, np.arange(part.step_count[0], part.step_count[-1] + 1))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_failed_steps_raise_or_cut_the_trajectory(mode: str) -> None:
    fns = [functools.partial(make_probe, max_steps=50), functools.partial(make_probe, fail_at=3, max_steps=50)]
    async with aioenv.Pool(fns, seed=0, executor="inline", num_workers=1) as pool:
        async with Collector(pool, zeros, frames_per_batch=20, mode=mode) as collector:
            with pytest.raises(aioenv.EnvError, match=r"fail|step 3"):
                async for _ in collector:
                    pass
        async with Collector(pool, zeros, frames_per_batch=20, total_frames=60, mode=mode, on_error="reset") as c:
            batches = [b async for b in c]
    for b in batches:
        for part in b.split():
            if part.env_id[0] == 1:
                assert part.step_count.max() <= 1  # the third step always fails: at most two transitions
                assert not part.done.any()
        if mode == "sync":
            failed = ~b.valid[:, 1]
            assert failed.any()
            t = np.flatnonzero(failed)
            t = t[t > 0]
            assert b.traj_end[t - 1, 1].all()  # the chain stops before the failed step


async def test_split_trajs_pads_per_trajectory() -> None:
    async with (
        aioenv.Pool("CartPole-v1", 4, seed=SEED_SPLIT) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=4 * 50, total_frames=4 * 50, split_trajs=True) as collector,
    ):
        (batch,) = [b async for b in collector]
    assert batch.layout == "trajectories"
    k, longest = batch.shape
    lengths = batch.valid.sum(axis=1)
    assert lengths.max() == longest
    assert batch.frames == 200
    assert lengths.sum() == batch.valid.sum() > 190  # every valid transition once (reset steps left out)
    for row in range(k):
        n = lengths[row]
        assert batch.valid[row, :n].all()
        assert not batch.valid[row, n:].any()  # padding at the end only
        assert (batch.traj_id[row, :n] == batch.traj_id[row, 0]).all()
        assert (batch.traj_id[row, n:] == -1).all()
        np.testing.assert_array_equal(
            batch.step_count[row, :n], np.arange(batch.step_count[row, 0], batch.step_count[row, 0] + n)
        )
        np.testing.assert_array_equal(batch.next_obs[row, : n - 1], batch.obs[row, 1:n])
        assert not batch.done[row, : n - 1].any()
    assert (np.diff(batch.traj_id[:, 0]) > 0).all()


SEED_SPLIT = 11


async def test_tensordict_output() -> None:
    pytest.importorskip("tensordict")
    pytest.importorskip("torch")
    async with (
        aioenv.Pool("CartPole-v1", 4, seed=0) as pool,
        Collector(pool, refs.cart_policy, frames_per_batch=40, total_frames=40, output="tensordict") as collector,
    ):
        (td,) = [b async for b in collector]
    assert tuple(td.batch_size) == (10, 4)
    assert td.names == ["time", None]
    assert td["observation"].shape == (10, 4, 4)
    assert td["next", "observation"].shape == (10, 4, 4)
    assert td["next", "reward"].shape == (10, 4, 1)
    assert td["next", "done"].dtype.is_floating_point is False
    assert td["collector", "traj_ids"].shape == (10, 4)
    assert td["collector", "mask"].shape == (10, 4)
    assert td["collector", "mask"].dtype == td["next", "done"].dtype  # bool
    np.testing.assert_array_equal(td["action"].numpy(), refs.cart_policy(td["observation"].numpy()))


async def test_bad_options_are_refused() -> None:
    async with aioenv.Pool("CartPole-v1", 2, seed=0) as pool:
        for kwargs, match in [
            ({"frames_per_batch": 0}, "frames_per_batch"),
            ({"frames_per_batch": 4, "mode": "fast"}, "mode"),
            ({"frames_per_batch": 4, "per_env": True}, "per_env"),
            ({"frames_per_batch": 4, "mode": "async", "min_results": 3, "max_results": 2}, "max_results"),
            ({"frames_per_batch": 4, "on_error": "ignore"}, "on_error"),
        ]:
            with pytest.raises(aioenv.UsageError, match=match):
                Collector(pool, zeros, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(aioenv.UsageError, match="policy"):
            Collector(pool, None, frames_per_batch=4)
        collector = Collector(pool, zeros, frames_per_batch=4)
        with pytest.raises(aioenv.UsageError, match="SyncPool"):
            next(iter(collector))
        await collector.aclose()


def test_batch_fields_are_documented_with_shapes() -> None:
    doc = Batch.__doc__ or ""
    for name in ("obs", "action", "reward", "next_obs", "valid", "traj_end", "traj_id", "step_count", "(T, B)"):
        assert name in doc, name

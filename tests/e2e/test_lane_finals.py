"""A ``same_step`` pool's ended envs leave their final observations in the slab, and their replies stay lane DONEs.

An episode's end in ``same_step`` mode carries the ended episode's last observation in the row's info. Sent as an
info, it turns the worker's reply into a msgpack RESULT the pool decodes and batches (see
:mod:`aioenv.transport.slab`). A worker answering a lane step marked ``FINALS`` writes it to the slab's area of
final observations instead, when that is all its infos say, and the pool builds ``final_obs``/``final_info``
from the rows that ended.

Real pools of worker processes against ``SyncVectorEnv`` (and SB3's ``DummyVecEnv``): the same trajectories and
infos, dtypes included, on every way rows reach a caller (a lock-step ``step``, a step of some envs, ``send``/
``recv`` in whole and in part, each env's own infos); a reply spy says which way the ends went. Ends that say
more (a final info, a reset's info, an observation of another dtype) still travel in the reply, beside ends in
the slab in the same call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import aioenv
from aioenv._compat import AutoresetMode
from aioenv.compat.sb3 import AioVecEnv
from aioenv.core.coordinator import Coordinator
from aioenv.core.scheduler import Request
from aioenv.transport.slab import Slab
from aioenv.wire import lane
from aioenv.wire.protocol import Key, Op, decode
from tests.envs import finals
from tests.support.compare import assert_same, gym_autoreset
from tests.support.lane_worker import worker_with_envs
from tests.support.procs import HANG
from workers.runtime import Worker

N = 4
SEED = 11
FINAL_KEYS = {"final_obs", "_final_obs", "final_info", "_final_info"}
Factory = Callable[[], gym.Env[Any, Any]]


class Replies:
    """The workers whose step replies over shared rows carried infos (a RESULT, not a lane DONE), one entry per
    such reply."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.with_infos: list[int] = []
        deliver = Coordinator._deliver_result

        def spy(
            coord: Coordinator, req: Request, header: dict[str, Any], arrays: list[np.ndarray], run: Any = None
        ) -> None:
            if req.kind == "step" and header.get(Key.SHARED) and (Key.INFO in header or Key.BATCHED_INFO in header):
                self.with_infos.append(req.worker)
            deliver(coord, req, header, arrays, run)

        monkeypatch.setattr(Coordinator, "_deliver_result", spy)


def reference(fns: list[Factory]) -> SyncVectorEnv:
    return SyncVectorEnv(fns, **gym_autoreset(AutoresetMode.SAME_STEP))


def same_step_pool(fns: list[Factory], **options: Any) -> aioenv.Pool:
    """``fns`` on two inline worker processes (envs 0-1 and 2-3), same_step."""
    return aioenv.Pool(fns, num_workers=2, executor="inline", autoreset_mode="same_step", **options)


def assert_step(got: tuple[Any, ...], want: tuple[Any, ...], env_ids: Any, where: str) -> None:
    """aioenv's step == gymnasium's, infos and dtypes included, plus ``env_id`` naming each row."""
    *rows, info = got
    *want_rows, want_info = want
    for name, a, b in zip(("obs", "reward", "terminated", "truncated"), rows, want_rows, strict=True):
        assert_same(a, b, f"{where} {name}")
    rest = dict(info)
    np.testing.assert_array_equal(rest.pop("env_id"), np.asarray(env_ids, dtype=np.int32), strict=True)
    assert_same(rest, want_info, f"{where} info")


async def lock_steps(fns: list[Factory], steps: int) -> int:
    """``fns`` in a same_step pool and in ``SyncVectorEnv``, both reset with SEED, then stepped with the same random
    actions ``steps`` times, each step compared; returns how many rows ended."""
    ref = reference(fns)
    rng = np.random.default_rng(SEED)
    ended = 0
    try:
        async with same_step_pool(fns) as pool:
            assert pool._runner.slab.final is not None  # type: ignore[attr-defined]
            obs, info = await pool.reset(seed=SEED)
            want_obs, want_info = ref.reset(seed=SEED)
            assert_same(obs, want_obs, "reset obs")
            assert_same({key: value for key, value in info.items() if key != "env_id"}, want_info, "reset info")
            for t in range(steps):
                actions = rng.integers(0, 2, N)
                want = ref.step(actions)
                assert_step(await asyncio.wait_for(pool.step(actions), HANG), want, range(N), f"step {t}")
                ended += int((want[2] | want[3]).sum())
    finally:
        ref.close()
    return ended


async def test_ends_of_a_lock_step_step_come_from_the_slab_as_sync_vector_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    replies = Replies(monkeypatch)
    ended = await lock_steps([finals.plain] * N, 60)
    assert ended >= 10  # episodes of at most 12 steps: many ends, by termination and by truncation
    assert replies.with_infos == []  # every end in the slab: every reply a lane DONE


async def test_ends_that_say_more_travel_in_the_reply_beside_ends_in_the_slab(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0's envs end plainly, worker 1's with a final info: one call mixes the two ways."""
    replies = Replies(monkeypatch)
    ended = await lock_steps([finals.plain, finals.plain, finals.noted, finals.noted], 60)
    assert ended >= 10
    assert replies.with_infos
    assert set(replies.with_infos) == {1}


@pytest.mark.parametrize(
    "factory", [finals.reset_noted, finals.wide, finals.mimic], ids=["reset-info", "float64-obs", "end-shaped-info"]
)
async def test_ends_the_slab_cannot_say_exactly_travel_in_the_reply(
    factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = Replies(monkeypatch)
    ended = await lock_steps([factory] * N, 40)
    assert ended >= 5
    assert set(replies.with_infos) == {0, 1}


async def test_steps_of_some_envs_match_a_pool_whose_ends_travel_in_the_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a subset of the envs (one worker's, one env of each worker's, one env) give what a pool without
    shared rows gives, where every end travels in the reply: the rows of such a call reach it one request at
    a time (``Gather.take_shared``)."""
    replies = Replies(monkeypatch)
    fns: list[Factory] = [finals.plain] * N
    async with contextlib.AsyncExitStack() as stack:
        ours = await stack.enter_async_context(same_step_pool(fns))
        monkeypatch.setenv("AIOENV_SLAB", "off")
        theirs = await stack.enter_async_context(same_step_pool(fns))
        monkeypatch.delenv("AIOENV_SLAB")
        assert ours._runner.slab is not None  # type: ignore[attr-defined]
        assert theirs._runner.slab is None  # type: ignore[attr-defined]
        assert_same(await ours.reset(seed=SEED), await theirs.reset(seed=SEED), "reset")
        rng = np.random.default_rng(SEED)
        subsets = [[0, 1], [1, 2], [3], [2, 3], [0, 3], [0, 1, 2, 3]]
        ended = 0
        for t in range(90):
            ids = subsets[t % len(subsets)]
            actions = rng.integers(0, 2, len(ids))
            got = await asyncio.wait_for(ours.step(actions, ids), HANG)
            assert_same(got, await asyncio.wait_for(theirs.step(actions, ids), HANG), f"step {t} of envs {ids}")
            ended += int((got[2] | got[3]).sum())
    assert ended >= 10
    assert replies.with_infos == []


async def sent(pool: aioenv.Pool, ref: SyncVectorEnv, steps: int) -> AsyncIterator[tuple[int, tuple[Any, ...]]]:
    """Reset both with SEED, then ``steps`` times the same random actions sent to the pool and stepped by ``ref``:
    yields ``(t, ref's step)`` once the pool's send is out."""
    await pool.reset(seed=SEED)
    ref.reset(seed=SEED)
    rng = np.random.default_rng(SEED)
    for t in range(steps):
        actions = rng.integers(0, 2, N)
        want = ref.step(actions)
        pool.send(actions)
        yield t, want


@pytest.mark.parametrize("batch_size", [N, 2, 3])
async def test_ends_reach_recv_from_the_slab_as_sync_vector_envs(
    batch_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """send every env, recv ``batch_size`` rows at a time until all are in (the queue's runs taken whole or
    cut): each row and its final observation as SyncVectorEnv's."""
    replies = Replies(monkeypatch)
    fns: list[Factory] = [finals.plain] * N
    ref = reference(fns)
    ended = 0
    try:
        async with same_step_pool(fns, batch_size=batch_size) as pool:
            async for t, want in sent(pool, ref, 50):
                seen: list[int] = []
                while len(seen) < N:
                    need = min(batch_size, N - len(seen))
                    got = await asyncio.wait_for(pool.recv(min_results=need, max_results=need), HANG)
                    seen += assert_rows(got, want, f"step {t}")
                assert sorted(seen) == list(range(N))
                ended += int((want[2] | want[3]).sum())
    finally:
        ref.close()
    assert ended >= 10
    assert replies.with_infos == []


async def test_recv_of_ends_from_the_slab_and_from_replies_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 1's ends say more (a final info): a recv whose rows come both ways still gives SyncVectorEnv's rows."""
    replies = Replies(monkeypatch)
    fns: list[Factory] = [finals.plain, finals.plain, finals.noted, finals.noted]
    ref = reference(fns)
    try:
        async with same_step_pool(fns, batch_size=N) as pool:
            async for t, want in sent(pool, ref, 50):
                got = await asyncio.wait_for(pool.recv(), HANG)
                order = np.argsort(got[4]["env_id"], kind="stable")
                info = {key: value[order] if isinstance(value, np.ndarray) else value for key, value in got[4].items()}
                assert "final_info" not in info or isinstance(info["final_info"], dict)
                if "final_info" in info:  # its nested columns in env order too
                    info["final_info"] = {key: value[order] for key, value in info["final_info"].items()}
                assert_step((got[0][order], *(a[order] for a in got[1:4]), info), want, range(N), f"step {t}")
    finally:
        ref.close()
    assert set(replies.with_infos) == {1}


def assert_rows(got: tuple[Any, ...], want: tuple[Any, ...], where: str) -> list[int]:
    """The rows of a recv (some of the envs) against SyncVectorEnv's step of every env; returns their env ids."""
    obs, reward, terminated, truncated, info = got
    ids = info["env_id"].tolist()
    assert set(info) <= FINAL_KEYS | {"env_id"}, f"{where}: info keys {sorted(info)}"
    for row, env in enumerate(ids):
        at = f"{where}, env {env}"
        assert_same(obs[row], want[0][env], f"{at} obs")
        assert (reward[row], terminated[row], truncated[row]) == (want[1][env], want[2][env], want[3][env]), at
        if want[2][env] or want[3][env]:
            assert info["_final_obs"][row], at
            assert info["_final_info"][row], at
            assert_same(info["final_obs"][row], want[4]["final_obs"][env], f"{at} final_obs")
            assert info["final_info"] == {}, at
        else:
            assert "final_obs" not in info or (not info["_final_obs"][row] and info["final_obs"][row] is None), at
    if "final_obs" in info:
        assert_same(info["_final_info"], info["_final_obs"], f"{where} masks")
    return ids


def test_an_sb3_vec_env_takes_its_terminal_observations_from_the_slab(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each env's own info dict (SB3's ``infos``, ``terminal_observation``), as DummyVecEnv's."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    replies = Replies(monkeypatch)
    fns: list[Factory] = [finals.plain] * N
    ours, ref = AioVecEnv(fns, num_workers=2, executor="inline"), DummyVecEnv(fns)
    try:
        for env in (ours, ref):
            env.seed(SEED)
        assert_same(ours.reset(), ref.reset(), "reset")
        rng = np.random.default_rng(SEED)
        ended = 0
        for t in range(50):
            actions = rng.integers(0, 2, N)
            obs, rewards, dones, infos = ours.step(actions)
            want_obs, want_rewards, want_dones, want_infos = ref.step(actions)
            assert_same(obs, want_obs, f"step {t} obs")
            assert_same(rewards.astype(np.float32), want_rewards, f"step {t} rewards")
            assert_same(dones, want_dones, f"step {t} dones")
            assert_same(infos, list(want_infos), f"step {t} infos")
            ended += int(dones.sum())
    finally:
        ours.close()
        ref.close()
    assert ended >= 10
    assert replies.with_infos == []


# ---------------------------------------------------------------- a worker's side, over a real slab


@contextlib.contextmanager
def same_step_worker(factory: str) -> Iterator[tuple[Worker, Slab]]:
    """A worker in this process (its handler is what is tested) hosting N envs of ``factory`` (a
    ``tests.envs.finals`` name), same_step, reset with seeds 0 .. N - 1, over a slab with final observations."""
    source = {"kind": "entry", "target": f"tests.envs.finals:{factory}"}
    with worker_with_envs(N, True, source=source, autoreset="same_step", finals=True) as (worker, slab):
        assert slab is not None
        yield worker, slab


@pytest.mark.parametrize("flag", [True, False], ids=["finals", "no-flag"])
def test_a_worker_writes_final_observations_to_the_slab_only_when_the_step_says_so(flag: bool) -> None:
    ref = reference([finals.plain] * N)
    ref.reset(seed=list(range(N)))
    ends = 0
    with same_step_worker("plain") as (worker, slab):
        assert slab.final is not None
        slab.final[:] = np.nan
        for t in range(40):
            actions = np.array([t % 2, 1, 0, (t // 3) % 2])
            slab.act[0][:] = actions
            reply = worker.handle([memoryview(lane.step(100 + t, 0, N, finals=flag))])[0]
            obs, _, term, trunc, info = ref.step(actions)
            np.testing.assert_array_equal(slab.obs[0], obs)
            ended = term | trunc
            if not ended.any():
                assert [bytes(f) for f in reply] == [lane.done(100 + t)]
                continue
            ends += 1
            if flag:
                assert [bytes(f) for f in reply] == [lane.done(100 + t)]
                for env in np.flatnonzero(ended):
                    assert_same(slab.final[env], info["final_obs"][env], f"step {t} env {env}")
            else:  # the RESULT of old, final observations in its infos, the area untouched
                header, _ = decode(reply)
                assert header[Key.OP] == Op.RESULT
                assert header[Key.SHARED] == 1
                assert np.isnan(slab.final).all()
    ref.close()
    assert ends >= 3


def test_a_worker_says_ends_with_a_final_info_in_its_reply_even_when_asked_for_the_slab() -> None:
    with same_step_worker("noted") as (worker, slab):
        assert slab.final is not None
        slab.final[:] = np.nan
        for t in range(40):
            slab.act[0][:] = 1
            reply = worker.handle([memoryview(lane.step(t, 0, N, finals=True))])[0]
            if [bytes(f) for f in reply] == [lane.done(t)]:
                assert not (slab.terminated | slab.truncated).any()
                continue
            header, _ = decode(reply)
            assert header[Key.OP] == Op.RESULT
            assert np.isnan(slab.final).all()
            return
    raise AssertionError("no episode ended in 40 steps of 12 at most")

"""aioenv must give exactly the trajectories of ``gymnasium.vector.SyncVectorEnv``.

Same seeds and the same pre-sampled actions go through an ``aioenv.Pool`` (4 envs on
2 worker processes) and a ``SyncVectorEnv``; observations (leaf by leaf for Dict
spaces), rewards, terminations, truncations and infos (recursively, dtypes included,
``final_obs``/``final_info`` and their masks in ``same_step`` mode) must be equal.
aioenv's only extra is ``info["env_id"]`` (int32, one row per env).

The batched-step tests run on every executor: ``inline``, ``thread`` and ``async`` (each env
wrapped in an ``AsyncEnv``, so the async autoreset state machine is held to the same trajectories),
``in_process`` (every env stepped in the test's own process), ``shared`` (what ``executor="auto"``
chooses for cheap envs on several CPUs: the first envs in this process, the others on a worker process),
and ``thread_here`` / ``async_here`` (``num_workers=0``: threads or coroutines of the test's own process).

Two envs: CartPole-v1 with ``max_episode_steps=20`` (both terminations and
truncations happen) and ``tests.envs.dictenv`` (Dict observations, rich infos,
random episode lengths, terminations and truncations).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import batch_space

import aioenv
from aioenv._compat import AutoresetMode
from aioenv.core import costs
from tests.envs.asyncwrap import wrapped
from tests.envs.dictenv import make_dict_env
from tests.support.compare import NEEDS_GYMNASIUM_1_1, assert_same, gym_autoreset
from tests.support.placement import placed

N = 4
WORKERS = 2
STEPS = 60
SEED = 123
ACTION_SEED = 2024


@dataclass(frozen=True)
class Case:
    env: str
    env_kwargs: dict[str, Any] | None
    factory: Callable[[], gym.Env[Any, Any]]


CASES = {
    "cartpole": Case(
        "CartPole-v1",
        {"max_episode_steps": 20},
        lambda: gym.make("CartPole-v1", max_episode_steps=20),
    ),
    "dict": Case("tests.envs.dictenv:make_dict_env", None, make_dict_env),
}
CASE_NAMES = sorted(CASES)
EXECUTORS = ["inline", "thread", "async", "in_process", "shared", "thread_here", "async_here"]
#: Envs on threads or coroutines of the test's own process (``num_workers=0``).
HERE = {"thread_here": "thread", "async_here": "async"}
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}


# ---------------------------------------------------------------- helpers


def make_sync(case: Case, mode: str) -> SyncVectorEnv:
    return SyncVectorEnv([case.factory] * N, **gym_autoreset(MODES[mode]))


@pytest.fixture
def shared_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """``executor="auto"`` places the first 2 envs in this process and the other 2 on one inline worker."""
    monkeypatch.setattr(costs, "choose", placed(costs.Choice("inline", 1, 2, "the test's placement")))


def make_pool(case: Case, mode: str, executor: str = "inline", **options: Any) -> aioenv.Pool:
    """The case's envs on ``executor``; for ``async`` each env is wrapped in an ``AsyncEnv``; ``shared`` is
    ``auto`` under the :func:`shared_placement` fixture."""
    if executor == "shared":
        executor = "auto"
        options["allow_in_process"] = True
    elif executor in HERE:
        executor = HERE[executor]
        options["num_workers"] = 0
    elif executor != "in_process":
        options.setdefault("num_workers", WORKERS)
    if executor == "async":
        return aioenv.Pool(
            functools.partial(wrapped, case.factory), N, autoreset_mode=mode, executor="async", **options
        )
    return aioenv.Pool(case.env, N, autoreset_mode=mode, env_kwargs=case.env_kwargs, executor=executor, **options)


def sample_actions(space: gym.Space[Any], steps: int, seed: int = ACTION_SEED) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(steps)]


def assert_obs_equal(actual: Any, expected: Any, path: str) -> None:
    """Batched observations: leaf by leaf for Dict/Tuple spaces."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict obs, got {type(actual).__name__}"
        assert set(actual) == set(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_obs_equal(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple), path
        assert len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_obs_equal(a, e, f"{path}[{i}]")
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=path, strict=True)


def assert_info_equal(actual: dict[str, Any], expected: dict[str, Any], env_ids: Any, path: str) -> None:
    """aioenv's batched info == gymnasium's, plus ``env_id`` (int32) naming each row."""
    assert isinstance(actual, dict), f"{path}: info is a {type(actual).__name__}"
    assert "env_id" in actual, f"{path}: info has no 'env_id' (keys {sorted(actual)})"
    rest = dict(actual)
    env_id = rest.pop("env_id")
    np.testing.assert_array_equal(env_id, np.asarray(env_ids, dtype=np.int32), err_msg=f"{path}['env_id']", strict=True)
    assert_same(rest, expected, path)


def assert_step_equal(actual: tuple[Any, ...], expected: tuple[Any, ...], env_ids: Any, path: str) -> None:
    assert len(actual) == 5, f"{path}: step returned {len(actual)} items"
    obs, rew, term, trunc, info = actual
    e_obs, e_rew, e_term, e_trunc, e_info = expected
    assert_obs_equal(obs, e_obs, f"{path} obs")
    np.testing.assert_array_equal(rew, e_rew, err_msg=f"{path} reward", strict=True)
    np.testing.assert_array_equal(term, e_term, err_msg=f"{path} terminated", strict=True)
    np.testing.assert_array_equal(trunc, e_trunc, err_msg=f"{path} truncated", strict=True)
    assert_info_equal(info, e_info, env_ids, f"{path} info")


def take_rows(value: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of a batched value (obs, arrays or info dicts), recursively."""
    if isinstance(value, dict):
        return {k: take_rows(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(take_rows(v, index) for v in value)
    if isinstance(value, np.ndarray):
        return value[index]
    raise AssertionError(f"unexpected batched value {value!r}")


# ---------------------------------------------------------------- batched step


async def lockstep(
    pool: aioenv.Pool, sync: SyncVectorEnv, actions: list[Any], label: str
) -> AsyncIterator[tuple[int, tuple[Any, ...], tuple[Any, ...]]]:
    """Reset both with SEED, then step both with each action in turn, asserting equal results at every
    step; yields ``(t, aioenv's step result, SyncVectorEnv's)`` for the test's own checks."""
    obs, info = await pool.reset(seed=SEED)
    e_obs, e_info = sync.reset(seed=SEED)
    assert_obs_equal(obs, e_obs, "reset obs")
    assert_info_equal(info, e_info, range(N), "reset info")
    for t, action in enumerate(actions):
        result = await pool.step(action)
        expected = sync.step(action)
        assert_step_equal(result, expected, range(N), f"step {t} ({label})")
        yield t, result, expected


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_step_trajectory_matches_sync_vector_env(
    case_name: str, mode: str, executor: str, shared_placement: None
) -> None:
    case = CASES[case_name]
    sync = make_sync(case, mode)
    actions = sample_actions(sync.action_space, STEPS)
    terminations = truncations = ended = final_rows = 0
    try:
        async with make_pool(case, mode, executor) as pool:
            assert pool.num_envs == N
            assert pool.envs_in_process == {"in_process": N, "shared": 2, **dict.fromkeys(HERE, N)}.get(executor, 0)
            if executor in ("in_process", *HERE):
                assert pool.num_workers == 0
            assert pool.autoreset_mode is MODES[mode]
            assert pool.single_observation_space == sync.single_observation_space
            assert pool.single_action_space == sync.single_action_space
            assert pool.observation_space == sync.observation_space
            assert pool.action_space == sync.action_space

            async for t, result, expected in lockstep(pool, sync, actions, mode):
                terminations += int(expected[2].sum())
                truncations += int(expected[3].sum())
                ended += int((expected[2] | expected[3]).sum())
                if mode == "same_step" and "final_obs" in expected[4]:
                    final_rows += int(expected[4]["_final_obs"].sum())
                    # explicit (already covered by assert_step_equal): masks and per-row final obs
                    info = result[4]
                    np.testing.assert_array_equal(info["_final_obs"], expected[4]["_final_obs"], strict=True)
                    np.testing.assert_array_equal(info["_final_info"], expected[4]["_final_info"], strict=True)
                    for row in range(N):
                        assert_same(info["final_obs"][row], expected[4]["final_obs"][row], f"step {t} final_obs[{row}]")
    finally:
        sync.close()
    # the trajectory must exercise both ways an episode ends
    assert terminations > 0, "no episode terminated: the test does not cover terminations"
    assert truncations > 0, "no episode was truncated: the test does not cover truncations"
    if mode == "same_step":
        assert final_rows == ended


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_send_recv_full_batches_match_sync_vector_env(
    case_name: str, mode: str, executor: str, shared_placement: None
) -> None:
    """send/recv with batch_size=n: every recv is a full batch; sorted by env_id it is SyncVectorEnv's step.
    (With the thread and async executors rows come back in the order they finished, often split.)"""
    case = CASES[case_name]
    sync = make_sync(case, mode)
    actions = sample_actions(sync.action_space, STEPS)
    ended = 0
    try:
        async with make_pool(case, mode, executor, batch_size=N) as pool:
            assert pool.batch_size == N
            pool.send_reset(seed=SEED)
            obs, rew, term, trunc, info = await pool.recv()
            order = np.argsort(info["env_id"], kind="stable")
            e_obs, e_info = sync.reset(seed=SEED)
            assert_obs_equal(take_rows(obs, order), e_obs, "send_reset obs")
            np.testing.assert_array_equal(rew, np.zeros(N), strict=True)
            np.testing.assert_array_equal(term, np.zeros(N, dtype=bool), strict=True)
            np.testing.assert_array_equal(trunc, np.zeros(N, dtype=bool), strict=True)
            assert_info_equal(take_rows(info, order), e_info, range(N), "send_reset info")

            for t, action in enumerate(actions):
                pool.send(action)
                obs, rew, term, trunc, info = await pool.recv()
                ids = info["env_id"]
                assert sorted(ids.tolist()) == list(range(N)), f"step {t}: recv rows {ids.tolist()}"
                order = np.argsort(ids, kind="stable")
                result = (take_rows(obs, order), rew[order], term[order], trunc[order], take_rows(info, order))
                expected = sync.step(action)
                assert_step_equal(result, expected, range(N), f"send/recv step {t} ({mode})")
                ended += int((expected[2] | expected[3]).sum())
    finally:
        sync.close()
    assert ended > 0


# ---------------------------------------------------------------- disabled mode, partial resets


@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_disabled_mode_raises_episode_ended_until_reset(case_name: str) -> None:
    case = CASES[case_name]
    space = batch_space(case.factory().action_space, N)
    actions = sample_actions(space, 200)
    async with make_pool(case, "disabled") as pool:
        await pool.reset(seed=SEED)
        ended = np.zeros(N, dtype=bool)
        for action in actions:
            _, _, term, trunc, info = await pool.step(action)
            np.testing.assert_array_equal(info["env_id"], np.arange(N, dtype=np.int32))
            ended = term | trunc
            if ended.any():
                break
        assert ended.any(), "no episode ended within 200 steps"
        k = int(np.flatnonzero(ended)[0])
        single = actions[0][k : k + 1]

        # a batched step of that env alone
        with pytest.raises(aioenv.EpisodeEnded) as excinfo:
            await pool.step(single, env_ids=[k])
        assert excinfo.value.env_id == k
        assert f"env {k}" in str(excinfo.value)
        assert isinstance(excinfo.value, aioenv.AioEnvError)

        # the per-env future
        with pytest.raises(aioenv.EpisodeEnded) as excinfo:
            await pool.step_env(k, single[0])
        assert excinfo.value.env_id == k
        assert f"env {k}" in str(excinfo.value)

        # still ended: refusing did not change its state
        with pytest.raises(aioenv.EpisodeEnded):
            await pool.step(single, env_ids=[k])

        # after a reset it steps again
        _obs, info = await pool.reset(env_ids=[k])
        np.testing.assert_array_equal(info["env_id"], np.array([k], dtype=np.int32))
        _, rew, _, _, info = await pool.step(single, env_ids=[k])
        assert rew.shape == (1,)
        np.testing.assert_array_equal(info["env_id"], np.array([k], dtype=np.int32))
        result = await pool.step_env(k, single[0])
        assert result.env_id == k


@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_disabled_mode_with_partial_resets_matches_sync_vector_env(case_name: str) -> None:
    """Disabled mode: reset ended envs with reset(env_ids=...) / reset(options={"reset_mask": ...})."""
    case = CASES[case_name]
    sync = make_sync(case, "disabled")
    actions = sample_actions(sync.action_space, STEPS)
    partial_resets = 0
    try:
        async with make_pool(case, "disabled") as pool:
            async for t, _, expected in lockstep(pool, sync, actions, "disabled"):
                mask = expected[2] | expected[3]
                if mask.any():
                    ids = np.flatnonzero(mask)
                    obs, info = await pool.reset(env_ids=ids)
                    e_obs, e_info = sync.reset(options={"reset_mask": mask.copy()})
                    assert_obs_equal(obs, take_rows(e_obs, ids), f"step {t} partial reset obs")
                    assert_info_equal(info, take_rows(e_info, ids), ids, f"step {t} partial reset info")
                    partial_resets += 1
    finally:
        sync.close()
    assert partial_resets > 0


def _seed_arguments(kind: str, ids: np.ndarray) -> tuple[Any, Any]:
    """(aioenv seed for reset(env_ids=ids), gymnasium seed for reset(options={"reset_mask"}))."""
    if kind == "none":
        return None, None
    if kind == "int":
        return 500, 500  # both: env i gets 500 + i
    seeds = [1000 + 7 * int(i) for i in ids]
    full: list[int | None] = [None] * N
    for i, s in zip(ids.tolist(), seeds, strict=True):
        full[i] = s
    return seeds, full


@NEEDS_GYMNASIUM_1_1
@pytest.mark.parametrize("seed_kind", ["none", "int", "list"])
@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_partial_reset_matches_reset_mask(case_name: str, seed_kind: str) -> None:
    """Mid-trajectory (next_step), reset a subset that includes an env whose episode just ended:
    the rows match gymnasium's reset_mask rows, and the trajectories stay equal afterwards."""
    case = CASES[case_name]
    sync = make_sync(case, "next_step")
    actions = sample_actions(sync.action_space, STEPS)
    did_reset = False
    try:
        async with make_pool(case, "next_step") as pool:
            obs, info = await pool.reset(seed=SEED)
            e_obs, e_info = sync.reset(seed=SEED)
            assert_obs_equal(obs, e_obs, "reset obs")
            for t, action in enumerate(actions):
                result = await pool.step(action)
                expected = sync.step(action)
                assert_step_equal(result, expected, range(N), f"step {t}")
                ended = expected[2] | expected[3]
                if not did_reset and ended.any() and not ended.all():
                    # reset the first ended env (pending autoreset) and the first one still running
                    ids = np.sort(np.array([np.flatnonzero(ended)[0], np.flatnonzero(~ended)[0]]))
                    mask = np.zeros(N, dtype=bool)
                    mask[ids] = True
                    seed, e_seed = _seed_arguments(seed_kind, ids)
                    obs, info = await pool.reset(env_ids=ids, seed=seed)
                    e_obs, e_info = sync.reset(seed=e_seed, options={"reset_mask": mask})
                    assert_obs_equal(obs, take_rows(e_obs, ids), f"step {t} partial reset obs")
                    assert_info_equal(info, take_rows(e_info, ids), ids, f"step {t} partial reset info")
                    did_reset = True
    finally:
        sync.close()
    assert did_reset, "no step had some envs ended and others running"


# ---------------------------------------------------------------- per-env futures


@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_step_env_matches_single_gymnasium_env(case_name: str) -> None:
    """step_env/reset_env per env (all envs concurrently) == one gymnasium env with the same seed,
    with next_step autoreset applied per env."""
    case = CASES[case_name]
    steps = 45

    async def drive(pool: aioenv.Pool, k: int) -> int:
        ref = case.factory()
        rng = np.random.default_rng(1000 + k)
        seed = SEED * 10 + k
        episodes = 0
        try:
            reset = await pool.reset_env(k, seed=seed)
            e_obs, e_info = ref.reset(seed=seed)
            assert isinstance(reset, aioenv.ResetResult)
            assert reset.env_id == k
            assert_same(reset.obs, e_obs, f"env {k} reset obs")
            assert_same(_without_env_id(reset.info, k), e_info, f"env {k} reset info")
            pending = False
            for t in range(steps):
                action = ref.action_space.sample() if t % 2 else rng.integers(ref.action_space.n)
                result = await pool.step_env(k, action)
                if pending:  # next_step: the step after an episode ended resets; the action is ignored
                    e_obs, e_info = ref.reset()
                    e_rew, e_term, e_trunc = 0.0, False, False
                else:
                    e_obs, e_rew, e_term, e_trunc, e_info = ref.step(action)
                pending = bool(e_term or e_trunc)
                episodes += pending
                where = f"env {k} step {t}"
                assert isinstance(result, aioenv.StepResult)
                assert result.env_id == k, where
                assert_same(result.obs, e_obs, f"{where} obs")
                assert type(result.reward) is float, where
                assert result.reward == float(e_rew), where
                assert result.terminated is bool(e_term), where
                assert result.truncated is bool(e_trunc), where
                assert_same(_without_env_id(result.info, k), e_info, f"{where} info")
        finally:
            ref.close()
        return episodes

    async with make_pool(case, "next_step") as pool:
        episodes = await asyncio.gather(*(drive(pool, k) for k in range(N)))
    assert all(e > 0 for e in episodes), f"episodes ended per env: {episodes}"


def _without_env_id(info: dict[str, Any], env_id: int) -> dict[str, Any]:
    """A per-env result names its env in ``env_id``; tolerate (but check) a copy inside info."""
    info = dict(info)
    if "env_id" in info:
        assert int(info.pop("env_id")) == env_id
    return info


@pytest.mark.parametrize("case_name", CASE_NAMES)
async def test_pool_seed_argument_seeds_the_first_reset(case_name: str) -> None:
    """make(..., seed=s): env i gets s + i at its first reset, as SyncVectorEnv.reset(seed=s)."""
    case = CASES[case_name]
    sync = make_sync(case, "next_step")
    actions = sample_actions(sync.action_space, 25)
    try:
        async with make_pool(case, "next_step", seed=SEED) as pool:
            obs, info = await pool.reset()
            e_obs, e_info = sync.reset(seed=SEED)
            assert_obs_equal(obs, e_obs, "reset obs")
            assert_info_equal(info, e_info, range(N), "reset info")
            for t, action in enumerate(actions):
                assert_step_equal(await pool.step(action), sync.step(action), range(N), f"step {t}")
            # a later reset without seed continues the envs' RNGs (no re-seeding)
            obs, info = await pool.reset()
            e_obs, e_info = sync.reset()
            assert_obs_equal(obs, e_obs, "second reset obs")
            assert_info_equal(info, e_info, range(N), "second reset info")
    finally:
        sync.close()


# ---------------------------------------------------------------- info edge cases


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
async def test_zero_d_ndarray_info_matches_sync_vector_env(mode: str) -> None:
    """An info value that is a 0-d ndarray batches to shape (B,), as in gymnasium (not (B, 1))."""
    case = Case(
        "tests.envs.dictenv:make_dict_env",
        {"zero_d_info": True},
        functools.partial(make_dict_env, zero_d_info=True),
    )
    sync = make_sync(case, mode)
    actions = sample_actions(sync.action_space, 20)
    try:
        async with make_pool(case, mode) as pool:
            await pool.reset(seed=SEED)
            sync.reset(seed=SEED)
            for t, action in enumerate(actions):
                result = await pool.step(action)
                expected = sync.step(action)
                assert expected[4]["level0d"].shape == (N,)
                assert_step_equal(result, expected, range(N), f"step {t} ({mode})")
    finally:
        sync.close()


async def test_info_dtype_follows_row_order_not_reply_order() -> None:
    """gymnasium fixes an info key's dtype from the lowest row that has it. Envs 0-1 (worker 0, slow)
    give an int, envs 2-3 (worker 1, fast) a float: the batched array must be int64 as in
    SyncVectorEnv, whichever worker replied first."""
    fns = [
        functools.partial(make_dict_env, int_info=True, step_delay=0.05),
        functools.partial(make_dict_env, int_info=True, step_delay=0.05),
        functools.partial(make_dict_env, int_info=False),
        functools.partial(make_dict_env, int_info=False),
    ]
    sync = SyncVectorEnv(fns)
    actions = sample_actions(sync.action_space, 6)
    try:
        async with aioenv.Pool(fns, num_workers=WORKERS) as pool:
            await pool.reset(seed=SEED)
            sync.reset(seed=SEED)
            for t, action in enumerate(actions):
                result = await pool.step(action)
                expected = sync.step(action)
                if "mixed" in expected[4]:
                    assert expected[4]["mixed"].dtype == np.int64
                assert_step_equal(result, expected, range(N), f"step {t}")
    finally:
        sync.close()

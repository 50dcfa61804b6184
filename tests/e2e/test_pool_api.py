"""The public Pool API (design section 3), against real worker processes and real gymnasium envs.

Every pool here is small (2-8 envs, 1-2 workers) and closed with ``async with`` or ``aclose``.
Timeouts are hang guards only; nothing asserts on wall-clock speed. Ordering that depends
on which env finishes first is forced with ProbeEnv's *gated* slow action, never with sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import batch_space

import aioenv
from aioenv import AioEnvError, InvalidAction, ResetResult, StepResult, UsageError
from aioenv._compat import DISCRETE_TAKES_DTYPE, AutoresetMode
from tests.envs.faulty import SLOW, DictObsEnv, InfoEnv, ProbeEnv, TextEnv, make_probe
from tests.support.procs import HANG
from tests.support.scripts import run_python

PROBE = "tests.envs.faulty:make_probe"


async def guard(awaitable: Any) -> Any:
    """Await with a hang guard."""
    return await asyncio.wait_for(awaitable, HANG)


def ids_of(result: tuple[Any, ...]) -> list[int]:
    return result[-1]["env_id"].tolist()


def assert_same_step(got: tuple[Any, ...], want: tuple[Any, ...], what: str) -> None:
    """A pool's step result equals a gymnasium vector env's: obs (with dtypes), reward, terminated, truncated."""
    assert_same_batch(got[0], want[0], f"obs at {what}")
    for name, g, w in zip(("reward", "terminated", "truncated"), got[1:4], want[1:4], strict=True):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} at {what}")


def assert_same_batch(got: Any, want: Any, what: str = "obs") -> None:
    """Batched values equal, including dtypes and shapes (dicts recurse)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{what}: expected a dict, got {type(got).__name__}"
        assert list(got) == list(want), f"{what}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same_batch(got[key], want[key], f"{what}[{key!r}]")
        return
    assert isinstance(got, np.ndarray), f"{what}: expected an ndarray, got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype == object:
        for row, (g, w) in enumerate(zip(got, want, strict=True)):
            assert type(g) is type(w), f"{what}[{row}]: type {type(g).__name__} != {type(w).__name__}"
            np.testing.assert_equal(g, w, err_msg=f"{what}[{row}]")
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def without_env_id(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != "env_id"}


# ------------------------------------------------------------------ make


async def test_make_gymnasium_id_attributes_match_sync_vector_env() -> None:
    pool = await aioenv.make("CartPole-v1", 4, num_workers=2)
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    try:
        assert isinstance(pool, aioenv.Pool)
        assert pool.num_envs == 4
        assert pool.batch_size == 4
        assert pool.closed is False
        assert pool.single_observation_space == ref.single_observation_space
        assert pool.single_action_space == ref.single_action_space
        assert pool.observation_space == ref.observation_space
        assert pool.action_space == ref.action_space
        assert isinstance(pool.autoreset_mode, AutoresetMode)
        assert pool.autoreset_mode is AutoresetMode.NEXT_STEP
        assert pool.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert pool.metadata["render_fps"] == ref.metadata["render_fps"]
        # get_attr reaches through gymnasium's wrappers.
        assert await guard(pool.get_attr("gravity")) == [9.8] * 4
    finally:
        ref.close()
        await pool.aclose()
    assert pool.closed is True


async def test_make_with_entry_point_string_and_env_kwargs() -> None:
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1, env_kwargs={"tag": 7}) as pool:
        assert pool.num_envs == 2
        assert pool.single_action_space == gym.spaces.Discrete(3)
        assert await guard(pool.get_attr("tag")) == [7, 7]
        obs, info = await guard(pool.reset(seed=3))
        assert obs.shape == (2, 4)
        assert obs.dtype == np.float64
        assert obs[:, 0].tolist() == [3, 4]
        assert info["env_id"].tolist() == [0, 1]


async def test_a_workers_package_in_the_working_directory_does_not_stand_in_for_aioenvs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package of the user's own named ``workers`` (a common name) in the working directory is not run as
    aioenv's worker runtime, and a module of theirs there is still found as an env source."""
    own = tmp_path / "workers"
    own.mkdir()
    (own / "__init__.py").write_text("")
    (own / "__main__.py").write_text("raise SystemExit('this is the project\\'s own workers package')\n")
    factory = "import gymnasium\n\n\ndef make():\n    return gymnasium.make('CartPole-v1')\n"
    (tmp_path / "project_envs.py").write_text(factory)
    monkeypatch.chdir(tmp_path)
    async with aioenv.Pool("project_envs:make", 2, num_workers=1) as pool:
        obs, _ = await guard(pool.reset(seed=0))
        assert obs.shape == (2, 4)


def test_worker_command_carries_the_callers_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aioenv.transport.spawn import PYTHONPATH_ENV, SYS_PATH_ENV, worker_command

    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setattr(sys, "path", ["", "/added/at/run/time", *sys.path[1:]])
    cmd, env = worker_command(["--fd", "3"])
    assert cmd[1:5] == ["-P", "-m", "workers", "--fd"]
    assert env["PYTHONPATH"] == os.path.dirname(os.path.dirname(os.path.abspath(aioenv.__file__)))
    assert env[PYTHONPATH_ENV] == "/somewhere/else"
    path = json.loads(env[SYS_PATH_ENV])
    assert path[:2] == [os.getcwd(), "/added/at/run/time"]  # "" is the working directory
    assert path[-1] == os.getcwd() or os.getcwd() in path
    assert len(path) == len(set(path))
    monkeypatch.delenv("PYTHONPATH")
    _, env = worker_command([])
    assert PYTHONPATH_ENV not in env  # the worker drops PYTHONPATH again: the caller had none


PINNED = """
import asyncio, json, os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # as taskset or a container's cpuset would
import aioenv
from aioenv.compat.envpool import make_spec
from aioenv.compat.envpool_spec import worker_count

async def main():
    async with await aioenv.make("CartPole-v1", 4, executor="inline") as pool:
        await pool.reset(seed=0)
        spec = make_spec("CartPole-v1", num_envs=4)
        counts = {"pool": pool.num_workers, "envpool": worker_count(spec.config), "cpus": os.cpu_count()}
    async with await aioenv.make("CartPole-v1", 4) as auto:  # executor="auto": one CPU, one worker
        counts["auto"] = [auto.executor, auto.num_workers, auto.envs_in_process]
    print(json.dumps(counts))

asyncio.run(main())
"""


def test_default_worker_counts_follow_the_cpus_this_process_may_use() -> None:
    """Pinned to one CPU, a pool (and EnvPool's num_threads=0) starts one worker, however many the machine has;
    ``executor="auto"`` gives the envs one worker process (it keeps them in the pinned process only with
    ``allow_in_process=True``)."""
    done = run_python("-c", PINNED)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["pool"] == 1
    assert counts["envpool"] == 1
    assert counts["auto"] == ["inline", 1, 0]


async def test_make_with_lambda_ships_closure_by_value() -> None:
    tag = 42  # captured by the lambda: must travel with it (cloudpickle)
    async with aioenv.Pool(lambda: ProbeEnv(tag=tag), 3, num_workers=2, executor="inline") as pool:
        assert pool.num_envs == 3
        assert await guard(pool.get_attr("tag")) == [42, 42, 42]
    async with aioenv.Pool(lambda: gym.make("CartPole-v1"), 2, num_workers=1) as pool:
        obs, _ = await guard(pool.reset(seed=0))
        assert obs.shape == (2, 4)
        assert obs.dtype == np.float32


async def test_make_with_list_of_callables_one_per_env() -> None:
    fns = [functools.partial(make_probe, tag=10 + i) for i in range(3)]
    async with aioenv.Pool(fns, num_workers=2, executor="inline") as pool:
        assert pool.num_envs == 3
        assert pool.batch_size == 3
        assert await guard(pool.get_attr("tag")) == [10, 11, 12]
    lambdas = [lambda i=i: ProbeEnv(tag=i * 100) for i in range(2)]
    pool = await aioenv.make(lambdas, executor="inline")
    try:
        assert pool.num_envs == 2
        assert await guard(pool.get_attr("tag")) == [0, 100]
    finally:
        await pool.aclose()
    with pytest.raises(ValueError, match="num_envs=5"):
        await aioenv.make(fns, 5)


async def test_env_kwargs_truncation_and_autoreset_match_sync_vector_env() -> None:
    """CartPole with max_episode_steps=5: truncated exactly at step 5, and (next_step autoreset)
    the whole trajectory equals SyncVectorEnv's for the same seeds and actions."""
    n = 3
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=5)] * n)
    async with aioenv.Pool("CartPole-v1", n, num_workers=2, env_kwargs={"max_episode_steps": 5}) as pool:
        obs, _ = await guard(pool.reset(seed=123))
        ref_obs, _ = ref.reset(seed=[123, 124, 125])
        assert_same_batch(obs, ref_obs)
        for t in range(1, 13):
            actions = np.array([t % 2, (t + 1) % 2, t % 2], dtype=np.int64)
            result = await guard(pool.step(actions))
            assert_same_step(result, ref.step(actions), f"step {t}")
            obs, rew, term, trunc, info = result
            if t in (5, 11):
                assert trunc.all(), f"step {t} should truncate (max_episode_steps=5), got {trunc}"
            if t in (6, 12):  # the autoreset step
                assert (rew == 0).all()
                assert not term.any()
                assert not trunc.any()
            if t not in (5, 11):
                assert not trunc.any(), f"step {t} truncated too early: {trunc}"
            assert info["env_id"].tolist() == [0, 1, 2]
    ref.close()


async def test_autoreset_mode_accepts_enum_and_string() -> None:
    for given, expected in [
        (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP),
        ("disabled", AutoresetMode.DISABLED),
        ("next_step", AutoresetMode.NEXT_STEP),
    ]:
        pool = aioenv.Pool("CartPole-v1", 2, autoreset_mode=given)
        try:
            assert pool.autoreset_mode is expected
        finally:
            await pool.aclose()  # never started: must still clean up
        assert not os.path.exists(pool._private_dir)
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1, autoreset_mode="same_step") as pool:
        assert pool.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP


async def test_private_dir_is_the_pools_own_0700_directory_and_none_for_a_remote_pool() -> None:
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
        private = pool.private_dir
        assert private is not None
        assert os.stat(private).st_mode & 0o777 == 0o700
    assert not os.path.exists(private)  # removed with the pool
    remote = aioenv.Pool("CartPole-v1", 2, endpoint="tcp://127.0.0.1:1")  # never started: nothing to connect to
    try:
        assert remote.private_dir is None  # a server's envs: nothing of this process to pickle
    finally:
        await remote.aclose()


# ------------------------------------------------------------------ reset


async def test_reset_all_subset_order_and_int_seed_per_env_id() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        obs, info = await guard(pool.reset(seed=10))
        assert obs[:, 0].tolist() == [10, 11, 12, 13]  # env i gets seed + i
        assert info["env_id"].dtype == np.int32
        assert info["env_id"].tolist() == [0, 1, 2, 3]

        obs, info = await guard(pool.reset(env_ids=[3, 1], seed=[7, 5]))
        assert obs.shape == (2, 4)
        assert obs[:, 0].tolist() == [7, 5]  # rows in the order of env_ids
        assert info["env_id"].dtype == np.int32
        assert info["env_id"].tolist() == [3, 1]

        obs, info = await guard(pool.reset(env_ids=np.array([2, 0]), seed=20))
        assert obs[:, 0].tolist() == [22, 20]  # seed + env id, not seed + position
        assert info["env_id"].tolist() == [2, 0]

        obs, info = await guard(pool.reset(env_ids=[1]))
        assert obs.shape == (1, 4)
        assert info["env_id"].tolist() == [1]


async def test_reset_seeds_match_gymnasium() -> None:
    """An int seed gives env i seed + i; a list gives one per env; the make-time seed is used by the
    first reset, then resets without a seed continue each env's RNG as gymnasium does."""
    refs = [gym.make("CartPole-v1") for _ in range(3)]
    async with aioenv.Pool("CartPole-v1", 3, num_workers=2, seed=40) as pool:
        obs, _ = await guard(pool.reset())
        want = np.stack([refs[i].reset(seed=40 + i)[0] for i in range(3)])
        assert_same_batch(obs, want, "first reset with make(seed=40)")

        obs, _ = await guard(pool.reset())
        want = np.stack([refs[i].reset()[0] for i in range(3)])
        assert_same_batch(obs, want, "second reset without a seed")

        obs, _ = await guard(pool.reset(seed=[5, 900, 77]))
        want = np.stack([refs[i].reset(seed=s)[0] for i, s in enumerate([5, 900, 77])])
        assert_same_batch(obs, want, "per-env seed list")

        obs, _ = await guard(pool.reset(seed=1000))
        want = np.stack([refs[i].reset(seed=1000 + i)[0] for i in range(3)])
        assert_same_batch(obs, want, "int seed at reset")
    for env in refs:
        env.close()


async def test_make_seed_list_is_used_by_first_reset() -> None:
    async with aioenv.Pool(PROBE, 3, executor="inline", num_workers=1, seed=[9, None, 4]) as pool:
        obs, _ = await guard(pool.reset())
        assert obs[:, 0].tolist() == [9, -1, 4]  # None: the env was reset without a seed


async def test_reset_options_are_passed_through() -> None:
    async with aioenv.Pool(PROBE, 3, executor="inline", num_workers=2) as pool:
        _, info = await guard(pool.reset(seed=0, options={"level": 3, "name": "hard"}))
        assert info["options"]["level"].tolist() == [3, 3, 3]
        assert info["options"]["name"].tolist() == ["hard"] * 3
        assert info["_options"].tolist() == [True] * 3

        res = await guard(pool.reset_env(1, options={"level": 9}))
        assert res.info["options"] == {"level": 9}

        pool.send_reset(env_ids=[2, 0], options={"level": 4})
        *_, info = await guard(pool.recv(min_results=2, max_results=2))
        assert sorted(info["env_id"].tolist()) == [0, 2]
        assert info["options"]["level"].tolist() == [4, 4]

        _, info = await guard(pool.reset())
        assert "options" not in info


# ------------------------------------------------------------------ step


async def test_step_all_and_subset_in_given_order() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=10))
        obs, rew, term, trunc, info = await guard(pool.step(np.array([0, 1, 0, 1])))
        assert obs.shape == (4, 4)
        assert obs[:, 0].tolist() == [10, 11, 12, 13]
        assert obs[:, 1].tolist() == [1, 1, 1, 1]  # t
        assert obs[:, 2].tolist() == [0, 1, 0, 1]  # the action each env got
        assert rew.dtype == np.float64
        assert rew.shape == (4,)
        assert rew.tolist() == [0.5, 1.5, 0.5, 1.5]
        assert term.dtype == np.bool_
        assert trunc.dtype == np.bool_
        assert term.shape == trunc.shape == (4,)
        assert not term.any()
        assert not trunc.any()
        assert info["env_id"].dtype == np.int32
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        assert info["t"].tolist() == [1, 1, 1, 1]

        obs, rew, term, trunc, info = await guard(pool.step([1, 0], env_ids=[3, 1]))
        assert obs[:, 0].tolist() == [13, 11]
        assert obs[:, 1].tolist() == [2, 2]
        assert obs[:, 2].tolist() == [1, 0]
        assert rew.tolist() == [1.5, 0.5]
        assert info["env_id"].tolist() == [3, 1]

        # one env from each worker, crossing the worker order
        obs, *_, info = await guard(pool.step(np.array([1, 1]), env_ids=np.array([2, 0])))
        assert obs[:, 0].tolist() == [12, 10]
        assert obs[:, 1].tolist() == [2, 2]
        assert info["env_id"].tolist() == [2, 0]


# ------------------------------------------------------------------ send / recv


async def test_recv_returns_first_finished(gate: Any) -> None:
    """Envs 0-3 (worker 0) are held by the gate: the first recv can only return envs 4-7."""
    async with aioenv.Pool(PROBE, 8, executor="inline", num_workers=2, batch_size=4, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=0))
        pool.send(np.array([SLOW] * 4 + [0] * 4))
        obs, rew, term, trunc, info = await guard(pool.recv())
        assert sorted(info["env_id"].tolist()) == [4, 5, 6, 7]
        assert obs.shape == (4, 4)
        assert rew.shape == term.shape == trunc.shape == (4,)
        assert (obs[:, 0] == info["env_id"]).all()  # rows and env ids agree
        gate.open()
        obs, *_, info = await guard(pool.recv())
        assert sorted(info["env_id"].tolist()) == [0, 1, 2, 3]
        assert (obs[:, 0] == info["env_id"]).all()
        assert (obs[:, 2] == SLOW).all()
        with pytest.raises(UsageError):
            await guard(pool.recv())


async def test_send_recv_every_result_exactly_once() -> None:
    """EnvPool loop with batch_size 3 over 8 envs: each recv gives 3 distinct envs, every send is
    answered exactly once, and each env's step counter advances by one per answer."""
    async with aioenv.Pool(PROBE, 8, executor="inline", num_workers=2, batch_size=3) as pool:
        await guard(pool.reset(seed=0))
        steps = np.zeros(8, dtype=np.int64)
        sent = np.zeros(8, dtype=np.int64)
        pool.send(np.zeros(8, dtype=np.int64))
        sent += 1
        for _ in range(20):
            obs, rew, _, _, info = await guard(pool.recv())
            ids = info["env_id"]
            assert len(ids) == 3
            assert len(set(ids.tolist())) == 3
            assert (obs[:, 0] == ids).all()
            steps[ids] += 1
            assert (obs[:, 1] == steps[ids]).all(), "an env's result was lost or duplicated"
            assert (steps <= sent).all()
            actions = (steps[ids] % 2).astype(np.int64)
            pool.send(actions, env_ids=ids)
            sent[ids] += 1
            assert (rew == 0.5 + obs[:, 2]).all()
        obs, *_, info = await guard(pool.recv(min_results=8, max_results=8))
        ids = info["env_id"]
        assert sorted(ids.tolist()) == list(range(8))
        steps[ids] += 1
        assert (obs[:, 1] == steps[ids]).all()
        assert (steps == sent).all()
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=1))


async def test_recv_min_and_max_results() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        pool.send(np.zeros(4, dtype=np.int64))
        first = await guard(pool.recv(min_results=1, max_results=2))
        got = ids_of(first)
        assert 1 <= len(got) <= 2
        rest = await guard(pool.recv(min_results=4 - len(got), max_results=8))
        got += ids_of(rest)
        assert sorted(got) == [0, 1, 2, 3]
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=3, max_results=2))
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=0, max_results=0))


async def test_concurrent_recvs_each_get_their_own_rows(gate: Any) -> None:
    """recv() calls waiting at once are all served (the oldest first), none twice, none forever; one that
    can no longer be satisfied says so; closing the pool fails every one still waiting."""
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=0))
        pool.send([SLOW, SLOW], env_ids=[0, 2])
        first = asyncio.create_task(pool.recv(min_results=1, max_results=1))
        await asyncio.sleep(0)  # the first one waits...
        second = asyncio.create_task(pool.recv(min_results=1, max_results=1))
        third = asyncio.create_task(pool.recv(min_results=1, max_results=1))
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in (first, second, third))  # ...and all wait for the gated steps
        gate.open()
        got = [ids_of(await guard(t)) for t in (first, second)]
        assert sorted(got) == [[0], [2]]
        with pytest.raises(UsageError, match="can never be satisfied"):  # both rows went to the others
            await guard(third)
        pool.send([SLOW, SLOW], env_ids=[1, 3])  # the gate is open: quick
        both = await guard(asyncio.gather(pool.recv(min_results=1), pool.recv(min_results=1, timeout=HANG)))
        assert sorted(i for b in both for i in ids_of(b)) == [1, 3]
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1, env_kwargs={"slow_seconds": HANG}) as pool:
        await guard(pool.reset(seed=0))
        pool.send([SLOW, SLOW])
        waiting = [asyncio.create_task(pool.recv(min_results=2)) for _ in range(2)]
        await asyncio.sleep(0.05)
        await guard(pool.aclose())
        for task in waiting:
            with pytest.raises(aioenv.PoolClosed):
                await guard(task)


async def test_recv_timeout_returns_what_is_ready_and_keeps_the_rest(gate: Any) -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=0))
        pool.send([SLOW, SLOW], env_ids=[0, 1])  # worker 0, held by the gate
        obs, rew, term, trunc, info = await guard(pool.recv(timeout=0.1))
        assert obs.shape == (0, 4)
        assert obs.dtype == np.float64
        assert rew.shape == (0,)
        assert rew.dtype == np.float64
        assert term.shape == trunc.shape == (0,)
        assert term.dtype == trunc.dtype == np.bool_
        assert info["env_id"].shape == (0,)
        assert info["env_id"].dtype == np.int32

        pool.send([0, 0], env_ids=[2, 3])  # worker 1, free to finish
        partial = await guard(pool.recv(min_results=4, timeout=0.3))
        got = ids_of(partial)
        assert set(got) <= {2, 3}, f"gated envs cannot have finished yet: {got}"
        gate.open()
        rest = await guard(pool.recv(min_results=4 - len(got), max_results=4))
        got += ids_of(rest)
        assert sorted(got) == [0, 1, 2, 3], "rows were lost or duplicated across recv calls"


async def test_recv_that_can_never_be_satisfied_raises_at_once() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, batch_size=2) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(UsageError, match="min_results"):
            await guard(pool.recv())
        pool.send([0, 0], env_ids=[1, 2])
        with pytest.raises(UsageError, match="in flight"):
            await guard(pool.recv(min_results=3))
        with pytest.raises(UsageError, match="the pool has 4 envs, so at most 4 results are ever ready at once"):
            await guard(pool.recv(min_results=5, max_results=8))
        *_, info = await guard(pool.recv(min_results=2))
        assert sorted(info["env_id"].tolist()) == [1, 2]


async def test_send_reset_rows_come_through_recv() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, batch_size=4) as pool:
        pool.send_reset(seed=[30, 31, 32, 33])
        obs, rew, term, trunc, info = await guard(pool.recv())
        order = np.argsort(info["env_id"])
        assert info["env_id"][order].tolist() == [0, 1, 2, 3]
        assert obs[order, 0].tolist() == [30, 31, 32, 33]
        assert (obs[:, 1] == 0).all()
        assert rew.dtype == np.float64
        assert (rew == 0).all()
        assert not term.any()
        assert not trunc.any()
        pool.send_reset(env_ids=[3], seed=50)
        pool.send([1], env_ids=[0])
        obs, rew, *_, info = await guard(pool.recv(min_results=2))
        by_env = {int(e): (o, r) for e, o, r in zip(info["env_id"], obs, rew, strict=True)}
        assert sorted(by_env) == [0, 3]
        assert by_env[3][0][0] == 53
        assert by_env[3][1] == 0.0
        assert by_env[0][0][1] == 1
        assert by_env[0][1] == 1.5


# ------------------------------------------------------------------ per-env futures


async def test_step_env_and_reset_env_results() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        fut = pool.reset_env(2, seed=5)
        assert isinstance(fut, asyncio.Future)
        res = await guard(fut)
        assert isinstance(res, ResetResult)
        obs, info, env_id = res
        assert env_id == 2
        assert res.env_id == 2
        assert isinstance(obs, np.ndarray)
        assert obs.shape == (4,)
        assert obs[0] == 5
        assert isinstance(info, dict)
        assert info["pid"] > 0

        res = await guard(pool.step_env(2, 1))
        assert isinstance(res, StepResult)
        assert res.env_id == 2
        assert res.obs.shape == (4,)
        assert res.obs[1] == 1
        assert res.obs[2] == 1
        assert isinstance(res.reward, float)
        assert res.reward == 1.5
        assert res.terminated is False
        assert res.truncated is False
        assert res.info == {"t": 1}
        res = await guard(pool.step_env(2, np.int64(0)))
        assert res.obs[1] == 2
        assert res.reward == 0.5


async def test_step_env_results_do_not_appear_in_recv() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        fut = pool.step_env(0, 1)
        pool.send([0, 0, 0], env_ids=[1, 2, 3])
        *_, info = await guard(pool.recv(min_results=3))
        assert sorted(info["env_id"].tolist()) == [1, 2, 3]
        res = await guard(fut)
        assert res.env_id == 0
        assert res.obs[1] == 1
        *_, info = await guard(pool.recv(min_results=0, timeout=0.05))
        assert info["env_id"].size == 0, "a step_env result leaked into recv()"
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=1))


async def test_a_loop_of_recv_min_results_0_polls_until_every_row_arrives() -> None:
    """``recv(min_results=0)`` returns at once with what is ready, but lets the event loop read the replies
    that arrived first: a loop that polls with it (nothing else awaited) gets every row, where it would spin
    for ever if recv never suspended. Rows from worker processes, each env's exactly once."""
    async with aioenv.Pool("CartPole-v1", 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        pool.send(np.zeros(4, np.int64))
        seen: list[int] = []
        polls = 0

        async def poll() -> None:
            nonlocal polls
            while len(seen) < 4:
                *_, info = await pool.recv(min_results=0, max_results=4)
                seen.extend(info["env_id"].tolist())
                polls += 1

        await guard(poll())
        assert sorted(seen) == [0, 1, 2, 3]
        assert polls >= 1
        *_, info = await guard(pool.recv(min_results=0, max_results=4))  # nothing in flight: empty, at once
        assert info["env_id"].size == 0


async def test_second_request_for_busy_env_raises_usage_error(gate: Any) -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs=gate.kwargs()) as pool:
        await guard(pool.reset(seed=0))
        first = pool.step_env(0, SLOW)
        with pytest.raises(UsageError, match="env 0"):
            pool.step_env(0, 0)
        with pytest.raises(UsageError, match="env 0"):
            pool.send([0], env_ids=[0])
        with pytest.raises(UsageError, match="env 0"):
            pool.send([0, 0], env_ids=[2, 0])
        with pytest.raises(UsageError, match="env 0"):
            pool.reset_env(0)
        with pytest.raises(UsageError, match="env 0"):
            await guard(pool.step(np.zeros(4, dtype=np.int64)))
        # env 2 (on the other worker) was not claimed by the refused send above
        res = await guard(pool.step_env(2, 0))
        assert res.obs[1] == 1
        gate.open()
        res = await guard(first)
        assert res.obs[1] == 1
        assert res.obs[2] == SLOW
        res = await guard(pool.step_env(0, 1))
        assert res.obs[1] == 2


async def _until_ready(pool: aioenv.Pool, rows: int) -> None:
    """Wait until ``rows`` results of send() have arrived (without taking them)."""
    async with asyncio.timeout(HANG):
        while pool._recv.ready < rows:
            await asyncio.sleep(0.005)


async def test_an_env_whose_result_waits_for_recv_takes_no_new_request() -> None:
    """Whether a result had arrived yet never decides whether the next call is accepted: until recv()
    returns (or raises) an env's result, every new request for it is refused, naming the env."""
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2, env_kwargs={"fail_at": 2}) as pool:
        await guard(pool.reset(seed=0))
        pool.send(np.zeros(2, dtype=np.int64), env_ids=[1, 3])
        await _until_ready(pool, 2)  # both results are in recv()'s queue, unread
        refused = [
            lambda: pool.send([0], env_ids=[3]),
            lambda: pool.send_reset(env_ids=[0, 1]),
            lambda: pool.step_env(1, 0),
            lambda: pool.reset_env(3),
        ]
        for call in refused:
            with pytest.raises(UsageError, match=r"env (1|3)'s last result has arrived but recv\(\) has not"):
                call()
        with pytest.raises(UsageError, match="env 1's last result"):
            await guard(pool.step(np.zeros(4, dtype=np.int64)))
        res = await guard(pool.step_env(0, 0))  # envs with no unread result are free
        assert res.obs[1] == 1
        *_, info = await guard(pool.recv(min_results=2))
        assert sorted(info["env_id"].tolist()) == [1, 3]
        # read: free again. A failed row is read when recv() raises it.
        pool.send(np.zeros(2, dtype=np.int64), env_ids=[1, 3])  # their second step: fail_at=2 fails both
        await _until_ready(pool, 2)
        with pytest.raises(UsageError, match="last result has arrived"):
            pool.send([0], env_ids=[1])
        for _ in range(2):
            with pytest.raises(aioenv.EnvError, match="RuntimeError"):
                await guard(pool.recv(min_results=1, max_results=1))
        await guard(pool.reset(env_ids=[1, 3]))
        obs, *_ = await guard(pool.step(np.zeros(3, dtype=np.int64), env_ids=[1, 2, 3]))
        assert obs[:, 0].tolist() == [1, 2, 3]
        assert obs[:, 1].tolist() == [1, 1, 1]


# ------------------------------------------------------------------ call / attributes / render


async def test_call_get_attr_set_attr() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=10))
        assert await guard(pool.get_attr("tag")) == [0, 0, 0, 0]
        await guard(pool.set_attr("tag", [1, 2, 3, 4]))
        assert await guard(pool.get_attr("tag")) == [1, 2, 3, 4]
        await guard(pool.set_attr("tag", 5))  # one value for all
        assert await guard(pool.get_attr("tag")) == [5, 5, 5, 5]
        await guard(pool.set_attr("tag", [30, 10], env_ids=[3, 1]))
        assert await guard(pool.get_attr("tag", env_ids=[1, 3])) == [10, 30]
        assert await guard(pool.get_attr("tag")) == [5, 10, 5, 30]

        out = await guard(pool.call("describe", 3, scale=2))
        assert out == [{"ident": 10 + i, "value": 6} for i in range(4)]
        out = await guard(pool.call("describe", 1, env_ids=[2, 0]))
        assert out == [{"ident": 12, "value": 1}, {"ident": 10, "value": 1}]
        assert await guard(pool.call("tag", env_ids=[0])) == [5]  # an attribute is returned as is

        with pytest.raises(ValueError, match="3 values"):
            await guard(pool.set_attr("tag", [1, 2, 3]))
        with pytest.raises(AioEnvError, match="no_such_attr"):
            await guard(pool.get_attr("no_such_attr"))
        # a failed call leaves the envs usable
        assert await guard(pool.get_attr("tag")) == [5, 10, 5, 30]


async def test_render_rgb_array() -> None:
    async with aioenv.Pool(PROBE, 3, executor="inline", num_workers=2, env_kwargs={"render_mode": "rgb_array"}) as pool:
        assert pool.render_mode == "rgb_array"
        await guard(pool.reset(seed=[10, 20, 30]))
        frames = await guard(pool.render())
        assert isinstance(frames, np.ndarray)
        assert frames.shape == (3, 5, 6, 3)
        assert frames.dtype == np.uint8
        assert frames[:, 0, 0, 0].tolist() == [10, 20, 30]
        frames = await guard(pool.render(env_ids=[2, 0]))
        assert frames.shape == (2, 5, 6, 3)
        assert frames[:, 0, 0, 0].tolist() == [30, 10]


async def test_render_without_rgb_array_mode_is_usage_error() -> None:
    async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(UsageError, match="rgb_array") as info:
            await guard(pool.render())
        assert "render_mode" in str(info.value)


# ------------------------------------------------------------------ usage errors


async def test_env_id_usage_errors() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(UsageError, match=r"unknown env id 9.*0\.\.3"):
            await guard(pool.step([0, 0], env_ids=[0, 9]))
        with pytest.raises(UsageError, match="unknown env id -1"):
            await guard(pool.reset(env_ids=[-1]))
        with pytest.raises(UsageError, match="unknown env id 4"):
            pool.step_env(4, 0)
        with pytest.raises(UsageError, match=r"env_id must be an int, got '1' \(str\)"):
            pool.step_env("1", 0)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=r"env_id must be an int, got 1.0 \(float\)"):
            pool.reset_env(1.0)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=r"env_id must be an int, got True \(bool\)"):
            pool.step_env(True, 0)
        with pytest.raises(UsageError, match="unknown env id 7"):
            pool.send([0], env_ids=[7])
        with pytest.raises(UsageError, match="env id 2 appears more than once"):
            await guard(pool.step([0, 0, 0], env_ids=[2, 1, 2]))
        with pytest.raises(UsageError, match="more than once"):
            await guard(pool.reset(env_ids=[0, 0]))
        with pytest.raises(UsageError, match="empty"):
            await guard(pool.reset(env_ids=[]))
        with pytest.raises(UsageError, match="env_ids"):
            await guard(pool.reset(env_ids=[0.5]))
        with pytest.raises(ValueError, match=r"seed has 3 entries"):
            await guard(pool.reset(env_ids=[0, 1], seed=[1, 2, 3]))
        with pytest.raises(ValueError, match=r"seed has 1 entries"):
            await guard(pool.reset(seed=[1]))
        # none of the refused calls left an env busy or half-reset
        obs, *_ = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        assert obs[:, 0].tolist() == [0, 1, 2, 3]
        assert obs[:, 1].tolist() == [1, 1, 1, 1]
        one, *_ = await guard(pool.step_env(np.int64(1), 0))  # a numpy int is an env id like any int
        assert one[:2].tolist() == [1, 2]


BAD_ARGUMENTS = [
    pytest.param(dict(num_envs=0), ValueError, ["num_envs", "0"], id="num_envs-zero"),
    pytest.param(dict(num_envs=-2), ValueError, ["num_envs", "-2"], id="num_envs-negative"),
    pytest.param(dict(num_envs="4"), (ValueError, TypeError), ["num_envs"], id="num_envs-str"),
    pytest.param(dict(num_envs=None), TypeError, ["num_envs"], id="num_envs-missing"),
    pytest.param(dict(batch_size=0), ValueError, ["batch_size"], id="batch_size-zero"),
    pytest.param(dict(batch_size=5), ValueError, ["batch_size", "num_envs"], id="batch_size-too-big"),
    pytest.param(dict(num_workers=-1), ValueError, ["num_workers", "-1"], id="num_workers-negative"),
    pytest.param(dict(num_workers=1.5), ValueError, ["num_workers"], id="num_workers-float"),
    pytest.param(dict(autoreset_mode="sometimes"), ValueError, ["autoreset_mode", "sometimes"], id="autoreset"),
    pytest.param(dict(executor="process"), ValueError, ["executor", "process"], id="executor"),
    pytest.param(dict(seed=[1, 2]), ValueError, ["seed", "2", "4"], id="seed-list-length"),
    pytest.param(dict(step_timeout=0), ValueError, ["step_timeout"], id="step_timeout-zero"),
    pytest.param(dict(env=42), TypeError, ["env", "int"], id="env-int"),
    pytest.param(dict(env=[]), TypeError, ["env"], id="env-empty-list"),
]


@pytest.mark.parametrize(("kwargs", "exc", "words"), BAD_ARGUMENTS)
async def test_bad_make_arguments_raise_clear_errors(
    kwargs: dict[str, Any], exc: Any, words: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # whatever a refused Pool leaves, it leaves here
    args = {"env": PROBE, "num_envs": 4, **kwargs}
    with pytest.raises(exc) as info:
        await guard(aioenv.make(**args))
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in the error message {message!r}"


@pytest.mark.parametrize(("kwargs", "exc", "words"), BAD_ARGUMENTS)
async def test_bad_make_arguments_leave_no_temp_dir(
    kwargs: dict[str, Any], exc: Any, words: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    args = {"env": PROBE, "num_envs": 4, **kwargs}
    with pytest.raises(exc):
        aioenv.Pool(**args)
    assert os.listdir(tmp_path) == [], f"a refused Pool(...) left its private directory behind: {os.listdir(tmp_path)}"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ("NoSuchEnv-v0", ["NoSuchEnv"]),
        ("tests.envs.no_such_module:make", ["tests.envs.no_such_module"]),
    ],
)
async def test_unknown_env_fails_make_clearly(env: str, words: list[str]) -> None:
    """A mistake every env shares is reported once, for all of them (not as whichever env a worker
    reported first), with every env's own error in ``errors``."""
    with pytest.raises(AioEnvError) as info:
        await guard(aioenv.make(env, 3, num_workers=2))
    assert info.value.message.startswith("make failed for all 3 envs: ")
    assert info.value.env_id is None
    assert sorted(info.value.errors) == [0, 1, 2]
    for word in words:
        assert word in str(info.value)


def _fails_in_make(tag: str) -> gym.Env:
    raise ValueError(f"cannot make {tag}")


async def test_envs_that_fail_to_make_are_all_named() -> None:
    ok = functools.partial(gym.make, "CartPole-v1")
    same = [ok, functools.partial(_fails_in_make, "x"), ok, functools.partial(_fails_in_make, "x")]
    with pytest.raises(aioenv.EnvError) as info:
        await guard(aioenv.make(same, num_workers=2))
    assert info.value.message == "make failed for 2 of 4 envs (envs 1, 3): ValueError: cannot make x"
    assert sorted(info.value.errors) == [1, 3]
    assert info.value.remote_type == "ValueError"
    differ = [ok, functools.partial(_fails_in_make, "a"), ok, functools.partial(_fails_in_make, "b")]
    with pytest.raises(aioenv.EnvError) as info:
        await guard(aioenv.make(differ, num_workers=2))
    assert info.value.env_id == 1
    assert "cannot make a" in info.value.message
    assert info.value.message.endswith("(and 1 more envs failed to make: see err.errors)")
    assert "cannot make b" in info.value.errors[3].message


# ------------------------------------------------------------------ invalid actions


async def test_invalid_discrete_actions_raise_and_send_nothing() -> None:
    async with aioenv.Pool(PROBE, 4, executor="inline", num_workers=2) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(InvalidAction, match="shape") as info:
            await guard(pool.step(np.zeros(3, dtype=np.int64)))
        assert isinstance(info.value, ValueError)
        assert "0, 1, 2, 3" in str(info.value)  # names the envs of the batch
        with pytest.raises(InvalidAction, match="dtype"):
            await guard(pool.step(np.zeros(4, dtype=np.float32)))
        with pytest.raises(InvalidAction, match="env 1") as info:
            await guard(pool.step(np.array([0, 5, 0, 0])))
        assert info.value.env_id == 1
        assert isinstance(info.value, ValueError)
        with pytest.raises(InvalidAction, match="env 2") as info:
            await guard(pool.step([0, -1], env_ids=[3, 2]))
        assert info.value.env_id == 2
        with pytest.raises(InvalidAction, match="env 3"):
            pool.step_env(3, 7)
        with pytest.raises(InvalidAction):
            pool.step_env(3, 1.0)
        for bad in (True, np.bool_(False), -1, np.uint64(2**63 + 1)):
            with pytest.raises(InvalidAction, match=r"envs? \[?2\b"):  # "env 2", or "envs [2]" for a dtype
                pool.step_env(2, bad)
        with pytest.raises(InvalidAction, match="env 0"):
            pool.send([9, 0], env_ids=[0, 1])
        # nothing was sent: no env is busy, none was stepped, recv has nothing to wait for
        with pytest.raises(UsageError):
            await guard(pool.recv(min_results=1))
        obs, *_ = await guard(pool.step(np.array([1, 1, 1, 1])))
        assert obs[:, 1].tolist() == [1, 1, 1, 1]
        res = await guard(pool.step_env(3, 0))
        assert res.obs[1] == 2


@pytest.mark.parametrize(
    "space",
    [gym.spaces.Discrete(3), gym.spaces.Discrete(4, start=-2)]
    + ([gym.spaces.Discrete(5, dtype=np.int32)] if DISCRETE_TAKES_DTYPE else []),  # (dtype came in gymnasium 1.1)
)
def test_one_discrete_fast_path_agrees_with_check_actions(space: gym.spaces.Discrete) -> None:
    """``step_env``'s shortcut for one Discrete action takes exactly what the batch check accepts, as
    the same leaves; anything else goes the general way (which raises the explained error)."""
    from aioenv.pool import _batch_one, _one_discrete
    from aioenv.wire import spaces

    ids = np.array([0])
    candidates = [*range(-4, 7), True, False, np.int8(1), np.uint64(2**64 - 1), np.int64(-2), 1.0, "1", None]
    for action in candidates:
        fast = _one_discrete(space, action)
        try:
            general = spaces.check_actions(space, _batch_one(space, action), ids)
        except InvalidAction:
            assert fast is None, action
            continue
        assert fast is not None, action
        assert fast[0].dtype == general[0].dtype, action
        assert fast[0].tolist() == general[0].tolist(), action


async def test_invalid_box_actions_raise_and_send_nothing() -> None:
    async with aioenv.Pool("Pendulum-v1", 2, num_workers=1) as pool:
        await guard(pool.reset(seed=0))
        with pytest.raises(InvalidAction, match="env 0") as info:
            await guard(pool.step(np.array([[3.0], [0.0]], dtype=np.float32)))
        assert info.value.env_id == 0
        assert isinstance(info.value, ValueError)
        with pytest.raises(InvalidAction, match="env 1"):
            await guard(pool.step(np.array([[0.0], [-2.5]])))
        with pytest.raises(InvalidAction, match="env 1"):
            await guard(pool.step(np.array([[0.0], [np.nan]], dtype=np.float32)))
        with pytest.raises(InvalidAction, match="shape"):
            await guard(pool.step(np.zeros(2, dtype=np.float32)))
        with pytest.raises(InvalidAction, match="env 1"):
            pool.step_env(1, np.array([2.01], dtype=np.float32))
        obs, rew, *_ = await guard(pool.step(np.array([[2.0], [-2.0]], dtype=np.float32)))
        assert obs.shape == (2, 3)
        assert rew.shape == (2,)


# ------------------------------------------------------------------ structured spaces


async def test_dict_observations_batch_like_gymnasium() -> None:
    ref = SyncVectorEnv([DictObsEnv] * 3)
    async with aioenv.Pool("tests.envs.faulty:make_dict", 3, num_workers=2) as pool:
        assert pool.single_observation_space == ref.single_observation_space
        assert pool.observation_space == ref.observation_space
        obs, _ = await guard(pool.reset(seed=[1, 2, 3]))
        ref_obs, _ = ref.reset(seed=[1, 2, 3])
        assert_same_batch(obs, ref_obs)
        for t in range(3):
            actions = np.array([t % 2, 1, 0])
            result = await guard(pool.step(actions))
            assert_same_step(result, ref.step(actions), f"step {t}")
        obs, *_, info = await guard(pool.step([0, 0], env_ids=[2, 0]))
        assert list(obs) == list(pool.single_observation_space.spaces)
        assert obs["pos"].shape == (2, 2)
        assert obs["pos"].dtype == np.float32
        assert obs["count"].tolist() == [4, 5]
        assert info["env_id"].tolist() == [2, 0]

        res = await guard(pool.step_env(1, 1))
        assert isinstance(res.obs, dict)
        assert res.obs["count"] == 8
        assert res.obs["pos"].shape == (2,)

        pool.send(np.zeros(3, dtype=np.int64))
        obs, *_, info = await guard(pool.recv())
        order = np.argsort(info["env_id"])
        assert obs["count"][order].tolist() == [6, 9, 5]
        assert obs["pos"].shape == (3, 2)
    ref.close()


async def test_text_observations_and_actions() -> None:
    async with aioenv.Pool("tests.envs.faulty:make_text", 3, num_workers=2) as pool:
        assert isinstance(pool.single_observation_space, gym.spaces.Text)
        assert isinstance(pool.single_action_space, gym.spaces.Text)
        obs, info = await guard(pool.reset(seed=[1, 2, 3]))
        assert isinstance(obs, np.ndarray)
        assert obs.dtype == object
        assert obs.shape == (3,)
        assert obs.tolist() == ["start-1", "start-2", "start-3"]
        assert all(type(o) is str for o in obs)

        obs, rew, *_ = await guard(pool.step(["ab", "c", "xyz"]))
        assert obs.dtype == object
        assert obs.tolist() == ["ab-1", "c-1", "xyz-1"]
        assert all(type(o) is str for o in obs)
        assert rew.tolist() == [2.0, 1.0, 3.0]

        actions = np.empty(2, dtype=object)
        actions[:] = ["q", "rs"]
        obs, *_, info = await guard(pool.step(actions, env_ids=[2, 0]))
        assert obs.tolist() == ["q-2", "rs-2"]
        assert info["env_id"].tolist() == [2, 0]

        res = await guard(pool.step_env(1, "hello"))
        assert res.obs == "hello-2"
        assert type(res.obs) is str

        with pytest.raises(InvalidAction, match="env 1"):
            await guard(pool.step(["ok", "NO", "ok"]))
        with pytest.raises(InvalidAction, match="env 2"):
            await guard(pool.step(["ok", "ok", "waytoolongforit"]))
        with pytest.raises(InvalidAction, match="env 0"):
            pool.step_env(0, "")

        pool.send(["a", "b", "c"])
        obs, *_, info = await guard(pool.recv())
        by_env = dict(zip(info["env_id"].tolist(), obs.tolist(), strict=True))
        assert by_env == {0: "a-3", 1: "b-3", 2: "c-3"}
        assert obs.dtype == object


async def test_info_values_batch_like_gymnasium() -> None:
    seeds = [0, 1, 2, 3]
    ref = SyncVectorEnv([InfoEnv] * 4)
    async with aioenv.Pool("tests.envs.faulty:make_info", 4, num_workers=2) as pool:
        _, info = await guard(pool.reset(seed=seeds))
        _, ref_info = ref.reset(seed=seeds)
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        assert_same_batch(without_env_id(info), ref_info, "reset info")
        *_, info = await guard(pool.step(np.zeros(4, dtype=np.int64)))
        *_, ref_info = ref.step(np.zeros(4, dtype=np.int64))
        assert_same_batch(without_env_id(info), ref_info, "step info")

        # a subset, across workers and out of order: as a 2-env vector of those envs
        *_, info = await guard(pool.step([1, 1], env_ids=[3, 0]))
        sub = SyncVectorEnv([InfoEnv] * 2)
        sub.reset(seed=[3, 0])
        sub.step(np.zeros(2, dtype=np.int64))
        *_, sub_info = sub.step(np.ones(2, dtype=np.int64))
        assert_same_batch(without_env_id(info), sub_info, "subset step info")
        sub.close()

        res = await guard(pool.step_env(1, 0))
        assert res.info["tup"] == (1, 2)
        assert type(res.info["tup"]) is tuple
        assert res.info["f32"] == np.float32(0.25)
        assert res.info["f32"].dtype == np.float32
        assert res.info["arr"].dtype == np.int16
        assert res.info["arr"].tolist() == [1, 2, 3]
        assert res.info["nested"] == {"x": 1, "y": {"z": 2.0}}
        assert res.info["none"] is None
        assert res.info["s"] == "env1"
    ref.close()


# ------------------------------------------------------------------ aioenv.run


def test_run_helper_runs_a_coroutine() -> None:
    async def main() -> tuple[int, list[int]]:
        async with aioenv.Pool(PROBE, 2, executor="inline", num_workers=1) as pool:
            obs, _ = await guard(pool.reset(seed=4))
            return pool.num_envs, obs[:, 0].astype(int).tolist()

    assert aioenv.run(main()) == (2, [4, 5])
    assert aioenv.run(asyncio.sleep(0, result="done")) == "done"


async def test_refused_reset_seed_leaves_the_envs_free() -> None:
    """A seed that is refused must not leave the envs claimed: the next reset works."""
    async with aioenv.Pool("CartPole-v1", 2, num_workers=1) as pool:
        with pytest.raises(ValueError, match="entries"):
            await guard(pool.reset(seed=[1, 2, 3]))
        with pytest.raises(UsageError, match=r"seed 'not a seed' for env 0: a seed is an int in \[0, 2\*\*64\)"):
            await guard(pool.reset(seed=["not a seed", 2]))
        obs, info = await guard(pool.reset(seed=[1, 2]))
        assert info["env_id"].tolist() == [0, 1]
        expected = gym.make("CartPole-v1").reset(seed=2)[0]
        np.testing.assert_array_equal(obs[1], expected)


async def test_step_info_list_gives_each_envs_own_info_in_one_batch() -> None:
    """The adapters' step variant returns each env's own info dict; batched the gymnasium way,
    they equal what step() returns for the same trajectory."""
    from aioenv.wire.infos import add_info
    from tests.support.compare import assert_same

    kwargs: dict[str, Any] = {"num_workers": 2, "seed": 5, "autoreset_mode": "same_step"}
    async with (
        aioenv.Pool("tests.envs.dictenv:make_dict_env", 4, **kwargs) as batched,
        aioenv.Pool("tests.envs.dictenv:make_dict_env", 4, **kwargs) as listed,
    ):
        await guard(batched.reset())
        await guard(listed.reset())
        rng = np.random.default_rng(0)
        for _ in range(25):
            actions = rng.integers(0, 3, size=4)
            _, rew_a, term_a, trunc_a, info_a = await guard(batched.step(actions, [3, 0, 1, 2]))
            _, rew_b, term_b, trunc_b, infos = await guard(listed._start_step(actions, [3, 0, 1, 2], info_list=True))
            assert isinstance(infos, list)
            assert len(infos) == 4
            assert all(isinstance(d, dict) for d in infos)
            np.testing.assert_array_equal(rew_a, rew_b)
            np.testing.assert_array_equal(term_a | trunc_a, term_b | trunc_b)
            rebuilt: dict[str, Any] = {}
            for row, env_info in enumerate(infos):
                add_info(rebuilt, env_info, row, 4)
            del info_a["env_id"]
            assert_same(rebuilt, info_a)


async def test_batched_spaces_are_built_on_first_use() -> None:
    """A pool of Text envs starts without copying the Text space once per env (gymnasium's batch_space does)."""
    async with aioenv.Pool(TextEnv, 300, executor="in_process") as pool:
        assert "observation_space" not in vars(pool)
        assert "action_space" not in vars(pool)
        assert pool.observation_space == batch_space(pool.single_observation_space, 300)
        assert pool.action_space == batch_space(pool.single_action_space, 300)
        assert pool.observation_space is pool.observation_space  # built once

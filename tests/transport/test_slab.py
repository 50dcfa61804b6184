"""Shared-memory rows between a pool and its inline workers (``aioenv.transport.slab``).

Unit tests of the layout and of two mappings of one file, then real pools: an inline, thread or async pool
uses a slab and gives exactly what the same pool gives with arrays in its messages (``AIOENV_SLAB=off``) over
a mixed sequence of calls (subsets in any order, per-env futures, send/recv, partial resets, a failing env);
``recv()``'s rows of thread and async workers wait in the slab until ``recv()`` takes them; a worker re-made
after SIGKILL maps the rows again; pools that cannot share rows (text spaces, thread envs in the pool's own
process) go on with messages; nothing is left open after ``aclose``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import signal
import socket
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.errors import EnvError, UsageError
from aioenv.transport.slab import SLAB_ENV, Slab, slab_enabled
from aioenv.wire import spaces
from tests.envs.asyncwrap import wrapped
from tests.envs.dictenv import make_dict_env
from tests.envs.waiting import MEET, WaitEnv
from tests.support.compare import assert_same
from tests.support.procs import HANG
from tests.support.scripts import run_python

DICT_OBS = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-1, 1, (3,), np.float32),
        "count": gym.spaces.Discrete(10),
        "flag": gym.spaces.MultiBinary(5),
    }
)


def slab_fds() -> list[str]:
    """This process's open descriptors that are slabs."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "aioenv-slab" in target:
            found.append(target)
    return found


# ---------------------------------------------------------------- layout and mappings


def test_plan_lays_out_every_leaf_aligned_and_apart() -> None:
    layout = Slab.plan(7, DICT_OBS, gym.spaces.Box(-1, 1, (2, 3), np.float64))
    assert layout is not None
    assert layout["n"] == 7
    entries = layout["act"] + layout["obs"] + layout["x"]
    assert [e[0] for e in layout["act"]] == ["<f8"]
    assert [e[1] for e in layout["act"]] == [[2, 3]]
    assert len(layout["obs"]) == 3  # one per leaf of the Dict
    assert [(e[0], e[1]) for e in layout["x"]] == [("<f8", []), ("|b1", []), ("|b1", [])]
    spans = []
    for dtype, shape, offset in entries:
        assert offset % 64 == 0
        spans.append((offset, offset + 7 * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans)), spans
    assert spans[-1][1] <= layout["size"]


def test_plan_adds_final_observations_only_when_asked_and_only_for_a_box_of_rows() -> None:
    box = gym.spaces.Box(-1, 1, (3, 2), np.float32)
    layout = Slab.plan(5, box, gym.spaces.Discrete(2), True)
    assert layout is not None
    dtype, shape, offset = layout["fin"]
    assert (dtype, shape) == ("<f4", [3, 2])
    assert offset % 64 == 0
    taken = [e[2] for e in layout["act"] + layout["obs"] + layout["x"]]
    assert offset > max(taken)  # after every other area, within the file
    assert offset + 5 * 6 * 4 <= layout["size"]
    fd = Slab.new_fd()
    try:
        pool_side = Slab.create(fd, layout)
        worker_side = Slab.attach(fd, layout)
        assert worker_side.final is not None
        worker_side.final[4] = 0.5
        assert pool_side.final is not None
        assert pool_side.final.shape == (5, 3, 2)
        assert pool_side.final[4].tolist() == [[0.5, 0.5]] * 3
        worker_side.close()
        pool_side.close()
    finally:
        os.close(fd)
    for obs_space, finals in [
        (box, False),  # not asked (next_step, disabled)
        (gym.spaces.Discrete(3), True),  # a row of no dimension: its final observation is a scalar of the env's
        (gym.spaces.Box(-1, 1, (), np.float32), True),
        (DICT_OBS, True),
    ]:
        plain = Slab.plan(5, obs_space, gym.spaces.Discrete(2), finals)
        assert plain is not None
        assert "fin" not in plain
        assert Slab.plan(5, obs_space, gym.spaces.Discrete(2))["size"] == plain["size"]  # type: ignore[index]


def test_plan_refuses_text_leaves() -> None:
    assert Slab.plan(4, gym.spaces.Text(8), gym.spaces.Discrete(2)) is None
    assert Slab.plan(4, gym.spaces.Box(0, 1, (2,)), gym.spaces.Tuple((gym.spaces.Text(3),))) is None


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_actions_whose_rows_are_not_the_envs_are_refused_and_not_written(rows: int) -> None:
    """One row or too few would be repeated over the envs by a plain ``ndarray.put``; too many cut short."""
    layout = Slab.plan(6, DICT_OBS, gym.spaces.Discrete(4))
    assert layout is not None
    fd = Slab.new_fd()
    try:
        slab = Slab.create(fd, layout)
        with pytest.raises(ValueError, match=rf"expected 3 action rows, got an array of shape \({rows},\)"):
            slab.put_actions(np.array([4, 1, 0], dtype=np.int64), [np.full(rows, 3, dtype=np.int64)])
        assert not slab.act[0].any()
        slab.close()
    finally:
        os.close(fd)


def test_a_workers_extras_by_a_run_an_index_or_one_env_are_what_the_pool_reads() -> None:
    layout = Slab.plan(6, DICT_OBS, gym.spaces.Discrete(4))
    assert layout is not None
    fd = Slab.new_fd()
    try:
        pool_side, worker_side = Slab.create(fd, layout), Slab.attach(fd, layout)
        worker_side.put_extras(slice(0, 2), [0.5, 1.5], [False, True], [True, False])  # an inline worker's run
        worker_side.put_extras(np.array([5, 3], dtype=np.intp), [2.5, 3.5], [True, False], [False, True])
        worker_side.put_extras(4, 4.5, True, True)  # one thread env's row
        _, extras = pool_side.results(np.arange(6), True)
        assert extras is not None
        reward, terminated, truncated = (extra.tolist() for extra in extras)
        assert reward == [0.5, 1.5, 0.0, 3.5, 4.5, 2.5]
        assert terminated == [False, True, False, False, True, True]
        assert truncated == [True, False, False, True, True, False]
        worker_side.close()
        pool_side.close()
    finally:
        os.close(fd)


def test_two_mappings_of_one_file_share_rows_and_results_are_copies() -> None:
    layout = Slab.plan(6, DICT_OBS, gym.spaces.Discrete(4))
    assert layout is not None
    fd = Slab.new_fd()
    try:
        pool_side = Slab.create(fd, layout)
        worker_side = Slab.attach(fd, layout)
        ids = np.array([4, 1], dtype=np.int64)
        pool_side.put_actions(ids, [np.array([3, 2], dtype=np.int64)])
        assert worker_side.act[0][4] == 3
        assert worker_side.act[0][1] == 2
        pool_side.put_actions(np.arange(6), [np.arange(6, dtype=np.int64)], every=True)
        np.testing.assert_array_equal(worker_side.act[0], np.arange(6))
        row = {"pos": np.array([0.5, -0.5, 0.25], np.float32), "count": 7, "flag": np.array([1, 0, 1, 1, 0], np.int8)}
        spaces.write_row(DICT_OBS, worker_side.obs, 1, row)
        worker_side.reward[1], worker_side.terminated[1], worker_side.truncated[1] = 1.5, True, False
        obs, extras = pool_side.results(np.array([1]), step=True)
        assert extras is not None
        assert_same(spaces.from_leaves(DICT_OBS, obs), {k: np.asarray(v)[None] for k, v in row.items()}, "row 1")
        assert extras[0].tolist() == [1.5]
        assert extras[1].tolist() == [True]
        assert extras[2].tolist() == [False]
        spaces.write_row(DICT_OBS, worker_side.obs, 1, {**row, "count": 9})  # the next step overwrites the row...
        assert spaces.from_leaves(DICT_OBS, obs)["count"].tolist() == [7]  # ...what was taken stays as it was
        reset_obs, none = pool_side.results(np.array([1]), step=False)
        assert none is None
        assert spaces.from_leaves(DICT_OBS, reset_obs)["count"].tolist() == [9]
        worker_side.close()
        pool_side.close()
    finally:
        os.close(fd)


def test_attach_refuses_a_layout_that_does_not_fit_the_file() -> None:
    layout = Slab.plan(4, gym.spaces.Box(0, 1, (1000,)), gym.spaces.Discrete(2))
    assert layout is not None
    fd = Slab.new_fd()
    try:
        os.ftruncate(fd, 100)
        with pytest.raises(ValueError, match=r"cannot map the pool's shared rows: the slab file has 100 bytes"):
            Slab.attach(fd, layout)
        with pytest.raises(ValueError, match="cannot map the pool's shared rows"):
            Slab.attach(fd, {"n": 4})
    finally:
        os.close(fd)


def test_aioenv_slab_switches_slabs_off_and_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLAB_ENV, "off")
    assert not slab_enabled()
    monkeypatch.setenv(SLAB_ENV, "ON")
    assert slab_enabled() == sys.platform.startswith("linux")
    monkeypatch.setenv(SLAB_ENV, "maybe")
    with pytest.raises(UsageError, match=r"AIOENV_SLAB must be 'on' or 'off', got 'maybe'"):
        slab_enabled()


def test_try_new_fd_gives_none_when_slabs_are_off_or_memfd_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLAB_ENV, "off")
    assert Slab.try_new_fd() is None
    monkeypatch.setenv(SLAB_ENV, "on")
    fd = Slab.try_new_fd()
    assert fd is not None
    assert os.fstat(fd).st_size == 0  # a fresh, empty file
    os.close(fd)

    def refuse(name: str, flags: int = 0) -> int:
        raise PermissionError(1, "Operation not permitted")  # as a seccomp sandbox answers memfd_create

    monkeypatch.setattr(os, "memfd_create", refuse)
    assert Slab.try_new_fd() is None


# ---------------------------------------------------------------- pools

N = 6


async def drive(pool: aioenv.Pool) -> list[Any]:
    """A mixed sequence of calls; returns everything the pool answered, in order."""
    out: list[Any] = []
    rng = np.random.default_rng(5)
    out.append(await pool.reset(seed=11))
    for t in range(40):
        actions = rng.integers(0, 3, N)
        if t % 5 == 0:  # a subset, in a shuffled order, across both workers
            ids = rng.permutation(N)[:4]
            out.append(await pool.step(actions[:4], env_ids=ids))
        elif t % 5 == 1:
            futures = [pool.step_env(i, int(actions[i])) for i in (5, 0, 3)]
            out.append(await asyncio.gather(*futures))
        elif t % 5 == 2:  # rows come in the order they finished: compare them in env order
            pool.send(actions)
            got = await pool.recv(min_results=N, max_results=N)
            out.append(reorder(got, np.argsort(got[-1]["env_id"], kind="stable")))
        elif t % 5 == 3:
            out.append(await pool.reset(env_ids=[4, 1], seed=[t, t + 1]))
        else:
            out.append(await pool.step(actions))
    return out


def reorder(value: Any, order: np.ndarray) -> Any:
    """Rows of a batched value (arrays, dicts and tuples of them) in ``order``."""
    if isinstance(value, dict):
        return {key: reorder(v, order) for key, v in value.items()}
    if isinstance(value, tuple):
        return tuple(reorder(v, order) for v in value)
    return np.asarray(value)[order]


def _env_of(executor: str, env: Any) -> Any:
    """``env`` (an id, or a factory) as the ``executor`` takes it: an ``async`` pool's as an ``AsyncEnv``."""
    if executor != "async":
        return env
    return functools.partial(wrapped, env if callable(env) else functools.partial(gym.make, env))


async def run_dict(
    slab: str, monkeypatch: pytest.MonkeyPatch, executor: str = "inline", **kwargs: Any
) -> tuple[list[Any], bool]:
    monkeypatch.setenv(SLAB_ENV, slab)
    env = _env_of(executor, make_dict_env)
    async with aioenv.Pool(env, N, num_workers=2, executor=executor, autoreset_mode="same_step", **kwargs) as pool:
        assert pool._runner is not None
        return await asyncio.wait_for(drive(pool), HANG), pool._runner.slab is not None


async def test_an_inline_pool_shares_rows_and_answers_exactly_as_with_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    shared, used = await run_dict("on", monkeypatch)
    assert used, "an inline pool of Dict observations should use a slab"
    plain, used = await run_dict("off", monkeypatch)
    assert not used
    assert_same(shared, plain, "slab vs messages")


@pytest.mark.parametrize("executor", ["thread", "async"])
async def test_a_thread_or_async_pool_shares_rows_and_answers_exactly_as_with_messages(
    executor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every row of this env has an info: its rows are copied out of the slab as they come.
    shared, used = await run_dict("on", monkeypatch, executor)
    assert used, f"a pool of {executor} workers should use a slab"
    plain, used = await run_dict("off", monkeypatch, executor)
    assert not used
    assert_same(shared, plain, f"{executor}: slab vs messages")


async def run_cartpole(executor: str, slab: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """CartPole rows (no infos: ``recv()``'s rows wait in the slab) by ``send``/``recv`` in batches of 3, env
    ``e``'s ``t``-th action ``(e + t) % 2`` whatever order rows come in, each taken env sent again at once, 12 steps
    an env; then a lock-step ``step()``. Returns ``(env, t, obs, reward, terminated, truncated)`` in env order."""
    monkeypatch.setenv(SLAB_ENV, slab)
    out: list[Any] = []
    async with aioenv.Pool(_env_of(executor, "CartPole-v1"), N, num_workers=2, executor=executor) as pool:
        assert pool._runner is not None
        assert (pool._runner.slab is not None) == (slab == "on")
        await pool.reset(seed=4)
        steps = np.zeros(N, dtype=np.int64)
        pool.send(np.arange(N) % 2)
        while steps.min() < 12:
            obs, reward, terminated, truncated, info = await pool.recv(min_results=1, max_results=3)
            ids = info["env_id"]
            for i, env_id in enumerate(ids.tolist()):
                out.append((env_id, int(steps[env_id]), obs[i], reward[i], terminated[i], truncated[i]))
            steps[ids] += 1
            ids = ids[steps[ids] < 12]
            if ids.size:
                pool.send((ids + steps[ids]) % 2, ids)
        out.sort(key=lambda row: (row[0], row[1]))
        out.append(await pool.step(np.ones(N, dtype=np.int64)))
    return out


@pytest.mark.parametrize("executor", ["thread", "async"])
async def test_send_recv_rows_of_thread_or_async_workers_are_the_same_through_the_slab(
    executor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = await run_cartpole(executor, "on", monkeypatch)
    plain = await run_cartpole(executor, "off", monkeypatch)
    assert len(shared) == N * 12 + 1
    assert_same(shared, plain, f"{executor}: slab vs messages")


@pytest.mark.parametrize("executor", ["thread", "async"])
async def test_recvs_rows_of_a_thread_or_async_worker_wait_in_the_slab_until_recv_takes_them(executor: str) -> None:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    ref.reset(seed=7)
    want = ref.step(np.ones(4, dtype=np.int64))
    async with aioenv.Pool(_env_of(executor, "CartPole-v1"), 4, num_workers=2, executor=executor) as pool:
        runner: Any = pool._runner
        await asyncio.wait_for(pool.reset(seed=7), HANG)
        pool.send(np.ones(4, dtype=np.int64))
        async with asyncio.timeout(HANG):
            while pool._recv.ready < 4:  # every row has arrived; recv() has taken none
                await asyncio.sleep(0.005)
        assert runner.sched.held_unread == {0, 1, 2, 3}  # in the shared rows, where they came
        assert runner.sched.busy.all()  # held, so that no request writes those rows before recv() copies them
        with pytest.raises(UsageError, match="env 2's last result has arrived but recv"):
            pool.send(np.zeros(1, dtype=np.int64), [2])
        obs, reward, terminated, truncated, info = await asyncio.wait_for(pool.recv(min_results=4), HANG)
        order = np.argsort(info["env_id"])
        for got, expected in zip((obs, reward, terminated, truncated), want[:4], strict=True):
            np.testing.assert_array_equal(got[order], expected)
        assert not runner.sched.held_unread
        assert not runner.sched.busy.any()
    ref.close()


async def test_a_step_whose_rows_come_out_of_order_in_one_reply_is_put_in_order() -> None:
    # Eight envs on one thread worker meet at a barrier in each step and leave it together: their rows finish in
    # whatever order the threads run, mostly in one reply; each step's batch must still be in env order.
    factories = [functools.partial(WaitEnv, ident=i, parties=8) for i in range(8)]
    async with aioenv.Pool(factories, num_workers=1, executor="thread") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        for t in range(1, 25):
            obs, *_ = await asyncio.wait_for(pool.step(np.full(8, MEET, dtype=np.int64)), HANG)
            assert obs.tolist() == [[i, t] for i in range(8)]


async def test_a_failing_env_fails_its_own_row_through_the_slab() -> None:
    async with aioenv.Pool(
        "tests.envs.faulty:make_probe", 4, num_workers=2, executor="inline", env_kwargs={"fail_at": 3}
    ) as pool:
        assert pool._runner is not None
        assert pool._runner.slab is not None
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        await asyncio.wait_for(pool.step(np.zeros(4, dtype=np.int64)), HANG)
        await asyncio.wait_for(pool.step(np.zeros(4, dtype=np.int64)), HANG)
        with pytest.raises(EnvError) as caught:
            await asyncio.wait_for(pool.step(np.zeros(4, dtype=np.int64)), HANG)
        assert sorted(caught.value.errors) == [0, 1, 2, 3]
        obs, _ = await asyncio.wait_for(pool.reset(env_ids=[2], seed=9), HANG)
        assert obs.shape == (1, 4)


@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
async def test_a_re_made_worker_maps_the_rows_again(executor: str) -> None:
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    ref.reset(seed=3)
    async with aioenv.Pool(_env_of(executor, "CartPole-v1"), 4, num_workers=2, executor=executor) as pool:
        assert pool._runner is not None
        assert pool._runner.slab is not None
        await asyncio.wait_for(pool.reset(seed=3), HANG)
        old = pool._runner.slots[0].proc
        assert old is not None
        os.kill(int(old.pid), signal.SIGKILL)
        for _ in range(int(HANG / 0.01)):  # until its death is noticed and a fresh worker takes its envs
            if pool._runner.slots[0].proc is not old:
                break
            await asyncio.sleep(0.01)
        assert pool._runner.slots[0].proc is not old
        obs, _ = await asyncio.wait_for(pool.reset(seed=3), HANG)
        ref_obs, _ = ref.reset(seed=3)
        np.testing.assert_array_equal(obs, ref_obs)
        for t in range(30):
            actions = np.array([t % 2, 1, 0, (t // 3) % 2], dtype=np.int64)
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            for g, w in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(g, w)
    ref.close()


@pytest.mark.parametrize(
    ("env", "options"),
    [("tests.envs.faulty:make_text", {}), ("CartPole-v1", {"executor": "thread", "num_workers": 0})],
)
async def test_pools_that_cannot_share_rows_keep_their_messages(env: str, options: dict[str, Any]) -> None:
    options = {"num_workers": 2, **options}  # text leaves; envs on threads of this process (their rows as they are)
    async with aioenv.Pool(env, 2, **options) as pool:
        assert pool._runner is not None
        assert pool._runner.slab is None
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        action = ["ab", "cd"] if env.endswith("make_text") else np.zeros(2, dtype=np.int64)
        obs, *_ = await asyncio.wait_for(pool.step(action), HANG)
        assert len(obs) == 2
    assert not slab_fds()


async def test_close_leaves_no_slab_open() -> None:
    before = slab_fds()
    pool = await aioenv.make("CartPole-v1", 4, num_workers=2)
    assert len(slab_fds()) > len(before)  # the file, and the mapping's own descriptor
    await asyncio.wait_for(pool.reset(), HANG)
    await pool.aclose()
    assert slab_fds() == before


def test_a_worker_refuses_slab_or_done_pipe_where_they_cannot_be() -> None:
    ours, theirs = socket.socketpair()
    fd = str(theirs.fileno())
    read, write = os.pipe()
    done = ["--fd", fd, "--slab", "0", "--done", str(write)]
    try:
        for args, words in [
            (["--fd", fd, "--slab", "99"], "--slab 99: not an open descriptor"),
            (["--connect", "tcp://127.0.0.1:9", "--slab", "0"], "--slab is for a worker of a local pool (--fd)"),
            (["--fd", fd, "--done", fd], "--done is for an inline or thread worker with shared rows (--slab)"),
            (
                ["--fd", fd, "--executor", "async", "--slab", "0", "--done", fd],
                "--done is for an inline or thread worker with shared rows (--slab)",
            ),
            (["--fd", fd, "--executor", "thread", "--slab", "0", "--done", fd], f"--done {fd}: not a pipe"),
            (["--fd", fd, "--slab", "0", "--done", "99"], "--done 99: not an open descriptor"),
            (["--fd", fd, "--slab", "0", "--done", fd], f"--done {fd}: not a pipe (expected the done pipe"),
            (["--fd", fd, "--quiet", f"{read},{write}"], "--quiet is for an inline worker with a done pipe (--done)"),
            ([*done, "--executor", "thread", "--quiet", f"{read},{read}"], "--quiet is for an inline worker"),
            ([*done, "--quiet", str(read)], f"--quiet: expected two descriptors as Q,C, got '{read}'"),
            ([*done, "--quiet", f"{write},99"], "--quiet 99: not an open descriptor"),
            ([*done, "--quiet", f"{write},{fd}"], f"--quiet {fd}: not a pipe (expected the quiet and countdown pipes"),
        ]:
            out = run_python("-m", "workers", *args, timeout=HANG, pass_fds=(theirs.fileno(), read, write))
            assert out.returncode == 2, out.stderr
            assert words in out.stderr, out.stderr
    finally:
        ours.close()
        theirs.close()
        os.close(read)
        os.close(write)

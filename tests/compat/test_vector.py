"""``aioenv.vector.AioVectorEnv`` is a drop-in for ``gymnasium.vector.AsyncVectorEnv``.

The same env factories, seeds and actions go through an ``AioVectorEnv`` (real worker processes)
and gymnasium's ``AsyncVectorEnv`` (its own forked processes); observations, rewards, terminations,
truncations and infos (``final_obs``/``final_info`` included) must be identical (dtypes included), in
all three autoreset modes, for Box, Discrete, Dict, Tuple and Text observations, and so must the
metadata (``autoreset_mode`` included). ``test_vector_peer.py`` compares errors and arguments.
Timeouts are hang guards only.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AsyncVectorEnv, VectorEnv
from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics

import aioenv
from aioenv._compat import AutoresetMode
from aioenv.vector import AioVectorEnv
from tests.envs.dictenv import make_dict_env
from tests.envs.faulty import SLOW, make_probe, make_text
from tests.envs.waiting import MEET, WaitEnv
from tests.support.compare import NEEDS_GYMNASIUM_1_1, assert_same, gym_autoreset
from tests.support.procs import HANG, children, process_gone
from tests.support.scripts import assert_example_refuses, run_example

ROOT = Path(__file__).resolve().parents[2]
N = 4
STEPS = 50
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class TupleEnv(gym.Env[tuple[Any, ...], np.int64]):
    """``Tuple(Box(2,) float32, Discrete(5))`` observations; episodes of random length that end by
    termination or truncation; infos with a per-step value and an end-of-episode string."""

    def __init__(self) -> None:
        self.observation_space = spaces.Tuple((spaces.Box(-5.0, 5.0, (2,), np.float32), spaces.Discrete(5)))
        self.action_space = spaces.Discrete(2)
        self._t = 0
        self._limit = 0

    def _obs(self) -> tuple[Any, ...]:
        return (self.np_random.uniform(-1, 1, 2).astype(np.float32), int(self._t % 5))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._limit = int(self.np_random.integers(2, 9))
        return self._obs(), {"limit": self._limit}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        ended = self._t >= self._limit
        odd = self._limit % 2 == 1
        info: dict[str, Any] = {"t": self._t, "a": int(action)}
        if ended:
            info["why"] = "odd" if odd else "even"
        return self._obs(), float(action) + 0.25, ended and odd, ended and not odd, info


CASES: dict[str, Callable[[], gym.Env[Any, Any]]] = {
    "cartpole-box": functools.partial(gym.make, "CartPole-v1", max_episode_steps=20),
    "frozenlake-discrete": functools.partial(gym.make, "FrozenLake-v1", max_episode_steps=12),
    "dict": make_dict_env,
    "tuple": TupleEnv,
    "text": make_text,
}


def pair(
    factory: Callable[[], gym.Env[Any, Any]], mode: AutoresetMode, n: int = N, shared_memory: bool = True
) -> tuple[AioVectorEnv, VectorEnv]:
    """An AioVectorEnv and the peer, gymnasium's AsyncVectorEnv (made first: it forks before aioenv's loop
    thread exists). The peer's ``shared_memory=True`` garbles Text observations (gymnasium 1.4): pass False."""
    ref = AsyncVectorEnv([factory] * n, shared_memory=shared_memory, **gym_autoreset(mode))
    try:
        return AioVectorEnv([factory] * n, autoreset_mode=mode, num_workers=2, shared_memory=shared_memory), ref
    except BaseException:
        ref.close(terminate=True)
        raise


def same(actual: Any, expected: Any, path: str) -> None:
    assert_same(actual, expected, path)


def drive(aio: VectorEnv, ref: VectorEnv, mode: AutoresetMode, steps: int = STEPS, seed: int = 11) -> int:
    """Step both with the same actions; returns how many episodes ended (so tests know ends happened)."""
    same(aio.reset(seed=seed), ref.reset(seed=seed), "reset")
    ref.action_space.seed(seed + 1)
    ended_count = 0
    for t in range(steps):
        action = ref.action_space.sample()
        got = aio.step(action)
        want = ref.step(action)
        same(got, want, f"step {t}")
        ended = np.logical_or(want[2], want[3])
        ended_count += int(ended.sum())
        if mode == AutoresetMode.DISABLED and ended.any():
            got_r = aio.reset(options={"reset_mask": ended.copy()})
            want_r = ref.reset(options={"reset_mask": ended.copy()})
            same(got_r, want_r, f"partial reset after step {t}")
    return ended_count


# ---------------------------------------------------------------- equivalence


def test_envs_on_threads_of_this_process_give_the_same_results() -> None:
    """``num_workers=0, executor="thread"``: the adapter's envs on threads of the test's own process."""
    factory = CASES["dict"]
    # the pool first: gymnasium 1.1 to 1.3's SyncVectorEnv writes its AutoresetMode into the env class's own
    # metadata (1.4 copies it), which the envs on this process's threads would then show the pool
    aio = AioVectorEnv([factory] * N, executor="thread", num_workers=0)
    ref = gym.vector.SyncVectorEnv([factory] * N, **gym_autoreset(AutoresetMode.NEXT_STEP))
    try:
        assert (aio.pool.pool.envs_in_process, aio.pool.pool.num_workers) == (N, 0)
        assert not aio.pool.runs_in_caller
        assert drive(aio, ref, AutoresetMode.NEXT_STEP) > 0
    finally:
        aio.close()
        ref.close()


def test_envs_in_worker_processes_are_driven_from_the_callers_thread() -> None:
    """Worker processes (the default): every ``*_async`` runs its call in the caller's thread (no hop to the loop
    thread and back), and the results stay gymnasium's."""
    factory = CASES["dict"]
    aio = AioVectorEnv([factory] * N, executor="inline", num_workers=2)
    ref = gym.vector.SyncVectorEnv([factory] * N, **gym_autoreset(AutoresetMode.NEXT_STEP))
    try:
        assert (aio.pool.pool.envs_in_process, aio.pool.pool.num_workers) == (0, 2)
        assert drive(aio, ref, AutoresetMode.NEXT_STEP) > 0
        assert aio.get_attr("spec") == ref.get_attr("spec")
        assert aio.pool.runs_in_caller  # reset, step and call ran their *_async here and never gave the loop back
        aio.step_async(aio.action_space.sample())  # on its own: returns at once, the workers step meanwhile
        assert not aio.pool.runs_in_caller
        aio.step_wait()
    finally:
        aio.close()
        ref.close()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_results_as_async_vector_env(case: str, mode: AutoresetMode) -> None:
    aio, ref = pair(CASES[case], mode, shared_memory=case != "text")
    try:
        assert aio.single_observation_space == ref.single_observation_space
        assert aio.observation_space == ref.observation_space
        assert aio.single_action_space == ref.single_action_space
        assert aio.action_space == ref.action_space
        assert aio.metadata.get("autoreset_mode", mode) is mode  # (gymnasium 1.0's vector envs name none)
        assert aio.metadata == ref.metadata
        assert aio.num_envs == ref.num_envs
        assert aio.render_mode == ref.render_mode
        ended = drive(aio, ref, mode)
        if case != "text":
            assert ended > 0, "the case should end some episodes"
    finally:
        aio.close()
        ref.close()


@NEEDS_GYMNASIUM_1_1
def test_partial_reset_returns_the_full_batch() -> None:
    aio, ref = pair(CASES["dict"], AutoresetMode.NEXT_STEP)
    try:
        same(aio.reset(seed=3), ref.reset(seed=3), "reset")
        for _ in range(3):
            action = np.array([0, 1, 2, 1])
            same(aio.step(action), ref.step(action), "step")
        mask = np.array([False, True, False, True])
        options = {"reset_mask": mask, "extra": 1}
        same(
            aio.reset(seed=[1, 2, 3, 4], options=dict(options)),
            ref.reset(seed=[1, 2, 3, 4], options=dict(options)),
            "partial",
        )
        action = np.array([2, 2, 0, 0])
        same(aio.step(action), ref.step(action), "step after")
    finally:
        aio.close()
        ref.close()


@NEEDS_GYMNASIUM_1_1
@pytest.mark.parametrize("bad", [np.array([1, 0, 0, 0]), np.zeros(3, bool), np.zeros(4, bool), [True] * 4])
def test_bad_reset_mask_is_refused_like_gymnasium(bad: Any) -> None:
    aio, ref = pair(CASES["cartpole-box"], AutoresetMode.NEXT_STEP)
    try:
        aio.reset(seed=0)
        ref.reset(seed=0)
        with pytest.raises((TypeError, ValueError, AssertionError)) as want:
            ref.reset(options={"reset_mask": bad})
        # (gymnasium before 1.4 asserts; aioenv raises TypeError or ValueError on every release)
        theirs = (TypeError, ValueError) if isinstance(want.value, AssertionError) else type(want.value)
        with pytest.raises(theirs, match="reset_mask"):
            aio.reset(options={"reset_mask": bad})
        aio.step(np.zeros(N, np.int64))  # still usable
    finally:
        aio.close()
        ref.close()


# ---------------------------------------------------------------- async pairs, calls


def test_async_pairs_and_calls() -> None:
    factory = functools.partial(make_probe, render_mode="rgb_array")
    aio, ref = pair(factory, AutoresetMode.NEXT_STEP, n=3)
    try:
        aio.reset_async(seed=5)
        want_obs, _ = ref.reset(seed=5)
        got_obs, got_info = aio.reset_wait(timeout=HANG)
        same(got_obs, want_obs, "reset pair obs")
        assert set(got_info) == {"pid", "_pid"}  # ProbeEnv's info names the process hosting it
        aio.step_async(np.array([0, 1, 0]))
        want_step = ref.step(np.array([0, 1, 0]))
        same(aio.step_wait(timeout=HANG), want_step, "step pair")
        aio.call_async("describe", 4, scale=2)
        assert aio.call_wait(timeout=HANG) == ref.call("describe", 4, scale=2)
        assert aio.call("describe", 1) == ref.call("describe", 1)
        aio.set_attr("tag", [1, 2, 3])
        ref.set_attr("tag", [1, 2, 3])
        assert aio.get_attr("tag") == ref.get_attr("tag") == (1, 2, 3)
        aio.set_attr("tag", 8)
        assert aio.get_attr("tag") == (8, 8, 8)
        same(aio.render(), ref.render(), "render")
        assert aio.np_random_seed == (5, 6, 7)
        with pytest.raises(ValueError, match="length equal"):
            aio.set_attr("tag", [1, 2])
    finally:
        aio.close()
        ref.close()


# ---------------------------------------------------------------- misuse and errors


def test_gymnasium_misuse_errors() -> None:
    envs = AioVectorEnv([CASES["cartpole-box"]] * 2)
    envs.reset(seed=0)
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    with pytest.raises(NoAsyncCallError):
        envs.call_wait()
    envs.step_async(np.array([0, 1]))
    for misuse in (
        lambda: envs.step_async(np.array([0, 1])),
        lambda: envs.reset_async(),
        lambda: envs.call_async("render"),
        lambda: envs.set_attr("x", 1),
    ):
        with pytest.raises(AlreadyPendingCallError):
            misuse()
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    envs.step_wait()
    envs.close()
    envs.close()  # idempotent
    assert envs.closed
    for closed in (
        lambda: envs.reset(),
        lambda: envs.step(np.array([0, 1])),
        lambda: envs.step_wait(),
        lambda: envs.call("render"),
        lambda: envs.get_attr("spec"),
        lambda: envs.set_attr("x", 1),
    ):
        with pytest.raises(ClosedEnvironmentError):
            closed()


def test_step_wait_timeout(gate: Any) -> None:
    factory = functools.partial(make_probe, **gate.kwargs())
    envs = AioVectorEnv([factory] * 2)
    try:
        envs.reset(seed=0)
        envs.step_async(np.array([SLOW, 0]))
        marker = os.path.join(gate.markers, "started-0")
        deadline = time.monotonic() + HANG
        while not os.path.exists(marker):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        with pytest.raises(multiprocessing.TimeoutError, match="`step_wait` has timed out"):
            envs.step_wait(timeout=0.01)  # the gate is closed: it cannot finish
        with pytest.raises(NoAsyncCallError):
            envs.step_wait()
        gate.open()
        obs, *_ = envs.step(np.array([0, 0]))  # waits for the abandoned step, whose result is discarded
        assert obs[:, 1].tolist() == [2, 2]
    finally:
        envs.close()


def test_env_error_carries_the_remote_traceback() -> None:
    envs = AioVectorEnv([functools.partial(make_probe, fail_at=2)] * 2)
    try:
        envs.reset(seed=0)
        envs.step(np.array([0, 0]))
        with warnings.catch_warnings(record=True) as logged:
            warnings.simplefilter("always")
            with pytest.raises(aioenv.EnvError) as caught:
                envs.step(np.array([0, 0]))
        assert isinstance(caught.value, RuntimeError)  # ProbeEnv's own exception type
        assert len(logged) == 5  # logged as AsyncVectorEnv logs it: two lines per env, then one
        assert "Received the following error from Worker-0 - Shutting it down" in str(logged[0].message)
        assert "explode_on_purpose" in caught.value.remote_traceback
        assert "Remote traceback" in str(caught.value)
        envs.reset(seed=0)  # after a reset the envs work again
        envs.step(np.array([0, 0]))
    finally:
        envs.close()


def test_constructor_arguments() -> None:
    fns = [CASES["cartpole-box"]] * 3
    with pytest.raises(ValueError, match="worker"):
        AioVectorEnv(fns, worker=lambda *a: None)
    with pytest.raises(ValueError, match="max_concurrency"):
        AioVectorEnv(fns, max_concurrency=0)
    envs = AioVectorEnv(
        fns,
        shared_memory=False,
        copy=False,
        context="spawn",
        daemon=False,
        max_concurrency=1,
        autoreset_mode="SameStep",
    )
    try:
        assert envs.pool.num_workers == 1
        assert envs.autoreset_mode is AutoresetMode.SAME_STEP
        obs, _ = envs.reset(seed=1)
        assert obs.shape == (3, 4)
    finally:
        envs.close()
    single = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    batched = gym.spaces.Box(-np.inf, np.inf, (3, 4), np.float32)
    custom = AioVectorEnv(fns, observation_mode=(batched, single))
    try:
        assert custom.single_observation_space is single
        assert custom.observation_space is batched
        assert custom.reset(seed=0)[0].shape == (3, 4)
    finally:
        custom.close()


def test_close_leaves_no_worker() -> None:
    envs = AioVectorEnv([CASES["cartpole-box"]] * 3)
    coord = envs.pool.pool._runner
    assert coord is not None
    pids = [int(s.proc.pid) for s in coord.slots if s.proc is not None]
    envs.reset(seed=0)
    envs.step_async(np.zeros(3, np.int64))
    with pytest.warns(UserWarning, match="pending call to `step`"):
        envs.close()  # with a call pending: warns (as gymnasium), then closes
    envs.close()
    deadline = time.monotonic() + HANG
    while not all(process_gone(p) for p in pids):
        assert time.monotonic() < deadline, pids
        time.sleep(0.02)


# ---------------------------------------------------------------- wrappers


def without_wall_time(step: tuple[Any, ...]) -> tuple[Any, ...]:
    """RecordEpisodeStatistics' ``info["episode"]["t"]`` is wall-clock time: leave it out."""
    info = dict(step[-1])
    if "episode" in info:
        info["episode"] = {k: v for k, v in info["episode"].items() if k != "t"}
    return (*step[:-1], info)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_vector_wrappers_give_the_same_results(mode: AutoresetMode) -> None:
    """RecordEpisodeStatistics in every mode; NormalizeObservation on top where gymnasium allows it (NEXT_STEP)."""
    aio, ref = pair(CASES["cartpole-box"], mode)
    try:
        aio_w: VectorEnv = RecordEpisodeStatistics(aio)
        ref_w: VectorEnv = RecordEpisodeStatistics(ref)
        if mode == AutoresetMode.NEXT_STEP:
            aio_w, ref_w = NormalizeObservation(aio_w), NormalizeObservation(ref_w)
        episodes = 0
        same(aio_w.reset(seed=2), ref_w.reset(seed=2), "reset")
        ref.action_space.seed(9)
        for t in range(STEPS):
            action = ref.action_space.sample()
            got = aio_w.step(action)
            want = ref_w.step(action)
            same(without_wall_time(got), without_wall_time(want), f"step {t}")
            if "episode" in want[4]:
                episodes += int(want[4]["_episode"].sum())
            ended = np.logical_or(want[2], want[3])
            if mode == AutoresetMode.DISABLED and ended.any():
                same(
                    aio_w.reset(options={"reset_mask": ended.copy()}),
                    ref_w.reset(options={"reset_mask": ended.copy()}),
                    f"partial reset {t}",
                )
        assert episodes > 0
        if mode == AutoresetMode.NEXT_STEP:
            np.testing.assert_array_equal(getattr(aio_w, "obs_rms").mean, getattr(ref_w, "obs_rms").mean)  # noqa: B009
    finally:
        aio.close()
        ref.close()


# ---------------------------------------------------------------- the example


def test_cleanrl_style_example_runs() -> None:
    proc = run_example("cleanrl_style.py", "--total-steps", "1200", "--num-envs", "4", timeout=HANG * 4)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    returns = [line for line in proc.stdout.splitlines() if "episodic_return=" in line]
    assert returns, proc.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--num-envs", "0"], "--num-envs must be at least 1, got 0"),
        (["--elite-frac", "2"], "--elite-frac must be in (0, 1], got 2.0"),
        (["--noise", "-1"], "--noise must be >= 0, got -1.0"),
    ],
)
def test_cleanrl_style_example_refuses_bad_arguments(args: list[str], said: str) -> None:
    assert_example_refuses("cleanrl_style.py", args, said)


def test_thread_executor_overlaps_blocking_steps() -> None:
    """``executor="thread"``: the steps of envs that block (here: until 3 of them are inside ``step``
    at once) overlap even on one worker, where AsyncVectorEnv would need one process per env."""
    fns = [functools.partial(WaitEnv, ident=i, parties=3) for i in range(3)]
    envs = AioVectorEnv(fns, executor="thread", num_workers=1)
    try:
        envs.reset(seed=0)
        obs, _, _, _, info = envs.step(np.array([MEET, MEET, MEET]))
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 1])
        assert info["running"].max() == 3
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("env_fns", "said"),
    [
        (
            "CartPole-v1",
            r"got the string 'CartPole-v1': write AioVectorEnv\(\[lambda: gymnasium.make\('CartPole-v1'\)\]",
        ),
        (None, "takes a list of env factories .*, got NoneType"),
        ([gym.make, 4], r"env_fns\[1\] must be a callable that returns a gymnasium.Env, got int 4"),
    ],
)
def test_env_fns_that_are_no_factories_are_refused_before_any_worker_starts(env_fns: Any, said: str) -> None:
    before = children(os.getpid())
    with pytest.raises(TypeError, match=said):
        AioVectorEnv(env_fns)
    assert children(os.getpid()) == before

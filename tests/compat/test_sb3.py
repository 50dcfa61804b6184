"""``aioenv.compat.sb3.AioVecEnv`` against Stable-Baselines3's own ``SubprocVecEnv`` and ``DummyVecEnv``, side by
side (real workers, real SB3 processes): outputs and errors must agree.

Env factories are ``functools.partial`` of importable functions, so worker processes
unpickle them without importing this module (and with it SB3 and torch).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv

pytest.importorskip("stable_baselines3")

import stable_baselines3
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

from aioenv.compat.sb3 import AioVecEnv
from tests.envs.columns import make_columns
from tests.envs.dictenv import make_dict_env
from tests.envs.faulty import SLOW, make_probe
from tests.envs.sb3_spaces import make_echo_env
from tests.support.compare import assert_same as exactly
from tests.support.procs import HANG, children
from tests.support.records import record_reads
from tests.support.scripts import assert_example_refuses, run_example

#: VecEnv.has_attr, which AioVecEnv has on every release, came in stable-baselines3 2.6.
SB3_HAS_ATTR = "has_attr" in dir(VecEnv)
#: SubprocVecEnv refuses fewer actions than envs from stable-baselines3 2.8 on; before, it sends them to the first
#: envs and then waits for the others forever (aioenv refuses them on every release).
SB3_REFUSES_FEWER_ACTIONS = tuple(int(p) for p in stable_baselines3.__version__.split(".")[:2]) >= (2, 8)

pytestmark = pytest.mark.timeout(120)

# SubprocVecEnv starts its env processes with forkserver (its default here): with SB3 preloaded in the fork
# server, each env process starts in milliseconds instead of importing torch on its own.
multiprocessing.set_forkserver_preload(["stable_baselines3.common.vec_env.subproc_vec_env", "tests.envs.sb3_spaces"])


def cartpole(n: int, max_episode_steps: int = 12) -> list[Callable[[], gym.Env[Any, Any]]]:
    return [functools.partial(gym.make, "CartPole-v1", max_episode_steps=max_episode_steps) for _ in range(n)]


@pytest.fixture
def venv() -> Iterator[AioVecEnv]:
    env = AioVecEnv(cartpole(3), num_workers=2)
    yield env
    env.close()


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Recursive equality: arrays by value and dtype, dicts by keys, numbers by value."""
    if isinstance(a, dict):
        assert isinstance(b, dict), where
        assert sorted(a) == sorted(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)), where
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        b = np.asarray(b)
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def run_both(fns: list[Callable[[], Any]], steps: int, seed: int, **options: Any) -> None:
    """Same seeds and actions on AioVecEnv and DummyVecEnv: every output must agree."""
    ours, ref = AioVecEnv(fns, **options), DummyVecEnv(fns)
    try:
        assert ours.num_envs == ref.num_envs
        assert ours.observation_space == ref.observation_space
        assert ours.action_space == ref.action_space
        for env in (ours, ref):
            env.seed(seed)
            env.action_space.seed(seed)
        assert_same(ours.reset(), ref.reset(), "reset obs")
        assert_same(list(ours.reset_infos), list(ref.reset_infos), "reset_infos")
        ended = 0
        for t in range(steps):
            actions = np.array([ref.action_space.sample() for _ in range(ref.num_envs)])
            o1, r1, d1, i1 = ours.step(actions)
            o2, r2, d2, i2 = ref.step(actions)
            assert_same(o1, o2, f"step {t} obs")
            assert r1.dtype == np.float64  # SubprocVecEnv's; DummyVecEnv's are float32
            assert_same(r1.astype(np.float32), r2, f"step {t} rewards")
            assert_same(d1, d2, f"step {t} dones")
            assert isinstance(i1, list)
            assert all(isinstance(i, dict) for i in i1)
            assert_same(i1, i2, f"step {t} infos")
            assert_same(list(ours.reset_infos), list(ref.reset_infos), f"step {t} reset_infos")
            ended += int(d2.sum())
        assert ended > 0, "the trajectory should cross episode ends"
    finally:
        ours.close()
        ref.close()


def echo(n: int, **kwargs: Any) -> list[Callable[[], gym.Env[Any, Any]]]:
    return [functools.partial(make_echo_env, **kwargs) for _ in range(n)]


@contextlib.contextmanager
def side_by_side(fns: list[Callable[[], Any]], **options: Any) -> Iterator[tuple[AioVecEnv, SubprocVecEnv]]:
    """An AioVecEnv and a SubprocVecEnv (its default start method) of the same env factories."""
    ours = AioVecEnv(fns, **options)
    try:
        ref = SubprocVecEnv(fns)
        try:
            yield ours, ref
        finally:
            ref.close()
    finally:
        ours.close()


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call did: ``("ok", value, warnings)`` or ``("raises", type, message, warnings)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: tuple[Any, ...] = ("ok", call())
        except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
            result = ("raises", type(exc), str(exc))
    return (*result, [f"{w.category.__name__}: {w.message}" for w in caught])


def assert_same_outcome(ours: tuple[Any, ...], theirs: tuple[Any, ...], where: str) -> None:
    assert ours[0] == theirs[0], f"{where}: {ours} != {theirs}"
    if ours[0] == "ok":
        assert_same(ours[1], theirs[1], where)
        assert ours[2] == theirs[2], f"{where}: warnings {ours[2]} != {theirs[2]}"
    else:
        assert ours[1:] == theirs[1:], f"{where}: {ours} != {theirs}"


def assert_close(a: Any, b: Any, where: str = "") -> None:
    """Recursive closeness (VecNormalize's running statistics: float rounding aside)."""
    if isinstance(a, dict):
        assert isinstance(b, dict), where
        assert sorted(a) == sorted(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_close(a[k], b[k], f"{where}[{k!r}]")
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=where)


def test_trajectories_match_dummy_vec_env_cartpole() -> None:
    run_both(cartpole(3), steps=40, seed=11, num_workers=2)


def test_trajectories_match_dummy_vec_env_dict_obs() -> None:
    # Dict observations, infos of mixed types, episodes ending by termination and by truncation.
    fns = [functools.partial(make_dict_env) for _ in range(3)]
    run_both(fns, steps=30, seed=5, num_workers=2)


def test_numeric_infos_from_the_shared_rows_match_dummy_vec_envs_value_types_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # MuJoCo-like infos (numbers under the same keys every step, other kinds now and then; see tests.envs.columns):
    # each env's own dict, read back from the pool's info area where the worker could write it, is exactly
    # DummyVecEnv's, each value's type included (a Python float stays one, an np.float32 too)
    in_area = record_reads(monkeypatch).infos
    n, kinds = 4, [0] * 10 + [1, 2, 3, 4, 5, 6]
    fns = [functools.partial(make_columns) for _ in range(n)]
    ours, ref = AioVecEnv(fns, num_workers=2, executor="inline"), DummyVecEnv(fns)
    rng = np.random.default_rng(3)
    try:
        for env in (ours, ref):
            env.seed(5)
        exactly(ours.reset(), ref.reset(), "reset obs")
        exactly(list(ours.reset_infos), list(ref.reset_infos), "reset_infos")
        for t in range(40):
            actions = rng.choice(kinds, n) if t >= 2 else np.zeros(n, np.int64)
            o1, r1, d1, i1 = ours.step(actions)
            o2, r2, d2, i2 = ref.step(actions)
            exactly(o1, o2, f"step {t} obs")
            exactly(r1.astype(np.float32), r2, f"step {t} rewards")
            exactly(d1, d2, f"step {t} dones")
            exactly(i1, i2, f"step {t} infos of {actions.tolist()}")
            exactly(list(ours.reset_infos), list(ref.reset_infos), f"step {t} reset_infos")
    finally:
        ours.close()
        ref.close()
    assert len(in_area) > 20  # most steps' infos were in the shared rows (the first ones' planned the area)


def test_step_api_shapes_and_autoreset(venv: AioVecEnv) -> None:
    assert isinstance(venv, VecEnv)
    venv.seed(0)
    obs = venv.reset()
    assert obs.shape == (3, 4)
    assert obs.dtype == np.float32
    assert len(venv.reset_infos) == 3
    ended = 0
    for _ in range(13):  # max_episode_steps=12: every env's first episode ends
        venv.step_async(np.zeros(3, dtype=np.int64))
        obs, rewards, dones, infos = venv.step_wait()
        assert rewards.dtype == np.float64
        assert dones.dtype == np.bool_
        assert obs.shape == (3, 4)
        for i in range(3):
            assert "TimeLimit.truncated" in infos[i]
            if dones[i]:
                term_obs = infos[i]["terminal_observation"]
                assert term_obs.shape == (4,)
                assert not np.array_equal(term_obs, obs[i])
                assert isinstance(infos[i]["TimeLimit.truncated"], bool)
                ended += 1
            else:
                assert "terminal_observation" not in infos[i]
    assert ended >= 3


def test_seed_and_options_apply_at_next_reset_only(venv: AioVecEnv) -> None:
    assert venv.seed(3) == [3, 4, 5]
    first = venv.reset()
    unseeded = venv.reset()
    venv.seed(3)
    again = venv.reset()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, unseeded)
    assert all(a != b for a, b in zip(first[:, 0], first[1:, 0], strict=False))  # seed + i differ per env
    venv.set_options({"low": -0.001, "high": 0.001})
    narrow = venv.reset()
    assert np.abs(narrow).max() <= 0.001
    wide = venv.reset()  # options were used once
    assert np.abs(wide).max() > 0.001
    venv.set_options([{"low": -0.001, "high": 0.001}, {}, {"low": 0.3, "high": 0.31}])
    mixed = venv.reset()
    assert np.abs(mixed[0]).max() <= 0.001
    assert mixed[2].min() >= 0.3


def test_attributes_methods_and_wrappers(venv: AioVecEnv) -> None:
    # get_attr returns arbitrary (pickled) objects, looked up through wrappers.
    specs = venv.get_attr("spec")
    assert [s.id for s in specs] == ["CartPole-v1"] * 3
    assert venv.get_attr("gravity", indices=[2]) == [9.8]
    assert venv.get_attr("render_mode") == [None, None, None]
    venv.set_attr("custom", {"k": (1, 2)}, indices=[0, 2])
    assert venv.get_attr("custom", indices=[0, 2]) == [{"k": (1, 2)}] * 2
    with pytest.raises(AttributeError):
        venv.get_attr("custom", indices=1)
    assert venv.has_attr("gravity")
    assert not venv.has_attr("custom")
    assert not venv.has_attr("nope")
    spaces = venv.env_method("get_wrapper_attr", "observation_space", indices=[1])
    assert spaces == [venv.observation_space]
    obs_info = venv.env_method("reset", seed=9, indices=0)
    assert obs_info[0][0].shape == (4,)
    assert obs_info[0][1] == {}
    with pytest.raises(AttributeError):
        venv.env_method("no_such_method")
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True, True, True]
    assert venv.env_is_wrapped(gym.Wrapper, indices=[1]) == [True]  # subclasses count, as isinstance
    assert venv.env_is_wrapped(gym.wrappers.RecordEpisodeStatistics) == [False] * 3
    assert venv.env_is_wrapped(Monitor, indices=[0, 1]) == [False, False]


def test_render_and_get_images() -> None:
    fns = [functools.partial(make_probe, render_mode="rgb_array") for _ in range(2)]
    env = AioVecEnv(fns, num_workers=1, executor="inline")
    try:
        assert env.render_mode == "rgb_array"
        env.reset()
        images = env.get_images()
        assert len(images) == 2
        assert all(isinstance(im, np.ndarray) and im.shape == (5, 6, 3) for im in images)
        big = env.render()
        assert big is not None
        assert big.ndim == 3
        assert big.shape[2] == 3
    finally:
        env.close()


@pytest.mark.parametrize("source", ["cartpole", "dict-obs-dict-actions"])
def test_vec_wrappers_match_subproc_vec_env(source: str) -> None:
    """VecNormalize, VecFrameStack and VecMonitor on top of AioVecEnv give what they give on SubprocVecEnv:
    obs, rewards, dones, episode stats and the normalised, stacked terminal observations."""

    def stack(base: VecEnv) -> VecEnv:
        return VecMonitor(VecFrameStack(VecNormalize(base, gamma=0.9), n_stack=3))

    fns = cartpole(2) if source == "cartpole" else echo(2, action="dict", obs="dict")
    with side_by_side(fns, num_workers=1) as (aio, subproc):
        ours, ref = stack(aio), stack(subproc)
        for env in (ours, ref):
            env.seed(21)
        assert_close(ours.reset(), ref.reset(), "reset")
        space = ref.action_space
        space.seed(0)
        episodes = 0
        for t in range(30):
            actions = [space.sample() for _ in range(2)]
            batch = np.array(actions) if source == "cartpole" else actions  # SB3 passes Dict actions as a list
            o1, r1, d1, i1 = ours.step(batch)
            o2, r2, d2, i2 = ref.step(batch)
            assert_close(o1, o2, f"step {t} obs")
            assert_close(r1, r2, f"step {t} rewards")
            np.testing.assert_array_equal(d1, d2)
            for a, b in zip(i1, i2, strict=True):
                assert ("episode" in a) == ("episode" in b)
                if "episode" in a:
                    assert a["episode"]["r"] == pytest.approx(b["episode"]["r"], rel=1e-5)
                    assert a["episode"]["l"] == b["episode"]["l"]
                    assert_close(a["terminal_observation"], b["terminal_observation"], f"step {t} terminal obs")
                    episodes += 1
        assert episodes > 0


def test_ppo_learns_and_evaluates_on_aiovecenv() -> None:
    # make_vec_env wraps each env in SB3's Monitor: the usual way SubprocVecEnv is made.
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=AioVecEnv, vec_env_kwargs={"num_workers": 2})
    try:
        assert isinstance(env, AioVecEnv)
        assert env.env_is_wrapped(Monitor) == [True, True]
        model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=256)
        assert model.num_timesteps >= 256
        mean, std = evaluate_policy(model, env, n_eval_episodes=2, warn=False)
        assert mean > 0
        assert std >= 0
        assert len(env.get_attr("episode_returns")[0]) >= 1  # Monitor's own bookkeeping, read through get_attr
    finally:
        env.close()


def test_misuse_and_close() -> None:
    with pytest.raises(TypeError, match="autoreset_mode"):
        AioVecEnv(cartpole(1), autoreset_mode="next_step")
    env = AioVecEnv(cartpole(2), start_method="spawn", num_workers=1)
    env.reset()
    with pytest.raises(RuntimeError, match="step_wait"):
        env.step_wait()
    env.step_async(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="step_async"):
        env.step_async(np.zeros(2, dtype=np.int64))
    with pytest.raises(AttributeError, match=r"AioVecEnv has no 'processes' .* AioVecEnv.pool is the"):
        _ = env.processes  # SubprocVecEnv's own attributes have no meaning here
    assert not hasattr(env, "remotes")
    env.close()  # with a step pending: waited out
    env.close()  # idempotent
    assert env.closed
    calls: list[Callable[[], Any]] = [
        lambda: env.step(np.zeros(2, dtype=np.int64)),
        env.reset,
        lambda: env.get_attr("gravity"),
        lambda: env.env_method("render", indices=0),
        lambda: env.has_attr("gravity"),
        env.get_images,
    ]
    for call in calls:  # SubprocVecEnv raises OSError("handle is closed") here
        with pytest.raises(aioenv.PoolClosed, match="this AioVecEnv is closed"):
            call()


def test_example_sb3_ppo_runs() -> None:
    args = ["--timesteps", "512", "--num-envs", "2", "--eval-episodes", "1"]
    proc = run_example("sb3_ppo.py", *args, timeout=100)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("training PPO on 2 CartPole envs for 512 steps")
    assert "where they run: 2 envs " in proc.stdout  # "in this process (...)" or "on N inline worker(s)"
    assert "mean episode return" in proc.stdout


def test_example_sb3_ppo_refuses_a_bad_count() -> None:
    assert_example_refuses("sb3_ppo.py", ["--num-envs", "0"], "--num-envs must be at least 1, got 0")


def test_step_runs_in_this_thread_and_a_step_async_alone_returns_at_once(gate: Any) -> None:
    """Envs in a worker process: ``step()`` runs the whole step in the caller's thread (no hop to the loop thread
    and back); a ``step_async`` on its own returns while the envs step, and ``step_wait`` collects them."""
    env = AioVecEnv([functools.partial(make_probe, **gate.kwargs())] * 2, executor="inline", num_workers=1)
    try:
        env.seed(0)
        env.reset()
        obs, *_ = env.step(np.array([0, 0]))
        assert env.pool.runs_in_caller
        env.step_async(np.array([SLOW, 0]))  # env 0's step waits for the gate
        marker = os.path.join(gate.markers, "started-0")
        deadline = time.monotonic() + HANG
        while not os.path.exists(marker):  # the step runs while this thread goes on
            assert time.monotonic() < deadline, "the slow step never started"
            time.sleep(0.005)
        assert env.waiting
        assert not env.pool.runs_in_caller  # its reply comes while no call runs: the loop went back to its thread
        gate.open()
        after, *_ = env.step_wait()
        assert (after[:, 1] - obs[:, 1]).tolist() == [1, 1]
    finally:
        env.close()


@pytest.mark.parametrize("executor", ["inline", "in_process"])
def test_env_errors_surface_in_step_wait_and_reset_recovers(executor: str) -> None:
    """Whether the envs run in a worker process or in this one (either way step_async steps them at once, in the
    caller's thread), an env's error comes from step_wait, and nothing is left half done."""
    placement = {"num_workers": 1} if executor == "inline" else {}
    env = AioVecEnv(
        [functools.partial(make_probe, fail_at=2), functools.partial(make_probe)], executor=executor, **placement
    )
    try:
        assert env.pool.runs_in_caller
        env.reset()
        env.step(np.array([0, 0]))
        env.step_async(np.array([0, 0]))
        with pytest.raises(aioenv.EnvError, match="RuntimeError") as caught:
            env.step_wait()
        assert caught.value.env_id == 0
        assert not env.waiting
        with pytest.raises(aioenv.InvalidAction):
            env.step_async(np.array([0, 7]))  # out of Discrete(3): refused, nothing sent
        assert not env.waiting
        env.reset()  # a reset makes the failed env usable again
        obs, rewards, _, _ = env.step(np.array([1, 1]))
        assert obs.shape == (2, 4)
        assert rewards.tolist() == [1.5, 1.5]
        assert obs[:, 1].tolist() == [1, 1]  # each env took exactly one step since the reset
        # reset() while a step is pending waits it out first
        env.step_async(np.array([1, 1]))
        assert env.reset().shape == (2, 4)
        assert not env.waiting
    finally:
        env.close()


# ------------------------------------------------------------ no pickle on the socket


def _leftovers(env: AioVecEnv) -> list[str]:
    return sorted(n for n in os.listdir(env.pool.pool.private_dir) if n.startswith("compat-"))


def test_non_msgpack_values_and_exception_types_round_trip_through_files(venv: AioVecEnv) -> None:
    class Local:  # pickled by value (cloudpickle)
        def __init__(self, items: set[int]) -> None:
            self.items = items

    class Boom(Exception):
        pass

    def explode(message: str) -> None:
        raise Boom(message)

    spec = venv.env_method("get_wrapper_attr", "spec", indices=[0])[0]
    assert isinstance(spec, gym.envs.registration.EnvSpec)
    assert spec.id == "CartPole-v1"
    venv.set_attr("ordered", OrderedDict(b=1, a=(2, 3)), indices=[1])
    (ordered,) = venv.get_attr("ordered", indices=[1])
    assert type(ordered) is OrderedDict
    assert list(ordered.items()) == [("b", 1), ("a", (2, 3))]
    venv.set_attr("local", Local({1, 2}))
    got = venv.get_attr("local")
    assert all(type(v).__name__ == "Local" and v.items == {1, 2} for v in got)
    venv.set_attr("echo", lambda *a, **k: (a, k))  # a closure argument, and non-msgpack call arguments
    assert venv.env_method("echo", Local({3}), frozenset({1}), key=Fraction(4, 3), indices=[2])[0][1] == {
        "key": Fraction(4, 3)
    }
    assert venv.env_method("echo", 1, (2, "x"), k=None, indices=[0]) == [((1, (2, "x")), {"k": None})]
    venv.set_attr("explode", explode, indices=[1])
    with pytest.raises(Boom, match="kaboom"):
        venv.env_method("explode", "kaboom", indices=[1])
    venv.set_attr("lookup", {"a": 1}.__getitem__, indices=[0])
    with pytest.raises(KeyError, match="missing"):
        venv.env_method("lookup", "missing", indices=[0])
    assert _leftovers(venv) == []


def test_plain_values_travel_inline_and_no_file_is_left(venv: AioVecEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    from aioenv.compat import payloads as compat

    written: list[str] = []
    real_write = compat._write

    def spy(directory: str, prefix: str, obj: Any) -> str:
        name = real_write(directory, prefix, obj)
        written.append(name)
        return name

    monkeypatch.setattr(compat, "_write", spy)  # coordinator side only (workers are other processes)
    assert venv.get_attr("gravity") == [9.8] * 3
    assert venv.has_attr("gravity")
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 3
    venv.set_attr("plain", {"k": (1, 2), "a": np.arange(3)}, indices=[0])
    venv.env_method("get_wrapper_attr", "plain", indices=[0])
    assert written == []
    venv.set_attr("rich", Fraction(1, 3))
    assert len(written) == 1
    assert _leftovers(venv) == []
    with pytest.raises(AttributeError):
        venv.get_attr("missing")
    assert _leftovers(venv) == []


def test_worker_helper_refuses_payloads_outside_its_trusted_dir(tmp_path: Path) -> None:
    import cloudpickle

    from aioenv.compat.payloads import PayloadError, _helper

    trusted, outside = tmp_path / "trusted", tmp_path / "outside"
    trusted.mkdir()
    outside.mkdir()
    (outside / "evil.pkl").write_bytes(cloudpickle.dumps(((), {})))
    (trusted / "link.pkl").symlink_to(outside / "evil.pkl")
    env = gym.make("CartPole-v1")
    try:
        for crafted in (str(outside / "evil.pkl"), "../outside/evil.pkl", "link.pkl", "", "."):
            with pytest.raises(PayloadError, match="refusing"):
                _helper(env, "call", "reset", {"file": crafted}, trusted_dir=str(trusted))
            with pytest.raises(PayloadError, match="refusing"):
                _helper(env, "set", "x", {"file": crafted}, trusted_dir=str(trusted))
        # Inside the trusted directory: loaded, and the result comes back as a file there too.
        (trusted / "args.pkl").write_bytes(cloudpickle.dumps(((), {"seed": 1})))
        reply = _helper(env, "call", "reset", {"file": "args.pkl", "tag": "0123456789abcdef"}, trusted_dir=str(trusted))
        assert reply["ok"][0].shape == (4,)  # (obs, info) is msgpack: it comes back inline
        reply = _helper(
            env,
            "call",
            "get_wrapper_attr",
            {"args": ["spec"], "kw": {}, "tag": "0123456789abcdef"},
            trusted_dir=str(trusted),
        )
        name = reply["file"]  # an EnvSpec is not: pickled into a file of the trusted directory
        assert name.startswith("compat-res-0123456789abcdef-")
        assert (trusted / name).is_file()
        ok, spec = cloudpickle.loads((trusted / name).read_bytes())
        assert ok
        assert spec.id == "CartPole-v1"
    finally:
        env.close()


def test_worker_without_trusted_dir_accepts_and_returns_msgpack_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from aioenv.compat.payloads import TRUSTED_DIR_ENV, PayloadError, Transfer, _helper

    monkeypatch.delenv(TRUSTED_DIR_ENV, raising=False)
    env = gym.make("CartPole-v1")
    try:
        with pytest.raises(PayloadError, match="only msgpack values are supported"):
            _helper(env, "call", "reset", {"file": "args.pkl"})
        assert _helper(env, "get", "gravity", {}) == {"ok": 9.8}
        reply = _helper(env, "get", "spec", {})
        assert reply["exc"][:2] == ["builtins", "TypeError"]
        assert "only msgpack values" in reply["exc"][2]
        missing = _helper(env, "get", "nope", {})
        assert missing["exc"][:2] == ["builtins", "AttributeError"]
        with pytest.raises(AttributeError), Transfer(str(Path.cwd())) as transfer:
            transfer.decode([missing])  # a builtin exception type survives without pickle
    finally:
        env.close()


def test_coordinator_refuses_result_files_it_did_not_ask_for(tmp_path: Path) -> None:
    from aioenv.compat.payloads import PayloadError, Transfer

    with Transfer(str(tmp_path)) as transfer:
        for name in ("../x.pkl", "/etc/passwd", "compat-res-0000000000000000-x.pkl", 3):
            with pytest.raises(PayloadError):
                transfer.decode([{"file": name}])


def test_step_is_one_batched_call_not_one_per_env(venv: AioVecEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    def per_env(*_: Any, **__: Any) -> None:
        raise AssertionError("step_async must not dispatch per-env steps")

    monkeypatch.setattr(venv.pool.pool, "step_env", per_env)
    venv.reset()
    obs, rewards, _, infos = venv.step(np.array([0, 1, 0]))
    assert obs.shape == (3, 4)
    assert rewards.tolist() == [1.0] * 3
    assert len(infos) == 3


# ------------------------------------------------------------ side by side with SubprocVecEnv


def assert_same_step(ours: Any, ref: Any, where: str) -> None:
    """One step's ``(obs, rewards, dones, infos)`` of both envs agree."""
    (o1, r1, d1, i1), (o2, r2, d2, i2) = ours, ref
    assert_same(o1, o2, f"{where} obs")
    assert_same(r1, r2, f"{where} rewards")
    assert_same(d1, d2, f"{where} dones")
    assert_same(list(i1), list(i2), f"{where} infos")


@pytest.mark.parametrize("kind", ["dict", "tuple", "nested"])
def test_dict_and_tuple_actions_as_sb3_passes_them_match_subproc_vec_env(kind: str) -> None:
    """SB3 passes Dict and Tuple actions as a sequence of per-env values (``actions[i]`` for env ``i``): a list, or
    an object array; a Tuple action may be a list. Every env gets its own action: same outputs as SubprocVecEnv."""
    with side_by_side(echo(3, action=kind), num_workers=2) as (ours, ref):
        assert ours.action_space == ref.action_space
        for env in (ours, ref):
            env.seed(7)
        assert_same(ours.reset(), ref.reset(), "reset obs")
        space = ref.action_space
        space.seed(3)
        ended = 0
        for t in range(24):
            actions: Any = [space.sample() for _ in range(3)]
            if kind != "dict" and t % 2:
                actions[1] = list(actions[1])  # gymnasium's Tuple takes a list too
            if kind == "dict" and t % 2:
                actions = np.array(actions, dtype=object)  # shape (3,): one dict per row
            results = ours.step(actions), ref.step(actions)
            assert_same_step(*results, f"step {t}")
            assert_same(list(ours.reset_infos), list(ref.reset_infos), f"step {t} reset_infos")
            ended += int(results[1][2].sum())
        assert ended >= 3, "the trajectory should cross episode ends"


def test_bad_per_env_actions_name_the_env_and_lose_nothing() -> None:
    """A bad Dict/Tuple action is refused before anything is sent, naming the env, the space and what arrived;
    the envs then go on exactly as SubprocVecEnv's, which never saw it."""
    with side_by_side(echo(3, action="nested"), num_workers=2) as (ours, ref):
        for env in (ours, ref):
            env.seed(1)
        assert_same(ours.reset(), ref.reset(), "reset obs")
        space = ref.action_space
        space.seed(2)
        good = [space.sample() for _ in range(3)]
        force = good[0][1]["force"]
        flag = np.zeros(3, dtype=np.int8)
        out_of_bounds = {"force": force, "flag": np.array([0, 2, 1], np.int8)}
        bad: dict[str, tuple[int, Any, str, str]] = {  # the env that gets it, what is expected there, what arrived
            "not a tuple": (1, {"a": 1}, ": expected a tuple of 2 values of Tuple(Discrete(2), Dict(",
                            "got dict {'a': 1}"),
            "missing key": (2, (1, {"force": force}), " at action[1]: expected a dict with the keys ['flag', 'force']",
                            "got dict {'force': array(["),
            "out of bounds": (0, (1, out_of_bounds), " at action[1]['flag']: expected an action in MultiBinary(3)",
                              "got [0, 2, 1] (element (1,) is outside [0, 1])"),
            "wrong shape": (2, (0, {"force": np.zeros(3, np.float32), "flag": flag}),
                            " at action[1]['force']: expected a value of Box(-1.0, 1.0, (2,), float32)",
                            "got ndarray float32 (3,) array([0., 0., 0.], dtype=float32)"),
            "wrong type": (1, (1.5, {"force": force, "flag": flag}), " at action[0]: expected a value of Discrete(2)",
                           "got float 1.5"),
        }  # fmt: skip
        for case, (env_id, action, expected, got) in bad.items():
            actions = list(good)
            actions[env_id] = action
            with pytest.raises(aioenv.InvalidAction) as caught:
                ours.step_async(actions)
            message = str(caught.value)
            assert caught.value.env_id == env_id, case
            assert message.startswith(f"invalid action for env {env_id}{expected}"), message
            assert got in message, message
            assert not ours.waiting
        with pytest.raises(aioenv.InvalidAction, match=r"expected a sequence of 3 per-env actions, each in Tuple\("):
            ours.step_async({"a": good[0], "b": good[1], "c": good[2]})  # a batched form: SB3 never passes one
        for t in range(6):  # nothing was lost: both envs take the same steps from where they were
            actions = [space.sample() for _ in range(3)]
            assert_same_step(ours.step(actions), ref.step(actions), f"step {t}")
        short = [space.sample() for _ in range(2)]
        if SB3_REFUSES_FEWER_ACTIONS:
            theirs = outcome(lambda: ref.step_async(short))  # SubprocVecEnv: ValueError (after stepping envs 0 and 1)
            assert theirs[:2] == ("raises", ValueError)
        assert outcome(lambda: ours.step_async(short))[:2] == ("raises", ValueError)
        assert not ours.waiting


INDICES: list[Any] = [None, 0, -1, -3, [-1, 0], [2, 0, 2, 2], [], range(1, 3), np.array([2, 0]), True]
BAD_INDICES: dict[str, Any] = {  # what our message says about each
    "env index 3 is out of range: 3 envs, 0..2 (or -3..-1)": 3,
    "env index -4 is out of range": -4,
    f"an iterable of ints (as in SB3), got int64 {np.int64(1)!r}: pass int(i) or [i]": np.int64(1),  # (numpy 1: 1)
    "an env index must be an int, got float 1.0": [1.0],
    "got slice slice(0, 2, None)": slice(0, 2),
    "env index 5 is out of range": [0, 5],
}


def test_indices_resolve_as_in_subproc_vec_env() -> None:
    """``indices`` as SB3's ``_get_indices`` gives them: an int, a negative int, repeats (the env is called twice),
    an empty list, any iterable; a bad index raises the type of error SubprocVecEnv raises, naming it. Where
    SubprocVecEnv's env process dies instead (a missing attribute, a method that raises), the env's own exception, as
    DummyVecEnv raises it."""
    with side_by_side(echo(3, action="tuple", render_mode="ansi"), num_workers=2) as (ours, ref):
        for env in (ours, ref):
            env.seed(10)
            env.reset()  # ident = 10, 11, 12
        for k, indices in enumerate(INDICES + list(BAD_INDICES.values())):
            calls: dict[str, Callable[[VecEnv], Any]] = {
                "get_attr": lambda env, i=indices: env.get_attr("ident", indices=i),
                "set_attr": lambda env, i=indices, k=k: env.set_attr("tag", k, indices=i),
                "env_method": lambda env, i=indices: env.env_method("render", indices=i),  # counts its calls
                "env_is_wrapped": lambda env, i=indices: env.env_is_wrapped(gym.Wrapper, indices=i),
            }
            for name, call in calls.items():
                theirs, mine = outcome(lambda call=call: call(ref)), outcome(lambda call=call: call(ours))
                if k < len(INDICES):
                    assert_same_outcome(mine, theirs, f"{name}(indices={indices!r})")
                    continue
                assert mine[:2] == theirs[:2], (name, indices, mine, theirs)  # ("raises", IndexError or TypeError)
                said = list(BAD_INDICES)[k - len(INDICES)]
                assert said in mine[2], (name, indices, mine)
        dummy = DummyVecEnv(echo(3, action="tuple", render_mode="ansi"))  # where SubprocVecEnv's env process dies
        dummy_calls: dict[str, Callable[[VecEnv], Any]] = {
            "get_attr": lambda env: env.get_attr("nope", indices=-1),  # SB3 catches this AttributeError
            **({"has_attr": lambda env: env.has_attr("nope")} if SB3_HAS_ATTR else {}),
            "env_method": lambda env: env.env_method("nope", indices=[0]),
            "raising env_method": lambda env: env.env_method("step", "not an action", indices=1),
        }
        for name, call in dummy_calls.items():
            theirs = outcome(lambda call=call: call(dummy))
            assert_same_outcome(outcome(lambda call=call: call(ours)), theirs, name)
        dummy.close()
        assert ref.get_attr("renders") == [6, 3, 8]  # env 2 rendered three times for [2, 0, 2, 2]; none for a bad one
        assert ours.get_attr("renders") == ref.get_attr("renders")
        assert ours.get_attr("tag") == ref.get_attr("tag") == [8, 9, 8]  # the last good indices naming each env


def test_start_method_is_validated_as_subproc_vec_env_validates_it() -> None:
    for bad in ("bogus", 5):
        with pytest.raises(ValueError, match="cannot find context") as theirs:
            SubprocVecEnv(echo(1), start_method=bad)
        with pytest.raises(ValueError, match="cannot find context") as caught:
            AioVecEnv(echo(1), start_method=bad)
        assert str(caught.value) == str(theirs.value)
    with pytest.warns(UserWarning, match="ignores start_method='fork': aioenv never forks"):
        env = AioVecEnv(echo(1), start_method="fork")
    try:
        assert env.start_method == "fork"
        env.reset()
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["rgb_array", "human", "ansi", None])
def test_render_modes_match_subproc_vec_env(mode: str | None) -> None:
    """``render()``, ``render(mode)``, ``get_images()``, ``metadata`` and their warnings, in every render mode."""
    with side_by_side(echo(3, action="dict", render_mode=mode), num_workers=2) as (ours, ref):
        assert ours.render_mode == ref.render_mode == mode
        assert ours.metadata == ref.metadata
        for env in (ours, ref):
            env.seed(5)
            env.reset()
        calls: dict[str, Callable[[VecEnv], Any]] = {
            "render()": lambda env: env.render(),
            "get_images()": lambda env: env.get_images(),
            "render('rgb_array')": lambda env: env.render("rgb_array"),
            "render('ansi')": lambda env: env.render("ansi"),
        }
        if mode != "rgb_array":  # with rgb_array frames, render("human") opens an OpenCV window
            calls["render('human')"] = lambda env: env.render("human")
        for name, call in calls.items():
            theirs = outcome(lambda call=call: call(ref))
            assert_same_outcome(outcome(lambda call=call: call(ours)), theirs, name)
        if mode == "rgb_array":
            tiled = ours.render()
            assert tiled is not None
            assert tiled.shape == (8, 10, 3)  # 3 frames of (4, 5) tiled 2 x 2
        assert ours.get_attr("renders") == ref.get_attr("renders")


def test_mixed_render_modes_refused_as_sb3_refuses_them() -> None:
    fns = [functools.partial(make_echo_env, render_mode=mode) for mode in ("human", None)]
    with pytest.raises(AssertionError) as theirs:
        DummyVecEnv(fns)
    with pytest.raises(AssertionError) as caught:
        AioVecEnv(fns, num_workers=1)  # and its workers are gone (the autouse fixture checks)
    assert str(caught.value) == str(theirs.value)


# ------------------------------------------------------------ dtypes and a training run, as SubprocVecEnv's


def assert_same_types(a: Any, b: Any, where: str) -> None:
    """Recursive: the same type at every level (an array's dtype and shape too), and the same values."""
    if isinstance(b, dict):
        assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in b:
            assert_same_types(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(b, list | tuple):
        assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_types(x, y, f"{where}[{i}]")
    elif isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray), f"{where}: {type(a).__name__} is no array"
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_outputs_have_subproc_vec_env_dtypes_and_values(env_id: str) -> None:
    """Obs, rewards (float64: SubprocVecEnv stacks the envs' Python floats), dones (bool), each info's values
    and ``terminal_observation``, and ``reset_infos``: the same types, dtypes and values as SubprocVecEnv's, across
    episode ends. (SubprocVecEnv's infos and ``reset_infos`` are tuples, AioVecEnv's lists, as ``VecEnv`` types
    them and ``DummyVecEnv`` makes them.)"""
    fns = [functools.partial(gym.make, env_id, max_episode_steps=9) for _ in range(3)]
    with side_by_side(fns, num_workers=2) as (ours, ref):
        for env in (ours, ref):
            env.seed(3)
        assert_same_types(ours.reset(), ref.reset(), "reset obs")
        assert_same_types(list(ours.reset_infos), list(ref.reset_infos), "reset_infos")
        space = ref.action_space
        space.seed(4)
        ended = 0
        for t in range(20):
            actions = np.array([space.sample() for _ in range(3)])
            (o1, r1, d1, i1), (o2, r2, d2, i2) = ours.step(actions), ref.step(actions)
            assert r2.dtype == np.float64
            assert d2.dtype == np.bool_
            for name, a, b in [("obs", o1, o2), ("rewards", r1, r2), ("dones", d1, d2)]:
                assert_same_types(a, b, f"step {t} {name}")
            assert_same_types(list(i1), list(i2), f"step {t} infos")
            assert_same_types(list(ours.reset_infos), list(ref.reset_infos), f"step {t} reset_infos")
            ended += int(d2.sum())
        assert ended >= 6


def train_ppo_on_pendulum(vec_env_cls: type[VecEnv]) -> dict[str, Any]:
    """A short seeded PPO run on Pendulum under VecNormalize (its usual setting): the policy's parameters."""
    env = VecNormalize(
        make_vec_env("Pendulum-v1", n_envs=2, seed=0, vec_env_cls=vec_env_cls, env_kwargs={"max_episode_steps": 20})
    )
    try:
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=0, device="cpu")
        model.learn(total_timesteps=192)
        return {name: value.clone() for name, value in model.policy.state_dict().items()}
    finally:
        env.close()


def test_ppo_on_pendulum_learns_what_it_learns_on_subproc_vec_env_bit_for_bit() -> None:
    """VecNormalize divides the rewards (and sums them into its running returns) in float64: float32 rewards,
    which Pendulum's float64 costs do not fit, would give other statistics and another policy."""
    ours, theirs = train_ppo_on_pendulum(AioVecEnv), train_ppo_on_pendulum(SubprocVecEnv)
    assert list(ours) == list(theirs)
    different = [name for name in theirs if not np.array_equal(ours[name].numpy(), theirs[name].numpy())]
    assert not different, f"parameters that differ from SubprocVecEnv's run: {different}"


@pytest.mark.parametrize(
    ("env_fns", "said"),
    [
        ("CartPole-v1", r"got the string 'CartPole-v1': write AioVecEnv\(\[lambda: gymnasium.make\('CartPole-v1'\)\]"),
        (3, "takes a list of env factories .*, got int"),
        ([gym.make, "CartPole-v1"], r"env_fns\[1\] must be a callable that returns a gymnasium.Env, got str"),
    ],
)
def test_env_fns_that_are_no_factories_are_refused_before_any_worker_starts(env_fns: Any, said: str) -> None:
    """An env id where the factories go (``AioVecEnv("CartPole-v1", 8)``) used to start a worker and an env per
    character, each failing, or to blame the start method (``cannot find context for 8``)."""
    before = children(os.getpid())
    with pytest.raises(TypeError, match=said):
        AioVecEnv(env_fns, 8 if isinstance(env_fns, str) else None)
    assert children(os.getpid()) == before

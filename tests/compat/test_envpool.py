"""``aioenv.compat.envpool`` side by side with the real EnvPool (``envpool`` 1.2.5, C++ CartPole/Pendulum).

Each behaviour runs on both: the same calls, then the same layout (types, shapes, dtypes, info keys),
the same row bookkeeping (env ids, ``elapsed_step``, rewards, flags) and the same errors; where aioenv
differs on purpose (docs/migrating.md, "From EnvPool") the test shows what each does. Observation values
differ (EnvPool's C++ CartPole draws its first states with its own RNG), so values are compared against
gymnasium's own env instead.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import signal
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
import aioenv.compat.envpool as envpool
from tests.support.scripts import assert_example_refuses, run_example, run_python

pytestmark = [
    pytest.mark.timeout(120),
    # EnvPool's own spaces: gymnasium warns while EnvPool builds its float32 Box from float64 bounds.
    pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning"),
]


@pytest.fixture(scope="module")
def real() -> ModuleType:
    """The real EnvPool (the ``test`` extra installs it)."""
    try:
        return importlib.import_module("envpool")
    except ImportError as exc:  # pragma: no cover - a broken test install
        pytest.fail(f"the side-by-side tests need the real EnvPool: pip install envpool==1.2.5 ({exc})")


@contextlib.contextmanager
def both(real: ModuleType, task: str = "CartPole-v1", env_type: str = "gymnasium", **kw: Any) -> Iterator[Any]:
    """``(EnvPool's pool, aioenv's pool)`` made with the same arguments; both closed after."""
    theirs = real.make(task, env_type, **kw)
    ours = envpool.make(task, env_type, **kw)
    try:
        yield theirs, ours
    finally:
        ours.close()
        theirs.close()


def layout(x: Any) -> Any:
    """What a result looks like, values aside: types, namedtuple fields, array shapes and dtypes, dict keys."""
    if isinstance(x, dict):
        return {k: layout(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return (type(x).__name__, getattr(x, "_fields", None), [layout(v) for v in x])
    if isinstance(x, np.ndarray):
        return ("ndarray", x.shape, x.dtype.str)
    return type(x).__name__


def rows(out: Any) -> list[tuple[int, int, float, bool, bool]]:
    """Each row's ``(env_id, elapsed_step, reward, terminated, truncated)`` of a gymnasium-style 5-tuple."""
    _, rew, term, trunc, info = out
    return list(
        zip(
            info["env_id"].tolist(),
            info["elapsed_step"].tolist(),
            rew.tolist(),
            term.tolist(),
            trunc.tolist(),
            strict=True,
        )
    )


def error_of(fn: Any) -> tuple[type[BaseException], str] | None:
    """``(type, message)`` of what ``fn()`` raised, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - any error, to compare EnvPool's with aioenv's
        return type(exc), str(exc)
    return None


def envpool_apart(*lines: str, make: str = "num_envs=4, seed=0") -> tuple[int, str]:
    """Run ``lines`` after ``env = envpool.make('CartPole-v1', 'gymnasium', MAKE)`` in a process of their own:
    ``(exit code, what it printed)``. For calls whose outcome in EnvPool's C++ is undefined (one env stepped
    by two of its threads at once): a crash there fails no test process."""
    code = "\n".join(
        [
            "import warnings; warnings.simplefilter('ignore')",
            "import envpool, numpy as np",
            f"env = envpool.make('CartPole-v1', 'gymnasium', {make})",
            *lines,
        ]
    )
    proc = run_python("-c", code, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the documented async loop


def documented_loop(env: Any, rounds: int, batch: int, num_envs: int = 8) -> tuple[list[Any], set[int], int]:
    """EnvPool's documented loop with action 1 (CartPole episodes end every ~10 steps). Checks EnvPool's row
    bookkeeping on every row; returns the first ``rounds`` rounds' layouts, the env ids seen and how many
    episodes ended. It goes on past ``rounds`` (up to 100 times as many) until every env was seen: which rows
    finish first is the scheduler's to decide, and on a loaded machine one worker can answer every round of
    ``rounds`` before the other is scheduled; no env may wait for ever."""
    env.async_reset()
    layouts, seen, ended = [], set(), 0
    last: dict[int, tuple[int, bool]] = {}  # env id -> (elapsed_step, episode ended)
    for turn in range(rounds * 100):
        if turn >= rounds and len(seen) == num_envs:
            break
        out = env.recv()
        if turn < rounds:
            layouts.append(layout(out))
        ids = out[4]["env_id"]
        assert len(set(ids.tolist())) == batch
        for env_id, elapsed, rew, term, trunc in rows(out):
            prev = last.get(env_id)
            if prev is None or prev[1]:  # the first row of an env, or the row after its episode ended
                assert (elapsed, rew, term, trunc) == (0, 0.0, False, False)
            else:
                assert (elapsed, rew) == (prev[0] + 1, 1.0)
            last[env_id] = (elapsed, term or trunc)
            ended += term or trunc
        seen.update(ids.tolist())
        env.send(np.ones(len(ids), dtype=np.int64), ids)
    return layouts, seen, ended


def test_documented_async_loop_matches_envpool(real: ModuleType) -> None:
    with both(real, num_envs=8, batch_size=4, seed=0, num_threads=2) as (theirs, ours):
        their_layouts, their_seen, their_ended = documented_loop(theirs, 40, 4)
        our_layouts, our_seen, our_ended = documented_loop(ours, 40, 4)
    assert our_layouts == their_layouts  # obs (4, 4) float32, rew float32, flags bool, the same info keys
    assert our_layouts[0][2][4] == {
        "env_id": ("ndarray", (4,), "<i4"),
        "players": {"env_id": ("ndarray", (4,), "<i4")},
        "elapsed_step": ("ndarray", (4,), "<i4"),
    }
    assert their_seen == our_seen == set(range(8))
    assert their_ended > 0
    assert our_ended > 0


def test_async_step_and_reset_are_send_then_recv(real: ModuleType) -> None:
    """EnvPool: ``step(a, env_id)`` == ``send(a, env_id); return recv()``; ``reset`` likewise: in async mode the
    first ``batch_size`` rows to finish, which are the rows that were ready before the call."""
    kw: dict[str, Any] = {"num_envs": 4, "batch_size": 2, "num_threads": 1}
    for env in (real.make("CartPole-v1", "gymnasium", **kw), envpool.make("CartPole-v1", "gymnasium", **kw)):
        try:
            env.async_reset()
            first = env.recv()[4]["env_id"]
            stepped = env.step(np.ones(2, dtype=np.int64), first)
            assert sorted(stepped[4]["env_id"].tolist() + first.tolist()) == [0, 1, 2, 3]  # the other resets
            assert stepped[4]["elapsed_step"].tolist() == [0, 0]
            after = env.recv()
            assert sorted(after[4]["env_id"].tolist()) == sorted(first.tolist())
            assert after[4]["elapsed_step"].tolist() == [1, 1]
            env.send(np.ones(2, dtype=np.int64), after[4]["env_id"])
            env.recv()
            obs, info = env.reset()  # every env resets; batch_size rows come back, the rest stay queued
            assert obs.shape == (2, 4)
            assert info["elapsed_step"].tolist() == [0, 0]
            rest = env.recv()
            assert sorted(info["env_id"].tolist() + rest[4]["env_id"].tolist()) == [0, 1, 2, 3]
        finally:
            env.close()


def test_recv_that_could_never_return_is_an_error() -> None:
    """Async mode, fewer than ``batch_size`` requests in flight: EnvPool's ``recv`` waits forever (its C++ queue
    blocks until ``batch_size`` envs finish; not run here, it would hang the test); aioenv says so."""
    env = envpool.make("CartPole-v1", num_envs=4, batch_size=2, seed=0)
    try:
        env.async_reset()
        env.recv()
        env.recv()
        env.send(np.ones(1, dtype=np.int64), np.array([0]))
        with pytest.raises(aioenv.UsageError, match=r"CartPole-v1: recv\(\) returns batch_size=2 rows, but only 1"):
            env.recv()
        env.send(np.ones(1, dtype=np.int64), np.array([3]))
        assert sorted(env.recv()[4]["env_id"].tolist()) == [0, 3]  # nothing was lost
    finally:
        env.close()


def test_sync_mode_rows_in_the_order_sent(real: ModuleType) -> None:
    with both(real, num_envs=4, seed=0) as (theirs, ours):
        for env in (theirs, ours):
            env.reset()
            assert rows(env.step(np.array([1, 0], np.int32), np.array([3, 1], np.int32))) == [
                (3, 1, 1.0, False, False),
                (1, 1, 1.0, False, False),
            ]
            env.send(np.array([1, 0], np.int32), np.array([2, 0], np.int32))
            assert env.recv()[4]["env_id"].tolist() == [2, 0]
            _, info = env.reset(np.array([3, 1], np.int32))
            assert info["env_id"].tolist() == [3, 1]
            assert info["elapsed_step"].tolist() == [0, 0]
        empty_theirs, empty_ours = theirs.recv(), ours.recv()  # nothing sent: an empty batch
        assert layout(empty_ours) == layout(empty_theirs)
        assert empty_ours[0].shape == (0, 4)


def test_sync_mode_two_sends_before_one_recv() -> None:
    """aioenv returns both envs in the order sent (EnvPool 1.2.5 returns env 0 twice here, a bug of its own)."""
    env = envpool.make("CartPole-v1", num_envs=4, seed=0)
    try:
        env.reset()
        env.send(np.array([1]), np.array([2]))
        env.send(np.array([1]), np.array([0]))
        assert rows(env.recv()) == [(2, 1, 1.0, False, False), (0, 1, 1.0, False, False)]
    finally:
        env.close()


def test_next_step_autoreset_matches_envpool(real: ModuleType) -> None:
    """EnvPool's documented table: max_episode_steps=3, five steps."""
    with both(real, num_envs=1, seed=0, max_episode_steps=3) as (theirs, ours):
        got = []
        for env in (theirs, ours):
            env.reset()
            got.append([rows(env.step(np.zeros(1, np.int32)))[0] for _ in range(5)])
    assert (
        got[0]
        == got[1]
        == [
            (0, 1, 1.0, False, False),
            (0, 2, 1.0, False, False),
            (0, 3, 1.0, False, True),
            (0, 0, 0.0, False, False),
            (0, 1, 1.0, False, False),
        ]
    )


# ---------------------------------------------------------------- env types


@pytest.mark.parametrize("env_type", ["gym", "gymnasium"])
def test_gym_and_gymnasium_give_the_same_5_tuple(real: ModuleType, env_type: str) -> None:
    with both(real, env_type=env_type, num_envs=2, seed=0) as (theirs, ours):
        assert layout(ours.reset()) == layout(theirs.reset())
        action = np.array([1, 0], np.int32)
        assert layout(ours.step(action)) == layout(theirs.step(action))
        for env in (theirs, ours):
            assert isinstance(env, gym.vector.VectorEnv)
            assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
            assert env.observation_space == env.single_observation_space == gym.make("CartPole-v1").observation_space
            assert env.action_space == env.single_action_space == gym.spaces.Discrete(2)
            assert (len(env), env.num_envs, env.is_async) == (2, 2, False)
            assert env.all_env_ids.tolist() == [0, 1]
            assert env.all_env_ids.dtype == np.int32


def test_gymnasium_vector_wrappers_take_both(real: ModuleType) -> None:
    with both(real, num_envs=2, seed=0, max_episode_steps=3) as (theirs, ours):
        lengths = []
        for env in (theirs, ours):
            wrapped = gym.wrappers.vector.RecordEpisodeStatistics(env)
            wrapped.reset()
            for _ in range(3):
                *_, info = wrapped.step(np.ones(2, np.int32))
            lengths.append(info["episode"]["l"].tolist())
    assert lengths == [[3, 3], [3, 3]]


def test_gymnasium_pool_is_a_gymnasium_env_as_envpools(real: ModuleType) -> None:
    """EnvPool's gymnasium pool is a ``gymnasium.Env`` as well as a ``VectorEnv``: scripts wrap it in
    ``gymnasium.Wrapper`` (EnvPool's CleanRL example does), which takes only a ``gymnasium.Env``."""
    with both(real, num_envs=2, seed=0) as (theirs, ours):
        for env in (theirs, ours):
            assert isinstance(env, gym.Env)
            assert isinstance(env, gym.vector.VectorEnv)
            wrapped = gym.Wrapper(env)
            obs, _ = wrapped.reset()
            assert obs.shape == (2, 4)
            assert wrapped.action_space == env.action_space


def test_dm_timestep_matches_envpool(real: ModuleType) -> None:
    import dm_env

    with both(real, env_type="dm", num_envs=2, seed=0, max_episode_steps=3) as (theirs, ours):
        assert isinstance(theirs, dm_env.Environment)
        assert isinstance(ours, dm_env.Environment)
        assert isinstance(ours, envpool.DMEnvPool)
        steps = []
        for env in (theirs, ours):
            first = env.reset()
            got = [first] + [env.step(np.array([0, 1], np.int32)) for _ in range(4)]
            steps.append(got)
        for t, o in zip(*steps, strict=True):
            assert layout(o) == layout(
                t
            )  # TimeStep(step_type, reward, discount, observation=State(env_id, players, obs))
            for field in ("step_type", "reward", "discount"):
                np.testing.assert_array_equal(getattr(o, field), getattr(t, field))
            np.testing.assert_array_equal(o.observation.env_id, t.observation.env_id)
            np.testing.assert_array_equal(o.observation.players.env_id, [0, 1])
        assert [ts.step_type.tolist() for ts in steps[1]] == [[0, 0], [1, 1], [1, 1], [2, 2], [0, 0]]
        assert [ts.discount.tolist() for ts in steps[1]] == [[1, 1], [1, 1], [1, 1], [0, 0], [1, 1]]
        assert steps[1][0].first().all()
        assert steps[1][3].last().all()
        for name in ("observation_spec", "action_spec", "reward_spec", "discount_spec"):
            assert repr(getattr(ours, name)()).replace("int64", "int32") == repr(getattr(theirs, name)())


def test_dm_dict_observation_gives_one_field_per_key() -> None:
    env = envpool.make_dm("tests.envs.dictenv:make_dict_env", num_envs=2, batch_size=1, seed=0)
    try:
        ts = env.reset(np.array([1]))
        assert ts.observation._fields == ("env_id", "players", "count", "flag", "pos")  # gymnasium's Dict order
        assert ts.observation.pos.shape == (1, 3)
        assert ts.observation.env_id.tolist() == [1]
        assert env.observation_spec()._fields == ts.observation._fields
        assert env.action_spec().num_values == 3
    finally:
        env.close()


def test_dm_without_dm_env_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['dm_env'] = None\n"  # Python's own way to make an import fail
        "import aioenv.compat.envpool as envpool\n"
        "envpool.make('CartPole-v1', 'gymnasium').close()\n"  # the gymnasium pool needs no dm-env
        "envpool.make('CartPole-v1', 'dm')\n"
    )
    proc = run_python("-c", code, timeout=60)
    assert proc.returncode == 1
    assert "ImportError: aioenv.compat.envpool: env_type='dm'" in proc.stderr
    assert 'pip install "aioenv[dm]"' in proc.stderr


# ---------------------------------------------------------------- make, make_spec, config


def test_make_spec_matches_envpool(real: ModuleType) -> None:
    kw: dict[str, Any] = {"num_envs": 3, "batch_size": 2, "seed": 1, "max_episode_steps": 9}
    theirs, ours = real.make_spec("CartPole-v1", **kw), envpool.make_spec("CartPole-v1", **kw)
    assert ours.config._fields == theirs.config._fields
    assert ours.config._replace(base_path="") == theirs.config._replace(base_path="")
    assert (ours.config.num_envs, ours.config.max_episode_steps, ours.reward_threshold) == (3, 9, 475.0)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space == ours.gymnasium_action_space
    assert repr(ours.observation_spec()) == repr(theirs.observation_spec())
    for task in ("Pendulum-v1", "CartPole-v1"):  # defaults: batch_size = num_envs, the task's own time limit
        t, o = real.make_spec(task, num_envs=2), envpool.make_spec(task, num_envs=2)
        assert (o.config.batch_size, o.config.max_episode_steps) == (t.config.batch_size, t.config.max_episode_steps)
        assert o.reward_threshold == t.reward_threshold
        assert o.action_space == t.action_space
    listed = set(real.list_all_envs()) & set(envpool.list_all_envs())
    assert {"CartPole-v1", "Pendulum-v1"} <= listed


def test_env_config_and_attributes_match_envpool(real: ModuleType) -> None:
    with both(real, num_envs=3, batch_size=2, seed=[5, 6, 7]) as (theirs, ours):
        assert {**ours.config, "base_path": ""} == {**theirs.config, "base_path": ""}
        assert ours.config["env_seed"] == [5, 6, 7]
        assert ours.config["seed"] == 0
        assert ours.is_async
        assert theirs.is_async
        for env in (theirs, ours):
            with pytest.warns(UserWarning, match="The `seed` function in envpool is abandoned"):
                env.seed(3)
            with pytest.raises(RuntimeError, match="XLA"):
                env.xla()
        assert "CartPole-v1" in repr(ours)
    assert ours.closed
    ours.close()  # idempotent


def test_seed_rule_matches_envpool(real: ModuleType) -> None:
    """An int seed gives env i the seed seed + i, as a list or ``env_seed`` does, on both; aioenv's values are
    gymnasium's own CartPole's (EnvPool's C++ CartPole draws other first states)."""
    for lib in (real, envpool):
        first = []
        for kw in ({"seed": 10}, {"seed": [10, 11, 12]}, {"env_seed": [10, 11, 12]}):
            env = lib.make("CartPole-v1", "gymnasium", num_envs=3, **kw)
            first.append(env.reset()[0])
            env.close()
        np.testing.assert_array_equal(first[0], first[1])
        np.testing.assert_array_equal(first[0], first[2])
    for i in range(3):
        np.testing.assert_array_equal(first[0][i], gym.make("CartPole-v1").reset(seed=10 + i)[0])


def make_error(lib: Any, **kw: Any) -> tuple[type[BaseException], str] | None:
    return error_of(lambda: lib.make_spec("CartPole-v1", **kw))


def test_option_errors_side_by_side(real: ModuleType) -> None:
    """Where EnvPool asserts, aioenv raises ValueError naming the task, the option and the value."""
    cases = {
        "num_envs": ({"num_envs": 0}, r"CartPole-v1: num_envs must be an int >= 1, got 0"),
        "batch_size": ({"num_envs": 2, "batch_size": 3}, r"CartPole-v1: batch_size=3 exceeds num_envs=2"),
        "seed list": ({"num_envs": 2, "seed": [1]}, r"seed has 1 seeds for num_envs=2"),
        "both seeds": ({"num_envs": 2, "seed": [1, 2], "env_seed": [3, 4]}, r"either seed .* or env_seed, not both"),
    }
    for kw, message in cases.values():
        theirs, ours = make_error(real, **kw), make_error(envpool, **kw)
        assert theirs is not None
        assert theirs[0] is AssertionError
        assert ours is not None
        assert ours[0] is ValueError
        assert re.search(message, ours[1]), ours[1]
    theirs, ours = (
        error_of(lambda: real.make("CartPole-v1", "foo")),
        error_of(lambda: envpool.make("CartPole-v1", "foo")),
    )
    assert theirs == (AssertionError, "env_type should be one of 'dm', 'gym', or 'gymnasium'.")
    assert ours == (ValueError, "CartPole-v1: env_type should be one of 'dm', 'gym', or 'gymnasium', got 'foo'")
    for lib in (real, envpool):
        with pytest.raises(ValueError, match="always returns an info dictionary after resets"):
            lib.make("CartPole-v1", "gymnasium", gym_reset_return_info=False)
    assert error_of(lambda: real.make_spec("Nope-v0"))[0] is KeyError  # type: ignore[index]
    with pytest.raises(gym.error.NameNotFound, match="Environment `Nope` doesn't exist"):
        envpool.make_spec("Nope-v0")


def test_options_envpool_takes_that_aioenv_refuses_or_ignores(real: ModuleType) -> None:
    for kw in ({"max_num_players": 2}, {"seed": -1}, {"thread_affinity_offset": 0}, {"render_width": 64}):
        assert make_error(real, **kw) is None  # EnvPool takes them all
    assert make_error(envpool, max_num_players=2) == (
        ValueError,
        "CartPole-v1: aioenv.compat.envpool runs single-player envs only (max_num_players=1), got 2",
    )
    assert make_error(envpool, seed=-1)[1] == (  # type: ignore[index]
        "CartPole-v1: seed must hold ints >= 0 (gymnasium seeds are non-negative), got -1"
    )
    with pytest.raises(ValueError, match="CartPole-v1: render_width is not supported"):
        envpool.make_spec("CartPole-v1", render_width=64)
    assert make_error(real, render_mode="human") is None
    with pytest.raises(ValueError, match="render_mode must be None or 'rgb_array'"):
        envpool.make_spec("CartPole-v1", render_mode="human")
    assert hasattr(real, "register")
    assert not hasattr(envpool, "register")  # gymnasium.register, or "pkg.module:factory"
    with pytest.warns(UserWarning, match="CartPole-v1: thread_affinity_offset=0 is ignored"):
        envpool.make_spec("CartPole-v1", thread_affinity_offset=0)
    # A keyword EnvPool does not know: its TypeError; aioenv hands it to gymnasium.make, whose error comes back.
    assert make_error(real, foo=1)[0] is TypeError  # type: ignore[index]
    with pytest.raises(aioenv.EnvError, match="unexpected keyword argument 'foo'"):
        envpool.make("CartPole-v1", num_envs=1, foo=1)


# ---------------------------------------------------------------- actions in, errors out


def test_actions_both_accept(real: ModuleType) -> None:
    accepted = {
        "int32": (np.ones(4, np.int32), None),
        "int64": (np.ones(4, np.int64), None),
        "integral float64": (np.ones(4), None),
        "bool": (np.ones(4, bool), None),
        "env_id subset": (np.array([1, 0], np.int32), np.array([3, 1], np.int32)),
        "dict with env_id": ({"action": np.array([1, 0], np.int32), "env_id": np.array([3, 1], np.int32)}, None),
        "dict and env_id argument": ({"action": np.array([1, 0], np.int32)}, np.array([2, 0], np.int32)),
        "dict with players": (
            {
                "action": np.ones(2, np.int32),
                "env_id": np.array([0, 1], np.int32),
                "players.env_id": np.array([0, 1], np.int32),
            },
            None,
        ),
    }
    ours = envpool.make("CartPole-v1", num_envs=4, seed=0)
    try:
        ours.reset()
        for name, (action, env_id) in accepted.items():
            theirs = real.make("CartPole-v1", "gymnasium", num_envs=4, seed=0)  # EnvPool checks dtypes once only
            theirs.reset()
            expected = theirs.step(action, env_id)
            got = ours.step(action, env_id)
            assert layout(got) == layout(expected), name
            assert got[4]["env_id"].tolist() == expected[4]["env_id"].tolist(), name
            theirs.close()
    finally:
        ours.close()


def test_actions_only_aioenv_accepts(real: ModuleType) -> None:
    """Inputs EnvPool fails on with an AttributeError or a dtype error; aioenv takes them as meant."""
    lenient = {
        "list": ([1, 1, 1, 1], None, AttributeError),
        "python int, one env": (1, np.array([2]), AttributeError),
        "env_id list": (np.array([1, 0], np.int32), [3, 1], AttributeError),
        "numpy int64 scalar, one env": (np.int64(1), np.array([2], np.int32), RuntimeError),
        "dict of int64": ({"action": np.array([1, 0]), "env_id": np.array([3, 1])}, None, RuntimeError),
    }
    ours = envpool.make("CartPole-v1", num_envs=4, seed=0)
    try:
        ours.reset()
        for name, (action, env_id, their_error) in lenient.items():
            theirs = real.make("CartPole-v1", "gymnasium", num_envs=4, seed=0)
            theirs.reset()
            assert error_of(lambda a=action, e=env_id, t=theirs: t.step(a, e))[0] is their_error, name  # type: ignore[index]
            theirs.close()
            expected = [3, 1] if name.startswith(("env_id", "dict")) else [2] if "one env" in name else [0, 1, 2, 3]
            assert ours.step(action, env_id)[4]["env_id"].tolist() == expected, name
    finally:
        ours.close()


def test_bad_actions_are_clear_errors_where_envpool_guesses(real: ModuleType) -> None:
    """EnvPool takes these silently (out of range, extra actions dropped, a repeated env stepped twice, 0.7
    truncated to 0); aioenv refuses them before anything is sent, naming task, env, space and value."""
    refused = {
        "out of range": (
            np.array([5, 0, 0, 0]),
            None,
            r"CartPole-v1: invalid action for env 0: .*Discrete\(2\).* got 5",
        ),
        "extra actions": (np.ones(3, np.int64), np.array([1, 2]), r"envs \[1, 2\]: .*Discrete\(2\).*got shape \(3,\)"),
        "fractional": (np.full(4, 0.7), None, r"Discrete\(2\).*integer dtype.*got shape \(4,\) dtype float64"),
        "repeated env": (np.ones(2, np.int64), np.array([1, 1]), r"env id 1 appears more than once"),
        "unknown env": (np.ones(1, np.int64), np.array([7]), r"unknown env id 7: this pool has env ids 0..3"),
    }
    ours = envpool.make("CartPole-v1", num_envs=4, seed=0)
    try:
        ours.reset()
        for name, (action, env_id, message) in refused.items():
            if name == "repeated env":  # two of EnvPool's threads step env 1 at once: apart, it may crash
                code, said = envpool_apart("env.reset()", "env.step(np.ones(2, np.int64), np.array([1, 1]))")
                assert "Error" not in said, said  # no error raised, whatever the step did
                assert code in (0, -signal.SIGSEGV, -signal.SIGABRT), (code, said)
            elif name != "unknown env":  # EnvPool segfaults on an unknown env id (see the crash test)
                theirs = real.make("CartPole-v1", "gymnasium", num_envs=4, seed=0)
                theirs.reset()
                assert error_of(lambda a=action, e=env_id, t=theirs: t.step(a, e)) is None, name
                theirs.close()
            with pytest.raises((aioenv.InvalidAction, aioenv.UsageError), match=message):
                ours.step(action, env_id)
        assert rows(ours.step(np.zeros(4, np.int64)))[0][:2] == (0, 1)  # nothing was sent by the refused calls
    finally:
        ours.close()


def test_bad_actions_both_refuse(real: ModuleType) -> None:
    both_refuse = {
        "batch of (1,) rows for Discrete": ("CartPole-v1", np.ones((4, 1), np.int32), RuntimeError),
        "flat batch for Box (1,)": ("Pendulum-v1", np.zeros(4, np.float32), RuntimeError),
        "dict without 'action'": ("CartPole-v1", {"act": np.ones(4, np.int32)}, KeyError),
    }
    for name, (task, action, their_error) in both_refuse.items():
        theirs = real.make(task, "gymnasium", num_envs=4, seed=0)
        theirs.reset()
        assert error_of(lambda a=action, t=theirs: t.step(a))[0] is their_error, name  # type: ignore[index]
        theirs.close()
        ours = envpool.make(task, num_envs=4, seed=0, num_threads=1)
        try:
            ours.reset()
            with pytest.raises(aioenv.InvalidAction, match=f"{task}: .*(expected|holds 'action')") as err:
                ours.step(action)
            assert "got" in str(err.value)
        finally:
            ours.close()


def test_box_actions(real: ModuleType) -> None:
    """Pendulum: float64 rows are cast, as by EnvPool; out of bounds EnvPool clips, aioenv refuses; one env's
    unbatched action EnvPool refuses, aioenv takes."""
    with both(real, task="Pendulum-v1", num_envs=2, seed=0, num_threads=1) as (theirs, ours):
        for env in (theirs, ours):
            env.reset()
        assert layout(ours.step(np.array([[0.5], [-0.5]]))) == layout(theirs.step(np.array([[0.5], [-0.5]])))
        assert error_of(lambda: theirs.step(np.array([[5.0], [-9.0]]))) is None
        with pytest.raises(
            aioenv.InvalidAction, match=r"Pendulum-v1: invalid action for env 0: .*Box\(-2.0, 2.0, \(1,\)"
        ):
            ours.step(np.array([[5.0], [-9.0]]))
        assert error_of(lambda: theirs.step(np.array([1.0]), np.array([1], np.int32))) is None  # not checked again
        fresh = real.make("Pendulum-v1", "gymnasium", num_envs=2)  # EnvPool checks shapes on its first send only
        fresh.reset()
        assert error_of(lambda: fresh.step(np.array([1.0]), np.array([1], np.int32)))[0] is RuntimeError  # type: ignore[index]
        fresh.close()
        assert rows(ours.step(np.array([1.0]), np.array([1])))[0][:2] == (1, 2)


def test_envpool_aborts_where_aioenv_raises() -> None:
    """Fewer actions than env ids: EnvPool's C++ check aborts the whole process (SIGABRT); aioenv raises.
    (An unknown env id makes EnvPool read out of bounds, a segfault here: not run, being undefined behaviour.)"""
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import envpool, numpy as np\n"
        "env = envpool.make('CartPole-v1', 'gymnasium', num_envs=4)\n"
        "env.reset()\n"
        "env.step(np.ones(3, np.int32))\n"
    )
    proc = run_python("-c", code, timeout=60)
    assert proc.returncode == -signal.SIGABRT
    assert "Check failed" in proc.stderr
    env = envpool.make("CartPole-v1", num_envs=4)
    try:
        env.reset()
        with pytest.raises(aioenv.InvalidAction, match=r"CartPole-v1: invalid action batch for envs \[0, 1, 2, 3\]"):
            env.step(np.ones(3, np.int32))
    finally:
        env.close()


def test_busy_env_is_a_usage_error() -> None:
    """EnvPool queues a second request for an env whose first is in flight; aioenv refuses it, naming the env.
    (EnvPool's side runs apart: its threads may then step that env twice at once.)"""
    code, said = envpool_apart(
        "env.async_reset()",
        "env.send(np.ones(1, np.int32), np.array([0], np.int32))",
        "print('queued')",
        make="num_envs=4, batch_size=2, seed=0",
    )
    assert "Error" not in said, said  # no error raised for the second request
    assert code in (0, -signal.SIGSEGV, -signal.SIGABRT), (code, said)
    assert code != 0 or "queued" in said
    env = envpool.make("CartPole-v1", num_envs=4, batch_size=2, seed=0)
    try:
        env.async_reset()
        with pytest.raises(
            aioenv.UsageError, match=r"CartPole-v1: env 0( already has a request in flight|'s last result has arrived)"
        ):
            env.send(np.ones(1, np.int64), np.array([0]))
        assert env.recv()[0].shape == (2, 4)
    finally:
        env.close()


# ---------------------------------------------------------------- reset, render


def test_reset_options_match_envpool(real: ModuleType) -> None:
    with both(real, num_envs=4, seed=0) as (theirs, ours):
        for env in (theirs, ours):
            env.reset()
            _, info = env.reset(options={"reset_mask": np.array([False, True, False, True])})
            assert info["env_id"].tolist() == [1, 3]
            with pytest.warns(UserWarning, match=r"reset\(seed=...\) is ignored"):
                env.reset(seed=3)
        bad: list[tuple[Any, dict[str, Any]]] = [
            (None, {"x": 1}),
            (None, {"reset_mask": np.ones(3, bool)}),
            (None, {"reset_mask": np.zeros(4, bool)}),
            (np.array([0], np.int32), {"reset_mask": np.ones(4, bool)}),
        ]
        for env_id, options in bad:
            theirs_error = error_of(lambda e=env_id, o=options: theirs.reset(e, options=o))
            assert theirs_error is not None
            assert error_of(lambda e=env_id, o=options: ours.reset(e, options=o)) == theirs_error


def test_render_matches_envpool(real: ModuleType) -> None:
    """Frames ``(B, H, W, 3)`` uint8, ``render_env_id`` by default. aioenv's probe env draws 5 x 6 frames filled
    with its seed (gymnasium's CartPole would need pygame); EnvPool's C++ CartPole draws 400 x 600."""
    kw: dict[str, Any] = {"num_envs": 2, "seed": 0, "render_mode": "rgb_array", "render_env_id": 1}
    theirs = real.make("CartPole-v1", "gymnasium", **kw)
    ours = envpool.make("tests.envs.faulty:make_probe", **kw)
    try:
        for env, size in ((theirs, (400, 600)), (ours, (5, 6))):
            env.reset()
            assert layout(env.render()) == ("ndarray", (1, *size, 3), "|u1")
            assert layout(env.render(env_ids=[0, 1])) == ("ndarray", (2, *size, 3), "|u1")
            np.testing.assert_array_equal(env.render(), env.render(env_ids=[1]))
        assert ours.render(env_ids=0)[0, 0, 0].tolist() == [0, 0, 0]
        assert ours.render()[0, 0, 0].tolist() == [1, 1, 1]
        assert theirs.render(camera_id=0).shape == (1, 400, 600, 3)
        with pytest.raises(ValueError, match="camera_id is not supported"):
            ours.render(camera_id=0)
        assert "render_mode" not in ours.config
        assert "render_mode" not in theirs.config
    finally:
        ours.close()
        theirs.close()
    with both(real, num_envs=1) as (theirs, ours):
        for env in (theirs, ours):
            with pytest.raises(RuntimeError, match="render_mode"):
                env.render()


# ---------------------------------------------------------------- any gymnasium env


def test_max_episode_steps_and_env_kwargs() -> None:
    env = envpool.make("tests.envs.dictenv:make_dict_env", num_envs=2, batch_size=1, seed=0, min_len=2, max_len=3)
    try:
        assert env.config["min_len"] == 2  # the env's own options are config fields, as EnvPool's task options
        obs, info = env.reset(np.array([0]))
        assert set(obs) == {"pos", "count", "flag"}
        assert obs["pos"].shape == (1, 3)
        env.send(np.array([1]), np.array([0]))
        obs, _, _, _, info = env.recv()
        assert obs["pos"].shape == (1, 3)
        assert info["env_id"].tolist() == [0]
    finally:
        env.close()


def test_example_envpool_async_runs() -> None:
    proc = run_example("envpool_async.py", "--iterations", "200", "--num-envs", "4", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "800 env steps over 4 envs" in proc.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--num-envs", "0"], "--num-envs must be at least 1, got 0"),
        (["--batch-size", "9"], "--batch-size must be between 1 and --num-envs (8), got 9"),
    ],
)
def test_example_envpool_async_refuses_bad_arguments(args: list[str], said: str) -> None:
    assert_example_refuses("envpool_async.py", args, said)


def test_no_warning_from_a_plain_pool() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = envpool.make("CartPole-v1", num_envs=2)
        env.close()


@pytest.mark.parametrize("task", ["Ant-v3", "Hopper-v3", "InvertedPendulum-v2"])
def test_envpools_older_mujoco_ids_are_made(real: ModuleType, task: str) -> None:
    """EnvPool's v2/v3 MuJoCo ids (gymnasium's need mujoco-py): the gymnasium v4 env with EnvPool's spaces."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with both(real, task, num_envs=2, seed=0) as (theirs, ours):
            assert ours.observation_space.shape == theirs.observation_space.shape
            mine, its = ours.action_space, theirs.action_space  # float32 here, as gymnasium's; EnvPool's float64
            assert (mine.shape, mine.low.tolist(), mine.high.tolist()) == (
                its.shape,
                its.low.tolist(),
                its.high.tolist(),
            )
            assert ours.config["max_episode_steps"] == theirs.config["max_episode_steps"]
            obs, _ = ours.reset()
            out = ours.step(np.zeros((2, *ours.action_space.shape), np.float32))
    assert obs.shape == (2, *theirs.observation_space.shape)
    assert out[0].shape == obs.shape

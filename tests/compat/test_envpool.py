"""``aioenv.compat.envpool``: EnvPool's Python interface on real worker processes and gymnasium envs."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

import aioenv.compat.envpool as envpool
from tests.support.scripts import run_example

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sync_env() -> Iterator[envpool.EnvPool]:
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, seed=7, num_threads=2)
    yield env
    env.close()


def reference_obs(seed: int) -> np.ndarray:
    obs, _ = gym.make("CartPole-v1").reset(seed=seed)
    return obs


def test_documented_async_loop_runs_unchanged() -> None:
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, batch_size=4)
    try:
        env.async_reset()
        seen: set[int] = set()
        steps = 0
        for _ in range(60):  # EnvPool's documented loop, bounded
            obs, rew, term, trunc, info = env.recv()
            env_id = info["env_id"]
            action = np.random.randint(2, size=len(env_id))
            env.send(action, env_id)
            assert obs.shape == (4, 4)
            assert rew.shape == (4,)
            assert term.shape == (4,)
            assert trunc.shape == (4,)
            assert env_id.dtype == np.int32
            assert len(set(env_id.tolist())) == 4
            assert rew.dtype == np.float32
            assert term.dtype == np.bool_
            np.testing.assert_array_equal(info["players"]["env_id"], env_id)
            seen.update(env_id.tolist())
            steps += len(env_id)
        assert seen == set(range(8))
        assert steps == 240
    finally:
        env.close()


def test_make_spec_and_attributes() -> None:
    spec = envpool.make_spec("CartPole-v1", num_envs=3, batch_size=2, seed=1, max_episode_steps=9)
    assert spec.config["num_envs"] == 3
    assert spec.config["batch_size"] == 2
    assert spec.config["seed"] == 1
    assert spec.config["max_episode_steps"] == 9
    assert spec.observation_space == gym.make("CartPole-v1").observation_space
    assert spec.action_space == gym.spaces.Discrete(2)
    env = envpool.make_gymnasium("CartPole-v1", num_envs=3, batch_size=2, seed=1, max_episode_steps=9)
    try:
        assert env.observation_space == spec.observation_space  # single-env spaces, as EnvPool
        assert env.action_space == spec.action_space
        assert env.config["num_envs"] == 3
        assert env.spec.config["batch_size"] == 2
        assert len(env) == 3
        assert env.is_async
        assert env.all_env_ids.tolist() == [0, 1, 2]
        assert "CartPole-v1" in repr(env)
    finally:
        env.close()
    with pytest.raises(ValueError, match="gymnasium"):
        envpool.make("CartPole-v1", env_type="dm")


def test_seed_rule_int_and_list() -> None:
    env = envpool.make("CartPole-v1", num_envs=3, seed=10, num_threads=1)
    try:
        obs, info = env.reset()
        for i in range(3):
            np.testing.assert_array_equal(obs[i], reference_obs(10 + i))
        assert info["env_id"].tolist() == [0, 1, 2]
        assert info["elapsed_step"].tolist() == [0, 0, 0]
    finally:
        env.close()
    env = envpool.make("CartPole-v1", num_envs=2, seed=[5, 99], num_threads=1)
    try:
        obs, _ = env.reset()
        np.testing.assert_array_equal(obs[0], reference_obs(5))
        np.testing.assert_array_equal(obs[1], reference_obs(99))
    finally:
        env.close()


def test_step_with_env_id_subsets_and_next_step_autoreset(sync_env: envpool.EnvPool) -> None:
    env = sync_env
    obs, info = env.reset()
    assert obs.shape == (4, 4)
    obs, rew, term, trunc, info = env.step(np.array([1, 0]), np.array([3, 1]))
    assert info["env_id"].tolist() == [3, 1]
    assert obs.shape == (2, 4)
    assert info["elapsed_step"].tolist() == [1, 1]
    assert rew.tolist() == [1.0, 1.0]
    # Drive env 2 to the end of its episode with a constant action.
    for _ in range(100):
        obs, rew, term, trunc, info = env.step(np.array([0]), np.array([2]))
        if term[0] or trunc[0]:
            break
    assert term[0]
    assert info["elapsed_step"][0] > 1
    # EnvPool's autoreset: the next step resets env 2, ignores the action, reward 0, flags False.
    obs, rew, term, trunc, info = env.step(np.array([1]), np.array([2]))
    assert rew[0] == 0.0
    assert not term[0]
    assert not trunc[0]
    assert info["elapsed_step"][0] == 0
    assert np.abs(obs[0]).max() <= 0.05  # a fresh CartPole state
    obs, rew, *_ = env.step(np.array([1]), np.array([2]))
    assert rew[0] == 1.0
    # env_id=None steps every env, in order.
    obs, rew, term, trunc, info = env.step(np.ones(4, dtype=np.int64))
    assert info["env_id"].tolist() == [0, 1, 2, 3]


def test_reset_subset_and_reset_mask(sync_env: envpool.EnvPool) -> None:
    env = sync_env
    env.reset()
    env.step(np.ones(4, dtype=np.int64))
    obs, info = env.reset(np.array([2, 0]))
    assert obs.shape == (2, 4)
    assert info["env_id"].tolist() == [2, 0]
    assert info["elapsed_step"].tolist() == [0, 0]
    _, _, _, _, info = env.step(np.ones(4, dtype=np.int64))
    assert info["elapsed_step"].tolist() == [1, 2, 1, 2]
    _, info = env.reset(options={"reset_mask": np.array([False, True, False, True])})
    assert info["env_id"].tolist() == [1, 3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=3)
    assert any("reset(seed=...) is ignored" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(np.array([0]), options={"reset_mask": np.ones(4, bool)})


def test_send_recv_batches_and_order() -> None:
    env = envpool.make("CartPole-v1", num_envs=6, batch_size=3, seed=0, num_threads=2)
    try:
        env.async_reset()
        first = env.recv()
        second = env.recv()
        ids = np.concatenate([first[4]["env_id"], second[4]["env_id"]])
        assert sorted(ids.tolist()) == list(range(6))  # every env's reset, each exactly once
        assert (first[1] == 0).all()
        assert first[4]["elapsed_step"].tolist() == [0, 0, 0]
        env.send(np.zeros(3, dtype=np.int64), first[4]["env_id"])
        env.send(np.ones(3, dtype=np.int64), second[4]["env_id"])
        got: list[int] = []
        for _ in range(2):
            obs, rew, _, _, info = env.recv()
            assert obs.shape == (3, 4)
            assert (rew == 1.0).all()
            assert (info["elapsed_step"] == 1).all()
            got += info["env_id"].tolist()
        assert sorted(got) == list(range(6))
        # recv(reset=True) returns (obs, info), as EnvPool's reset uses it.
        env.async_reset()
        obs, info = env.recv(reset=True)
        assert obs.shape == (3, 4)
        assert info["env_id"].shape == (3,)
        env.recv()
    finally:
        env.close()


def test_max_episode_steps_and_env_kwargs() -> None:
    env = envpool.make("CartPole-v1", num_envs=2, seed=3, max_episode_steps=3, num_threads=1)
    try:
        env.reset()
        for _ in range(3):
            _, _, term, trunc, info = env.step(np.zeros(2, dtype=np.int64))
        assert trunc.all()
        assert not term.any()
        assert info["elapsed_step"].tolist() == [3, 3]
    finally:
        env.close()
    env = envpool.make("tests.envs.dictenv:make_dict_env", num_envs=2, batch_size=1, seed=0, min_len=2, max_len=3)
    try:
        obs, info = env.reset()
        assert set(obs) == {"pos", "count", "flag"}
        assert obs["pos"].shape == (2, 3)
        env.send(np.array([1, 2]))
        obs, _, _, _, info = env.recv()
        assert obs["pos"].shape == (1, 3)
        assert info["env_id"].shape == (1,)
        env.recv()
    finally:
        env.close()


def test_example_envpool_async_runs() -> None:
    proc = run_example("envpool_async.py", "--iterations", "200", "--num-envs", "4", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "800 env steps over 4 envs" in proc.stdout


def test_box_actions_are_cast_and_single_rows_accepted() -> None:
    env = envpool.make("Pendulum-v1", num_envs=2, seed=0, num_threads=1)
    try:
        obs, _ = env.reset()
        assert obs.shape == (2, 3)
        assert env.action_space.shape == (1,)
        obs, rew, _, _, info = env.step(np.array([[0.5], [-0.5]]))  # float64 actions, cast to float32
        assert rew.dtype == np.float32
        assert (rew <= 0).all()
        obs, rew, _, _, info = env.step(np.array([1.0]), np.array([1]))  # one env, its action unbatched
        assert obs.shape == (1, 3)
        assert info["env_id"].tolist() == [1]
        assert info["elapsed_step"].tolist() == [2]
    finally:
        env.close()

"""``aioenv.compat.torchrl.AioEnv`` against TorchRL's own envs and gymnasium, side by side.

The same seeds and actions go through an ``AioEnv`` (a real pool) and TorchRL's ``SerialEnv`` of ``GymEnv``\\ s
(or gymnasium's ``SyncVectorEnv`` and single gymnasium envs stepped by hand): the rollouts must be identical,
episode boundaries included, and so must what TorchRL's transforms and collectors make of them. Partial resets
(``"_reset"``) and partial steps (``"_step"``) are checked against gymnasium envs that only the masked envs
advance. torchrl and tensordict are in the ``test`` extra: this module fails, never skips, without them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from tensordict.nn.distributions import NormalParamExtractor
from torchrl.collectors import Collector
from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, Unbounded
from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from torchrl.envs import Compose, DoubleToFloat, ObservationNorm, RewardSum, SerialEnv, StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv, GymWrapper
from torchrl.envs.utils import ExplorationType, check_env_specs, set_exploration_type
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import aioenv
from aioenv.compat.torchrl import AioEnv
from tests.envs.dictenv import DictEnv, make_dict_env
from tests.envs.sb3_spaces import make_echo_env

N = 4
CARTPOLE = "CartPole-v1"
DICT_ENV = "tests.envs.dictenv:make_dict_env"


@pytest.fixture(scope="module")
def shared_cartpole() -> Iterator[AioEnv]:
    """One ``AioEnv(CARTPOLE, N)`` for the tests that reset it first (a pool's start costs a probe process)."""
    env = AioEnv(CARTPOLE, N, seed=0)
    yield env
    env.close()


@pytest.fixture
def cartpole(shared_cartpole: AioEnv) -> AioEnv:
    """The shared env, its next reset seeded as ``AioEnv(CARTPOLE, N, seed=0)``'s first (env ``i``: seed ``i``)."""
    shared_cartpole.set_seed(0)
    return shared_cartpole


def one_hot(actions: np.ndarray, n: int) -> torch.Tensor:
    """``(B,)`` indices as ``(B, n)`` int64 one-hot rows (TorchRL's ``OneHot`` action)."""
    return torch.nn.functional.one_hot(torch.as_tensor(actions, dtype=torch.int64), n)


def scripted(actions: np.ndarray, n: int) -> Callable[[TensorDictBase], TensorDictBase]:
    """A policy that plays ``actions[t]`` (one-hot) at its t-th call."""
    calls = iter(actions)

    def policy(td: TensorDictBase) -> TensorDictBase:
        td["action"] = one_hot(next(calls), n)
        return td

    return policy


def assert_td_equal(actual: TensorDictBase, expected: TensorDictBase) -> None:
    """The same keys, and per key the same dtype, shape and values."""
    assert set(actual.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        a, e = actual[key], expected[key]
        assert a.dtype == e.dtype, f"{key}: dtype {a.dtype} != {e.dtype}"
        assert a.shape == e.shape, f"{key}: shape {a.shape} != {e.shape}"
        torch.testing.assert_close(a, e, rtol=0, atol=0, msg=lambda m, k=key: f"{k}: {m}")


def seeded_reset(env: SerialEnv, n: int, seed: int = 0) -> TensorDictBase:
    """TorchRL's SerialEnv, each GymEnv reset with ``seed + i`` (as ``AioEnv(seed=seed)`` resets env ``i``)."""
    return env.reset(list_of_kwargs=[{"seed": seed + i} for i in range(n)])


class SeedFirst(gym.Wrapper[Any, Any, Any, Any]):
    """Resets with ``seed`` the first time it is reset without one (a TorchRL collector's reset has none)."""

    def __init__(self, env: gym.Env[Any, Any], seed: int) -> None:
        super().__init__(env)
        self._first: int | None = seed

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        seed, self._first = (self._first if seed is None else seed), None
        return self.env.reset(seed=seed, options=options)


def seeded_gym(i: int) -> GymWrapper:
    return GymWrapper(SeedFirst(gym.make(CARTPOLE), i))


def obs_policy(td: TensorDictBase) -> TensorDictBase:
    """A deterministic policy of the observation alone that drops the pole often (episodes end)."""
    obs = td["observation"]
    td["action"] = one_hot(((obs[..., 2] * 1e4).floor().long() % 2).numpy(), 2)
    return td


class Mirror:
    """``n`` gymnasium envs stepped and reset one by one: what only the masked envs doing something gives."""

    def __init__(self, n: int, make: Callable[[], gym.Env[Any, Any]] = lambda: gym.make(CARTPOLE)) -> None:
        self.envs = [make() for _ in range(n)]
        self.obs: list[Any] = [None] * n

    def reset(self, ids: list[int], seed: int | None = None) -> None:
        for i in ids:
            self.obs[i], _ = self.envs[i].reset(seed=None if seed is None else seed + i)

    def step(self, ids: list[int], actions: list[int]) -> dict[int, tuple[Any, float, bool, bool]]:
        out = {}
        for i, action in zip(ids, actions, strict=True):
            obs, reward, terminated, truncated, _ = self.envs[i].step(action)
            self.obs[i] = obs
            out[i] = (obs, float(reward), terminated, truncated)
        return out


# --------------------------------------------------------------------------------------------- specs


def test_check_env_specs_and_specs_match_gym_env(cartpole: AioEnv) -> None:
    check_env_specs(cartpole)
    assert cartpole.batch_size == torch.Size([N])
    reference = GymEnv(CARTPOLE)
    try:
        for name in ("full_observation_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
            ours, theirs = getattr(cartpole, name), getattr(reference, name)
            assert set(ours.keys(True, True)) == set(theirs.keys(True, True)), name
            for key in theirs.keys(True, True):
                assert type(ours[key]) is type(theirs[key]), (name, key)
                assert ours[key].shape == torch.Size([N, *theirs[key].shape]), (name, key)
                assert ours[key].dtype == theirs[key].dtype, (name, key)
        torch.testing.assert_close(
            cartpole.observation_spec["observation"].space.low[0], reference.observation_spec["observation"].space.low
        )
    finally:
        reference.close()


def test_one_env_without_num_envs_is_unbatched_as_gym_env() -> None:
    """``AioEnv(id)`` is ``GymEnv(id)``: batch ``()``, its specs, and (seeded alike) its rollouts, resets included."""
    reference = GymWrapper(SeedFirst(gym.make(CARTPOLE), 5))
    actions = np.random.default_rng(7).integers(0, 2, size=(60, 1))
    calls = iter(actions)
    with AioEnv(CARTPOLE, seed=5, executor="in_process") as env:
        got = env.rollout(60, lambda td: td.set("action", one_hot(next(calls)[0], 2)), break_when_any_done=False)
        check_env_specs(env)
        assert env.batch_size == torch.Size([])
        assert env.num_envs == 1
        for name in ("full_observation_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
            assert getattr(env, name) == getattr(reference, name), name
    calls = iter(actions)
    expected = reference.rollout(
        60, lambda td: td.set("action", one_hot(next(calls)[0], 2)), break_when_any_done=False
    )  # fmt: skip
    assert int(expected["next", "done"].sum()) >= 2  # episodes ended, and were reset
    assert_td_equal(got, expected)


def test_categorical_action_encoding() -> None:
    with AioEnv(CARTPOLE, N, seed=0, categorical_action_encoding=True, device="cpu", executor="in_process") as env:
        check_env_specs(env)
        assert isinstance(env.action_spec, Categorical)
        assert env.action_spec.shape == torch.Size([N])
        td = env.rand_step(env.reset())
        assert td["action"].shape == (N,)
        assert td["next", "observation"].device == torch.device("cpu")


class SpacesEcho(gym.Env[Any, Any]):
    """Observations echo the last action (and a step counter), for every space the mapping supports."""

    def __init__(self) -> None:
        self.action_space = spaces.Dict(
            {
                "pick": spaces.Discrete(3, start=-1),
                "multi": spaces.MultiDiscrete([3, 5], start=[1, -2]),
                "grid": spaces.MultiDiscrete([[2, 3], [4, 2]]),
                "bits": spaces.MultiBinary(4),
                "force": spaces.Box(-1.0, 1.0, (), np.float32),
            }
        )
        self.observation_space = spaces.Dict(
            {
                "echo": self.action_space,
                "t": spaces.Box(0, 100, (1,), np.int64),
                "big": spaces.Box(-np.inf, np.inf, (2, 2), np.float64),
            }
        )
        self._t = 0
        self.last: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(self.action_space.sample()), {}

    def _obs(self, action: Any) -> dict[str, Any]:
        return {"echo": action, "t": np.array([self._t]), "big": np.full((2, 2), self._t, np.float64)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        # (a scalar Box's value arrives as a numpy scalar, as from SyncVectorEnv: contains() would warn)
        assert self.action_space.contains({**action, "force": np.asarray(action["force"])}), action
        self.last = action
        self._t += 1
        return self._obs(action), float(self._t), self._t >= 5, False, {}


@pytest.mark.parametrize("categorical", [False, True])
def test_spaces_map_and_actions_round_trip(categorical: bool) -> None:
    with AioEnv(SpacesEcho, 3, executor="in_process", categorical_action_encoding=categorical) as env:
        check_env_specs(env)
        obs_spec, act_spec = env.full_observation_spec, env.full_action_spec
        assert isinstance(act_spec["pick"], Categorical if categorical else OneHot)
        assert isinstance(act_spec["multi"], MultiCategorical if categorical else MultiOneHot)
        assert isinstance(act_spec["grid"], MultiCategorical)  # a 2-D nvec: indices even when one-hot is asked
        assert act_spec["grid"].shape == (3, 2, 2)
        assert isinstance(act_spec["bits"], Binary)
        assert act_spec["bits"].dtype == torch.int8
        assert isinstance(act_spec["force"], Bounded)
        assert act_spec["force"].shape == (3, 1)
        assert isinstance(obs_spec["echo", "pick"], type(act_spec["pick"]))
        assert isinstance(obs_spec["big"], Unbounded)
        assert obs_spec["big"].dtype == torch.float64
        assert obs_spec["t"].dtype == torch.int64
        td = env.reset()
        for _ in range(3):
            td = env.rand_step(td)
            echo = td["next", "echo"]
            for key in ("pick", "multi", "grid", "bits", "force"):
                assert_td_equal(TensorDict({key: echo[key]}, [3]), TensorDict({key: td[key]}, [3]))
            td = env.step_mdp(td)
        # the spaces' own values reach the envs: start offsets applied (pick in [-1, 1], multi in [1, 3] x [-2, 2])
        action = env.full_action_spec.zero()
        if categorical:
            action["pick"] = torch.tensor([0, 1, 2])
            action["multi"] = torch.tensor([[0, 0], [2, 4], [1, 3]])
        else:
            action["pick"] = one_hot(np.array([0, 1, 2]), 3)
            action["multi"] = torch.cat([one_hot(np.array([0, 2, 1]), 3), one_hot(np.array([0, 4, 3]), 5)], dim=-1)
        action["bits"] = torch.tensor([[0, 1, 0, 1]] * 3, dtype=torch.int8)
        action["force"] = torch.tensor([[-1.0], [0.5], [1.0]])
        env.step(td.update(action))
        last = env.pool.get_attr("last")
        assert [int(a["pick"]) for a in last] == [-1, 0, 1]
        assert [a["multi"].tolist() for a in last] == [[1, -2], [3, 2], [2, 1]]
        assert [float(a["force"]) for a in last] == [-1.0, 0.5, 1.0]
        assert [a["bits"].tolist() for a in last] == [[0, 1, 0, 1]] * 3


def test_echo_env_with_a_dict_action_equals_its_gymnasium_env() -> None:
    with AioEnv(functools.partial(make_echo_env, action="dict"), N, seed=3, executor="in_process") as env:
        check_env_specs(env)
        assert set(env.full_action_spec.keys()) == {"move", "force"}  # a Dict's keys at the root, as GymEnv's
        mirror = Mirror(N, functools.partial(make_echo_env, action="dict"))
        mirror.reset(list(range(N)), seed=3)
        env.set_seed(3)  # check_env_specs reset the envs: seed their next reset again
        td = env.reset()
        np.testing.assert_array_equal(td["observation"].numpy(), np.stack(mirror.obs))
        for _ in range(5):
            td = env.rand_step(td)
            moves = td["move"].argmax(-1).tolist()
            forces = td["force"].numpy()
            want = mirror.step(list(range(N)), [{"move": m, "force": f} for m, f in zip(moves, forces, strict=True)])
            np.testing.assert_array_equal(td["next", "observation"].numpy(), np.stack([want[i][0] for i in range(N)]))
            ended = td["next", "done"].squeeze(-1)
            td = env.step_mdp(td)
            if ended.any():
                ids = ended.nonzero()[:, 0].tolist()
                td["_reset"] = ended.unsqueeze(-1)
                td = env.reset(td)
                mirror.reset(ids)
            np.testing.assert_array_equal(td["observation"].numpy(), np.stack(mirror.obs))


@pytest.mark.parametrize(
    ("action", "where"),
    [("tuple", "action space"), ("nested", "action space")],
)
def test_a_space_without_a_torchrl_spec_is_refused_clearly(action: str, where: str) -> None:
    with pytest.raises(TypeError, match=rf"cannot map the {where.split()[0]} space Tuple\(.*it supports Box, Discrete"):
        AioEnv(functools.partial(make_echo_env, action=action), 2, executor="in_process")


def test_text_observations_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match=r"observation space Text\(.*\(at 'observation'\)"):
        AioEnv("tests.envs.faulty:make_text", 2, executor="in_process")


# --------------------------------------------------------------------------------------------- rollouts


# "auto" puts CartPole on one worker process on a small machine, "inline" on one per CPU, and "in_process" in this
# process: each gives the same. (Tests that are not about where envs run pass executor="in_process": no probe
# process at start.)
EXECUTORS = ["auto", "inline", "in_process"]


@pytest.fixture(scope="module", params=EXECUTORS)
def by_executor(request: pytest.FixtureRequest) -> Iterator[AioEnv]:
    """``AioEnv(CARTPOLE, N)`` with each of :data:`EXECUTORS`, shared by the tests that take it; each test's
    first reset is seeded as ``seed=0``'s (env ``i``: seed ``i``)."""
    env = AioEnv(CARTPOLE, N, seed=0, executor=request.param)
    yield env
    env.close()


@pytest.fixture
def executor_env(by_executor: AioEnv) -> AioEnv:
    by_executor.set_seed(0)
    return by_executor


def test_rollout_equals_torchrl_serial_env_of_gym_envs(executor_env: AioEnv) -> None:
    steps = 120
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, N))
    reference = SerialEnv(N, functools.partial(GymEnv, CARTPOLE))
    try:
        expected = reference.rollout(
            steps, scripted(actions, 2), auto_reset=False, tensordict=seeded_reset(reference, N),
            break_when_any_done=False,
        )  # fmt: skip
    finally:
        reference.close()
    got = executor_env.rollout(steps, scripted(actions, 2), break_when_any_done=False)
    assert int(expected["next", "terminated"].sum()) >= 10  # many episode boundaries
    assert_td_equal(got, expected)


def test_rollout_equals_sync_vector_env_same_step() -> None:
    """TorchRL's loop (step, then reset the done envs) is gymnasium's same-step autoreset: the step that ends an
    episode carries its final observation in ``next``, and the next root observation is the new episode's."""
    steps = 60
    actions = np.random.default_rng(1).integers(0, 3, size=(steps, N))
    reference = SyncVectorEnv([make_dict_env] * N, autoreset_mode=AutoresetMode.SAME_STEP)
    with AioEnv(DICT_ENV, N, seed=11, categorical_action_encoding=True, executor="in_process") as env:
        td = env.reset()
        obs, _ = reference.reset(seed=11)
        ends = 0
        for t in range(steps):
            np.testing.assert_array_equal(td["pos"].numpy(), obs["pos"])
            np.testing.assert_array_equal(td["count"].numpy(), obs["count"])
            td["action"] = torch.as_tensor(actions[t])
            td, td_next = env.step_and_maybe_reset(td)
            obs, reward, terminated, truncated, info = reference.step(actions[t])
            ended = info.get("_final_obs", np.zeros(N, dtype=bool))
            final = np.array([info["final_obs"][i]["pos"] if ended[i] else obs["pos"][i] for i in range(N)])
            np.testing.assert_array_equal(td["next", "pos"].numpy(), final)
            np.testing.assert_array_equal(td["next", "reward"].numpy()[:, 0], reward.astype(np.float32))
            np.testing.assert_array_equal(td["next", "terminated"].numpy()[:, 0], terminated)
            np.testing.assert_array_equal(td["next", "truncated"].numpy()[:, 0], truncated)
            ends += int((terminated | truncated).sum())
            td = td_next
        assert ends >= 10
    reference.close()


def test_dict_observations_equal_torchrl_gym_wrapper() -> None:
    steps = 40
    actions = np.random.default_rng(2).integers(0, 3, size=(steps, N))
    reference = SerialEnv(N, lambda: GymWrapper(DictEnv()))
    try:
        check_env_specs(reference)
        expected = reference.rollout(
            steps, scripted(actions, 3), auto_reset=False, tensordict=seeded_reset(reference, N, seed=5),
            break_when_any_done=False,
        )  # fmt: skip
    finally:
        reference.close()
    with AioEnv(DICT_ENV, N, seed=5, executor="in_process") as env:
        got = env.rollout(steps, scripted(actions, 3), break_when_any_done=False)
    assert bool(expected["next", "terminated"].any())
    assert bool(expected["next", "truncated"].any())
    assert_td_equal(got, expected)


# --------------------------------------------------------------------------------------------- partial calls


def test_partial_reset_resets_only_the_masked_envs(cartpole: AioEnv) -> None:
    mirror = Mirror(N)
    mirror.reset(list(range(N)), seed=0)
    td = cartpole.reset()
    for t in range(3):
        td["action"] = one_hot(np.full(N, t % 2), 2)
        td = cartpole.step_mdp(cartpole.step(td))
        mirror.step(list(range(N)), [t % 2] * N)
    before = td["observation"].clone()
    mask = torch.tensor([True, False, True, False])
    td["_reset"] = mask.unsqueeze(-1)
    out = cartpole.reset(td)
    mirror.reset([0, 2])
    np.testing.assert_array_equal(out["observation"].numpy(), np.stack(mirror.obs))
    torch.testing.assert_close(out["observation"][~mask], before[~mask], rtol=0, atol=0)
    # the envs not reset go on with their episodes, the others start anew
    out["action"] = one_hot(np.ones(N, dtype=np.int64), 2)
    stepped = cartpole.step(out)
    want = mirror.step(list(range(N)), [1] * N)
    np.testing.assert_array_equal(stepped["next", "observation"].numpy(), np.stack([want[i][0] for i in range(N)]))


def test_partial_reset_of_no_env_sends_nothing(cartpole: AioEnv) -> None:
    td = cartpole.reset()
    td["_reset"] = torch.zeros(N, 1, dtype=torch.bool)
    out = cartpole.reset(td)
    torch.testing.assert_close(out["observation"], td["observation"], rtol=0, atol=0)


def test_partial_step_steps_only_the_masked_envs(cartpole: AioEnv) -> None:
    mirror = Mirror(N)
    mirror.reset(list(range(N)), seed=0)
    td = cartpole.reset()
    mask = torch.tensor([False, True, True, False])
    td["action"] = one_hot(np.array([0, 1, 0, 1]), 2)
    td["_step"] = mask
    out = cartpole.step(td)
    want = mirror.step([1, 2], [1, 0])
    next_obs = out["next", "observation"]
    np.testing.assert_array_equal(next_obs[mask].numpy(), np.stack([want[1][0], want[2][0]]))
    torch.testing.assert_close(next_obs[~mask], td["observation"][~mask], rtol=0, atol=0)
    assert out["next", "reward"][:, 0].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert not out["next", "done"].any()


def test_rollout_break_when_all_done_uses_partial_steps(executor_env: AioEnv) -> None:
    """``rollout(break_when_all_done=True)`` steps only the envs still running (a ``"_step"`` mask): a done env is
    never stepped (the pool, in ``disabled`` autoreset, would raise ``EpisodeEnded``)."""
    steps = 200
    actions = np.random.default_rng(3).integers(0, 2, size=(steps, N))
    got = executor_env.rollout(steps, scripted(actions, 2), break_when_any_done=False, break_when_all_done=True)
    mirror = Mirror(N)
    mirror.reset(list(range(N)), seed=0)
    length = got.shape[1]
    assert bool(got["next", "done"][:, -1].all())
    for i in range(N):
        for t in range(length):
            obs, _reward, terminated, truncated = mirror.step([i], [int(actions[t, i])])[i]
            np.testing.assert_array_equal(got["next", "observation"][i, t].numpy(), obs)
            assert got["next", "terminated"][i, t].item() == terminated
            if terminated or truncated:
                break


def test_a_done_env_stepped_without_a_reset_stays_done_and_the_others_step(cartpole: AioEnv) -> None:
    """What a collector does after ``rollout(break_when_any_done=True)`` on its env: it steps every env, the done
    ones too. ``GymEnv`` steps the gymnasium env past its end, which says it is done again; ``AioEnv`` leaves a done
    env as it is (its last observation, its done flags, a reward of 0), and steps the others as gymnasium would."""
    mirror = Mirror(N)
    mirror.reset(list(range(N)), seed=0)
    push = np.array([0, 1, 1, 1])  # env 1 falls first
    td = cartpole.reset()
    done = torch.zeros(N, dtype=torch.bool)
    while not bool(done.any()):
        td["action"] = one_hot(push, 2)
        out = cartpole.step(td)
        mirror.step(list(range(N)), push.tolist())
        done = out["next", "done"][:, 0]
        td = out["next"].select("observation")
    assert done.tolist() == [False, True, False, False]
    last = out["next"].clone()
    td["action"] = one_hot(push, 2)
    again = cartpole.step(td)["next"]
    live = [0, 2, 3]
    want = mirror.step(live, push[live].tolist())
    for key in ("observation", "done", "terminated", "truncated"):
        torch.testing.assert_close(again[key][1], last[key][1], rtol=0, atol=0)
    assert again["reward"][:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    np.testing.assert_array_equal(again["observation"][live].numpy(), np.stack([want[i][0] for i in live]))
    assert again["terminated"][:, 0].tolist() == [want[0][2], True, want[2][2], want[3][2]]
    # TorchRL's loop then resets the done envs, with a "_reset" mask, as after any done
    _, td = cartpole.step_and_maybe_reset(td)
    ended = again["done"][:, 0].nonzero()[:, 0].tolist()
    mirror.reset(ended)
    np.testing.assert_array_equal(td["observation"][ended].numpy(), np.stack([mirror.obs[i] for i in ended]))


# --------------------------------------------------------------------------------------------- transforms, collectors


def test_transforms_equal_the_same_transforms_over_serial_env() -> None:
    steps = 80
    actions = np.random.default_rng(4).integers(0, 2, size=(steps, N))

    def transformed(base: Any) -> TransformedEnv:
        return TransformedEnv(base, Compose(StepCounter(max_steps=15), RewardSum()))

    reference = transformed(SerialEnv(N, functools.partial(GymEnv, CARTPOLE)))
    try:
        expected = reference.rollout(
            steps, scripted(actions, 2), auto_reset=False, tensordict=seeded_reset(reference, N),
            break_when_any_done=False,
        )  # fmt: skip
    finally:
        reference.close()
    env = transformed(AioEnv(CARTPOLE, N, seed=0))
    try:
        got = env.rollout(steps, scripted(actions, 2), break_when_any_done=False)
        check_env_specs(env)
    finally:
        env.close()
    assert int(expected["next", "truncated"].sum()) >= 1  # StepCounter's max_steps truncates some episodes
    assert int(expected["next", "step_count"].max()) == 15
    assert_td_equal(got, expected)


def collect(env: Any, frames: int = 4 * 25 * 4) -> list[TensorDictBase]:
    collector = Collector(
        env, obs_policy, frames_per_batch=4 * 25, total_frames=frames, auto_register_policy_transforms=False
    )
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_torchrl_collector_over_aioenv_equals_it_over_serial_env(executor: str) -> None:
    expected = collect(SerialEnv(N, [functools.partial(seeded_gym, i) for i in range(N)]))
    got = collect(AioEnv(CARTPOLE, N, seed=0, executor=executor))
    assert len(got) == len(expected) == 4
    assert sum(int(b["next", "done"].sum()) for b in expected) >= 10
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.shape == (N, 25)
        assert_td_equal(ours, theirs)  # trajectory ids included


def test_collector_with_split_trajs_and_transforms() -> None:
    env = TransformedEnv(AioEnv(CARTPOLE, N, seed=0, executor="in_process"), Compose(StepCounter(), RewardSum()))
    with pytest.warns(UserWarning, match="split_trajs=True produces"):  # TorchRL's advice to use a replay buffer
        collector = Collector(
            env, obs_policy, frames_per_batch=N * 20, total_frames=N * 40, split_trajs=True,
            auto_register_policy_transforms=False,
        )  # fmt: skip
    try:
        for batch in collector:
            mask = batch["collector", "mask"]
            steps = batch["next", "step_count"][mask][..., 0]
            assert bool((steps >= 1).all())
            ended = batch["next", "done"][mask][..., 0]
            ret = batch["next", "episode_reward"][mask][..., 0]
            # CartPole pays 1 per step: an episode's return is its length
            torch.testing.assert_close(ret[ended], steps[ended].float())
    finally:
        collector.shutdown()


# --------------------------------------------------------------------------------------------- seeds, errors, close


def test_seeds_match_sync_vector_env() -> None:
    reference = SyncVectorEnv([lambda: gym.make(CARTPOLE)] * N)
    with AioEnv(CARTPOLE, N, seed=3, executor="in_process") as env:
        np.testing.assert_array_equal(env.reset()["observation"].numpy(), reference.reset(seed=3)[0])
        assert isinstance(env.set_seed(10), int)
        np.testing.assert_array_equal(env.reset()["observation"].numpy(), reference.reset(seed=10)[0])
        np.testing.assert_array_equal(env.reset(seed=20)["observation"].numpy(), reference.reset(seed=20)[0])
        unseeded = env.reset()["observation"].numpy()
        np.testing.assert_array_equal(unseeded, reference.reset()[0])  # seeds apply to one reset only
        # options reach every env reset (CartPole's initial state bounds)
        narrow = env.reset(seed=1, options={"low": -0.001, "high": 0.001})["observation"]
        np.testing.assert_array_equal(
            narrow.numpy(), reference.reset(seed=1, options={"low": -0.001, "high": 0.001})[0]
        )
        assert float(narrow.abs().max()) <= 0.001
    reference.close()


def test_bad_actions_are_clear_errors(cartpole: AioEnv) -> None:
    td = cartpole.reset()
    td["action"] = torch.zeros(N, 3, dtype=torch.int64)
    with pytest.raises(aioenv.InvalidAction, match=r"action 'action': expected shape \(4, 2\) .*got \(4, 3\)"):
        cartpole.step(td)
    td["action"] = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])
    with pytest.raises(aioenv.InvalidAction, match=r"row 2 is not one-hot for Discrete\(2\)"):
        cartpole.step(td)
    del td["action"]
    with pytest.raises(aioenv.InvalidAction, match="'action' is missing"):
        cartpole.step(td)
    td["action"] = one_hot(np.zeros(N, dtype=np.int64), 2)
    assert cartpole.step(td)["next", "observation"].shape == (N, 4)  # nothing was sent by the failed calls


def test_categorical_action_out_of_range_is_the_pools_invalid_action() -> None:
    with AioEnv(CARTPOLE, 2, categorical_action_encoding=True, executor="in_process") as env:
        td = env.reset()
        td["action"] = torch.tensor([0, 5])
        with pytest.raises(aioenv.InvalidAction, match="Discrete"):
            env.step(td)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"autoreset_mode": "next_step"}, "autoreset_mode='disabled'"),
        ({"batch_size": 2}, r"batch_size is \(num_envs,\)"),
        ({"seed": -1}, r"seed -1 for env 0"),
    ],
)
def test_options_aioenv_cannot_honour_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(aioenv.UsageError, match=match):
        AioEnv(CARTPOLE, 4, **options)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"sed": 0}, TypeError, r"unexpected keyword argument 'sed' \(did you mean 'seed'\?\)"),
        ({"device": "gpu"}, ValueError, r"AioEnv\(device='gpu'\): not a torch device"),
        ({"categorical_action_encoding": "yes"}, TypeError, "categorical_action_encoding is a bool"),
    ],
)
def test_wrong_arguments_are_clear_errors_before_a_pool_starts(
    options: dict[str, Any], error: type[Exception], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a pool was started")

    monkeypatch.setattr("aioenv.compat.torchrl.SyncPool", no_pool)
    with pytest.raises(error, match=match):
        AioEnv(CARTPOLE, 4, **options)
    with pytest.raises(aioenv.UsageError, match=r"batch_size is \(num_envs,\) = \(2,\)"):
        AioEnv([lambda: gym.make(CARTPOLE)] * 2, batch_size=3)  # the count of a list of callables


def test_reset_rejects_unknown_keywords_and_bad_seeds(cartpole: AioEnv) -> None:
    with pytest.raises(TypeError, match="takes seed=, options="):
        cartpole.reset(flavour=1)
    with pytest.raises(aioenv.UsageError, match="2 seeds for 4 envs"):
        cartpole.reset(seed=[1, 2])


def test_close_stops_the_pool_and_is_idempotent() -> None:
    env = AioEnv(CARTPOLE, 2, executor="in_process")
    pool = env.pool
    env.close()
    env.close()
    assert pool.closed
    assert env.is_closed
    with AioEnv(CARTPOLE, 2, executor="in_process") as env:
        assert not env.is_closed
        pool = env.pool
    assert pool.closed
    assert env.is_closed


# --------------------------------------------------------------------------------------------- TorchRL's PPO tutorial

PENDULUM = "Pendulum-v1"
EPISODE = 50  # Pendulum's episodes end by truncation, here at 50 steps: an evaluation rollout ends on a done env
FRAMES = 100  # a batch
SHORT = {"max_episode_steps": EPISODE}


@dataclass
class TutorialRun:
    """What the tutorial's loop saw: each batch the collector gave, and each evaluation rollout."""

    batches: list[TensorDictBase]
    evals: list[TensorDictBase]


def ppo_tutorial(base: Any, stats_dims: tuple[int, ...]) -> TutorialRun:
    """TorchRL's PPO tutorial (``tutorials/sphinx-tutorials/coding_ppo.py``), shortened: its transforms, actor,
    critic, collector, GAE, ClipPPOLoss and replay buffer, with an evaluation rollout on the collector's env after
    each batch but the last (the collector closes its env when it has its frames). ``stats_dims``:
    ``ObservationNorm.init_stats``' ``reduce_dim`` (``(0,)`` for an unbatched env, ``(0, 1)`` for a batched one:
    envs and steps). Seeded: the same env gives the same run."""
    torch.manual_seed(0)
    env = TransformedEnv(base, Compose(ObservationNorm(in_keys=["observation"]), DoubleToFloat(), StepCounter()))
    env.transform[0].init_stats(num_iter=FRAMES, reduce_dim=stats_dims, cat_dim=stats_dims[-1])
    check_env_specs(env)
    action = env.action_spec_unbatched
    actor = ProbabilisticActor(
        TensorDictModule(
            torch.nn.Sequential(
                torch.nn.LazyLinear(16), torch.nn.Tanh(), torch.nn.LazyLinear(2 * action.shape[-1]),
                NormalParamExtractor(),
            ),
            ["observation"], ["loc", "scale"],
        ),
        spec=env.action_spec, in_keys=["loc", "scale"], distribution_class=TanhNormal,
        distribution_kwargs={"low": action.space.low, "high": action.space.high}, return_log_prob=True,
    )  # fmt: skip
    value = ValueOperator(
        torch.nn.Sequential(torch.nn.LazyLinear(16), torch.nn.Tanh(), torch.nn.LazyLinear(1)), in_keys=["observation"]
    )
    actor(env.reset())
    value(env.reset())
    collector = Collector(
        env, actor, frames_per_batch=FRAMES, total_frames=3 * FRAMES, split_trajs=False,
        auto_register_policy_transforms=False,
    )  # fmt: skip
    buffer = ReplayBuffer(storage=LazyTensorStorage(FRAMES), sampler=SamplerWithoutReplacement())
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=value, average_gae=True)
    loss = ClipPPOLoss(
        actor, value, clip_epsilon=0.2, entropy_coeff=1e-4, critic_coeff=1.0, loss_critic_type="smooth_l1"
    )
    optim = torch.optim.Adam(loss.parameters(), 3e-4)
    run = TutorialRun([], [])
    try:
        for i, batch in enumerate(collector):
            run.batches.append(batch.clone())
            advantage(batch)
            buffer.extend(batch.reshape(-1))
            for _ in range(FRAMES // 25):
                losses = loss(buffer.sample(25))
                (losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]).backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optim.step()
                optim.zero_grad()
            if i < 2:
                with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
                    run.evals.append(env.rollout(1000, actor))  # stops at the first done, without a reset
    finally:
        collector.shutdown()
    return run


def seeded_pendulum(i: int) -> GymWrapper:
    return GymWrapper(SeedFirst(gym.make(PENDULUM, max_episode_steps=EPISODE), i))


def assert_tutorial_runs_agree(got: TutorialRun, expected: TutorialRun) -> None:
    """The first batch and evaluation are the same; the second batch differs only where the collector stepped an
    env the evaluation left done: ``GymEnv`` steps the gymnasium env past its end, ``AioEnv`` leaves it as it was.
    Both say it is done (truncated) again, and the collector resets it: the rest of the batch is the same."""
    assert len(got.batches) == len(expected.batches) == 3
    assert len(got.evals) == len(expected.evals) == 2
    for ours, theirs in [(got.batches[0], expected.batches[0]), (got.evals[0], expected.evals[0])]:
        assert_td_equal(ours.reshape(-1), theirs.reshape(-1))
    evaluation = got.evals[0]
    assert evaluation.shape[-1] == EPISODE  # the evaluation ended on done (truncated) envs
    assert bool(evaluation["next", "truncated"][..., -1, :].all())
    theirs = expected.batches[1]
    ours = got.batches[1].reshape(theirs.shape)  # AioEnv(id, 1) is batched (1,), a GymEnv unbatched
    first = torch.zeros(ours.shape, dtype=torch.bool)
    first[..., 0] = True  # the first step of each env after the evaluation: an env left done
    for key in theirs.keys(True, True):
        if key in (("next", "observation"), ("next", "reward")):
            torch.testing.assert_close(ours[key][~first], theirs[key][~first], rtol=0, atol=0)
        else:
            torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0, msg=lambda m, k=key: f"{k}: {m}")
    assert bool(ours["next", "truncated"][first].all())
    assert bool((ours["next", "reward"][first] == 0).all())  # not stepped: its last observation, a reward of 0
    last = evaluation["next", "observation"][..., -1, :]
    torch.testing.assert_close(ours["next", "observation"][first].reshape(last.shape), last, rtol=0, atol=0)
    for run in (got, expected):  # the last batch and evaluation: the loop ran to its end
        assert run.batches[2].numel() == FRAMES
        assert run.evals[1].shape[-1] == EPISODE


def test_ppo_tutorial_over_one_env_agrees_with_gym_env() -> None:
    """The tutorial's own lines with only the env changed: ``AioEnv(id)`` without ``num_envs`` is one env,
    unbatched, as ``GymEnv(id)`` (its ``ObservationNorm.init_stats(reduce_dim=0, cat_dim=0)`` needs that)."""
    expected = ppo_tutorial(seeded_pendulum(0), (0,))
    got = ppo_tutorial(AioEnv(PENDULUM, seed=0, env_kwargs=SHORT, executor="in_process"), (0,))
    assert got.batches[0].shape == expected.batches[0].shape == (FRAMES,)
    assert_tutorial_runs_agree(got, expected)


def test_ppo_tutorial_over_a_batch_of_one_env_agrees_with_gym_env() -> None:
    expected = ppo_tutorial(seeded_pendulum(0), (0,))
    got = ppo_tutorial(AioEnv(PENDULUM, 1, seed=0, env_kwargs=SHORT, executor="in_process"), (0, 1))
    assert got.batches[0].shape == (1, FRAMES)
    assert_tutorial_runs_agree(got, expected)


def test_ppo_tutorial_over_a_batched_env_agrees_with_serial_env() -> None:
    expected = ppo_tutorial(SerialEnv(N, [functools.partial(seeded_pendulum, i) for i in range(N)]), (0, 1))
    got = ppo_tutorial(AioEnv(PENDULUM, N, seed=0, env_kwargs=SHORT), (0, 1))
    assert got.batches[0].shape == (N, FRAMES // N)
    assert_tutorial_runs_agree(got, expected)

"""``PolicyRunner`` calling a torch module: the path for a module whose actions are one array gives exactly what the
general path gives (tensor in, the actions' array out), for array and dict observations, and falls back to it for
whatever else the module returns."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv.collect.policy
from aioenv.collect.policy import PolicyRunner, normalize_actions

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):  # type: ignore[misc]
    """Logits -> sampled or greedy actions; ``out`` says in what form it returns them."""

    def __init__(self, out: str = "tensor", grad: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        self.out = out
        self.grad = grad
        self.seen: list[Any] = []

    def forward(self, obs: Any) -> Any:
        self.seen.append(obs)
        x = obs["x"] if isinstance(obs, dict) else obs
        assert not torch.is_grad_enabled()  # called under no_grad
        actions = self.net(x).argmax(-1)
        if self.grad:  # a tensor that still asks for grad: its array goes through detach()
            return actions.float().requires_grad_(True)
        if self.out == "list":
            return actions.tolist()
        if self.out == "array":
            return actions.numpy()
        return actions


def general(runner: PolicyRunner, obs: Any, n: int) -> Any:
    """What the general path returns: the module called by ``_invoke``, its output normalised."""
    return normalize_actions(runner.action_space, runner._invoke(obs, np.arange(n)), n)


@pytest.mark.parametrize("out", ["tensor", "list", "array"])
def test_a_module_with_array_actions_gives_what_the_general_path_gives(
    out: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    obs = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    runner = PolicyRunner(Net(out), gym.spaces.Discrete(3))
    normalised: list[Any] = []

    def counting(space: Any, actions: Any, n: int) -> Any:
        normalised.append(actions)
        return normalize_actions(space, actions, n)

    monkeypatch.setattr(aioenv.collect.policy, "normalize_actions", counting)
    got = runner.call(obs, np.arange(8, dtype=np.int32))
    assert len(normalised) == (0 if out == "tensor" else 1)  # a CPU tensor is its array; the rest is normalised
    want = general(runner, obs, 8)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert all(type(seen) is torch.Tensor for seen in runner.policy.seen)  # the module got tensors


def test_dict_observations_reach_the_module_as_dicts_of_tensors() -> None:
    obs = {"x": np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)}
    runner = PolicyRunner(Net(), gym.spaces.Discrete(3))
    got = runner.call(obs, np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(got, general(runner, obs, 5))
    assert set(runner.policy.seen[0]) == {"x"}
    assert type(runner.policy.seen[0]["x"]) is torch.Tensor


def test_a_tensor_that_asks_for_grad_still_becomes_its_array() -> None:
    obs = np.zeros((3, 4), dtype=np.float32)
    runner = PolicyRunner(Net(grad=True), gym.spaces.Box(-10, 10, (), np.float32))
    got = runner.call(obs, np.arange(3, dtype=np.int32))
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, general(runner, obs, 3))


def test_dict_actions_take_the_general_path() -> None:
    class DictActions(torch.nn.Module):  # type: ignore[misc]
        def forward(self, obs: Any) -> Any:
            return {"a": torch.zeros(len(obs), dtype=torch.int64)}

    space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    runner = PolicyRunner(DictActions(), space)
    got = runner.call(np.zeros((4, 4), dtype=np.float32), np.arange(4, dtype=np.int32))
    assert set(got) == {"a"}
    np.testing.assert_array_equal(got["a"], np.zeros(4, dtype=np.int64))

"""What a collector calls to choose actions: a plain function, an ``async def``, or a torch module.

:class:`PolicyRunner` wraps the user's policy once and calls it the same way whatever it is:

- a function or any callable: ``policy(obs, env_ids)`` with ``obs`` batched ``(B, ...)`` (a dict or
  tuple of such arrays for ``Dict``/``Tuple`` spaces, an object array of ``str`` for ``Text``) and
  ``env_ids`` ``(B,)`` int32; a callable that takes one positional argument gets ``policy(obs)``;
- an ``async def`` (or a callable returning an awaitable): the same, awaited;
- a ``torch.nn.Module`` (torch is imported only if it is already loaded): ``module(obs_tensor)`` under
  ``torch.no_grad()``, the observation converted with ``torch.as_tensor`` (a dict or tuple of tensors for
  ``Dict``/``Tuple`` spaces); the module returns the actions.

It returns ``(B, ...)`` actions (a tensor, an array, a list of ``str``...), normalised to what the pool
takes. With ``per_env=True`` the policy is called once per env instead: ``policy(obs_row, env_id)`` returns
that env's action.

``update(weights)`` swaps the policy's parameters: a module (or any object with ``load_state_dict``) loads
``weights`` as a state dict (tensors and arrays are copied when :meth:`PolicyRunner.stage` is called, so the
caller may go on changing its own); any other ``weights`` must be a callable, which becomes the policy.
"""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Awaitable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

import aioenv.collect._tree as _tree
from aioenv.errors import UsageError

__all__ = ["PolicyRunner", "RandomActions", "normalize_actions"]


def _torch_module(policy: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(policy, torch.nn.Module)


def _positional_arity(fn: Any) -> int:
    """How many positional arguments ``fn`` accepts (2 when it takes ``*args`` or cannot be inspected)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    count = 0
    for p in params:
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            return 2
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def _to_numpy(value: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        # (a policy's output under no_grad on the CPU, as a module's is, needs neither detach() nor cpu(): 0.6 µs)
        return value.numpy() if value.is_cpu and not value.requires_grad else value.detach().cpu().numpy()
    return value


#: The action spaces whose batched actions are one array.
_ARRAY = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def normalize_actions(space: gym.Space[Any], actions: Any, n: int) -> Any:
    """``actions`` for ``n`` envs (tensors, arrays, lists) as the pool's batched form for ``space``."""
    actions = _to_numpy(actions)
    if isinstance(space, gym.spaces.Dict):
        return {k: normalize_actions(sub, actions[k], n) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(normalize_actions(sub, actions[i], n) for i, sub in enumerate(space.spaces))
    if isinstance(space, _ARRAY):
        return np.asarray(actions)
    if isinstance(actions, np.ndarray) and actions.dtype == object and actions.shape == (n,):
        return actions
    return _tree.pack_rows(space, list(actions))


def _copy_weights(weights: Any) -> Any:
    """A snapshot of a state dict (tensors cloned, arrays copied); a callable is kept as it is."""
    if isinstance(weights, Mapping):
        out = {}
        for k, v in weights.items():
            if hasattr(v, "detach") and hasattr(v, "clone"):  # a torch tensor
                out[k] = v.detach().clone()
            elif isinstance(v, np.ndarray):
                out[k] = v.copy()
            else:
                out[k] = copy.deepcopy(v)
        return out
    return weights


class RandomActions:
    """Actions sampled from one env's action space (``init_random_frames``), reproducible from ``seed``."""

    def __init__(self, space: gym.Space[Any], seed: int | None) -> None:
        self.space = copy.deepcopy(space)
        self.space.seed(seed)

    def __call__(self, n: int) -> Any:
        """``n`` actions, batched as the pool takes them."""
        return _tree.pack_rows(self.space, [self.space.sample() for _ in range(n)])


class PolicyRunner:
    """The user's policy behind one calling convention (see the module docstring).

    Attributes:
        version: 0 at first, +1 each time weights staged by :meth:`stage` are applied by :meth:`apply_staged`.
        is_async: calls must be awaited (:meth:`acall`); otherwise :meth:`call` answers at once.
    """

    def __init__(self, policy: Any, action_space: gym.Space[Any], *, per_env: bool = False) -> None:
        if policy is None or not callable(policy):
            raise UsageError(f"policy must be a function, an async function or a torch module, got {policy!r}")
        self.action_space = action_space
        self.per_env = per_env
        self.version = 0
        self._staged: list[Any] = []
        self._set(policy)

    def _set(self, policy: Any) -> None:
        self.policy = policy
        self.is_module = _torch_module(policy)
        self.is_async = not self.is_module and _is_async(policy)
        self._wants_ids = self.is_module is False and _positional_arity(policy) >= 2
        #: Torch, for a module whose actions are one array (Box, Discrete, MultiDiscrete, MultiBinary): its calls
        #: take :meth:`_module_rows`, 2 µs less a call of a 64x64 MLP than through :func:`normalize_actions`.
        self._torch: Any = sys.modules["torch"] if self.is_module and isinstance(self.action_space, _ARRAY) else None

    # ------------------------------------------------------------ weights

    def stage(self, weights: Any) -> None:
        """Remember ``weights`` (copied now) for :meth:`apply_staged`; the latest staged wins."""
        if not (callable(weights) or isinstance(weights, Mapping)):
            raise UsageError(f"update_policy takes a state dict or a callable policy, got {type(weights).__name__}")
        if isinstance(weights, Mapping) and not callable(getattr(self.policy, "load_state_dict", None)):
            raise UsageError("update_policy got a state dict but the policy has no load_state_dict; pass a callable")
        self._staged = [_copy_weights(weights)]

    def apply_staged(self) -> bool:
        """Apply the last staged weights, if any (between batches); True when something changed."""
        if not self._staged:
            return False
        weights = self._staged.pop()
        if isinstance(weights, Mapping):
            self.policy.load_state_dict(weights)
        else:
            self._set(weights)
        self.version += 1
        return True

    def may_await(self) -> bool:
        """Whether a call has to be awaited (:attr:`is_async`), now or once the staged policy, a callable, applies."""
        return self.is_async or any(
            callable(w) and not _torch_module(w) and _is_async(w) for w in self._staged if not isinstance(w, Mapping)
        )

    # ------------------------------------------------------------ calls

    def _call_module(self, obs: Any) -> Any:
        """The torch module on ``obs`` as tensors (a tree of them for ``Dict``/``Tuple``), under ``no_grad``."""
        torch = sys.modules["torch"]  # (a module policy means torch is loaded)
        with torch.no_grad():
            return self.policy(_tree.tmap(torch.as_tensor, obs))

    def _invoke(self, obs: Any, env_ids: Any) -> Any:
        if self.is_module:
            return self._call_module(obs)
        if self._wants_ids:
            return self.policy(obs, env_ids)
        return self.policy(obs)

    def call(self, obs: Any, env_ids: np.ndarray) -> Any:
        """Actions for ``(B, ...)`` ``obs`` of ``env_ids`` from a policy that is not async."""
        if self.per_env:
            rows = [self._invoke(_tree.take(obs, i), int(e)) for i, e in enumerate(env_ids)]
            return _tree.pack_rows(self.action_space, [_to_numpy(r) for r in rows])
        if self._torch is not None:
            return self._module_rows(obs, len(env_ids))
        return normalize_actions(self.action_space, self._invoke(obs, env_ids), len(env_ids))

    def _module_rows(self, obs: Any, n: int) -> Any:
        """:meth:`call` of a torch module whose actions are one array: a tensor out is its array (:func:`_to_numpy`),
        without :func:`normalize_actions`' look at the space; anything else as that makes it."""
        out = self._call_module(obs)
        if type(out) is self._torch.Tensor:
            return _to_numpy(out)
        return normalize_actions(self.action_space, out, n)

    async def acall(self, obs: Any, env_ids: np.ndarray) -> Any:
        """Actions from an async policy (or a sync one: then as :meth:`call`)."""
        if not self.is_async:
            return self.call(obs, env_ids)
        result: Awaitable[Any] = self._invoke(obs, env_ids)
        return normalize_actions(self.action_space, await result, len(env_ids))

    async def acall_one(self, obs_row: Any, env_id: int) -> Any:
        """One env's action (``per_env``), batched as a single row."""
        value = self._invoke(obs_row, env_id)
        if inspect.isawaitable(value):
            value = await value
        return _tree.pack_rows(self.action_space, [_to_numpy(value)])

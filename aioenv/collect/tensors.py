"""A :class:`~aioenv.collect.Batch` as a ``tensordict.TensorDict`` in TorchRL's keys (torch and tensordict optional).

Imported only when a batch is converted (``output="tensordict"`` or ``Batch.to_tensordict()``), so aioenv
itself never needs torch.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

import aioenv.collect._tree as _tree
from aioenv.errors import UsageError

__all__ = ["BatchLike", "available", "to_tensordict"]


def available() -> bool:
    """Whether torch and tensordict can be imported."""
    try:
        import tensordict  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class BatchLike(Protocol):
    """The fields of a :class:`~aioenv.collect.Batch` that a TensorDict holds (a protocol, so this module
    need not import ``batch``, which imports this one lazily)."""

    obs: Any
    action: Any
    next_obs: Any
    reward: np.ndarray
    done: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    traj_end: np.ndarray
    env_id: np.ndarray
    traj_id: np.ndarray
    step_count: np.ndarray
    policy_version: np.ndarray

    @property
    def layout(self) -> str:
        """``"time_major"``, ``"flat"`` or ``"trajectories"``."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch shape."""


def _tensor(a: np.ndarray) -> Any:
    import torch

    if a.dtype == object:
        raise UsageError(
            "a TensorDict holds tensors only: this batch has an object field (Text or another non-array space); "
            "use output='numpy'"
        )
    return torch.from_numpy(np.ascontiguousarray(a))


def _obs_entries(tree: Any) -> dict[str, Any]:
    """TorchRL's observation keys: a ``Dict`` space's own keys at the top, otherwise ``"observation"``."""
    if isinstance(tree, dict):
        return {str(k): _tree.tmap(_tensor, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return {"observation": {str(i): _tree.tmap(_tensor, v) for i, v in enumerate(tree)}}
    return {"observation": _tensor(tree)}


def to_tensordict(batch: BatchLike) -> Any:
    """``batch`` as a TensorDict (see :meth:`aioenv.collect.Batch.to_tensordict` for the keys)."""
    try:
        from tensordict import TensorDict
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError("output='tensordict' needs torch and tensordict: pip install tensordict") from exc

    def flag(a: np.ndarray) -> Any:
        return _tensor(a)[..., None]

    action = batch.action
    data: dict[str, Any] = {
        **_obs_entries(batch.obs),
        "action": {str(k): _tree.tmap(_tensor, v) for k, v in action.items()}
        if isinstance(action, dict)
        else _tree.tmap(_tensor, action),
        "env_id": _tensor(batch.env_id),
        "step_count": _tensor(batch.step_count),
        "policy_version": _tensor(batch.policy_version),
        "next": {
            **_obs_entries(batch.next_obs),
            "reward": flag(batch.reward),
            "done": flag(batch.done),
            "terminated": flag(batch.terminated),
            "truncated": flag(batch.truncated),
        },
        "collector": {
            "traj_ids": _tensor(batch.traj_id),
            "mask": _tensor(batch.valid),
            "traj_end": _tensor(batch.traj_end),
        },
    }
    if isinstance(data["action"], tuple):
        data["action"] = {str(i): v for i, v in enumerate(data["action"])}
    names: list[str | None] | None = {
        "time_major": ["time", None],
        "trajectories": [None, "time"],
        "flat": None,
    }[batch.layout]
    td = TensorDict(data, batch_size=list(batch.shape))
    if names is not None:
        td.refine_names(*names)
    return td

"""Recorded transitions before they become a batch: :class:`Chunk`, and each env's trajectory bookkeeping."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import aioenv.collect._tree as _tree

__all__ = ["Chunk", "Trajectories", "row_info"]


@dataclasses.dataclass
class Chunk:
    """``n`` transitions recorded together (one lock-step, or the rows of one ``recv``), in that order.

    Every field has ``n`` rows; ``obs``/``action``/``next_obs`` are trees (see :mod:`aioenv.collect._tree`).
    ``valid`` is False for rows that are not transitions (``next_step``'s reset step, a failed step);
    ``cut`` marks a transition after which the collector ended the trajectory although the env did not
    (an error, ``reset_at_each_iter``); ``error`` is None or one entry per row (None where the row did not
    fail); ``info``/``info_row`` (kept only when asked) are the pool's batched info and each row's index in it.
    """

    env_id: np.ndarray
    obs: Any
    action: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: Any
    valid: np.ndarray
    cut: np.ndarray
    traj_id: np.ndarray
    step_count: np.ndarray
    policy_version: np.ndarray
    env_seconds: np.ndarray
    policy_seconds: np.ndarray
    timeout: np.ndarray
    error: list[str | None] | None = None
    info: dict[str, Any] | None = None
    info_row: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.env_id.size)

    def select(self, rows: np.ndarray) -> Chunk:
        """The chunk's ``rows`` (an index array), in that order."""
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("info",):
                fields[f.name] = value
            elif f.name == "error":
                fields[f.name] = None if value is None else [value[i] for i in rows]
            elif f.name in ("obs", "action", "next_obs"):
                fields[f.name] = _tree.take(value, rows)
            else:
                fields[f.name] = None if value is None else value[rows]
        return Chunk(**fields)


def row_info(info: dict[str, Any] | None, row: int) -> dict[str, Any]:
    """One row's own info out of a batched gymnasium info dict (``_key`` masks respected, ``env_id`` left out)."""
    if not info:
        return {}
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key == "env_id" or key.startswith("_"):
            continue
        mask = info.get(f"_{key}")
        if isinstance(mask, np.ndarray) and mask.shape and not mask[row]:
            continue
        if isinstance(value, dict):
            out[key] = row_info(value, row)
        elif isinstance(value, np.ndarray) and value.shape:
            item = value[row]
            out[key] = item.item() if isinstance(item, np.generic) else item
        else:
            out[key] = value
    return out


class Trajectories:
    """Each env's current trajectory id and how many transitions it has so far.

    Ids are handed out in order, from 0: the envs' first trajectories are ``0 .. num_envs - 1``.
    """

    def __init__(self, num_envs: int) -> None:
        self.traj = np.arange(num_envs, dtype=np.int64)
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.next_id = num_envs

    def restart(self, env_ids: np.ndarray) -> None:
        """New trajectories for ``env_ids`` (in that order), with no transitions yet."""
        n = int(env_ids.size)
        if n:
            self.traj[env_ids] = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
            self.steps[env_ids] = 0
            self.next_id += n

    def restart_where(self, rows: np.ndarray, count: int) -> None:
        """:meth:`restart` for the envs where the ``(num_envs,)`` bool mask ``rows`` is True (``count`` of them, in
        env order), without their ids as an array first."""
        if count:
            self.traj[rows] = np.arange(self.next_id, self.next_id + count, dtype=np.int64)
            self.steps[rows] = 0
            self.next_id += count

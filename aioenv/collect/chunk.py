"""Recorded transitions before they become a batch: :class:`Chunk`, and each env's trajectory bookkeeping."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import aioenv.collect._tree as _tree

__all__ = ["Chunk", "LockstepLog", "Trajectories", "row_info"]


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


class LockstepLog:
    """The trajectory bookkeeping of up to ``steps`` lock-steps of every env, done once for all of them.

    Each step notes which of its rows are transitions and whose trajectories end after it (:meth:`note`; a failed
    step's rows: :meth:`cut`). :meth:`settle` then writes every row's trajectory id and step count into
    :attr:`traj_id` and :attr:`step_count` (``(steps, num_envs)`` int64; row ``t`` is step ``t``'s, and its chunk
    holds a view of it) and moves the :class:`Trajectories` past the steps taken: per batch, a dozen whole-array
    operations, where doing it step by step took as many per step.

    Ids are handed out as :meth:`Trajectories.restart` would have, step by step: after step ``t``, first to the
    envs whose episode ended (in env order), then to those whose step failed.
    """

    def __init__(self, trajs: Trajectories, steps: int, *, running: bool) -> None:
        n = trajs.traj.size
        self.trajs = trajs
        #: ``(steps, num_envs)``: each row's trajectory id (-1: no transition, but a failed step shows the one it
        #: cuts), filled by :meth:`settle`.
        self.traj_id = np.empty((steps, n), dtype=np.int64)
        #: ``(steps, num_envs)``: each transition's index within its trajectory (-1: no transition), by :meth:`settle`.
        self.step_count = np.empty((steps, n), dtype=np.int64)
        #: ``(steps, num_envs)`` float64: how long each step's env steps and policy call took (the same for every
        #: row of a step), by :meth:`settle`.
        self.env_seconds = np.empty((steps, n))
        self.policy_seconds = np.empty((steps, n))
        self._env_s: list[float] = []  # each step's env and policy seconds
        self._policy_s: list[float] = []
        self._valid_rows: list[np.ndarray] = []  # each step's own (B,) array, stacked by settle()
        self._valid = np.zeros((0, n), dtype=np.bool_)
        self._events = np.zeros((steps, 2, n), dtype=np.bool_)  # [t, 0]: ended after step t; [t, 1]: failed
        #: Steps noted so far.
        self.taken = 0
        #: Each env's transitions in its trajectory so far, kept step by step (``running``: for a cap on them to
        #: read), else None.
        self.steps_now: np.ndarray | None = trajs.steps.copy() if running else None

    @property
    def valid(self) -> np.ndarray:
        """``(steps taken, num_envs)`` bool, once :meth:`settle` ran: the rows noted as transitions (row ``t``:
        step ``t``'s)."""
        return self._valid

    @property
    def failed(self) -> np.ndarray:
        """``(steps, num_envs)`` bool: the rows :meth:`cut` as failed."""
        return self._events[:, 1]

    def note(self, valid: np.ndarray, ended: np.ndarray, any_ended: bool, env_s: float, policy_s: float) -> int:
        """The next step: its rows that are transitions (``valid``) and those whose trajectory ends after it
        (``ended``, ``any_ended`` whether any does), how long its env steps and its policy call took; returns its
        index ``t``."""
        t = self.taken
        self._valid_rows.append(valid)
        self._env_s.append(env_s)
        self._policy_s.append(policy_s)
        if any_ended:
            self._events[t, 0] = ended
        self.taken = t + 1
        now = self.steps_now
        if now is not None:
            now += valid
            if any_ended:
                now[ended] = 0
        return t

    def cut(self, failed: np.ndarray) -> None:
        """The last step noted failed for its ``failed`` rows (no transitions): they show the trajectory they cut,
        and a new one starts."""
        self._events[self.taken - 1, 1] = failed
        if self.steps_now is not None:
            self.steps_now[failed] = 0

    def settle(self) -> int:
        """Fill :attr:`traj_id`, :attr:`step_count` and the seconds for the steps taken, and move the trajectories
        past them; how many transitions they recorded."""
        steps = self.taken
        if not steps:
            return 0
        trajs = self.trajs
        self._valid = valid = np.array(self._valid_rows, dtype=np.bool_)
        events = self._events[:steps]
        self.env_seconds[:steps] = np.array(self._env_s)[:, None]
        self.policy_seconds[:steps] = np.array(self._policy_s)[:, None]
        # each event's rank in the order restarts happened: by step, the ended before the failed, by env; a row has at
        # most one (an ended row is valid, a failed one is not)
        rank = np.where(events, np.cumsum(events.reshape(-1)).reshape(events.shape) - 1, -1).max(axis=1)
        count = np.cumsum(valid, axis=0)  # transitions up to and including each step
        at = np.where(rank >= 0, count, -1)  # the count at each restart (ranks and counts only grow down the steps)
        # the latest restart before each step, and the count then
        prev, prev_count = _latest_before(rank), _latest_before(at)
        fresh = prev >= 0
        before: np.ndarray = count - valid
        shown = valid | events[:, 1]
        np.copyto(self.traj_id[:steps], np.where(shown, np.where(fresh, trajs.next_id + prev, trajs.traj), -1))
        np.copyto(
            self.step_count[:steps], np.where(valid, np.where(fresh, before - prev_count, trajs.steps + before), -1)
        )
        last, last_count = rank.max(axis=0), at.max(axis=0)
        restarted = last >= 0
        trajs.traj[:] = np.where(restarted, trajs.next_id + last, trajs.traj)
        trajs.steps[:] = np.where(restarted, count[-1] - last_count, trajs.steps + count[-1])
        trajs.next_id += int(np.count_nonzero(events))
        self.taken = 0  # settled (once): a second call changes nothing
        return int(count[-1].sum())


def _latest_before(marks: np.ndarray) -> np.ndarray:
    """``(steps, n)``: for each step, the largest of ``marks`` at the steps before it (-1: none); ``marks`` grow down
    the steps where they are not -1, so that is the latest."""
    out = np.empty_like(marks)
    out[0] = -1
    out[1:] = marks[:-1]
    np.maximum.accumulate(out, axis=0, out=out)
    return out

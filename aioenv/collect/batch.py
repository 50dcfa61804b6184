"""What a collector yields: :class:`Batch`, transitions as arrays, and how chunks become one.

Three layouts, with the same fields:

- ``"time_major"`` (``mode="sync"``): every field ``(T, B, ...)``: ``T`` lock-steps of all ``B`` envs.
- ``"flat"`` (``mode="async"``): ``(N, ...)``: the ``N`` transitions of whichever envs finished first,
  grouped by env (ascending ids) and in time order within an env, so each trajectory's rows are adjacent.
- ``"trajectories"`` (``split_trajs=True``): ``(K, L, ...)``: one row per trajectory (ascending ids), padded
  to the longest ``L`` with zeros; ``valid`` marks the real steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

import aioenv.collect._tree as _tree
from aioenv.collect.chunk import Chunk

__all__ = ["Batch", "Layout", "flat", "padded", "time_major"]

Layout = Literal["time_major", "flat", "trajectories"]

_TREES = ("obs", "action", "next_obs")
_FILL = {"traj_id": -1, "env_id": -1, "step_count": -1, "policy_version": 0}


@dataclasses.dataclass
class Batch:
    """Transitions ``(obs, action) -> (reward, terminated, truncated, next_obs)`` with their bookkeeping.

    Shapes (see the module): ``S = (T, B)`` time-major, ``(N,)`` flat or ``(K, L)`` per trajectory; a tree
    field (``obs``, ``action``, ``next_obs``) is an array ``(*S, *space_shape)``, a dict or tuple of such
    arrays for ``Dict``/``Tuple`` spaces, or an object array ``S`` of ``str`` for ``Text``.

    Attributes:
        obs: what the policy saw. action: what it chose (sampled when ``init_random_frames`` applies).
        reward: ``S`` float64. terminated, truncated: ``S`` bool, as the env said; ``truncated`` is also
            True where ``max_frames_per_traj`` cut the trajectory.
        done: ``S`` bool, ``terminated | truncated`` on valid rows.
        next_obs: the observation that step produced; at an episode's end the true final one (never the
            next episode's first), in every autoreset mode.
        valid: ``S`` bool: the row is a transition. False for ``next_step``'s reset steps (time-major: the
            step after ``done`` only resets the env), for failed steps (``on_error="reset"``) and for padding.
        traj_end: ``S`` bool: no later row of this batch continues this trajectory's chain: the episode
            ended (``done``), the collector cut it (an error, ``reset_at_each_iter``), or the env's next row
            is invalid or another trajectory. Use ``1 - traj_end`` to chain returns (GAE, n-step) and
            ``1 - terminated`` to bootstrap from ``next_obs``: then nothing leaks across an episode boundary.
        env_id: ``S`` int32. traj_id: ``S`` int64, unique per trajectory over the collector's life (-1:
            no trajectory: a reset step or padding). step_count: ``S`` int64, the transition's index within
            its trajectory (0 for the first).
        policy_version: ``S`` int64: how many :meth:`Collector.update_policy` calls the policy that chose
            the action had seen; -1 for random actions.
        env_seconds, policy_seconds: ``S`` float64: how long the env step and the policy call took.
        timeout: ``S`` bool: the step overran the pool's ``step_timeout`` (``on_timeout="truncate"``).
        layout: ``"time_major"``, ``"flat"`` or ``"trajectories"``.
        frames: how many frames this batch counts for ``total_frames`` (its rows before any split).
    """

    obs: Any
    action: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    next_obs: Any
    valid: np.ndarray
    traj_end: np.ndarray
    env_id: np.ndarray
    traj_id: np.ndarray
    step_count: np.ndarray
    policy_version: np.ndarray
    env_seconds: np.ndarray
    policy_seconds: np.ndarray
    timeout: np.ndarray
    layout: Layout
    frames: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch shape ``S`` (see the class docstring)."""
        return tuple(self.reward.shape)

    def _fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("layout", "frames")}

    def _rows(self) -> dict[str, Any]:
        """Every field as ``(R, ...)`` rows grouped by env, in time order within each env (valid and not)."""
        fields = self._fields()
        if self.layout == "time_major":
            return {k: _tree.tmap(_env_major, v) for k, v in fields.items()}
        if self.layout == "trajectories":
            return {k: _tree.tmap(lambda a: a.reshape(-1, *a.shape[2:]), v) for k, v in fields.items()}
        return fields

    def split(self) -> list[Batch]:
        """One flat batch ``(T_k,)`` per trajectory (ascending ``traj_id``), its valid rows in time order."""
        rows, order, starts, counts = _grouped(self._rows())
        out = []
        for s, c in zip(starts.tolist(), counts.tolist(), strict=True):
            part = {k: _tree.take(v, order[s : s + c]) for k, v in rows.items()}
            out.append(Batch(**part, layout="flat", frames=c))
        return out

    def to_tensordict(self) -> Any:
        """This batch as a ``tensordict.TensorDict`` in TorchRL's keys (needs torch and tensordict):
        ``observation`` (a ``Dict`` space's keys instead), ``action``, ``("next", "observation" | "reward" |
        "done" | "terminated" | "truncated")`` (flags and reward with a trailing dim of 1), ``env_id``,
        ``step_count``, ``policy_version``, ``("collector", "traj_ids" | "mask" | "traj_end")``; batch size
        ``S``, with the time dim named ``"time"``."""
        from aioenv.collect.tensors import to_tensordict

        return to_tensordict(self)


def _env_major(a: np.ndarray) -> np.ndarray:
    """``(T, B, ...)`` as ``(B * T, ...)``: each env's rows together, in time order."""
    return np.swapaxes(a, 0, 1).reshape(-1, *a.shape[2:])


def _grouped(rows: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    """Valid rows ordered by trajectory (stable: time order kept); the order, each group's start and size."""
    keep = np.flatnonzero(rows["valid"])
    order = keep[np.argsort(rows["traj_id"][keep], kind="stable")]
    _, starts, counts = np.unique(rows["traj_id"][order], return_index=True, return_counts=True)
    return rows, order, starts, counts


def _traj_end(done: np.ndarray, cut: np.ndarray, valid: np.ndarray, traj: np.ndarray, same_next: np.ndarray) -> Any:
    """``traj_end`` along axis 0: ``same_next[i]``: row ``i + 1`` is the same env's next row."""
    nxt_valid = np.zeros_like(valid)
    nxt_valid[:-1] = valid[1:]
    nxt_traj = np.full_like(traj, -2)
    nxt_traj[:-1] = traj[1:]
    return valid & (done | cut | (same_next & (~nxt_valid | (nxt_traj != traj))))


_JOINED = [f.name for f in dataclasses.fields(Chunk) if f.name not in ("error", "info", "info_row")]


def _joined(chunks: Sequence[Chunk], join: Any) -> dict[str, Any]:
    return {name: _tree.tmap(lambda *xs: join(xs), *[getattr(c, name) for c in chunks]) for name in _JOINED}


def _stack(xs: Sequence[np.ndarray]) -> np.ndarray:
    """``np.stack(xs)``; for arrays of numbers as one ``np.array`` call, without ``np.stack``'s Python-level
    work per array (object arrays keep ``np.stack``: their items may be arrays that ``np.array`` would unpack)."""
    first = xs[0]
    if first.dtype != object:
        try:
            out = np.array(xs)
        except ValueError:  # shapes differ: np.stack says which
            return np.stack(xs)
        if out.dtype == first.dtype and out.shape[1:] == first.shape:
            return out
    return np.stack(xs)


def time_major(chunks: Sequence[Chunk], *, cut_last: bool) -> Batch:
    """``T`` lock-step chunks of ``B`` rows as a ``(T, B)`` batch; ``cut_last``: the collector cuts every
    trajectory after this batch (``reset_at_each_iter``)."""
    f = _joined(chunks, _stack)
    done = f["valid"] & (f["terminated"] | f["truncated"])
    same_next = np.ones_like(f["valid"])
    same_next[-1] = False
    cut = f.pop("cut")
    if cut_last:
        cut = cut.copy()
        cut[-1] = True
    end = _traj_end(done, cut, f["valid"], f["traj_id"], same_next)
    return Batch(**f, done=done, traj_end=end, layout="time_major", frames=int(done.size))


def flat(chunks: Sequence[Chunk], frames: int, *, cut_last: bool) -> tuple[Batch, list[Chunk]]:
    """The first ``frames`` valid transitions of ``chunks`` as a flat batch (grouped by env, time order
    within), and the rest as chunks for the next batch."""
    f = _joined(chunks, np.concatenate)
    keep = np.flatnonzero(f["valid"])
    now, rest = keep[:frames], keep[frames:]
    rest_chunk = [dataclasses.replace(_select(f, rest), error=None)] if rest.size else []
    order = now[np.argsort(f["env_id"][now], kind="stable")]
    f = {k: _tree.take(v, order) for k, v in f.items()}
    done = f["terminated"] | f["truncated"]
    same_next = np.zeros_like(done)
    same_next[:-1] = f["env_id"][1:] == f["env_id"][:-1]
    cut = f.pop("cut")
    if cut_last:
        cut = cut | ~same_next
    end = _traj_end(done, cut, f["valid"], f["traj_id"], same_next)
    return Batch(**f, done=done, traj_end=end, layout="flat", frames=int(order.size)), rest_chunk


def _select(fields: dict[str, Any], rows: np.ndarray) -> Chunk:
    return Chunk(**{k: _tree.take(v, rows) for k, v in fields.items()})


def padded(batch: Batch) -> Batch:
    """``batch`` split per trajectory and padded: ``(K, L, ...)`` (``layout="trajectories"``)."""
    rows, order, starts, counts = _grouped(batch._rows())
    k = int(starts.size)
    longest = int(counts.max()) if k else 0
    group = np.repeat(np.arange(k), counts)
    col = np.arange(order.size) - np.repeat(starts, counts)

    def pad(name: str, a: np.ndarray) -> np.ndarray:
        fill = _FILL.get(name, None if a.dtype == object else 0)
        out = np.full((k, longest, *a.shape[1:]), fill, dtype=a.dtype)
        out[group, col] = a[order]
        return out

    fields = {name: _tree.tmap(lambda a, n=name: pad(n, a), v) for name, v in rows.items()}
    return Batch(**fields, layout="trajectories", frames=batch.frames)

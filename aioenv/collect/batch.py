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
from aioenv.collect.chunk import Chunk, LockstepLog

__all__ = ["Batch", "Layout", "LockstepRows", "flat", "padded"]

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


class LockstepRows:
    """The rows of up to ``steps`` lock-steps of every env, made one ``(T, B)`` :class:`Batch` (``"time_major"``)
    when they are done.

    Each step hands over its own arrays (:meth:`add`: what the policy saw and chose, what the pool returned); they
    are kept as they are, and each field is stacked once for the batch. What is the same for every row of a step
    (its policy version) is kept once per step, and the bookkeeping (which rows are transitions, trajectory ids,
    step counts, seconds, failed rows) is ``log``'s (:class:`aioenv.collect.chunk.LockstepLog`), whose ``(T, B)``
    arrays the batch takes as they are. Nothing is built per step but a few list entries; a record of every field per
    step (a :class:`Chunk`), each stacked at the end, cost the collector 2-4% more CPU per frame than this does.
    """

    def __init__(self, log: LockstepLog, env_ids: np.ndarray, steps: int) -> None:
        self.log = log
        self.env_ids = env_ids
        self._obs: list[Any] = []
        self._action: list[Any] = []
        self._next_obs: list[Any] = []
        self._reward: list[np.ndarray] = []
        self._terminated: list[np.ndarray] = []
        self._truncated: list[np.ndarray] = []
        self._version = np.empty(steps, dtype=np.int64)
        self._timeout: np.ndarray | None = None  # (steps, B) once some step has a row that overran

    def add(
        self,
        obs: Any,
        action: Any,
        step: tuple[Any, np.ndarray, np.ndarray, np.ndarray],
        version: int,
        timeout: np.ndarray | None,
    ) -> None:
        """The step ``log`` noted last: ``obs`` ``(B, ...)`` (a tree) what the policy saw, ``action`` what it chose,
        ``step`` its ``(next_obs, reward, terminated, truncated)`` (``(B, ...)``, ``(B,)`` float64 and bool; a cap's
        truncation included), ``version`` the policy's, ``timeout`` ``(B,)`` bool (None: no row overran)."""
        t = len(self._obs)
        next_obs, reward, terminated, truncated = step
        self._obs.append(obs)
        self._action.append(action)
        self._next_obs.append(next_obs)
        self._reward.append(reward)
        self._terminated.append(terminated)
        self._truncated.append(truncated)
        self._version[t] = version
        if timeout is not None:
            if self._timeout is None:
                self._timeout = np.zeros((self._version.size, self.env_ids.size), dtype=np.bool_)
            self._timeout[t] = timeout

    def batch(self, *, cut_last: bool) -> Batch:
        """The steps added as a ``(T, B)`` batch (``log`` settled first); ``cut_last``: the collector cuts every
        trajectory after it (``reset_at_each_iter``)."""
        log = self.log
        log.settle()
        steps, n = len(self._obs), self.env_ids.size

        def stack(trees: list[Any]) -> Any:
            return _tree.tmap(lambda *xs: _stack(xs), *trees)

        terminated, truncated = _stack(self._terminated), _stack(self._truncated)
        valid = log.valid[:steps]
        done = valid & (terminated | truncated)
        cut = log.failed[:steps]
        if cut_last:
            cut = cut.copy()
            cut[-1] = True
        same_next = np.ones_like(valid)
        same_next[-1] = False
        traj_id = log.traj_id[:steps]
        env_id = np.empty((steps, n), dtype=self.env_ids.dtype)
        env_id[:] = self.env_ids
        version = np.empty((steps, n), dtype=np.int64)
        version[:] = self._version[:steps, None]
        return Batch(
            obs=stack(self._obs),
            action=stack(self._action),
            reward=_stack(self._reward),
            terminated=terminated,
            truncated=truncated,
            done=done,
            next_obs=stack(self._next_obs),
            valid=valid,
            traj_end=_traj_end(done, cut, valid, traj_id, same_next),
            env_id=env_id,
            traj_id=traj_id,
            step_count=log.step_count[:steps],
            policy_version=version,
            env_seconds=log.env_seconds[:steps],
            policy_seconds=log.policy_seconds[:steps],
            timeout=np.zeros((steps, n), dtype=np.bool_) if self._timeout is None else self._timeout[:steps],
            layout="time_major",
            frames=steps * n,
        )


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

"""What a coordinator does about time: its deadline timer, the error of a late request, and truncate mode.

A request past its deadline fails with :class:`~aioenv.errors.StepTimeout` (:func:`timeout_error`), or, with
``on_timeout="truncate"``, a late step comes back as a truncated row: the env's last observation,
reward 0, ``truncated`` True and ``info["timeout"]`` True (:class:`Truncation`). An env replaced behind
its caller's back (its worker died or was killed) owes the caller such a row too (``info["env_replaced"]``):
its next step gets it, a reset clears the debt.

Nothing here sends a message: the coordinator (:mod:`aioenv.core.coordinator`) asks, and delivers the parts
these helpers build.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from aioenv.core.scheduler import THROTTLED, Request
from aioenv.core.sinks import Part
from aioenv.errors import AioEnvError, StepTimeout
from aioenv.wire.protocol import Key

__all__ = ["DeadlineTimer", "Truncation", "cancel_fields", "timeout_error"]


class DeadlineTimer:
    """One loop timer set at the earliest deadline asked for; ``on_due`` runs when it fires."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_due: Callable[[], None]) -> None:
        self.loop = loop
        self._on_due = on_due
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None

    def arm(self, when: float | None) -> None:
        """Fire at ``when`` (loop time) unless already set to fire by then (None: nothing due)."""
        if when is None or (self._at is not None and self._at <= when):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = when
        self._handle = self.loop.call_at(when, self._fire)

    @property
    def at(self) -> float | None:
        """When it fires (loop time; None: nothing due)."""
        return self._at

    def _fire(self) -> None:
        self._handle = None
        self._at = None
        self._on_due()

    def cancel(self) -> None:
        """Never fire (shutdown)."""
        if self._handle is not None:
            self._handle.cancel()


def timeout_error(kind: str, env_id: int, *, cancels: bool, worker: str) -> StepTimeout:
    """The error of env ``env_id``'s late ``kind``: ``cancels`` when its (``async``) worker replaces the env
    itself, else ``worker`` is restarted because it was stuck."""
    fix = "re-made" if cancels else f"re-made on a restarted worker ({worker} was stuck)"
    return StepTimeout(
        f"{kind} of env {env_id} overran its deadline; the env is {fix}: reset it before stepping",
        env_id=env_id,
    )


def cancel_fields(reqs: list[Request], truncation: Truncation | None) -> dict[str, Any] | None:
    """The CANCEL an ``async`` worker gets for the late ``reqs`` (their envs are cancelled and replaced;
    with ``truncation``, those with a last observation start as if just truncated); None: nothing to cancel."""
    late = [r for r in reqs if r.kind in THROTTLED]
    if not late:
        return None
    env_ids = np.concatenate([r.env_ids for r in late])
    fields: dict[str, Any] = {Key.ENV: env_ids.tolist()}
    if truncation is not None:
        steps = np.concatenate([r.env_ids for r in late if r.kind == "step"] or [env_ids[:0]])
        fields[Key.ENDED] = steps[truncation.has_obs[steps]].tolist()
    return fields


class Truncation:
    """Truncate mode (``on_timeout="truncate"``): each env's last observation, and the truncated rows owed.

    Args:
        num_envs: the pool's envs, ids ``0 .. num_envs - 1``.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self._last_obs: list[np.ndarray] | None = None  # one store per obs leaf, (num_envs, *leaf shape)
        self.has_obs = np.zeros(num_envs, dtype=np.bool_)
        self._replaced = np.zeros(num_envs, dtype=np.bool_)  # owes the caller a truncated row
        self.replaced_count = 0

    def remember(self, part: Part) -> None:
        """Keep each env's last observation, for the truncated row a late step gets."""
        leaves = part.obs or []
        ids = part.env_ids
        if part.errors:
            keep = np.ones(ids.size, dtype=np.bool_)
            keep[list(part.errors)] = False
            ids = ids[keep]
            leaves = [leaf[keep] for leaf in leaves]
        if self._last_obs is None:
            n = self.num_envs
            self._last_obs = [np.empty((n, *leaf.shape[1:]), dtype=leaf.dtype) for leaf in leaves]
        for store, leaf in zip(self._last_obs, leaves, strict=True):
            store[ids] = leaf
        self.has_obs[ids] = True

    def part(self, env_ids: np.ndarray, info: dict[str, Any]) -> Part:
        """Truncated rows for ``env_ids`` (each has a last observation), each with a copy of ``info``."""
        assert self._last_obs is not None
        n = env_ids.size
        obs = [store[env_ids] for store in self._last_obs]
        extras = [np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_), np.ones(n, dtype=np.bool_)]
        return Part(env_ids, obs, extras, [dict(info) for _ in range(n)])

    def answer(
        self, req: Request, info: dict[str, Any], otherwise: Callable[[int], AioEnvError]
    ) -> list[tuple[Part, np.ndarray]]:
        """``req``'s rows as ``(part, positions)``: truncated for envs with a last observation, else failed
        with ``otherwise(env_id)``."""
        has = self.has_obs[req.env_ids]
        positions = req.positions if req.positions is not None else np.arange(req.env_ids.size)
        out: list[tuple[Part, np.ndarray]] = []
        if has.any():
            idx = np.flatnonzero(has)
            out.append((self.part(req.env_ids[idx], info), positions[idx]))
        if not has.all():
            idx = np.flatnonzero(~has)
            out.append((Part.failed(req.env_ids[idx], otherwise), positions[idx]))
        return out

    def owe(self, env_ids: np.ndarray, must_reset: list[np.ndarray], answered: list[np.ndarray]) -> np.ndarray:
        """A restarted worker re-makes ``env_ids``: returns those that start as if just truncated (they have a
        last observation and no reset of theirs was lost, ``must_reset``); the ones among them not told yet
        (not in ``answered``) owe their caller a truncated row at their next step."""
        keep = self.has_obs[env_ids]
        if must_reset:
            keep &= ~np.isin(env_ids, np.concatenate(must_reset))
        ended: np.ndarray = env_ids[keep]
        owed = ended[~np.isin(ended, np.concatenate([*answered, ended[:0]]))]
        self._replaced[owed] = True
        self.replaced_count = int(np.count_nonzero(self._replaced))
        return ended

    def settle(
        self, kind: str, env_ids: np.ndarray, at: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None, tuple[Part, np.ndarray] | None]:
        """Clear the debts of ``env_ids`` (at positions ``at`` of the caller's call; None: all, in order): a
        step pays them with truncated rows (its next one starts a new episode), a reset simply clears them.
        Returns the rows still to send (ids, positions) and the owed rows ``(part, positions)`` to deliver."""
        mask = self._replaced[env_ids]
        if not mask.any():
            return env_ids, at, None
        idx = np.flatnonzero(mask)
        owed = env_ids[idx]
        self._replaced[owed] = False
        self.replaced_count -= owed.size
        if kind != "step":
            return env_ids, at, None
        paid = (self.part(owed, {"env_replaced": True}), idx if at is None else at[idx])
        rest = np.flatnonzero(~mask)
        return env_ids[rest], rest if at is None else at[rest], paid

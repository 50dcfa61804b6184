"""Which transitions an object's lifecycle took: :func:`record` swaps its :class:`~aioenv.core.lifecycle.Lifecycle`
for one that keeps the states it entered, in order, so a test can say which real event took which path."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from aioenv.core.lifecycle import Lifecycle, Transitions

__all__ = ["Recorded", "record"]

S = TypeVar("S", bound=enum.Enum)


class Recorded(Lifecycle[S]):
    """A lifecycle that also keeps every state it entered (``path``); a refused move is not kept."""

    def __init__(self, what: str, start: S, allowed: Transitions[S]) -> None:
        super().__init__(what, start, allowed)
        self.path: list[S] = []

    def move(self, to: S) -> S:
        """As :meth:`Lifecycle.move`, and ``to`` is kept."""
        was = super().move(to)
        self.path.append(to)
        return was


def record(owner: Any, allowed: Transitions[S]) -> Recorded[S]:
    """Make ``owner.life`` (moved along ``allowed``) keep its path from now on; returns it."""
    life: Lifecycle[S] = owner.life
    recorded = Recorded(life.what, life.state, allowed)
    owner.life = recorded
    return recorded

"""The serving process's cyclic garbage collector, kept off what has lived a while (:class:`LongLived`).

A port holding thousands of WebSocket connections holds a few hundred objects the collector tracks for each of
them (the ASGI stack's coroutines, the protocol's buffers and timers, the session): ~800,000 at 4,096
connections. CPython's full collection walks every one of them, each time a quarter more objects have reached
its oldest generation, which a port stepping thousands of sessions does every few seconds (the objects of a
step in flight live as long as the step); one such walk took ~300 ms of the only core the port's loop has, and
no session was answered meanwhile (the benchmark's p99 of 74 ms at 4,096 sessions). So the port's process
collects in two ways:

- every ``interval`` seconds, a full collection of what was not frozen yet (what was made since the last one:
  its cyclic garbage is collected as before), then :func:`gc.freeze`: what survived is left out of every later
  collection, so that a collection walks only what was made since (milliseconds at 4,096 sessions). A frozen
  object is still freed the moment nothing refers to it (reference counting); only cycles among frozen objects
  wait for the next whole collection.
- a whole collection (:func:`gc.unfreeze`, :func:`gc.collect`, freeze again) once the frozen objects have grown
  to ``growth`` times what the last one kept (or ``floor``, whichever is more): the cycles of what ended after it
  was frozen (a connection's objects are largely cycles when it ends) are freed then, so that they never hold
  more than ``growth - 1`` times the objects alive. That walk is as long as CPython's own, and comes as often as
  the heap grows fourfold: a port whose sessions stay, or end and are replaced a few thousand times, does none.
"""

from __future__ import annotations

import asyncio
import gc
import logging

__all__ = ["LongLived"]

log = logging.getLogger("aioenv.openenv")


class LongLived:
    """Freezes what survives a collection, and collects everything again as the frozen objects grow.

    Args:
        interval: seconds between the collections of what was made since the last one.
        growth: a whole collection comes once the frozen objects are this many times what the last one kept,
        floor: or this many, whichever is more.
    """

    def __init__(self, *, interval: float = 1.0, growth: float = 4.0, floor: int = 100_000) -> None:
        self.interval = interval
        self.growth = growth
        self.floor = floor
        self.kept = 0  # objects frozen by the last whole collection
        self.wholes = 0  # whole collections done
        self._unchecked = 0  # objects frozen since the frozen count was last counted (a walk of them all)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """A whole collection now, then one of the young objects every ``interval`` seconds (on the running loop)."""
        self.whole()
        self._task = asyncio.create_task(self._run())

    def close(self) -> None:
        """Stop, and give every frozen object back to the collector. Idempotent."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        gc.unfreeze()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.tick()

    def tick(self) -> None:
        """Collect what was made since the last tick and freeze what survives; then a whole collection if it is
        due."""
        gc.collect()
        young = len(gc.get_objects(generation=2))  # after a full collection every unfrozen object is there
        gc.freeze()
        self._unchecked += young
        bound = self.growth * max(self.kept, self.floor)
        # Counting the frozen objects walks them all (~10 ms at 800,000): only once enough were frozen since the
        # last count to reach the bound, were none of them freed.
        if self.kept + self._unchecked <= bound:
            return
        self._unchecked = 0
        if gc.get_freeze_count() > bound:
            self.whole()

    def whole(self) -> None:
        """Collect every object, frozen or not, then freeze what survives."""
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self.kept = gc.get_freeze_count()
        self._unchecked = 0
        self.wholes += 1
        log.debug("whole collection: %d unreachable, %d kept", found, self.kept)

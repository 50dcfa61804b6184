"""Recycling workers whose memory grows: ``max_worker_rss``.

An env that leaks (a simulator that never frees a buffer, a browser tab that keeps every page) makes
its worker's memory grow until the machine swaps or the OOM killer picks a process, perhaps not
that one. With ``max_worker_rss`` a pool checks its local workers' resident memory once a second
(``/proc/PID/statm``, no dependency); a worker over the limit is *recycled* the next moment it has
no request in flight: it is stopped, a fresh worker re-makes its envs with their recorded seeds, and
each env's next step raises :class:`~aioenv.errors.EnvRemade` saying so (reset it and go on). A
recycled worker is not a crash: it never counts toward giving a slot up.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable

__all__ = ["MemoryWatch", "rss_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid`` in bytes; None when it cannot be read (gone, not local)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class MemoryWatch:
    """Every ``interval`` seconds, calls ``over(index, rss)`` for each ``(index, pid)`` of ``workers()``
    whose resident memory passed ``limit`` bytes."""

    def __init__(
        self,
        limit: int,
        workers: Callable[[], Iterable[tuple[int, int]]],
        over: Callable[[int, int], None],
        interval: float = 1.0,
    ) -> None:
        self.limit, self.interval = limit, interval
        self._workers, self._over = workers, over
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(interval, self._check)

    def _check(self) -> None:
        for index, pid in self._workers():
            rss = rss_bytes(pid)
            if rss is not None and rss > self.limit:
                self._over(index, rss)
        self._handle = self._loop.call_later(self.interval, self._check)

    def close(self) -> None:
        """Stop checking."""
        self._handle.cancel()

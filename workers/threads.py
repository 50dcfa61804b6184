"""Env threads of the ``thread`` executor, and how their results reach the worker's event loop.

Each env lives on a daemon thread of its own (:class:`EnvThread`) that runs its calls in order.

- Rare calls (make, ``env_method``, close) come back as loop futures: :meth:`EnvThread.run`.
- Steps and resets go through :class:`Finished`, because they are the hot path. With a future per step, a row
  would cost three loop turns before its reply went out: the thread's wake-up settling the future, the
  future's done callback, then the flush. With 64 envs of 20 ms on 2 vCPUs those turns were a third of the
  latency a pool adds to a step. :class:`Finished` instead collects the rows finished on any thread. It wakes
  the loop once per burst (a second thread that finishes before the loop ran adds its row to the same
  wake-up), and the loop answers every row it holds in that one turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["EnvThread", "Finished"]

T = TypeVar("T")
#: What a thread reports when a call ends: ``(True, its value)`` or ``(False, the exception it raised)``.
Report = Callable[[bool, Any], None]


class Finished(Generic[T]):
    """Rows finished on env threads, handed to the loop's ``handler`` in bursts (see the module docstring).

    ``put`` is called from any thread; ``handler(items)`` runs on the loop, with every item put since the
    last call, in the order they were put."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: Callable[[list[T]], None]) -> None:
        self._loop = loop
        self._handler = handler
        self._lock = threading.Lock()
        self._items: list[T] = []

    def put(self, item: T) -> None:
        """Hand ``item`` to the loop: the first item of a burst wakes it, later ones join that wake-up."""
        with self._lock:
            self._items.append(item)
            if len(self._items) > 1:
                return  # a wake-up is on its way and has not taken the items yet
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is exiting, nobody waits for it
            self._loop.call_soon_threadsafe(self._take)

    def _take(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        self._handler(items)


class EnvThread:
    """A daemon thread that runs one env's calls in order (see the module docstring)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Report] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn()`` on this thread; the future (of the loop) gets its result or exception."""
        fut: asyncio.Future[Any] = self._loop.create_future()

        def report(ok: bool, value: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is exiting
                self._loop.call_soon_threadsafe(_settle, fut, ok, value)

        self._queue.put((fn, report))
        return fut

    def submit(self, fn: Callable[[], Any], report: Report) -> None:
        """Run ``fn()`` on this thread, then call ``report(ok, value)`` on it (no loop future: see the module)."""
        self._queue.put((fn, report))

    def stop(self) -> None:
        """Let the thread end after the calls already queued."""
        self._queue.put(None)

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, report = item
            try:
                ok, value = True, fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the loop as the call's outcome
                ok, value = False, exc
            report(ok, value)


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)

"""The event loop aioenv runs on: uvloop when it is installed, else asyncio's own.

:func:`new_event_loop` is the one place that choice is made; :func:`run` (public as ``aioenv.run``),
the sync facade's loop thread and the worker runtime all use it. :func:`consume` marks a future's
outcome as seen where no caller will read it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when uvloop is installed (faster socket wake-ups), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Like ``asyncio.run(main)``, on the loop of :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
        return runner.run(main)


def consume(fut: asyncio.Future[Any]) -> None:
    """Mark the outcome of a future no caller will read (an interrupted call, a call running on in the
    background) as retrieved, so asyncio does not log its exception as never retrieved."""
    if not fut.cancelled():
        fut.exception()

"""``aioenv.run``: run a coroutine on uvloop when it is installed, else on asyncio's loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Like ``asyncio.run(main)``, on uvloop when available (faster socket wake-ups)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main, debug=debug)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop, debug=debug) as runner:
        return runner.run(main)

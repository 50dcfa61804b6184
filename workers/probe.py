"""Time one env's steps (``executor="auto"``): what :mod:`aioenv.core.costs` decides a pool's placement from.

A pool asks a short-lived worker process of its own (a PROBE request) rather than timing the env in its
own process: an env that hangs, crashes the interpreter or takes long to make costs that process, never
the pool's caller. The env is made from the pool's source for env 0, reset with the pool's first seed,
and stepped with actions sampled from its action space (outside the timing: a pool's caller brings its
own), each step timed: up to :data:`PROBE_STEPS` steps within :data:`PROBE_SECONDS` (the first two are
warm-up, unless already slow: a step of a millisecond or more is measured as it is), summed up by
:func:`robust_mean`. The env is closed afterwards.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from workers.hosted import is_async_env

__all__ = ["CHUNKS", "PROBE_SECONDS", "PROBE_STEPS", "probe_env", "robust_mean"]

log = logging.getLogger("aioenv.worker")

#: At most this long is spent stepping (wall time), and at most :data:`PROBE_STEPS` steps are timed.
PROBE_SECONDS = 0.02
PROBE_STEPS = 64
#: Consecutive runs of the timed steps whose means :func:`robust_mean` takes the median of.
CHUNKS = 5
#: Steps this slow are measured from the first one (no warm-up: it would only cost time).
SLOW_STEP = 1e-3


def probe_env(factory: Callable[[], Any], seed: int | None) -> dict[str, Any]:
    """``{"step": wall s, "cpu": CPU s}`` per step of one env made by ``factory``, or ``{"async": True}`` for an
    env whose ``step`` is a coroutine; raises what the env raises."""
    env = factory()
    try:
        if is_async_env(env):
            return {"async": True}
        env.action_space.seed(seed)
        env.reset(seed=seed)
        warm = 2
        walls: list[float] = []
        cpus: list[float] = []
        start = time.perf_counter()
        while len(walls) < PROBE_STEPS and (not walls or time.perf_counter() - start < PROBE_SECONDS):
            action = env.action_space.sample()  # the pool's caller brings its actions: not the env's cost
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            _step(env, action)
            wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
            if warm and wall < SLOW_STEP:
                warm -= 1  # first-step checks (gymnasium's env checker), cold caches
                continue
            warm = 0
            walls.append(wall)
            cpus.append(cpu)
        return {"step": robust_mean(walls), "cpu": robust_mean(cpus)}
    finally:
        _close(env)


def robust_mean(samples: list[float]) -> float:
    """The median of the means of :data:`CHUNKS` consecutive runs of ``samples`` (fewer with fewer samples).

    A plain mean lets one preemption of the probe's process (milliseconds, on a busy machine) swell a
    microsecond step many times over; a median would drop a dear step that comes every few steps (a reset at
    the end of a short episode). Each run's mean keeps those, and the median of the runs drops the one a
    preemption hit."""
    chunks = max(1, min(CHUNKS, len(samples)))
    size = len(samples) / chunks
    means = [statistics.fmean(samples[round(i * size) : round((i + 1) * size)]) for i in range(chunks)]
    return statistics.median(means)


def _step(env: Any, action: Any) -> None:
    _, _, terminated, truncated, _ = env.step(action)
    if terminated or truncated:
        env.reset()


def _close(env: Any) -> None:
    try:
        closing = env.close()
        if inspect.isawaitable(closing):
            asyncio.run(_awaited(closing))
    except Exception:  # a failing close of the probe's env must not hide its timings
        log.debug("closing the probe env failed", exc_info=True)


async def _awaited(awaitable: Any) -> None:
    await awaitable

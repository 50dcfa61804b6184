"""Time one env's steps (``executor="auto"``): what :mod:`aioenv.core.costs` decides a pool's placement from.

A pool asks a short-lived worker process of its own (a PROBE request) rather than timing the env in its
own process: an env that hangs, crashes the interpreter or takes long to make costs that process, never
the pool's caller. The env is made from the pool's source for env 0, reset with the pool's first seed,
and stepped with :data:`ACTIONS` actions sampled from its action space, taken in turn (sampled before the
timing: a pool's caller brings its own), then closed.

A step of :data:`SLOW_STEP` or more is timed one at a time, from the first (when the first is slow but
under :data:`PROBE_SECONDS`, the next decides, and while that one is slow too the next, up to
:data:`SLOW_STEPS` single steps: one pause of the process, or two on a busy machine, must not make a cheap env
slow, and a slow env's extra steps cost at most that long each). A cheaper one is timed the way
it will run, many steps back to back: a fresh process's first milliseconds run slow (cold caches, memory
the allocator touches for the first time), and a clock read around each step of a few microseconds adds a
tenth to it, so :data:`WARM_SECONDS` of steps go first, untimed, then :data:`CHUNKS` runs of steps are timed
whole, each about ``PROBE_SECONDS / CHUNKS`` long (at most :data:`MAX_RUN` steps). The step's cost is the
median of the runs' means (:func:`robust_mean` for single steps): a reset every few steps stays in, one
preemption of the process (milliseconds, on a busy machine) does not.
"""

from __future__ import annotations

import inspect
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from workers.hosted import is_async_env

__all__ = [
    "ACTIONS",
    "CHUNKS",
    "MAX_RUN",
    "PROBE_SECONDS",
    "SLOW_STEP",
    "SLOW_STEPS",
    "WARM_SECONDS",
    "probe_env",
    "robust_mean",
]

log = logging.getLogger("aioenv.worker")

#: About this long is spent on timed steps (wall time; a slow env's single step may take longer).
PROBE_SECONDS = 0.02
#: Untimed steps first, for about this long (steps under :data:`SLOW_STEP` only).
WARM_SECONDS = 0.005
#: Runs of timed steps whose means :func:`robust_mean` takes the median of.
CHUNKS = 5
#: Steps this slow are timed one at a time from the first one (a warm-up would only cost time).
SLOW_STEP = 1e-3
#: A cheap env is judged slow only when this many single steps in a row, the first included, take SLOW_STEP.
SLOW_STEPS = 3
#: Actions sampled before the timing, stepped in turn.
ACTIONS = 16
#: At most this many steps in one timed run.
MAX_RUN = 256


def probe_env(factory: Callable[[], Any], seed: int | None) -> dict[str, Any]:
    """``{"step": wall s, "cpu": CPU s}`` per step of one env made by ``factory``, or ``{"async": True}`` for an
    env whose ``step`` is a coroutine; raises what the env raises."""
    env = factory()
    try:
        if is_async_env(env):
            return {"async": True}
        env.action_space.seed(seed)
        env.reset(seed=seed)
        actions = [env.action_space.sample() for _ in range(ACTIONS)]
        start = time.perf_counter()
        timed = [_timed(env, actions, 1)]
        while SLOW_STEP <= timed[-1][0] < PROBE_SECONDS and len(timed) < SLOW_STEPS:  # or paused (a preemption)
            timed.append(_timed(env, actions, 1, len(timed)))
        if timed[-1][0] >= SLOW_STEP:
            return _one_by_one(env, actions, timed, start)
        warm = _until(env, actions, WARM_SECONDS)
        size = max(1, min(MAX_RUN, int(PROBE_SECONDS / CHUNKS / max(warm, 1e-7))))
        runs = [_timed(env, actions, size) for _ in range(CHUNKS)]
        return {"step": statistics.median(w for w, _ in runs), "cpu": statistics.median(c for _, c in runs)}
    finally:
        _close(env)


def _timed(env: Any, actions: list[Any], steps: int, first: int = 0) -> tuple[float, float]:
    """Wall and CPU seconds per step of ``steps`` steps back to back, with ``actions`` in turn from ``first``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(first, first + steps):
        _step(env, actions[i % len(actions)])
    return (time.perf_counter() - wall) / steps, (time.thread_time() - cpu) / steps


def _until(env: Any, actions: list[Any], seconds: float) -> float:
    """Step for about ``seconds`` (at least one step); the wall seconds per step."""
    start = time.perf_counter()
    steps, elapsed = 0, 0.0
    while not steps or elapsed < seconds:
        _step(env, actions[steps % len(actions)])
        steps += 1
        elapsed = time.perf_counter() - start
    return elapsed / steps


def _one_by_one(env: Any, actions: list[Any], timed: list[tuple[float, float]], start: float) -> dict[str, float]:
    """A slow env's steps, each timed: those ``timed`` already and more until :data:`PROBE_SECONDS` after
    ``start`` (at most :data:`MAX_RUN`)."""
    walls, cpus = [wall for wall, _ in timed], [cpu for _, cpu in timed]
    while len(walls) < MAX_RUN and time.perf_counter() - start < PROBE_SECONDS:
        wall, cpu = _timed(env, actions, 1, len(walls))
        walls.append(wall)
        cpus.append(cpu)
    return {"step": robust_mean(walls), "cpu": robust_mean(cpus)}


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
            import asyncio  # (here: only an async env's close needs it; every worker imports this module)

            asyncio.run(_awaited(closing))
    except Exception:  # a failing close of the probe's env must not hide its timings
        log.debug("closing the probe env failed", exc_info=True)


async def _awaited(awaitable: Any) -> None:
    await awaitable

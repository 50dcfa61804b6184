"""``aioenv bench``: env-steps/s of a pool on any env id, with a progress bar.

A quick check of one machine and one env, not the peer comparison (that is
``benchmarks/bench_core.py``). It measures ``await pool.step`` on every env and
EnvPool-style ``send``/``recv`` with a batch of half the pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import aioenv


@dataclass
class BenchResult:
    """Env-steps per second of each mode."""

    env: str
    num_envs: int
    num_workers: int
    startup_s: float
    step_per_s: float
    sendrecv_per_s: float


async def run_bench(
    env: str,
    num_envs: int,
    seconds: float,
    num_workers: int | None = None,
    progress: Callable[[float], Any] | None = None,
) -> BenchResult:
    """Measure ``step`` then ``send``/``recv`` for ``seconds`` each; ``progress(fraction)`` is called as it goes."""
    tick = progress or (lambda _fraction: None)
    start = time.perf_counter()
    batch = max(1, num_envs // 2)
    async with aioenv.Pool(env, num_envs, num_workers=num_workers, batch_size=batch) as pool:
        await pool.reset(seed=0)
        startup = time.perf_counter() - start
        pool.action_space.seed(0)
        actions = [np.asarray(pool.action_space.sample()) for _ in range(16)]
        k = 0
        t0 = time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            await pool.step(actions[k % len(actions)])
            k += 1
            tick(0.5 * elapsed / seconds)
        step_rate = k * num_envs / (time.perf_counter() - t0)
        pool.send(actions[0])
        rows = 0
        t0 = time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            *_, info = await pool.recv()
            ids = info["env_id"]
            rows += ids.size
            pool.send(actions[rows % len(actions)][ids], ids)
            tick(0.5 + 0.5 * elapsed / seconds)
        sendrecv_rate = rows / (time.perf_counter() - t0)
        await pool.recv(min_results=num_envs)  # what is still in flight
        tick(1.0)
        return BenchResult(env, num_envs, pool.num_workers, startup, step_rate, sendrecv_rate)

"""What keeping env code out of the caller's process costs and buys: the default ``executor="auto"`` before and
after it stopped placing envs in the caller's process.

"Before" is a pool made with ``allow_in_process=True``: ``auto``'s placement as it was the default until then
(the same probe, the same model). Two parts, in one run:

- **throughput**: lock-step ``await pool.step()`` of CartPole-v1 n = 8 and n = 32, env-steps/s, the two pools
  alternated in ``--slice`` s slices for ``--rounds`` rounds in one process (each open the whole time), and the
  median of the per-round ratios;
- **heartbeat**: ``--envs`` envs (``tests.envs.turning:TurningEnv``, timed cheap by the probe) whose steps then
  take ``--step-seconds`` each: the worst lateness of a 10 ms asyncio heartbeat over one ``await pool.step()``,
  and how long ``asyncio.wait_for(pool.step(...), 0.5)`` took to return.

Run from the repo root (the issue's scenario, 8 envs of 2 s: about a minute)::

    .venv/bin/python benchmarks/bench_isolation.py
    .venv/bin/python benchmarks/bench_isolation.py --step-seconds 0.2 --rounds 5   # quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import aioenv  # noqa: E402

PLACEMENTS = {"before (allow_in_process=True)": {"allow_in_process": True}, "after (default)": {}}


async def steps_per_second(pool: aioenv.Pool, actions: np.ndarray, seconds: float) -> float:
    """Env-steps/s of lock-step ``step()`` calls for ``seconds``."""
    calls = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        await pool.step(actions)
        calls += 1
    return calls * pool.num_envs / elapsed


async def throughput(n: int, rounds: int, slice_s: float) -> dict[str, Any]:
    """Both placements of ``n`` CartPole envs, alternated; each one's median env-steps/s and the median ratio."""
    pools = {name: await aioenv.make("CartPole-v1", n, seed=0, **opts) for name, opts in PLACEMENTS.items()}
    try:
        actions = np.zeros(n, np.int64)
        for pool in pools.values():
            await pool.reset()
            await steps_per_second(pool, actions, slice_s)  # warm
        speeds: dict[str, list[float]] = {name: [] for name in pools}
        for _ in range(rounds):
            for name, pool in pools.items():
                speeds[name].append(await steps_per_second(pool, actions, slice_s))
        before, after = (speeds[name] for name in PLACEMENTS)
        return {
            "placements": {name: pool.describe_placement() for name, pool in pools.items()},
            "speeds": {name: statistics.median(values) for name, values in speeds.items()},
            "ratio": statistics.median(a / b for a, b in zip(after, before, strict=True)),
        }
    finally:
        for pool in pools.values():
            await pool.aclose()


async def heartbeat(opts: dict[str, Any], envs: int, step_seconds: float) -> dict[str, Any]:
    """The worst lateness of a 10 ms heartbeat over one step of ``envs`` envs turned slow, the step's seconds,
    and the seconds ``wait_for(pool.step(...), 0.5)`` took to return."""
    loop = asyncio.get_running_loop()
    worst = 0.0

    async def beat() -> None:
        nonlocal worst
        while True:
            due = loop.time() + 0.01
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - due)

    pool = await aioenv.make("tests.envs.turning:TurningEnv", envs, seed=0, **opts)
    try:
        placed = pool.describe_placement()
        await pool.reset()
        await pool.set_attr("seconds", step_seconds)
        await pool.set_attr("fault", "slow")
        actions = np.zeros(envs, np.int64)
        task = asyncio.create_task(beat())
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        await pool.step(actions)
        step = time.perf_counter() - start
        await asyncio.sleep(0.05)  # a beat held up by the step sees how late it is only after it
        task.cancel()
        start = time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pool.step(actions), 0.5)
        waited = time.perf_counter() - start
    finally:
        start = time.perf_counter()
        await pool.aclose()
        closed = time.perf_counter() - start
    return {"placement": placed, "late": worst, "step": step, "wait_for": waited, "aclose": closed}


async def main(args: argparse.Namespace) -> None:
    print(f"heartbeat: {args.envs} envs whose steps become {args.step_seconds:g} s each")
    for name, opts in PLACEMENTS.items():
        h = await heartbeat(opts, args.envs, args.step_seconds)
        print(
            f"  {name}: heartbeat {h['late'] * 1e3:,.0f} ms late, step() {h['step']:.2f} s, "
            f"wait_for(step(), 0.5) returned after {h['wait_for']:.2f} s, aclose {h['aclose']:.2f} s "
            f"[{h['placement']}]"
        )
    print(f"throughput: lock-step step() of CartPole-v1, {args.rounds} alternated rounds of {args.slice:g} s")
    for n in (8, 32):
        t = await throughput(n, args.rounds, args.slice)
        cells = ", ".join(f"{name} {speed:,.0f} steps/s" for name, speed in t["speeds"].items())
        print(f"  n = {n}: {cells}; after/before {t['ratio']:.2f}x")
        for name, placed in t["placements"].items():
            print(f"    {name}: {placed}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8, help="envs of the heartbeat part (default 8)")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="their steps' seconds (default 2)")
    parser.add_argument("--rounds", type=int, default=15, help="alternated rounds per size (default 15)")
    parser.add_argument("--slice", type=float, default=0.2, help="seconds per slice (default 0.2)")
    asyncio.run(main(parser.parse_args()))

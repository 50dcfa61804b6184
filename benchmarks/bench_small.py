"""Small lock-step pools against ``SyncVectorEnv``, timed so that the VM's noise cancels out: the fastest bursts.

``bench_core.py`` measures env-steps per second over seconds-long windows; on a shared VM those move by 20% from
one second to the next, more than what separates a pool of 8 or 32 cheap envs from ``SyncVectorEnv``. This
benchmark times what each call costs when the machine leaves it alone: in one process, ``SyncVectorEnv.step``
and ``await pool.step`` over the same CartPole-v1 envs and pre-sampled actions, ``--rounds`` alternated rounds,
each the fastest of ``--bursts`` bursts of ``--calls`` calls per side. The figure is the median over rounds of
``SyncVectorEnv``'s time over the pool's (above 1.0x: the pool is faster). Pools: ``executor="auto"`` (what a
user gets; its placement is printed) and ``executor="in_process"``. Run from the repo root::

    .venv/bin/python benchmarks/bench_small.py                 # about a minute
    .venv/bin/python benchmarks/bench_small.py --quick --out /tmp/small.json

Writes ``benchmarks/results/small.json`` (or ``--out``) and the table as ``.md`` next to it, and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from benchutil import md_table, run_header, write_atomic  # noqa: E402
from gymnasium.vector import SyncVectorEnv  # noqa: E402
from recorded import settings  # noqa: E402

import aioenv  # noqa: E402

ENV_ID = "CartPole-v1"
EXECUTORS = ("auto", "in_process")
#: Pre-sampled action batches, cycled.
ACTION_BATCHES = 16
#: Under the table: how its columns relate (a round's two sides run back to back, on the same machine state).
NOTE = "µs/call: each side's median over rounds; the speed: the median of the per-round ratios."
BAR = 1.0  # issue 21: lock-step step() of 8 and 32 CartPole envs >= 1.0x SyncVectorEnv


def fastest(call: Callable[[int], object], bursts: int, calls: int) -> float:
    """Seconds per call of the fastest of ``bursts`` bursts of ``calls`` calls."""
    best = float("inf")
    for _ in range(bursts):
        start = time.perf_counter()
        for i in range(calls):
            call(i)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


async def afastest(call: Callable[[int], Awaitable[object]], bursts: int, calls: int) -> float:
    """:func:`fastest` of a coroutine function."""
    best = float("inf")
    for _ in range(bursts):
        start = time.perf_counter()
        for i in range(calls):
            await call(i)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


async def measure(n: int, executor: str, args: argparse.Namespace) -> dict[str, Any]:
    """One size and executor: both sides' per-call seconds per round and the median ratio."""
    sync = SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(n)])
    pool = await aioenv.make(ENV_ID, n, seed=0, executor=executor)
    try:
        sync.reset(seed=0)
        await pool.reset(seed=0)
        rng = np.random.default_rng(0)
        acts = [rng.integers(0, 2, n) for _ in range(ACTION_BATCHES)]

        def sync_step(i: int) -> object:
            return sync.step(acts[i % ACTION_BATCHES])

        async def pool_step(i: int) -> object:
            return await pool.step(acts[i % ACTION_BATCHES])

        fastest(sync_step, 2, args.calls)  # warm-up
        await afastest(pool_step, 2, args.calls)
        sides: dict[str, list[float]] = {"sync_s": [], "pool_s": []}
        for r in range(args.rounds):
            for side in ("sync_s", "pool_s") if r % 2 == 0 else ("pool_s", "sync_s"):
                if side == "sync_s":
                    sides[side].append(fastest(sync_step, args.bursts, args.calls))
                else:
                    sides[side].append(await afastest(pool_step, args.bursts, args.calls))
        per_round = [s / p for s, p in zip(sides["sync_s"], sides["pool_s"], strict=True)]
        return {
            "placement": pool.describe_placement(),
            "sync_us": statistics.median(sides["sync_s"]) * 1e6,
            "pool_us": statistics.median(sides["pool_s"]) * 1e6,
            "ratio": statistics.median(per_round),
            "per_round": [round(x, 4) for x in per_round],
        }
    finally:
        sync.close()
        await pool.aclose()


def render(results: dict[str, Any], header: dict[str, Any]) -> str:
    """The Markdown table of the results, with the command that produced them."""
    head = ["CartPole-v1, lock-step", "executor", "SyncVectorEnv µs/call", "pool µs/call", "pool speed / Sync"]
    rows = []
    for key, cell in results.items():
        n, executor = key.split("/")
        mark = f" (bar >= {BAR:.1f}x: {'met' if cell['ratio'] >= BAR else 'MISSED'})" if executor == "auto" else ""
        rows.append(
            [f"n = {n}", executor, f"{cell['sync_us']:.1f}", f"{cell['pool_us']:.1f}", f"{cell['ratio']:.3f}x{mark}"]
        )
    lines = [f"`{header['command']}` ({header['date']})", "", *md_table(head, rows, left=2), ""]
    lines += [NOTE, ""]
    lines += [f"- n = {k.split('/')[0]}, {k.split('/')[1]}: {c['placement']}" for k, c in results.items()]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="8,32", help="comma-separated env counts (default 8,32)")
    p.add_argument("--rounds", type=int, default=10, help="alternated rounds per pool (default 10)")
    p.add_argument("--bursts", type=int, default=60, help="bursts per side and round; the fastest counts")
    p.add_argument("--calls", type=int, default=30, help="calls per burst")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 3 bursts of 5 calls")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "small.json")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.bursts, args.calls = 2, 3, 5
    try:
        args.sizes = [int(s) for s in str(args.sizes).split(",")]
    except ValueError:
        p.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    for name in ("rounds", "bursts", "calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if any(n < 1 for n in args.sizes):
        p.error(f"--sizes must be >= 1 each, got {args.sizes}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = run_header()
    results: dict[str, Any] = {}
    for n in args.sizes:
        for executor in EXECUTORS:
            cell = aioenv.run(measure(n, executor, args))
            results[f"{n}/{executor}"] = cell
            print(f"n={n} {executor}: {cell['ratio']:.3f}x ({cell['placement']})", flush=True)
    text = render(results, header)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps({**header, "args": settings(args), "results": results}))
    write_atomic(args.out.with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

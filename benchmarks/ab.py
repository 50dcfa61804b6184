"""Two checkouts of aioenv, alternated round by round on one workload: did a change make the pool slower?

On a shared VM a process's speed swings by up to 2x within seconds, so one run of each checkout says little. This
script runs the same lock-step loop (``await pool.step(actions)`` on CartPole-v1, the default executor) in a fresh
process of each checkout in turn, ``--rounds`` times, and reports the median and quartiles of the per-round ratios
``new / base`` of throughput (env steps per second) and of the pool process's CPU per step (``time.process_time``
over the loop: the pool's own cost, workers excluded). Pairs measured seconds apart share the machine's mood.

    python benchmarks/ab.py --base /path/to/old/checkout --new . --envs 8 32 --rounds 16 --seconds 2

A checkout is any folder holding ``aioenv/`` and ``workers/`` (``git worktree add /tmp/base <rev>``, or
``git archive <rev> | tar -x -C /tmp/base``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: The loop each round runs, in the checkout's own interpreter process; prints one JSON line.
_ROUND = """
import json, sys, time
import numpy as np
import aioenv

async def main(n: int, seconds: float) -> None:
    async with aioenv.Pool("CartPole-v1", n, seed=0) as pool:
        await pool.reset()
        act = np.zeros(n, dtype=np.int64)
        for _ in range(100):
            await pool.step(act)
        steps, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                await pool.step(act)
            steps += 20
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"steps_per_s": steps * n / wall, "cpu_us_per_step": cpu / steps * 1e6}))

aioenv.run(main(int(sys.argv[1]), float(sys.argv[2])))
"""


def one_round(checkout: Path, envs: int, seconds: float) -> dict[str, float]:
    """One loop of ``envs`` envs for ``seconds`` in a fresh process importing ``checkout``'s aioenv."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run(
        [sys.executable, "-c", _ROUND, str(envs), str(seconds)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120 + 2 * seconds,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    q1, _mid, q3 = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.3f} ({q1:.3f}-{q3:.3f})"


def main(argv: list[str] | None = None) -> int:
    """Alternate the checkouts round by round for each ``--envs``; print a Markdown table of the ratios."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, required=True, help="the checkout before the change")
    p.add_argument("--new", type=Path, default=Path("."), help="the checkout after it (default: here)")
    p.add_argument("--envs", type=int, nargs="+", default=[8, 32], help="one workload per value")
    p.add_argument("--rounds", type=int, default=16, help="rounds per workload (each runs base, then new)")
    p.add_argument("--seconds", type=float, default=2.0, help="seconds of stepping per process")
    args = p.parse_args(argv)
    for name in ("base", "new"):
        tree = getattr(args, name).resolve()
        if not (tree / "aioenv").is_dir():
            p.error(f"--{name} {tree} holds no aioenv/ package: give a checkout of the project")
        setattr(args, name, tree)
    if args.rounds < 1 or args.seconds <= 0 or min(args.envs) < 1:
        p.error("--rounds and --envs must be at least 1 and --seconds positive")
    print("| envs | rounds | steps/s new/base | pool CPU per step new/base | CPU µs per step base / new (medians) |")
    print("| --: | --: | --: | --: | --: |")
    for n in args.envs:
        pairs = [
            (one_round(args.base, n, args.seconds), one_round(args.new, n, args.seconds)) for _ in range(args.rounds)
        ]
        speed = [new["steps_per_s"] / base["steps_per_s"] for base, new in pairs]
        cpu = [new["cpu_us_per_step"] / base["cpu_us_per_step"] for base, new in pairs]
        base_cpu = statistics.median(base["cpu_us_per_step"] for base, _ in pairs)
        new_cpu = statistics.median(new["cpu_us_per_step"] for _, new in pairs)
        print(
            f"| {n} | {args.rounds} | {_spread(speed)} | {_spread(cpu)} | {base_cpu:.1f} / {new_cpu:.1f} |", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

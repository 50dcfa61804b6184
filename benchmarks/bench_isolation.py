"""What keeping env code out of the caller's process costs and buys: the default ``executor="auto"`` before and
after it stopped placing envs in the caller's process.

"Before" is a pool made with ``allow_in_process=True``: ``auto``'s placement as it was the default until then
(the same probe, the same model); ``in_process`` is ``executor="in_process"``, whose env code now runs on a
thread of this process that holds the loop at most ``max_loop_hold`` (0.01 s). Three parts, in one run:

- **throughput**: lock-step ``await pool.step()`` of CartPole-v1 n = 8 and n = 32, env-steps/s, the two pools
  alternated in ``--slice`` s slices for ``--rounds`` rounds in one process (each open the whole time), and the
  median of the per-round ratios;
- **heartbeat**: ``--envs`` envs (``tests.envs.turning:TurningEnv``, timed cheap by the probe) whose steps then
  take ``--step-seconds`` each: the worst lateness of a 10 ms asyncio heartbeat over one ``await pool.step()``,
  and how long ``asyncio.wait_for(pool.step(...), 0.5)`` took to return;
- with ``--tree-before DIR`` (a checkout of the code before, with its own ``.venv``): ``executor="in_process"``
  lock-step CartPole n = 8 and 32 in that tree's code against this one's, in two child processes alternated in
  0.2 s slices (the loop-thread design against the env thread).

Run from the repo root (the issue's scenario, 8 envs of 2 s: about a minute)::

    .venv/bin/python benchmarks/bench_isolation.py
    .venv/bin/python benchmarks/bench_isolation.py --step-seconds 0.2 --rounds 5   # quick
    .venv/bin/python benchmarks/bench_isolation.py --tree-before /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import aioenv  # noqa: E402

PLACEMENTS: dict[str, dict[str, Any]] = {
    "before (allow_in_process=True)": {"allow_in_process": True},
    "after (default)": {},
    "in_process (env thread)": {"executor": "in_process"},
}
BEFORE = next(iter(PLACEMENTS))


async def steps_per_second(pool: aioenv.Pool, actions: np.ndarray, seconds: float) -> float:
    """Env-steps/s of lock-step ``step()`` calls for ``seconds``."""
    calls = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        await pool.step(actions)
        calls += 1
    return calls * pool.num_envs / elapsed


async def throughput(n: int, rounds: int, slice_s: float) -> dict[str, Any]:
    """The :data:`PLACEMENTS` of ``n`` CartPole envs, alternated: each one's median env-steps/s and the median of
    its per-round ratios to :data:`BEFORE`'s."""
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
        return {
            "placements": {name: pool.describe_placement() for name, pool in pools.items()},
            "speeds": {name: statistics.median(values) for name, values in speeds.items()},
            "ratios": {
                name: statistics.median(a / b for a, b in zip(values, speeds[BEFORE], strict=True))
                for name, values in speeds.items()
            },
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
        cells = ", ".join(
            f"{name} {speed:,.0f} steps/s ({t['ratios'][name]:.2f}x)" for name, speed in t["speeds"].items()
        )
        print(f"  n = {n}: {cells}")
        for name, placed in t["placements"].items():
            print(f"    {name}: {placed}")
    if args.tree_before is not None:
        print(f"in_process, lock-step step() of CartPole-v1: {args.tree_before} against this tree, alternated")
        for n in (8, 32):
            speeds = trees(args.tree_before, n, args.rounds, args.slice)
            ratio = statistics.median(a / b for a, b in zip(speeds["after"], speeds["before"], strict=True))
            print(
                f"  n = {n}: before {statistics.median(speeds['before']):,.0f} steps/s, "
                f"after {statistics.median(speeds['after']):,.0f} steps/s ({ratio:.2f}x)"
            )


#: A child process of :func:`trees`: an ``in_process`` pool of ``argv[1]`` CartPole envs that steps for the
#: seconds each line of its input says and answers with the env-steps/s.
CHILD = """
import asyncio, sys, time
import numpy as np
import aioenv

async def main(n):
    pool = await aioenv.make("CartPole-v1", n, executor="in_process", seed=0)
    await pool.reset()
    actions = np.zeros(n, np.int64)
    print("ready", flush=True)
    for line in sys.stdin:
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < float(line):
            await pool.step(actions)
            calls += 1
        print(calls * n / elapsed, flush=True)
    await pool.aclose()

asyncio.run(main(int(sys.argv[1])))
"""


def trees(before: Path, n: int, rounds: int, slice_s: float) -> dict[str, list[float]]:
    """Env-steps/s of ``in_process`` pools of ``n`` CartPole envs run by ``before``'s code and this tree's, in two
    child processes alternated in ``slice_s`` s slices (a first, warming round uncounted)."""
    kids = {}
    for name, root in (("before", before), ("after", ROOT)):
        env = dict(os.environ, PYTHONPATH=str(root))
        kids[name] = subprocess.Popen(
            [str(root / ".venv" / "bin" / "python"), "-c", CHILD, str(n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root,
        )  # fmt: skip
    speeds: dict[str, list[float]] = {name: [] for name in kids}
    try:
        for kid in kids.values():
            assert kid.stdout is not None
            assert kid.stdout.readline().strip() == "ready"
        for counted in [False] + [True] * rounds:
            for name, kid in kids.items():
                assert kid.stdin is not None
                assert kid.stdout is not None
                kid.stdin.write(f"{slice_s}\n")
                kid.stdin.flush()
                speed = float(kid.stdout.readline())
                if counted:
                    speeds[name].append(speed)
    finally:
        for kid in kids.values():
            if kid.stdin is not None:
                kid.stdin.close()
            kid.wait(60)
    return speeds


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8, help="envs of the heartbeat part (default 8)")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="their steps' seconds (default 2)")
    parser.add_argument("--rounds", type=int, default=15, help="alternated rounds per size (default 15)")
    parser.add_argument("--slice", type=float, default=0.2, help="seconds per slice (default 0.2)")
    parser.add_argument("--tree-before", type=Path, help="a checkout of the code before (with its own .venv)")
    asyncio.run(main(parser.parse_args()))

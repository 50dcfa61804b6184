"""Two checkouts of aioenv, alternated round by round on one workload: did a change make the pool slower?

On a shared VM a process's speed swings by up to 2x within seconds, so one run of each checkout says little. This
script runs the same lock-step loop (``await pool.step(actions)`` on CartPole-v1, or the gymnasium env ``--env``
names, with the default executor) in a fresh process of each checkout in turn, ``--rounds`` times, and reports the
median and quartiles of the per-round ratios
``new / base`` of throughput (env steps per second) and of the pool process's CPU per step (``time.process_time``
over the loop: the pool's own cost, workers excluded). Pairs measured seconds apart share the machine's mood.

    python benchmarks/ab.py --base /path/to/old/checkout --new . --envs 8 32 --rounds 16 --seconds 2

``--workers W`` places the envs on W ``inline`` worker processes instead (the pool's CPU per message of a pool
with many workers, measured on a machine with few cores, as ``bench_core.py --cost-workers`` does); ``--send-recv``
runs the first-finished loop instead (``recv()`` of half the envs, then ``send()`` of those).

``--executor thread`` or ``async`` measures latency-heavy envs instead: ``SleepEnv`` on threads or
``AsyncSleepEnv`` coroutines (20 ms lognormal steps, ``aioenv/envs/latency.py``) in worker processes, under
``bench_latency.py``'s batch loop (``recv()`` of a quarter of the envs, then ``send()`` of those): 64 thread envs
and 1,024 async envs are its goals' cells. The pool's CPU is then per ``recv()`` and its ``send()``, and ``steps/s``
is what the envs' latency leaves of ideal after the pool's own work on each row's way.

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

LATENCY = {"thread": "aioenv.envs.latency:SleepEnv", "async": "aioenv.envs.latency:AsyncSleepEnv"}

async def main(n: int, seconds: float, workers: int, send_recv: bool, executor: str, env: str) -> None:
    placed = {"executor": executor, "num_workers": workers} if workers else {}
    batch = max(1, n // 2)
    if executor in LATENCY:
        env, batch, send_recv, placed = LATENCY[executor], max(1, n // 4), True, {**placed, "executor": executor}
    async with aioenv.Pool(env, n, seed=0, batch_size=batch, **placed) as pool:
        await pool.reset()
        space = pool.single_action_space
        act = np.zeros((n, *(space.shape or ())), dtype=space.dtype if space.shape else np.int64)

        async def lock_step() -> int:
            await pool.step(act)
            return n

        async def first_finished() -> int:
            *_, info = await pool.recv()
            ids = info["env_id"]
            pool.send(act[ids], ids)
            return ids.size

        one = first_finished if send_recv else lock_step
        if send_recv:
            pool.send(act)
        for _ in range(100):
            await one()
        steps, rows, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                rows += await one()
            steps += 20
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"steps_per_s": rows / wall, "cpu_us_per_step": cpu / steps * 1e6}))

aioenv.run(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5], sys.argv[6]))
"""


def one_round(
    checkout: Path,
    envs: int,
    seconds: float,
    workers: int = 0,
    send_recv: bool = False,
    executor: str = "inline",
    env_id: str = "CartPole-v1",
) -> dict[str, float]:
    """One loop of ``envs`` envs for ``seconds`` in a fresh process importing ``checkout``'s aioenv (``workers``:
    on that many worker processes, 0: the default placement; ``send_recv``: the first-finished loop; ``executor``
    ``thread`` or ``async``: latency-heavy envs, see the module; ``env_id``: the gymnasium env of an ``inline``
    loop, its actions zeros). Its ``cpu_us_per_step``: the pool process's CPU per call (a ``step()``, or a
    ``recv()`` and its ``send()``)."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    flag = "1" if send_recv else "0"
    out = subprocess.run(
        [sys.executable, "-c", _ROUND, str(envs), str(seconds), str(workers), flag, executor, env_id],
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
    p.add_argument("--workers", type=int, default=0, help="worker processes (default: the default placement)")
    p.add_argument("--send-recv", action="store_true", help="the first-finished loop instead of lock-step step()")
    p.add_argument(
        "--executor",
        choices=("inline", "thread", "async"),
        default="inline",
        help="inline: CartPole; thread or async: 20 ms sleeping envs under a batch loop (see the module)",
    )
    p.add_argument("--env", default="CartPole-v1", help="the gymnasium env of an inline loop (e.g. Ant-v5)")
    args = p.parse_args(argv)
    for name in ("base", "new"):
        tree = getattr(args, name).resolve()
        if not (tree / "aioenv").is_dir():
            p.error(f"--{name} {tree} holds no aioenv/ package: give a checkout of the project")
        setattr(args, name, tree)
    if args.rounds < 1 or args.seconds <= 0 or min(args.envs) < 1:
        p.error("--rounds and --envs must be at least 1 and --seconds positive")
    if args.env != "CartPole-v1" and args.executor != "inline":
        p.error(f"--env {args.env} runs on the inline executor; --executor {args.executor} steps its own sleeping envs")
    if args.workers < 0 or (args.workers and args.workers > min(args.envs)):
        p.error(f"--workers must be 0 (the default placement) or 1 to the fewest --envs, got {args.workers}")
    print("| envs | rounds | steps/s new/base | pool CPU per step new/base | CPU µs per step base / new (medians) |")
    print("| --: | --: | --: | --: | --: |")
    for n in args.envs:
        how = (args.seconds, args.workers, args.send_recv, args.executor, args.env)
        pairs = [(one_round(args.base, n, *how), one_round(args.new, n, *how)) for _ in range(args.rounds)]
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

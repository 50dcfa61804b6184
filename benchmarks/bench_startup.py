"""How long a pool takes to start, next to gymnasium's vector envs: from the constructor to the first ``reset``
done, and the ``close`` after it.

Each way runs in a fresh Python process of its own (so a first pool pays what a program's first pool pays) and
makes ``--pools`` pools one after another, of ``--envs`` CartPole-v1 envs on ``--workers`` worker processes:

- ``aioenv fork``: ``aioenv.SyncPool`` (inline workers) with ``AIOENV_WORKER_START=fork``: workers forked from
  the process's template (:mod:`aioenv.transport.zygote`), which its first pool starts;
- ``aioenv exec``: the same with fresh interpreters (the default, ``AIOENV_WORKER_START=exec``);
- ``AsyncVectorEnv fork``: gymnasium's, one process per env, forked from the caller (Linux's default);
- ``AsyncVectorEnv spawn``: the same with ``context="spawn"``;
- ``SyncVectorEnv``: no process at all.

For each: the first pool's and the median later pool's seconds to start (constructor and ``reset``), the
median ``close``, and the CPU seconds the whole process tree spent per pool (the caller's, its children's and
the template's and its workers'). Run from the repo root::

    .venv/bin/python benchmarks/bench_startup.py             # about 40 s
    .venv/bin/python benchmarks/bench_startup.py --quick --out /tmp/startup.json

Writes ``benchmarks/results/startup.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from recorded import command  # noqa: E402 - found through the path set above

WAYS = ["aioenv fork", "aioenv exec", "AsyncVectorEnv fork", "AsyncVectorEnv spawn", "SyncVectorEnv"]


def _tree_cpu() -> float:
    """CPU seconds of this process and every descendant alive now, plus what reaped children spent."""
    import psutil

    me = psutil.Process()
    total: float = sum(me.cpu_times()[:4])  # user, system, and reaped children's user and system
    for proc in me.children(recursive=True):
        try:
            times = proc.cpu_times()
            total += sum(times[:4])  # its reaped children (a template's workers) included
        except psutil.Error:
            continue
    return total


def _make(way: str, envs: int, workers: int) -> Any:
    """One vector env of ``way``, not yet reset."""
    import gymnasium as gym

    fns = [lambda: gym.make("CartPole-v1")] * envs
    if way.startswith("aioenv"):
        import aioenv

        return aioenv.SyncPool("CartPole-v1", envs, num_workers=workers, executor="inline")
    if way == "AsyncVectorEnv fork":
        return gym.vector.AsyncVectorEnv(fns)
    if way == "AsyncVectorEnv spawn":
        return gym.vector.AsyncVectorEnv(fns, context="spawn")
    return gym.vector.SyncVectorEnv(fns)


def measure(way: str, envs: int, workers: int, pools: int) -> dict[str, Any]:
    """In this process: ``pools`` pools of ``way`` one after another, each started, reset and closed."""
    starts, closes, cpus = [], [], []
    for _ in range(pools):
        cpu0, t0 = _tree_cpu(), time.perf_counter()
        env = _make(way, envs, workers)
        obs, _ = env.reset(seed=0)
        t1 = time.perf_counter()
        assert len(obs) == envs
        env.close()
        t2 = time.perf_counter()
        cpus.append(_tree_cpu() - cpu0)
        starts.append(t1 - t0)
        closes.append(t2 - t1)
    later = starts[1:] or starts
    return {
        "first_start_s": starts[0],
        "later_start_s": statistics.median(later),
        "close_s": statistics.median(closes),
        "cpu_s_per_pool": statistics.median(cpus[1:] or cpus),
        "first_cpu_s": cpus[0],
    }


def _run_way(way: str, args: argparse.Namespace) -> dict[str, Any]:
    """``measure`` in a fresh interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["AIOENV_WORKER_START"] = "fork" if way == "aioenv fork" else "exec"
    cmd = [sys.executable, __file__, "--child", way, "--envs", str(args.envs)]
    cmd += ["--workers", str(args.workers), "--pools", str(args.pools)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{way} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8, help="envs per pool (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="aioenv's worker processes (default 2)")
    parser.add_argument("--pools", type=int, default=6, help="pools made one after another per way (default 6)")
    parser.add_argument("--quick", action="store_true", help="3 pools of 4 envs: a smoke run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "startup.json")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.envs, args.pools = 4, 3
    for name in ("envs", "workers", "pools"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.pools < 2:
        parser.error("--pools must be >= 2: the first pool and the later ones are reported apart")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.envs, args.workers, args.pools)))
        return 0
    results = {way: _run_way(way, args) for way in WAYS}
    base = results["AsyncVectorEnv fork"]["later_start_s"]
    for cell in results.values():
        cell["later_start/AsyncVectorEnv_fork"] = cell["later_start_s"] / base
    out = {
        "what": "seconds from a pool's constructor to its first reset done, and its close",
        "command": command(None if argv is None else [__file__, *argv]),
        "envs": args.envs,
        "workers": args.workers,
        "pools": args.pools,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"CartPole-v1, {args.envs} envs, aioenv on {args.workers} workers, {args.pools} pools per way")
    print("| way | first start s | later start s | close s | CPU s per pool | later / AsyncVectorEnv fork |")
    print("|---|---:|---:|---:|---:|---:|")
    for way, c in results.items():
        print(
            f"| {way} | {c['first_start_s']:.3f} | {c['later_start_s']:.3f} | {c['close_s']:.3f} | "
            f"{c['cpu_s_per_pool']:.2f} | {c['later_start/AsyncVectorEnv_fork']:.1f}x |"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where ``executor="auto"`` puts a pool's envs, against every explicit placement that keeps them out of this process.

A user who passes nothing gets ``executor="auto"``: one env is timed in a worker process and the round trips to it
measured (:mod:`aioenv.core.costs`), and the envs go where that predicts the fastest batches. The goal: the default
within 0.9x of the best explicit placement, on every workload, every run. This benchmark measures it. For each
workload the explicit pools are made once: ``executor="inline"`` on each worker count of ``--workers`` (default:
1, 2, and a quarter, half, three quarters and all of the usable CPUs, at most one per env) and
``executor="thread"``. Then, ``--makes`` times, a fresh default pool (a probe of its own, as a user's program
gets) steps in turn with every explicit pool, in ``--rounds`` rounds of one ``--slice`` per pool, in one process
(which pool goes first rotating): on a shared VM one process's speed moves by up to 2x within a second, and
slices back to back see the same machine. A default placed where no explicit pool is gets an explicit pool so
placed, kept for the later makes. The loop is lock-step ``await pool.step``, the ``send``/``recv`` loop
(``batch_size = n/2``) or lock-step ``SyncPool.step`` (whose waits poll where a CPU is to spare), as the workload
says.

Per make: each pool's median env-steps/s, the best explicit pool, and the median over rounds of the speed of the
explicit pool placed as the default was over the best one's in the same round, with its quartiles (1.0 when the
default chose the best). That is the placement's figure: a fresh pool placed alike measures the same placement
plus its own noise (two pools placed alike read 0.8-1.0x of each other in single makes of CartPole n = 32 on two
workers on a 2-vCPU VM), so the default pool's own ratio is reported beside it, not judged. A workload's figure is
its worst make. Run from the repo root::

    .venv/bin/python benchmarks/bench_placement.py                      # ~8 min on 2 CPUs
    .venv/bin/python benchmarks/bench_placement.py --only cartpole-32 --makes 5
    .venv/bin/python benchmarks/bench_placement.py --quick --out /tmp/placement.json

Writes ``benchmarks/results/placement.json`` (or ``--out``) and the table as ``.md`` next to it, and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_core import ACTION_BATCHES, atimed_steps, presample, quartiles, sendrecv_slice, timed_steps  # noqa: E402
from benchutil import md_table, run_header, write_atomic  # noqa: E402
from recorded import settings  # noqa: E402

import aioenv  # noqa: E402
from aioenv._loop import new_event_loop  # noqa: E402
from aioenv.transport.spawn import usable_cpus  # noqa: E402

#: name -> (env id, number of envs, the loop: "step" (lock-step ``await pool.step``), "sendrecv" (``send``/``recv``,
#: ``batch_size = n/2``) or "sync" (lock-step ``SyncPool.step``, whose waits poll where a CPU is to spare))
WORKLOADS: dict[str, tuple[str, int, str]] = {
    "cartpole-8": ("CartPole-v1", 8, "step"),
    "cartpole-32": ("CartPole-v1", 32, "step"),
    "cartpole-64": ("CartPole-v1", 64, "step"),
    "cartpole-128": ("CartPole-v1", 128, "step"),
    "cartpole-32-sr": ("CartPole-v1", 32, "sendrecv"),
    "cartpole-64-sr": ("CartPole-v1", 64, "sendrecv"),
    "cartpole-128-sr": ("CartPole-v1", 128, "sendrecv"),
    "cartpole-32-sync": ("CartPole-v1", 32, "sync"),
    "cartpole-64-sync": ("CartPole-v1", 64, "sync"),
    "ant-32": ("Ant-v5", 32, "step"),
    "cartpole-256": ("CartPole-v1", 256, "step"),
    "cartpole-256-sr": ("CartPole-v1", 256, "sendrecv"),
    "ant-128": ("Ant-v5", 128, "step"),
}
#: The workloads of a machine with many cores (issue 56's; ``benchmarks/many_core.py``): run only when ``--only``
#: names them.
MANY_CORES = ("cartpole-256", "cartpole-256-sr", "ant-128")
LOOPS = {"step": "lock-step step()", "sendrecv": "send/recv, batch n/2", "sync": "lock-step SyncPool.step"}
#: The default's placement over the best explicit one, at least (the worst make of every workload).
BAR = 0.9
#: Seconds a fresh pool steps before it is timed (a new process's first steps run slow).
WARM = 1.0
NOTE = (
    "Per make: the median over rounds of the speed of the explicit pool placed as the default was over the best "
    "explicit pool's in the same round (the best: the highest median; 1.00x when the default chose it), quartiles in "
    "brackets; the default pool itself, made afresh, beside it. A workload's figure: its worst make."
)
Pool = aioenv.Pool | aioenv.SyncPool
Slice = Callable[[float], float]


def worker_counts(cpus: int, num_envs: int) -> list[int]:
    """The explicit ``inline`` worker counts measured by default: 1, 2, and a quarter, half, three quarters and all
    of ``cpus``, none above ``num_envs``."""
    counts = {1, 2, cpus // 4, cpus // 2, 3 * cpus // 4, cpus}
    return sorted(c for c in counts if 1 <= c <= min(cpus, num_envs))


def placed(pool: Pool) -> str:
    """A pool's placement as an explicit pool's name: ``"inline x2"``; ``"here"`` with envs in this process."""
    inner = pool.pool if isinstance(pool, aioenv.SyncPool) else pool
    return "here" if inner.envs_in_process else f"{inner.executor} x{inner.num_workers}"


class Workload:
    """One workload's pools on one event loop (``loop``: the async pools'; a SyncPool runs its own): made, reset,
    warmed, timed in slices and closed alike whatever their kind."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.env_id, self.n, self.kind = WORKLOADS[name]
        self.loop = loop
        self.options = {"batch_size": self.n // 2} if self.kind == "sendrecv" else {}
        self.acts: list[Any] = []  # batched actions, cycled

    def make(self, **placement: Any) -> tuple[Pool, Slice]:
        """A pool of the workload's envs, reset and warmed, with its slice."""
        pool: Pool
        if self.kind == "sync":
            pool = aioenv.SyncPool(self.env_id, self.n, seed=0, **self.options, **placement)
            pool.reset(seed=0)
        else:
            pool = self.loop.run_until_complete(aioenv.make(self.env_id, self.n, seed=0, **self.options, **placement))
            self.loop.run_until_complete(pool.reset(seed=0))
        if not self.acts:
            self.acts = presample(pool.single_action_space, self.n)
        timed = self._slice(pool)
        timed(WARM)
        return pool, timed

    def _slice(self, pool: Pool) -> Slice:
        """Env-steps/s of one slice of ``pool``'s loop (bench_core's): lock-step steps, or the send/recv loop from
        every env sent until every row is back, so that no step runs while another pool is timed."""
        acts, n = self.acts, self.n
        if isinstance(pool, aioenv.SyncPool):

            def blocking(k: int) -> int:
                pool.step(acts[k % ACTION_BATCHES])
                return n

            return lambda seconds: timed_steps(blocking, 0.0, seconds)

        async def step(k: int) -> int:
            await pool.step(acts[k % ACTION_BATCHES])
            return n

        if self.kind == "sendrecv":
            counter = itertools.count()
            return lambda seconds: self.loop.run_until_complete(sendrecv_slice(pool, acts, counter, seconds))
        return lambda seconds: self.loop.run_until_complete(atimed_steps(step, 0.0, seconds))

    def close(self, pool: Pool) -> None:
        if isinstance(pool, aioenv.SyncPool):
            pool.close()
        else:
            self.loop.run_until_complete(pool.aclose())


def measure(name: str, args: argparse.Namespace, loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    """One workload: the explicit pools, then ``--makes`` default pools each alternated with all of them (a default
    placed where no explicit pool is gets one so placed, kept for the later makes)."""
    work = Workload(name, loop)
    counts = args.workers or worker_counts(usable_cpus(), work.n)
    explicit: dict[str, tuple[Pool, Slice]] = {}
    makes: list[dict[str, Any]] = []
    try:
        for count in (c for c in counts if c <= work.n):
            explicit[f"inline x{count}"] = work.make(executor="inline", num_workers=count)
        thread, timed = work.make(executor="thread")
        explicit[placed(thread)] = (thread, timed)
        for _ in range(args.makes):
            makes.append(one_make(work, explicit, args))
            last = makes[-1]
            print(f"  {name}: {last['placement']}: {last['ratio']:.3f}x of {last['best']}", flush=True)
    finally:
        for pool, _ in explicit.values():
            work.close(pool)
    worst = min(makes, key=lambda m: m["ratio"])
    out = {"env_id": work.env_id, "num_envs": work.n, "loop": work.kind, "makes": makes}
    return out | {"worst": worst["ratio"], "sendrecv": work.kind == "sendrecv"}


def one_make(work: Workload, explicit: dict[str, tuple[Pool, Slice]], args: argparse.Namespace) -> dict[str, Any]:
    """A fresh default pool alternated with every explicit one: each pool's median, the best explicit pool, and the
    median per-round ratio to it of the explicit pool placed as the default (``ratio``) and of the default pool
    itself (``measured``)."""
    pool, timed = work.make()
    try:
        inner = pool.pool if isinstance(pool, aioenv.SyncPool) else pool
        placement, key = inner.describe_placement(), placed(pool)
        if key not in explicit and key != "here":
            explicit[key] = work.make(executor=inner.executor, num_workers=inner.num_workers)
        sides = {"default": timed} | {name: side for name, (_, side) in explicit.items()}
        names = list(sides)
        speeds: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                speeds[name].append(sides[name](args.slice))
    finally:
        work.close(pool)
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    best = max(explicit, key=lambda name: medians[name])

    def against_best(name: str) -> list[float]:
        return [a / b for a, b in zip(speeds[name], speeds[best], strict=True)]

    as_placed = against_best(key if key in explicit else "default")
    measured = against_best("default")
    return {
        "placement": placement,
        "placed": key,
        "medians": {name: round(v, 1) for name, v in medians.items()},
        "best": best,
        "ratio": 1.0 if key == best else statistics.median(as_placed),
        "quartiles": [1.0, 1.0] if key == best else quartiles(as_placed),
        "measured": statistics.median(measured),
        "per_round": [round(x, 4) for x in measured],
    }


def render(results: dict[str, Any], header: dict[str, Any]) -> str:
    """The Markdown table, with the command that produced it and each make's placement."""
    head = [
        "workload",
        "n",
        "loop",
        "best explicit (env-steps/s)",
        "default / best, each make",
        "the fresh default pool",
        "worst make",
    ]
    rows = []
    for name, cell in results.items():
        best = cell["makes"][0]["best"]
        speed = cell["makes"][0]["medians"][best]
        each = ", ".join(
            f"{m['placed']}: {m['ratio']:.2f}x [{m['quartiles'][0]:.2f}-{m['quartiles'][1]:.2f}]" for m in cell["makes"]
        )
        fresh = ", ".join(f"{m['measured']:.2f}x" for m in cell["makes"])
        verdict = "met" if cell["worst"] >= BAR else "MISSED"
        loop = LOOPS[cell["loop"]].replace("n/2", str(cell["num_envs"] // 2))
        speeds = f"{best} ({speed:,.0f})"
        rows.append([name, str(cell["num_envs"]), loop, speeds, each, fresh, f"{cell['worst']:.2f}x ({verdict})"])
    met = sum(cell["worst"] >= BAR for cell in results.values())
    lines = [f"`{header['command']}` ({header['date']}, {usable_cpus()} usable CPUs)", ""]
    lines += [*md_table(head, rows, left=3), "", NOTE, ""]
    lines += [f"Bar: the default >= {BAR}x the best explicit placement, worst make: {met} of {len(results)} met.", ""]
    for name, cell in results.items():
        chosen = sorted({m["placement"] for m in cell["makes"]})
        lines += [f"- {name}: {'; '.join(chosen)}"]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only",
        action="append",
        choices=sorted(WORKLOADS),
        help="a workload (repeatable; default all but " + ", ".join(MANY_CORES) + ")",
    )
    p.add_argument("--makes", type=int, help="fresh default pools per workload (default 3; --quick: 1)")
    p.add_argument("--rounds", type=int, default=12, help="alternated rounds per make (default 12)")
    p.add_argument("--slice", type=float, default=0.25, help="seconds per pool per round (default 0.25)")
    p.add_argument("--workers", help="comma-separated explicit inline worker counts (default: see the docstring)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 0.05 s, 1 make unless --makes")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "placement.json")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.slice = 2, 0.05
    if args.makes is None:
        args.makes = 1 if args.quick else 3
    for name in ("makes", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not args.slice > 0:
        p.error(f"--slice must be > 0 seconds, got {args.slice}")
    if args.workers is not None:
        try:
            args.workers = sorted({int(w) for w in str(args.workers).split(",")})
        except ValueError:
            p.error(f"--workers must be comma-separated integers, got {args.workers!r}")
        if args.workers[0] < 1:
            p.error(f"--workers must be >= 1 each, got {args.workers}")
    args.only = args.only or [w for w in WORKLOADS if w not in MANY_CORES]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = run_header()
    results: dict[str, Any] = {}
    loop = new_event_loop()
    try:
        for name in args.only:
            print(f"{name} ...", flush=True)
            results[name] = measure(name, args, loop)
    finally:
        loop.close()
    text = render(results, header)
    print(text)
    data = {**header, "usable_cpus": usable_cpus(), "cpu_count": os.cpu_count(), "args": settings(args)}
    write_atomic(args.out, json.dumps({**data, "bar": BAR, "results": results}))
    write_atomic(args.out.with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

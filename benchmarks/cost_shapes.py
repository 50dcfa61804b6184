"""What of a pool's CPU per message is its own code for an env's data, and what the workers leave it: stand-ins.

``bench_core.py --cost-workers 16`` reads Ant-v5's CPU per worker message at 1.2-3x the floor's on a 2-vCPU machine
where CartPole-v1's reads 1.1-1.8x, although a pool runs the same code for both but Ant's infos. This script
measures that figure for envs that differ from one another in one thing at a time (``shaped_envs.py``):

- ``CartPole-v1``;
- ``ant-shape``: Ant-v5's observation and action spaces, no physics, no infos: what its data alone costs;
- ``ant-shape+infos``: and its nine float infos every step (the pool reads them from the info area of its slab);
- ``ant-shape+infos+work``: and each step busy on the CPU for ``--work`` seconds (default 200 µs) that touch next to
  no memory: workers that take as long as MuJoCo's without what MuJoCo does to the caches;
- ``ant-no-infos``: Ant-v5, its infos dropped;
- ``Ant-v5``.

Every pool has ``--workers`` ``inline`` worker processes (16 by default, as ``bench_core.py --cost-workers 16``) and
``--envs`` envs, and all of them are made at once in this process; round by round, in an order that rotates, each
runs a lock-step ``step()`` loop for ``--seconds`` and a ``send``/``recv`` loop (``batch_size = envs / 2``) for as
long, each window starting and ending with nothing in flight. The figure is this process's CPU time
(``time.process_time``: the pools' own work, none of their workers') per worker message: a lock-step batch sends one
to every worker, a ``send()`` one to each worker its envs are on. Medians of the rounds, and each against
CartPole-v1's in the same run.

On a machine with a core for the pool's process, the rows should read alike but for the infos; where workers share
its cores, what they run between the pool's wake-ups leaves its caches cold, and the rows with more work per step
read higher though the pool's code is the same (docs/performance.md, "What of Ant's cost per message is the pool's").

    python benchmarks/cost_shapes.py [--workers 16] [--envs 32] [--seconds 1] [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from benchutil import md_table, write_atomic  # noqa: E402 - found through the path set above
from recorded import command  # noqa: E402

import aioenv  # noqa: E402
from aioenv._loop import run  # noqa: E402

#: (name, the env the pool makes), in the table's order.
VARIANTS = (
    ("CartPole-v1", "CartPole-v1"),
    ("ant-shape", "shaped_envs:ant_shape"),
    ("ant-shape+infos", "shaped_envs:ant_shape_infos"),
    ("ant-shape+infos+work", "shaped_envs:ant_shape_infos_work"),
    ("ant-no-infos", "shaped_envs:ant_without_infos"),
    ("Ant-v5", "Ant-v5"),
)
MODES = ("step", "send/recv")


def _workers_path() -> None:
    """Let the pools' worker processes import ``shaped_envs`` (they get this process's ``PYTHONPATH``)."""
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


async def _lock_step(pool: aioenv.Pool, actions: np.ndarray, seconds: float, workers: int) -> tuple[float, int]:
    """CPU seconds of this process and worker messages over ``seconds`` of ``step()``."""
    batches, c0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        await pool.step(actions)
        batches += 1
    return time.process_time() - c0, batches * workers


async def _send_recv(pool: aioenv.Pool, actions: np.ndarray, seconds: float, per_worker: int) -> tuple[float, int]:
    """CPU seconds of this process and worker messages over ``seconds`` of ``recv()`` then ``send()`` of its rows
    (the first ``send()`` of every env and the last ``recv()`` of what is in flight outside the window)."""
    n = actions.shape[0]
    pool.send(actions, np.arange(n, dtype=np.int32))
    messages, c0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        *_, info = await pool.recv()
        ids = info["env_id"]
        pool.send(actions[: ids.size], ids)
        messages += int(np.unique(ids // per_worker).size)  # one message to each worker the sent envs are on
    cpu = time.process_time() - c0
    await pool.recv(min_results=n, max_results=n)  # nothing left in flight
    return cpu, messages


async def measure(workers: int, envs: int, seconds: float, rounds: int, work: float) -> dict[str, Any]:
    """Each variant's µs of this process's CPU per worker message in each mode, per round (see the module
    docstring)."""
    _workers_path()
    os.environ["COST_SHAPES_WORK"] = repr(work)
    pools: dict[str, aioenv.Pool] = {}
    actions: dict[str, np.ndarray] = {}
    figures: dict[str, dict[str, list[float]]] = {name: {mode: [] for mode in MODES} for name, _ in VARIANTS}
    try:
        for name, env in VARIANTS:
            pool = await aioenv.make(env, envs, num_workers=workers, executor="inline", batch_size=envs // 2, seed=0)
            pools[name] = pool
            space = pool.single_action_space
            actions[name] = np.zeros((envs, *(space.shape or ())), dtype=space.dtype if space.shape else np.int64)
            await pool.reset()
            await _lock_step(pool, actions[name], min(0.3, seconds), workers)  # warm
        names = [name for name, _ in VARIANTS]
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                pool, act = pools[name], actions[name]
                cpu, messages = await _lock_step(pool, act, seconds, workers)
                figures[name]["step"].append(cpu / max(1, messages) * 1e6)
                cpu, messages = await _send_recv(pool, act, seconds, envs // workers)
                figures[name]["send/recv"].append(cpu / max(1, messages) * 1e6)
    finally:
        for pool in pools.values():
            await pool.aclose()
    out: dict[str, Any] = {"workers": workers, "envs": envs, "seconds": seconds, "rounds": rounds, "work_s": work}
    medians = {
        name: {mode: statistics.median(values) for mode, values in by_mode.items()} for name, by_mode in figures.items()
    }
    base = medians["CartPole-v1"]
    out["variants"] = {
        name: {
            mode: {
                "cpu_us_per_message": medians[name][mode],
                "rounds": values,
                "vs_cartpole": medians[name][mode] / base[mode],
            }
            for mode, values in by_mode.items()
        }
        for name, by_mode in figures.items()
    }
    return out


def to_markdown(out: dict[str, Any]) -> str:
    """The figures of :func:`measure` (with the run's ``command`` and ``cpus``) as a Markdown table."""
    rows = []
    for name, by_mode in out["variants"].items():
        row = [name]
        for mode in MODES:
            row += [f"{by_mode[mode]['cpu_us_per_message']:.1f}", f"{by_mode[mode]['vs_cartpole']:.2f}x"]
        rows.append(row)
    lines = [
        f"`{out['command']}`: {out['envs']} envs on {out['workers']} inline worker processes, {out['cpus']} CPUs, "
        f"medians of {out['rounds']} rounds; this process's CPU per worker message (µs), and against CartPole-v1's:",
        "",
        *md_table(["env", "`step()`", "/ CartPole", "`send`/`recv`", "/ CartPole"], rows),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=16, help="inline worker processes per pool (default 16)")
    p.add_argument("--envs", type=int, default=32, help="envs per pool, a multiple of --workers (default 32)")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds of each window (default 1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over every pool and mode (default 3)")
    p.add_argument("--work", type=float, default=0.0002, help="seconds of CPU per step of ant-shape+infos+work")
    p.add_argument("--out", type=Path, help="also write the figures to this JSON file, and Markdown beside it")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    if args.envs < 2 * args.workers or args.envs % args.workers:
        p.error(f"--envs must be a multiple of --workers and at least twice it, got {args.envs} and {args.workers}")
    if args.seconds <= 0 or args.rounds < 1 or args.work < 0:
        p.error(f"--seconds must be > 0, --rounds >= 1, --work >= 0: got {args.seconds}, {args.rounds}, {args.work}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = run(measure(args.workers, args.envs, args.seconds, args.rounds, args.work))
    out["command"] = command()
    out["cpus"] = os.cpu_count()
    markdown = to_markdown(out)
    if args.out is not None:
        write_atomic(args.out, json.dumps(out, indent=2))
        write_atomic(args.out.with_suffix(".md"), markdown)
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

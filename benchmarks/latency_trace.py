"""Where a latency-bound ``recv()`` loop's time goes, measured from inside its envs.

``bench_latency.py`` says how far the ``thread`` and ``async`` executors are from the loop's ceiling (64 thread envs
of 20 ms in batches of 16; 1,024 async envs in batches of 256); this says where the rest of each step's time goes.
Its envs (``timed_envs.py``) are the same sleep envs whose observation is when each step began and ended in its
worker (``time.perf_counter()``: one clock for every process of the machine), so the rows ``recv()`` returns tell:

- **delivery**: from the end of a batch's last row to ``recv()`` returning it (the pool's side: the row's record or
  reply, the wake-ups, the batch made);
- **dispatch**: from ``send()`` being called to each of its envs' next step beginning (the workers' side: the
  message, its worker's loop, the env's thread or task started), and for each ``send()`` its first and its last row
  (a worker starts a message's rows one after another);
- the pool's process's and the workers' CPU a step, and the context switches a step of the workers' main threads
  (their event loops) and of all their threads (``/proc``; Linux).

Each case is one pool of ``--workers`` worker processes (the pool's default when not given), ``--warmup`` seconds,
then a window of ``--seconds`` of ``recv()`` and ``send()`` of the rows it returned, as ``bench_latency.py``'s batch
loops do. ``--scale K`` takes K times the envs and their batches (8: 512 thread envs in batches of 128, 8,192 async
envs in batches of 2,048, the sizes of a 16-core machine's goals). Figures are medians and 90th percentiles, in µs.

    python benchmarks/latency_trace.py [--quick] [--only thread64|async1k] [--scale 1] [--seconds 5]
        [--warmup 1] [--workers W] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT, HERE):  # this checkout (aioenv), and benchmarks/ (timed_envs for the workers too)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_latency import Case, loop_ceiling, parse_loop  # noqa: E402
from benchutil import cpu_seconds, md_table, not_templates, write_atomic  # noqa: E402
from recorded import command  # noqa: E402

import aioenv  # noqa: E402
from aioenv._loop import run  # noqa: E402

#: Each case: its executor, envs and ``recv()`` batch at ``--scale 1`` (the goals' cells of bench_latency.py).
CASES: dict[str, tuple[str, int, int]] = {"thread64": ("thread", 64, 16), "async1k": ("async", 1_024, 256)}
#: The same with ``--quick``: a smoke run's sizes.
QUICK: dict[str, tuple[str, int, int]] = {"thread64": ("thread", 8, 4), "async1k": ("async", 32, 8)}
ENVS = {"thread": "timed_envs:TimedSleepEnv", "async": "timed_envs:TimedAsyncSleepEnv"}
MEAN, SIGMA, CAP = 0.02, 0.5, 0.2  # bench_latency.py's latencies: lognormal, mean 20 ms, capped at 200 ms


def spread(values: np.ndarray) -> dict[str, float | int]:
    """Least, median, 90th percentile and mean of ``values`` (seconds) in µs, and how many there were."""
    if not values.size:
        return {"n": 0}
    p50, p90 = np.percentile(values, [50, 90])
    return {"min": round(values.min() * 1e6, 1), "median": round(p50 * 1e6, 1), "p90": round(p90 * 1e6, 1),
            "mean": round(values.mean() * 1e6, 1), "n": int(values.size)}  # fmt: skip


def switches(pids: list[int]) -> tuple[int, int] | None:
    """The context switches so far of the processes ``pids``' main threads, and of all their threads (``/proc``);
    None where the system has no such counts."""
    main = every = 0
    try:
        for pid in pids:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/status") as status:
                    count = sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
                every += count
                if task == str(pid):
                    main += count
    except OSError:
        return None
    return main, every


async def trace(
    name: str, scale: int, seconds: float, warmup: float, workers: int | None, quick: bool = False
) -> dict[str, Any]:
    """One case (see the module; ``quick``: its smoke run's sizes): its figures."""
    executor, n, batch = (QUICK if quick else CASES)[name]
    n, batch = n * scale, batch * scale
    case = Case(name, ENVS[executor], executor, n, MEAN, SIGMA, CAP, (f"batch:{batch}",), warmup, seconds)
    kwargs = {"mean": MEAN, "sigma": SIGMA, "cap": CAP, "episode_steps": 2**62}  # no episode ends: no reset rows
    extra = {} if workers is None else {"num_workers": workers}
    pool = await aioenv.make(ENVS[executor], n, executor=executor, env_kwargs=kwargs, batch_size=batch, **extra)
    try:
        await pool.reset(seed=0)
        procs = not_templates(psutil.Process().children(recursive=True))  # the pool's workers
        pids = [p.pid for p in procs]
        sent_at = np.zeros(n)
        sent_by = np.full(n, -1, dtype=np.int64)  # which send() of the window each env's step came from
        most = int((warmup + seconds) * n / MEAN / batch * 2) + 16  # more sends than the ideal rate allows
        first, last = np.full(most, np.inf), np.full(most, -np.inf)
        rows_of = np.zeros(most, dtype=np.int64)  # each send's rows come back so far
        size_of = np.zeros(most, dtype=np.int64)  # and how many it sent
        delivery: list[float] = []
        dispatch: list[np.ndarray] = []
        sends = steps = 0
        counting = False
        ids = np.arange(n, dtype=np.int32)
        actions = np.zeros(n, dtype=np.int64)
        start = time.perf_counter()
        sent_at[:] = start
        pool.send(actions, ids)
        end = start + warmup + seconds
        before: tuple[float, float, tuple[int, int] | None, float] | None = None
        while True:
            obs, *_, info = await pool.recv()
            now = time.perf_counter()
            ids = info["env_id"]
            if counting:
                steps += ids.size
                delivery.append(now - float(obs[:, 1].max()))
                took = obs[:, 0] - sent_at[ids]
                by = sent_by[ids]
                mine = by >= 0
                if mine.any():
                    dispatch.append(took[mine])
                    np.minimum.at(first, by[mine], took[mine])
                    np.maximum.at(last, by[mine], took[mine])
                    np.add.at(rows_of, by[mine], 1)
            elif now - start >= warmup:
                counting = True
                before = (time.process_time(), sum(map(cpu_seconds, procs)), switches(pids), now)
            if now >= end:
                break
            sent_at[ids] = time.perf_counter()
            if counting and sends < most:
                sent_by[ids] = sends
                size_of[sends] = ids.size
                sends += 1
            else:
                sent_by[ids] = -1
            pool.send(actions[: ids.size], ids)
        assert before is not None
        cpu0, wcpu0, sw0, window = before
        elapsed = time.perf_counter() - window
        pool_cpu, wcpu, sw = time.process_time() - cpu0, sum(map(cpu_seconds, procs)) - wcpu0, switches(pids)
        whole = rows_of[:sends] == size_of[:sends]  # sends whose every row came back within the window
    finally:
        await pool.aclose()
    ceiling = loop_ceiling(case, parse_loop(f"batch:{batch}", n))
    rate = steps / elapsed
    out: dict[str, Any] = {
        "executor": executor,
        "envs": n,
        "batch_size": batch,
        "workers": len(pids),
        "seconds": round(elapsed, 3),
        "steps": steps,
        "steps_per_s": round(rate, 1),
        "fraction_of_ideal": round(rate * MEAN / n, 4),
        "loop_ceiling": ceiling,
        "fraction_of_ceiling": round(rate * MEAN / n / ceiling, 4),
        "cpu_us_per_step": {"pool": round(pool_cpu / steps * 1e6, 1), "workers": round(wcpu / steps * 1e6, 1)},
        "delivery_us": spread(np.array(delivery)),
        "dispatch_us": spread(np.concatenate(dispatch) if dispatch else np.zeros(0)),
        "first_row_us": spread(first[:sends][whole]),
        "last_row_us": spread(last[:sends][whole]),
    }
    if sw is not None and sw0 is not None:
        out["switches_per_step"] = {
            "worker_main_threads": round((sw[0] - sw0[0]) / steps, 3),
            "worker_threads": round((sw[1] - sw0[1]) / steps, 3),
        }
    return out


def markdown(figures: dict[str, Any]) -> str:
    """The cases as one Markdown table, with the command that measured them."""
    rows = []
    for name, c in figures["cases"].items():
        sw = c.get("switches_per_step")
        rows.append(
            [
                f"{name}: {c['envs']:,} {c['executor']} envs, batch {c['batch_size']:,}, {c['workers']} workers",
                f"{c['steps_per_s']:,.0f}",
                f"{c['fraction_of_ceiling']:.1%}",
                f"{c['cpu_us_per_step']['pool']:.1f} / {c['cpu_us_per_step']['workers']:.1f}",
                "-" if sw is None else f"{sw['worker_main_threads']:.2f} / {sw['worker_threads']:.2f}",
                *(
                    f"{c[key]['median']:,.0f} ({c[key]['p90']:,.0f})" if c[key]["n"] else "-"
                    for key in ("delivery_us", "dispatch_us", "first_row_us", "last_row_us")
                ),
            ]
        )
    head = [
        "case",
        "steps/s",
        "of the loop's ceiling",
        "CPU µs a step: pool / workers",
        "switches a step: workers' loops / all their threads",
        "last row's end -> recv() returns, µs (p90)",
        "send() -> each row starts",
        "-> a send's first row starts",
        "-> its last row starts",
    ]
    lines = [f"`{figures['command']}` ({figures['cpus']} CPUs)", "", *md_table(head, rows)]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=list(CASES), help="run these cases (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 8 thread and 32 async envs, 0.5 s")
    parser.add_argument("--scale", type=int, default=1, help="K times the envs and the batches (default 1)")
    parser.add_argument("--seconds", type=float, default=5.0, help="the measured window (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before the window (default 1)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the pool's)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON, and Markdown beside it")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 0.5, 0.2
    if args.scale < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error(
            f"--scale must be >= 1, --seconds > 0, --warmup >= 0: got {args.scale}, {args.seconds}, {args.warmup}"
        )
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.only or list(CASES)
    cases = {
        name: run(trace(name, args.scale, args.seconds, args.warmup, args.workers, args.quick))
        for name in dict.fromkeys(names)
    }
    figures = {"command": command(), "cpus": os.cpu_count(), "cases": cases}
    text = markdown(figures)
    print(text, end="")
    if args.out is not None:
        write_atomic(args.out, json.dumps(figures, indent=2) + "\n")
        write_atomic(args.out.with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

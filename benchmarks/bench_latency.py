"""Latency-bound envs: the ``thread`` and ``async`` executors against their ideal throughput.

Every env step only waits (a lognormal time with mean ``m``, see ``aioenv/envs/latency.py``), so a pool
of ``n`` envs can at best do ``n / m`` steps/s (the *ideal*); the figure of merit is the fraction of it
reached. Three cases, measured in one run:

1. ``thread64``: ``executor="thread"``, 64 ``SleepEnv`` (``time.sleep``; mean 20 ms, sigma 0.5, cap 200 ms),
   driven by a send/recv loop with ``batch_size=16`` (and, for information, a ``recv(min_results=1)``
   loop, and both loops again with the envs on threads of this process, ``num_workers=0``: loops
   ``batch:16@here`` and ``any@here``); next to gymnasium's ``AsyncVectorEnv`` on the same 64 envs
   (64 subprocesses, lock-step ``step()`` with a fixed action). Bars: >= 90% of ideal, >= 97% of what its
   loop allows, >= 2.5x AsyncVectorEnv.
2. ``async1k``: ``executor="async"``, 1,024 ``AsyncSleepEnv`` (``asyncio.sleep``; mean 20 ms), under a few
   client loops (``recv()`` with ``batch_size`` 64 and 256, ``recv(min_results=1, max_results=1024)``).
   Bars: the best loop >= 95% of ideal; every loop >= 97% of what it allows (its ceiling).
3. ``async10k``: ``executor="async"``, 10,000 ``AsyncSleepEnv`` with mean 1 s (sigma 0.5, cap 10 s):
   throughput (bar >= 97% of ideal), startup (``make`` + first ``reset``), and resident memory of the
   whole process tree (this process and every child: sums of RSS, PSS and USS). Bar: RSS sum < 1 GiB.

Cases 1 and 2 also step the same envs *alone*: in this process, with no pool, each env in a loop of its own
(a thread per ``SleepEnv``, a coroutine per ``AsyncSleepEnv``). That is what the envs reach on this machine
by themselves (their sleeps' own lateness included) and the CPU they cost; each aioenv loop is then shown
as a fraction of their steps/s and with the CPU per env-step it spends beyond theirs (what the pool costs).
Cases 1 and 2 also run one batch loop with no pool over bare pipes (``batch:16`` and ``batch:256``, the loops
of bench_goals.py's goals; ``benchmarks/bare_loop.py``: the same envs, on threads or as coroutines, in as many
worker processes, env ids as 4-byte messages): what threads, the GIL, the workers' loops and the processes'
wake-ups leave of that loop's ceiling on this machine, before any pool's own work.

Client loop (every aioenv cell): ``await pool.reset(seed=0)``, ``pool.send(actions, all ids)``, then
repeatedly ``obs, rew, term, trunc, info = await pool.recv(...)`` and ``pool.send(actions for those rows,
info["env_id"])``. It warms up, then counts the rows received over a ``--seconds`` window. Episodes are
made long enough (``episode_steps=10**9``) that no step of the window is a waitless autoreset. CPU use
of this process and of the workers over the window is recorded (to tell a saturated CPU from idle
waiting), and after every pool closes the script checks that no child process is left behind.

Run (from the repo root; a full run takes about 2 minutes, more when disturbed cells are re-run)::

    .venv/bin/python benchmarks/bench_latency.py                     # all three cases
    .venv/bin/python benchmarks/bench_latency.py --only async10k     # one case (repeatable)
    .venv/bin/python benchmarks/bench_latency.py --quick --out /tmp/lat   # small sizes, 0.5 s windows (smoke)

Options: ``--seconds`` (window of cases 1-2, default 10), ``--seconds-10k`` (default 20), ``--num-workers``
(default: the pool's, ``min(num_envs, cpu_count)``), ``--loops`` / ``--loop-10k`` (client loops, see
``--help``), ``--retries`` (re-run a cell that other programs disturbed, default 2). Writes ``latency.json``
(machine, parameters, every figure) and ``latency.md`` (tables with the bars, met or missed) to
``benchmarks/results/`` or ``--out DIR``. Bars are informative: a missed bar never fails the run; a cell
that raises is recorded as ``error: ...`` and the others go on.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import heapq
import json
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT, HERE):  # this checkout (aioenv), and benchmarks/ (benchutil)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bare_loop import BareLoop  # noqa: E402
from benchutil import (  # noqa: E402
    EPISODE_STEPS,
    GIB,
    WINDOW_HEAD,
    bar,
    describe,
    fmt,
    fmt_bytes,
    md_bars,
    md_table,
    not_templates,
    read_memory,
    run_async,
    run_header,
    sig,
    timed_window,
    window_columns,
    window_figures,
    write_atomic,
)

import aioenv  # noqa: E402
from aioenv.envs.latency import AsyncSleepEnv, SleepEnv  # noqa: E402
from aioenv.transport.spawn import usable_cpus  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results"
SECTIONS = ("thread64", "async1k", "async10k")
PEER = "AsyncVectorEnv"
ALONE = "the envs alone, no pool"
BARE = "no pool, the same loop over bare pipes"
BARS = {
    "thread_fraction": 0.90,
    "thread_vs_peer": 2.5,
    "async1k_fraction": 0.95,
    "async10k_fraction": 0.97,
    # of what the client loop allows at best (its ceiling): what aioenv itself costs
    "thread_of_ceiling": 0.97,
    "async1k_of_ceiling": 0.97,
}
MEMORY_BAR_BYTES = 1 * GIB
DISTURBED_PCT = 20.0  # CPU used outside this process tree during a window (% of a core) that makes a note


# ------------------------------------------------------------------ parameters
@dataclasses.dataclass(frozen=True)
class Loop:
    """A client loop: ``recv()`` with the pool's ``batch_size``, or ``recv(min_results=1, max_results=n)``; with
    ``here``, on a pool whose envs run on threads or coroutines of this process (``num_workers=0``)."""

    spec: str  # "batch:N" or "any", then "@here" for num_workers=0
    batch_size: int | None
    min_results: int | None
    max_results: int | None
    here: bool = False

    @property
    def label(self) -> str:
        """How the loop calls recv (and where the envs run, when in this process), for the tables."""
        if self.batch_size is not None:
            label = f"recv(), batch_size={self.batch_size}"
        else:
            label = f"recv(min_results=1, max_results={self.max_results})"
        return f"{label}, num_workers=0 (this process)" if self.here else label


#: The async1k case's client loops unless ``--loops`` names others.
ASYNC1K_LOOPS = ("batch:64", "batch:256", "any")


def parse_loop(spec: str, num_envs: int) -> Loop:
    """``"batch:N"`` (N clamped to ``num_envs``) or ``"any"``, either followed by ``"@here"`` (``num_workers=0``)."""
    what, at, where = spec.partition("@")
    here = bool(at)
    if here and where != "here":
        raise argparse.ArgumentTypeError(f"a loop ends in '@here' or nothing, got {spec!r}")
    if what == "any":
        return Loop(spec, None, 1, num_envs, here)
    kind, _, size = what.partition(":")
    if kind != "batch" or not size.isdigit() or int(size) < 1:
        raise argparse.ArgumentTypeError(f"a loop is 'batch:N' (N >= 1) or 'any', optionally '@here', got {spec!r}")
    return Loop(spec, min(int(size), num_envs), None, None, here)


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured case: which envs, how many, how long, which loops."""

    name: str
    env: str  # an aioenv env source, by name
    executor: str
    num_envs: int
    mean: float
    sigma: float
    cap: float
    loops: tuple[str, ...]
    warmup: float
    seconds: float
    peer: bool = False  # also run gymnasium's AsyncVectorEnv on the same envs
    alone: bool = False  # also step the same envs by themselves, with no pool (see alone_cell)
    bare: str | None = None  # also run this batch loop (one of loops) over bare pipes, with no pool (see bare_cell)

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The env's keyword arguments (the same for aioenv and the peer)."""
        return {"mean": self.mean, "sigma": self.sigma, "cap": self.cap, "episode_steps": EPISODE_STEPS}

    @property
    def ideal(self) -> float:
        """``num_envs / mean``: steps/s if every env were re-stepped the instant its step ended."""
        return self.num_envs / self.mean

    @property
    def title(self) -> str:
        """Short description for the tables."""
        cls = self.env.rpartition(":")[2]
        return f"{self.executor}, {self.num_envs:,} {cls}, mean {self.mean * 1e3:g} ms"

    def params(self) -> dict[str, Any]:
        """The parameters recorded in the JSON."""
        out = dataclasses.asdict(self)
        out |= {"env_kwargs": self.env_kwargs, "ideal_steps_per_s": self.ideal}
        out["capped_mean_s"] = sig(capped_lognormal_mean(self.mean, self.sigma, self.cap))
        return out


def capped_lognormal_mean(mean: float, sigma: float, cap: float) -> float:
    """``E[min(X, cap)]`` for the lognormal X of the given mean: how far the cap moves the ideal (barely)."""
    mu = math.log(mean) - sigma * sigma / 2

    def phi(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    z = (math.log(cap) - mu) / sigma
    return mean * phi(z - sigma) + cap * (1 - phi(z))


def loop_ceiling(case: Case, loop: Loop, steps: int = 200_000, seed: int = 0) -> float:
    """Fraction of ideal that ``loop`` reaches with zero overhead (an event simulation of the case's latencies).

    A ``recv(min_results=1)`` loop re-sends every env the instant it finishes: the ceiling is
    ``mean / capped mean`` (about 1). A ``batch_size=B`` loop re-sends an env only once B envs have finished,
    so each finished env waits for the others of its batch: with 64 envs and B=16 the ceiling is ~0.88.
    """
    if loop.batch_size is None or loop.batch_size == 1:
        return sig(case.mean / capped_lognormal_mean(case.mean, case.sigma, case.cap))
    n, batch = case.num_envs, loop.batch_size
    mu = math.log(case.mean) - case.sigma**2 / 2
    warm = 20 * n  # steps before counting: the envs' phases spread out
    draws = np.minimum(np.random.default_rng(seed).lognormal(mu, case.sigma, warm + steps + n), case.cap).tolist()
    heap = [(draws[i], i) for i in range(n)]
    heapq.heapify(heap)
    k, done, ready = n, 0, 0
    t0 = now = 0.0
    while done < warm + steps:
        now, _ = heapq.heappop(heap)
        done += 1
        ready += 1
        if done == warm:
            t0 = now
        if ready == batch:  # recv() returns these B rows; each is re-sent now
            for _ in range(batch):
                heapq.heappush(heap, (now + draws[k], k))
                k += 1
            ready = 0
    return sig(steps / (now - t0) / case.ideal)


def build_cases(args: argparse.Namespace) -> dict[str, Case]:
    """The three cases, full size or (``--quick``) small and short."""
    quick = args.quick
    warm = 0.2 if quick else 1.0
    secs = args.seconds or (0.5 if quick else 10.0)
    secs10k = args.seconds_10k or (0.5 if quick else 20.0)
    sleep_env, async_env = "aioenv.envs.latency:SleepEnv", "aioenv.envs.latency:AsyncSleepEnv"
    mean_20ms: dict[str, Any] = {"mean": 0.02, "sigma": 0.5, "cap": 0.2, "warmup": warm, "seconds": secs}
    thread64 = Case(
        name="thread64",
        env=sleep_env,
        executor="thread",
        num_envs=16 if quick else 64,
        loops=("batch:4", "any", "any@here") if quick else ("batch:16", "any", "batch:16@here", "any@here"),
        peer=True,
        alone=True,
        bare="batch:4" if quick else "batch:16",
        **mean_20ms,
    )
    async1k = Case(
        name="async1k",
        env=async_env,
        executor="async",
        num_envs=128 if quick else 1024,
        loops=tuple(args.loops or (("batch:16", "any") if quick else ASYNC1K_LOOPS)),
        alone=True,
        bare="batch:16" if quick else "batch:256",
        **mean_20ms,
    )
    async10k = Case(
        name="async10k",
        env=async_env,
        executor="async",
        num_envs=500 if quick else 10_000,
        mean=0.05 if quick else 1.0,
        sigma=0.5,
        cap=0.5 if quick else 10.0,
        loops=(args.loop_10k,),
        warmup=0.4 if quick else 4.0,
        seconds=secs10k,
    )
    if args.scale > 1:
        thread64, async1k = (scaled(case, args.scale) for case in (thread64, async1k))
    return {c.name: c for c in (thread64, async1k, async10k)}


def scaled(case: Case, k: int) -> Case:
    """``case`` with ``k`` times its envs, and ``k`` times the batch of each of its ``batch:N`` loops (``any`` as
    it is), so that each loop's ceiling is the same fraction of the envs' ideal; no ``AsyncVectorEnv`` peer (a
    process per env)."""

    def times(spec: str) -> str:
        loop, at, where = spec.partition("@")
        if loop.startswith("batch:"):
            loop = f"batch:{int(loop.removeprefix('batch:')) * k}"
        return loop + at + where

    bare = None if case.bare is None else times(case.bare)
    loops = tuple(map(times, case.loops))
    return dataclasses.replace(case, num_envs=case.num_envs * k, loops=loops, bare=bare, peer=False)


# ------------------------------------------------------------------ helpers
def tree() -> list[psutil.Process]:
    """This process and all its descendants."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


@dataclasses.dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds so far: this process, its descendants, the whole machine (busy, and stolen by the host)."""

    mine: float
    children: float
    machine_busy: float
    machine_steal: float
    others: dict[int, tuple[str, float]]  # pid -> (command line, CPU seconds) of processes outside the tree


def other_processes(tree_pids: set[int]) -> dict[int, tuple[str, float]]:
    """CPU seconds of every process outside ``tree_pids`` (to name what disturbed a window)."""
    out = {}
    for proc in psutil.process_iter(["cmdline", "cpu_times"]):
        info = proc.info
        if proc.pid in tree_pids or info.get("cpu_times") is None:
            continue
        t = info["cpu_times"]
        out[proc.pid] = (" ".join(info.get("cmdline") or [])[:100] or proc.name(), t.user + t.system)
    return out


def cpu_snapshot(procs: list[psutil.Process]) -> CpuSnapshot:
    """User + system CPU seconds of ``procs`` (those that vanished count 0), of the machine, and of others."""
    mine, children = 0.0, 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        if proc.pid == os.getpid():
            mine += t.user + t.system
        else:
            children += t.user + t.system
    m = psutil.cpu_times()
    busy = sum(getattr(m, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))
    others = other_processes({p.pid for p in procs})
    return CpuSnapshot(mine, children, busy, getattr(m, "steal", 0.0), others)


def cpu_usage(a: CpuSnapshot, b: CpuSnapshot, elapsed: float, steps: int) -> dict[str, Any]:
    """CPU over a window, in % of one core: the client (this process), the workers (its children), the rest of
    the machine (``outside``: other processes and the kernel; noise; with the top other processes), time
    stolen by the host; and the CPU cost of one env-step (client + workers, µs)."""
    client, workers = b.mine - a.mine, b.children - a.children
    outside = max(0.0, (b.machine_busy - a.machine_busy) - client - workers)
    used = {pid: (cmd, sec - a.others.get(pid, (cmd, 0.0))[1]) for pid, (cmd, sec) in b.others.items()}
    top = sorted(used.values(), key=lambda x: -x[1])[:3]
    return {
        "outside_top": [f"{100 * sec / elapsed:.0f}% {cmd}" for cmd, sec in top if 100 * sec / elapsed >= 5],
        "client": sig(100 * client / elapsed),
        "workers": sig(100 * workers / elapsed),
        "outside": sig(100 * outside / elapsed),
        "steal": sig(100 * (b.machine_steal - a.machine_steal) / elapsed),
        "us_per_step": sig(1e6 * (client + workers) / max(steps, 1)),
    }


def tree_memory() -> dict[str, Any]:
    """Sums of RSS, and of PSS / USS where the kernel reports them, over this process and its children."""
    totals = {"rss": 0, "pss": 0, "uss": 0}
    full = True
    procs = tree()
    for proc in procs:
        if (read := read_memory(proc)) is None:
            continue
        info, full = read[0], full and read[1]
        for key in totals:
            totals[key] += int(getattr(info, key, 0))
    out: dict[str, Any] = {"processes": len(procs), "rss_bytes": totals["rss"]}
    if full and totals["uss"]:
        out["uss_bytes"] = totals["uss"]
    if full and totals["pss"]:
        out["pss_bytes"] = totals["pss"]
    return out


def leftover_children(wait: float = 5.0) -> list[str]:
    """Child processes still alive ``wait`` seconds after a pool or vector env closed (should be none)."""
    kids = not_templates(psutil.Process().children(recursive=True))
    _, alive = psutil.wait_procs(kids, timeout=wait)
    return describe(alive)


# ------------------------------------------------------------------ measurements
async def aioenv_cell(case: Case, loop: Loop, num_workers: int | None) -> dict[str, Any]:
    """One pool, one client loop: startup, warm-up, then rows received over ``case.seconds``."""
    n = case.num_envs
    before = tree_memory()
    t0 = time.perf_counter()
    pool = await aioenv.make(
        case.env,
        n,
        executor=case.executor,
        env_kwargs=case.env_kwargs,
        batch_size=loop.batch_size,
        num_workers=0 if loop.here else num_workers,
    )
    try:
        t1 = time.perf_counter()
        await pool.reset(seed=0)
        t2 = time.perf_counter()
        action = np.zeros(n, dtype=np.int64)
        pool.send(action, np.arange(n, dtype=np.int32))

        async def once() -> int:
            *_, info = await pool.recv(min_results=loop.min_results, max_results=loop.max_results)
            ids = info["env_id"]
            pool.send(action[: ids.size], ids)
            return int(ids.size)

        window = await timed_window(once, case.warmup, case.seconds, tree, cpu_snapshot)
        memory = tree_memory()
    finally:
        await pool.aclose()
    steps, elapsed = window.steps, window.elapsed
    memory["before_make_rss_bytes"] = before["rss_bytes"]
    memory["per_env_rss_bytes"] = sig(memory["rss_bytes"] / n)
    memory["per_env_added_rss_bytes"] = sig((memory["rss_bytes"] - before["rss_bytes"]) / n)
    if "pss_bytes" in memory:
        memory["per_env_pss_bytes"] = sig(memory["pss_bytes"] / n)
    cpu = cpu_usage(window.cpu0, window.cpu1, elapsed, steps)
    return window_figures(steps, window.calls, elapsed, pool.num_workers, (t0, t1, t2), cpu) | {"memory": memory}


def run_pool_cell(case: Case, loop: Loop, num_workers: int | None, timeout: float) -> dict[str, Any]:
    """:func:`aioenv_cell` on its own event loop, with a timeout (a hung pool fails its cell, not the run)."""
    return run_async(aioenv_cell(case, loop, num_workers), timeout)


def peer_cell(case: Case) -> dict[str, Any]:
    """gymnasium ``AsyncVectorEnv`` on the same envs: lock-step ``step()`` of a fixed action."""
    n = case.num_envs
    t0 = time.perf_counter()
    env = AsyncVectorEnv([functools.partial(SleepEnv, **case.env_kwargs)] * n, autoreset_mode=AutoresetMode.NEXT_STEP)
    try:
        env.reset(seed=0)
        t1 = time.perf_counter()
        action = np.zeros(n, dtype=np.int64)
        end = time.perf_counter() + case.warmup
        while time.perf_counter() < end:
            env.step(action)
        procs = tree()
        cpu0 = cpu_snapshot(procs)
        steps = calls = 0
        start = time.perf_counter()
        while (now := time.perf_counter()) < start + case.seconds:
            env.step(action)
            steps += n
            calls += 1
        cpu1 = cpu_snapshot(procs)
    finally:
        env.close()
    elapsed = now - start
    return {
        "steps": steps,
        "seconds": sig(elapsed),
        "steps_per_s": sig(steps / elapsed),
        "recv_calls": calls,
        "rows_per_recv": n,
        "num_workers": n,
        "startup_s": {"total": sig(t1 - t0)},
        "cpu": cpu_usage(cpu0, cpu1, elapsed, steps),
    }


def alone_cell(case: Case) -> dict[str, Any]:
    """The case's envs stepped by themselves in this process, with no pool: each env in a loop of its own (a
    thread per ``SleepEnv``, a coroutine per ``AsyncSleepEnv`` on uvloop), re-stepped the moment its step
    returns. What the envs reach on this machine when nothing carries their actions and results: the sleeps'
    own lateness (timer slack, wake-ups) and, for coroutines, the event loop's CPU per step."""
    if case.executor == "async":
        return run_async(_alone_async(case), 60.0 + 2 * (case.warmup + case.seconds))
    return _alone_threads(case)


def _alone_figures(steps: int, elapsed: float, startup: float, cpu: dict[str, Any]) -> dict[str, Any]:
    return {
        "steps": steps,
        "seconds": sig(elapsed),
        "steps_per_s": sig(steps / elapsed),
        "recv_calls": steps,
        "rows_per_recv": 1.0,
        "num_workers": 0,
        "startup_s": {"total": sig(startup)},
        "cpu": cpu,
    }


async def _alone_async(case: Case) -> dict[str, Any]:
    t0 = time.perf_counter()
    envs = [AsyncSleepEnv(**case.env_kwargs) for _ in range(case.num_envs)]
    count = [0]

    async def run(env: AsyncSleepEnv) -> None:
        await env.reset(seed=0)
        while True:
            await env.step(np.int64(0))
            count[0] += 1

    tasks = [asyncio.ensure_future(run(env)) for env in envs]
    startup = time.perf_counter() - t0
    try:
        await asyncio.sleep(case.warmup)
        procs = tree()
        cpu0, first, start = cpu_snapshot(procs), count[0], time.perf_counter()
        await asyncio.sleep(case.seconds)
        steps, elapsed, cpu1 = count[0] - first, time.perf_counter() - start, cpu_snapshot(procs)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return _alone_figures(steps, elapsed, startup, cpu_usage(cpu0, cpu1, elapsed, steps))


def _alone_threads(case: Case) -> dict[str, Any]:
    t0 = time.perf_counter()
    envs = [SleepEnv(**case.env_kwargs) for _ in range(case.num_envs)]
    counts = [0] * len(envs)  # one slot per thread: no lock
    stop = threading.Event()

    def run(i: int) -> None:
        env = envs[i]
        env.reset(seed=0)
        action = np.int64(0)
        while not stop.is_set():
            env.step(action)
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(envs))]
    for thread in threads:
        thread.start()
    startup = time.perf_counter() - t0
    try:
        time.sleep(case.warmup)
        procs = tree()
        cpu0, first, start = cpu_snapshot(procs), sum(counts), time.perf_counter()
        time.sleep(case.seconds)
        steps, elapsed, cpu1 = sum(counts) - first, time.perf_counter() - start, cpu_snapshot(procs)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return _alone_figures(steps, elapsed, startup, cpu_usage(cpu0, cpu1, elapsed, steps))


def bare_loop_of(case: Case) -> Loop | None:
    """The loop :func:`bare_cell` runs: ``case.bare`` if it is one of the case's loops (``--loops`` may leave
    it out)."""
    if case.bare is None or case.bare not in case.loops:
        return None
    loop = parse_loop(case.bare, case.num_envs)
    if loop.batch_size is None or loop.here:
        raise ValueError(f"{case.name}: the bare loop must be a batch:N loop on worker processes, not {case.bare!r}")
    return loop


def bare_cell(case: Case, loop: Loop, num_workers: int | None) -> dict[str, Any]:
    """The same envs (on threads, or coroutines: the case's executor) and client loop with no pool: worker
    processes hosting the envs, ids over bare pipes (``benchmarks/bare_loop.py``). What threads, the GIL, the
    workers' loops and the processes' wake-ups leave of the loop's ceiling on this machine, before any pool's
    own work."""
    batch = loop.batch_size
    assert batch is not None
    workers = num_workers or usable_cpus()  # as many as the pool's default (BareLoop keeps it <= num_envs)

    async def window() -> dict[str, Any]:
        t0 = time.perf_counter()
        async with BareLoop(case.num_envs, batch, workers, case.env_kwargs, case.executor) as bare:
            t1 = time.perf_counter()
            win = await timed_window(bare.once, case.warmup, case.seconds, tree, cpu_snapshot)
        cpu = cpu_usage(win.cpu0, win.cpu1, win.elapsed, win.steps)
        return window_figures(win.steps, win.calls, win.elapsed, bare.num_workers, (t0, t1, t1), cpu)

    return run_async(window(), 60.0 + 2 * (case.warmup + case.seconds))


def lockstep_ceiling(case: Case, rounds: int = 4_000, seed: int = 0) -> float:
    """Fraction of ideal a lock-step ``step()`` of all envs reaches with zero overhead: ``mean / E[max of n]``."""
    mu = math.log(case.mean) - case.sigma**2 / 2
    draws = np.minimum(np.random.default_rng(seed).lognormal(mu, case.sigma, (rounds, case.num_envs)), case.cap)
    return sig(case.mean / float(draws.max(axis=1).mean()))


def run_once(case: Case, label: str, cell: Callable[[], dict[str, Any]], ceiling: float) -> dict[str, Any]:
    """Run one cell once; record its figures or ``error: ...``, and any child process it left behind.

    ``ceiling``: the fraction of ideal this client loop reaches with zero overhead (recorded next to it)."""
    print(f"[{case.name}] {label} ...", flush=True)
    try:
        res = cell() | {"status": "ok"}
    except Exception as exc:  # noqa: BLE001 - report it, keep the other cells
        traceback.print_exc()
        res = {"status": f"error: {type(exc).__name__}: {exc}"}
    gc.collect()
    res["leftover_processes"] = leftover_children()
    res["loop_ceiling"] = ceiling
    if res["status"] == "ok":
        res["fraction_of_ideal"] = sig(res["steps_per_s"] / case.ideal)
        res["fraction_of_ceiling"] = sig(res["fraction_of_ideal"] / ceiling)
        cpu = res["cpu"]
        print(
            f"[{case.name}] {label}: {res['steps_per_s']:,.0f} steps/s = {res['fraction_of_ideal']:.1%} of ideal "
            f"{case.ideal:,.0f} (loop ceiling {ceiling:.1%}); startup {res['startup_s']['total']:.2f} s; "
            f"CPU % client {cpu['client']:.0f} workers {cpu['workers']:.0f} outside {cpu['outside']:.0f} "
            f"stolen {cpu['steal']:.0f}, "
            f"{cpu['us_per_step']:.1f} µs CPU/step",
            flush=True,
        )
    else:
        print(f"[{case.name}] {label}: {res['status']}", flush=True)
    if res["leftover_processes"]:
        print(f"[{case.name}] {label}: LEFT BEHIND {res['leftover_processes']}", flush=True)
    return res


def outside_of(res: dict[str, Any]) -> float:
    """CPU the rest of the machine used, plus CPU the host stole from this VM, during a cell's window
    (% of a core); 0 for a failed cell."""
    cpu = res.get("cpu", {})
    return float(cpu.get("outside", 0.0) + cpu.get("steal", 0.0))


def run_cell(
    case: Case, label: str, cell: Callable[[], dict[str, Any]], ceiling: float, retries: int
) -> dict[str, Any]:
    """:func:`run_once`, again up to ``retries`` times while other programs or the host disturb it (outside
    plus stolen CPU above ``DISTURBED_PCT``); keeps the least disturbed attempt and records how many there were."""
    attempts: list[dict[str, Any]] = []
    for _ in range(retries + 1):
        attempts.append(run_once(case, label, cell, ceiling))
        if attempts[-1]["status"] != "ok" or outside_of(attempts[-1]) <= DISTURBED_PCT:
            break
        print(
            f"[{case.name}] {label}: disturbed ({outside_of(attempts[-1]):.0f}% CPU outside or stolen), again",
            flush=True,
        )
    best = min(attempts, key=lambda r: (r["status"] != "ok", outside_of(r)))
    best["attempts"] = len(attempts)
    best["outside_per_attempt"] = [outside_of(r) for r in attempts]
    return best


def bench_case(case: Case, num_workers: int | None, retries: int) -> dict[str, Any]:
    """Every loop of a case (and its peer), each with its zero-overhead ceiling."""
    print(f"[{case.name}] {case.title}: ideal {case.ideal:,.0f} steps/s", flush=True)
    timeout = 120.0 + 3 * (case.warmup + case.seconds) + case.num_envs / 50
    cells: dict[str, dict[str, Any]] = {}
    if case.peer:  # first: AsyncVectorEnv forks, better before this process runs ZeroMQ threads
        cell = run_cell(case, PEER, functools.partial(peer_cell, case), lockstep_ceiling(case), retries)
        cells[PEER] = cell | {"loop": "step(), lock-step", "implementation": f"gymnasium {PEER}"}
    if case.alone:
        cell = run_cell(case, ALONE, functools.partial(alone_cell, case), 1.0, retries)
        cells[ALONE] = cell | {"loop": "each env in a loop of its own, one process", "implementation": ALONE}
    if case.bare and (bare := bare_loop_of(case)) is not None:
        run = functools.partial(bare_cell, case, bare, num_workers)
        cell = run_cell(case, BARE, run, loop_ceiling(case, bare), retries)
        cells[BARE] = cell | {"loop": bare.label, "implementation": BARE, "of_loop": bare.spec}
    for spec in case.loops:
        loop = parse_loop(spec, case.num_envs)
        label = f"aioenv {case.executor} {loop.label}"
        run = functools.partial(run_pool_cell, case, loop, num_workers, timeout)
        cell = run_cell(case, label, run, loop_ceiling(case, loop), retries)
        cells[spec] = cell | {"loop": loop.label, "implementation": f"aioenv {case.executor}"}
    return {"title": case.title, "params": case.params(), "cells": cells}


# ------------------------------------------------------------------ bars
def steps_of(section: dict[str, Any], key: str) -> float | None:
    """A cell's steps/s, or None when it failed."""
    cell = section["cells"].get(key, {})
    return cell.get("steps_per_s") if cell.get("status") == "ok" else None


def best_loop(section: dict[str, Any]) -> str | None:
    """The aioenv loop with the highest steps/s."""
    ok = {k: v for k, v in section["cells"].items() if k not in (PEER, ALONE, BARE) and v.get("status") == "ok"}
    return max(ok, key=lambda k: ok[k]["steps_per_s"]) if ok else None


def of_ceiling(section: dict[str, Any], loop: str, minimum: float) -> dict[str, Any]:
    """The bar of one loop's steps/s against the best that loop allows (its zero-overhead ceiling)."""
    cell = section["cells"].get(loop, {})
    value = cell.get("fraction_of_ceiling") if cell.get("status") == "ok" else None
    return bar(f"{section['title']}: of loop ceiling", value, ">=", minimum, "%", cell.get("loop", loop))


def judge(sections: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The bars of the cases that ran (informative only)."""
    bars = []
    if sec := sections.get("thread64"):
        loop = sec["params"]["loops"][0]
        ours, peer, ideal = steps_of(sec, loop), steps_of(sec, PEER), sec["params"]["ideal_steps_per_s"]
        label = sec["cells"][loop].get("loop", loop)
        bars.append(
            bar(f"{sec['title']}: of ideal", ours and sig(ours / ideal), ">=", BARS["thread_fraction"], "%", label)
        )
        bars.append(
            bar(
                f"{sec['title']}: aioenv / {PEER}",
                ours and peer and sig(ours / peer),
                ">=",
                BARS["thread_vs_peer"],
                "x",
                label,
            )
        )
        bars.append(of_ceiling(sec, loop, BARS["thread_of_ceiling"]))
    if sec := sections.get("async1k"):
        best = best_loop(sec)
        value = sig(sec["cells"][best]["fraction_of_ideal"]) if best else None
        about = f"best loop: {sec['cells'][best]['loop']}" if best else "no loop ran"
        bars.append(bar(f"{sec['title']}: of ideal", value, ">=", BARS["async1k_fraction"], "%", about))
        sec["best_loop"] = best
        bars.extend(of_ceiling(sec, loop, BARS["async1k_of_ceiling"]) for loop in sec["params"]["loops"])
    if sec := sections.get("async10k"):
        loop = sec["params"]["loops"][0]
        cell = sec["cells"][loop]
        ok = cell.get("status") == "ok"
        label = cell.get("loop", loop)
        bars.append(
            bar(
                f"{sec['title']}: of ideal",
                cell["fraction_of_ideal"] if ok else None,
                ">=",
                BARS["async10k_fraction"],
                "%",
                label,
            )
        )
        rss = cell["memory"]["rss_bytes"] if ok else None
        bars.append(
            bar(
                f"{sec['title']}: process tree RSS",
                rss,
                "<",
                MEMORY_BAR_BYTES,
                "bytes",
                "sum over this process and all workers",
            )
        )
    return bars


# ------------------------------------------------------------------ report
def md_figures(sections: dict[str, dict[str, Any]]) -> list[str]:
    """One row per cell: steps/s, fraction of ideal and of the loop's ceiling, batching, CPU, startup."""
    head = ["case", "implementation, client loop", "steps/s", "ideal", "of ideal", "loop ceiling", "rows/recv"]
    head += ["CPU client", "CPU workers", *WINDOW_HEAD]
    rows = []
    for sec in sections.values():
        ideal = sec["params"]["ideal_steps_per_s"]
        for key, cell in sec["cells"].items():
            what = f"{cell.get('implementation', key)}, {cell.get('loop', key)}"
            if key == sec.get("best_loop"):
                what += " (best)"
            ceiling = fmt(cell["loop_ceiling"], ".1%")
            if cell["status"] != "ok":
                rows.append([sec["title"], what, cell["status"], fmt(ideal), "n/a", ceiling, *["n/a"] * 7])
                continue
            cpu = cell["cpu"]
            rows.append(
                [
                    sec["title"],
                    what,
                    fmt(cell["steps_per_s"]),
                    fmt(ideal),
                    fmt(cell["fraction_of_ideal"], ".1%"),
                    ceiling,
                    fmt(cell["rows_per_recv"], ",.1f"),
                    fmt(cpu["client"], ".0f", "%"),
                    fmt(cpu["workers"], ".0f", "%"),
                    *window_columns(cell),
                ]
            )
    return md_table(head, rows, left=2)


def versus_alone(section: dict[str, Any]) -> dict[str, Any] | None:
    """Each aioenv loop against the envs alone (see :func:`alone_cell`): its steps/s as a fraction of theirs,
    and the CPU it spends per env-step beyond theirs (µs: what the pool costs). None without that cell."""
    alone = section["cells"].get(ALONE)
    if alone is None or alone.get("status") != "ok":
        return None
    out = {}
    for key, cell in section["cells"].items():
        if key in (PEER, ALONE, BARE) or cell.get("status") != "ok":
            continue
        out[key] = {
            "of_alone": sig(cell["steps_per_s"] / alone["steps_per_s"]),
            "extra_us_per_step": sig(cell["cpu"]["us_per_step"] - alone["cpu"]["us_per_step"]),
        }
    return out


def md_versus_alone(sections: dict[str, dict[str, Any]]) -> list[str]:
    """The table of each section's ``versus_alone`` (:func:`versus_alone`, recorded by :func:`main`), for the
    sections that measured the envs alone."""
    rows = []
    for sec in sections.values():
        for key, fig in sec.get("versus_alone", {}).items():
            loop = sec["cells"][key].get("loop", key)
            rows.append([sec["title"], loop, fmt(fig["of_alone"], ".1%"), fmt(fig["extra_us_per_step"], ".1f")])
    head = ["case", "aioenv client loop", "steps/s of the envs alone", "CPU µs/step beyond theirs"]
    return ["", *md_table(head, rows, left=2)] if rows else []


def md_memory(sec: dict[str, Any]) -> list[str]:
    """Startup and resident memory of the largest async case."""
    cell = sec["cells"][sec["params"]["loops"][0]]
    if cell["status"] != "ok":
        return []
    n, mem, st = sec["params"]["num_envs"], cell["memory"], cell["startup_s"]
    rows = [
        ["startup: `await aioenv.make(...)`", f"{st['make']:.2f} s", ""],
        ["startup: first `await pool.reset()`", f"{st['reset']:.2f} s", ""],
        [f"RSS, sum over {mem['processes']} processes", fmt_bytes(mem["rss_bytes"]), fmt_bytes(mem["rss_bytes"] / n)],
    ]
    for key in ("pss", "uss"):
        if f"{key}_bytes" in mem:
            total = mem[f"{key}_bytes"]
            rows.append(
                [f"{key.upper()}, sum over {mem['processes']} processes", fmt_bytes(total), fmt_bytes(total / n)]
            )
    added = mem["rss_bytes"] - mem["before_make_rss_bytes"]
    rows.append(["RSS of this process before `make`", fmt_bytes(mem["before_make_rss_bytes"]), ""])
    rows.append(["RSS added by the pool", fmt_bytes(added), fmt_bytes(added / n)])
    return md_table([f"{sec['title']} ({cell['num_workers']} workers)", "total", "per env"], rows)


def render_markdown(res: dict[str, Any]) -> str:
    """The tables, the command that produced them and any problem noticed."""
    m = res["machine"]
    about = f"{m['cpu_count']} CPUs, {m['memory_gib']} GiB, Python {m['python']}, {m['loop']}, "
    about += f"gymnasium {m['gymnasium']}, pyzmq {m['pyzmq']}, hot path {m.get('hot_path', '?')}, "
    about += f"load {m['load_avg_1m']}, {res['date']}"
    about += f", gc threshold {res['settings'].get('gc_threshold', 700)} in this process"
    legend = (
        "ideal = envs / mean latency. Loop ceiling: the fraction of ideal that client loop reaches with zero "
        "overhead (simulated from the same latencies). CPU: % of one core over the timed window; outside = "
        "the rest of the machine, stolen = taken by the host from this VM (both noise). CPU µs/step: "
        "client + workers CPU per env-step. The envs alone: the same envs stepped in this process with no pool, "
        "each in a loop of its own: what they reach on this machine by themselves, and what they cost."
    )
    lines = [f"`{res['command']}`", "", about, "", *md_figures(res["sections"]), "", legend]
    lines += md_versus_alone(res["sections"])
    lines += ["", *md_bars(res["bars"])]
    if sec := res["sections"].get("async10k"):
        lines += ["", *md_memory(sec)]
    notes = []
    for sec in res["sections"].values():
        for key, cell in sec["cells"].items():
            if cell["leftover_processes"]:
                notes.append(f"- {sec['title']}, {key}: processes left behind: {cell['leftover_processes']}")
            if cell["status"] == "ok" and outside_of(cell) > DISTURBED_PCT:
                cpu = cell["cpu"]
                top = "; ".join(cpu.get("outside_top", [])) or "no single process stands out: short-lived ones?"
                notes.append(
                    f"- {sec['title']}, {cell.get('loop', key)}: disturbed, the rest of the machine used "
                    f"{cpu['outside']:.0f}% of a core ({top}) and the host stole {cpu['steal']:.0f}% during the "
                    f"window, least disturbed of {cell.get('attempts', 1)} attempt(s); re-run for clean figures"
                )
    notes += [f"- processes left at exit: {p}" for p in res.get("leftover_processes_at_exit", [])]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ CLI
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: small sizes, 0.5 s windows (~10 s in all)")
    p.add_argument("--only", action="append", choices=SECTIONS, metavar="NAME", help=f"repeatable: {SECTIONS}")
    p.add_argument("--seconds", type=float, help="timed window of thread64 and async1k (default 10, --quick 0.5)")
    p.add_argument("--seconds-10k", type=float, help="timed window of async10k (default 20, --quick 0.5)")
    p.add_argument("--num-workers", type=int, help="worker processes per pool (default: the pool's default)")
    p.add_argument(
        "--loops",
        type=lambda s: [parse_loop(x, 10**9).spec for x in s.split(",")],
        help="async1k client loops, comma-separated: batch:N (recv() with batch_size N) or any "
        "(recv(min_results=1, max_results=num_envs)), either with @here for the envs in this process "
        f"(num_workers=0); default {','.join(ASYNC1K_LOOPS)} (--quick: batch:16,any)",
    )
    p.add_argument("--loop-10k", type=lambda s: parse_loop(s, 10**9).spec, default="any", help="async10k loop")
    p.add_argument(
        "--gc-threshold",
        type=int,
        metavar="N",
        help="gc.set_threshold(N) in this process (the envs of @here loops and the envs alone run here); "
        "default: Python's own (700)",
    )
    p.add_argument(
        "--retries",
        type=int,
        help=f"re-run a cell up to this many times while other programs use > {DISTURBED_PCT:g}%% of a core "
        "(keeps the least disturbed; default 2, --quick 0)",
    )
    p.add_argument(
        "--scale",
        type=int,
        default=1,
        metavar="K",
        help="thread64 and async1k with K times their envs and their loops' batches (a machine with many cores: "
        "8 gives 512 thread envs in batches of 128 and 8,192 async envs in batches of 512 and 2,048)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for latency.json and latency.md")
    args = p.parse_args(argv)
    if args.scale < 1:
        p.error(f"--scale must be a positive int, got {args.scale}")
    if args.retries is None:
        args.retries = 0 if args.quick else 2
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the selected cases, write JSON + Markdown, print the tables."""
    args = parse_args(argv)
    if args.gc_threshold is not None:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    cases = build_cases(args)
    selected = [name for name in SECTIONS if name in set(args.only or SECTIONS)]
    res: dict[str, Any] = run_header() | {
        "settings": {
            "quick": args.quick,
            "num_workers": args.num_workers,
            "retries": args.retries,
            "gc_threshold": gc.get_threshold()[0],
            "bars": BARS,
            "memory_bar": "1 GiB",
        },
        "sections": {},
    }
    for name in selected:
        res["sections"][name] = bench_case(cases[name], args.num_workers, args.retries)
    res["bars"] = judge(res["sections"])
    for section in res["sections"].values():
        if (figures := versus_alone(section)) is not None:
            section["versus_alone"] = figures
    res["leftover_processes_at_exit"] = leftover_children(wait=1.0)
    res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    md = render_markdown(res)
    write_atomic(args.out / "latency.json", json.dumps(res, indent=2) + "\n")
    write_atomic(args.out / "latency.md", md)
    print("\n" + md)
    print(f"wrote {args.out / 'latency.json'} and {args.out / 'latency.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

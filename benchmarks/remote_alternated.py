"""bench_remote.py's CartPole loop on three pools at once, alternated in one process: embedded, remote over tcp and
remote over a unix socket; with what the client and the server spend of their CPU on each ``recv()`` batch.

Why: cells in windows of their own (bench_remote's repeats) meet the machine's slow moments one at a time, and on
a shared 2-vCPU VM a window's steps per second moves by 30% from one minute to the next: the remote / embedded
ratio of the goals runs read 0.49-0.69x over a day with the remote path unchanged. Here one process holds the three
pools at once, each with worker processes of its own (idle while another pool runs), and runs the same loop on each
in slices of ~0.25 s, the order rotating every round: a slow moment falls on all three alike, and the median of the
rounds' ratios (with its quartiles) is what the bars judge.

Each slice sends every env a step, runs ``recv()`` then ``send`` for exactly the rows that came for its time, then
receives every row still in flight: it starts and ends with nothing in flight, so no pool's workers step while
another is timed. Over the slices this process's CPU time (``time.process_time``: the client's, or the embedded
pool's whole process) and the server's (its own process, not its workers) are summed per pool and divided by the
``recv()`` batches: the cost of a batch on each side, a figure that does not depend on how many cores there are
(as ``bench_core.py``'s cost figure). A remote pool's client and server together against the embedded pool's
process is what the relay adds to a batch; the server's figure alone is what its decoding, routing and re-encoding
cost.

Not a package module: ``bench_remote.py`` puts ``benchmarks/`` on ``sys.path`` before importing it.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import psutil
from benchutil import Server, Spec, make_pool, run_async, sig

import aioenv

__all__ = ["WHERES", "alternated", "md_alternated"]

#: The three pools, in the order of the first round; each round starts one later.
WHERES = ("embedded", "remote", "remote unix")
#: Seconds of a slice, and of the warm-up slices each pool runs before the first round.
SLICE_S = 0.25
WARMUP_SLICES = 2
#: Pre-drawn action rows, cycled.
ACTION_BATCHES = 64


async def _slice(
    pool: aioenv.Pool, acts: np.ndarray, counter: itertools.count[int], seconds: float, server: psutil.Process | None
) -> tuple[int, int, float, float, float]:
    """One slice of ``pool``'s loop: ``(rows, recv batches, wall s, this process's CPU s, the server's CPU s)``."""
    n = pool.num_envs
    c0, s0 = time.process_time(), _cpu(server)
    start = time.perf_counter()
    pool.send(acts[next(counter) % ACTION_BATCHES], np.arange(n))
    rows = batches = 0
    while time.perf_counter() < start + seconds:
        *_, info = await pool.recv()
        ids = info["env_id"]
        rows += ids.size
        batches += 1
        pool.send(acts[next(counter) % ACTION_BATCHES][ids], ids)
    *_, info = await pool.recv(min_results=n, max_results=n)  # what is still in flight: the slice ends empty
    rows += info["env_id"].size
    batches += 1
    wall = time.perf_counter() - start
    return rows, batches, wall, time.process_time() - c0, _cpu(server) - s0


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    times = proc.cpu_times()
    return float(times.user + times.system)


async def _alternate(
    spec: Spec, endpoints: dict[str, str | None], pids: dict[str, int | None], rounds: int
) -> dict[str, Any]:
    pools: dict[str, aioenv.Pool] = {}
    try:
        for where in WHERES:
            pools[where] = await make_pool(spec, endpoints[where])
            await pools[where].reset(seed=0)
        servers = {where: None if pid is None else psutil.Process(pid) for where, pid in pids.items()}
        acts = np.random.default_rng(0).integers(0, 2, size=(ACTION_BATCHES, spec.num_envs), dtype=np.int64)
        counter = itertools.count()
        for _ in range(WARMUP_SLICES):
            for where in WHERES:
                await _slice(pools[where], acts, counter, SLICE_S, servers[where])
        per_round: list[dict[str, tuple[int, int, float, float, float]]] = []
        for r in range(rounds):
            order = WHERES[r % len(WHERES) :] + WHERES[: r % len(WHERES)]
            per_round.append({w: await _slice(pools[w], acts, counter, SLICE_S, servers[w]) for w in order})
        return _figures(per_round, spec.num_workers)
    finally:
        for pool in pools.values():
            await pool.aclose()


def _figures(per_round: Sequence[dict[str, tuple[int, int, float, float, float]]], num_workers: int) -> dict[str, Any]:
    """The figures of the rounds (each pool's slice: ``(rows, recv batches, wall s, this process's CPU s, the
    server's CPU s)``): each pool's median steps/s; each remote pool's ratio to the embedded one within every round,
    their median and quartiles; and each pool's CPU per batch, every slice's CPU over every slice's batches."""
    speed = {w: [got[w][0] / got[w][2] for got in per_round] for w in WHERES}
    out: dict[str, Any] = {
        "rounds": len(per_round),
        "slice_s": SLICE_S,
        "num_workers": num_workers,
        "steps_per_s": {w: sig(statistics.median(v)) for w, v in speed.items()},
    }
    for where, key in (("remote", "remote_embedded"), ("remote unix", "unix_embedded")):
        ratios = [a / b for a, b in zip(speed[where], speed["embedded"], strict=True)]
        out[f"ratio_{key}"] = sig(statistics.median(ratios))
        out[f"quartiles_{key}"] = _quartiles(ratios)
        out[f"rounds_ratio_{key}"] = [sig(r) for r in ratios]
    cpu: dict[str, dict[str, float | None]] = {}
    for where in WHERES:
        batches = sum(got[where][1] for got in per_round)
        client = sum(got[where][3] for got in per_round)
        server = sum(got[where][4] for got in per_round)
        cpu[where] = {
            "batches": batches,
            "rows_per_batch": sig(sum(got[where][0] for got in per_round) / batches),
            "client_us_per_batch": sig(1e6 * client / batches),
            "server_us_per_batch": None if where == "embedded" else sig(1e6 * server / batches),
        }
    out["cpu"] = cpu
    return out


def _quartiles(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [sig(values[0]), sig(values[0])]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")  # within the rounds, never past them
    return [sig(q1), sig(q3)]


def alternated(spec: Spec, tcp: Server, unix: Server, seconds: float) -> dict[str, Any]:
    """The three pools of ``spec`` (embedded, on ``tcp``, on ``unix``) alternated for about ``seconds`` in all (at
    least two rounds); raises what a pool raised."""
    rounds = max(2, round(seconds / (SLICE_S * len(WHERES))))
    endpoints = {"embedded": None, "remote": tcp.endpoint, "remote unix": unix.endpoint}
    pids = {"embedded": None, "remote": tcp.pid, "remote unix": unix.pid}
    timeout = 120.0 + 3 * seconds + spec.num_envs / 50
    return run_async(_alternate(spec, endpoints, pids, rounds), timeout)


def md_alternated(sec: dict[str, Any]) -> list[str]:
    """The alternated cell's lines of remote.md."""
    alt = sec["alternated"]
    if "error" in alt:
        return [f"Alternated in one process: {alt['error']}"]
    head = "| pool | steps/s, median of rounds | / embedded (quartiles of the rounds) | CPU µs a batch: this process "
    head += "| the server | together |"
    lines = [
        f"Alternated in one process ({alt['rounds']} rounds of {alt['slice_s']:g} s slices, the order rotating; "
        f"{alt['num_workers']} workers each; CPU per `recv()` batch summed over every slice):",
        "",
        head,
        "| --- | --: | --: | --: | --: | --: |",
    ]
    ratios = {"remote": "remote_embedded", "remote unix": "unix_embedded"}
    for where in WHERES:
        cpu = alt["cpu"][where]
        client, server = cpu["client_us_per_batch"], cpu["server_us_per_batch"]
        if where in ratios:
            q1, q3 = alt[f"quartiles_{ratios[where]}"]
            ratio = f"{alt[f'ratio_{ratios[where]}']:.2f}x ({q1:.2f}-{q3:.2f}x)"
        else:
            ratio = "1x"
        both = client + (server or 0.0)
        shown = "-" if server is None else f"{server:,.0f}"
        lines.append(
            f"| {where} | {alt['steps_per_s'][where]:,.0f} | {ratio} | {client:,.0f} | {shown} | {both:,.0f} |"
        )
    return lines

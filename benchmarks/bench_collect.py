"""``aioenv.collect.Collector`` against TorchRL's collectors and env pools (issue 19's collector workloads).

Three workloads, each cell in a fresh Python process with ``torch.set_num_threads(1)``:

1. ``cartpole``: CartPole-v1, 32 envs, a 64x64 MLP policy (a torch module sampling from its logits), 1,024
   frames per batch. Frames/s of ``Collector(aioenv.SyncPool("CartPole-v1", 32), module)`` (``aioenv``), and of
   TorchRL's ``Collector`` with the same MLP over ``SerialEnv(32, GymEnv)`` (``torchrl serial``) and over
   ``ParallelEnv(2, SerialEnv(16, GymEnv))`` (``torchrl parallel``), as ``bench_torchrl.py`` builds them; and
   ``hand loop``: the same SyncPool and MLP stepped by ``pool.step(policy(obs))`` in a plain loop, what a user
   writes without a collector. ``aioenv async`` and ``hand loop async``: the same first-finished
   (``Collector(..., mode="async")`` against ``pool.send(policy(obs), env_ids)`` after each
   ``pool.recv(min_results=1)``, counting transitions only, as the collector does). Every aioenv cell's pool
   is placed the same way (``POOL_KW``: 2 inline workers), so a ratio is the collector's cost, not a placement
   that ``executor="auto"`` chose differently in two cells. Each aioenv cell also gives its process's CPU
   time per frame (``cpu_us_per_frame``, ``time.process_time``: the policy, the pool's side and the
   collector; the workers' steps are the same in every cell), the figure a loaded machine disturbs least.
   Goals: aioenv >= 5x the faster TorchRL setup, and both collector modes >= 0.95x their hand loop (the
   collector's bookkeeping costs at most 5%).
2. ``latency``: 256 envs whose steps only wait (lognormal, mean 20 ms, sigma 0.5, cap 200 ms:
   ``aioenv/envs/latency.py``; ideal = 256 / 20 ms). ``aioenv``: ``AsyncSleepEnv`` on ``executor="async"``,
   ``Collector(mode="async")`` with a numpy policy; ``torchrl pool``: TorchRL's ``AsyncEnvPool`` (threading
   backend) of ``GymWrapper(SleepEnv)``, driven by its own ``async_step_send`` / ``async_step_recv(min_get=1)``
   loop (the way to use it first-finished). Each is given as a fraction of the batch-aware ideal
   ``ideal / (1 + (b - 1) / (2 n))``, ``b`` the mean rows the policy got per call. Goal: aioenv >= 95% of it.
3. ``memory``: a background collection (``background=True, queue_size=2``) over CartPole-v1 x 32 for
   ``--memory-seconds``: resident memory of the whole process tree (this process and its workers) sampled
   after a warm-up and at the end. Goal: no growth after warm-up (< 16 MiB).
4. ``alternated``: the ``cartpole`` collector (``sync``, ``async``) and its hand loop in one process, each over a
   SyncPool of its own (``POOL_KW``) with the same policy, in slices of ~0.25 s that alternate (which goes first
   alternating): the median over rounds of the ratio of their frames/s within a round, its quartiles, and the
   ratio of this process's CPU time per frame. A slow moment of the machine then falls on both sides of a round;
   between cells in separate processes it falls on one. Goal: both >= 0.95x, as for ``cartpole``'s ratios.

Cells of a workload run in interleaved rounds with a rotating order; a figure is the median per cell, a ratio
the median over rounds of the ratio within a round.

Run: ``python benchmarks/bench_collect.py [--seconds 5] [--repeats 3] [--memory-seconds 60] [--only WORKLOAD]
[--quick] [--out DIR]``. Writes ``collect.json`` and ``collect.md`` to ``benchmarks/results`` (or ``--out``)
and prints the tables; with ``--only``, the other workloads of the ``collect.json`` already there are kept,
marked with the command and date of the run that measured them. ``--quick``: 1 round of 1 s per cell and 3 s
of memory, a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from freshcell import run_fresh, versions  # noqa: E402 - found through the path set above
from recorded import command  # noqa: E402

NUM_ENVS = 32
LATENCY_ENVS = 256
LATENCY = {"mean": 0.02, "sigma": 0.5, "cap": 0.2, "episode_steps": 10**9}
FRAMES_PER_BATCH = 1024
#: the placement of every aioenv cell of the ``cartpole`` workload (the same in the collector's and the hand loops')
POOL_KW: dict[str, Any] = {"seed": 0, "executor": "inline", "num_workers": 2}
MIB = 2**20
MEMORY_BAR_MIB = 16.0

#: workload -> cell -> what it measures
WORKLOADS: dict[str, dict[str, str]] = {
    "cartpole": {
        "aioenv": 'Collector(SyncPool("CartPole-v1", 32), MLP module)',
        "torchrl serial": 'TorchRL Collector over SerialEnv(32, GymEnv("CartPole-v1"))',
        "torchrl parallel": "TorchRL Collector over ParallelEnv(2, SerialEnv(16, GymEnv))",
        "hand loop": 'obs = pool.step(module(obs)) over SyncPool("CartPole-v1", 32), a plain loop',
        "aioenv async": 'Collector(SyncPool("CartPole-v1", 32), MLP module, mode="async")',
        "hand loop async": "pool.send(module(obs), env_ids) after each pool.recv(min_results=1), same pool",
    },
    "latency": {
        "aioenv": 'Collector(Pool(AsyncSleepEnv, 256, executor="async"), mode="async")',
        "torchrl pool": 'AsyncEnvPool(256 x GymWrapper(SleepEnv), backend="threading"), recv(min_get=1) loop',
    },
    "memory": {"aioenv": "Collector(SyncPool(CartPole-v1, 32), background=True, queue_size=2)"},
    "alternated": {
        "sync": "Collector over a SyncPool / its hand loop over another, alike (cartpole), in one process",
        "async": 'Collector(mode="async") / its hand loop async, likewise',
    },
}
RATIOS = {
    "cartpole": {
        "aioenv / torchrl serial": ("aioenv", "torchrl serial"),
        "aioenv / torchrl parallel": ("aioenv", "torchrl parallel"),
        "aioenv / hand loop": ("aioenv", "hand loop"),
        "aioenv async / hand loop async": ("aioenv async", "hand loop async"),
    },
    "latency": {"aioenv / torchrl pool": ("aioenv", "torchrl pool")},
    "memory": {},
    "alternated": {},
}


# ----------------------------------------------------------------------------- cells (in their own process)
def mlp_policy() -> Any:
    """The 64x64 MLP of bench_torchrl.py as a plain module: observations (B, 4) -> sampled actions (B,)."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
    )

    class Sample(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, obs: Any) -> Any:
            return torch.distributions.Categorical(logits=self.net(obs)).sample()

    return Sample()


def slice_of(batches: Any, count: Any, seconds: float) -> tuple[int, int, float, float]:
    """Pull batches for at least ``seconds`` (``count(batch)`` frames each): the frames, the batches, the wall time
    and this process's CPU time."""
    frames = n = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        frames += count(next(batches))
        n += 1
    return frames, n, time.perf_counter() - start, time.process_time() - cpu


def timed(batches: Any, seconds: float, count: Any) -> dict[str, Any]:
    """Pull two batches to warm up, then batches for ``seconds``; frames/s (``count(batch)`` frames each), and
    this process's CPU time per frame (µs)."""
    for _ in range(2):
        next(batches)
    frames, n, elapsed, cpu = slice_of(batches, count, seconds)
    return {
        "value": frames / elapsed,
        "frames": frames,
        "batches": n,
        "seconds": elapsed,
        "cpu_us_per_frame": 1e6 * cpu / max(frames, 1),
    }


def cartpole_aioenv(seconds: float, mode: str = "sync") -> dict[str, Any]:
    import aioenv
    from aioenv.collect import Collector

    with (
        aioenv.SyncPool("CartPole-v1", NUM_ENVS, **POOL_KW) as pool,
        Collector(pool, mlp_policy(), frames_per_batch=FRAMES_PER_BATCH, mode=mode) as collector,
    ):
        out = timed(iter(collector), seconds, lambda b: b.frames)
        out["note"] = pool.pool.describe_placement()
    return out


def hand_batches(pool: Any, policy: Any) -> Any:
    """``pool.step(policy(obs))`` in a plain loop, what a user writes without a collector: 1,024 frames a "batch"."""
    import torch

    obs, _ = pool.reset()
    while True:
        for _ in range(FRAMES_PER_BATCH // NUM_ENVS):
            with torch.no_grad():
                actions = policy(torch.as_tensor(obs)).numpy()
            obs, _reward, _terminated, _truncated, _info = pool.step(actions)
        yield FRAMES_PER_BATCH


def hand_async_batches(pool: Any, policy: Any) -> Any:
    """First-finished without a collector: after each ``pool.recv(min_results=1)``, ``pool.send`` the policy's
    actions for the rows that came; a "batch" is 1,024 transitions (a ``next_step`` reset step is none)."""
    import numpy as np
    import torch

    def act(obs: Any) -> Any:
        with torch.no_grad():
            return policy(torch.as_tensor(obs)).numpy()

    obs, _ = pool.reset()
    ended = np.zeros(NUM_ENVS, dtype=np.bool_)  # the env's next row only resets it
    pool.send(act(obs))
    while True:
        frames = 0
        while frames < FRAMES_PER_BATCH:
            obs, _reward, terminated, truncated, info = pool.recv(min_results=1)
            ids = info["env_id"]
            pool.send(act(obs), ids)
            frames += int(np.count_nonzero(~ended[ids]))
            ended[ids] = terminated | truncated
        yield frames


def cartpole_hand(seconds: float) -> dict[str, Any]:
    """The collector's workload without it (:func:`hand_batches`)."""
    import aioenv

    with aioenv.SyncPool("CartPole-v1", NUM_ENVS, **POOL_KW) as pool:
        out = timed(hand_batches(pool, mlp_policy()), seconds, lambda frames: frames)
        out["note"] = pool.pool.describe_placement()
    return out


def cartpole_hand_async(seconds: float) -> dict[str, Any]:
    """The async collector's workload without it (:func:`hand_async_batches`)."""
    import aioenv

    with aioenv.SyncPool("CartPole-v1", NUM_ENVS, **POOL_KW) as pool:
        out = timed(hand_async_batches(pool, mlp_policy()), seconds, lambda frames: frames)
        out["note"] = pool.pool.describe_placement()
    return out


def cartpole_alternated(seconds: float, mode: str) -> dict[str, Any]:
    """The collector and its hand loop (``mode``: ``"sync"`` or ``"async"``) in this one process, each over a
    SyncPool of its own placed alike, with the same policy, alternated in slices of ~0.25 s (which one goes first
    alternating): the median over rounds of the ratio of their frames/s within a round, its quartiles, and the
    same for this process's CPU time per frame. A slow moment of the machine falls on both sides of a round
    alike, where cells in separate processes meet it in one cell only."""
    import aioenv
    from aioenv.collect import Collector

    policy = mlp_policy()
    hand_of = hand_batches if mode == "sync" else hand_async_batches
    with (
        aioenv.SyncPool("CartPole-v1", NUM_ENVS, **POOL_KW) as ours,
        Collector(ours, policy, frames_per_batch=FRAMES_PER_BATCH, mode=mode) as collector,
        aioenv.SyncPool("CartPole-v1", NUM_ENVS, **POOL_KW) as theirs,
    ):
        sides = [(iter(collector), lambda b: b.frames), (hand_of(theirs, policy), lambda frames: frames)]
        for batches, _ in sides:
            for _ in range(2):
                next(batches)
        rates: list[float] = []
        cpus: list[float] = []
        for r in range(max(2, round(seconds / 0.5))):
            got: list[tuple[int, int, float, float]] = [(0, 0, 0.0, 0.0), (0, 0, 0.0, 0.0)]
            for k in (0, 1) if r % 2 == 0 else (1, 0):
                got[k] = slice_of(sides[k][0], sides[k][1], 0.25)
            (fc, _, wc, cc), (fh, _, wh, ch) = got
            rates.append((fc / wc) / (fh / wh))
            cpus.append((cc / fc) / (ch / fh))
    # The rounds' own quartiles ("inclusive": within them; the default method extrapolates past them from two
    # rounds, --quick's, even below zero).
    q1, _, q3 = statistics.quantiles(rates, n=4, method="inclusive")
    return {"value": statistics.median(rates), "quartiles": [q1, q3], "cpu_ratio": statistics.median(cpus),
            "slices": len(rates)}  # fmt: skip


def cartpole_torchrl(cell: str, seconds: float) -> dict[str, Any]:
    warnings.simplefilter("ignore", DeprecationWarning)
    import bench_torchrl
    from torchrl.collectors import Collector

    env, _ = bench_torchrl.build_env("serial" if cell == "torchrl serial" else "parallel")
    collector = Collector(
        env,
        bench_torchrl.build_policy(env),
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=-1,
        auto_register_policy_transforms=False,
    )
    try:
        out = timed(iter(collector), seconds, lambda b: b.numel())
        del out["cpu_us_per_frame"]  # its envs step in this process (serial) or in others (parallel): no peer
        return out
    finally:
        collector.shutdown()
        if not env.is_closed:
            env.close()


def latency_aioenv(seconds: float) -> dict[str, Any]:
    import numpy as np

    import aioenv
    from aioenv.collect import Collector
    from aioenv.envs.latency import AsyncSleepEnv

    calls = [0, 0]

    def policy(obs: Any, env_ids: Any) -> Any:
        calls[0] += 1
        calls[1] += len(env_ids)
        return np.zeros(len(env_ids), dtype=np.int64)

    async def run() -> dict[str, Any]:
        async with (
            aioenv.Pool(AsyncSleepEnv, LATENCY_ENVS, executor="async", env_kwargs=LATENCY, seed=0) as pool,
            Collector(pool, policy, frames_per_batch=FRAMES_PER_BATCH, mode="async") as collector,
        ):
            it = aiter(collector)
            for _ in range(2):
                await anext(it)
            calls[:] = [0, 0]
            frames, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                frames += (await anext(it)).frames
            elapsed = time.perf_counter() - start
        return {"frames": frames, "seconds": elapsed, "value": frames / elapsed}

    out = aioenv.run(run())
    out["rows_per_call"] = calls[1] / max(calls[0], 1)
    return out


def make_sleep_env() -> Any:
    """One TorchRL env over a blocking ``SleepEnv`` (module level: picklable)."""
    from torchrl.envs import GymWrapper

    from aioenv.envs.latency import SleepEnv

    return GymWrapper(SleepEnv(**LATENCY))  # type: ignore[arg-type]


def latency_torchrl(seconds: float) -> dict[str, Any]:
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.envs import AsyncEnvPool

    pool = AsyncEnvPool([make_sleep_env] * LATENCY_ENVS, backend="threading")
    rows = [0, 0]
    try:
        td = pool.reset()
        pool.async_step_send(pool.rand_action(td))
        frames, start, warm = 0, time.perf_counter(), 1.0
        counting = False
        while True:
            out = pool.async_step_recv(min_get=1)
            ids = list(out["env_index"])
            now = time.perf_counter()
            if not counting and now - start >= warm:
                counting, start, frames, rows = True, now, 0, [0, 0]
            elif counting and now - start >= seconds:
                break
            frames += len(ids)
            rows[0] += 1
            rows[1] += len(ids)
            send = out["next"].exclude("reward")  # the next observation and flags, as a reset gives them
            send.set("action", out["action"])  # a fixed policy (the env ignores its action)
            send.set("env_index", out["env_index"])
            pool.async_step_send(send)
        elapsed = time.perf_counter() - start
    finally:
        pool.close(raise_if_closed=False)
    return {"frames": frames, "seconds": elapsed, "value": frames / elapsed, "rows_per_call": rows[1] / max(rows[0], 1)}


def tree_rss() -> int:
    """Resident memory of this process and its children (bytes)."""
    import psutil

    me = psutil.Process()
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def memory_aioenv(seconds: float) -> dict[str, Any]:
    import numpy as np

    import aioenv
    from aioenv.collect import Collector

    def policy(obs: Any) -> Any:
        return (obs[:, 2] > 0).astype(np.int64)

    samples: list[tuple[float, int]] = []
    with (
        aioenv.SyncPool("CartPole-v1", NUM_ENVS, seed=0) as pool,
        Collector(pool, policy, frames_per_batch=FRAMES_PER_BATCH, background=True, queue_size=2) as collector,
    ):
        start = time.perf_counter()
        frames = 0
        for batch in collector:
            frames += batch.frames
            _ = batch.obs.sum()  # the consumer touches what it gets
            now = time.perf_counter() - start
            if not samples or now - samples[-1][0] >= seconds / 20:
                samples.append((now, tree_rss()))
            if now >= seconds:
                break
    warm = next(rss for t, rss in samples if t >= seconds / 4)
    peak_after = max(rss for t, rss in samples if t >= seconds / 4)
    return {
        "value": (samples[-1][1] - warm) / MIB,
        "growth_mib": (samples[-1][1] - warm) / MIB,
        "peak_growth_mib": (peak_after - warm) / MIB,
        "rss_after_warmup_mib": warm / MIB,
        "rss_end_mib": samples[-1][1] / MIB,
        "frames": frames,
        "seconds": seconds,
        "samples": [[round(t, 2), rss] for t, rss in samples],
    }


def run_cell(workload: str, cell: str, seconds: float) -> dict[str, Any]:
    """One cell's figures (in this process)."""
    import torch

    torch.set_num_threads(1)
    if workload == "cartpole":
        if cell in ("aioenv", "aioenv async"):
            return cartpole_aioenv(seconds, "sync" if cell == "aioenv" else "async")
        if cell == "hand loop":
            return cartpole_hand(seconds)
        return cartpole_hand_async(seconds) if cell == "hand loop async" else cartpole_torchrl(cell, seconds)
    if workload == "latency":
        return latency_aioenv(seconds) if cell == "aioenv" else latency_torchrl(seconds)
    if workload == "memory":
        return memory_aioenv(seconds)
    if workload == "alternated":
        return cartpole_alternated(seconds, cell)
    raise ValueError(f"unknown workload {workload!r}")


# ----------------------------------------------------------------------------- rounds (the parent process)
def spawn(workload: str, cell: str, seconds: float) -> dict[str, Any]:
    """Run a cell in a fresh interpreter; its result, or RuntimeError with its stderr."""
    args = ["--cell", f"{workload}/{cell}", "--seconds", str(seconds)]
    return run_fresh(__file__, args, 300 + 4 * seconds, f"cell {workload}/{cell}")


def run_workload(workload: str, seconds: float, repeats: int) -> dict[str, Any]:
    """Every cell of ``workload`` once per round, ``repeats`` rounds, each starting at the next cell."""
    cells = list(WORKLOADS[workload])
    rounds: list[dict[str, dict[str, Any]]] = []
    errors: dict[str, str] = {}
    for r in range(repeats):
        this: dict[str, dict[str, Any]] = {}
        for cell in cells[r % len(cells) :] + cells[: r % len(cells)]:
            if cell in errors:
                continue
            try:
                this[cell] = spawn(workload, cell, seconds)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                errors[cell] = f"{type(exc).__name__}: {exc}"
                print(f"[{workload} {r + 1}/{repeats}] {cell}: failed ({errors[cell][:300]})", flush=True)
                continue
            shown = f"{this[cell]['value']:.3f}x" if workload == "alternated" else f"{this[cell]['value']:,.1f}"
            print(f"[{workload} {r + 1}/{repeats}] {cell}: {shown}", flush=True)
        rounds.append(this)
    medians = {c: statistics.median(rnd[c]["value"] for rnd in rounds if c in rnd) for c in cells if c not in errors}
    ratios, cpu_ratios = {}, {}
    for label, (num, den) in RATIOS[workload].items():
        both = [rnd for rnd in rounds if num in rnd and den in rnd]
        if both:
            ratios[label] = statistics.median(rnd[num]["value"] / rnd[den]["value"] for rnd in both)
        timed_both = [rnd for rnd in both if "cpu_us_per_frame" in rnd[num] and "cpu_us_per_frame" in rnd[den]]
        cpu = [rnd[num]["cpu_us_per_frame"] / rnd[den]["cpu_us_per_frame"] for rnd in timed_both]
        if cpu:
            cpu_ratios[label] = statistics.median(cpu)
    cpu_medians = {}
    for c in cells:
        cpu_us = [rnd[c]["cpu_us_per_frame"] for rnd in rounds if "cpu_us_per_frame" in rnd.get(c, {})]
        if cpu_us:
            cpu_medians[c] = statistics.median(cpu_us)
    return {"cells": cells, "values": medians, "ratios": ratios, "cpu_us_per_frame": cpu_medians,
            "cpu_ratios": cpu_ratios, "rounds": rounds, "errors": errors}  # fmt: skip


def batch_aware_ideal(rows_per_call: float) -> float:
    """``ideal / (1 + (b - 1) / (2 n))``: steps/s at best when the policy answers ``b`` envs at a time."""
    ideal = LATENCY_ENVS / LATENCY["mean"]
    return ideal / (1 + (max(rows_per_call, 1.0) - 1) / (2 * LATENCY_ENVS))


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, met or missed (informative: a missed goal never fails the run)."""
    out = []
    cart = result["workloads"].get("cartpole", {}).get("values", {})
    best = max((cart[c] for c in ("torchrl serial", "torchrl parallel") if c in cart), default=None)
    if best and "aioenv" in cart:
        out.append({"goal": "cartpole: aioenv >= 5x the faster TorchRL setup", "value": cart["aioenv"] / best,
                    "threshold": 5.0, "met": cart["aioenv"] / best >= 5.0})  # fmt: skip
    for label, what in (("aioenv / hand loop", "aioenv"), ("aioenv async / hand loop async", "aioenv async")):
        hand = result["workloads"].get("cartpole", {}).get("ratios", {}).get(label)
        if hand is not None:
            out.append({"goal": f"cartpole: {what} >= 0.95x a hand loop over the same pool and policy", "value": hand,
                        "threshold": 0.95, "met": hand >= 0.95})  # fmt: skip
    alt = result["workloads"].get("alternated", {}).get("values", {})
    for cell, what in (("sync", "aioenv"), ("async", "aioenv async")):
        if cell in alt:
            out.append({"goal": f"alternated: {what} >= 0.95x its hand loop in one process", "value": alt[cell],
                        "threshold": 0.95, "met": alt[cell] >= 0.95})  # fmt: skip
    lat = result["workloads"].get("latency", {})
    for cell in lat.get("values", {}):
        rounds = [rnd[cell] for rnd in lat["rounds"] if cell in rnd]
        fractions = [r["value"] / batch_aware_ideal(r["rows_per_call"]) for r in rounds]
        lat.setdefault("of_ideal", {})[cell] = statistics.median(fractions)
    if "aioenv" in lat.get("of_ideal", {}):
        value = lat["of_ideal"]["aioenv"]
        out.append({"goal": "latency: aioenv >= 95% of the batch-aware ideal", "value": value, "threshold": 0.95,
                    "met": value >= 0.95})  # fmt: skip
    mem = result["workloads"].get("memory", {}).get("values", {})
    if "aioenv" in mem:
        out.append({"goal": f"memory: growth after warm-up < {MEMORY_BAR_MIB:g} MiB", "value": mem["aioenv"],
                    "threshold": MEMORY_BAR_MIB, "met": mem["aioenv"] < MEMORY_BAR_MIB})  # fmt: skip
    return out


def carry_over(result: dict[str, Any], previous: Path) -> None:
    """Keep the workloads of ``previous`` (an earlier ``collect.json``) that this run did not run (``--only``),
    each with the command and date of the run that measured it (``result["carried"]``), so a run of one
    workload does not drop the others' figures."""
    if not previous.exists():
        return
    old = json.loads(previous.read_text())
    for workload, figures in old.get("workloads", {}).items():
        if workload in result["workloads"] or workload not in WORKLOADS:
            continue
        result["workloads"][workload] = figures
        source = old.get("carried", {}).get(workload, {"command": old.get("command"), "date": old.get("date")})
        result.setdefault("carried", {})[workload] = source


def to_markdown(result: dict[str, Any]) -> str:
    """The results as Markdown tables."""
    v = result["versions"]
    lines = [
        f"`{result['command']}`",
        "",
        f"{result['cpus']} CPUs, Python {v['python']}, torch {v['torch']}, torchrl {v['torchrl']}, "
        f"gymnasium {v['gymnasium']}, {result['date']}; {result['seconds']:g} s per cell, median of "
        f"{result['repeats']} round(s)",
    ]
    units = {
        "cartpole": "frames/s",
        "latency": "steps/s",
        "memory": "MiB of growth after warm-up",
        "alternated": "collector / hand loop, frames/s (quartiles of the rounds; CPU a frame)",
    }
    for workload, w in result["workloads"].items():
        cpu = w.get("cpu_us_per_frame", {})
        extra = (" this process's CPU µs per frame |", " --: |") if cpu else ("", "")
        carried = result.get("carried", {}).get(workload)
        source = f" (carried over from `{carried['command']}`, {carried['date']})" if carried else ""
        lines += [
            "",
            f"**{workload}**{source}",
            "",
            f"| cell | {units[workload]} |{extra[0]}",
            f"| --- | --: |{extra[1]}",
        ]
        for cell in w["cells"]:
            value = w["values"].get(cell)
            shown = f"{value:,.1f}" if value is not None else w["errors"].get(cell, "-")[:200]
            if workload == "alternated" and value is not None:
                rounds = [rnd[cell] for rnd in w["rounds"] if cell in rnd]
                low = min(rnd["quartiles"][0] for rnd in rounds)
                high = max(rnd["quartiles"][1] for rnd in rounds)
                cpu_ratio = statistics.median(rnd["cpu_ratio"] for rnd in rounds)
                shown = f"{value:.3f}x ({low:.3f}-{high:.3f}; CPU {cpu_ratio:.3f}x)"
            if workload == "latency" and cell in w.get("of_ideal", {}):
                shown += f" ({100 * w['of_ideal'][cell]:.1f}% of the batch-aware ideal)"
            if cpu:
                shown += f" | {cpu[cell]:.1f}" if cell in cpu else " | -"
            lines.append(f"| {WORKLOADS[workload][cell]} | {shown} |")
        for name, value in w["ratios"].items():
            cpu_ratio = w.get("cpu_ratios", {}).get(name)
            shown_cpu = "-" if cpu_ratio is None else f"{cpu_ratio:.2f}x"
            lines.append(f"| {name} | {value:.2f}x |" + (f" {shown_cpu} |" if cpu else ""))
    lines += ["", "| goal | value | met |", "| --- | --: | --- |"]
    lines += [f"| {g['goal']} | {g['value']:.3g} | {'yes' if g['met'] else 'MISSED'} |" for g in result["goals"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run one cell (``--cell``) or every workload, write JSON and Markdown, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per cell (default 5)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is reported (default 3)")
    parser.add_argument("--memory-seconds", type=float, default=60.0, help="length of the memory run (default 60)")
    parser.add_argument("--only", action="append", choices=list(WORKLOADS), help="run these workloads (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 s per cell, 3 s of memory")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="directory for the results")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run WORKLOAD/CELL, print its JSON
    args = parser.parse_args()
    if args.cell:
        workload, _, cell = args.cell.partition("/")
        print(json.dumps(run_cell(workload, cell, args.seconds)), flush=True)
        return
    seconds, repeats, memory_s = (1.0, 1, 3.0) if args.quick else (args.seconds, args.repeats, args.memory_seconds)
    result: dict[str, Any] = {"workloads": {}}
    for workload in args.only or list(WORKLOADS):
        cell_s = memory_s if workload == "memory" else seconds
        result["workloads"][workload] = run_workload(workload, cell_s, 1 if workload == "memory" else repeats)
    result.update(
        command=command(),
        seconds=seconds,
        repeats=repeats,
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        versions=versions(),
        machine={"platform": platform.platform()},
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    carry_over(result, args.out / "collect.json")
    result["goals"] = goals(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "collect.json").write_text(json.dumps(result, indent=2))
    markdown = to_markdown(result)
    (args.out / "collect.md").write_text(markdown)
    print()
    print(markdown)


if __name__ == "__main__":
    main()

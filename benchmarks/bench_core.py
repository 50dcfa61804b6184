"""Core benchmark: aioenv against gymnasium's SyncVectorEnv / AsyncVectorEnv, the floor and the ceiling.

The floor (``floor.py``) is the leanest lock-step pool of Python envs in worker processes that can be
written (shared memory, one byte each way, nothing checked): ``step/floor`` says how much of the cost
of a step is aioenv's own and how much the machine's. The ceiling (``cores.py``) is the same envs split
over as many processes, each stepping its slice on its own with no pool at all: free-running, the most
any pool of processes reaches on this machine; lock-step, the most a lock-step ``step()`` can reach when
each batch waits for its slowest slice. ``cores/Sync`` and ``cores lock-step/Sync`` say what the
machine allows a ratio against ``SyncVectorEnv`` to be.

Every cell is measured in the same run, interleaved round by round (rotating
order). ``step/Sync alternated`` and ``s/r/Sync alternated`` measure ``await pool.step``
and the send/recv loop against ``SyncVectorEnv.step`` once more, in one process, in
slices of a few tenths of a second back to back (:func:`alternated_throughput`): on a
shared VM a process's speed swings by up to 2x within a second, so these are the
figures to compare, with the quartiles of their rounds beside them.

The cost figures: the floor and the aioenv pools also time the CPU of the process that runs them (this one;
their workers are other processes) per batch, per worker message and per env row (:func:`cost`), against the
floor's per message. CPU time does not depend on how many cores there are, so ``--cost-workers 16`` measures a
16-worker pool's cost on 2 cores. Results go to a JSON file and Markdown tables
(``benchmarks/results/core.{json,md}``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import gc
import importlib
import itertools
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import tempfile
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter, perf_counter_ns, process_time
from types import ModuleType
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import zmq
import zmq.asyncio
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is optional
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")
Aio = ModuleType | str  # the aioenv module, or why it is unavailable
Measured = float | tuple[float, ...] | dict[str, float]  # one value, values by position, or values by metric
Cell = Callable[[], Measured] | str  # a measurement, or a skip reason
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

from recorded import command  # noqa: E402 - found through the path set above

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "core.json"
ACTION_BATCHES = 64  # pre-sampled action batches, cycled through
STARTUP_ENVS = 32
RT_COUNT, RT_WARMUP = 2000, 200
# aioenv_*: a pool as `aioenv.make` gives it (executor="auto": placed by what the env costs);
# workers_*: the same pool with every env in worker processes (executor="inline").
# cores: the ceiling (cores.py), free-running ("steps_per_s") and lock-step ("lockstep_per_s").
IMPLS = ("sync", "async", "floor", "aioenv_step", "aioenv_sendrecv", "workers_step", "workers_sendrecv", "cores")
RATIOS = {
    "aioenv_step/sync": ("aioenv_step", "sync"),
    "aioenv_step/async": ("aioenv_step", "async"),
    "aioenv_sendrecv/sync": ("aioenv_sendrecv", "sync"),
    "aioenv_step/floor": ("aioenv_step", "floor"),
    "aioenv_sendrecv/floor": ("aioenv_sendrecv", "floor"),
    "workers_step/sync": ("workers_step", "sync"),
    "workers_sendrecv/sync": ("workers_sendrecv", "sync"),
    "cores/sync": ("cores", "sync"),
    "cores_lockstep/sync": ("cores_lockstep", "sync"),
}
#: ``aioenv_step/sync`` and ``aioenv_sendrecv/sync`` measured alternated in one process, in short slices
#: (:func:`alternated_throughput`).
ALTERNATED = "aioenv_step/sync alternated"
ALTERNATED_SR = "aioenv_sendrecv/sync alternated"
WORKLOADS = {  # name -> (env id, number of envs)
    "cartpole-8": ("CartPole-v1", 8),
    "cartpole-32": ("CartPole-v1", 32),
    "cartpole-128": ("CartPole-v1", 128),
    "ant-32": ("Ant-v5", 32),
    "cartpole-256": ("CartPole-v1", 256),
    "ant-128": ("Ant-v5", 128),
}
#: The workloads of a machine with many cores (issue 56's table; ``benchmarks/many_core.py``): run only when
#: ``--only`` names them.
MANY_CORES = ("cartpole-256", "ant-128")
#: Above this many envs, no ``AsyncVectorEnv`` cell: it starts a process per env.
ASYNC_AT_MOST = 64
TARGETS = {  # name -> {ratio: minimum}; informative only, never fails the run
    "cartpole-8": {"aioenv_step/sync": 1.0, ALTERNATED: 1.0},
    "cartpole-32": {"aioenv_step/sync": 1.0, ALTERNATED: 1.0, "aioenv_step/async": 5.0},
    "cartpole-128": {"aioenv_sendrecv/sync": 1.6, ALTERNATED_SR: 1.6},
    "ant-32": {"aioenv_step/sync": 1.9, ALTERNATED: 1.9},
    # on 16 cores: lock-step step() within 0.9x of the floor, send/recv at it
    "cartpole-256": {"aioenv_step/floor": 0.9, "aioenv_sendrecv/floor": 1.0},
    "ant-128": {"aioenv_step/floor": 0.9, "aioenv_sendrecv/floor": 1.0},
}
SECTIONS = (*WORKLOADS, "startup", "roundtrip")
#: What a run without ``--only`` measures.
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in MANY_CORES)
#: The cells whose pool's own process CPU is measured (the cost figures), with their labels.
COSTED = {
    "floor": "floor",
    "aioenv_step": "aioenv step",
    "aioenv_sendrecv": "aioenv send/recv",
    "workers_step": "workers step",
    "workers_sendrecv": "workers s/r",
}
COST_GOAL = 1.5  # the pool's CPU per worker message, at most this many times the floor's (aioenv_step, _sendrecv)
#: Every figure a workload's cell may report: throughput (all), the ceiling's lock-step rate (cores), the
#: pool process's CPU (COSTED; per message and messages per batch only when every env is in a worker process).
WORKLOAD_METRICS = (
    "steps_per_s",
    "lockstep_per_s",
    "cpu_us_per_batch",
    "cpu_us_per_message",
    "user_us_per_message",
    "cpu_us_per_row",
    "messages_per_batch",
    "worker_processes",
    "envs_in_process",
)
RT_LABELS = {"aioenv": "aioenv step_env", "raw_zmq": "raw pyzmq DEALER/ROUTER"}


# ------------------------------------------------------------------ helpers
def try_import(name: str) -> ModuleType | str:
    """Import ``name`` (from the working tree first, then ``benchmarks/``) or say why it failed."""
    for path in (ROOT / "benchmarks", ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure only disables cells
        return f"{type(exc).__name__}: {exc}"


def load_aioenv() -> Aio:
    """Import aioenv, or return ``unavailable: ...`` if it or ``make`` is missing."""
    mod = try_import("aioenv")
    if not isinstance(mod, str) and not callable(getattr(mod, "make", None)):
        mod = "AttributeError: aioenv.make does not exist yet"
    return f"unavailable: {mod}" if isinstance(mod, str) else mod


def run_async(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coro`` with a timeout on a fresh event loop (uvloop if importable)."""
    coro = asyncio.wait_for(coro, timeout)
    try:
        return uvloop.run(coro) if uvloop is not None else asyncio.run(coro)
    except TimeoutError as exc:
        raise TimeoutError(f"no result within {timeout:g} s") from exc


def aio_cell(aio: Aio, timeout: float, fn: Callable[..., Coroutine], *a: Any) -> Cell:
    """Build a cell running ``fn(aio, *a)`` on its own loop, or the skip reason."""
    return aio if isinstance(aio, str) else lambda: run_async(fn(aio, *a), timeout)


def presample(single_space: gym.Space, num_envs: int) -> list[Any]:
    """Sample ``ACTION_BATCHES`` batched actions from a seeded batched space."""
    space = batch_space(single_space, num_envs)
    space.seed(0)
    return [space.sample() for _ in range(ACTION_BATCHES)]


def make_vec(kind: str, env_id: str, num_envs: int) -> VectorEnv:
    """Build a gymnasium Sync/Async vector env (default context, next-step reset)."""
    cls = SyncVectorEnv if kind == "sync" else AsyncVectorEnv
    fns = [functools.partial(gym.make, env_id)] * num_envs
    return cls(fns, autoreset_mode=AutoresetMode.NEXT_STEP)


@dataclass(frozen=True)
class Window:
    """What the measured window of a step loop did: ``calls`` batches of ``steps`` env-steps in all, over
    ``wall`` seconds, with ``cpu`` seconds of this process's CPU (``time.process_time``: every thread of this
    process, user and system; its child processes, the workers, not at all), ``user`` of them in user space (the
    interpreter's own work; the rest is the kernel's: system calls, waking other processes)."""

    steps: int
    calls: int
    wall: float
    cpu: float
    user: float

    @property
    def steps_per_s(self) -> float:
        """Env-steps per second of wall time."""
        return self.steps / self.wall


def timed_window(step: Callable[[int], int], warmup: float, seconds: float) -> Window:
    """Warm up, then call ``step(k)`` (which returns its env-steps) for ~``seconds``; the window's figures."""
    k, end = 0, perf_counter() + warmup
    while perf_counter() < end:
        step(k)
        k += 1
    steps, calls, start, cpu, user = 0, 0, perf_counter(), process_time(), _user_cpu()
    while (now := perf_counter()) < start + seconds:
        steps += step(k)
        k += 1
        calls += 1
    return Window(steps, calls, now - start, process_time() - cpu, _user_cpu() - user)


def _user_cpu() -> float:
    """Seconds of this process's CPU spent in user space so far (every thread)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


async def atimed_window(step: Callable[[int], Awaitable[int]], warmup: float, seconds: float) -> Window:
    """Async twin of :func:`timed_window`."""
    k, end = 0, perf_counter() + warmup
    while perf_counter() < end:
        await step(k)
        k += 1
    steps, calls, start, cpu, user = 0, 0, perf_counter(), process_time(), _user_cpu()
    while (now := perf_counter()) < start + seconds:
        steps += await step(k)
        k += 1
        calls += 1
    return Window(steps, calls, now - start, process_time() - cpu, _user_cpu() - user)


def timed_steps(step: Callable[[int], int], warmup: float, seconds: float) -> float:
    """Env-steps/s of :func:`timed_window`."""
    return timed_window(step, warmup, seconds).steps_per_s


async def atimed_steps(step: Callable[[int], Awaitable[int]], warmup: float, seconds: float) -> float:
    """Env-steps/s of :func:`atimed_window`."""
    return (await atimed_window(step, warmup, seconds)).steps_per_s


def cost(window: Window, messages: int, worker_processes: int, envs_in_process: int = 0) -> dict[str, float]:
    """A pool cell's figures: env-steps/s and its process's CPU (µs) per batch, per worker message and per env
    row over ``window``, in which the pool sent ``messages`` messages to its ``worker_processes`` worker
    processes (each answered by one reply).

    Per message (and messages per batch) only when no env ran in this process (``envs_in_process``): then its
    CPU is the pool's own work, while with envs here it holds their env code too, and a figure per message
    would charge env code to messages."""
    cpu_us = window.cpu * 1e6
    out = {"steps_per_s": window.steps_per_s, "cpu_us_per_batch": cpu_us / window.calls}
    out |= {"cpu_us_per_row": cpu_us / window.steps, "worker_processes": float(worker_processes)}
    out["envs_in_process"] = float(envs_in_process)
    if messages and not envs_in_process:
        out |= {"cpu_us_per_message": cpu_us / messages, "messages_per_batch": messages / window.calls}
        out["user_us_per_message"] = window.user * 1e6 / messages  # the interpreter's part (the rest: the kernel's)
    return out


def worker_of(num_envs: int, num_workers: int, in_process: int = 0) -> np.ndarray:
    """The worker process of each env of an aioenv pool (-1: in this process): the first ``in_process`` envs
    in this process, the others over ``num_workers`` workers in contiguous blocks (``np.array_split``), as
    ``aioenv.core.scheduler.Scheduler.place`` places them (a test checks it does)."""
    owner = np.full(num_envs, -1, dtype=np.int64)
    if num_workers:
        for worker, block in enumerate(np.array_split(np.arange(in_process, num_envs), num_workers)):
            owner[block] = worker
    return owner


def messages_sent(owner: np.ndarray, sends: list[np.ndarray]) -> int:
    """Messages to worker processes that ``sends`` (each one ``pool.send``'s env ids) made: one per worker
    each send's envs touch (the coordinator sends one request per worker a call reaches)."""
    return sum(int(np.count_nonzero(np.unique(owner[ids]) >= 0)) for ids in sends)


def sig(x: float) -> float:
    """Round ``x`` to 6 significant digits (keeps the JSON readable)."""
    return float(f"{x:.6g}")


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den`` or None when either side is missing."""
    return sig(num / den) if num is not None and den else None


def target(op: str, threshold: float, value: float | None) -> dict[str, Any]:
    """Describe the target ``value op threshold`` (``met`` None without value)."""
    met = None if value is None else (value >= threshold) == (op == ">=")
    return {"op": op, "threshold": threshold, "value": value, "met": met}


def run_cell(label: str, cell: Callable[[], Measured], metrics: tuple[str, ...]) -> dict[str, float]:
    """Run one measurement; return its values by metric (a cell's values by position are ``metrics``' first
    ones), rounded to 6 significant digits."""
    v = cell()
    row = v if isinstance(v, dict) else dict(zip(metrics, v if isinstance(v, tuple) else (v,), strict=False))
    if unknown := set(row) - set(metrics):
        raise ValueError(f"{label} reported {sorted(unknown)}, not among {metrics}")
    row = {m: sig(x) for m, x in row.items()}
    shown = ", ".join(f"{m} {x:,.0f}" if x >= 1e3 else f"{m} {x:.4g}" for m, x in row.items())
    print(f"{label}: {shown}", flush=True)
    return row


def run_rounds(label: str, cells: dict[str, Cell], repeats: int, metrics: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Run every cell ``repeats`` times, interleaved with a rotating order.

    A cell that raises is recorded as ``error: ...`` and not retried.  Each
    cell reports the median of every metric, its repeats and a status.
    """
    vals: dict[str, list[dict[str, float]]] = {k: [] for k in cells}
    status = {k: c if isinstance(c, str) else "ok" for k, c in cells.items()}
    names = list(cells)
    for rnd in range(repeats):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            cell = cells[name]
            if isinstance(cell, str) or status[name] != "ok":
                continue
            try:
                vals[name].append(run_cell(f"[{label}] {name} #{rnd + 1}", cell, metrics))
            except Exception as exc:  # noqa: BLE001 - report, keep the other cells
                traceback.print_exc()
                status[name] = f"error: {exc!r}"
            gc.collect()
    out: dict[str, dict[str, Any]] = {}
    for name, rows in vals.items():
        # a cell may report fewer metrics than listed (the ceiling reports two, most others one): the first is
        # always there (None without a value), the others only when the cell reported them
        cols = [[r[m] for r in rows if m in r] for m in metrics]
        medians = enumerate(zip(metrics, cols, strict=True))
        out[name] = {m: sig(statistics.median(c)) if c else None for i, (m, c) in medians if i == 0 or c}
        out[name]["repeats"] = [r[metrics[0]] if list(r) == [metrics[0]] else r for r in rows]
        out[name]["status"] = status[name]
    return out


# --------------------------------------------------------------- throughput
def gym_throughput(kind: str, env_id: str, n: int, warm: float, secs: float) -> float:
    """Env-steps/s of a gymnasium vector env stepping pre-sampled actions."""
    return lockstep_throughput(make_vec(kind, env_id, n), n, warm, secs)


def floor_cell(env_id: str, n: int, warm: float, secs: float, workers: int | None = None) -> Cell:
    """The floor's cell, or why ``floor.py`` cannot be imported."""
    floor = try_import("floor")
    if isinstance(floor, str):
        return floor
    return functools.partial(floor_throughput, floor, env_id, n, warm, secs, workers)


def floor_throughput(
    floor: ModuleType, env_id: str, n: int, warm: float, secs: float, workers: int | None = None
) -> dict[str, float]:
    """Env-steps/s of the floor (``floor.py``) with ``workers`` worker processes (None: as many as aioenv's
    default), and this process's CPU: ``FloorVectorEnv.step`` runs here, its workers in child processes, and
    every step sends one message to each worker."""
    env = floor.FloorVectorEnv(env_id, n, workers or default_workers(n))
    window = lockstep_window(env, n, warm, secs)
    return cost(window, window.calls * env.num_workers, env.num_workers)


def default_workers(n: int) -> int:
    """As many processes as aioenv's default worker count for ``n`` envs: one per usable CPU, at most ``n``
    (aioenv's own ``usable_cpus``; the machine's CPU count where aioenv cannot be imported)."""
    spawn = try_import("aioenv.transport.spawn")
    return min(n, (os.cpu_count() or 1) if isinstance(spawn, str) else spawn.usable_cpus())


def cores_cell(env_id: str, n: int, warm: float, secs: float) -> Cell:
    """The ceiling's cell (``(free-running, lock-step)`` env-steps/s), or why ``cores.py`` cannot be imported."""
    cores = try_import("cores")
    if isinstance(cores, str):
        return cores
    return functools.partial(cores.ceiling, env_id, n, default_workers(n), warm, secs)


def lockstep_throughput(env: Any, n: int, warm: float, secs: float) -> float:
    """Env-steps/s of ``env.step`` (a vector env of ``n`` envs) on pre-sampled actions; closes ``env``."""
    return lockstep_window(env, n, warm, secs).steps_per_s


def lockstep_window(env: Any, n: int, warm: float, secs: float) -> Window:
    """The measured window of ``env.step`` (see :func:`lockstep_throughput`); closes ``env``."""
    try:
        env.reset(seed=0)
        acts = presample(env.single_action_space, n)

        def step(k: int) -> int:
            env.step(acts[k % ACTION_BATCHES])
            return n

        return timed_window(step, warm, secs)
    finally:
        env.close()


async def aioenv_throughput(
    aio: ModuleType,
    env_id: str,
    n: int,
    sendrecv: bool,
    warm: float,
    secs: float,
    executor: str = "auto",
    num_workers: int | None = None,
) -> dict[str, float]:
    """Env-steps/s of ``await pool.step`` or of the send/recv loop (batch n/2), and the CPU of this process,
    which runs the pool (:func:`cost`). Messages to workers: a lock-step ``step()`` sends one to every worker
    process; the send/recv loop one per worker each ``send`` touches, counted from the env ids it sent (kept
    during the window, counted after it) and where the pool placed the envs (:func:`worker_of`)."""
    make = {"executor": executor} | ({} if num_workers is None else {"num_workers": num_workers})
    pool = await aio.make(env_id, n, batch_size=n // 2 if sendrecv else None, seed=0, **make)
    try:
        await pool.reset(seed=0)
        acts = presample(pool.single_action_space, n)
        sends: list[np.ndarray] = []

        async def step(k: int) -> int:
            await pool.step(acts[k % ACTION_BATCHES])
            return n

        async def send_recv(k: int) -> int:
            *_, info = await pool.recv()
            ids = info["env_id"]
            pool.send(acts[k % ACTION_BATCHES][ids], ids)
            sends.append(ids)
            return len(ids)

        if sendrecv:
            pool.send(acts[0], np.arange(n, dtype=np.int32))
        window = await atimed_window(send_recv if sendrecv else step, warm, secs)
        workers, here = pool.num_workers, pool.envs_in_process
        if sendrecv:  # the window's sends are the last ones: one per call
            messages = messages_sent(worker_of(n, workers, here), sends[len(sends) - window.calls :])
        else:
            messages = window.calls * workers
        return cost(window, messages, workers, here)
    finally:
        await pool.aclose()


async def alternated_throughput(
    aio: ModuleType, env_id: str, n: int, warm: float, slice_s: float, rounds: int, sendrecv: bool = False
) -> dict[str, Any]:
    """``SyncVectorEnv.step`` and the pool (``executor="auto"``) over the same envs and actions, alternated in
    this process: ``rounds`` rounds of one slice of ``slice_s`` per side, which side goes first alternating.
    The pool side is ``await pool.step`` or, with ``sendrecv``, the send/recv loop of ``batch_size = n/2``
    (:func:`sendrecv_slice`).

    On a shared VM one process's speed alone swings by up to 2x within a second, with the host
    (``SyncVectorEnv`` of 32 CartPole envs, 0.1 s slices: 36k-87k steps/s), so cells seconds apart, and even
    one-second slices, compare two machine states. Slices of a few tenths of a second, back to back, see the same
    one; the median of the per-round ratios is then the figure, and its quartiles say how far to trust it.
    Returns that ``ratio``, ``quartiles``, each side's median env-steps/s and the per-round ratios."""
    sync = make_vec("sync", env_id, n)
    pool = await aio.make(env_id, n, batch_size=n // 2 if sendrecv else None, seed=0)
    placement = pool.describe_placement()
    side = "aioenv_sendrecv" if sendrecv else "aioenv_step"
    try:
        sync.reset(seed=0)
        await pool.reset(seed=0)
        acts = presample(pool.single_action_space, n)
        counter = itertools.count()

        def sync_step(k: int) -> int:
            sync.step(acts[k % ACTION_BATCHES])
            return n

        async def pool_step(k: int) -> int:
            await pool.step(acts[k % ACTION_BATCHES])
            return n

        async def pool_slice(seconds: float) -> float:
            if sendrecv:
                return await sendrecv_slice(pool, acts, counter, seconds)
            return await atimed_steps(pool_step, 0.0, seconds)

        timed_steps(sync_step, warm, 0.0)
        await pool_slice(warm)
        sides: dict[str, list[float]] = {"sync": [], side: []}
        for r in range(rounds):
            for name in ("sync", side) if r % 2 == 0 else (side, "sync"):
                sps = timed_steps(sync_step, 0.0, slice_s) if name == "sync" else await pool_slice(slice_s)
                sides[name].append(sig(sps))
    finally:
        sync.close()
        await pool.aclose()
    per_round = [sig(a / s) for a, s in zip(sides[side], sides["sync"], strict=True)]
    out: dict[str, Any] = {k: sig(statistics.median(v)) for k, v in sides.items()}
    out |= {"ratio": sig(statistics.median(per_round)), "quartiles": quartiles(per_round)}
    return out | {"per_round": per_round, "placement": placement, "status": "ok"}


async def sendrecv_slice(pool: Any, acts: list[Any], counter: itertools.count[int], seconds: float) -> float:
    """Env-steps/s of one slice of the send/recv loop: every env sent a step, then for ``seconds`` each
    ``recv()``'s rows sent their next step, then every row still in flight received. The slice starts and ends
    with no step in flight, so none runs while the other side is timed (a slice's first and last batches
    count, and pay for the pipeline's filling and draining)."""
    n = pool.num_envs
    start = perf_counter()
    pool.send(acts[next(counter) % ACTION_BATCHES], np.arange(n))
    steps = 0
    while perf_counter() < start + seconds:
        *_, info = await pool.recv()
        ids = info["env_id"]
        steps += ids.size
        pool.send(acts[next(counter) % ACTION_BATCHES][ids], ids)
    *_, info = await pool.recv(min_results=n, max_results=n)
    steps += info["env_id"].size
    return steps / (perf_counter() - start)


def quartiles(values: list[float]) -> list[float]:
    """The first and third quartiles of ``values`` (both the one value when there is only one)."""
    if len(values) < 2:
        return [values[0], values[0]]
    q1, _, q3 = statistics.quantiles(values, n=4)
    return [sig(q1), sig(q3)]


def bench_alternated(name: str, args: argparse.Namespace, aio: Aio, sendrecv: bool = False) -> dict[str, Any]:
    """The alternated ``step()`` (or send/recv) against ``SyncVectorEnv`` of one workload
    (:func:`alternated_throughput`)."""
    env_id, n = WORKLOADS[name]
    if isinstance(aio, str):
        return {"status": aio}
    if env_id.startswith("Ant") and isinstance(mj := try_import("mujoco"), str):
        return {"status": f"skipped: mujoco not importable ({mj})"}
    what = "send-recv" if sendrecv else "step"
    try:
        res = run_async(
            alternated_throughput(aio, env_id, n, args.warmup, args.slice, args.rounds, sendrecv),
            args.timeout + 2 * args.rounds * args.slice,
        )
    except Exception as exc:  # noqa: BLE001 - report, keep the other sections
        traceback.print_exc()
        return {"status": f"error: {exc!r}"}
    q1, q3 = res["quartiles"]
    print(f"[{name}] {what}/Sync alternated in one process: {res['ratio']:.2f}x (quartiles {q1:.2f}-{q3:.2f}x)")
    print(f"[{name}] placement: {res['placement']}", flush=True)
    return res


def bench_workload(name: str, args: argparse.Namespace, aio: Aio) -> dict[str, Any]:
    """Measure the four implementations of one workload and derive ratios."""
    env_id, n = WORKLOADS[name]
    a = (env_id, n)
    t = (args.warmup, args.seconds)
    forced = args.cost_workers
    # --cost-workers: the floor and every aioenv pool cell on that many worker processes, every env in them
    auto: tuple[str, int | None] = ("auto", None) if forced is None else ("inline", forced)
    inline = ("inline", forced)
    cells: dict[str, Cell] = {
        "sync": functools.partial(gym_throughput, "sync", *a, *t),
        "async": (
            functools.partial(gym_throughput, "async", *a, *t)
            if n <= ASYNC_AT_MOST
            else f"skipped: AsyncVectorEnv starts a process per env (n > {ASYNC_AT_MOST})"
        ),
        "floor": floor_cell(*a, *t, forced),
        "aioenv_step": aio_cell(aio, args.timeout, aioenv_throughput, *a, False, *t, *auto),
        "aioenv_sendrecv": aio_cell(aio, args.timeout, aioenv_throughput, *a, True, *t, *auto),
        "workers_step": aio_cell(aio, args.timeout, aioenv_throughput, *a, False, *t, *inline),
        "workers_sendrecv": aio_cell(aio, args.timeout, aioenv_throughput, *a, True, *t, *inline),
        "cores": cores_cell(*a, *t),
    }
    if env_id.startswith("Ant") and isinstance(mj := try_import("mujoco"), str):
        cells = dict.fromkeys(cells, f"skipped: mujoco not importable ({mj})")
    res: dict[str, Any] = {"env_id": env_id, "num_envs": n, "cost_workers": forced}
    res |= run_rounds(name, cells, args.repeats, WORKLOAD_METRICS)
    sps = {k: res[k]["steps_per_s"] for k in IMPLS}
    sps["cores_lockstep"] = res["cores"].get("lockstep_per_s")
    res["ratios"] = {r: ratio(sps[a], sps[b]) for r, (a, b) in RATIOS.items()}
    per_message = {k: res[k].get("cpu_us_per_message") for k in COSTED}
    res["cost_ratios"] = {f"{k}/floor": ratio(per_message[k], per_message["floor"]) for k in COSTED if k != "floor"}
    res["cost_targets"] = {
        f"{k}/floor": target("<=", COST_GOAL, res["cost_ratios"][f"{k}/floor"])
        for k in ("aioenv_step", "aioenv_sendrecv")
    }
    res["alternated"] = bench_alternated(name, args, aio)
    res["alternated_sendrecv"] = bench_alternated(name, args, aio, sendrecv=True)
    res["ratios"][ALTERNATED] = res["alternated"].get("ratio")
    res["ratios"][ALTERNATED_SR] = res["alternated_sendrecv"].get("ratio")
    res["targets"] = {r: target(">=", v, res["ratios"][r]) for r, v in TARGETS[name].items()}
    return res


# ------------------------------------------------------------------ startup
def gym_startup(kind: str) -> float:
    """Seconds to construct + first-reset a gymnasium vector env of CartPoles."""
    start, env = perf_counter(), None
    try:
        env = make_vec(kind, "CartPole-v1", STARTUP_ENVS)
        env.reset(seed=0)
        return perf_counter() - start
    finally:
        if env is not None:
            env.close()


async def aioenv_startup(aio: ModuleType) -> float:
    """Seconds for ``await aioenv.make(...)`` + ``await pool.reset(seed=0)``."""
    start, pool = perf_counter(), None
    try:
        pool = await aio.make("CartPole-v1", STARTUP_ENVS)
        await pool.reset(seed=0)
        return perf_counter() - start
    finally:
        if pool is not None:
            await pool.aclose()


def bench_startup(args: argparse.Namespace, aio: Aio) -> dict[str, Any]:
    """Median construct + first-reset time of each implementation."""
    cells: dict[str, Cell] = {
        "aioenv": aio_cell(aio, args.timeout, aioenv_startup),
        "async": functools.partial(gym_startup, "async"),
        "sync": functools.partial(gym_startup, "sync"),
    }
    res: dict[str, Any] = {"num_envs": STARTUP_ENVS}
    res |= run_rounds("startup", cells, args.repeats, ("seconds",))
    res["targets"] = {"aioenv_s": target("<=", 1.0, res["aioenv"]["seconds"])}
    return res


# --------------------------------------------------------------- round trip
async def latencies(call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Warm up, then time ``RT_COUNT`` awaited calls; (p50, p99) in µs."""
    for _ in range(RT_WARMUP):
        await call()
    lat = np.empty(RT_COUNT, dtype=np.int64)
    for i in range(RT_COUNT):
        t0 = perf_counter_ns()
        await call()
        lat[i] = perf_counter_ns() - t0
    p50, p99 = np.percentile(lat, [50, 99]) / 1e3
    return float(p50), float(p99)


def echo_server(addr: str) -> None:
    """Blocking ROUTER echo loop, run in a separate process until terminated."""
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as sock:
        sock.bind(addr)
        while True:
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)


async def raw_roundtrip() -> tuple[float, float]:
    """Latency of an asyncio DEALER sending 2 frames to an echo ROUTER process."""
    with tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp:
        addr = f"ipc://{tmp}/echo.sock"
        proc = mp.get_context("spawn").Process(target=echo_server, args=(addr,), daemon=True)
        proc.start()
        try:
            with zmq.asyncio.Context() as ctx, ctx.socket(zmq.DEALER) as sock:
                sock.linger = 0
                sock.connect(addr)

                async def once() -> None:
                    await sock.send_multipart([b"step", bytes(16)])
                    await sock.recv_multipart()

                return await latencies(once)
        finally:
            proc.terminate()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


async def aioenv_roundtrip(aio: ModuleType) -> tuple[float, float]:
    """Latency of ``await pool.step_env(0, a)`` on a 1-env, 1-worker pool (a worker process: the round trip is
    what is measured, against raw pyzmq's)."""
    pool = await aio.make("CartPole-v1", 1, num_workers=1, seed=0, executor="inline")
    try:
        await pool.reset(seed=0)  # episode ends: the pool auto-resets (next step)
        acts = itertools.cycle([a[0] for a in presample(pool.single_action_space, 1)])
        return await latencies(lambda: pool.step_env(0, next(acts)))
    finally:
        await pool.aclose()


def bench_roundtrip(args: argparse.Namespace, aio: Aio) -> dict[str, Any]:
    """Single-step latency of aioenv against a raw pyzmq ping-pong."""
    cells: dict[str, Cell] = {
        "raw_zmq": lambda: run_async(raw_roundtrip(), args.timeout),
        "aioenv": aio_cell(aio, args.timeout, aioenv_roundtrip),
    }
    res: dict[str, Any] = {"count": RT_COUNT}
    res |= run_rounds("roundtrip", cells, args.repeats, ("p50_us", "p99_us"))
    rt = ratio(res["aioenv"]["p50_us"], res["raw_zmq"]["p50_us"])
    res["ratios"] = {"aioenv_p50/raw_p50": rt}
    res["targets"] = {"aioenv_p50/raw_p50": target("<=", 1.3, rt)}
    return res


# ------------------------------------------------------------------- report
def machine_info(aio: Aio) -> dict[str, Any]:
    """Machine and library versions recorded next to the results."""
    mj = try_import("mujoco")
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "mujoco": getattr(mj, "__version__", f"unavailable: {mj}"),
        "loop": f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio",
        "aioenv": aio if isinstance(aio, str) else "available",
        "hot_path": _hot_path(aio),
    }


def _hot_path(aio: Aio) -> str:
    """``aioenv._hot.describe()``: whether the pools ran their compiled hot path (or why aioenv is unavailable)."""
    if isinstance(aio, str):
        return aio
    hot = try_import("aioenv._hot")
    return hot if isinstance(hot, str) else str(hot.describe())


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """Format a number for the tables ("n/a" when missing)."""
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def fmt_alternated(alt: dict[str, Any]) -> str:
    """An alternated ratio with its quartiles over the rounds, as ``1.52x (1.41-1.60)`` ("n/a" when the
    measurement failed or was skipped: then it holds only its status)."""
    if "ratio" not in alt:
        return "n/a"
    q1, q3 = alt["quartiles"]
    return f"{alt['ratio']:.2f}x ({q1:.2f}-{q3:.2f})"


def fmt_targets(targets: dict[str, dict[str, Any]], unit: str = "x") -> str:
    """Render targets as ``name >= 1.6x: met`` fragments."""
    word = {True: "met", False: "MISSED", None: "n/a"}
    return "; ".join(f"{k} {t['op']} {t['threshold']:g}{unit}: {word[t['met']]}" for k, t in targets.items())


def md_table(head: list[str], rows: list[list[str]], labels: tuple[str, ...] = ("targets",)) -> list[str]:
    """Markdown table lines; numbers right-aligned, the first column and those named in ``labels`` left."""
    rule = ["---" if i == 0 or h in labels else "--:" for i, h in enumerate(head)]
    return ["| " + " | ".join(r) + " |" for r in (head, rule, *rows)]


def md_workloads(workloads: dict[str, Any]) -> list[str]:
    """Throughput table: env-steps/s per implementation, ratios, targets."""
    head = ["workload", "Sync", "Async", "floor", "aioenv step", "aioenv send/recv", "workers step", "workers s/r"]
    head += ["cores", "step/Sync", "step/Async", "send-recv/Sync", "step/floor", "workers step/Sync"]
    head += ["workers s/r/Sync", "cores/Sync", "cores lock-step/Sync", "step/Sync alternated", "s/r/Sync alternated"]
    head += ["targets"]
    rows = []
    for wl in workloads.values():
        row = [f"{wl['env_id']} n={wl['num_envs']}"] + [fmt(wl[i]["steps_per_s"]) for i in IMPLS]
        row += [fmt(wl["ratios"][r], ".2f", "x") for r in RATIOS]
        row += [fmt_alternated(wl[k]) for k in ("alternated", "alternated_sendrecv")]
        rows.append([*row, fmt_targets(wl["targets"])])
    return md_table(head, rows)


#: The cost table's figures, in its order: (CPU or its user part, per what).
_COST_COLUMNS = (("cpu", "batch"), ("cpu", "message"), ("user", "message"), ("cpu", "row"))


def md_costs(workloads: dict[str, Any]) -> list[str]:
    """Cost table: the CPU of the process that runs each pool (µs per batch, per worker message, of that the part in
    user space, and per env row), each pool's per-message figure over the floor's, and the goal (at most
    ``COST_GOAL`` times the floor's)."""
    head = ["workload", "pool", "worker processes", "messages/batch", "CPU µs/batch", "CPU µs/message"]
    head += ["of it user µs", "CPU µs/row", "per message / floor", "targets"]
    rows = []
    for wl in workloads.values():
        for impl, label in COSTED.items():
            cell = wl[impl]
            row = [f"{wl['env_id']} n={wl['num_envs']}", label, fmt(cell.get("worker_processes"))]
            row += [fmt(cell.get("messages_per_batch"), ".3g")]
            row += [fmt(cell.get(f"{what}_us_per_{per}"), ",.1f") for what, per in _COST_COLUMNS]
            row += ["1x" if impl == "floor" else fmt(wl["cost_ratios"][f"{impl}/floor"], ".2f", "x")]
            goal = {k: t for k, t in wl["cost_targets"].items() if k == f"{impl}/floor"}
            rows.append([*row, fmt_targets(goal)])
    return md_table(head, rows, ("pool", "targets"))


def md_startup(st: dict[str, Any]) -> list[str]:
    """Startup table: construct + first reset, in seconds."""
    rows = [[k, fmt(st[k]["seconds"], ".3f")] for k in ("aioenv", "async", "sync")]
    rows.append(["target", fmt_targets(st["targets"], " s")])
    return md_table([f"startup ({st['num_envs']} CartPole, make + reset)", "seconds"], rows)


def md_roundtrip(rt: dict[str, Any]) -> list[str]:
    """Round-trip table: p50/p99 of one step, aioenv against raw pyzmq."""
    rows = [[label, fmt(rt[k]["p50_us"], ".1f"), fmt(rt[k]["p99_us"], ".1f")] for k, label in RT_LABELS.items()]
    r = fmt(rt["ratios"]["aioenv_p50/raw_p50"], ".2f", "x")
    rows.append(["aioenv p50 / raw p50", r, fmt_targets(rt["targets"])])
    return md_table([f"round trip ({rt['count']} calls)", "p50 µs", "p99 µs"], rows)


def md_notes(res: dict[str, Any]) -> list[str]:
    """One footnote per distinct non-ok status, listing the affected cells."""
    sections = dict(res["workloads"])
    sections |= {k: res[k] for k in ("startup", "roundtrip") if k in res}
    by_status: dict[str, list[str]] = {}
    for sec, cells in sections.items():
        for impl, cell in cells.items():
            if isinstance(cell, dict) and cell.get("status", "ok") != "ok":
                by_status.setdefault(cell["status"], []).append(f"{sec}/{impl}")
    return [f"- {s} ({', '.join(c)})" for s, c in by_status.items()]


def cost_caption(workloads: dict[str, Any]) -> str:
    """What the cost table shows, and on how many worker processes."""
    forced = {wl["cost_workers"] for wl in workloads.values()}
    workers = (
        f"--cost-workers: every pool on {forced.pop()} worker processes, every env in them"
        if forced != {None}
        else "the floor on as many worker processes as aioenv's default, the aioenv cells as above"
    )
    return (
        f"CPU time of the process that runs the pool ({workers}; its workers not counted), over the measured"
        " window; per message: each message to a worker process and its reply, shown only when no env runs in"
        " the pool's process; of it user: the part spent in user space, the interpreter's own work (the rest is"
        " the kernel's: system calls and waking other processes, which the floor pays as well)."
    )


def render_markdown(res: dict[str, Any]) -> str:
    """Compact Markdown tables for every measured section plus the command."""
    m = res["machine"]
    about = f"{m['cpu_count']} CPUs, Python {m['python']}, {m['loop']}"
    about += f", gymnasium {m['gymnasium']}, pyzmq {m['pyzmq']}, hot path {m.get('hot_path', '?')}, {res['date']}"
    lines = [f"`{res['command']}`", "", about]
    if res["workloads"]:
        lines += ["", *md_workloads(res["workloads"]), "", cost_caption(res["workloads"]), ""]
        lines += md_costs(res["workloads"])
    if "startup" in res:
        lines += ["", *md_startup(res["startup"])]
    if "roundtrip" in res:
        lines += ["", *md_roundtrip(res["roundtrip"])]
    if notes := md_notes(res):
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a ``.tmp`` sibling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ---------------------------------------------------------------------- CLI
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``--quick`` sets short durations, one repeat."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short smoke run (< ~60 s)")
    p.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        metavar="NAME",
        help=f"repeatable: {', '.join(SECTIONS)} (default all but {', '.join(MANY_CORES)})",
    )
    p.add_argument("--seconds", type=float, help="measuring time per cell (default 3, --quick 0.5)")
    p.add_argument("--repeats", type=int, help="repeats per cell, median reported (default 3, --quick 1)")
    p.add_argument("--slice", type=float, help="seconds per side of an alternated round (default 0.2, --quick 0.1)")
    p.add_argument("--rounds", type=int, help="alternated rounds per measurement (default 35, --quick 3)")
    p.add_argument(
        "--cost-workers",
        type=int,
        metavar="N",
        help="the floor and every aioenv pool cell on N worker processes (executor inline), for the CPU per "
        "message of an N-worker pool on any machine (default: as many as aioenv's default; aioenv_* cells: "
        "executor auto)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path; the Markdown goes next to it (.md)")
    args = p.parse_args(argv)
    for name in ("seconds", "repeats", "slice", "rounds", "cost_workers"):
        if (given := getattr(args, name)) is not None and given <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {given}")
    args.seconds = args.seconds or (0.5 if args.quick else 3.0)
    args.repeats = max(1, args.repeats or (1 if args.quick else 3))
    args.slice = args.slice or (0.1 if args.quick else 0.2)
    args.rounds = args.rounds or (3 if args.quick else 35)
    args.warmup = min(1.0, max(0.2, args.seconds / 4))
    args.timeout = 60.0 + 3 * args.seconds  # per asyncio cell: a hung pool fails it
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the selected sections, write JSON + Markdown, print the tables."""
    args = parse_args(argv)
    selected, aio = set(args.only or DEFAULT_SECTIONS), load_aioenv()
    res: dict[str, Any] = {
        "machine": machine_info(aio),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command(),
        "settings": {k: getattr(args, k) for k in ("seconds", "repeats", "warmup", "slice", "rounds", "cost_workers")},
        "workloads": {w: bench_workload(w, args, aio) for w in WORKLOADS if w in selected},
    }
    if "startup" in selected:
        res["startup"] = bench_startup(args, aio)
    if "roundtrip" in selected:
        res["roundtrip"] = bench_roundtrip(args, aio)
    md = render_markdown(res)
    write_atomic(args.out, json.dumps(res, indent=2) + "\n")
    write_atomic(args.out.with_suffix(".md"), md)
    print("\n" + md)
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

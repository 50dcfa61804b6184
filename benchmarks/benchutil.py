"""Shared pieces of ``bench_remote.py``, ``remote_clients.py``, ``remote_hosts.py`` and ``bench_latency.py``: the
server, worker hosts, pools, CPU/memory, formatting.

- the ``aioenv serve`` subprocess (:class:`Server`, extra arguments allowed, e.g. ``--worker-bind``), an
  ``aioenv worker`` subprocess (:class:`WorkerHost`), both :class:`Managed` (log drained, SIGTERM stop) and
  ``aioenv status --json`` (:func:`server_status`);
- one pool and its client loop (:class:`Spec`, :func:`parse_loop`, :func:`make_pool`);
- process accounting: this process tree split into parts (:func:`classify`), CPU per part over a window
  (:func:`cpu_snapshot`, :func:`cpu_usage`), memory (:func:`read_memory`, :func:`memory_of`) and processes
  left behind;
- one pool's timed window as figures (:func:`window_figures`) and as a table row's last columns
  (:data:`WINDOW_HEAD`, :func:`window_columns`);
- one timed cell of ``bench_remote.py`` (:func:`pool_cell`, :func:`run_cell`: embedded, on a server, or on a
  server whose workers run under worker hosts) and the median of its repeats (:func:`median_cell`);
- reporting helpers: :func:`run_header`, :func:`machine_info`, :func:`fmt`, :func:`fmt_bytes`, :func:`md_table`,
  :func:`write_atomic`, and the informative bars (:func:`bar`, :func:`fmt_bar_value`, :func:`md_bars`).

Not a package module: ``bench_remote.py`` and ``bench_latency.py`` put ``benchmarks/`` on ``sys.path`` before
importing it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import gc
import json
import os
import platform
import queue
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import gymnasium as gym
import numpy as np
import psutil
import zmq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bars import GIB, MIB, bar, fmt_bar_value, fmt_bytes  # noqa: E402, F401 - re-exported for the scripts
from recorded import command  # noqa: E402 - beside this module in benchmarks/

import aioenv  # noqa: E402
from aioenv import _hot  # noqa: E402

T = TypeVar("T")
EPISODE_STEPS = 10**9  # latency envs never autoreset inside a window (a reset step does not wait)
ASYNC_ENV = "aioenv.envs.latency:AsyncSleepEnv"
ALLOW = ("CartPole-v1", ASYNC_ENV)  # the env names the server may make (aioenv serve --allow-env)
ALLOW_KWARGS = (f"{ASYNC_ENV}=mean,sigma,cap,episode_steps",)  # and their env_kwargs (--allow-env-kwargs)
MAX_ENVS = 8192  # the server's --max-envs: envs of all its clients together
MAX_WORKERS = 256  # its --max-workers: worker processes of all its clients together
START_TIMEOUT = 30.0  # seconds for the server to print its address (a worker host: to be admitted)
STOP_TIMEOUT = 30.0  # seconds for the server (a worker host) to exit after SIGTERM
PIDS_SEEN: set[int] = set()  # every process this run started (servers, hosts, workers, clients): for checks


# ------------------------------------------------------------------ small helpers
def sig(x: float) -> float:
    """Round to 6 significant digits (keeps the JSON readable)."""
    return float(f"{x:.6g}")


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` (:func:`sig`), None without both (a cell that failed)."""
    return sig(a / b) if a and b else None


def run_async(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coro`` on a fresh loop (``aioenv.run``: uvloop when installed) with a timeout."""
    try:
        return aioenv.run(asyncio.wait_for(coro, timeout))
    except TimeoutError as exc:
        raise TimeoutError(f"no result within {timeout:g} s") from exc


def child_env() -> dict[str, str]:
    """The environment for subprocesses: this checkout on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def descendants(pid: int) -> list[psutil.Process]:
    """All live descendants of ``pid`` (none when it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def not_templates(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` but worker templates (``python -m workers.zygote``): a process keeps its template for its next
    pools (``aioenv.transport.zygote``), so one is not left over; the workers forked from it are."""
    out = []
    for proc in procs:
        try:
            if "workers.zygote" not in proc.cmdline():
                out.append(proc)
        except psutil.Error:
            continue
    return out


def describe(procs: list[psutil.Process]) -> list[str]:
    """``pid status cmdline`` of processes (for leftover reports)."""
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())[:160]}")
        except psutil.Error:
            continue
    return out


# ------------------------------------------------------------------ the server and worker hosts
class Managed:
    """A long-lived subprocess of this run (:class:`Server`, :class:`WorkerHost`): its stderr drained by a thread
    into :attr:`log`, the first match of each of ``patterns`` kept in :attr:`found`; :meth:`stop` sends SIGTERM."""

    what = "the process"  # for messages

    def __init__(self, cmd: list[str], patterns: dict[str, str]) -> None:
        self.command = shlex.join(["python", *cmd[1:]])
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        PIDS_SEEN.add(self.proc.pid)
        self.log: list[str] = []
        self.found: dict[str, str] = {}  # pattern key -> its first group (or the whole match)
        self._patterns = patterns
        self._events: queue.Queue[str] = queue.Queue()  # keys as they match; "" once stderr closed (it exited)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            for key, pattern in self._patterns.items():
                if key not in self.found and (found := re.search(pattern, line)):
                    self.found[key] = found.group(1 if found.re.groups else 0)
                    self._events.put(key)
        self._events.put("")

    def wait_for(self, key: str, timeout: float = START_TIMEOUT) -> str:
        """The first match of pattern ``key``; RuntimeError (the process killed) when it exits or ``timeout``
        seconds pass first."""
        deadline = time.monotonic() + timeout
        while key not in self.found:
            try:
                got = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._kill()
                log = "".join(self.log)
                raise RuntimeError(f"{self.what} did not log {key!r} within {timeout:g} s: {log}") from None
            if got == "" and key not in self.found:
                self._events.put("")  # for the next wait
                code = self._kill()
                raise RuntimeError(f"{self.what} exited (code {code}) before logging {key!r}: {''.join(self.log)}")
        return self.found[key]

    def _kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.proc.pid

    def workers(self) -> list[psutil.Process]:
        """Its worker processes (all its descendants but its worker templates)."""
        return not_templates(descendants(self.proc.pid))

    def wait_no_workers(self, wait: float = 5.0) -> list[str]:
        """Workers still alive ``wait`` seconds from now (none once every pool closed)."""
        deadline = time.monotonic() + wait
        while (left := self.workers()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return describe(left)

    def problems(self) -> list[str]:
        """Log lines at WARNING or above, and tracebacks whole (what went wrong): a traceback's indented lines and the
        exception's own line after them."""
        out: list[str] = []
        in_traceback = False
        for line in self.log:
            if in_traceback and line[:1] in (" ", "\t"):
                out.append(line.rstrip())
                continue
            if in_traceback:  # the exception's own line ends it
                out.append(line.rstrip())
                in_traceback = False
                continue
            if re.search(r"WARNING|ERROR|CRITICAL|Traceback", line):
                out.append(line.rstrip())
                in_traceback = line.startswith("Traceback")
        return out

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the exit code, seconds to exit, workers left behind, and the log's problems."""
        workers = self.workers()
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
            self._kill()
        took = time.perf_counter() - t0
        self._reader.join(5.0)
        if self.proc.stderr is not None and not self._reader.is_alive():  # read to its end: ours to close
            self.proc.stderr.close()
        _, alive = psutil.wait_procs(workers, timeout=5.0)
        return {
            "exit_code": code,
            "stop_s": sig(took),
            "workers_left": describe(alive),
            "problems": self.problems()[-40:],
            "log_lines": len(self.log),
        }


class Server(Managed):
    """``aioenv serve`` on a free local port with ``extra`` arguments; :attr:`endpoint` is where clients connect,
    :attr:`worker_endpoint` where worker hosts join (with ``--worker-bind`` in ``extra``; None without).
    ``unix``: on a unix socket in a new directory of its own instead (``--bind unix:///...``), removed by
    :meth:`stop`."""

    what = "the server"

    def __init__(self, extra: Sequence[str] = (), *, unix: bool = False) -> None:
        self._dir = tempfile.mkdtemp(prefix="aioenv-bench-", dir="/tmp") if unix else None
        bind = f"unix://{self._dir}/s.sock" if self._dir else "tcp://127.0.0.1:0"
        cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", bind]
        cmd += [arg for pattern in ALLOW for arg in ("--allow-env", pattern)]
        cmd += [arg for rule in ALLOW_KWARGS for arg in ("--allow-env-kwargs", rule)]
        # the bounds this benchmark's cells need (1,024 envs in one pool, 50 clients with a worker each), above the
        # defaults of a small machine (256 envs and 4 worker processes per usable CPU), which refuse them on 2 CPUs
        cmd += ["--max-envs", str(MAX_ENVS), "--max-workers", str(MAX_WORKERS)]
        patterns = {"listening": r"listening on ((?:tcp|unix)://\S+)", "workers": r"worker hosts join at (tcp://\S+)"}
        super().__init__([*cmd, *extra], patterns)
        self.endpoint = self.wait_for("listening")  # logged after the worker port's line
        self.worker_endpoint = self.found.get("workers")
        if "--worker-bind" in extra and self.worker_endpoint is None:
            self._kill()
            raise RuntimeError(f"the server did not say where worker hosts join: {''.join(self.log)}")

    def stop(self) -> dict[str, Any]:
        """See :meth:`Managed.stop`; a unix socket's directory goes too."""
        try:
            return super().stop()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)


class WorkerHost(Managed):
    """``aioenv worker --connect WORKER_ENDPOINT --capacity K --name NAME``: a worker host on this machine, admitted
    by the server once constructed (it logged ``joined the server``). Its workers are its child processes."""

    what = "the worker host"

    def __init__(self, worker_endpoint: str, capacity: int, name: str, extra: Sequence[str] = ()) -> None:
        cmd = [sys.executable, "-m", "aioenv.cli", "worker", "--connect", worker_endpoint]
        cmd += ["--capacity", str(capacity), "--name", name, *extra]
        super().__init__(cmd, {"joined": r"joined the server at (\S+)"})
        self.name, self.capacity = name, capacity
        self.wait_for("joined")


def server_status(endpoint: str) -> dict[str, Any]:
    """``aioenv status ENDPOINT --json``, run as a user runs it."""
    cmd = [sys.executable, "-m", "aioenv.cli", "status", endpoint, "--json", "--timeout", "10"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60, check=False)
    took = sig(time.perf_counter() - t0)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}", "command_s": took}
    return json.loads(proc.stdout) | {"command_s": took}


# ------------------------------------------------------------------ CPU and memory
@dataclasses.dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds so far, per part, and of the whole machine (busy, and stolen by the host)."""

    parts: dict[str, float]
    machine_busy: float
    machine_steal: float


def cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of a process (0 when it vanished)."""
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


Parts = dict[str, list[psutil.Process]]  # a part's name -> its processes (see :func:`classify`)
NOT_PER_STEP = ("idle",)  # parts left out of the CPU per env-step (not part of the measured pool)


def classify(
    server_pid: int | None,
    clients: frozenset[int] = frozenset(),
    hosts: frozenset[int] = frozenset(),
    idle: frozenset[int] = frozenset(),
) -> Parts:
    """This process tree split into parts: ``client`` (this process), ``server``, ``host`` (the worker host
    processes ``hosts``), ``server_workers`` (the server's descendants and the hosts' descendants: the server's
    pools' workers wherever they run), ``clients`` (client processes, case 3), ``idle`` (the trees of ``idle``:
    our processes not serving the measured pool, e.g. a second server) and ``local_workers`` (every other
    child: embedded pools)."""
    me = psutil.Process()
    parts: Parts = {
        "client": [me],
        "server": [],
        "host": [],
        "server_workers": [],
        "clients": [],
        "idle": [],
        "local_workers": [],
    }
    in_server = {p.pid for p in descendants(server_pid)} if server_pid else set()
    in_hosts = {p.pid for pid in hosts for p in descendants(pid)}
    in_idle = set(idle) | {p.pid for pid in idle for p in descendants(pid)}
    kids = me.children(recursive=True)
    not_template = set(not_templates(kids))
    for proc in kids:
        if proc not in not_template:  # a worker template (idle between forks), wherever it is
            parts["idle"].append(proc)
        elif proc.pid == server_pid:
            parts["server"].append(proc)
        elif proc.pid in hosts:
            parts["host"].append(proc)
        elif proc.pid in in_server or proc.pid in in_hosts:
            parts["server_workers"].append(proc)
        elif proc.pid in clients:
            parts["clients"].append(proc)
        elif proc.pid in in_idle:
            parts["idle"].append(proc)
        else:
            parts["local_workers"].append(proc)
    PIDS_SEEN.update(p.pid for procs in parts.values() for p in procs if p.pid != me.pid)
    return parts


def cpu_snapshot(parts: Parts) -> CpuSnapshot:
    """CPU seconds of every part, and of the machine."""
    m = psutil.cpu_times()
    busy = sum(getattr(m, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))
    sums = {name: sum(cpu_seconds(p) for p in procs) for name, procs in parts.items()}
    return CpuSnapshot(sums, busy, getattr(m, "steal", 0.0))


def cpu_usage(a: CpuSnapshot, b: CpuSnapshot, elapsed: float, steps: int) -> dict[str, Any]:
    """CPU over a window in % of one core, per part; ``outside`` = the rest of the machine (other programs,
    the kernel), ``steal`` = taken by the host; ``us_per_step`` = CPU of our parts (but :data:`NOT_PER_STEP`)
    per env-step (µs)."""
    used = {name: b.parts[name] - a.parts.get(name, 0.0) for name in b.parts}
    ours = sum(used.values())
    outside = max(0.0, (b.machine_busy - a.machine_busy) - ours)
    per_step = sum(sec for name, sec in used.items() if name not in NOT_PER_STEP)
    out = {name: sig(100 * sec / elapsed) for name, sec in used.items()}
    out |= {
        "outside": sig(100 * outside / elapsed),
        "steal": sig(100 * (b.machine_steal - a.machine_steal) / elapsed),
        "us_per_step": sig(1e6 * per_step / max(steps, 1)),
    }
    return out


def read_memory(proc: psutil.Process) -> tuple[Any, bool] | None:
    """``(memory_full_info(), True)``, or ``(memory_info(), False)`` where the full one (PSS, USS) is denied;
    None when the process is gone."""
    try:
        try:
            return proc.memory_full_info(), True
        except psutil.AccessDenied:
            return proc.memory_info(), False
    except psutil.NoSuchProcess:
        return None


def memory_of(procs: list[psutil.Process]) -> dict[str, Any]:
    """Sums of RSS and (where readable) PSS over ``procs``."""
    rss = pss = 0
    full = True
    count = 0
    for proc in procs:
        if (read := read_memory(proc)) is None:
            continue
        info, full = read[0], full and read[1]
        count += 1
        rss += int(info.rss)
        pss += int(getattr(info, "pss", 0))
    out: dict[str, Any] = {"processes": count, "rss_bytes": rss}
    if full and pss:
        out["pss_bytes"] = pss
    return out


def local_leftovers(server_pid: int, wait: float = 5.0, keep_trees: Iterable[int] = ()) -> list[str]:
    """Children of this process (other than the server and its workers, and the trees of ``keep_trees``: other
    servers, worker hosts) alive ``wait`` s from now."""
    roots = {server_pid, *keep_trees}
    keep = roots | {p.pid for pid in roots for p in descendants(pid)}
    kids = [p for p in not_templates(psutil.Process().children(recursive=True)) if p.pid not in keep]
    _, alive = psutil.wait_procs(kids, timeout=wait)
    return describe(alive)


# ------------------------------------------------------------------ one pool, one loop
@dataclasses.dataclass(frozen=True)
class Spec:
    """One pool and its client loop."""

    env: str
    num_envs: int
    loop: str  # "batch:N" (recv() with batch_size N) or "any" (recv(min_results=1, max_results=num_envs))
    executor: str | None = None
    env_kwargs: dict[str, Any] | None = None
    num_workers: int | None = None
    warmup: float = 1.0
    seconds: float = 5.0

    @property
    def batch_size(self) -> int | None:
        """The pool's batch_size (None for an ``any`` loop: the pool's default)."""
        return min(int(self.loop.partition(":")[2]), self.num_envs) if self.loop.startswith("batch:") else None

    @property
    def recv_kwargs(self) -> dict[str, int]:
        """How the loop calls recv."""
        return {} if self.batch_size is not None else {"min_results": 1, "max_results": self.num_envs}

    @property
    def label(self) -> str:
        """The loop, for the tables."""
        if self.batch_size is not None:
            return f"recv(), batch_size={self.batch_size}"
        return f"recv(min_results=1, max_results={self.num_envs})"


def parse_loop(spec: str) -> str:
    """Validate ``batch:N`` or ``any``."""
    kind, _, size = spec.partition(":")
    if spec != "any" and not (kind == "batch" and size.isdigit() and int(size) >= 1):
        raise argparse.ArgumentTypeError(f"a loop is 'batch:N' (N >= 1) or 'any', got {spec!r}")
    return spec


async def make_pool(spec: Spec, endpoint: str | None) -> aioenv.Pool:
    """``aioenv.make`` for ``spec``, embedded (``endpoint=None``) or on the server."""
    options: dict[str, Any] = {"batch_size": spec.batch_size, "num_workers": spec.num_workers}
    if spec.executor is not None:
        options["executor"] = spec.executor
    if spec.env_kwargs is not None:
        options["env_kwargs"] = spec.env_kwargs
    if endpoint is not None:
        options["endpoint"] = endpoint
    return await aioenv.make(spec.env, spec.num_envs, **options)


def window_figures(
    steps: int, calls: int, elapsed: float, num_workers: int, times: tuple[float, float, float], cpu: dict[str, Any]
) -> dict[str, Any]:
    """The figures of one pool's timed window: ``steps`` rows from ``calls`` recv calls in ``elapsed`` s; ``times``
    = ``perf_counter()`` before ``make``, after it and after the first ``reset``; ``cpu`` as measured."""
    t0, t1, t2 = times
    return {
        "steps": steps,
        "seconds": sig(elapsed),
        "steps_per_s": sig(steps / elapsed),
        "recv_calls": calls,
        "rows_per_recv": sig(steps / max(calls, 1)),
        "num_workers": num_workers,
        "startup_s": {"make": sig(t1 - t0), "reset": sig(t2 - t1), "total": sig(t2 - t0)},
        "cpu": cpu,
    }


# ------------------------------------------------------------------ the timed window of a client loop
P = TypeVar("P")
S = TypeVar("S")


@dataclasses.dataclass
class Window(Generic[P, S]):
    """What :func:`timed_window` counted: rows, calls, seconds, and CPU snapshots of ``parts`` around it."""

    steps: int
    calls: int
    elapsed: float
    parts: P
    cpu0: S
    cpu1: S


async def timed_window(
    once: Callable[[], Awaitable[int]],
    warmup: float,
    seconds: float,
    parts_of: Callable[[], P],
    snapshot: Callable[[P], S],
) -> Window[P, S]:
    """Call ``once()`` (one recv + send, returning the rows received) for ``warmup`` seconds, then count rows
    and calls over ``seconds``; ``parts_of()`` (after the warm-up: every worker is up) names the processes
    whose CPU ``snapshot(parts)`` records at both ends of the window."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        await once()
    parts = parts_of()
    cpu0 = snapshot(parts)
    steps = calls = 0
    start = time.perf_counter()
    while (now := time.perf_counter()) < start + seconds:
        steps += await once()
        calls += 1
    return Window(steps, calls, now - start, parts, cpu0, snapshot(parts))


# ------------------------------------------------------------------ one timed cell of bench_remote.py
async def pool_cell(spec: Spec, endpoint: str | None, parts_of: Callable[[], Parts]) -> dict[str, Any]:
    """Make, reset, prime every env with a send, warm up, then count the rows received over the window;
    ``parts_of`` splits the process tree for the CPU accounting (called after the warm-up: every worker is up)."""
    n = spec.num_envs
    t0 = time.perf_counter()
    pool = await make_pool(spec, endpoint)
    try:
        t1 = time.perf_counter()
        await pool.reset(seed=0)
        t2 = time.perf_counter()
        actions = np.random.default_rng(0).integers(0, 2, size=(64, n), dtype=np.int64)  # pre-sampled, cycled
        pool.send(actions[0], np.arange(n, dtype=np.int32))
        k = 1
        recv_kwargs = spec.recv_kwargs

        async def once() -> int:
            nonlocal k
            *_, info = await pool.recv(**recv_kwargs)
            ids = info["env_id"]
            pool.send(actions[k % 64][ids], ids)  # exactly the rows that came back
            k += 1
            return int(ids.size)

        window = await timed_window(once, spec.warmup, spec.seconds, parts_of, cpu_snapshot)
    finally:
        await pool.aclose()
    parts, steps = window.parts, window.steps
    cpu = cpu_usage(window.cpu0, window.cpu1, window.elapsed, steps)
    res = window_figures(steps, window.calls, window.elapsed, pool.num_workers, (t0, t1, t2), cpu)
    return res | {"processes": {name: len(procs) for name, procs in parts.items()}}


def run_cell(
    name: str,
    label: str,
    spec: Spec,
    server: Server,
    remote: bool,
    *,
    where: str | None = None,
    hosts: Sequence[WorkerHost] = (),
    idle: Sequence[Managed] = (),
) -> dict[str, Any]:
    """:func:`pool_cell` on its own event loop with a timeout: on ``server`` (``remote``) or embedded; records errors
    and processes left behind. ``hosts``: the worker hosts running ``server``'s workers (their processes count as
    workers, each host process as part ``host``); ``idle``: our other servers and hosts, idle during the cell.
    ``where`` names the cell (default ``remote`` / ``embedded``)."""
    where = where or ("remote" if remote else "embedded")
    print(f"[{name}] {where}, {label} ...", flush=True)
    timeout = 120.0 + 3 * (spec.warmup + spec.seconds) + spec.num_envs / 50
    host_pids, idle_pids = frozenset(h.pid for h in hosts), frozenset(m.pid for m in idle)

    def parts_of() -> Parts:
        return classify(server.pid, hosts=host_pids, idle=idle_pids)

    try:
        res = run_async(pool_cell(spec, server.endpoint if remote else None, parts_of), timeout) | {"status": "ok"}
    except Exception as exc:  # noqa: BLE001 - report it, keep the other cells
        traceback.print_exc()
        res = {"status": f"error: {type(exc).__name__}: {exc}"}
    gc.collect()
    others = [*hosts, *idle]
    left = local_leftovers(server.pid, keep_trees=[m.pid for m in others]) + server.wait_no_workers()
    res["leftover_processes"] = left + [p for m in others for p in m.wait_no_workers()]
    res |= {"where": where, "loop": spec.label}
    if res["status"] == "ok":
        cpu = res["cpu"]
        host = f" host {cpu['host']:.0f}" if hosts else ""
        print(
            f"[{name}] {where}, {label}: {res['steps_per_s']:,.0f} steps/s, {res['rows_per_recv']:.1f} rows/recv; "
            f"startup {res['startup_s']['total']:.2f} s; CPU % client {cpu['client']:.0f} server {cpu['server']:.0f}"
            f"{host} server workers {cpu['server_workers']:.0f} local workers {cpu['local_workers']:.0f} outside "
            f"{cpu['outside']:.0f} stolen {cpu['steal']:.0f}; {cpu['us_per_step']:.1f} µs CPU/step",
            flush=True,
        )
    else:
        print(f"[{name}] {where}, {label}: {res['status']}", flush=True)
    if res["leftover_processes"]:
        print(f"[{name}] {where}, {label}: LEFT BEHIND {res['leftover_processes']}", flush=True)
    return res


def median_cell(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell from its repeats: the median run's figures (the lower of two), ``steps_per_s`` the median of the
    runs that went well, every run's steps/s and status, and every process any of them left behind."""
    ok = sorted((a for a in attempts if a["status"] == "ok"), key=lambda a: a["steps_per_s"])
    cell = dict(ok[(len(ok) - 1) // 2]) if ok else dict(attempts[0])
    cell["repeats_steps_per_s"] = [a.get("steps_per_s") for a in attempts]
    cell["repeats_status"] = [a["status"] for a in attempts]
    cell["leftover_processes"] = [p for a in attempts for p in a["leftover_processes"]]
    if ok:
        cell["steps_per_s"] = sig(statistics.median(a["steps_per_s"] for a in ok))
    return cell


# ------------------------------------------------------------------ reporting helpers
def run_header() -> dict[str, Any]:
    """What a result file starts with: the machine, the date (UTC) and the command that ran."""
    return {
        "machine": machine_info(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command(),
    }


def machine_info() -> dict[str, Any]:
    """Machine and library versions recorded next to the results."""
    try:
        import uvloop

        loop = f"uvloop {getattr(uvloop, '__version__', '?')}"
    except ImportError:
        loop = "asyncio"
    return {
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "psutil": psutil.__version__,
        "aioenv": aioenv.__version__,
        "loop": loop,
        "hot_path": _hot.describe(),
    }


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A number for the tables ("n/a" when missing)."""
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


WINDOW_HEAD = ["CPU outside / stolen", "CPU µs/step", "workers", "startup s"]  # a pool table's last columns


def window_columns(cell: dict[str, Any]) -> list[str]:
    """A pool row's last columns (:data:`WINDOW_HEAD`) from a measured cell (:func:`window_figures`)."""
    cpu = cell["cpu"]
    return [
        f"{cpu['outside']:.0f}% / {cpu['steal']:.0f}%",
        fmt(cpu["us_per_step"], ".1f"),
        str(cell["num_workers"]),
        fmt(cell["startup_s"]["total"], ".2f"),
    ]


def md_table(head: list[str], rows: list[list[str]], left: int = 1, last_left: bool = False) -> list[str]:
    """Markdown table lines: the first ``left`` columns (and the last, if ``last_left``) left-aligned, numbers right."""
    rule = ["---" if i < left or (last_left and i == len(head) - 1) else "--:" for i in range(len(head))]
    return ["| " + " | ".join(r) + " |" for r in (head, rule, *rows)]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a ``.tmp`` sibling."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ------------------------------------------------------------------ bars (informative: a missed bar never fails a run)
def md_bars(bars: list[dict[str, Any]]) -> list[str]:
    """The bars: value, threshold, met or MISSED."""
    word = {True: "met", False: "MISSED", None: "n/a"}
    rows = [
        [
            b["name"],
            b["about"],
            fmt_bar_value(b, b["value"]),
            f"{b['op']} {fmt_bar_value(b, b['threshold'], measured=False)}",
            word[b["met"]],
        ]
        for b in bars
    ]
    return md_table(["bar", "measured on", "value", "bar", "result"], rows, left=2, last_left=True)

"""Shared pieces of ``bench_remote.py``, ``remote_clients.py`` and ``bench_latency.py``: the server, pools,
CPU/memory, formatting.

- the ``aioenv serve`` subprocess (:class:`Server`) and ``aioenv status --json`` (:func:`server_status`);
- one pool and its client loop (:class:`Spec`, :func:`parse_loop`, :func:`make_pool`);
- process accounting: this process tree split into parts (:func:`classify`), CPU per part over a window
  (:func:`cpu_snapshot`, :func:`cpu_usage`), memory (:func:`read_memory`, :func:`memory_of`) and processes
  left behind;
- one pool's timed window as figures (:func:`window_figures`) and as a table row's last columns
  (:data:`WINDOW_HEAD`, :func:`window_columns`);
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
import json
import math
import os
import platform
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import psutil
import zmq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aioenv  # noqa: E402

T = TypeVar("T")
GIB = 2**30
MIB = 2**20
KIB = 2**10
EPISODE_STEPS = 10**9  # latency envs never autoreset inside a window (a reset step does not wait)
ASYNC_ENV = "aioenv.envs.latency:AsyncSleepEnv"
ALLOW = ("CartPole-v1", ASYNC_ENV)  # the env names the server may make (aioenv serve --allow-env)
START_TIMEOUT = 30.0  # seconds for the server to print its address
STOP_TIMEOUT = 30.0  # seconds for the server to exit after SIGTERM
PIDS_SEEN: set[int] = set()  # every process this run started (server, workers, clients): recorded for checks


# ------------------------------------------------------------------ small helpers
def sig(x: float) -> float:
    """Round to 6 significant digits (keeps the JSON readable)."""
    return float(f"{x:.6g}")


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


def describe(procs: list[psutil.Process]) -> list[str]:
    """``pid status cmdline`` of processes (for leftover reports)."""
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())[:160]}")
        except psutil.Error:
            continue
    return out


# ------------------------------------------------------------------ the server
class Server:
    """``aioenv serve`` on a free local port, its log drained by a thread; :meth:`stop` sends SIGTERM."""

    def __init__(self) -> None:
        cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", "tcp://127.0.0.1:0"]
        cmd += [arg for pattern in ALLOW for arg in ("--allow-env", pattern)]
        self.command = shlex.join(["python", *cmd[1:]])
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.log: list[str] = []
        self._found: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        try:
            self.endpoint = self._found.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the server did not start within {START_TIMEOUT:g} s: {''.join(self.log)}") from None
        if not self.endpoint:
            raise RuntimeError(f"the server exited at start (code {self.proc.wait()}): {''.join(self.log)}")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if found := re.search(r"listening on (tcp://\S+)", line):
                self._found.put(found.group(1))
        self._found.put("")  # the server's stderr closed: it exited

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.proc.pid

    def workers(self) -> list[psutil.Process]:
        """The server's worker processes (all its descendants)."""
        return descendants(self.proc.pid)

    def wait_no_workers(self, wait: float = 5.0) -> list[str]:
        """Server workers still alive ``wait`` seconds from now (none once every session closed)."""
        deadline = time.monotonic() + wait
        while (left := self.workers()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return describe(left)

    def problems(self) -> list[str]:
        """Log lines at WARNING or above, and tracebacks (what went wrong on the server)."""
        return [line.rstrip() for line in self.log if re.search(r"WARNING|ERROR|CRITICAL|Traceback", line)]

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the exit code, seconds to exit, workers left behind, and the log's problems."""
        workers = self.workers()
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        took = time.perf_counter() - t0
        self._reader.join(5.0)
        _, alive = psutil.wait_procs(workers, timeout=5.0)
        return {
            "exit_code": code,
            "stop_s": sig(took),
            "workers_left": describe(alive),
            "problems": self.problems()[-40:],
            "log_lines": len(self.log),
        }


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


def classify(server_pid: int | None, clients: frozenset[int] = frozenset()) -> dict[str, list[psutil.Process]]:
    """This process tree split into parts: ``client`` (this process), ``server``, ``server_workers``,
    ``clients`` (client processes, case 3) and ``local_workers`` (every other child: embedded pools)."""
    me = psutil.Process()
    parts: dict[str, list[psutil.Process]] = {
        "client": [me],
        "server": [],
        "server_workers": [],
        "clients": [],
        "local_workers": [],
    }
    in_server = {p.pid for p in descendants(server_pid)} if server_pid else set()
    for proc in me.children(recursive=True):
        if proc.pid == server_pid:
            parts["server"].append(proc)
        elif proc.pid in in_server:
            parts["server_workers"].append(proc)
        elif proc.pid in clients:
            parts["clients"].append(proc)
        else:
            parts["local_workers"].append(proc)
    PIDS_SEEN.update(p.pid for procs in parts.values() for p in procs if p.pid != me.pid)
    return parts


def cpu_snapshot(parts: dict[str, list[psutil.Process]]) -> CpuSnapshot:
    """CPU seconds of every part, and of the machine."""
    m = psutil.cpu_times()
    busy = sum(getattr(m, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq"))
    sums = {name: sum(cpu_seconds(p) for p in procs) for name, procs in parts.items()}
    return CpuSnapshot(sums, busy, getattr(m, "steal", 0.0))


def cpu_usage(a: CpuSnapshot, b: CpuSnapshot, elapsed: float, steps: int) -> dict[str, Any]:
    """CPU over a window in % of one core, per part; ``outside`` = the rest of the machine (other programs,
    the kernel), ``steal`` = taken by the host; ``us_per_step`` = CPU of all our parts per env-step (µs)."""
    used = {name: b.parts[name] - a.parts.get(name, 0.0) for name in b.parts}
    ours = sum(used.values())
    outside = max(0.0, (b.machine_busy - a.machine_busy) - ours)
    out = {name: sig(100 * sec / elapsed) for name, sec in used.items()}
    out |= {
        "outside": sig(100 * outside / elapsed),
        "steal": sig(100 * (b.machine_steal - a.machine_steal) / elapsed),
        "us_per_step": sig(1e6 * ours / max(steps, 1)),
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


def local_leftovers(server_pid: int, wait: float = 5.0) -> list[str]:
    """Children of this process (other than the server and its workers) alive ``wait`` s from now."""
    keep = {server_pid, *(p.pid for p in descendants(server_pid))}
    kids = [p for p in psutil.Process().children(recursive=True) if p.pid not in keep]
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


# ------------------------------------------------------------------ reporting helpers
def run_header() -> dict[str, Any]:
    """What a result file starts with: the machine, the date (UTC) and the command that ran."""
    return {
        "machine": machine_info(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.executable), *sys.argv]),
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
    }


def fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A number for the tables ("n/a" when missing)."""
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def fmt_bytes(value: float | None) -> str:
    """Bytes as MiB / GiB / KiB."""
    if value is None:
        return "n/a"
    if value >= GIB:
        return f"{value / GIB:.2f} GiB"
    if value >= MIB:
        return f"{value / MIB:,.0f} MiB"
    return f"{value / KIB:,.1f} KiB"


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
def bar(name: str, value: float | None, op: str, threshold: float, unit: str, about: str) -> dict[str, Any]:
    """A bar: ``value op threshold``, ``op`` being ``>=`` or ``<`` (``met`` None without a value)."""
    met = None if value is None else (value >= threshold if op == ">=" else value < threshold)
    return {"name": name, "value": value, "op": op, "threshold": threshold, "unit": unit, "about": about, "met": met}


def fmt_bar_value(b: dict[str, Any], value: float | None, measured: bool = True) -> str:
    """A bar's value (``measured``) or threshold in its unit (``%``, ``x`` or ``bytes``). A measured ratio is
    rounded towards missing the bar (down for ``>=``), so a value shown equal to the threshold has met it."""
    if value is None:
        return "n/a"
    if b["unit"] == "bytes":
        return fmt_bytes(value)
    scale = 1000 if b["unit"] == "%" else 100  # 0.1% or 0.01x
    shown = math.floor(value * scale) / scale if measured and b["op"] == ">=" else value
    return f"{shown:.1%}" if b["unit"] == "%" else f"{shown:.2f}x"


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

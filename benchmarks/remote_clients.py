"""Case 3 of ``bench_remote.py``: many client processes at once on the one server (the ``clients`` case).

:func:`bench_clients` starts ``--clients`` processes, each running ``bench_remote.py client ...``
(:func:`client_main`): it makes a pool of ``AsyncSleepEnv`` on the server and resets, says ready (JSON
lines on stdout); once all are ready the parent sends every one the same start time on stdin (the
barrier), they warm up together and each counts its own rows until the same wall-clock end. The parent
records the server's state during the warm-up (``aioenv status --json``), CPU of the server, its
workers and the clients over the window, memory, and the per-client spread; :func:`md_clients` is the
case's Markdown table.

Not a package module: ``bench_remote.py`` puts ``benchmarks/`` on ``sys.path`` before importing it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

import numpy as np
from benchutil import (
    ASYNC_ENV,
    EPISODE_STEPS,
    MIB,
    ROOT,
    Server,
    Spec,
    child_env,
    classify,
    cpu_snapshot,
    cpu_usage,
    fmt,
    local_leftovers,
    make_pool,
    md_table,
    memory_of,
    parse_loop,
    server_status,
    sig,
)

import aioenv

SCRIPT = Path(__file__).resolve().with_name("bench_remote.py")  # the entry point: ``bench_remote.py client``


def client_main(argv: list[str]) -> int:
    """``bench_remote.py client ...``: one client process of case 3 (JSON lines on stdout, the go on stdin)."""
    p = argparse.ArgumentParser(prog="bench_remote.py client")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--num-envs", type=int, required=True)
    p.add_argument("--mean", type=float, required=True)
    p.add_argument("--loop", type=parse_loop, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    kwargs = {"mean": args.mean, "sigma": 0.5, "cap": 10 * args.mean, "episode_steps": EPISODE_STEPS}
    spec = Spec(ASYNC_ENV, args.num_envs, args.loop, "async", kwargs, 1)

    def say(**fields: Any) -> None:
        print(json.dumps(fields), flush=True)

    async def run() -> None:
        t0 = time.perf_counter()
        pool = await make_pool(spec, args.endpoint)
        try:
            await pool.reset(seed=args.seed)
            say(ready=True, pid=os.getpid(), startup_s=sig(time.perf_counter() - t0), num_workers=pool.num_workers)
            line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            go = json.loads(line)
            await asyncio.sleep(max(0.0, go["start"] - time.time()))
            n = args.num_envs
            action = np.zeros(n, dtype=np.int64)
            pool.send(action, np.arange(n, dtype=np.int32))
            recv_kwargs = spec.recv_kwargs

            async def once() -> int:
                *_, info = await pool.recv(**recv_kwargs)
                ids = info["env_id"]
                pool.send(action[: ids.size], ids)
                return int(ids.size)

            while time.time() < go["start"] + go["warmup"]:
                await once()
            cpu0, w0 = time.process_time(), time.time()
            steps = calls = 0
            end = go["start"] + go["warmup"] + go["seconds"]  # every client's window ends at the same moment
            while (now := time.time()) < end:
                steps += await once()
                calls += 1
            elapsed = now - w0
            cpu = time.process_time() - cpu0
        finally:
            await pool.aclose()
        say(
            steps=steps,
            seconds=sig(elapsed),
            steps_per_s=sig(steps / elapsed),
            recv_calls=calls,
            rows_per_recv=sig(steps / max(calls, 1)),
            window_start=w0,
            cpu_pct=sig(100 * cpu / elapsed),
        )

    aioenv.run(run())
    return 0


class Client:
    """One client process of case 3: its JSON lines arrive on a queue (read by a thread)."""

    def __init__(self, index: int, endpoint: str, num_envs: int, mean: float, loop: str, log_dir: Path) -> None:
        cmd = [sys.executable, str(SCRIPT), "client", "--endpoint", endpoint]
        cmd += ["--num-envs", str(num_envs), "--mean", str(mean), "--loop", loop, "--seed", str(index * num_envs)]
        self.index = index
        self.stderr_path = log_dir / f"client{index}.err"
        self._stderr: IO[str] = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.lines.put(json.loads(line))
        self.lines.put(None)  # stdout closed: the client exited

    def next(self, deadline: float) -> dict[str, Any]:
        """The client's next JSON line; RuntimeError when it exited or ``deadline`` (monotonic) passed."""
        try:
            got = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"client {self.index} said nothing in time") from None
        if got is None:
            raise RuntimeError(f"client {self.index} exited with {self.proc.wait()}: {self.stderr_tail()}")
        return got

    def go(self, fields: dict[str, Any]) -> None:
        """Send the common start time (the barrier's release)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(fields) + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        """The end of its stderr (for errors)."""
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text()[-1500:]

    def finish(self, wait: float) -> int | None:
        """Wait for it to exit (kill it past ``wait``); its exit code (None when killed)."""
        try:
            code: int | None = self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self._stderr.close()
        return code


def spread(values: list[float]) -> dict[str, Any]:
    """min / median / max, max/min and the coefficient of variation (population std / mean)."""
    mean = statistics.fmean(values)
    return {
        "min": sig(min(values)),
        "median": sig(statistics.median(values)),
        "max": sig(max(values)),
        "mean": sig(mean),
        "max_over_min": sig(max(values) / min(values)) if min(values) > 0 else None,
        "cv": sig(statistics.pstdev(values) / mean) if mean > 0 else None,
    }


def bench_clients(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    """``--clients`` client processes at once on the one server, released together; each reports its steps/s."""
    k, n, mean, loop = args.clients, args.client_envs, args.client_mean, args.client_loop
    warmup, seconds = args.clients_warmup, args.clients_seconds
    ideal = k * n / mean
    title = f"{k} clients x {n} AsyncSleepEnv (mean {mean * 1e3:g} ms), executor=async, 1 worker each"
    print(f"[clients] {title}: ideal {ideal:,.0f} steps/s in all", flush=True)
    out: dict[str, Any] = {
        "title": title,
        "params": {
            "clients": k,
            "envs_per_client": n,
            "env": ASYNC_ENV,
            "mean": mean,
            "loop": loop,
            "num_workers_per_client": 1,
            "warmup": warmup,
            "seconds": seconds,
            "ideal_steps_per_s": ideal,
            "ideal_per_client": n / mean,
        },
    }
    clients: list[Client] = []
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        t0 = time.perf_counter()
        try:
            for i in range(k):
                clients.append(Client(i, server.endpoint, n, mean, loop, Path(tmp)))  # noqa: PERF401 - made ones are stopped on error
            deadline = time.monotonic() + 120 + 4 * k
            ready = [c.next(deadline) for c in clients]
            out["startup_s"] = {
                "all_ready": sig(time.perf_counter() - t0),
                "per_client_max": max(r["startup_s"] for r in ready),
            }
            out["server_worker_processes"] = len(server.workers())
            print(
                f"[clients] all {k} ready after {out['startup_s']['all_ready']:.1f} s "
                f"({out['server_worker_processes']} server workers); go",
                flush=True,
            )
            # Every client has its pool open and waits for the go: `aioenv status --json`, run as a user runs
            # it, sees all of them whatever its own start-up takes.
            out["status_all_ready"] = server_status(server.endpoint)
            start = time.time() + 0.5
            for c in clients:
                c.go({"start": start, "warmup": warmup, "seconds": seconds})
            pids = frozenset(c.proc.pid for c in clients)
            time.sleep(max(0.0, start + warmup / 2 - time.time()))
            out["status_during_warmup"] = status_now(server.endpoint)  # in-process: no interpreter start-up
            time.sleep(max(0.0, start + warmup - time.time()))
            parts = classify(server.pid, pids)
            cpu0, w0 = cpu_snapshot(parts), time.perf_counter()
            time.sleep(max(0.0, start + warmup + seconds - time.time()))
            cpu1, elapsed = cpu_snapshot(parts), time.perf_counter() - w0
            out["memory"] = {
                "server": memory_of(parts["server"]),
                "server_workers": memory_of(parts["server_workers"]),
                "clients": memory_of(parts["clients"]),
            }
            deadline = time.monotonic() + 60 + 2 * k
            results = [c.next(deadline) for c in clients]
        except Exception as exc:  # noqa: BLE001 - report it, keep the rest of the run
            traceback.print_exc()
            out["status"] = f"error: {type(exc).__name__}: {exc}"
            for c in clients:
                if c.proc.poll() is None:
                    c.proc.terminate()
            results = []
        finally:
            codes = [c.finish(30.0) for c in clients]
            tails = {c.index: c.stderr_tail() for c in clients if c.stderr_path.exists() and c.stderr_tail().strip()}
    out["client_exit_codes"] = sorted({str(code) for code in codes})
    out["client_stderr"] = {str(i): t[-600:] for i, t in list(tails.items())[:5]}
    out["leftover_processes"] = local_leftovers(server.pid) + server.wait_no_workers(10.0)
    if not results:
        out.setdefault("status", "error: no results")
        return out
    per = [r["steps_per_s"] for r in results]
    total = sum(per)
    steps = sum(r["steps"] for r in results)
    starts = [r["window_start"] for r in results]
    out |= {
        "status": "ok",
        "per_client_steps_per_s": per,
        "total_steps_per_s": sig(total),
        "fraction_of_ideal": sig(total / ideal),
        "per_client": spread(per),
        "window_start_skew_s": sig(max(starts) - min(starts)),
        "rows_per_recv": spread([r["rows_per_recv"] for r in results]),
        "client_cpu_pct": spread([r["cpu_pct"] for r in results]),
        "cpu": cpu_usage(cpu0, cpu1, elapsed, steps),
    }
    cpu, s = out["cpu"], out["per_client"]
    print(
        f"[clients] total {total:,.0f} steps/s ({out['fraction_of_ideal']:.1%} of ideal {ideal:,.0f}); per client "
        f"min {s['min']:,.0f} median {s['median']:,.0f} max {s['max']:,.0f}, max/min {s['max_over_min']:.2f}, "
        f"CV {s['cv']:.3f}; CPU % server {cpu['server']:.0f} server workers {cpu['server_workers']:.0f} clients "
        f"{cpu['clients']:.0f} outside {cpu['outside']:.0f} stolen {cpu['steal']:.0f}",
        flush=True,
    )
    if out["leftover_processes"]:
        print(f"[clients] LEFT BEHIND {out['leftover_processes']}", flush=True)
    return out


def status_now(endpoint: str) -> dict[str, Any]:
    """The server's state at once (:func:`aioenv.server.status.fetch_status`), or the error."""
    from aioenv.server.status import fetch_status

    try:
        return aioenv.run(fetch_status(endpoint, 10.0))
    except Exception as exc:  # noqa: BLE001 - reported in the results, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}


def md_clients(sec: dict[str, Any]) -> list[str]:
    """Case 3: totals, spread, server state, CPU and memory."""
    if sec.get("status") != "ok":
        return [f"{sec['title']}: {sec.get('status')}"]
    s, cpu, mem = sec["per_client"], sec["cpu"], sec["memory"]
    st = sec.get("status_during_warmup", {})
    state = (
        f"{st['sessions']} sessions, {st['clients']} clients, {st['envs']:,} envs, {st['in_flight']:,} requests "
        f"in flight, {st['protocol_errors']} protocol errors"
        if "sessions" in st
        else f"n/a ({st.get('error')})"
    )
    rows = [
        ["total", f"{sec['total_steps_per_s']:,.0f} steps/s", f"{sec['fraction_of_ideal']:.1%} of ideal "
         f"{sec['params']['ideal_steps_per_s']:,.0f}"],
        ["per client: min / median / max", f"{s['min']:,.0f} / {s['median']:,.0f} / {s['max']:,.0f} steps/s",
         f"ideal {sec['params']['ideal_per_client']:,.0f} each"],
        ["spread: max / min, coefficient of variation", f"{s['max_over_min']:.2f}x, CV {s['cv']:.3f}", ""],
        ["rows per recv (median over clients)", fmt(sec["rows_per_recv"]["median"], ",.1f"), sec["params"]["loop"]],
        ["window start skew between clients", f"{sec['window_start_skew_s'] * 1e3:.0f} ms", ""],
        ["startup: all clients ready", f"{sec['startup_s']['all_ready']:.1f} s",
         f"slowest client {sec['startup_s']['per_client_max']:.1f} s"],
        ["server state during warm-up (`aioenv.server.status.fetch_status`)", state,
         f"{sec['server_worker_processes']} server worker processes; `aioenv status --json` with every client ready: "
         f"{sec.get('status_all_ready', {}).get('sessions', 'n/a')} sessions"],
        ["CPU: server / server workers / clients", f"{cpu['server']:.0f}% / {cpu['server_workers']:.0f}% / "
         f"{cpu['clients']:.0f}%", f"outside {cpu['outside']:.0f}%, stolen {cpu['steal']:.0f}%; "
         f"{cpu['us_per_step']:.1f} µs CPU/step"],
        ["RSS: server / server workers / clients", " / ".join(
            f"{mem[p]['rss_bytes'] / MIB:,.0f} MiB" for p in ("server", "server_workers", "clients")),
         "PSS " + " / ".join(fmt(mem[p].get("pss_bytes", 0) / MIB, ",.0f", " MiB")
                              for p in ("server", "server_workers", "clients"))],
    ]  # fmt: skip
    return md_table([sec["title"], "value", "note"], rows, last_left=True)

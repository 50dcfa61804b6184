"""Many OpenEnv WebSocket sessions at once: ``aioenv serve --http`` against a plain OpenEnv server of the same env.

OpenEnv's scaling tutorial holds 2,048 concurrent WebSocket sessions on 8 cores with a 10 s step before success
falls below 95%. Here both servers serve an env whose step awaits ``--delay`` seconds (aioenv:
``aioenv.envs.latency:AsyncSleepEnv`` with sigma 0 on the async executor, one worker process; OpenEnv: the same
env written with OpenEnv's classes, ``benchmarks/openenv_peer.py``), and one client process opens ``N`` sessions
(64 connecting at a time), resets each, then steps each in a loop, one step in flight per session, for
``--seconds``; session ``i`` starts ``i / N`` of a delay late, so steps arrive steadily (``N / delay`` a
second), not in one burst per delay. Figures per server and ``N``: sessions held, steps answered and failed
(success = answered / sent), the latency each step added over the env's own ``--delay`` (p50, p99, max), and the
CPU the server's processes (its workers included) spent per step answered, which load moves far less.

    python benchmarks/bench_openenv.py                       # 1,024, 2,048 and 4,096 sessions, 10 s steps
    python benchmarks/bench_openenv.py --sessions 256 --delay 1 --seconds 10 --quick

Writes ``benchmarks/results/openenv.json`` and ``openenv.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import cpu_seconds, descendants, md_table, run_header, write_atomic

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results"
ENV = "aioenv.envs.latency:AsyncSleepEnv"


def tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of a process and its descendants (the server and its worker processes)."""
    return sum(cpu_seconds(proc) for proc in [psutil.Process(pid), *descendants(pid)])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_aioenv(port: int, sessions: int, delay: float) -> subprocess.Popen[str]:
    kwargs = {"mean": delay, "sigma": 0.0, "cap": delay * 2, "episode_steps": 10**9}
    cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", "tcp://127.0.0.1:0", "--http", f"127.0.0.1:{port}"]
    cmd += ["--http-env", f"{ENV}={sessions}", "--http-env-kwargs", f"{ENV}={json.dumps(kwargs)}"]
    cmd += ["--executor", "async", "--workers", "1", "--http-max-sessions-per-client", str(sessions)]
    cmd += ["--max-envs", str(sessions)]
    cmd += ["--http-step-timeout", str(max(60.0, delay * 6)), "--log-level", "WARNING"]
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True)


def start_openenv(port: int, sessions: int, delay: float) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "openenv_peer.py"), "--port", str(port)]
    cmd += ["--delay", str(delay), "--max-sessions", str(sessions)]
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True)


async def wait_healthy(port: int, proc: subprocess.Popen[str], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
            answer = await reader.read(64)
            writer.close()
            if b" 200 " in answer:
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no /health on port {port} within {timeout} s")


class Load:
    """The client side of one cell: its sessions' step latencies and failures."""

    def __init__(self, url: str, delay: float, seconds: float, action: dict[str, Any]) -> None:
        self.url = url
        self.delay = delay
        self.seconds = seconds
        self.action = action
        self.added: list[float] = []
        self.sent = 0
        self.failed = 0
        self.held = 0
        self.refused: list[str] = []
        self.stop_at = 0.0
        self.sessions = 0
        self.opened = asyncio.Event()  # every session is held or refused

    async def session(self, index: int, gate: asyncio.Semaphore, ready: asyncio.Event) -> None:
        try:
            async with gate:
                ws = await connect(self.url, max_size=1 << 20, open_timeout=120, ping_interval=None)
                await ws.send(json.dumps({"type": "reset", "data": {}}))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 120))
                if reply.get("type") != "observation":
                    self.refused.append(str(reply.get("data"))[:200])
                    self._settled()
                    await ws.close()
                    return
            self.held += 1
            self._settled()
            await ready.wait()
            await asyncio.sleep(self.delay * index / self.sessions)  # steady arrivals, not one burst per delay
            async with ws:
                message = json.dumps({"type": "step", "data": self.action})
                while time.monotonic() < self.stop_at:
                    t0 = time.monotonic()
                    self.sent += 1
                    await ws.send(message)
                    try:
                        reply = json.loads(await asyncio.wait_for(ws.recv(), self.delay * 6 + 60))
                    except (TimeoutError, OSError):
                        self.failed += 1
                        return
                    if reply.get("type") != "observation":
                        self.failed += 1
                        continue
                    self.added.append(time.monotonic() - t0 - self.delay)
        except Exception as exc:  # noqa: BLE001 (a session that could not be held is counted, not fatal)
            if not ready.is_set():
                self.refused.append(f"{type(exc).__name__}: {exc}"[:200])
                self._settled()
            else:
                self.failed += 1

    def _settled(self) -> None:
        if self.held + len(self.refused) >= self.sessions:
            self.opened.set()

    async def run(self, sessions: int, server_pid: int) -> dict[str, Any]:
        gate, ready = asyncio.Semaphore(64), asyncio.Event()
        self.sessions = sessions
        tasks = [asyncio.create_task(self.session(i, gate, ready)) for i in range(sessions)]
        t_open = time.monotonic()
        await self.opened.wait()
        opened_s = time.monotonic() - t_open
        self.stop_at = time.monotonic() + self.seconds
        # The client's own garbage collector, scanning every connection's objects, would pause this process and
        # show up as the servers' latency: what is alive now stays out of its scans.
        gc.collect()
        gc.freeze()
        cpu0 = tree_cpu(server_pid)
        ready.set()
        await asyncio.gather(*tasks)
        cpu = tree_cpu(server_pid) - cpu0
        added = sorted(self.added)

        def q(p: float) -> float | None:
            return round(added[min(len(added) - 1, int(p * len(added)))] * 1000, 1) if added else None

        return {
            "sessions": sessions,
            "held": self.held,
            "refused": len(self.refused),
            "refusals": self.refused[:3],
            "open_s": round(opened_s, 2),
            "steps_sent": self.sent,
            "steps_answered": len(added),
            "steps_failed": self.failed,
            "success": round(len(added) / self.sent, 4) if self.sent else None,
            "server_cpu_us_per_step": round(cpu / len(added) * 1e6, 1) if added else None,
            "added_ms": {
                "p50": q(0.5),
                "p99": q(0.99),
                "max": q(1.0) if added else None,
                "mean": round(statistics.fmean(added) * 1000, 1) if added else None,
            },
        }


def run_cell(server: str, sessions: int, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    proc = (start_aioenv if server == "aioenv" else start_openenv)(port, sessions, args.delay)
    try:
        asyncio.run(wait_healthy(port, proc))
        url = f"ws://127.0.0.1:{port}/ws"
        action = {"action": 1}
        load = Load(url, args.delay, args.seconds, action)
        cell = asyncio.run(load.run(sessions, proc.pid))
        cell["server"] = server
        return cell
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def render(res: dict[str, Any]) -> str:
    s = res["settings"]
    lines = [
        "# Concurrent OpenEnv WebSocket sessions: aioenv serve --http against a plain OpenEnv server",
        "",
        f"Command: `{res['command']}`; {res['machine']['cpu_count']} cores; {res['date']}.",
        f"Each step awaits {s['delay']} s in the env; steps for {s['seconds']} s once every session is held.",
        "",
    ]
    head = [
        "server",
        "sessions",
        "held",
        "steps answered / sent",
        "success",
        "added p50 ms",
        "added p99 ms",
        "added max ms",
        "server CPU µs/step",
        "open s",
    ]
    rows = [
        [
            c["server"],
            f"{c['sessions']:,}",
            f"{c['held']:,}",
            f"{c['steps_answered']:,} / {c['steps_sent']:,}",
            "n/a" if c["success"] is None else f"{c['success']:.2%}",
            str(c["added_ms"]["p50"]),
            str(c["added_ms"]["p99"]),
            str(c["added_ms"]["max"]),
            str(c["server_cpu_us_per_step"]),
            str(c["open_s"]),
        ]
        for c in res["cells"]
    ]
    lines += md_table(head, rows, left=1)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--delay", type=float, default=10.0, help="seconds each step awaits in the env")
    p.add_argument("--seconds", type=float, default=40.0, help="stepping window per cell")
    p.add_argument("--servers", nargs="+", default=["aioenv", "openenv"], choices=["aioenv", "openenv"])
    p.add_argument("--quick", action="store_true", help="do not write results")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 4,096 sessions: a socket each, both ends
    res: dict[str, Any] = run_header() | {"settings": vars(args) | {"out": str(args.out)}, "cells": []}
    for sessions in args.sessions:
        for server in args.servers:
            cell = run_cell(server, sessions, args)
            print(json.dumps(cell), flush=True)
            res["cells"].append(cell)
    md = render(res)
    print("\n" + md)
    if not args.quick:
        write_atomic(args.out / "openenv.json", json.dumps(res, indent=2) + "\n")
        write_atomic(args.out / "openenv.md", md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

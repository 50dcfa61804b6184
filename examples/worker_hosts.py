"""A server with two worker hosts, on this machine: `python examples/worker_hosts.py`.

What a multi-machine deployment does, in one script and on one machine (loopback tcp):

1. starts ``aioenv serve --worker-bind ... --local-capacity 0`` (the server runs no env itself) and two
   worker hosts, ``aioenv worker --connect ... --capacity 12`` named ``host-a`` and ``host-b``;
2. opens two client pools of 6 CartPole envs: the server places each on the least-loaded host, so one
   lands on each (the table shows which host runs each pool's worker process);
3. steps both, then SIGKILLs ``host-a`` as a machine dying would: after ``--worker-timeout`` seconds of
   silence the server drops it, the pool there sees ``WorkerCrashed`` for what was in flight, and its
   envs are re-made on ``host-b``; the pool resets and goes on;
4. closes everything with SIGTERM and checks that no process is left.

On real machines, run the same commands on each host with the server's address instead of 127.0.0.1
(see docs/deployment.md, "Worker hosts").
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

import aioenv
from aioenv.server.status import fetch_status

CLI = [sys.executable, "-m", "aioenv.cli"]


def start(args: list[str], pattern: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``aioenv ARGS``, wait for a log line matching ``pattern``; (process, the match's group 1).

    A thread keeps reading the process's log (so it never blocks on a full pipe) and hands lines over.
    """
    proc = subprocess.Popen([*CLI, *args], stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 30
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        if not line:
            proc.kill()
            raise SystemExit(f"aioenv {args[0]} did not start (no log line matching {pattern!r})")
        found = re.search(pattern, line)
        if found:
            return proc, found.group(1) if found.groups() else ""


def placement(state: dict[str, Any]) -> str:
    return ", ".join(f"{h['name']} {h['envs']}/{h['capacity']} envs" for h in state["hosts"])


async def drive(endpoint: str, steps: int, victim: subprocess.Popen[str]) -> None:
    """Two pools, one per host; kill ``victim`` (host-a) and show its pool's envs move to host-b."""
    opts: dict[str, Any] = {"endpoint": endpoint, "num_workers": 1, "seed": 0}
    rng = np.random.default_rng(0)
    async with aioenv.Pool("CartPole-v1", 6, **opts) as first, aioenv.Pool("CartPole-v1", 6, **opts) as second:
        pools = {"first": first, "second": second}
        await asyncio.gather(first.reset(), second.reset())
        print(f"two pools of 6 envs placed: {placement(await fetch_status(endpoint))}")
        for _ in range(steps):
            await asyncio.gather(*(p.step(rng.integers(0, 2, 6)) for p in pools.values()))
        print(f"stepped both pools {steps} times")
        print("killing host-a (SIGKILL, as a machine dying would)")
        victim.kill()

        dropped = asyncio.Event()

        async def keep_stepping(name: str, pool: aioenv.Pool) -> str:
            """Step until this pool's worker is found lost (the server drops host-a after its timeout)."""
            steps = 0
            while not dropped.is_set():
                try:
                    await pool.step(rng.integers(0, 2, 6))
                except aioenv.WorkerCrashed as exc:  # its worker died with host-a: the step waits for the drop
                    dropped.set()
                    return f"  {name} pool: WorkerCrashed: {exc}"
                steps += 1
            return f"  {name} pool: stepped as usual ({steps} steps while host-a was being dropped)"

        stepping = asyncio.gather(*(keep_stepping(name, pool) for name, pool in pools.items()))
        for line in await asyncio.wait_for(stepping, 60):
            print(line)
        while any(h["name"] == "host-a" for h in (await fetch_status(endpoint))["hosts"]):  # noqa: ASYNC110 - polls a server
            await asyncio.sleep(0.05)
        await asyncio.gather(first.reset(), second.reset())  # re-made envs start with a reset
        for _ in range(steps):
            await asyncio.gather(*(p.step(rng.integers(0, 2, 6)) for p in pools.values()))
        state = await fetch_status(endpoint)
        print(f"after the failover both pools stepped {steps} more times: {placement(state)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per pool before and after the failover")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    server, endpoint = start(
        [
            "serve",
            "--bind",
            "tcp://127.0.0.1:0",
            "--worker-bind",
            "tcp://127.0.0.1:0",
            "--local-capacity",
            "0",
            "--worker-timeout",
            "1",
        ],
        r"listening on (tcp://\S+)",
    )
    hosts: list[subprocess.Popen[str]] = []
    try:
        state = aioenv.run(fetch_status(endpoint))
        worker_port = state["worker_endpoint"]
        print(f"server at {endpoint}, worker hosts join at {worker_port}")
        for name in ("host-a", "host-b"):
            proc, _ = start(
                ["worker", "--connect", worker_port, "--capacity", "12", "--name", name], "joined the server"
            )
            hosts.append(proc)
            print(f"{name} joined (pid {proc.pid}, capacity 12 envs)")
        aioenv.run(drive(endpoint, args.steps, hosts[0]))
    finally:
        for proc in [*hosts, server]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(30) for proc in [*hosts, server]]
    print(f"stopped: host-b and the server exited with {codes[1]} and {codes[2]} (host-a was killed: {codes[0]})")


if __name__ == "__main__":
    main()

"""Hostile clients against ``aioenv serve``: how much each can make the server's memory grow.

Three clients that never read a reply, each against a fresh server (``aioenv serve`` with its default
bounds, see docs/deployment.md), with the RSS of the server and its workers measured before, at its peak
(sampled every 50 ms) and after:

1. ``big-ids``: 400 PINGs whose request id is 1 MiB of bytes.
2. ``pings``: 1,000,000 PINGs.
3. ``steps``: a pool of 64 envs with 64 KiB observations (4 MiB per step of all), then a step of all
   envs every 5 ms for ``--seconds``; each reply is queued for a client that never takes it.

After each, a well-behaved client opens a pool and steps (the server must still serve), and the server
is stopped with SIGTERM (it must exit 0). ``--checkout DIR`` runs another checkout's server and
protocol (e.g. an older commit in a git worktree), for a before/after comparison in one run.

Run from the repo root::

    .venv/bin/python benchmarks/bench_bounds.py                   # about 30 s
    .venv/bin/python benchmarks/bench_bounds.py --checkout /tmp/old --out /tmp/bounds-old.json

Writes ``benchmarks/results/bounds.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import zmq

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
SLOW = "aioenv.envs.latency:SleepEnv"
BIG_OBS = {"mean": 0.0001, "sigma": 0.1, "obs_dim": 16384}  # float32 x 16384 = 64 KiB per observation


class Server:
    """``aioenv serve`` from ``checkout`` on a free local port."""

    def __init__(self, checkout: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(checkout))
        cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", "tcp://127.0.0.1:0", "--allow-env", SLOW]
        if (checkout / "aioenv" / "server" / "allow.py").exists():  # a server that takes no env_kwargs unless told
            cmd += ["--allow-env-kwargs", f"{SLOW}=mean,sigma,obs_dim"]
        self.proc = subprocess.Popen(cmd, cwd=checkout, env=env, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.log: list[str] = []
        while not (found := re.search(r"listening on (tcp://\S+)", line := self.proc.stderr.readline())):
            self.log.append(line)
            if not line:
                raise RuntimeError("the server did not start:\n" + "".join(self.log))
        self.endpoint = found.group(1)

    def rss(self) -> int:
        """Resident bytes of the server and its workers."""
        me = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in [me, *me.children(recursive=True)])

    def stop(self) -> tuple[int, list[str]]:
        """SIGTERM; the exit code and the log lines that say a client was dropped."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        assert self.proc.stderr is not None
        self.log += self.proc.stderr.readlines()
        return code, [line.strip() for line in self.log if "dropped" in line]


def _dealer(endpoint: str) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 1)
    sock.setsockopt(zmq.RCVBUF, 4096)  # take (almost) nothing off the wire
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.connect(endpoint)
    return sock


def big_ids(endpoint: str, _seconds: float) -> None:
    """400 PINGs with 1 MiB ids."""
    from aioenv.wire.protocol import Key, Op, encode

    sock = _dealer(endpoint)
    for _ in range(400):
        sock.send_multipart(encode(Op.PING, {Key.ID: b"x" * MIB}))
    time.sleep(2.0)
    sock.close()


def pings(endpoint: str, _seconds: float) -> None:
    """1,000,000 PINGs."""
    from aioenv.wire.protocol import Key, Op, encode

    sock = _dealer(endpoint)
    ping = encode(Op.PING, {Key.ID: 1})
    for _ in range(1_000_000):
        sock.send_multipart(ping)
    time.sleep(2.0)
    sock.close()


def steps(endpoint: str, seconds: float) -> None:
    """A pool of 64 envs with 64 KiB observations, stepped every 5 ms, its replies never read."""
    from aioenv.wire.protocol import Key, Op, decode, encode, leaves_to_wire

    sock = _dealer(endpoint)
    envs = list(range(64))
    sock.send_multipart(
        encode(Op.OPEN, {Key.ID: -1, Key.ENV: SLOW, Key.NUM_ENVS: 64, Key.KW: BIG_OBS, Key.CLIENT: "x"})
    )
    header, _ = decode(sock.recv_multipart())
    assert header[Key.OP] == Op.RESULT, header
    sock.send_multipart(encode(Op.RESET, {Key.ID: 0, Key.ENV: envs, Key.SEED: [None] * 64, Key.OPT: None}))
    arrays: list[np.ndarray] = []
    act = leaves_to_wire([np.zeros(64, np.int64)], arrays)
    deadline, req = time.monotonic() + seconds, 1
    while time.monotonic() < deadline:
        sock.send_multipart(encode(Op.STEP, {Key.ID: req, Key.ENV: envs, Key.ACT: act}, arrays))
        req += 1
        time.sleep(0.005)
    time.sleep(2.0)
    sock.close()


async def _served(endpoint: str) -> None:
    import aioenv

    async with aioenv.Pool(SLOW, 4, endpoint=endpoint, num_workers=1, env_kwargs={"mean": 0.001}) as pool:
        await pool.reset(seed=0)
        for _ in range(20):
            await pool.step(np.zeros(4, np.int64))


def _sample(server: Server, peak: list[int], done: threading.Event) -> None:
    """Keep the largest RSS of the server (and its workers) in ``peak[0]`` until ``done``."""
    while not done.wait(0.05):
        peak[0] = max(peak[0], server.rss())


def run_case(name: str, checkout: Path, seconds: float) -> dict[str, Any]:
    """One hostile client against a fresh server: RSS before, at its peak, and whether others are served."""
    server = Server(checkout)
    try:
        asyncio.run(_served(server.endpoint))  # warm: the server has made a pool once
        before = server.rss()
        peak, done = [before], threading.Event()
        sampler = threading.Thread(target=_sample, args=(server, peak, done), daemon=True)
        sampler.start()
        {"big-ids": big_ids, "pings": pings, "steps": steps}[name](server.endpoint, seconds)
        done.set()
        sampler.join()
        after = server.rss()
        try:
            asyncio.run(asyncio.wait_for(_served(server.endpoint), 60))
            served = "yes"
        except Exception as exc:  # noqa: BLE001 - recorded: the point is whether the server still serves
            served = f"no: {type(exc).__name__}: {exc}"
    finally:
        code, dropped = server.stop()
    return {"rss_before_mib": before / MIB, "rss_peak_mib": peak[0] / MIB, "rss_after_mib": after / MIB,
            "peak_growth_mib": (peak[0] - before) / MIB, "growth_mib": (after - before) / MIB,
            "others_served": served, "exit_code": code, "dropped_log": dropped}  # fmt: skip


def main() -> None:
    """Run the cases, print a table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, default=ROOT, help="the aioenv checkout whose server runs")
    p.add_argument("--seconds", type=float, default=5.0, help="how long the steps case sends")
    p.add_argument("--only", action="append", choices=["big-ids", "pings", "steps"])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bounds.json")
    args = p.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))  # the client speaks that checkout's protocol
    results = {
        name: run_case(name, args.checkout.resolve(), args.seconds)
        for name in args.only or ["big-ids", "pings", "steps"]
    }
    print(f"{'case':<8} {'before MiB':>10} {'peak MiB':>9} {'after MiB':>10}  served  dropped")
    for name, r in results.items():
        print(f"{name:<8} {r['rss_before_mib']:>10.0f} {r['rss_peak_mib']:>9.0f} {r['rss_after_mib']:>10.0f}  "
              f"{r['others_served'][:6]:<6}  {len(r['dropped_log'])}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"checkout": str(args.checkout), "cases": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""OpenEnv sessions stepped first-finished: an aioenv pool (``openenv+ws://``) against OpenEnv's own client.

One OpenEnv server process (uvicorn, this file's ``app``: an env written with OpenEnv's classes whose step
awaits ``delay`` seconds, lognormal around ``--delay`` with sigma 0.5) serves both sides, one after the other:

1. ``aioenv``: ``aioenv.make("openenv+ws://...", N, executor="async")`` in worker processes; the loop sends every
   env a step, then repeatedly takes what has finished (``recv(min_results=B, max_results=N)``, ``B`` from
   ``--batch-size``, 1 by default: whatever is ready) and sends those envs their next step.
2. ``openenv``: ``N`` of OpenEnv's ``GenericEnvClient`` in this process, each stepping in a loop of its own, all
   under one ``asyncio.gather`` (each session goes on as soon as its step is back: first-finished too).

For each: steps/s over a ``--seconds`` window after a warm-up, against the ideal ``N / mean delay``; the steps
that failed; and the latency each step added over its env's own delay (p50, p99): from the moment its action
went out (``send``; the client's ``step`` call) to the moment its result was in the caller's hands.

Run from the repo root (``make bench`` installs what it needs)::

    .venv/bin/python benchmarks/bench_openenv_client.py                          # 1,024 sessions, 1 s steps
    .venv/bin/python benchmarks/bench_openenv_client.py --sessions 256 --seconds 5 --delay 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class Wait(Action):
    """Wait ``delay`` seconds."""

    delay: float = 0.0


class Waited(Observation):
    """How many steps this session took."""

    count: int = 0


class WaitEnv(Environment[Wait, Waited, State]):
    """A step that only waits (an LLM call, a tool)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Waited:
        self._state = State(step_count=0)
        return Waited()

    def step(self, action: Wait, timeout_s: float | None = None, **kwargs: Any) -> Waited:
        raise NotImplementedError("step_async only")

    async def step_async(self, action: Wait, timeout_s: float | None = None, **kwargs: Any) -> Waited:
        await asyncio.sleep(action.delay)
        self._state.step_count += 1
        return Waited(count=self._state.step_count, reward=1.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(WaitEnv, Wait, Waited, env_name="wait", max_concurrent_envs=int(os.environ.get("WAIT_SESSIONS", "64")))


def _delays(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    sigma = 0.5
    return rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)


def _figures(
    name: str, steps: int, failed: int, seconds: float, added: list[float], n: int, mean: float
) -> dict[str, Any]:
    ideal = n / mean
    extra = np.array(added) * 1000 if added else np.zeros(1)
    return {
        "side": name,
        "steps_per_s": round(steps / seconds, 1),
        "of_ideal": round(steps / seconds / ideal, 3),
        "failed": failed,
        "added_p50_ms": round(float(np.percentile(extra, 50)), 2),
        "added_p99_ms": round(float(np.percentile(extra, 99)), 2),
    }


async def bench_aioenv(
    url: str, n: int, batch: int, mean: float, warm: float, seconds: float, workers: int
) -> dict[str, Any]:
    import aioenv

    rng = np.random.default_rng(0)
    pool = await aioenv.make("openenv+" + url, n, executor="async", num_workers=workers)
    try:
        await pool.reset()
        sent = np.zeros(n)
        wait = np.zeros(n)

        def send(ids: np.ndarray) -> None:
            d = _delays(rng, mean, len(ids))
            wait[ids], sent[ids] = d, time.perf_counter()
            pool.send({"delay": d}, ids)

        send(np.arange(n))
        steps = failed = 0
        added: list[float] = []
        start = time.perf_counter()
        t0 = start + warm
        while (now := time.perf_counter()) < t0 + seconds:
            try:
                *_, info = await pool.recv(min_results=min(batch, n), max_results=n)
                ids = np.asarray(info["env_id"])
            except aioenv.EnvError as exc:  # a failed session: counted, reset, stepped again
                failed += 1
                ids = np.array([exc.env_id])
                await pool.reset(env_ids=ids)
            now = time.perf_counter()
            if now >= t0:
                steps += len(ids)
                added.extend((now - sent[ids] - wait[ids]).tolist())
            send(ids)
        return _figures("aioenv", steps, failed, seconds, added, n, mean)
    finally:
        await pool.aclose()


async def bench_openenv(url: str, n: int, mean: float, warm: float, seconds: float) -> dict[str, Any]:
    from openenv.core.generic_client import GenericEnvClient

    rng = np.random.default_rng(1)
    clients = [GenericEnvClient(base_url=url, message_timeout_s=600) for _ in range(n)]
    await asyncio.gather(*(c.connect() for c in clients))
    await asyncio.gather(*(c.reset() for c in clients))
    start = time.perf_counter()
    t0, t1 = start + warm, start + warm + seconds
    counts = {"steps": 0, "failed": 0}
    added: list[float] = []

    async def run(client: Any) -> None:
        while time.perf_counter() < t1:
            d = float(_delays(rng, mean, 1)[0])
            began = time.perf_counter()
            try:
                await client.step({"delay": d})
            except Exception:  # noqa: BLE001 - counted
                counts["failed"] += 1
                continue
            now = time.perf_counter()
            if t0 <= now < t1:
                counts["steps"] += 1
                added.append(now - began - d)

    try:
        await asyncio.gather(*(run(c) for c in clients))
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return _figures("openenv", counts["steps"], counts["failed"], seconds, added, n, mean)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1024)
    parser.add_argument("--delay", type=float, default=1.0, help="mean step time, s")
    parser.add_argument("--batch-size", type=int, default=1, help="aioenv: rows a recv waits for at least")
    parser.add_argument("--workers", type=int, default=1, help="aioenv worker processes")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = Path(__file__).resolve().parent
    env = dict(os.environ, WAIT_SESSIONS=str(args.sessions))
    cmd = [sys.executable, "-m", "uvicorn", "bench_openenv_client:app", "--app-dir", str(here)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the OpenEnv server did not start") from None
                time.sleep(0.1)
        url = f"ws://127.0.0.1:{port}"
        n, mean = args.sessions, args.delay
        rows = [
            asyncio.run(bench_aioenv(url, n, args.batch_size, mean, args.warmup, args.seconds, args.workers)),
        ]
        time.sleep(2.0)  # the server ends the first side's sessions
        rows.append(asyncio.run(bench_openenv(url, n, mean, args.warmup, args.seconds)))
    finally:
        server.kill()
        server.wait()
    print(f"{n} sessions, steps of {mean:g} s mean (ideal {n / mean:,.0f} steps/s), window {args.seconds:g} s")
    print(f"{'side':8} {'steps/s':>9} {'of ideal':>9} {'failed':>7} {'added p50':>10} {'added p99':>10}")
    for r in rows:
        print(
            f"{r['side']:8} {r['steps_per_s']:>9,.1f} {r['of_ideal']:>9.1%} {r['failed']:>7} "
            f"{r['added_p50_ms']:>8.1f}ms {r['added_p99_ms']:>8.1f}ms"
        )
    if args.out is not None:
        args.out.write_text(json.dumps({"sessions": n, "delay": mean, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

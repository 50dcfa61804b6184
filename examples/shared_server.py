"""A server that the processes of one machine share, on a unix socket: `python examples/shared_server.py`.

1. starts ``aioenv serve --bind unix:///<a new directory>/aioenv.sock`` (clients on this machine reach it
   without ZeroMQ; the socket file is its owner's only, mode 0600);
2. opens a pool of CartPole envs on it and the same pool embedded in this process, with the same seed,
   and steps both with the same actions: the trajectories are the same, row for row;
3. runs the same send/recv loop on each for a few seconds and prints both speeds (a remote pool pays a
   hop each way and the server's own work, see docs/performance.md, "Remote pools");
4. stops the server with SIGTERM: it exits 0, leaves no worker behind and removes its socket file.

Several agent or training processes would each open their own pool on the same address; each pool is a
session of its own on the server (docs/deployment.md, "Clients on the same machine").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import aioenv
from aioenv.server.status import fetch_status


def start_server(address: str) -> tuple[subprocess.Popen[str], threading.Thread]:
    """``aioenv serve`` on ``address``, once it says it listens, and the thread that reads the rest of its log
    (so that it never blocks on a full pipe)."""
    cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", address, "--allow-env", "CartPole-*"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = proc.stderr
    for line in log:
        if re.search(r"listening on unix://", line):
            reader = threading.Thread(target=lambda: all(True for _ in log), daemon=True)
            reader.start()
            return proc, reader
    raise SystemExit(f"the server did not start (exit code {proc.wait()})")


async def same_trajectories(address: str, num_envs: int, steps: int) -> bool:
    """Step a pool on the server and an embedded one alike; whether every row matched."""
    options = {"seed": 7, "num_workers": 2}
    async with (
        aioenv.Pool("CartPole-v1", num_envs, endpoint=address, **options) as remote,
        aioenv.Pool("CartPole-v1", num_envs, **options) as local,
    ):
        same = np.array_equal((await remote.reset())[0], (await local.reset())[0])
        rng = np.random.default_rng(0)
        for _ in range(steps):
            actions = rng.integers(0, 2, num_envs)
            got, expected = await remote.step(actions), await local.step(actions)
            same = same and all(np.array_equal(a, b) for a, b in zip(got[:4], expected[:4], strict=True))
        state = await fetch_status(address)
        print(f"  {'sessions / envs':24s}  {state['sessions']} / {state['envs']} (on the server, while open)")
    return same


async def speed(endpoint: str | None, num_envs: int, seconds: float) -> float:
    """Steps/s of a send/recv loop (half the envs a batch) on the server, or embedded (None)."""
    async with aioenv.Pool("CartPole-v1", num_envs, endpoint=endpoint, batch_size=num_envs // 2, num_workers=2) as p:
        await p.reset(seed=0)
        actions = np.zeros(num_envs, dtype=np.int64)
        p.send(actions)
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            *_, info = await p.recv()
            ids = info["env_id"]
            p.send(actions[: ids.size], ids)
            done += ids.size
        return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=64, help="envs of the speed loops (default 64)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each speed loop (default 3)")
    args = parser.parse_args()
    if args.num_envs < 2 or args.seconds <= 0:
        parser.error(f"--num-envs must be at least 2 and --seconds positive, got {args.num_envs} and {args.seconds}")
    where = tempfile.mkdtemp(prefix="aioenv-example-", dir="/tmp")  # a short path: a socket's is at most 107 bytes
    address = f"unix://{where}/aioenv.sock"
    server, reader = start_server(address)
    try:
        print(f"server listening on {address}")
        mode = oct(os.stat(f"{where}/aioenv.sock").st_mode & 0o777)
        print(f"  {'socket file mode':24s}  {mode}")
        same = asyncio.run(same_trajectories(address, 8, 200))
        print(f"  {'same trajectories':24s}  {'yes' if same else 'NO'} (8 envs, 200 steps, remote vs embedded)")
        remote = asyncio.run(speed(address, args.num_envs, args.seconds))
        local = asyncio.run(speed(None, args.num_envs, args.seconds))
        print(f"  {'steps/s, unix socket':24s}  {remote:,.0f}")
        print(f"  {'steps/s, embedded':24s}  {local:,.0f} ({remote / local:.2f}x on the server)")
    finally:
        server.terminate()
        code = server.wait(30)
        reader.join(5)
    print(f"  {'server exit code':24s}  {code}")
    print(f"  {'socket file removed':24s}  {'yes' if not os.listdir(where) else 'NO'}")
    shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()

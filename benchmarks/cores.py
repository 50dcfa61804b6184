"""The ceiling: what the machine's cores do with the envs and no pool at all.

:func:`ceiling` splits ``num_envs`` envs into one slice per worker process, as a pool does, and each
process steps its slice with gymnasium's ``SyncVectorEnv`` on pre-sampled actions, on its own, at
the same time as the others: no messages, no shared batch, nobody waiting for anybody. Their summed
env-steps/s is the most any pool of processes can reach for these envs on this machine (the
*free-running* ceiling: cores, caches and memory shared as in a real pool).

A lock-step ``step()`` also waits, every batch, for the slowest slice. Each process records how long
each of its batches took; pairing the processes' k-th batches, ``num_envs / mean_k(max_i t_i,k)`` is
the *lock-step* ceiling: what a pool that costs nothing would reach when every batch waits for its
slowest slice. The gap between the two is the machine's and the envs' (steps that vary, one process
descheduled for a moment), not a pool's. ``bench_core.py`` measures both beside aioenv in the same run.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np

__all__ = ["ceiling", "rates"]

_GO = b"g"


def _serve(fd: int, out: str, env_id: str, num_envs: int, seed: int, warmup: float, seconds: float) -> None:
    """One process: make and warm up the slice, say ready, wait for "go", step for ``seconds``, save the
    batch times (``.npy`` at ``out``) and say done."""
    sock = socket.socket(fileno=fd)
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id)] * num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )
    env.reset(seed=seed)
    env.action_space.seed(seed)
    acts = [env.action_space.sample() for _ in range(64)]
    end, k = time.perf_counter() + warmup, 0
    while time.perf_counter() < end:
        env.step(acts[k % 64])
        k += 1
    sock.sendall(b"r")
    if sock.recv(1) != _GO:
        return
    times: list[float] = []
    start = time.perf_counter()
    last = start
    while last - start < seconds:
        env.step(acts[k % 64])
        k += 1
        now = time.perf_counter()
        times.append(now - last)
        last = now
    np.save(out, np.array(times))
    env.close()
    sock.sendall(b"k")


def ceiling(env_id: str, num_envs: int, workers: int, warmup: float, seconds: float) -> tuple[float, float]:
    """``(free-running, lock-step)`` env-steps/s of ``num_envs`` envs split over ``workers`` processes that
    step on their own (see the module docstring)."""
    workers = max(1, min(num_envs, workers))
    bounds = np.linspace(0, num_envs, workers + 1).astype(int)
    socks: list[socket.socket] = []
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="aioenv-cores-") as tmp:
        outs = [os.path.join(tmp, f"{i}.npy") for i in range(workers)]
        try:
            for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
                ours, theirs = socket.socketpair()
                args = json.dumps([theirs.fileno(), outs[i], env_id, int(hi - lo), int(lo), warmup, seconds])
                procs.append(subprocess.Popen([sys.executable, __file__, args], pass_fds=[theirs.fileno()]))
                theirs.close()
                socks.append(ours)
            for sock in socks:  # every slice made and warm: start them together
                _expect(sock, b"r")
            for sock in socks:
                sock.sendall(_GO)
            for sock in socks:
                _expect(sock, b"k")
            times = [np.load(out) for out in outs]
        finally:
            for sock in socks:
                sock.close()
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return rates(np.diff(bounds).tolist(), times)


def rates(sizes: list[int], times: list[np.ndarray]) -> tuple[float, float]:
    """``(free-running, lock-step)`` env-steps/s of slices of ``sizes`` envs whose k-th batches took
    ``times[i][k]`` seconds: the sum of each slice's own rate, and the envs over the mean of the slowest
    slice's time per batch (the processes' k-th batches paired, up to the shortest record)."""
    free = float(sum(size * t.size / t.sum() for size, t in zip(sizes, times, strict=True)))
    k = min(t.size for t in times)
    lockstep = float(sum(sizes) / np.max([t[:k] for t in times], axis=0).mean())
    return free, lockstep


def _expect(sock: socket.socket, byte: bytes) -> None:
    got = sock.recv(1)
    if got != byte:
        raise RuntimeError(f"a ceiling process ended early (sent {got!r}, expected {byte!r})")


if __name__ == "__main__":  # a process: python cores.py '[fd, out, env_id, num_envs, seed, warmup, seconds]'
    fd, out, env_id, n, seed, warm, secs = json.loads(sys.argv[1])
    _serve(fd, out, env_id, n, seed, warm, secs)

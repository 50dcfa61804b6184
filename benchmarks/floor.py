"""The floor: the least a lock-step pool of Python envs in worker processes can cost.

:class:`FloorVectorEnv` is the leanest vector env that still runs Python envs in parallel
worker processes: each worker steps a contiguous slice of the envs, actions and results live in
shared memory, and a step is one short message to each worker and one byte back over blocking
socketpairs. No event loop, no serialisation, no validation, no error handling, no infos, no
per-env futures: whatever a real pool adds lies above this line. ``bench_core.py`` measures it
beside aioenv in the same run, so "how far above the floor" is a measured figure, not a guess.

Autoreset follows gymnasium's ``next_step`` mode (the step after an episode ended resets the env
and returns reward 0), as the other vector envs of the benchmark do. Box observation spaces and
Discrete or Box action spaces only (CartPole, MuJoCo).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["FloorVectorEnv"]

_MSG = struct.Struct("<cq")  # op (b"s" step, b"r" reset, b"q" quit), seed (reset; -1: none)
Layout = list[tuple[str, str, tuple[int, ...], int]]  # (name, dtype, shape, byte offset)


def _layout(obs_space: gym.Space[Any], act_space: gym.Space[Any], env_id: str, num_envs: int) -> tuple[Layout, int]:
    """Where each batched array lives in the shared file, and the file's size."""
    if not isinstance(obs_space, gym.spaces.Box) or not isinstance(act_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise TypeError(
            f"the floor runs Box observations and Discrete/Box actions, {env_id} has {obs_space}, {act_space}"
        )
    act_dtype = "<i8" if isinstance(act_space, gym.spaces.Discrete) else np.dtype(act_space.dtype).str
    arrays = [
        ("obs", np.dtype(obs_space.dtype).str, (num_envs, *obs_space.shape)),
        ("act", act_dtype, (num_envs, *(act_space.shape or ()))),
        ("rew", "<f8", (num_envs,)),
        ("term", "|b1", (num_envs,)),
        ("trunc", "|b1", (num_envs,)),
    ]
    layout: Layout = []
    offset = 0
    for name, dtype, shape in arrays:
        layout.append((name, dtype, shape, offset))
        offset += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64  # 64-byte aligned
    return layout, offset


def _views(path: str, layout: Layout) -> dict[str, np.ndarray]:
    """Plain ndarrays over the shared file (a ``np.memmap`` subclass costs more per element access)."""
    with open(path, "r+b") as f:
        buf = mmap.mmap(f.fileno(), 0)
    return {
        name: np.frombuffer(buf, dtype, int(np.prod(shape)), offset).reshape(shape)
        for name, dtype, shape, offset in layout
    }


def _serve(sock: socket.socket, path: str, layout: Layout, env_id: str, lo: int, hi: int) -> None:
    """A worker: step envs ``lo..hi-1`` on every message until told to quit (or the parent is gone)."""
    envs = [gym.make(env_id) for _ in range(lo, hi)]
    v = _views(path, layout)
    obs, act, rew, term, trunc = v["obs"], v["act"], v["rew"], v["term"], v["trunc"]
    discrete = act.ndim == 1
    ended = [False] * len(envs)
    while True:
        msg = sock.recv(_MSG.size, socket.MSG_WAITALL)
        if len(msg) < _MSG.size or msg[:1] == b"q":
            break
        op, seed = _MSG.unpack(msg)
        for i, env in enumerate(envs):
            j = lo + i
            if op == b"r" or ended[i]:
                obs[j], _ = env.reset(seed=None if op != b"r" or seed < 0 else seed + j)
                rew[j], term[j], trunc[j] = 0.0, False, False
                ended[i] = False
                continue
            o, rew[j], term[j], trunc[j], _ = env.step(int(act[j]) if discrete else act[j])
            obs[j] = o
            ended[i] = bool(term[j] or trunc[j])
        sock.send(b"k")
    for env in envs:
        env.close()


class FloorVectorEnv:
    """``num_envs`` copies of ``env_id`` stepped in lock-step by ``num_workers`` processes (see the module).

    Attributes:
        num_envs: B, the number of envs.
        num_workers: the worker processes (``num_workers``, at most B; default one per CPU); a step sends one
            message to each.
        single_observation_space / single_action_space: one env's spaces.
    """

    def __init__(self, env_id: str, num_envs: int, num_workers: int | None = None) -> None:
        workers = max(1, min(num_envs, num_workers or os.cpu_count() or 1))
        self.num_envs, self.num_workers = num_envs, workers
        probe = gym.make(env_id)
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        probe.close()
        layout, size = _layout(self.single_observation_space, self.single_action_space, env_id, num_envs)
        self._dir = tempfile.TemporaryDirectory(
            prefix="aioenv-floor-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None
        )
        path = os.path.join(self._dir.name, "batch")
        with open(path, "wb") as f:
            f.truncate(size)
        self._v = _views(path, layout)
        self._socks: list[socket.socket] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        bounds = np.linspace(0, num_envs, workers + 1).astype(int)
        for lo, hi in itertools.pairwise(bounds):
            ours, theirs = socket.socketpair()
            args = json.dumps([theirs.fileno(), path, layout, env_id, int(lo), int(hi)])
            proc = subprocess.Popen([sys.executable, __file__, args], pass_fds=[theirs.fileno()])
            theirs.close()
            self._socks.append(ours)
            self._procs.append(proc)

    def _round(self, op: bytes, seed: int) -> None:
        msg = _MSG.pack(op, seed)
        for sock in self._socks:
            sock.send(msg)
        for sock in self._socks:
            if sock.recv(1) != b"k":
                raise RuntimeError("a floor worker exited")

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env ``i`` with ``seed + i``); returns obs ``(B, *obs_shape)``."""
        self._round(b"r", -1 if seed is None else seed)
        return np.array(self._v["obs"])

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every env with ``actions`` (B rows); returns copies of obs, reward ``(B,)``,
        terminated ``(B,)`` and truncated ``(B,)``."""
        self._v["act"][:] = actions
        self._round(b"s", -1)
        v = self._v
        return np.array(v["obs"]), np.array(v["rew"]), np.array(v["term"]), np.array(v["trunc"])

    def close(self) -> None:
        """Stop the workers (they exit on ``q``), then remove the shared file."""
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.send(_MSG.pack(b"q", -1))
        for proc in self._procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for sock in self._socks:
            sock.close()
        self._v.clear()
        self._dir.cleanup()

    def __enter__(self) -> FloorVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # a worker: python floor.py '[fd, path, layout, env_id, lo, hi]'
    fd, path, layout, env_id, lo, hi = json.loads(sys.argv[1])
    _serve(socket.socket(fileno=fd), path, [(n, d, tuple(s), o) for n, d, s, o in layout], env_id, lo, hi)

"""CartPole over bare pipes, straight to the workers or through a relay process: the floor of a remote pool's cost.

bench_remote.py's ``cartpole`` case holds a remote pool (client -> ``aioenv serve`` -> the server's workers)
to 0.8x the same pool embedded (client -> workers). A server adds a process to the machine and a hop to
each message's way. This module runs the same client loop with no pool at all, both ways, to show what
that process and those hops cost by themselves on this machine, before any server's own work:

- Worker processes (``python benchmarks/bare_relay.py worker ...``, as many as the pool has) step their
  share of ``CartPole-v1`` envs (``gymnasium.make``; an ended episode is reset at once), and answer each
  request with one message: the rows' env ids (int32), observations (float32), rewards (float64), terminated
  and truncated flags (one byte each).
- ``direct``: the client (this process, on uvloop like every cell) writes each worker the ids (int32) and
  actions (int64) of its envs and reads the replies, over socketpairs.
- ``relay``: the same messages pass through a relay process (``bare_relay.py relay``, uvloop) that reads each
  one and writes it on, to its worker or back to the client, without looking inside: the least any process
  between the two can do.
- The client loop is bench_remote's: wait for ``batch`` rows, send actions for exactly those rows. No
  checks, errors, infos, autoreset modes or shared memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from bare_loop import Frames, close, frame, send_bytes, spawn, wake

from aioenv._loop import new_event_loop

__all__ = ["BarePipes", "relay", "serve_cartpole"]

_SCRIPT = Path(__file__).resolve()
_TO = struct.Struct("<I")  # a relayed request's first 4 bytes: the worker it is for
ENV_ID = "CartPole-v1"
OBS_DIM = 4
_ROW = 4 + 4 * OBS_DIM + 8 + 1 + 1  # a reply's bytes per row: id, obs, reward, terminated, truncated


def _reply(ids: np.ndarray, obs: list[Any], rewards: list[Any], term: list[Any], trunc: list[Any]) -> bytes:
    parts = (
        ids.astype(np.int32),
        np.asarray(obs, dtype=np.float32),
        np.asarray(rewards, dtype=np.float64),
        np.asarray(term, dtype=np.bool_),
        np.asarray(trunc, dtype=np.bool_),
    )
    return frame(b"".join(p.tobytes() for p in parts))


def serve_cartpole(sock: socket.socket, env_ids: list[int]) -> None:
    """A worker process: step the envs ``env_ids`` names as each request asks and answer it, until the other
    end closes the socket (see the module docstring)."""
    envs = {i: gym.make(ENV_ID) for i in env_ids}
    for i, env in envs.items():
        env.reset(seed=i)
    frames = Frames(sock)  # a blocking socket: read() waits for data
    while (bodies := frames.read()) is not None:
        for body in bodies:
            n = len(body) // 12
            ids = np.frombuffer(body, dtype=np.int32, count=n)
            acts = np.frombuffer(body, dtype=np.int64, offset=4 * n).tolist()
            obs, rewards, term, trunc = [], [], [], []
            for env_id, action in zip(ids.tolist(), acts, strict=True):
                env = envs[env_id]
                o, r, te, tr, _ = env.step(action)
                if te or tr:
                    o, _ = env.reset()
                obs.append(o)
                rewards.append(r)
                term.append(te)
                trunc.append(tr)
            try:
                sock.sendall(_reply(ids, obs, rewards, term, trunc))
            except OSError:  # the client (or relay) is gone: the cell is over
                return


def relay(client: socket.socket, workers: list[socket.socket]) -> None:
    """The relay process: each message from ``client`` goes on to the worker its first 4 bytes name, each
    message from a worker back to ``client``, until one of them closes its end."""
    loop = new_event_loop()
    for sock in (client, *workers):
        sock.setblocking(False)

    def pump(frames: Frames, forward: Callable[[list[bytes]], None]) -> None:
        """Read what arrived and pass it on; once either end is gone, the cell is over."""
        try:
            bodies = frames.read()
            if bodies is None:
                raise ConnectionError("the other end closed")
            forward(bodies)
        except OSError:
            loop.stop()

    def to_workers(bodies: list[bytes]) -> None:
        for body in bodies:
            (to,) = _TO.unpack_from(body)
            send_bytes(workers[to], body[4:])  # the worker's message, framed by the client

    def to_client(bodies: list[bytes]) -> None:
        send_bytes(client, b"".join(frame(body) for body in bodies))

    loop.add_reader(client.fileno(), pump, Frames(client), to_workers)
    for sock in workers:
        loop.add_reader(sock.fileno(), pump, Frames(sock), to_client)
    try:
        loop.run_forever()
    finally:
        for sock in (client, *workers):
            sock.close()


Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _rows(body: bytes) -> Rows:
    """A reply's ``(ids, obs (n, 4), rewards, terminated, truncated)``, views of ``body``."""
    n = len(body) // _ROW
    at = [0, 4 * n, (4 + 4 * OBS_DIM) * n, (12 + 4 * OBS_DIM) * n, (13 + 4 * OBS_DIM) * n]
    ids = np.frombuffer(body, np.int32, n, at[0])
    obs = np.frombuffer(body, np.float32, n * OBS_DIM, at[1]).reshape(n, OBS_DIM)
    rewards = np.frombuffer(body, np.float64, n, at[2])
    return ids, obs, rewards, np.frombuffer(body, np.bool_, n, at[3]), np.frombuffer(body, np.bool_, n, at[4])


class BarePipes:
    """The client: ``await once()`` waits for ``batch`` rows and sends actions for exactly those, returning
    how many; ``relay``: through a relay process (see the module docstring). Use as an async context manager;
    :attr:`relay_pid` is the relay's process id (None without one)."""

    def __init__(self, num_envs: int, batch: int, num_workers: int, *, relay: bool) -> None:
        self.num_envs = num_envs
        self.batch = batch
        self.num_workers = max(1, min(num_workers, num_envs))
        self.relay = relay
        self.relay_pid: int | None = None
        self.owner = np.arange(num_envs) * self.num_workers // num_envs
        self._actions = np.random.default_rng(0).integers(0, 2, size=(64, num_envs), dtype=np.int64)
        self._k = 0
        self._socks: list[socket.socket] = []  # the workers', or the relay's alone
        self._procs: list[subprocess.Popen[bytes]] = []
        self._parts: list[Rows] = []
        self._rows = 0
        self._waiter: asyncio.Future[None] | None = None

    async def __aenter__(self) -> BarePipes:
        ends = [socket.socketpair() for _ in range(self.num_workers)]
        procs = []
        for w, (_, theirs) in enumerate(ends):
            ids = np.flatnonzero(self.owner == w).tolist()
            args = ["worker", "--fd", str(theirs.fileno()), "--ids", json.dumps(ids)]
            procs.append(spawn(_SCRIPT, [theirs.fileno()], args))
            theirs.close()
        socks = [mine for mine, _ in ends]
        if self.relay:
            mine, theirs = socket.socketpair()
            fds = [theirs.fileno(), *(s.fileno() for s in socks)]
            args = ["relay", "--fd", str(fds[0]), "--workers", ",".join(map(str, fds[1:]))]
            procs.append(spawn(_SCRIPT, fds, args))
            self.relay_pid = procs[-1].pid
            theirs.close()
            for sock in socks:
                sock.close()
            socks = [mine]
        self._procs = procs
        loop = asyncio.get_running_loop()
        for sock in socks:
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), self._readable(Frames(sock)))
        self._socks = socks
        self._send(np.arange(self.num_envs, dtype=np.int32))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await close(self._socks, self._procs)

    def _readable(self, frames: Frames) -> Callable[[], None]:
        def on_readable() -> None:
            bodies = frames.read()
            if bodies is None:
                raise ConnectionError("a bare-pipe worker or relay exited")
            for body in bodies:
                part = _rows(body)
                self._parts.append(part)
                self._rows += part[0].size
            wake(self._waiter, self._rows >= self.batch)

        return on_readable

    def _send(self, ids: np.ndarray) -> None:
        acts = self._actions[self._k % 64][ids]
        self._k += 1
        owners = self.owner[ids]
        for w in range(self.num_workers):
            mask = owners == w
            if not mask.any():
                continue
            message = frame(ids[mask].astype(np.int32).tobytes() + acts[mask].tobytes())
            if self.relay:
                send_bytes(self._socks[0], frame(_TO.pack(w) + message))
            else:
                send_bytes(self._socks[w], message)

    async def once(self) -> int:
        """Wait for ``batch`` rows, send actions for exactly those; the number of rows (``batch``)."""
        while self._rows < self.batch:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        taken = [np.concatenate(leaf) for leaf in zip(*self._parts, strict=True)]
        ids, obs, rewards, term, trunc = (leaf[self.batch :] for leaf in taken)  # the rows past the batch wait
        self._parts = [(ids, obs, rewards, term, trunc)] if ids.size else []
        self._rows = int(ids.size)
        batch = taken[0][: self.batch]
        self._send(batch)
        return int(batch.size)


def _descriptors(text: str) -> list[int]:
    try:
        return [int(fd) for fd in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers with commas between, got {text!r}") from None


def main() -> None:
    """A worker or the relay of :class:`BarePipes` (its sockets inherited as descriptors)."""
    if len(sys.argv) == 1:
        sys.exit(
            "benchmarks/bare_relay.py runs as a worker or relay process of bench_remote.py's bare-pipe cells, "
            "which start it; to measure, run: .venv/bin/python benchmarks/bench_remote.py --only cartpole"
        )
    p = argparse.ArgumentParser(description="a worker or the relay of benchmarks/bare_relay.py's BarePipes")
    sub = p.add_subparsers(dest="role", required=True)
    worker = sub.add_parser("worker", help="step CartPole envs")
    worker.add_argument("--fd", type=int, required=True, help="the inherited end of the socketpair")
    worker.add_argument("--ids", type=json.loads, required=True, help="the env ids this worker hosts, as JSON")
    hop = sub.add_parser("relay", help="pass messages between the client and the workers")
    hop.add_argument("--fd", type=int, required=True, help="the inherited end of the client's socketpair")
    hop.add_argument(
        "--workers", type=_descriptors, required=True, help="the inherited ends of the workers' socketpairs, e.g. 5,7"
    )
    args = p.parse_args()
    if args.role == "worker":
        serve_cartpole(socket.socket(fileno=args.fd), args.ids)
    else:
        workers = [socket.socket(fileno=fd) for fd in args.workers]
        relay(socket.socket(fileno=args.fd), workers)


if __name__ == "__main__":
    main()

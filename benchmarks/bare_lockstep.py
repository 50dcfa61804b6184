"""What a lock-step exchange with N worker processes costs the process that drives it, with no pool at all.

``bench_core.py`` reports the CPU a pool's process spends per worker message against the floor's
(``floor.py``: blocking sends and receives over socketpairs). The floor steps envs; this measures the messages
alone, two ways, over the same kind of pipes:

- ``blocking``: the floor's way: write each worker a 20-byte request, then read each one's 28-byte reply in
  order, blocking;
- ``loop``: an event loop's way (uvloop, as every aioenv pool runs): each worker's pipe is watched with
  ``add_reader``, a callback reads its reply and counts down, and the batch is a future the driver awaits. The
  requests and replies have the sizes of a lane step and its DONE (``aioenv.wire.lane``), framed;
- ``shared``: the same loop, but every worker writes its reply to one pipe they all share (a pool's done pipe),
  as a DONE record's 24 bytes, and one callback reads all the replies that pipe holds at once;
- ``first``: ``send``/``recv``'s way over that shared pipe: every worker has a request out, each batch is the first
  half of the workers to answer, and those get their next request at once (a ``recv()`` of ``batch_size = n/2``
  rows then a ``send()`` of them, with each worker's envs in one message). Its figures are per message of those
  batches, which carry half as many messages as a lock-step batch;
- ``bell``: ``shared``'s replies, but no request goes over a socket: each worker's request lies in a shared memory
  file (a record of its own), and one ``futex`` wake-up of every worker that waits on the file's sequence word
  rings them all (Linux on x86-64 or arm64, through ``ctypes``; elsewhere the way is skipped). What a socket send
  costs beyond the wake-up it causes, and what waking many processes in one system call saves, is the
  difference from ``shared``.

``--cartpole K``: each worker steps K CartPole-v1 envs before it answers each request (0, the default: it
answers at once), so that the workers' work, and what it does to the caches of the cores they share with the
driver, is a lock-step pool's.

Each worker (``python benchmarks/bare_lockstep.py worker --fd N``) answers every request at once. The figure
is the driving process's CPU time (``time.process_time``) per message (a request and its reply) over the
measured window: what no pool driven by an event loop can go below, and how much of the floor's advantage
is the event loop's. The rest of a pool's cost per message is its own work.

    python benchmarks/bare_lockstep.py --workers 16 --seconds 3 [--cartpole 2] [--json] [--out FILE.json]

``--out`` writes the figures to a JSON file and the same table as Markdown beside it (``FILE.md``), as the other
benchmarks do for ``benchmarks/many_core.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aioenv._loop import new_event_loop

if str(Path(__file__).resolve().parent) not in sys.path:  # (imported from elsewhere: its neighbours)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorded import command

__all__ = ["measure"]

_SCRIPT = Path(__file__).resolve()
_REQUEST = bytes(32)  # a framed lane step: 12 bytes of framing, 20 of frame
_REPLY = bytes(28)  # a framed lane DONE: 12 bytes of framing, 16 of frame
_RECORD = bytes(24)  # a lane DONE record on a shared done pipe
_RECORD_OF = struct.Struct("<I20x")  # ``first``'s record: the worker's index, then padding to a record's size
WAYS = ("blocking", "loop", "shared", "first", "bell")
#: "Wait on the bell from now on; its word reads this now" (the sequence number follows the first byte).
_BELL = struct.Struct("<BI27x")
#: The bell file: the sequence word the workers wait on, then one record per worker, each its sequence at which the
#: driver wrote it and whether to go back to the socket.
_BELL_RECORD = struct.Struct("<IB")
_BELL_RECORDS_AT = 64
#: ``futex(2)``'s system call number by machine (None elsewhere: the ``bell`` way is skipped), and its operations
#: on a word other processes share (no ``FUTEX_PRIVATE_FLAG``).
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Futex:
    """``futex(2)`` on the first word of a shared mapping, through ``ctypes``."""

    def __init__(self, mapping: mmap.mmap) -> None:
        assert _SYS_FUTEX is not None, "futex(2) is called by number on x86-64 and arm64 only"
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._word = ctypes.c_uint32.from_buffer(mapping, 0)
        self._addr = ctypes.c_void_p(ctypes.addressof(self._word))

    @property
    def value(self) -> int:
        return int(self._word.value)

    def next_value(self) -> int:
        """The sequence number after the word's (31 bits, wrapping)."""
        return (int(self._word.value) + 1) & 0x7FFFFFFF

    def set_and_wake(self, value: int) -> None:
        """The word set to ``value``, then every process that waits on it woken."""
        self._word.value = value
        self._libc.syscall(_SYS_FUTEX, self._addr, _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    def wait(self, seen: int) -> None:
        """Sleep while the word is still ``seen`` (at once when it is not; at most a second)."""
        timeout = _Timespec(1, 0)
        self._libc.syscall(_SYS_FUTEX, self._addr, _FUTEX_WAIT, ctypes.c_uint32(seen), ctypes.byref(timeout), None, 0)

    def release(self) -> None:
        """Let the mapping close (the word is a view of it)."""
        del self._word


class _Timespec(ctypes.Structure):
    """``struct timespec``: the longest a ``FUTEX_WAIT`` sleeps."""

    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _worker(fd: int, done: int, cartpole: int, index: int, bell: int) -> None:
    sock = socket.socket(fileno=fd)
    envs = []
    if cartpole:
        import gymnasium as gym

        envs = [gym.make("CartPole-v1") for _ in range(cartpole)]
        for env in envs:
            env.reset(seed=0)
    while True:
        got = sock.recv(len(_REQUEST), socket.MSG_WAITALL)
        if len(got) < len(_REQUEST):
            return
        if got[0] == 3 and bell >= 0:  # wait on the bell until the driver says to go back to the socket
            _ring_loop(bell, index, done, envs, _BELL.unpack(got)[1])
            continue
        _step(envs)
        if got[0] and done >= 0:  # the driver asks for the reply on the shared pipe
            os.write(done, _RECORD_OF.pack(index) if got[0] == 2 else _RECORD)
        else:
            sock.sendall(_REPLY)


def _step(envs: list[Any]) -> None:
    for env in envs:
        *_, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            env.reset()


def _ring_loop(bell: int, index: int, done: int, envs: list[Any], handled: int) -> None:
    """The ``bell`` way's worker: each time the sequence word moves from ``handled`` (what it read when the driver
    said to wait on it: a ring after that is never missed), its own record says whether a request is there (written
    at that sequence) or to go back to the socket; each request answered on the shared pipe."""
    mapping = mmap.mmap(bell, 0)
    futex = _Futex(mapping)
    at = _BELL_RECORDS_AT + index * _BELL_RECORD.size
    try:
        while True:
            seen = futex.value
            if seen == handled:
                futex.wait(seen)
                continue
            handled = seen
            written, leave = _BELL_RECORD.unpack_from(mapping, at)
            if leave:
                return
            if written == seen:
                _step(envs)
                os.write(done, _RECORD)
    finally:
        futex.release()
        mapping.close()


def _blocking(socks: list[socket.socket], seconds: float) -> tuple[int, float]:
    batches = 0
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for sock in socks:
            sock.sendall(_REQUEST)
        for sock in socks:
            sock.recv(len(_REPLY), socket.MSG_WAITALL)
        batches += 1
    return batches, time.process_time() - cpu


class _Countdown:
    """The replies a batch still waits for, and the future its driver awaits until there are none."""

    def __init__(self) -> None:
        self.left = 0
        self.waiter: asyncio.Future[None] | None = None

    def count(self, replies: int) -> None:
        self.left -= replies
        if self.left == 0 and self.waiter is not None:
            self.waiter.set_result(None)


async def _batches(
    socks: list[socket.socket], request: bytes, seconds: float, countdown: _Countdown
) -> tuple[int, float]:
    """Send ``request`` to every worker and await ``countdown`` (which the readers count down), for ``seconds``."""
    loop = asyncio.get_running_loop()
    batches = 0
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        countdown.left = len(socks)
        countdown.waiter = loop.create_future()
        for sock in socks:
            sock.send(request)
        await countdown.waiter
        batches += 1
    return batches, time.process_time() - cpu


async def _shared(socks: list[socket.socket], done: int, seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    countdown = _Countdown()

    def readable() -> None:  # every reply the pipe holds (records arrive whole)
        countdown.count(len(os.read(done, 65536)) // len(_RECORD))

    os.set_blocking(done, False)
    loop.add_reader(done, readable)
    try:
        return await _batches(socks, b"\x01" + _REQUEST[1:], seconds, countdown)  # "reply on the shared pipe"
    finally:
        loop.remove_reader(done)


async def _first(socks: list[socket.socket], done: int, seconds: float) -> tuple[int, float]:
    """``send``/``recv``'s way: the first half of the workers to answer make a batch and get their next request."""
    loop = asyncio.get_running_loop()
    request = b"\x02" + _REQUEST[1:]  # "reply on the shared pipe, with your index"
    ready: list[int] = []  # the workers that answered and have no request out, in the order they answered
    need = max(1, len(socks) // 2)
    waiter: asyncio.Future[None] | None = None

    def readable() -> None:  # every reply the pipe holds (records arrive whole)
        ready.extend(index for (index,) in _RECORD_OF.iter_unpack(os.read(done, 65536)))
        if waiter is not None and len(ready) >= need and not waiter.done():
            waiter.set_result(None)

    os.set_blocking(done, False)
    loop.add_reader(done, readable)
    try:
        for sock in socks:
            sock.send(request)
        batches = 0
        start, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            if len(ready) < need:
                waiter = loop.create_future()
                await waiter
            for index in ready[:need]:
                socks[index].send(request)
            del ready[:need]
            batches += 1
        used = time.process_time() - cpu
        need = len(socks)  # every request answered before the next way runs
        while len(ready) < need:
            waiter = loop.create_future()
            await waiter
        return batches, used
    finally:
        loop.remove_reader(done)


async def _bell(socks: list[socket.socket], done: int, bell: mmap.mmap, seconds: float) -> tuple[int, float]:
    """The ``bell`` way: every worker told to wait on the bell, then each batch's requests written to the workers'
    records and rung with one wake-up; the replies are ``shared``'s."""
    loop = asyncio.get_running_loop()
    countdown = _Countdown()
    futex = _Futex(bell)

    def readable() -> None:
        countdown.count(len(os.read(done, 65536)) // len(_RECORD))

    def ring(leave: bool = False) -> None:
        seq = futex.next_value()
        for index in range(len(socks)):
            _BELL_RECORD.pack_into(bell, _BELL_RECORDS_AT + index * _BELL_RECORD.size, seq, leave)
        futex.set_and_wake(seq)

    os.set_blocking(done, False)
    loop.add_reader(done, readable)
    try:
        told = _BELL.pack(3, futex.value)
        for sock in socks:
            sock.send(told)
        batches = 0
        start, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            countdown.left = len(socks)
            countdown.waiter = loop.create_future()
            ring()
            await countdown.waiter
            batches += 1
        used = time.process_time() - cpu
        ring(leave=True)  # every worker back on its socket
        return batches, used
    finally:
        loop.remove_reader(done)
        futex.release()


async def _loop(socks: list[socket.socket], seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    countdown = _Countdown()

    def readable(sock: socket.socket) -> None:
        if len(sock.recv(len(_REPLY))) == len(_REPLY):  # one reply (a socketpair delivers a write whole here)
            countdown.count(1)

    for sock in socks:
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), readable, sock)
    try:
        return await _batches(socks, _REQUEST, seconds, countdown)
    finally:
        for sock in socks:
            loop.remove_reader(sock.fileno())
            sock.setblocking(True)


def measure(workers: int, seconds: float, cartpole: int = 0) -> dict[str, Any]:
    """The ways of :data:`WAYS` over ``workers`` worker processes (each stepping ``cartpole`` CartPole envs
    per request), ``seconds`` each after a short warm-up; the figures per message and per batch (µs of this
    process's CPU) and the batches per second."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(workers)]
    done_read, done_write = os.pipe()
    bell_fd = os.memfd_create("aioenv-bare-bell")
    os.ftruncate(bell_fd, _BELL_RECORDS_AT + workers * _BELL_RECORD.size)
    bell = mmap.mmap(bell_fd, 0)
    procs: list[subprocess.Popen[bytes]] = []
    for _, theirs in pairs:
        cmd = [sys.executable, str(_SCRIPT), "worker", "--fd", str(theirs.fileno()), "--done", str(done_write)]
        cmd += ["--cartpole", str(cartpole), "--index", str(len(procs)), "--bell", str(bell_fd)]
        procs.append(subprocess.Popen(cmd, pass_fds=[theirs.fileno(), done_write, bell_fd]))
        theirs.close()
    os.close(done_write)
    os.close(bell_fd)
    socks = [ours for ours, _ in pairs]
    out: dict[str, Any] = {"workers": workers, "cartpole": cartpole}
    try:
        _blocking(socks, 0.3)
        runs = {"blocking": _blocking(socks, seconds)}
        loop = new_event_loop()
        try:
            loop.run_until_complete(_loop(socks, 0.3))
            runs["loop"] = loop.run_until_complete(_loop(socks, seconds))
            loop.run_until_complete(_shared(socks, done_read, 0.3))
            runs["shared"] = loop.run_until_complete(_shared(socks, done_read, seconds))
            loop.run_until_complete(_first(socks, done_read, 0.3))
            runs["first"] = loop.run_until_complete(_first(socks, done_read, seconds))
            if _SYS_FUTEX is not None:
                loop.run_until_complete(_bell(socks, done_read, bell, 0.3))
                runs["bell"] = loop.run_until_complete(_bell(socks, done_read, bell, seconds))
        finally:
            loop.close()
        for name, (batches, cpu) in runs.items():
            messages = max(1, workers // 2) if name == "first" else workers  # a batch's
            out[name] = {
                "batches_per_s": batches / seconds,
                "cpu_us_per_batch": cpu / batches * 1e6,
                "cpu_us_per_message": cpu / batches / messages * 1e6,
                "messages_per_batch": messages,
            }
    finally:
        for sock in socks:
            sock.close()
        for proc in procs:
            proc.wait(10)
        os.close(done_read)
        bell.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="role")
    worker = sub.add_parser("worker", help="(internal) answer one driver's requests over an inherited socket")
    worker.add_argument("--fd", type=int, required=True)
    worker.add_argument("--done", type=int, default=-1)
    worker.add_argument("--cartpole", type=int, default=0)
    worker.add_argument("--index", type=int, default=0)
    worker.add_argument("--bell", type=int, default=-1)
    parser.add_argument("--workers", type=int, default=16, help="worker processes (default 16)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per way (default 3)")
    parser.add_argument(
        "--cartpole", type=int, default=0, help="CartPole envs each worker steps per request (default 0)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file, and Markdown beside it")
    args = parser.parse_args()
    if args.role == "worker":
        _worker(args.fd, args.done, args.cartpole, args.index, args.bell)
        return
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    if args.cartpole < 0:
        parser.error(f"--cartpole must be >= 0, got {args.cartpole}")
    out = measure(args.workers, args.seconds, args.cartpole)
    out["command"] = command()
    out["cpus"] = os.cpu_count()
    if args.out is not None:
        from benchutil import write_atomic  # (the driver's alone: its workers run this file and need none of it)

        write_atomic(args.out, json.dumps(out, indent=2))
        write_atomic(args.out.with_suffix(".md"), to_markdown(out))
    print(json.dumps(out) if args.json else to_markdown(out), end="\n" if args.json else "")


def to_markdown(out: dict[str, Any]) -> str:
    """The figures of :func:`measure` (with the ``command`` and ``cpus`` of the run) as a Markdown table."""
    from benchutil import md_table  # (the driver's alone: its workers run this file and need none of it)

    load = f", each stepping {out['cartpole']} CartPole envs a request" if out["cartpole"] else ""
    rows = []
    for name in WAYS:
        cell = out.get(name)
        if cell is None:
            rows.append([name, "skipped: futex(2) is called by number on x86-64 and arm64 only", "", "", ""])
            continue
        rows.append(
            [
                name,
                f"{cell['cpu_us_per_message']:.1f}",
                f"{cell['cpu_us_per_batch']:.1f}",
                f"{cell['batches_per_s']:,.0f}",
                str(cell["messages_per_batch"]),
            ]
        )
    head = f"`{out['command']}`: {out['workers']} worker processes{load}, {out['cpus']} CPUs"
    lines = [
        f"{head}; the CPU of the driving process (a request and its reply a message):",
        "",
        *md_table(["way", "µs/message", "µs/batch", "batches/s", "messages a batch"], rows),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

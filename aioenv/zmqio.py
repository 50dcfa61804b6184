"""Lean multipart send/receive on pyzmq sockets, for the hot path.

pyzmq's ``send_multipart``/``recv_multipart`` build Python ``enum.Flag`` values for
every frame and signal "nothing more to read" with a raised ``zmq.Again``; on a
step loop those costs rival the work itself. These helpers call the Cython
socket methods directly with plain int flags and test ``EVENTS`` instead of
catching exceptions. Behaviour is that of the pyzmq calls they replace.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import zmq

__all__ = ["defer_io_threads", "has_input", "recv_frames", "send_frames"]

_Backend: Any = zmq.Socket.__mro__[1]  # zmq.backend.cython Socket
_send = _Backend.send
_recv = _Backend.recv
_get = _Backend.get
_SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
#: Frames at least this large are sent zero-copy (pyzmq copies smaller ones regardless).
ZERO_COPY_BYTES = 65536


def send_frames(sock: zmq.Socket[Any], frames: Sequence[Any], flags: int = 0) -> None:
    """Send ``frames`` as one multipart message (large buffers zero-copy)."""
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        copy = getattr(frame, "nbytes", 0) < ZERO_COPY_BYTES
        _send(sock, frame, (flags | _SNDMORE) if i < last else flags, copy)


def recv_frames(sock: zmq.Socket[Any], flags: int = 0) -> list[Any]:
    """Receive one multipart message as ``zmq.Frame`` objects (zero-copy buffers)."""
    frame = _recv(sock, flags, False)
    parts = [frame]
    while frame.more:  # the frame knows (cheaper than a RCVMORE getsockopt)
        frame = _recv(sock, flags, False)
        parts.append(frame)
    return parts


def has_input(sock: zmq.Socket[Any]) -> bool:
    """True when a message can be received without blocking."""
    return bool(_get(sock, _EVENTS) & _POLLIN)


def defer_io_threads(ctx: zmq.Context[Any], wait: float = 0.2) -> int:
    """Put the I/O threads of ``ctx`` under Linux's ``SCHED_BATCH`` policy; returns how many.

    A thread that sends a message wakes the context's I/O thread, and the kernel lets the woken
    thread preempt the sender on its CPU at once: the sender waits while its message is written
    out, and pays two more context switches before it can block for the next request. Under
    ``SCHED_BATCH`` the I/O thread runs when the sender blocks or on another CPU instead (same
    nice level and CPU share; no privilege needed). Worker processes call it once their socket
    exists (the threads start with the first socket and name themselves ``ZMQbg/IO/<n>``; this
    waits up to ``wait`` seconds for them). Best effort: elsewhere than Linux it does nothing.
    See ``docs/architecture.md`` for what it gains.
    """
    if not hasattr(os, "sched_setscheduler") or not os.path.isdir("/proc/self/task"):
        return 0
    if zmq.zmq_version_info() < (4, 3):  # older libzmq names its threads otherwise: nothing to wait for
        return 0
    expected = int(ctx.get(zmq.IO_THREADS))
    deadline = time.monotonic() + wait
    found = _io_threads()
    while len(found) < expected and time.monotonic() < deadline:
        time.sleep(0.001)
        found = _io_threads()
    changed = 0
    for tid in found:
        try:
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # the policy is refused: keep the default
            continue
        changed += 1
    return changed


def _io_threads() -> list[int]:
    tids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                if f.read().startswith("ZMQbg/IO/"):
                    tids.append(int(tid))
        except OSError:  # the thread is gone
            continue
    return tids

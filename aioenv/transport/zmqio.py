"""Lean multipart send/receive on pyzmq sockets, for the hot path.

pyzmq's ``send_multipart``/``recv_multipart`` build Python ``enum.Flag`` values for
every frame and signal "nothing more to read" with a raised ``zmq.Again``; on a
step loop those costs rival the work itself. These helpers call the Cython
socket methods directly with plain int flags and test ``EVENTS`` instead of
catching exceptions. Behaviour is that of the pyzmq calls they replace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zmq

__all__ = ["frames_nbytes", "has_input", "recv_frames", "send_frames"]

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


def frames_nbytes(frames: Sequence[Any]) -> int:
    """The bytes of a message's frames (bytes, buffers or arrays)."""
    return sum(f.nbytes if hasattr(f, "nbytes") else len(f) for f in frames)

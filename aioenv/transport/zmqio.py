"""Lean multipart send/receive on pyzmq sockets, for the hot path.

pyzmq's ``send_multipart``/``recv_multipart`` build Python ``enum.Flag`` values for
every frame and signal "nothing more to read" with a raised ``zmq.Again``; on a
step loop those costs rival the work itself. These helpers call the Cython
socket methods directly with plain int flags and test ``EVENTS`` instead of
catching exceptions. Behaviour is that of the pyzmq calls they replace.

Also :func:`check_tcp_port`, run by every ZeroMQ socket of the project before it binds or
connects (and by the option checks that refuse an address earlier): ZeroMQ itself accepts
a tcp port out of range and uses another; and :func:`is_loopback`, whether only this machine
can reach an address once it is bound.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Any

import zmq

__all__ = ["check_tcp_port", "frames_nbytes", "has_input", "is_loopback", "recv_frames", "send_frames"]

_Backend: Any = zmq.Socket.__mro__[1]  # zmq.backend.cython Socket
_send = _Backend.send
_recv = _Backend.recv
_get = _Backend.get
_SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
#: Frames at least this large are sent zero-copy (pyzmq copies smaller ones regardless).
ZERO_COPY_BYTES = 65536


_TCP_PORT = re.compile(r"tcp://.*:(-?\d+)")


def check_tcp_port(endpoint: str, *, bind: bool) -> None:
    """Refuse a ``tcp://HOST:PORT`` address whose port is out of range: 1-65535 to connect, also 0 (a free
    port) to bind. ZeroMQ itself takes any number and wraps it round 65,536: ``tcp://0.0.0.0:99999`` would
    listen on port 34463, and a client would dial it, so a mistyped port would serve or wait on another one.
    Other addresses (``*`` for the port, ``ipc://``, ``unix://``) are left to their own checks.

    Raises:
        ValueError: naming the address, its port and the range.
    """
    match = _TCP_PORT.fullmatch(endpoint)
    if match is None:
        return
    port, lowest = int(match.group(1)), 0 if bind else 1
    if not lowest <= port <= 65535:
        free = " (0: any free port)" if bind else ""
        raise ValueError(f"port {port} of {endpoint!r} is out of range: a tcp port is {lowest}-65535{free}")


_TCP_HOST = re.compile(r"tcp://(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/\s]*)):(?:\d+|\*)")


def is_loopback(endpoint: str) -> bool:
    """Whether only this machine can reach ``endpoint`` once it is bound: a socket file (``unix://``,
    ``ipc://``), or tcp on a loopback address: 127.0.0.0/8, ``[::1]`` (also as ``[::ffff:127.x.y.z]``), or a host
    name that resolves to loopback addresses only (``localhost``, as this machine resolves it).

    Not loopback: a wildcard (``0.0.0.0``, ``*``, ``[::]``), any other address, a name that resolves to any other
    address or to none, and a network interface's name (ZeroMQ binds ``eth0`` to that interface's address; even
    ``lo`` is refused, to keep the rule short), nor anything that is not an address.
    """
    if endpoint.startswith(("unix://", "ipc://")):
        return True
    match = _TCP_HOST.fullmatch(endpoint)
    if match is None:
        return False
    host = match["host"] if match["v6"] is None else match["v6"]
    if not host or host in {name for _, name in socket.if_nameindex()}:
        return False
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):  # socket.gaierror: no such name (nor a number); UnicodeError: not encodable
        return False
    return bool(found) and all(_loopback_address(str(info[4][0])) for info in found)


def _loopback_address(text: str) -> bool:
    address = ipaddress.ip_address(text.partition("%")[0])  # an IPv6 address may name its scope: fe80::1%eth0
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


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

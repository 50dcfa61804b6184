"""How a worker reaches its coordinator: an inherited pipe (a pool's own workers) or ZeroMQ (remote).

Both carry the same :mod:`aioenv.wire.protocol` messages and offer the same four calls, so the worker
loops (:mod:`workers.runtime`, :mod:`workers.concurrent`) do not care which one they have:

- :class:`aioenv.transport.pipe.PipeLink`: the end of a ``socketpair`` the coordinator made when it started
  this process (``--fd N``); see :mod:`aioenv.transport.pipe` for why local workers use it.
- :class:`ZmqLink`: a DEALER socket connected to a coordinator's or server's endpoint
  (``--connect tcp://...``), with CURVE keys when the server asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import zmq

from aioenv.transport.pipe import PipeLink
from aioenv.transport.zmqio import check_tcp_port, has_input, recv_frames, send_frames

__all__ = ["Link", "ZmqLink", "open_link"]


class Link(Protocol):
    """A worker's connection to its coordinator."""

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message."""
        ...

    def recv(self) -> list[Any]:
        """The next message (blocks until one arrives)."""
        ...

    def has_input(self) -> bool:
        """True when :meth:`recv` would not block."""
        ...

    def fileno(self) -> int:
        """A descriptor that becomes readable when input may be waiting."""
        ...

    @property
    def edge_triggered(self) -> bool:
        """True when the descriptor signals only new input: a reader must drain until
        :meth:`has_input` is False, and look again after sending (a send may consume the edge)."""
        ...

    def close(self) -> None:
        """Close the connection (messages already sent are still delivered)."""
        ...


class ZmqLink:
    """A DEALER socket named ``name``, connected to ``endpoint``; ``configure`` sets options first.

    Its descriptor is ZeroMQ's, which is edge-triggered: drain with :meth:`has_input` until False,
    and look again after sending (a send may consume the edge).
    """

    def __init__(self, endpoint: str, name: str, configure: Callable[[zmq.Socket[Any]], None] | None = None) -> None:
        check_tcp_port(endpoint, bind=False)
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, name.encode())
        sock.setsockopt(zmq.LINGER, 2000)
        if configure is not None:
            configure(sock)
        sock.connect(endpoint)
        self.sock = sock

    #: ZeroMQ's descriptor signals only new input (and a send may consume the signal).
    edge_triggered = True

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message (queued by ZeroMQ; never blocks)."""
        send_frames(self.sock, frames)

    def recv(self) -> list[Any]:
        """The next message as ``zmq.Frame`` objects (blocks)."""
        return recv_frames(self.sock)

    def has_input(self) -> bool:
        """True when a message is waiting."""
        return has_input(self.sock)

    def fileno(self) -> int:
        """ZeroMQ's (edge-triggered) descriptor."""
        return int(self.sock.getsockopt(zmq.FD))

    def close(self) -> None:
        """Close, giving queued messages half a second to leave."""
        self.sock.close(linger=500)


def open_link(where: str | int, name: str, configure: Callable[[zmq.Socket[Any]], None] | None = None) -> Link:
    """A :class:`~aioenv.transport.pipe.PipeLink` on descriptor ``where`` (int) or a :class:`ZmqLink` to
    endpoint ``where``."""
    if isinstance(where, int):
        return PipeLink(where)
    return ZmqLink(where, name, configure)

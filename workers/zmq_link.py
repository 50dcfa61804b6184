"""A worker's link to a coordinator or server over ZeroMQ (``--connect ENDPOINT``): see :mod:`workers.link`.

A module of its own so that a worker on its pool's pipe (``--fd N``) never imports ZeroMQ (~10 ms of a fresh
worker's start): :func:`workers.link.open_link` imports it for an endpoint only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import zmq

from aioenv.transport.pipe import LinkClosed
from aioenv.transport.zmqio import check_tcp_port, has_input, recv_frames, send_frames

__all__ = ["ZmqLink"]


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
        """Send one message (queued by ZeroMQ).

        Raises:
            LinkClosed: ZeroMQ refused it (its context is ending), as a pipe's end says it is closed."""
        try:
            send_frames(self.sock, frames)
        except zmq.ZMQError as exc:
            raise LinkClosed(f"the link cannot send: {exc}") from exc

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

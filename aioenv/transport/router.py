"""A ZeroMQ ROUTER socket driven by an asyncio event loop, without ``zmq.asyncio``.

The socket's file descriptor is registered with ``loop.add_reader``; when it
fires, every queued message is drained with non-blocking ``recv_multipart``
until ``zmq.Again`` (ZeroMQ's descriptor is edge-triggered, so a partial drain
would stall). A send can also consume the descriptor's readiness, so a burst
of sends is followed by one drain callback that checks ``zmq.EVENTS``.
This costs one callback per burst of messages rather than one future per
message, which is what makes many small round trips cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import zmq

from aioenv.errors import UsageError
from aioenv.transport.zmqio import check_tcp_port, has_input, recv_frames, send_frames

__all__ = ["Dealer", "Peer", "PeerSocket", "Router", "Sent"]

#: What became of a message given to :meth:`Router.send`: queued for its peer, not deliverable because the
#: peer is not connected, or not deliverable because the peer's queue is at its bound.
Sent = Literal["sent", "gone", "full"]

#: Messages handled per drain before yielding to the loop (fairness under flood).
_DRAIN_BATCH = 512


class _Drained:
    """A socket whose descriptor is registered with the loop and drained without blocking;
    subclasses handle each message in :meth:`_handle`."""

    sock: zmq.Socket[bytes]
    _loop: asyncio.AbstractEventLoop
    _fd: int
    _scheduled: bool
    _closed: bool

    def _start_reading(self) -> None:
        self._scheduled = False
        self._closed = False
        self._fd = int(self.sock.getsockopt(zmq.FD))
        self._loop.add_reader(self._fd, self._drain)

    def _after_send(self) -> None:
        if not self._scheduled:
            # A send may consume the descriptor's edge: look for input once after this burst of
            # sends (one EVENTS check, a poll syscall, instead of one per send).
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def _handle(self, frames: list[zmq.Frame]) -> None:
        raise NotImplementedError

    def _drain(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        sock = self.sock
        for _ in range(_DRAIN_BATCH):
            if not has_input(sock):
                return
            self._handle(recv_frames(sock, zmq.NOBLOCK))
            if self._closed:
                return
        self._scheduled = True
        self._loop.call_soon(self._drain)  # more may be waiting: continue after others had a turn

    def close(self) -> None:
        """Stop reading and close the socket (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # the loop may already be closed
            self._loop.remove_reader(self._fd)
        self.sock.close(linger=0)


class Router(_Drained):
    """A bound ROUTER socket whose messages go to ``on_message(identity, frames)``.

    Args:
        endpoint: where to bind, e.g. ``"ipc:///tmp/aioenv-x/coord.sock"`` or ``"tcp://127.0.0.1:5555"``.
        on_message: called in the loop thread for each message; must not raise.
        configure: called with the socket before it binds (socket options such as CURVE keys).
        queue: messages ZeroMQ may queue for, and from, each peer (0: no bound).
        max_message_bytes: the largest message a peer may send (a larger one drops its connection; None: no bound).
    """

    def __init__(
        self,
        endpoint: str,
        on_message: Callable[[bytes, list[zmq.Frame]], None],
        configure: Callable[[zmq.Socket[bytes]], None] | None = None,
        *,
        queue: int = 0,
        max_message_bytes: int | None = None,
    ) -> None:
        check_tcp_port(endpoint, bind=True)
        self._loop = asyncio.get_running_loop()
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unknown peer -> error, not a silent drop
        self.sock.setsockopt(zmq.SNDHWM, queue)
        self.sock.setsockopt(zmq.RCVHWM, queue)
        self.sock.setsockopt(zmq.MAXMSGSIZE, -1 if max_message_bytes is None else max_message_bytes)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            if configure is not None:  # e.g. CURVE keys, which must be set before bind
                configure(self.sock)
            self.sock.bind(endpoint)
        except BaseException:  # a port in use, a bad address: no socket is left open behind the error
            self.sock.close()
            raise
        self.endpoint: str = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._on_message = on_message
        self._start_reading()

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Queue one message for ``identity`` without blocking; False when it cannot be delivered (a
        :class:`~aioenv.transport.pipe.Port`'s send). See :meth:`offer`."""
        return self.offer(identity, frames) == "sent"

    def offer(self, identity: bytes, frames: Sequence[Any]) -> Sent:
        """Queue one message for ``identity``, never blocking, and say what became of it (see :data:`Sent`).

        Every attempt, refused ones included, may consume the descriptor's edge: a drain is scheduled
        after each (a server whose reader missed that edge stopped reading until some other event,
        long enough for steady clients to give up).
        """
        try:
            send_frames(self.sock, [identity, *frames], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return "gone"
            if exc.errno == zmq.EAGAIN:  # ROUTER_MANDATORY: the peer's queue is at its high-water mark
                return "full"
            raise
        finally:
            self._after_send()
        return "sent"

    def peer(self, _identity: bytes, frame: zmq.Frame) -> PeerSocket | None:
        """The connection a received message's ``frame`` came in on, to cut it off later (see :class:`Peer`)."""
        return PeerSocket.of(frame)

    def _handle(self, frames: list[zmq.Frame]) -> None:
        self._on_message(frames[0].bytes, frames[1:])


class Dealer(_Drained):
    """A connected DEALER socket (a client of an aioenv server) whose messages go to ``on_message(frames)``.

    Driven like :class:`Router`: ``loop.add_reader`` on ZeroMQ's descriptor, non-blocking drains.
    """

    def __init__(
        self,
        endpoint: str,
        identity: bytes,
        on_message: Callable[[list[zmq.Frame]], None],
        configure: Callable[[zmq.Socket[bytes]], None] | None = None,
    ) -> None:
        check_tcp_port(endpoint, bind=False)
        self._loop = asyncio.get_running_loop()
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            if configure is not None:  # e.g. CURVE keys, which must be set before connect
                configure(self.sock)
            self.sock.connect(endpoint)
        except BaseException as exc:  # e.g. a bad address: no socket is left open behind the error
            self.sock.close()
            if isinstance(exc, zmq.ZMQError) and exc.errno == zmq.EINVAL:
                raise UsageError(
                    f"cannot connect to {endpoint!r}: ZeroMQ refuses the address ({zmq.strerror(exc.errno)}); a tcp "
                    "address is tcp://HOST:PORT, HOST an IP address or an ASCII host name (an international name in "
                    "its xn-- form), PORT a number"
                ) from None
            raise
        self.endpoint = endpoint
        self._on_message = on_message
        self._start_reading()

    def send(self, frames: Sequence[Any]) -> bool:
        """Queue one message for the server (ZeroMQ sends it once connected); False when there is no
        connection to queue it on (e.g. the server refused our keys), instead of blocking."""
        try:
            send_frames(self.sock, frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        finally:
            self._after_send()  # an attempt that failed may have consumed the edge too (see Router.send)
        return True

    def _handle(self, frames: list[zmq.Frame]) -> None:
        self._on_message(frames)


class Peer(Protocol):
    """A client's connection, which a server cuts off when it drops the client: :class:`PeerSocket` over ZeroMQ,
    :class:`~aioenv.transport.stream.StreamPeer` on a unix socket."""

    def cut(self) -> bool:
        """End the connection; False when it had ended already."""


@dataclass(frozen=True)
class PeerSocket:
    """The operating system's socket a peer's messages arrive on, to cut the peer off: a ROUTER has no call
    that disconnects one peer, and what it queued for a peer is freed only once that peer's connection
    ends."""

    fd: int  # ZeroMQ's descriptor of the connection (owned by ZeroMQ's I/O thread)
    inode: int  # which socket that descriptor held: a descriptor number is reused once closed

    @classmethod
    def of(cls, frame: zmq.Frame) -> PeerSocket | None:
        """The socket ``frame`` (a received message's) came in on; None when ZeroMQ cannot say."""
        try:
            fd = int(frame.get(zmq.SRCFD))
            return cls(fd, os.fstat(fd).st_ino)
        except (zmq.ZMQError, OSError, ValueError):
            return None

    def cut(self) -> bool:
        """Shut the connection down (ZeroMQ then closes it and drops what it queued for the peer); False
        when the descriptor no longer holds that socket (the peer is gone already)."""
        try:
            fd = os.dup(self.fd)  # our own reference: the I/O thread may close its descriptor meanwhile
        except OSError:
            return False
        try:
            # The number may hold something else by now (another socket, a worker's pipe): look before wrapping it,
            # since a socket object cannot be made of a pipe (OSError), and a sweep must not raise.
            if os.fstat(fd).st_ino != self.inode:
                return False
            sock = socket.socket(fileno=fd)
            fd = -1  # the socket's to close now
            with sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False
        finally:
            if fd >= 0:
                os.close(fd)
        return True

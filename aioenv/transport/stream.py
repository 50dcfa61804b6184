"""Clients of ``aioenv serve`` on the same machine, over a unix-domain socket: ``unix:///path/to/socket``.

Over ZeroMQ every message wakes an I/O thread on the sending side and another on the receiving side, so a
round trip between a client and the server pays four thread wake-ups beyond the two processes' own; on a
small VM each costs tens of microseconds, and a DEALER/ROUTER ping-pong over loopback tcp takes ~400 µs at
the median where a socketpair's takes ~70 µs (docs/performance.md, "Remote pools"). A client on the server's
machine (a sidecar, a container with the socket mounted) can skip them: the server listens on a unix socket
and every client connection is a :class:`~aioenv.transport.pipe.PipePort`, the same framing and the same
non-blocking reads and writes as a pool's own worker pipes. The messages are the same
:mod:`aioenv.wire.protocol` frames as over ZeroMQ.

- :class:`StreamRouter` is the server's side: ``on_message(identity, frames)`` as a ZeroMQ
  :class:`~aioenv.transport.router.Router` gives them, one identity per connection (``b"unix-N"``), and
  ``on_gone(identity, reason, eof)`` when a connection ends: the client closed it or exited (``eof``), or
  it sent bytes that are no message, or a message over ``max_message_bytes`` (its connection is closed then).
- :class:`StreamDealer` is the client's side: it connects at once (an absent server is an error now,
  not after a heartbeat timeout) and reports the connection's end through ``on_lost(reason)``.

The socket file is made readable and writable by its owner only (``0600``): on a unix socket, who may connect
is whoever may open that file, which is what guards it (there is no CURVE here); a missing directory is made
``0700``. The server removes the file when it closes, and replaces a stale one left by a server that died
(one nobody listens on).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import socket
import stat
from collections.abc import Callable, Sequence
from typing import Any, Literal

from aioenv.transport.pipe import MAX_FRAMES, MAX_MESSAGE, PipePort

__all__ = ["UNIX", "StreamDealer", "StreamPeer", "StreamRouter", "is_stream", "unix_path"]

log = logging.getLogger("aioenv.transport")

#: The scheme of an aioenv server's unix-socket address.
UNIX = "unix://"
#: Connections accepted per readiness callback before other callbacks get a turn.
_ACCEPTS = 64


def is_stream(endpoint: str) -> bool:
    """Whether ``endpoint`` is a unix-socket address (``unix:///path``) rather than a ZeroMQ one."""
    return endpoint.startswith(UNIX)


def unix_path(endpoint: str) -> str:
    """The socket file of ``unix:///path`` (``unix://relative/path`` is relative to the working directory).

    Raises:
        ValueError: not a ``unix://`` address, or one with no path.
    """
    if not is_stream(endpoint) or len(endpoint) == len(UNIX):
        raise ValueError(f"expected a unix-socket address such as 'unix:///run/aioenv.sock', got {endpoint!r}")
    return endpoint[len(UNIX) :]


def _listen(path: str) -> socket.socket:
    """A non-blocking unix socket listening at ``path``, replacing a stale socket file (one nobody listens on);
    a missing directory is made, its owner's only (``0700``).

    Raises:
        OSError: the path is in use (a server listens there, or it is not a socket), or cannot be bound.
    """
    if parent := os.path.dirname(path):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except ConnectionRefusedError:  # left by a server that died: nobody listens there
            os.unlink(path)
        else:
            raise OSError(errno.EADDRINUSE, f"a server already listens at {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)  # the file is born 0600: no moment in which others could connect
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class StreamPeer:
    """One client connection of a :class:`StreamRouter`, to cut it off (``Router``'s ``PeerSocket`` for ZeroMQ)."""

    def __init__(self, router: StreamRouter, identity: bytes) -> None:
        self._router = router
        self._identity = identity

    def cut(self) -> bool:
        """Close the connection; False when it had ended already."""
        return self._router.cut(self._identity)


class StreamRouter:
    """A listening unix socket whose connections' messages go to ``on_message(identity, frames)`` (see the module).

    Args:
        endpoint: ``unix:///path``; the file is made (``0600``) and removed again by :meth:`close`.
        on_message: called in the loop thread for each message; must not raise.
        on_gone: called once as ``on_gone(identity, reason, eof)`` when a connection ends (not for :meth:`cut`):
            ``eof``, the client closed it; otherwise it broke the framing or sent too large a message.
        max_message_bytes: the largest message a client may send (a larger one ends its connection; None: no
            bound beyond the framing's).
    """

    def __init__(
        self,
        endpoint: str,
        on_message: Callable[[bytes, list[Any]], None],
        *,
        on_gone: Callable[[bytes, str, bool], None] | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.path = unix_path(endpoint)
        self._listener = _listen(self.path)
        self.endpoint = UNIX + self.path
        self._on_message = on_message
        self._on_gone = on_gone
        # the bound is on a message's frames; the framing's prefix (4 bytes and 8 a frame) comes on top
        self._max = MAX_MESSAGE if max_message_bytes is None else max_message_bytes + 4 + 8 * MAX_FRAMES
        self._ports: dict[bytes, PipePort] = {}
        self._accepted = 0
        self._closed = False
        self._loop.add_reader(self._listener.fileno(), self._accept)

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._ports)

    def _accept(self) -> None:
        for _ in range(_ACCEPTS):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the client sees its connection refused
                log.warning("cannot accept a client at %s: %s", self.endpoint, exc)
                return
            self._accepted += 1
            identity = f"unix-{self._accepted}".encode()
            lost = functools.partial(self._lost, identity)
            self._ports[identity] = PipePort(sock, identity, self._on_message, lost, max_message=self._max)

    def _lost(self, identity: bytes, reason: str, eof: bool) -> None:
        self._ports.pop(identity, None)
        if self._on_gone is not None and not self._closed:
            self._on_gone(identity, "closed its connection" if eof else reason, eof)

    def connected(self, identity: bytes) -> bool:
        """Whether the connection of ``identity`` is still open."""
        return identity in self._ports

    def peer(self, identity: bytes, _frame: Any = None) -> StreamPeer | None:
        """The connection of ``identity``, to cut it off later; None when it has ended."""
        return StreamPeer(self, identity) if identity in self._ports else None

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send one message to ``identity`` without blocking; False when its connection has ended."""
        port = self._ports.get(identity)
        return port is not None and port.send(identity, frames)

    def offer(self, identity: bytes, frames: Sequence[Any]) -> Literal["sent", "gone"]:
        """:meth:`send`, saying ``"sent"`` or ``"gone"`` as ``Router.offer`` does (a connection has no queue
        bound of its own: the server bounds what a client leaves unread, see :mod:`aioenv.server.peers`)."""
        return "sent" if self.send(identity, frames) else "gone"

    def cut(self, identity: bytes) -> bool:
        """Close the connection of ``identity`` (no ``on_gone`` for it); False when it had ended already."""
        port = self._ports.pop(identity, None)
        if port is None:
            return False
        port.close()
        return True

    def close(self) -> None:
        """Close every connection and the listening socket, and remove the socket file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for port in list(self._ports.values()):
            port.close()
        self._ports.clear()
        with contextlib.suppress(Exception):  # the loop may already be closed
            self._loop.remove_reader(self._listener.fileno())
        self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class StreamDealer:
    """A client's connection to a :class:`StreamRouter` (see the module).

    Args:
        endpoint: ``unix:///path`` of the server.
        on_message: called in the loop thread with each message's frames; must not raise.
        on_lost: called once with the reason when the connection ends from the server's side.

    Raises:
        ConnectionError: nothing listens at the path (no server, or it stopped), or it may not be opened.
    """

    def __init__(self, endpoint: str, on_message: Callable[[list[Any]], None], on_lost: Callable[[str], None]) -> None:
        self.endpoint = endpoint
        path = unix_path(endpoint)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise ConnectionError(f"cannot connect to the aioenv server at {endpoint}: {exc.strerror or exc}") from exc

        def lost(reason: str, eof: bool) -> None:
            on_lost("the server closed the connection" if eof else reason.replace("pipe", "connection"))

        self._port = PipePort(sock, b"server", lambda _identity, frames: on_message(frames), lost)

    def send(self, frames: Sequence[Any]) -> bool:
        """Send one message without blocking; False once the connection has ended."""
        return self._port.send(b"server", frames)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._port.close()

"""What one client may make the server hold: bounds per peer, and the bookkeeping that enforces them.

A server answers every client through one ROUTER socket, and ZeroMQ keeps one queue per peer. A
client that sends requests and never reads the replies (or reads slower than it asks) would make
those queues grow without limit, so three bounds apply to each peer (:class:`PeerLimits`):

- ``max_message_bytes``: the largest message a client may send (ZeroMQ's ``MAXMSGSIZE``: a larger
  one drops the connection). Clients learn it when their pool opens and refuse, with a
  :class:`~aioenv.errors.UsageError`, to send a larger request.
- ``max_queued``: messages queued for (and from) one peer (``SNDHWM``/``RCVHWM``). A reply that meets a
  full queue cannot be delivered.
- ``max_unread_bytes``: bytes of replies sent to a client that it has not shown it read. ZeroMQ cannot
  say what a peer has read, so the server asks: every ``max_unread_bytes / 8`` bytes it sends the
  client a *mark* (an EVENT with a random nonce), and the client names the last mark it read in
  each message it sends (``ack``). Replies are delivered in order, so a client that acknowledges a
  mark has read everything sent before it; a nonce cannot be guessed, so a client cannot
  acknowledge what it did not read. A client that is busy but reading acknowledges within one of
  its requests or heartbeats.

The unread bytes of all clients together are bounded too (``max_unread_total``): past it, the client
with the most unread is dropped.

A peer over a bound is *dropped*: its pool is closed and its envs released, one warning is logged,
and the client is told why (an EVENT ``dropped``) as soon as its queue has room, so its calls fail
with :class:`~aioenv.errors.ConnectionLost` instead of waiting. Other clients are not affected.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

from aioenv.errors import UsageError
from aioenv.wire.options import positive_int

__all__ = ["DroppedPeers", "PeerLimits", "Sweep", "Unread"]

MIB = 1 << 20


@dataclass(frozen=True)
class PeerLimits:
    """Bounds on what one client may make the server hold (see the module docstring).

    Defaults fit the largest legitimate batch with room to spare: a step of 1,024 Atari frames
    (84x84x4 uint8) is 29 MiB.
    """

    max_message_bytes: int = 256 * MIB
    max_queued: int = 1000
    max_unread_bytes: int = 512 * MIB
    max_unread_total: int = 2048 * MIB  # all clients together: past it, the client with the most unread is dropped

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_queued", "max_unread_bytes", "max_unread_total"):
            positive_int(name, getattr(self, name), error=UsageError)

    @property
    def mark_every(self) -> int:
        """Bytes sent to a client between two marks."""
        return max(1, self.max_unread_bytes // 8)


class Unread:
    """Bytes sent to one client that it has not yet shown it read (see the module docstring)."""

    __slots__ = ("_acked", "_every", "_marks", "_next_mark", "sent")

    def __init__(self, mark_every: int) -> None:
        self.sent = 0  # bytes sent to the client
        self._acked = 0  # ``sent`` when the last mark the client acknowledged was sent
        self._every = mark_every
        self._next_mark = mark_every
        self._marks: deque[tuple[int, int]] = deque()  # (nonce, sent at the mark), oldest first

    @property
    def unread(self) -> int:
        """Bytes sent after the last mark the client acknowledged."""
        return self.sent - self._acked

    def add(self, nbytes: int) -> int | None:
        """Count a message of ``nbytes`` sent; returns the nonce of a mark to send now, if one is due."""
        self.sent += nbytes
        if self.sent < self._next_mark:
            return None
        self._next_mark = self.sent + self._every
        nonce = secrets.randbits(62) + 1
        self._marks.append((nonce, self.sent))
        return nonce

    def ack(self, nonce: int) -> None:
        """The client read the mark ``nonce`` (and so everything sent before it); an unknown nonce counts
        for nothing."""
        if not any(n == nonce for n, _ in self._marks):
            return
        while self._marks:
            n, at = self._marks.popleft()
            self._acked = at
            if n == nonce:
                return


class DroppedPeers:
    """The peers dropped for going over their bounds, with why (the most recent ``keep``)."""

    def __init__(self, keep: int = 1024) -> None:
        self._why: OrderedDict[bytes, str] = OrderedDict()
        self._keep = positive_int("keep", keep)

    def add(self, identity: bytes, why: str) -> bool:
        """Remember ``identity`` as dropped; False when it already was (so it is logged once)."""
        if identity in self._why:
            return False
        self._why[identity] = why
        while len(self._why) > self._keep:
            self._why.popitem(last=False)
        return True

    def why(self, identity: bytes) -> str | None:
        """Why ``identity`` was dropped, or None."""
        return self._why.get(identity)


class Sweep:
    """The clock of a periodic sweep for silent peers (every ``interval`` seconds), which does not count the
    time this process itself did not run as the peers' silence.

    A server stopped for a while (SIGSTOP, a swapped-out machine, a blocked loop) finds, when it runs
    again, every peer's last message older than its timeout, although their heartbeats are waiting
    unread in its sockets. :meth:`late` says by how much this sweep runs late, to be added to every
    peer's last-heard time before judging it.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last = time.monotonic()

    def late(self) -> float:
        """Seconds this sweep runs past its time (0.0 when on time); call once per sweep."""
        now = time.monotonic()
        late = max(0.0, now - self._last - self.interval)
        self._last = now
        return late

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
  say what a peer has read, so the server asks. Every message it sends a client carries a *mark* (``mk``,
  a random nonce) in its own header, and the client names the last mark it read in each message it
  sends (``ack``). Replies are delivered in order, so a client that acknowledges a mark has read the
  message that carried it and everything sent before; a nonce cannot be guessed, so a client cannot
  acknowledge what it did not read. The mark travels inside the message, never after it: a client
  that has read a reply has read its mark, so a client in lock-step (it reads each reply before it
  sends its next request) has nothing unread when its request arrives, and is never dropped while the
  bound holds its largest reply.

  What the server keeps per client is bounded: a mark is *kept* when at least ``max_unread_bytes / 8``
  bytes were sent since the last kept one (so at most 9 are kept before the client is over its
  bound), and of the marks between, only the newest :data:`RECENT`. A kept mark is odd, any other
  even, so the client knows which is which: it names the last mark it read (``ack``) and, when that
  is not a kept one, also the last kept mark it read (``ackk``). The recent marks are there for a
  client in lock-step whose reply is followed by a small message it has not read yet when it sends
  its next request (the PONG to a heartbeat it sent before the reply came, an event): the reply's
  mark is then no longer the newest, but it still counts. A client that lags further behind (it
  pipelines, and the server has sent more since) gets credit for everything up to its last kept
  mark, within an eighth of the bound of what it read; an acknowledgement of a mark no longer
  remembered counts for nothing (it is never trusted, only not rewarded).

Every connection is held to these bounds, one without a pool too (a STATUS, a PING or a refused OPEN is
answered on it): its replies count until it acknowledges them, or until it has been silent for the
client timeout, when it is forgotten and its connection, if it left replies unread, is ended.

The unread bytes of all connections together are bounded too (``max_unread_total``, kept as a running
sum, checked at every message): past it, the connection with the most unread is dropped.

A peer over a bound is *dropped*: its pool is closed and its envs released, one warning is logged,
and the client is told why (an EVENT ``dropped``) as soon as its queue has room, so its calls fail
with :class:`~aioenv.errors.ConnectionLost` instead of waiting. Other clients are not affected.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

from aioenv.errors import UsageError
from aioenv.wire.options import positive_int

__all__ = ["NONCE_BLOCK", "RECENT", "DroppedPeers", "Nonces", "PeerLimits", "Sweep", "Tally", "Unread"]

MIB = 1 << 20
#: How many of the newest marks a connection remembers besides its kept ones.
RECENT = 8


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


class Tally:
    """The unread bytes of all of a server's connections together (see :class:`Unread`)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


class Nonces:
    """Unguessable numbers of 61 bits for the marks, cut from ``os.urandom`` a block at a time: one system call per
    :data:`NONCE_BLOCK` bytes (512 marks) where ``secrets.randbits`` makes one per mark, and a server marks every
    message it sends. The bytes are the kernel's CSPRNG's either way. One per event loop (not thread-safe)."""

    __slots__ = ("_at", "_block")

    def __init__(self) -> None:
        self._block = b""
        self._at = 0

    def draw(self) -> int:
        """The next number, ``0 <= n < 2**61``."""
        at = self._at
        if at + 8 > len(self._block):
            self._block, at = os.urandom(NONCE_BLOCK), 0
        self._at = at + 8
        return int.from_bytes(self._block[at : at + 8], "little") >> 3


#: Bytes of ``os.urandom`` a :class:`Nonces` takes at a time.
NONCE_BLOCK = 4096


class Unread:
    """Bytes sent to one connection that its peer has not yet shown it read (see the module docstring); every
    change is added to ``tally``, the sum over all connections."""

    __slots__ = ("_acked", "_every", "_kept", "_kept_at", "_nonces", "_recent", "sent", "tally")

    def __init__(self, mark_every: int, tally: Tally, nonces: Nonces | None = None) -> None:
        self.sent = 0  # bytes sent to the peer
        self.tally = tally
        self._nonces = nonces or Nonces()  # (a server passes its own to every connection)
        self._acked = 0  # ``sent`` after the message whose mark the peer last acknowledged
        self._every = mark_every
        self._kept: deque[tuple[int, int]] = deque()  # (nonce, sent after its message), oldest first
        self._kept_at = 0  # ``sent`` at the newest kept mark
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT)  # the newest marks, kept or not, oldest first

    @property
    def unread(self) -> int:
        """Bytes sent after the last mark the peer acknowledged."""
        return self.sent - self._acked

    def mark(self) -> int:
        """A new mark's nonce, for the header of the message about to be sent (then :meth:`add` it): odd when it
        will be kept (``max_unread_bytes / 8`` were sent since the last kept one), else even."""
        kept = self.sent - self._kept_at >= self._every
        return (self._nonces.draw() + 1) << 1 | kept

    def add(self, nbytes: int, nonce: int) -> None:
        """Count a message of ``nbytes`` sent, which carried the mark ``nonce`` (from :meth:`mark`)."""
        self.sent += nbytes
        self.tally.total += nbytes
        self._recent.append((nonce, self.sent))
        if nonce & 1:
            self._kept.append((nonce, self.sent))
            self._kept_at = self.sent

    def ack(self, nonce: int) -> None:
        """The peer read the message that carried ``nonce`` (and so everything sent before it); a nonce neither
        kept nor among the :data:`RECENT` newest counts for nothing."""
        at = next((at for n, at in self._recent if n == nonce), None)
        if at is None:
            at = next((at for n, at in self._kept if n == nonce), None)
        if at is None:
            return
        self._advance(at)
        while self._kept and self._kept[0][1] <= at:
            self._kept.popleft()
        while self._recent and self._recent[0][1] <= at:
            self._recent.popleft()

    def release(self) -> None:
        """Stop counting what this peer has not read (its connection is ended or forgotten)."""
        self._advance(self.sent)
        self._kept.clear()
        self._recent.clear()

    def _advance(self, acked: int) -> None:
        self.tally.total -= acked - self._acked
        self._acked = acked


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

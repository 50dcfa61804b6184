"""Multipart messages over a local stream socket: how a pool talks to the worker processes it started.

A pool's own workers are its child processes, so the coordinator makes a ``socketpair`` for each one
at launch and the child inherits its end (``python -m workers --fd N``). Over ZeroMQ every one-way
message wakes an I/O thread on both sides (four thread wake-ups, on a machine where each costs tens of
microseconds); here the sender's ``sendmsg`` writes straight into the receiver's socket: one wake-up,
no extra threads. Remote workers (``aioenv worker``, the server's worker port) keep ZeroMQ; the
messages are the same :mod:`aioenv.wire.protocol` frames either way.

Framing: ``<u32 n><u64 size_1>...<u64 size_n>`` followed by the n frames' bytes, back to back.

- :class:`FrameReader` splits a byte stream into messages, each a list of read-only memoryviews.
  A small message is copied once into its own ``bytes`` (so a frame never pins a shared buffer); a
  message of :data:`BIG_MESSAGE` bytes or more is received in place into its own buffer (no copy).
- :class:`PipePort` is the coordinator's end, driven by the event loop: non-blocking reads on
  readiness, non-blocking writes with a backlog flushed when the socket is writable again.
- :class:`PipeLink` is the worker's end: blocking receive and send, plus a non-blocking
  :meth:`PipeLink.has_input` for an event loop that drains it on readiness.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Any

from aioenv._hot import compiled
from aioenv.errors import ProtocolError

__all__ = ["BIG_MESSAGE", "MAX_FRAMES", "MAX_MESSAGE", "FrameReader", "LinkClosed", "PipeLink", "PipePort", "framed"]

_COUNT = struct.Struct("<I")
#: Most frames one message may have (a guard against a corrupt stream, far above any real message).
MAX_FRAMES = 1 << 13
#: Largest message accepted (a guard against a corrupt stream: 16 GiB).
MAX_MESSAGE = 1 << 34
#: Messages at least this large are received in place into a buffer of their own.
BIG_MESSAGE = 1 << 16
#: Size of the reader's buffer for small messages (one ``recv_into`` fills it with many of them).
_CHUNK = 1 << 18
#: Buffers per ``sendmsg`` call (Linux's IOV_MAX is 1024).
_IOV_MAX = 1024


class LinkClosed(ConnectionError):
    """The other end of a pipe closed it (the process exited or closed its end)."""


def _size(frame: Any) -> int:
    if type(frame) is bytes:
        return len(frame)
    size = getattr(frame, "nbytes", None)  # numpy arrays, memoryviews
    return size if type(size) is int else memoryview(frame).nbytes


def framed(frames: Sequence[Any]) -> tuple[list[Any], int]:
    """``frames`` (contiguous buffers: bytes, numpy arrays, memoryviews) preceded by their prefix,
    and the number of bytes in all."""
    sizes = [len(f) if type(f) is bytes else _size(f) for f in frames]  # a header is bytes: no call for it
    prefix = struct.pack(f"<I{len(sizes)}Q", len(sizes), *sizes)
    return [prefix, *frames], len(prefix) + sum(sizes)


class FrameReader:
    """Splits a byte stream into messages; fill it through :meth:`buffer` and :meth:`advance`.

    ``reader.buffer()`` is where the next bytes go (e.g. ``sock.recv_into(reader.buffer())``);
    ``reader.advance(n)`` says ``n`` bytes arrived there and returns the messages now complete, each a
    list of read-only memoryviews (one per frame).

    ``max_message``: the largest message accepted, in bytes (prefix included).

    Raises:
        ProtocolError: from :meth:`advance`, when the stream is not framed as this module frames it, or a
            message is larger than ``max_message``.
    """

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._buf = bytearray(_CHUNK)
        self._whole = memoryview(self._buf)  # the buffer from its start: where a message read alone goes
        self._start = 0  # first byte not yet parsed
        self._end = 0  # first free byte
        self._big: bytearray | None = None  # a big message being received in place
        self._big_fill = 0
        self._big_sizes: tuple[int, ...] = ()
        self._big_head = 0

    def buffer(self) -> memoryview:
        """Writable free space for the next bytes of the stream (do not keep it)."""
        if self._big is not None:
            return memoryview(self._big)[self._big_fill :]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end :]

    def fresh(self) -> memoryview | None:
        """The whole buffer, when no part of a message waits for the rest and nothing is buffered (the next bytes
        begin a message at its start): a read into it that brings one whole message leaves it there, at offset 0,
        for a caller that takes it without :meth:`advance` (nothing changes then). None otherwise: use
        :meth:`buffer`."""
        return self._whole if self._end == 0 and self._big is None else None

    @property
    def idle(self) -> bool:
        """Whether no part of a message waits for the rest (the next bytes begin a message)."""
        return self._start == self._end and self._big is None

    @property
    def pending(self) -> int:
        """Bytes received that are not yet part of a whole message."""
        if self._big is not None:
            return self._big_fill
        return self._end - self._start

    def advance(self, n: int) -> list[list[memoryview]]:
        """``n`` bytes were written into the last :meth:`buffer`; returns the messages now complete."""
        if self._big is not None:
            return self._advance_big(n)
        self._end += n
        buf = self._buf
        pos, end = self._start, self._end
        out: list[list[memoryview]] = []
        while end - pos >= 4:
            (count,) = _COUNT.unpack_from(buf, pos)
            if not 0 < count <= MAX_FRAMES:
                raise ProtocolError(f"malformed pipe stream: a message of {count} frames (expected 1 to {MAX_FRAMES})")
            head = 4 + 8 * count
            if end - pos < head:
                break
            sizes = struct.unpack_from(f"<{count}Q", buf, pos + 4)
            total = head + sum(sizes)
            if total > self.max_message:
                raise ProtocolError(f"a message of {total} bytes (the limit is {self.max_message})")
            if end - pos < total:
                if total >= BIG_MESSAGE:  # receive the rest in place, into a buffer of its own
                    big = bytearray(total)
                    have = end - pos
                    big[:have] = memoryview(buf)[pos:end]
                    self._big, self._big_fill, self._big_sizes, self._big_head = big, have, sizes, head
                    pos = end
                break
            blob = bytes(memoryview(buf)[pos + head : pos + total])  # one copy: this message's own
            view = memoryview(blob)
            if count == 1:
                out.append([view])
            else:
                frames = []
                off = 0
                for size in sizes:
                    frames.append(view[off : off + size])
                    off += size
                out.append(frames)
            pos += total
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        return out

    def _advance_big(self, n: int) -> list[list[memoryview]]:
        """:meth:`advance` while a big message is received in place: it, once whole."""
        assert self._big is not None
        self._big_fill += n
        if self._big_fill < len(self._big):
            return []
        view = memoryview(self._big).toreadonly()
        off = self._big_head
        frames = []
        for size in self._big_sizes:
            frames.append(view[off : off + size])
            off += size
        self._big = None
        return [frames]

    def _compact(self) -> None:
        """Move the unparsed tail to the front (nothing else refers to this buffer: messages are copies)."""
        have = self._end - self._start
        self._buf[:have] = self._buf[self._start : self._end]
        self._start, self._end = 0, have


def _sent(bufs: collections.deque[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes of ``bufs``."""
    while n:
        first = bufs[0]
        size = first.nbytes
        if n >= size:
            bufs.popleft()
            n -= size
        else:
            bufs[0] = first[n:]
            return


def _views(frames: Sequence[Any]) -> list[memoryview]:
    return [memoryview(f).cast("B") if not isinstance(f, bytes) else memoryview(f) for f in frames]


def _send_whole(sock: socket.socket, frames: Sequence[Any]) -> collections.deque[memoryview] | None:
    """Send one message at once if the socket takes it all (the common case: one syscall); else the
    bytes still to send, for :func:`_send_more`. ``OSError`` (not ``BlockingIOError``) propagates."""
    bufs, total = framed(frames)
    try:
        n = sock.sendmsg(bufs) if len(bufs) <= _IOV_MAX else 0
    except BlockingIOError:
        n = 0
    if n == total:
        return None
    rest = collections.deque(_views(bufs))
    _sent(rest, n)
    return rest


def _send_more(sock: socket.socket, rest: collections.deque[memoryview]) -> None:
    """Send what the socket takes of ``rest`` now, dropping it from ``rest``.
    ``BlockingIOError``: nothing fits now; other ``OSError``: the peer is gone."""
    _sent(rest, sock.sendmsg([rest[i] for i in range(min(len(rest), _IOV_MAX))]))


def py_send_each(fds: list[int], datas: list[bytes]) -> list[tuple[int, int]]:
    """Write ``datas[k]`` to the non-blocking stream socket ``fds[k]``, one write each, in order; returns ``[(k, n)]``
    for each message not written whole: ``n`` >= 0 bytes of it were, or ``n`` = -errno (``EAGAIN``: nothing fitted;
    another: the socket failed). The twin of the compiled ``send_each`` (:mod:`aioenv._hot`), which
    :func:`send_framed_each` calls where it was built."""
    short: list[tuple[int, int]] = []
    for k, (fd, data) in enumerate(zip(fds, datas, strict=True)):
        try:
            n = os.write(fd, data)
        except OSError as exc:
            n = -(exc.errno or errno.EIO)
        if n != len(data):
            short.append((k, n))
    return short


#: The sends of :func:`send_framed_each`: compiled where :mod:`aioenv._hot` found them built.
send_each: Callable[[list[int], list[bytes]], list[tuple[int, int]]] = (
    py_send_each if compiled is None else compiled.send_each
)


def send_framed_each(ports: Sequence[PipePort], datas: list[bytes]) -> list[int]:
    """Send ``datas[k]`` through ``ports[k]`` (one message each, framed as :meth:`PipePort.send_framed` takes it,
    each port once) as that method would, the sockets written in one call (:data:`send_each`): a lane call's
    messages to its workers, each a wake-up, without a Python method call and a socket method around each. Returns the
    ``k`` whose port is closed, or closes now (its message not sent: send_framed's False)."""
    fds: list[int] = []
    for port in ports:
        if port.closed or port._backlog:  # (rare: one by one, as each port takes it)
            return [k for k, (p, data) in enumerate(zip(ports, datas, strict=True)) if not p.send_framed(data)]
        fds.append(port._fd)
    lost: list[int] = []
    for k, n in send_each(fds, datas):
        port = ports[k]
        if n >= 0 or n == -errno.EAGAIN:  # what did not fit waits, as send_framed keeps it
            port._keep_rest(datas[k], max(n, 0))
        else:  # the worker is gone (its exit is reported through its pidfd)
            port._lost(f"closed its end of the pipe ({os.strerror(-n)})", True)
            lost.append(k)
    return lost


#: A handler of the messages of one size, before any parsing (see :class:`PipePort`'s ``quick``).
QuickHandler = Callable[[bytes, memoryview], bool]


def _quick(quick: tuple[int, QuickHandler] | None) -> tuple[int, QuickHandler | None]:
    return quick if quick is not None else (-1, None)


class PipePort:
    """The coordinator's end of a worker's pipe: messages in through ``on_message(identity, frames)``
    in the loop thread, :meth:`send` never blocks (what the socket cannot take now waits in a backlog).

    Args:
        sock: the parent's end of a ``socketpair(AF_UNIX, SOCK_STREAM)``; this port owns it.
        identity: the worker's name, passed to ``on_message`` with every message.
        on_message: the coordinator's handler; must not raise.
        on_lost: called once as ``on_lost(reason, eof)`` when the pipe ends or breaks from the worker's
            side (the port is closed by then). ``eof``: the worker closed its end, as it does when it
            exits; otherwise it sent bytes that are no message (the stream cannot be resynchronised).
        max_message: the largest message the peer may send (a larger one ends the connection as ``on_lost``
            with ``eof`` False).
        quick: ``(size, handler)``: a read that brings exactly one whole message of ``size`` bytes (its framing
            included), with nothing of another pending, goes to ``handler(identity, data)`` first, ``data``
            holding its bytes from the first (valid during the call only); the handler returns True when it
            took the message, False to have it parsed and passed to ``on_message`` as any other. The
            messages a peer sends most, of one known size, then skip the parsing and the copy.
    """

    def __init__(
        self,
        sock: socket.socket,
        identity: bytes,
        on_message: Callable[[bytes, list[Any]], None],
        on_lost: Callable[[str, bool], None] | None = None,
        *,
        max_message: int = MAX_MESSAGE,
        quick: tuple[int, QuickHandler] | None = None,
    ) -> None:
        # (imported here: a worker imports this module for its own end, PipeLink, which needs no event loop, and
        # asyncio is ~20 ms of a fresh worker's start)
        import asyncio

        self._loop = asyncio.get_running_loop()
        self._sock = sock
        sock.setblocking(False)
        self._fd = sock.fileno()
        self._identity = identity
        self._on_message = on_message
        self._on_lost = on_lost
        self._reader = FrameReader(max_message)
        self._backlog: collections.deque[memoryview] = collections.deque()
        self.closed = False
        self._quick_size, self._quick = _quick(quick)
        self._loop.add_reader(self._fd, self.drain, 64)  # 64 reads, then other callbacks run (it is called again)

    def rebind(
        self,
        identity: bytes,
        on_message: Callable[[bytes, list[Any]], None],
        quick: tuple[int, QuickHandler] | None = None,
    ) -> None:
        """Deliver the worker's messages to ``on_message`` (and ``quick``) under ``identity`` from now on (a new
        owner)."""
        self._identity = identity
        self._on_message = on_message
        self._quick_size, self._quick = _quick(quick)

    def send_framed(self, data: bytes) -> bool:
        """Send one message already framed as :func:`framed` frames it (``data``: its prefix and frames, back to
        back); as :meth:`send` otherwise."""
        if self.closed:
            return False
        if self._backlog:
            self._backlog.append(memoryview(data))
            return True
        try:
            n = self._sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError as exc:  # the worker is gone (its exit is reported through its pidfd)
            self._lost(f"closed its end of the pipe ({exc})", True)
            return False
        if n < len(data):
            self._keep_rest(data, n)
        return True

    def _keep_rest(self, data: bytes, n: int) -> None:
        """The socket took only ``n`` bytes of ``data`` (its backlog empty): the rest waits until it is writable."""
        self._backlog.append(memoryview(data)[n:])
        self._loop.add_writer(self._fd, self._writable)

    def send(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send one message (``identity`` must be this port's worker); False once the pipe is closed."""
        if self.closed:
            return False
        if self._backlog:
            self._backlog.extend(_views(framed(frames)[0]))
            return True
        try:
            rest = _send_whole(self._sock, frames)
        except OSError as exc:  # the worker is gone (its exit is reported through its pidfd)
            self._lost(f"closed its end of the pipe ({exc})", True)
            return False
        if rest is not None:
            self._backlog = rest
            self._loop.add_writer(self._fd, self._writable)
        return True

    def _writable(self) -> None:
        backlog = self._backlog
        try:
            while backlog:
                _send_more(self._sock, backlog)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lost(f"closed its end of the pipe ({exc})", True)
            return
        self._loop.remove_writer(self._fd)

    def drain(self, reads: int | None = None) -> None:
        """Read and handle the messages that have arrived: all of them, or what ``reads`` reads bring
        (the coordinator drains all before it reports the worker's exit)."""
        reader = self._reader
        while reads is None or reads > 0:
            if reads is not None:
                reads -= 1
            if self.closed:
                return
            space = reader.fresh()
            fresh = space is not None
            if space is None:
                space = reader.buffer()
            try:
                n = self._sock.recv_into(space)
            except BlockingIOError:
                return
            except OSError as exc:
                self._lost(f"closed its end of the pipe ({exc})", True)
                return
            wanted = space.nbytes
            if n == self._quick_size and fresh and self._quick is not None and self._quick(self._identity, space):
                if n < wanted:
                    return
                continue
            del space
            if n == 0:
                self._lost("closed its end of the pipe", True)
                return
            try:
                messages = reader.advance(n)
            except (ProtocolError, MemoryError) as exc:  # a corrupt stream cannot be resynchronised
                self._lost(f"sent bytes that are no message ({str(exc) or type(exc).__name__})", False)
                return
            for frames in messages:
                self._on_message(self._identity, frames)
            if n < wanted:
                return

    def _lost(self, reason: str, eof: bool) -> None:
        if self.closed:
            return
        self.close()
        if self._on_lost is not None:
            self._on_lost(reason, eof)

    def fileno(self) -> int:
        """The socket's descriptor, watched by the loop for input (it stays the same until :meth:`close`)."""
        return self._fd

    def close(self) -> None:
        """Stop reading and writing and close the socket (idempotent)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):  # the loop may already be closed
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)
        self._backlog.clear()
        self._sock.close()


class PipeLink:
    """The worker's end of its pipe (the descriptor it inherited): blocking :meth:`recv` and
    :meth:`send`, and :meth:`has_input` that never blocks. Blocking holds even when an event loop
    watching the descriptor made it non-blocking (uvloop does): a message is always sent whole.

    Raises:
        LinkClosed: from :meth:`recv` and :meth:`has_input` once the coordinator's end is closed.
    """

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
        self.sock.setblocking(True)
        self._reader = FrameReader()
        self._ready: collections.deque[list[memoryview]] = collections.deque()
        self._drained = False  # the last read left the socket empty: has_input need not ask again

    #: Its descriptor stays readable while input waits (an event loop need not look again after a send).
    edge_triggered = False

    def fileno(self) -> int:
        """The descriptor to watch for input (level-triggered)."""
        return self.sock.fileno()

    def _fill(self, flags: int) -> None:
        space = self._reader.buffer()
        try:
            n = self.sock.recv_into(space, 0, flags)
        except BlockingIOError:  # nothing yet (an event loop that watches the fd made it non-blocking)
            if flags & socket.MSG_DONTWAIT:
                return
            self._wait(select.POLLIN)
            return
        except OSError as exc:
            raise LinkClosed(f"the coordinator's end of the pipe failed: {exc}") from exc
        self._drained = n < space.nbytes
        del space
        if n == 0:
            raise LinkClosed("the coordinator closed its end of the pipe")
        self._ready.extend(self._reader.advance(n))

    def has_input(self) -> bool:
        """True when a whole message can be received without blocking.

        After a read that emptied the socket, the next call answers False without asking the socket
        again (the one after asks): a loop draining on readiness stops there, and the descriptor,
        level-triggered, calls it back if more arrived meanwhile."""
        if not self._ready:
            if self._drained:
                self._drained = False
                return False
            self._fill(socket.MSG_DONTWAIT)
        return bool(self._ready)

    def recv(self) -> list[memoryview]:
        """The next message (blocks until it has arrived)."""
        while not self._ready:
            self._fill(0)
        return self._ready.popleft()

    def send(self, frames: Sequence[Any]) -> None:
        """Send one message (blocks until the socket has taken it all).

        Raises:
            LinkClosed: the coordinator's end is closed.
        """
        try:
            rest = _send_whole(self.sock, frames)
            while rest:  # the rest of this message, whatever it takes: a message is never cut short
                try:
                    _send_more(self.sock, rest)
                except BlockingIOError:  # the socket is full (and non-blocking): wait for room
                    self._wait(select.POLLOUT)
        except OSError as exc:
            raise LinkClosed(f"the coordinator's end of the pipe is closed: {exc}") from exc

    def _wait(self, event: int) -> None:
        """Block until the socket is ready for ``event`` (or hung up: the next call says how)."""
        poller = select.poll()
        poller.register(self.sock.fileno(), event)
        poller.poll()

    def close(self) -> None:
        """Close this end (the coordinator sees end of stream)."""
        self.sock.close()

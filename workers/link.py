"""How a worker reaches its coordinator: an inherited pipe (a pool's own workers) or ZeroMQ (remote).

Both carry the same :mod:`aioenv.wire.protocol` messages and offer the same four calls, so the worker
loops (:mod:`workers.runtime`, :mod:`workers.concurrent`) do not care which one they have:

- :class:`aioenv.transport.pipe.PipeLink`: the end of a ``socketpair`` the coordinator made when it started
  this process (``--fd N``); see :mod:`aioenv.transport.pipe` for why local workers use it.
- :class:`workers.zmq_link.ZmqLink`: a DEALER socket connected to a coordinator's or server's endpoint
  (``--connect tcp://...``), with CURVE keys when the server asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aioenv.transport.pipe import PipeLink

if TYPE_CHECKING:
    import zmq

__all__ = ["Link", "open_link"]


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


def open_link(where: str | int, name: str, configure: Callable[[zmq.Socket[Any]], None] | None = None) -> Link:
    """A :class:`~aioenv.transport.pipe.PipeLink` on descriptor ``where`` (int) or a
    :class:`~workers.zmq_link.ZmqLink` to endpoint ``where`` (ZeroMQ is imported for that one only)."""
    if isinstance(where, int):
        return PipeLink(where)
    from workers.zmq_link import ZmqLink

    return ZmqLink(where, name, configure)

"""A client's connection to an aioenv server, chosen by its address: a ZeroMQ DEALER for ``tcp://`` and
``ipc://`` (with CURVE when given keys), a :class:`~aioenv.transport.stream.StreamDealer` for ``unix://``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aioenv.transport.auth import client_configurer
from aioenv.transport.router import Dealer
from aioenv.transport.stream import StreamDealer, is_stream

__all__ = ["ClientLink", "dial"]

#: What :func:`dial` returns: both ``send(frames) -> bool`` and ``close()``.
ClientLink = Dealer | StreamDealer


def dial(
    endpoint: str,
    identity: bytes,
    on_message: Callable[[list[Any]], None],
    on_lost: Callable[[str], None],
    curve_keys: tuple[str, str] | None = None,
) -> ClientLink:
    """Connect to the server at ``endpoint``; its messages go to ``on_message(frames)``.

    ``identity`` names a DEALER to the server (a unix-socket connection is its own identity). ``on_lost(reason)``
    is called once when a unix-socket connection ends; ZeroMQ reconnects by itself and says nothing, so its
    clients tell a lost server by silence (heartbeats). ``curve_keys``: ``(own .key_secret, server's .key)``
    for a CURVE server (tcp only: callers refuse them with ``unix://``).

    Raises:
        ConnectionError: nothing listens at a ``unix://`` path (a ZeroMQ address connects lazily: no error here).
    """
    if is_stream(endpoint):
        return StreamDealer(endpoint, on_message, on_lost)
    configure = client_configurer(curve_keys) if curve_keys is not None else None
    return Dealer(endpoint, identity, on_message, configure)

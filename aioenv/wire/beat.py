"""How often a peer PINGs a server: the server says, from its own timeout.

A server drops a client (``--client-timeout``) or a worker host (``--worker-timeout``) it has not heard
from for its timeout. A peer that PINGs once a second under a timeout of one second or less is dropped
whenever one PING comes a moment late, and under a timeout below a second always. So the server does
not leave the rate to the peer: its reply to OPEN (a client) or JOIN (a worker host) carries
``Key.BEAT``, :func:`interval_for` its timeout, a quarter of it and at most :data:`HEARTBEAT`. A healthy
peer then misses three beats in a row before it is dropped, whatever timeout the operator chose.

A peer reads that field with :func:`heard_interval`, which never takes a value from the wire as it came:
a server that lies (zero, a negative, a string, a huge number) cannot make a peer flood it or fall
silent. Until the reply arrives, and with a server that sends no such field, a peer beats every
:data:`HEARTBEAT` seconds.
"""

from __future__ import annotations

import math

__all__ = ["BEATS_PER_TIMEOUT", "HEARTBEAT", "SHORTEST", "heard_interval", "interval_for"]

#: Seconds between a peer's PINGs when its server says nothing else, and the longest interval a server asks.
HEARTBEAT = 1.0
#: The shortest interval (seconds) a peer accepts: a server asking for less gets PINGs this often.
SHORTEST = 0.05
#: A server asks for this many PINGs per timeout.
BEATS_PER_TIMEOUT = 4


def interval_for(timeout: float) -> float:
    """Seconds between PINGs a server with ``timeout`` (seconds of silence before it drops a peer) asks for:
    ``timeout / 4``, at least :data:`SHORTEST` and at most :data:`HEARTBEAT`."""
    return min(HEARTBEAT, max(SHORTEST, timeout / BEATS_PER_TIMEOUT))


def heard_interval(value: object, own: float = HEARTBEAT) -> float:
    """The interval a peer beats at after its server's reply carried ``value`` (``Key.BEAT``).

    Args:
        value: the reply's field, as decoded: anything, since it came from the network.
        own: the peer's own interval (:data:`HEARTBEAT` unless configured shorter); never exceeded.

    Returns:
        ``value`` between :data:`SHORTEST` and ``own`` when it is a finite number, else ``own``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return own
    return min(own, max(SHORTEST, float(value)))

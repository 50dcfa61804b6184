"""Lifecycles as explicit states: an enum per kind of object and the transitions its class allows.

A pool, a coordinator (local or remote), a server and a worker slot each live through a few states (not started,
starting, running, closing, closed; a slot: starting its process, ready, given up, ...). Read from loose flags
(``closed``, ``_started``, an attribute that exists or not) those states admit combinations that mean nothing, and
a method cannot tell "not started yet" from "started and failed". Here each object holds one :class:`Lifecycle`:
its state is one member of its enum, and :meth:`Lifecycle.move` refuses a transition its table does not list
(:class:`InvalidTransition`, a bug in aioenv, never the user's mistake: the public methods check the state first
and raise :class:`aioenv.PoolClosed` or :class:`aioenv.UsageError` with what to do). The tables are data, so
``tests/core/test_lifecycle.py`` walks every pair of states through each of them: each allowed transition is
taken, each other one refused. This is Gymnasium's ``AsyncState`` guard, with the allowed moves written down.

Pure bookkeeping: nothing here touches a loop, a socket or a process.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

__all__ = [
    "COORDINATOR",
    "POOL",
    "REMOTE",
    "SERVER",
    "InvalidTransition",
    "Lifecycle",
    "Phase",
    "Transitions",
]

S = TypeVar("S", bound=enum.Enum)

#: For each state, the states it may move to.
Transitions = Mapping[S, frozenset[S]]


class InvalidTransition(RuntimeError):
    """A transition the object's table does not allow: aioenv's own bug (its public methods check first)."""


class Lifecycle(Generic[S]):
    """The state of one object (``what`` names it in errors), moved only along ``allowed``.

    Args:
        what: the object, for errors (``"pool"``, ``"worker slot w3"``).
        start: the first state.
        allowed: for each state, the states it may move to (a state missing from it is final).
    """

    __slots__ = ("_allowed", "state", "what")

    def __init__(self, what: str, start: S, allowed: Transitions[S]) -> None:
        self.what = what
        self.state = start
        self._allowed = allowed

    def move(self, to: S) -> S:
        """Enter ``to``; returns the state left.

        Raises:
            InvalidTransition: ``to`` is not allowed from the current state (nothing changes).
        """
        was = self.state
        if to not in self._allowed.get(was, frozenset()):
            raise InvalidTransition(f"the {self.what} cannot go from {was.name} to {to.name}")
        self.state = to
        return was

    def can(self, to: S) -> bool:
        """Whether :meth:`move` to ``to`` would be allowed now."""
        return to in self._allowed.get(self.state, frozenset())

    def __repr__(self) -> str:
        return f"<{self.what}: {self.state.name}>"


class Phase(enum.Enum):
    """The life of a pool, a local coordinator and a remote one (a client of a server).

    ``NEW``: made, not started. ``STARTING``: ``start()`` runs (workers start, envs are made). ``RUNNING``:
    serves calls. ``LOST`` (a remote coordinator only): the server is gone or dropped this client; calls fail
    with :class:`aioenv.ConnectionLost` until it is closed. ``CLOSING``: ``aclose()`` runs; in-flight requests
    fail with :class:`aioenv.PoolClosed`. ``CLOSED``: everything is released; final.
    """

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    LOST = "lost"
    CLOSING = "closing"
    CLOSED = "closed"


_NEW, _STARTING, _RUNNING, _LOST, _CLOSING, _CLOSED = (
    Phase.NEW,
    Phase.STARTING,
    Phase.RUNNING,
    Phase.LOST,
    Phase.CLOSING,
    Phase.CLOSED,
)

#: A pool: every close passes through CLOSING (what was made is released there), also one before the start
#: (its private directory) and one of a start that failed.
POOL: Transitions[Phase] = {
    _NEW: frozenset((_STARTING, _CLOSING)),
    _STARTING: frozenset((_RUNNING, _CLOSING)),
    _RUNNING: frozenset((_CLOSING,)),
    _CLOSING: frozenset((_CLOSED,)),
}

#: A local coordinator: as a pool (a server's session may close its coordinator while it starts).
COORDINATOR: Transitions[Phase] = POOL

#: A remote coordinator: as a pool, and a connection that is lost while it starts or runs.
REMOTE: Transitions[Phase] = {
    _NEW: frozenset((_STARTING, _CLOSING)),
    _STARTING: frozenset((_RUNNING, _LOST, _CLOSING)),
    _RUNNING: frozenset((_LOST, _CLOSING)),
    _LOST: frozenset((_CLOSING,)),
    _CLOSING: frozenset((_CLOSED,)),
}

#: A server (:class:`aioenv.server.server.Server`): as a pool. STARTING: ``start()`` binds its ports (a start that
#: raised is closed from there); RUNNING: it serves clients; CLOSING: ``aclose()`` closes its sessions.
SERVER: Transitions[Phase] = POOL

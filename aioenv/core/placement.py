"""Where a server's worker processes run: pure bookkeeping, no sockets (see :mod:`aioenv.server.fleet`).

A *host* is a place that can run worker processes: the server's own machine (``"local"``) and each
``aioenv worker --connect ...`` agent that joined. A host has a capacity (envs it may host; None:
unlimited), the executor it serves (None: any) and a load (envs placed on it now). A pool's envs go in
blocks, one block per worker process; each block goes to the *least-loaded* host that has room for
it and serves the pool's executor: the lowest ``(load + block) / capacity``, ties broken in favour of
remote hosts (they exist to take load off the server), then by name. A host of unlimited capacity
(the server's machine, unless ``--local-capacity`` bounds it) is the last resort: it takes a block
only when no bounded host has room. Placing all of a pool's blocks
is the caller's to undo when one does not fit (:meth:`Placement.release`); the
:class:`~aioenv.errors.CapacityError` says what each host has free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aioenv.errors import CapacityError

__all__ = ["LOCAL", "Host", "Placement"]

#: The name of the server's own machine among the hosts.
LOCAL = "local"


@dataclass
class Host:
    """A place that runs worker processes.

    Attributes:
        name: ``"local"`` or the agent's name.
        capacity: envs it may host (None: unlimited).
        executor: the executor it serves (None: any).
        load: envs placed on it now.
    """

    name: str
    capacity: int | None
    executor: str | None = None
    load: int = 0

    @property
    def free(self) -> int | None:
        """Envs it may still take (None: unlimited)."""
        return None if self.capacity is None else self.capacity - self.load

    def fits(self, envs: int, executor: str) -> bool:
        """Whether a block of ``envs`` for ``executor`` may go here."""
        if self.executor is not None and self.executor != executor:
            return False
        return self.capacity is None or self.load + envs <= self.capacity

    def describe(self) -> str:
        """``name: load/capacity executor`` for error messages and status."""
        cap = "unlimited" if self.capacity is None else str(self.capacity)
        return f"{self.name} {self.load}/{cap} envs ({self.executor or 'any executor'})"


class Placement:
    """The hosts and their loads; see the module docstring."""

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}

    def add(self, name: str, capacity: int | None, executor: str | None = None) -> Host:
        """A host joins (or rejoins: its load starts at 0)."""
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        host = Host(name, capacity, executor)
        self.hosts[name] = host
        return host

    def remove(self, name: str) -> Host | None:
        """A host leaves; its envs must be placed again by the caller."""
        return self.hosts.pop(name, None)

    def _score(self, host: Host, envs: int) -> tuple[float, int, str]:
        frac = float("inf") if host.capacity is None else (host.load + envs) / max(host.capacity, 1)
        return (frac, 0 if host.name != LOCAL else 1, host.name)

    def serves(self, executor: str) -> bool:
        """Whether any host runs ``executor`` envs (whatever its load)."""
        return any(h.executor in (None, executor) for h in self.hosts.values())

    def choose(self, envs: int, executor: str, *, exclude: Sequence[str] = ()) -> Host:
        """Reserve room for a block of ``envs`` on the least-loaded host that fits; CapacityError if none."""
        candidates = [h for h in self.hosts.values() if h.name not in exclude and h.fits(envs, executor)]
        if not candidates:
            if self.hosts and not self.serves(executor):
                raise CapacityError(f"no worker host runs {executor} envs: {self._hosts_text(executor)}")
            raise CapacityError(self._no_room(envs, executor))
        host = min(candidates, key=lambda h: self._score(h, envs))
        host.load += envs
        return host

    def release(self, name: str, envs: int) -> None:
        """A block of ``envs`` left host ``name`` (a host that left already is ignored)."""
        host = self.hosts.get(name)
        if host is not None:
            host.load = max(0, host.load - envs)

    def _no_room(self, envs: int, executor: str) -> str:
        return f"no worker host has room for {envs} more {executor} envs: {self._hosts_text(executor)}"

    def _hosts_text(self, executor: str) -> str:
        if not self.hosts:
            return "no worker host is connected (start one with `aioenv worker --connect ...`)"
        return "hosts: " + "; ".join(h.describe() for h in self.hosts.values())

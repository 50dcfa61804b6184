"""``aioenv ray-hosts``: place worker hosts on a Ray cluster and keep them until SIGTERM or SIGINT.

The body of the command (its options are declared in :mod:`aioenv.cli.main`): connect to Ray, place the
hosts with :func:`aioenv.ray.place_hosts`, print where each runs, wait for a signal, then close them (each
host stops its worker processes and leaves the server; every actor and the placement group are
removed). Killed without a chance to close (SIGKILL), the command is a Ray driver that died: Ray ends its
actors, and each host dies with its actor (see docs/ray.md).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from aioenv.errors import UsageError

__all__ = ["parse_resources", "run_ray_hosts"]

log = logging.getLogger("aioenv.ray")


def parse_resources(pairs: Sequence[str]) -> dict[str, float]:
    """``("GPU=1", "sim=0.5")`` as ``{"GPU": 1.0, "sim": 0.5}``.

    Raises:
        ValueError: a pair is not ``NAME=AMOUNT`` with a positive amount.
    """
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, amount = pair.partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = 0.0
        if not sep or not name.strip() or not value > 0:
            raise ValueError(f"expected NAME=AMOUNT with a positive amount, got {pair!r}")
        out[name.strip()] = value
    return out


def run_ray_hosts(address: str | None, options: Mapping[str, Any], stop: threading.Event | None = None) -> None:
    """Connect to Ray (``address``; None: ``RAY_ADDRESS`` or the cluster on this machine), place the hosts
    (``options``: :func:`aioenv.ray.place_hosts`'s arguments), print them, and close them when SIGTERM or
    SIGINT arrives (or ``stop`` is set)."""
    try:
        import ray
    except ImportError:
        raise UsageError("aioenv ray-hosts needs Ray: pip install 'aioenv[ray]'") from None
    from rich.console import Console
    from rich.table import Table

    from aioenv.ray.hosts import place_hosts

    ray.init(address=address, log_to_driver=True)
    stop = stop or threading.Event()
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        hosts = place_hosts(**options)
        try:
            table = Table(title=f"worker hosts on Ray, joined to {hosts.endpoint}")
            for column in ("host", "node", "node id", "pid"):
                table.add_column(column)
            for row in hosts.info():
                table.add_row(row.name, row.node_ip, row.node_id[:12], str(row.host_pid))
            Console(stderr=True).print(table)
            log.info("%d worker hosts placed: SIGTERM or SIGINT closes them", len(hosts.names))
            while not stop.wait(1.0):
                pass
            log.info("closing %d worker hosts", len(hosts.names))
        finally:
            hosts.close()
    finally:
        ray.shutdown()

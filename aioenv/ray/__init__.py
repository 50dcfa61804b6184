"""Worker hosts placed by Ray (``pip install 'aioenv[ray]'``): a server's fleet on a Ray cluster.

::

    from aioenv.ray import place_hosts

    hosts = place_hosts("tcp://10.0.0.5:5556", count=8, capacity=64, num_cpus=4, strategy="SPREAD")
    ...  # pools of the server at tcp://10.0.0.5:5555 now run on the Ray nodes
    hosts.close()

Each host is ``aioenv worker --connect`` run by a Ray actor (:mod:`aioenv.ray.actor`) in a bundle of a
placement group (:mod:`aioenv.ray.hosts`); a dead actor is restarted by Ray and its host joins the server
again. ``aioenv ray-hosts`` is the command-line form (:mod:`aioenv.ray.command`). docs/ray.md tells the
whole story: networking, keys, failures, what happens when the driver dies.

The names below are loaded on first use, so ``python -m aioenv.ray.host`` (run on every node) does not
import Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aioenv.ray.hosts import STRATEGIES, HostInfo, RayHosts, place_hosts, place_hosts_async, reachable_endpoint

__all__ = ["STRATEGIES", "HostInfo", "RayHosts", "place_hosts", "place_hosts_async", "reachable_endpoint"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from aioenv.ray import hosts

        return getattr(hosts, name)
    raise AttributeError(f"module 'aioenv.ray' has no attribute {name!r}")

"""Place worker hosts on a Ray cluster: :func:`place_hosts` and the :class:`RayHosts` it returns.

``place_hosts(connect, count, capacity=...)`` reserves a placement group of ``count`` bundles (each
``{"CPU": num_cpus, **resources}``, spread over the nodes with ``SPREAD`` or packed with ``PACK``), waits
until Ray has placed it (an unschedulable group fails after ``ready_timeout`` seconds instead of hanging),
starts one :class:`~aioenv.ray.actor.HostActor` in each bundle and waits until every host joined the
server. :meth:`RayHosts.close` stops each host (it tells the server it leaves), kills each actor for good
and removes the placement group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import secrets
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aioenv.errors import CapacityError, ConnectionLost, UsageError
from aioenv.ray.actor import REFUSED, CurveKeys, HostActor, HostConfig
from aioenv.wire.options import EXECUTORS, choice, positive_int, positive_seconds

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("aioenv.ray needs Ray: pip install 'aioenv[ray]'") from exc

__all__ = ["STRATEGIES", "HostInfo", "RayHosts", "place_hosts", "place_hosts_async", "reachable_endpoint"]

log = logging.getLogger("aioenv.ray")

#: Ray's placement strategies: ``PACK`` (as few nodes as fit), ``SPREAD`` (as many as possible), and their
#: strict forms (all on one node; each on a different node, or fail).
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_WILDCARDS = ("0.0.0.0", "*", "::", "[::]")
_TCP = re.compile(r"tcp://(?P<host>\[[^\]]+\]|[^:/\s]+):(?P<port>\d+)")


@dataclasses.dataclass(frozen=True)
class HostInfo:
    """One placed worker host as its actor sees it."""

    name: str  #: its name on the server (``aioenv status`` lists it)
    node_id: str  #: the Ray node it runs on
    node_ip: str  #: that node's address
    hostname: str
    actor_pid: int
    host_pid: int | None  #: the ``aioenv.ray.host`` process (None: not running)
    joined: bool  #: the server admitted it (and has not lost it since)
    joins: int  #: how often this actor's host joined (a restarted actor starts again at 0)


def reachable_endpoint(connect: str) -> str:
    """The worker port as Ray's nodes dial it: ``tcp://0.0.0.0:P`` (or ``*``) becomes this node's address
    (``ray.util.get_node_ip_address()``, never loopback); any other address is kept.

    Raises:
        UsageError: not a ``tcp://HOST:PORT`` address, port 0, or a loopback address while the cluster has
            nodes on other machines (their actors could never reach it).
    """
    found = _TCP.fullmatch(connect)
    if found is None or int(found["port"]) == 0:
        raise UsageError(f"connect must be the server's worker port as tcp://HOST:PORT (port not 0), got {connect!r}")
    host, port = found["host"], found["port"]
    here = ray.util.get_node_ip_address()
    if host in _WILDCARDS:
        return f"tcp://{here}:{port}"
    if host == "localhost" or host.startswith("127.") or host == "[::1]":
        elsewhere = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")} - {here, host})
        if elsewhere:
            raise UsageError(
                f"{connect} is a loopback address: the actors on the Ray nodes at {', '.join(elsewhere)} cannot "
                f"dial it. Bind the worker port on 0.0.0.0 (or {here}) and pass tcp://{here}:{port}"
            )
    return f"tcp://{host}:{port}"


def _read_keys(keys: tuple[str, str] | None) -> CurveKeys | None:
    """``(host .key_secret file, server .key file)`` read on the driver (the nodes need not have them)."""
    if keys is None:
        return None
    own, server = (Path(k) for k in keys)
    try:
        secret, public = own.read_text(), server.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the CURVE key files {own} and {server}: {exc.strerror}") from None
    if "secret-key" not in secret:
        raise UsageError(f"{own} holds no secret key: pass the host's .key_secret file (made by aioenv keygen)")
    return CurveKeys(secret, public)


class RayHosts:
    """Worker hosts placed as Ray actors (returned by :func:`place_hosts`); close it to remove them.

    Attributes:
        endpoint: the worker port the hosts dial.
        names: the hosts' names on the server (``aioenv status``), one per actor.
        actors: the Ray actor handles (one :class:`~aioenv.ray.actor.HostActor` each).
        placement_group: the Ray placement group holding one bundle per host.
    """

    def __init__(self, endpoint: str, names: list[str], actors: list[Any], group: PlacementGroup) -> None:
        self.endpoint = endpoint
        self.names = names
        self.actors = actors
        self.placement_group = group
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began."""
        return self._closed

    def __repr__(self) -> str:
        return f"<RayHosts {len(self.actors)} hosts dialing {self.endpoint}{' closed' if self._closed else ''}>"

    def _states(self, method: str, timeout: float, *args: Any) -> list[dict[str, Any] | BaseException]:
        """Each actor's answer to ``method(*args)``, or the error that came instead (a dead actor, a timeout)."""
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        out: list[dict[str, Any] | BaseException] = []
        for ref in refs:
            try:
                out.append(ray.get(ref, timeout=0))
            except (RayError, GetTimeoutError) as exc:
                out.append(exc)
        return out

    def info(self, timeout: float = 30.0) -> list[HostInfo]:
        """Where each host runs now (a restarted actor may be on another node).

        Raises:
            ConnectionLost: an actor did not answer within ``timeout`` seconds (dead, or restarting).
        """
        rows = []
        for name, state in zip(self.names, self._states("state", timeout), strict=True):
            if isinstance(state, BaseException):
                raise ConnectionLost(f"the Ray actor of worker host {name} did not answer: {state}")
            rows.append(_info(state))
        return rows

    def wait_joined(self, timeout: float = 60.0) -> list[HostInfo]:
        """Wait until every host has joined the server; where each runs.

        Raises:
            ConnectionLost: a host did not join within ``timeout`` seconds (the server is not listening at
                :attr:`endpoint`, is not reachable from the node, or does not admit the host's CURVE key).
            UsageError: the server refused a host for good (e.g. a protocol version it does not speak).
        """
        states = self._states("wait_joined", timeout + 10.0, timeout)
        late = []
        for name, state in zip(self.names, states, strict=True):
            if isinstance(state, BaseException):
                late.append(f"{name}: its Ray actor did not answer ({type(state).__name__})")
            elif state["code"] == REFUSED:
                raise UsageError(f"the server at {self.endpoint} refused worker host {name}: {state['log']}")
            elif not state["joined"]:
                late.append(f"{name} on node {state['node_ip']}: {state['log']}")
        if late:
            raise ConnectionLost(
                f"worker hosts did not join {self.endpoint} within {timeout:g} s: is `aioenv serve --worker-bind` "
                "listening there and reachable from the Ray nodes (with --auth: is the hosts' key admitted)? "
                + "; ".join(late)
            )
        return [_info(s) for s in states if isinstance(s, dict)]

    async def wait_joined_async(self, timeout: float = 60.0) -> list[HostInfo]:
        """:meth:`wait_joined` without blocking the event loop (a server in this loop must answer the JOINs)."""
        return await asyncio.to_thread(self.wait_joined, timeout)

    def close(self, grace: float = 10.0) -> None:
        """Stop every host (SIGTERM: its worker processes stop and it tells the server it leaves; SIGKILL to
        its process group after ``grace`` seconds), kill every actor for good (no restart) and remove the
        placement group. Idempotent; safe while actors are dead or restarting."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._states("stop", grace + 5.0, grace)
        for actor in self.actors:
            with contextlib.suppress(RayError, ValueError):
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(RayError, ValueError):
            remove_placement_group(self.placement_group)
        log.info("closed %d worker hosts (dialing %s)", len(self.actors), self.endpoint)

    async def aclose(self, grace: float = 10.0) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.to_thread(self.close, grace)

    def __enter__(self) -> RayHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RayHosts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _info(state: dict[str, Any]) -> HostInfo:
    return HostInfo(**{f.name: state[f.name] for f in dataclasses.fields(HostInfo)})


def place_hosts(
    connect: str,
    count: int,
    *,
    capacity: int,
    executor: str = "inline",
    num_cpus: float = 1.0,
    resources: Mapping[str, float] | None = None,
    strategy: str = "SPREAD",
    keys: tuple[str, str] | None = None,
    name_prefix: str | None = None,
    max_restarts: int = -1,
    server_timeout: float = 10.0,
    ready_timeout: float = 60.0,
    join_timeout: float | None = 60.0,
    log_level: str = "WARNING",
    runtime_env: Mapping[str, Any] | None = None,
) -> RayHosts:
    """Place ``count`` worker hosts as Ray actors, each joining the server's worker port ``connect``.

    Each host is ``aioenv worker --connect`` run by a Ray actor: it runs worker processes for the server's
    pools, up to ``capacity`` envs at once, with ``executor``. Connects to Ray with ``ray.init()`` first when
    this process is not connected yet (``RAY_ADDRESS``, a cluster running on this machine, or a new one).

    Args:
        connect: the server's worker port (its ``--worker-bind``), e.g. ``"tcp://10.0.0.5:5556"``; a
            wildcard address (``tcp://0.0.0.0:5556``, what a server in this process binds) becomes this
            node's address (see :func:`reachable_endpoint`).
        count: how many hosts (Ray actors).
        capacity: envs each host may run at once.
        executor: ``"inline"``, ``"thread"`` or ``"async"``: the server sends a host only pools of its kind.
        num_cpus: CPUs Ray reserves for each host (its worker processes use them; fractions allowed).
        resources: custom Ray resources each host needs, e.g. ``{"sim_node": 1}``.
        strategy: how the bundles go on the nodes: one of :data:`STRATEGIES`.
        keys: ``(host .key_secret file, server .key file)`` for a server with ``--auth``, read here and
            handed to the actors in memory (never on a command line, in the environment, on disk or in a log).
        name_prefix: hosts are named ``{name_prefix}-{i}`` (default: ``ray-`` and 4 random hex digits).
        max_restarts: how often Ray restarts a host's actor that died (its node died, its process was
            killed); -1: without limit. A restarted actor starts a new host, which joins by itself.
        server_timeout: seconds of server silence after which a host stops its workers and joins again.
        ready_timeout: seconds to wait for Ray to place the placement group.
        join_timeout: seconds to wait until every host joined the server; None: return without waiting.
        log_level: lines of the hosts' logs at this level or above go to the actors' stderr (which Ray
            shows on the driver's console).
        runtime_env: Ray's runtime environment for the actors (e.g. ``working_dir`` or ``py_modules``
            holding the envs' code).

    Raises:
        CapacityError: Ray could not place the group within ``ready_timeout`` seconds.
        ConnectionLost: a host did not join within ``join_timeout`` seconds (see :meth:`RayHosts.wait_joined`).
        UsageError: a bad argument or key file.
    """
    count = positive_int("count", count, error=UsageError, unit="number of hosts")
    capacity = positive_int("capacity", capacity, error=UsageError, unit="number of envs")
    choice("executor", executor, EXECUTORS, error=UsageError)
    choice("strategy", strategy, STRATEGIES, error=UsageError)
    choice("log_level", str(log_level).upper(), LOG_LEVELS, error=UsageError)
    if positive_seconds("server_timeout", server_timeout, error=UsageError) is None:
        raise UsageError("server_timeout must be a positive number of seconds, got None")
    bundle = _bundle(num_cpus, resources)
    curve = _read_keys(keys)
    if not ray.is_initialized():
        ray.init()
    endpoint = reachable_endpoint(connect)
    prefix = name_prefix or f"ray-{secrets.token_hex(2)}"
    group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy, name=f"aioenv-{prefix}")
    try:
        ray.get(group.ready(), timeout=ready_timeout)
    except GetTimeoutError:
        remove_placement_group(group)
        raise CapacityError(
            f"Ray could not place {count} worker hosts of {bundle} ({strategy}) within {ready_timeout:g} s: "
            f"the cluster has {ray.cluster_resources()}, of which {ray.available_resources()} are free"
        ) from None
    remote = ray.remote(HostActor)
    names, actors = [], []
    for i in range(count):
        config = HostConfig(endpoint, capacity, executor, f"{prefix}-{i}", server_timeout, log_level, curve)
        options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "resources": dict(resources or {}),
            "max_restarts": max_restarts,
            "max_task_retries": -1,  # its methods are idempotent: a call made while it restarts waits for it
            "max_concurrency": 4,  # state() and stop() answer while wait_joined() waits
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
        }
        if runtime_env is not None:
            options["runtime_env"] = dict(runtime_env)
        actors.append(remote.options(**options).remote(config))
        names.append(config.name)
    hosts = RayHosts(endpoint, names, actors, group)
    log.info("placed %d worker hosts %s-* (%s, %s each) dialing %s", count, prefix, strategy, bundle, endpoint)
    if join_timeout is not None:
        try:
            hosts.wait_joined(join_timeout)
        except BaseException:
            hosts.close(grace=1.0)
            raise
    return hosts


def _bundle(num_cpus: float, resources: Mapping[str, float] | None) -> dict[str, float]:
    """One host's placement-group bundle."""
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, int | float) or num_cpus < 0:
        raise UsageError(f"num_cpus must be a number >= 0, got {num_cpus!r}")
    bundle = {"CPU": float(num_cpus)} if num_cpus > 0 else {}
    for name, amount in (resources or {}).items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount <= 0:
            raise UsageError(f"resource {name!r} must be a positive amount, got {amount!r}")
        bundle[str(name)] = float(amount)
    if not bundle:
        raise UsageError("a host needs num_cpus > 0 or a custom resource (a placement-group bundle cannot be empty)")
    return bundle


async def place_hosts_async(connect: str, count: int, **options: Any) -> RayHosts:
    """:func:`place_hosts` without blocking the event loop: use it where a server runs in the same loop (it
    must answer the hosts' JOINs). Cancelled, it closes the hosts it placed once they are up."""
    loop = asyncio.get_running_loop()
    placing = loop.run_in_executor(None, functools.partial(place_hosts, connect, count, **options))
    try:
        return await asyncio.shield(placing)
    except asyncio.CancelledError:

        def close_later(done: asyncio.Future[RayHosts]) -> None:
            if not done.cancelled() and done.exception() is None:
                threading.Thread(target=done.result().close, daemon=True).start()

        placing.add_done_callback(close_later)
        raise

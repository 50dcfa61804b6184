"""Prometheus metrics of ``aioenv serve --metrics-port PORT`` (prometheus-client), on ``--metrics-bind``
(loopback by default: the figures show the load, errors and worker hosts' names, and nobody needs a key to read them).

Request latency and errors are recorded as rows are relayed (:class:`ServerMetrics`); the state
(clients, pools, envs by state, requests in flight, workers, restarts, protocol errors) is read from
the server when Prometheus scrapes, so serving costs nothing for it.

| metric | type | labels |
| --- | --- | --- |
| ``aioenv_request_seconds`` | histogram | ``kind`` (step, reset, call): request received -> row answered |
| ``aioenv_errors_total`` | counter | ``type`` (StepTimeout, WorkerCrashed, EnvError, ...): rows that failed |
| ``aioenv_timeouts_total`` | counter | rows past their deadline (errors or truncated rows) |
| ``aioenv_envs`` | gauge | ``state`` (made, busy) |
| ``aioenv_requests_in_flight``, ``aioenv_clients``, ``aioenv_pools``, ``aioenv_workers`` | gauge | |
| ``aioenv_worker_hosts``; ``aioenv_host_envs``, ``aioenv_host_capacity`` (with ``--worker-bind``) | gauge | host |
| ``aioenv_worker_hosts_lost_total`` (with ``--worker-bind``) | counter | |
| ``aioenv_worker_restarts_total``, ``aioenv_protocol_errors_total`` | counter | |
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from aioenv.core.replies import Block
    from aioenv.core.sinks import Part

__all__ = ["ServerGauges", "ServerMetrics"]

log = logging.getLogger("aioenv.metrics")

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class ServerGauges:
    """A read-only snapshot of a server's state, taken when Prometheus scrapes.

    The server builds it (``Server.gauges``); this module never reads the server's own objects, so
    metrics depend on the server's state, not on its code.
    """

    made: int = 0  # envs of all pools
    busy: int = 0  # envs with a request in flight
    in_flight: int = 0  # requests sent to workers, not answered
    clients: int = 0  # client processes with an open pool
    pools: int = 0  # open sessions
    workers: int = 0  # worker processes
    restarts: int = 0  # workers restarted (crash or deadline)
    protocol_errors: int = 0  # malformed messages received
    hosts: list[dict[str, Any]] | None = None  # one row per placed host (fleet status); None: no worker port
    hosts_joined: int = 0  # worker hosts connected now
    hosts_lost: int = 0  # worker hosts dropped for silence


class ServerMetrics:
    """The server's metrics in a registry of their own (several servers in one process stay apart).

    ``gauges`` is called from the HTTP thread at each scrape: it must copy what it reads.
    """

    def __init__(self, gauges: Callable[[], ServerGauges]) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "aioenv_request_seconds",
            "Seconds from the server receiving a request to each row's answer",
            ["kind"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter("aioenv_errors", "Rows answered with an error", ["type"], registry=self.registry)
        self.timeouts = Counter("aioenv_timeouts", "Rows past their deadline", registry=self.registry)
        self.registry.register(_StateCollector(gauges))

    def rows(self, kind: str, seconds: float, part: Part) -> None:
        """Record ``part``'s rows, answered ``seconds`` after their request arrived."""
        self._latency(kind, seconds, part.env_ids.size)
        self._failed(type(err).__name__ for err in part.errors.values())
        self._timeouts(part.binfo, part.infos)

    def block(self, block: Block, spans: list[tuple[float, int]], errors: dict[int, str]) -> None:
        """Record a block of rows relayed as it came: ``spans`` gives, per request, how long ago it arrived
        and how many of the block's rows answer it; ``errors``: its failed rows' error types
        (:meth:`aioenv.core.replies.Block.error_types`)."""
        for seconds, count in spans:
            self._latency(block.kind, seconds, count)
        self._failed(errors.values())
        self._timeouts(block.binfo, block.infos)

    def _latency(self, kind: str, seconds: float, count: int) -> None:
        observe = self.latency.labels(kind).observe
        for _ in range(count):
            observe(seconds)

    def _failed(self, names: Iterable[str]) -> None:
        for name in names:
            self.errors.labels(name).inc()
            if name == "StepTimeout":
                self.timeouts.inc()

    def _timeouts(self, binfo: dict[str, Any] | None, infos: list[Any] | None) -> None:
        """Rows whose info says ``timeout`` (truncated at their deadline)."""
        if isinstance(binfo, dict) and "timeout" in binfo:
            self.timeouts.inc(int(np.count_nonzero(binfo.get("_timeout", binfo["timeout"]))))
        elif infos is not None:
            self.timeouts.inc(sum(1 for info in infos if isinstance(info, dict) and info.get("timeout")))

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (a daemon thread)."""
        start_http_server(port, addr=addr, registry=self.registry)
        log.info("Prometheus metrics on http://%s:%d/metrics", addr, port)


class _StateCollector(Collector):
    def __init__(self, gauges: Callable[[], ServerGauges]) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[Any]:
        g = self.gauges()
        envs = GaugeMetricFamily("aioenv_envs", "Envs of all pools, by state", labels=["state"])
        envs.add_metric(["made"], g.made)
        envs.add_metric(["busy"], g.busy)
        yield envs
        yield GaugeMetricFamily("aioenv_requests_in_flight", "Requests sent to workers, not answered", g.in_flight)
        yield GaugeMetricFamily("aioenv_clients", "Client processes with an open pool", g.clients)
        yield GaugeMetricFamily("aioenv_pools", "Open pools (sessions)", g.pools)
        yield GaugeMetricFamily("aioenv_workers", "Worker processes", g.workers)
        yield CounterMetricFamily("aioenv_worker_restarts", "Workers restarted (crash or deadline)", g.restarts)
        yield CounterMetricFamily("aioenv_protocol_errors", "Malformed messages received", g.protocol_errors)
        if g.hosts is None:
            return
        yield GaugeMetricFamily("aioenv_worker_hosts", "Worker hosts joined (aioenv worker)", g.hosts_joined)
        yield CounterMetricFamily("aioenv_worker_hosts_lost", "Worker hosts dropped for silence", g.hosts_lost)
        load = GaugeMetricFamily("aioenv_host_envs", "Envs placed on each host", labels=["host"])
        room = GaugeMetricFamily("aioenv_host_capacity", "Envs each bounded host may run", labels=["host"])
        for row in g.hosts:
            load.add_metric([row["name"]], row["envs"])
            if row["capacity"] is not None:
                room.add_metric([row["name"]], row["capacity"])
        yield load
        yield room

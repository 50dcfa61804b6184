"""``aioenv serve``: a standalone coordinator that many clients share over tcp.

Each client pool (``aioenv.make(..., endpoint="tcp://host:5555")``, see :mod:`aioenv.core.remote`) is a
*session*: the server makes its envs with a :class:`~aioenv.core.coordinator.Coordinator` of its own
(local worker processes), so sessions are isolated from each other (a crash, a deadline or a flood
in one never touches another) and a session has exactly the semantics of an embedded pool. The
server relays each request to the session's coordinator and the rows back as they finish
(:mod:`aioenv.core.relay`).

Admission: env sources are names only (a gymnasium id or ``"pkg.module:factory"``), checked against
``allow`` patterns and their env_kwargs against ``allow_kwargs`` rules (:mod:`aioenv.server.allow`); without
patterns only gymnasium ids are served, since a ``"module:callable"`` name would let any client call any
importable function on the server, and without rules no env_kwargs. What a name of code leads to is checked
before the pool starts: a class or a function defined in the module it names (or a gymnasium id that module
registers), never anything reached through it: the worker that makes the env checks it before it calls anything
(:func:`workers.sources.reach`). The server itself never imports a client's module: no env code runs in its
process. A CALL names a public attribute of the env only: no ``_`` prefix, no dots.
``max_envs`` (all sessions) and ``max_envs_per_client`` (the pools of one client) bound what may be
made, ``max_workers`` and ``max_workers_per_client`` the worker processes (a pool asking for more gets
what is left); beyond them :class:`~aioenv.errors.CapacityError`. Who a client is (:class:`_Client`):
with ``auth``, its public key, which its handshake proved; else its connection. The name it sends is
a label, bounded and shown escaped, never counted by.

Worker hosts: with ``worker_bind``, ``aioenv worker --connect`` processes on any machine join the
server's :class:`~aioenv.server.fleet.Fleet` and each pool's worker processes are placed on the least-loaded
host with room (:mod:`aioenv.core.placement`); a host that dies or stops answering has its envs re-made
elsewhere. Without it, every pool runs on local worker processes.

Liveness: a session the server has not heard from for ``client_timeout`` seconds is closed and its
envs released. Clients PING as often as the reply to OPEN asks: a quarter of ``client_timeout``, at most
every second (:mod:`aioenv.wire.beat`), so a healthy client is never dropped for one late PING.
Garbage on the port never stops the server: a malformed message is answered with a ``ProtocolError`` when its
sender can be told, and dropped.
Shutdown (SIGTERM/SIGINT on ``aioenv serve``): every session is closed (requests in flight are
answered with ``PoolClosed``, a pool asked for meanwhile is refused), every worker stopped. The server's
life is a :class:`~aioenv.core.lifecycle.Phase` (``Server.life``): NEW, STARTING, RUNNING, CLOSING, CLOSED,
once each (:data:`~aioenv.core.lifecycle.SERVER`).

Logs: a line per pool opened, closed or dropped, and per client request with failed rows (client,
request id, envs, error type: a warning for deadlines and crashes, information for an env's error);
at DEBUG, a line per request as it arrives. The ids are also ``extra`` fields (``--log-json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import zmq

from aioenv._version import __version__
from aioenv.transport.auth import ServerAuth

if TYPE_CHECKING:
    from aioenv.server.metrics import ServerGauges, ServerMetrics
from aioenv.core.coordinator import Coordinator
from aioenv.core.lifecycle import SERVER, Lifecycle, Phase
from aioenv.core.relay import BlockEntry, PartEntry, parts_fields
from aioenv.core.replies import Block, Relayed
from aioenv.core.sinks import Part
from aioenv.core.sources import EnvSources, parse_sources
from aioenv.errors import AioEnvError, CapacityError, ConnectionLost, PoolClosed, ProtocolError, UsageError
from aioenv.logs import peer_name, printable
from aioenv.server.allow import AllowList
from aioenv.server.exposure import exposure_warnings
from aioenv.server.fleet import Fleet
from aioenv.server.peers import DroppedPeers, Nonces, PeerLimits, Sweep, Tally, Unread
from aioenv.transport.router import Peer, Router
from aioenv.transport.slab import Slab
from aioenv.transport.spawn import TEMPLATE_WAIT, usable_cpus, warm_up
from aioenv.transport.stream import StreamRouter, is_stream
from aioenv.transport.zmqio import frames_nbytes
from aioenv.wire.beat import interval_for
from aioenv.wire.errors import relay_wire
from aioenv.wire.options import (
    AUTORESET_MODES,
    EXECUTORS,
    ON_TIMEOUT,
    AutoresetName,
    Executor,
    OnTimeout,
    choice,
    client_label,
    positive_int,
)
from aioenv.wire.protocol import Key, Op, decode, encode, leaves_from_wire
from aioenv.wire.spaces import is_portable, not_portable, space_from_description
from aioenv.wire.version import PROTOCOL_VERSION

__all__ = ["Server", "ServerConfig"]

log = logging.getLogger("aioenv.server")

_KINDS = {Op.STEP: "step", Op.RESET: "reset", Op.CALL: "call"}
#: The longest env name an OPEN may carry (names are kept per pool and shown in the status).
_MAX_ENV_NAME = 256
#: Pools listed one by one in a STATUS reply (the rest are counted), so that the reply has a bounded size.
_STATUS_POOLS = 100
_OPERATIONAL = frozenset(("StepTimeout", "WorkerCrashed", "ProtocolError", "CapacityError"))  # logged as warnings


def default_max_envs() -> int:
    """``aioenv serve --max-envs`` by default: 256 envs per usable core."""
    return 256 * usable_cpus()


def default_max_workers() -> int:
    """``aioenv serve --max-workers`` by default: 4 worker processes per usable core, all clients together."""
    return 4 * usable_cpus()


def default_max_workers_per_client() -> int:
    """``aioenv serve --max-workers-per-client`` by default: 2 worker processes per usable core."""
    return 2 * usable_cpus()


@dataclass
class ServerConfig:
    """What ``aioenv serve`` was told (see ``aioenv serve --help``)."""

    bind: str = "tcp://127.0.0.1:5555"  # loopback: beyond it only with auth or insecure (aioenv.server.exposure)
    executor: Executor = "inline"
    workers: int | None = None
    max_envs: int | None = field(default_factory=default_max_envs)  # None: no bound
    max_envs_per_client: int | None = None
    max_pools_per_client: int | None = 64  # open pools of one client (see Server._who: who a client is)
    max_workers: int | None = field(default_factory=default_max_workers)  # all pools' worker processes
    max_workers_per_client: int | None = field(default_factory=default_max_workers_per_client)
    allow: Sequence[str] = ()  # env name patterns (aioenv.server.allow); none: gymnasium ids only
    allow_kwargs: Sequence[str] = ()  # "PATTERN=NAME,..." env_kwargs clients may pass; none: no env_kwargs
    client_timeout: float = 10.0
    auth: str | None = None  # a key directory (see aioenv.transport.auth); None: no authentication
    insecure: bool = False  # serve non-loopback ports without auth (aioenv.server.exposure); logged as warnings
    metrics_port: int | None = None  # serve Prometheus metrics on this port (see aioenv.server.metrics)
    metrics_bind: str = "127.0.0.1"  # the address of the metrics port
    worker_bind: str | None = None  # the port worker hosts join (see aioenv.server.fleet); None: local workers only
    local_capacity: int | None = None  # with worker_bind: envs the server hosts itself (None: as a last resort)
    worker_timeout: float = 10.0  # with worker_bind: seconds of silence before a worker host is dropped
    limits: PeerLimits = field(default_factory=PeerLimits)  # what one client may make the server hold


def _unportable(described: dict[str, Any]) -> str:
    """Why the envs' spaces cannot be served to a client over the network ("" when they can): a user-defined
    space's values travel only pickled, between a pool and its own workers."""
    for desc in described.values():
        for key in ("obs", "act"):
            space = space_from_description(desc[key])
            if not is_portable(space):
                return not_portable(space, "a server")
    return ""


@dataclass(frozen=True)
class _PoolOptions:
    """A client's pool options (OPEN's ``opt`` and ``kw``), checked, with the server's defaults in."""

    env_kwargs: dict[str, Any]
    autoreset_mode: AutoresetName
    executor: Executor
    on_timeout: OnTimeout
    workers: int  # worker processes, at most one per env
    max_concurrency: int | None
    max_worker_rss: int | None


@dataclass(frozen=True)
class _Client:
    """Who opens a pool, for the limits per client and the status: ``key`` is what the server knows (with
    ``--auth`` the client's public key, which its handshake proved; else its connection), ``shown`` how logs
    and the status name it, ``label`` the name the client gave itself (shown, never trusted)."""

    key: bytes
    shown: str
    label: str


@dataclass(eq=False)
class _Session:
    identity: bytes
    env: str
    num_envs: int
    coord: Coordinator
    last_seen: float
    outlet: _Outlet
    unread: Unread
    socket: Peer | None  # the connection it opened the pool on (to cut it off when it is dropped)
    who: _Client
    workers: int  # worker processes of the pool
    opened: float = field(default_factory=time.time)

    @property
    def client(self) -> str:
        """How logs and the status name its client (:attr:`_Client.shown`)."""
        return self.who.shown


@dataclass(eq=False)
class _Loose:
    """A connection without a pool (a STATUS, a PING, a refused OPEN): what it has not read counts against the
    bounds as a pool's does, until it has been silent for the client timeout."""

    unread: Unread
    last_seen: float
    socket: Peer | None


class _Outlet:
    """Where the relays of one client's session send blocks of rows (see :func:`aioenv.core.replies.route_block`):
    a worker's block is queued for the client whole, with the client call each run of rows answers."""

    __slots__ = ("client", "identity", "server")

    def __init__(self, server: Server, identity: bytes, client: str) -> None:
        self.server = server
        self.identity = identity
        self.client = client

    def forward(self, block: Block, segments: list[tuple[Any, np.ndarray, int, np.ndarray]]) -> None:
        self.server.queue(self.identity, BlockEntry(block, [(s.req_id, pos, start) for s, pos, start, _ in segments]))
        errors = block.error_types() if block.errors else {}
        if self.server.metrics is not None:
            now = time.monotonic()
            self.server.metrics.block(block, [(now - s.t0, pos.size) for s, pos, _, _ in segments], errors)
        for sink, _, start, env_ids in segments if errors else ():
            stop = start + env_ids.size
            failed = {int(env_ids[row - start]): name for row, name in errors.items() if start <= row < stop}
            if failed:
                _log_failed(self.client, sink.req_id, sink.kind, failed)


def _log_failed(client: str, req_id: int, kind: str, failed: dict[int, str]) -> None:
    """One log line per error type among a client request's failed rows (``failed``: env id -> error type),
    with ``client``, ``request_id``, ``kind``, ``env_ids`` and ``error`` as fields (``--log-json``). Deadlines
    and crashes are warnings; an env's own error is information (it is the client's to handle)."""
    by_type: dict[str, list[int]] = {}
    for env_id, error in failed.items():
        by_type.setdefault(error, []).append(env_id)
    for error, env_ids in by_type.items():
        level = logging.WARNING if error in _OPERATIONAL else logging.INFO
        if log.isEnabledFor(level):
            fields = {"client": client, "request_id": req_id, "kind": kind, "env_ids": env_ids, "error": error}
            log.log(
                level,
                "client %s request %s: %s failed for envs %s: %s",
                client,
                req_id,
                kind,
                env_ids,
                error,
                extra=fields,
            )


class _Relay(Relayed):
    """A sink of the session's coordinator that sends rows to the client as they arrive."""

    __slots__ = ("kind", "outlet", "req_id", "t0")
    outlet: _Outlet

    def __init__(self, outlet: _Outlet, req_id: int, kind: str) -> None:
        self.outlet = outlet
        self.req_id = req_id
        self.kind = kind
        self.t0 = time.monotonic()

    def deliver(self, part: Part, positions: np.ndarray) -> None:
        server = self.outlet.server
        server.queue(self.outlet.identity, PartEntry(self.req_id, part, positions))
        if server.metrics is not None:
            server.metrics.rows(self.kind, time.monotonic() - self.t0, part)
        if part.errors:
            ids = part.env_ids
            failed = {int(ids[row]): type(err).__name__ for row, err in part.errors.items()}
            _log_failed(self.outlet.client, self.req_id, self.kind, failed)

    def fail(self, exc: BaseException) -> None:
        err = exc if isinstance(exc, AioEnvError) else PoolClosed(str(exc))
        self.outlet.server.send(self.outlet.identity, Op.ERROR, {Key.ID: self.req_id, Key.ERROR: relay_wire(err)})


class Server:
    """The server's sessions behind one ROUTER socket; see the module docstring."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.allow = AllowList(config.allow, config.allow_kwargs)  # ValueError for a pattern it could not serve
        self.sessions: dict[bytes, _Session] = {}
        self._opening: dict[bytes, tuple[_Client, int, int]] = {}  # identity -> (client, envs, workers) while made
        self._loose: dict[bytes, _Loose] = {}  # connections without a pool that were answered (see _Loose)
        self._tally = Tally()  # the unread bytes of every connection together
        self._nonces = Nonces()  # the marks' nonces, every connection's
        self._tasks: set[asyncio.Future[Any]] = set()
        self._closing: set[asyncio.Future[Any]] = set()  # pools closing (see _close_pool)
        self._router: Router | StreamRouter | None = None
        self.started = time.time()
        self.protocol_errors = 0
        self.life = Lifecycle("server", Phase.NEW, SERVER)  # RUNNING: it serves
        self._auth: ServerAuth | None = None
        self.metrics: ServerMetrics | None = None
        self.fleet: Fleet | None = None
        self._pools = 0
        # Worker names are ZeroMQ identities on the worker port: unique across restarts of the server too, so a
        # worker of a previous run still connected there (until its host notices) can never take a new one's.
        self._instance = secrets.token_hex(3)
        # Rows ready for each client, sent together once per turn of the loop (see queue()).
        self._reaper: asyncio.TimerHandle | None = None  # the idle-client sweep, once started
        self._outbox: dict[bytes, list[PartEntry | BlockEntry]] = {}
        self._flush_soon = False
        self._dropped = DroppedPeers()  # clients dropped for going over their bounds (aioenv.server.peers)
        #: Envs and worker processes the server holds for others than its clients (the HTTP port's pools), as
        #: ``(owner, envs, workers)``: counted against the same bounds.
        self.elsewhere: list[tuple[_Client, int, int]] = []

    def admit_elsewhere(self, owner: str, envs: int, workers: int) -> int:
        """Count ``envs`` and up to ``workers`` worker processes of ``owner`` (not a client: the HTTP port) against
        the server's bounds; returns the worker processes it may start.

        Raises:
            CapacityError: the bounds leave no room for them.
        """
        who = _Client(owner.encode(), owner, owner)
        room = self._admit(who, envs, workers, client=False)
        self.elsewhere.append((who, envs, room))
        return room

    @property
    def closing(self) -> bool:
        """Whether :meth:`aclose` was called: from then on it refuses new pools ("the server is shutting down")."""
        return self.life.state in (Phase.CLOSING, Phase.CLOSED)

    @property
    def all_protocol_errors(self) -> int:
        """Malformed messages received on the client port and, with worker hosts, on the worker port."""
        return self.protocol_errors + (self.fleet.protocol_errors if self.fleet is not None else 0)

    @property
    def endpoint(self) -> str:
        """The address bound (with the port chosen, if it was 0)."""
        assert self._router is not None
        return self._router.endpoint

    async def start(self) -> None:
        """Bind and start serving.

        Raises:
            UsageError: it was started before, or closed: a server starts once (make a new one).
            ValueError: the configuration cannot be served (``--auth`` on a ``unix://`` address).
        """
        if self.life.state is not Phase.NEW:
            raise UsageError(f"this server is {self.life.state.value}: a server starts once (make a new Server)")
        self.life.move(Phase.STARTING)
        config = self.config
        for warning in exposure_warnings(config.bind, config.worker_bind, auth=config.auth, insecure=config.insecure):
            log.warning(warning)
        configure = None
        if self.config.auth is not None and is_stream(self.config.bind):
            raise ValueError(
                "--auth (CURVE keys) is for tcp:// addresses; a unix:// socket is guarded by its file's mode"
            )
        if self.config.auth is not None:
            self._auth = ServerAuth(self.config.auth)
            self._auth.start()
            configure = self._auth.configure
            log.info("CURVE authentication: admitting %d keys from %s", len(self._auth.admitted), self.config.auth)
        limits = self.config.limits
        if is_stream(self.config.bind):  # clients on this machine, without ZeroMQ (aioenv.transport.stream)
            self._router = StreamRouter(
                self.config.bind, self._on_message, on_gone=self._on_gone, max_message_bytes=limits.max_message_bytes
            )
        else:
            self._router = Router(
                self.config.bind,
                self._on_message,
                configure,
                queue=limits.max_queued,
                max_message_bytes=limits.max_message_bytes,
            )
        if self.config.metrics_port is not None:
            from aioenv.server.metrics import ServerMetrics

            self.metrics = ServerMetrics(self.gauges)
            self.metrics.serve(self.config.metrics_port, self.config.metrics_bind)
        if self.config.worker_bind is not None:
            self.fleet = Fleet(
                self.config.worker_bind,
                configure=configure,
                local_capacity=self.config.local_capacity,
                worker_timeout=self.config.worker_timeout,
                client_endpoint=self.endpoint,
                max_message_bytes=limits.max_message_bytes,
            )
            log.info("worker hosts join at %s", self.fleet.endpoint)
        self._sweep = Sweep(interval_for(self.config.client_timeout))
        self._reaper = asyncio.get_running_loop().call_later(self._sweep.interval, self._reap)
        if self.config.local_capacity != 0:
            # with AIOENV_WORKER_START=fork (`aioenv serve`'s default): the template makes its imports before the
            # server listens, so the first client's workers are forked too (a fresh interpreter if it is late)
            warm_up(TEMPLATE_WAIT)
        self.life.move(Phase.RUNNING)
        log.info("aioenv server listening on %s (protocol %d, aioenv %s)", self.endpoint, PROTOCOL_VERSION, __version__)

    async def aclose(self) -> None:
        """Close every session (in-flight requests get PoolClosed), stop every worker, unbind; idempotent (also
        before :meth:`start`, and after a start that raised)."""
        if self.closing:
            return
        self.life.move(Phase.CLOSING)
        if self._reaper is not None:  # None: never started
            self._reaper.cancel()
        sessions = list(self.sessions.values())
        for session in sessions:  # idle clients learn at once, not at their heartbeat timeout
            self.send(session.identity, Op.EVENT, {Key.EVENT: "closing"})
        self.sessions.clear()
        await asyncio.gather(*(s.coord.aclose() for s in sessions), return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)  # pools dropped before, still closing
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._router is not None:
            self._router.close()
        if self.fleet is not None:
            self.fleet.close()
        if self._auth is not None:
            self._auth.stop()
        self.life.move(Phase.CLOSED)
        log.info("aioenv server stopped (%d sessions closed)", len(sessions))

    def queue(self, identity: bytes, entry: PartEntry | BlockEntry) -> None:
        """Queue rows for a client: what becomes ready in one turn of the loop (often rows of several
        requests, from several workers) leaves in one message."""
        self._outbox.setdefault(identity, []).append(entry)
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        for identity in list(self._outbox):
            self._send_queued(identity)

    def _send_queued(self, identity: bytes) -> None:
        parts = self._outbox.pop(identity, None)
        if parts:
            self._transmit(identity, Op.RESULT, *parts_fields(parts))

    def send(self, identity: bytes, op: str, fields: dict[str, Any]) -> None:
        """Send to a client (after the rows queued for it: a request's error never overtakes its rows); a
        client that is gone is dropped silently (its session will be reaped)."""
        if identity in self._outbox:
            self._send_queued(identity)
        self._transmit(identity, op, fields)

    def _transmit(self, identity: bytes, op: str, fields: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> None:
        """Hand a message to ZeroMQ, with its mark, and hold the connection to its bounds
        (:mod:`aioenv.server.peers`): a message that would take it over its unread bytes, or that meets its full
        queue, drops it; one that takes all connections together over theirs drops the one with the most."""
        router, limits = self._router, self.config.limits
        if router is None:
            return
        unread = self._unread_of(identity)
        fields[Key.MARK] = nonce = unread.mark()
        frames = encode(op, fields, arrays)
        nbytes = frames_nbytes(frames)
        if unread.unread + nbytes > limits.max_unread_bytes:
            why = (
                f"{unread.unread + nbytes} bytes of replies sent to it would be unread "
                f"(the bound is {limits.max_unread_bytes}: aioenv serve --max-unread-bytes)"
            )
            self._drop(identity, why)
            return
        try:
            sent = router.offer(identity, frames)
        except zmq.ZMQError:  # the socket is closed (shutdown)
            return
        if sent == "sent":
            unread.add(nbytes, nonce)
            if self._tally.total > limits.max_unread_total:
                self._bound_unread_total()
        elif sent == "full":  # a connection without a pool stays: ZeroMQ holds at most --max-queued replies for it
            why = f"{limits.max_queued} messages are queued for it unread (aioenv serve --max-queued)"
            self._drop(identity, why, cut=identity in self.sessions)

    def _unread_of(self, identity: bytes) -> Unread:
        """The count of what the connection ``identity`` has not read: its pool's, or its own as a connection
        without a pool (kept from now on, see :class:`_Loose`)."""
        session = self.sessions.get(identity)
        if session is not None:
            return session.unread
        loose = self._loose.get(identity)
        if loose is None:
            unread = Unread(self.config.limits.mark_every, self._tally, self._nonces)
            loose = self._loose[identity] = _Loose(unread, time.monotonic(), None)
        return loose.unread

    def _bound_unread_total(self) -> None:
        """All connections' unread bytes together within ``max_unread_total``: past it, drop the one with the
        most (its pool's envs released, its connection ended)."""
        limit = self.config.limits.max_unread_total
        total = self._tally.total
        counts = [(s.unread, i) for i, s in self.sessions.items()] + [(c.unread, i) for i, c in self._loose.items()]
        worst, identity = max(counts, key=lambda pair: pair[0].unread)
        why = (
            f"the server's clients together have {total} bytes of replies unread (the bound is {limit}: "
            f"aioenv serve --max-unread-total), and this client had the most ({worst.unread})"
        )
        self._drop(identity, why)

    def _drop(self, identity: bytes, why: str, *, cut: bool = True) -> None:
        """Drop a client over its bounds: close its pool, forget its queued rows, end its connection (``cut``),
        log once."""
        session, loose = self._forget(identity)
        if self._dropped.add(identity, why):
            log.warning(
                "client %s dropped: %s%s",
                self._name(identity, session),
                why,
                f"; releasing its {session.num_envs} envs" if session is not None else "",
                extra={"client": peer_name(identity), "reason": why},
            )
        self._tell_dropped(identity, why)  # before its requests' PoolClosed errors, when its queue has room
        if session is not None:
            self._close_pool(session)
        socket = session.socket if session is not None else loose.socket if loose is not None else None
        if socket is not None and cut:
            # What ZeroMQ queued for it stays until its connection ends: end it (a client of aioenv
            # reconnects, and is told at its next heartbeat why it was dropped).
            socket.cut()

    def _forget(self, identity: bytes) -> tuple[_Session | None, _Loose | None]:
        """Forget the connection ``identity``: its queued rows, its pool's session (returned, for the caller to
        close) or its count as a connection without a pool; what it had not read no longer counts."""
        self._outbox.pop(identity, None)
        session = self.sessions.pop(identity, None)
        loose = self._loose.pop(identity, None)
        for count in (session, loose):
            if count is not None:
                count.unread.release()
        return session, loose

    def _tell_dropped(self, identity: bytes, why: str) -> None:
        if self._router is not None:
            lost = ConnectionLost(f"the server dropped this pool: {why}")
            with contextlib.suppress(zmq.ZMQError):
                self._router.offer(identity, encode(Op.EVENT, {Key.EVENT: "dropped", Key.ERROR: relay_wire(lost)}))

    def _spawn(self, coro: Any, tasks: set[asyncio.Future[Any]] | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` in a task kept in ``tasks`` until it is done (default: the ones :meth:`aclose` cancels)."""
        held = self._tasks if tasks is None else tasks
        task = asyncio.get_running_loop().create_task(coro)
        held.add(task)
        task.add_done_callback(held.discard)
        return task

    def _close_pool(self, session: _Session) -> asyncio.Future[Any]:
        """Close a session's pool in a task of its own, which :meth:`aclose` waits for rather than cancels: a close cut
        short would leave its worker processes unreaped (a pool's close is bounded: CLOSE, then signals)."""
        return self._spawn(session.coord.aclose(), self._closing)

    # ------------------------------------------------------------ messages

    def _on_message(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        req_id: Any = None
        try:
            header, arrays = decode(frames)
            req_id = _request_id(header)
            op = header[Key.OP]
            session = self.sessions.get(identity)
            if session is not None:
                session.last_seen = time.monotonic()
                _acknowledge(session.unread, header)
            else:
                self._heard_loose(identity, header, frames)
                if (why := self._dropped.why(identity)) is not None:  # tell it again, in case its queue was full
                    self._tell_dropped(identity, why)
            if op == Op.PING:
                self.send(identity, Op.PONG, {Key.ID: req_id})
            elif op in _KINDS:
                if session is None:
                    raise UsageError("this client has no open pool on the server (it was closed or timed out)")
                self._submit(session, _KINDS[op], header, arrays)
            elif op == Op.OPEN:
                peer = self._router.peer(identity, frames[0]) if self._router is not None else None
                self._spawn(self._open(identity, req_id, header, peer, self._who(identity, frames[0])))
            elif op == Op.CLOSE:
                self._spawn(self._close(identity, req_id))
            elif op == Op.STATUS:
                self.send(identity, Op.RESULT, {Key.ID: req_id, **self.status()})
            elif op == Op.JOIN:
                where = f"at {self.fleet.endpoint}" if self.fleet is not None else "nowhere: it has no --worker-bind"
                raise UsageError(f"this is the server's client port: worker hosts join {where}")
            else:
                raise ProtocolError(f"unknown op {op!r} for an aioenv server")
        except AioEnvError as exc:
            if isinstance(exc, ProtocolError):
                self.protocol_errors += 1
                log.warning("protocol error from client %s: %s", self._shown(identity), exc)
            self._refuse(identity, req_id, exc)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            self.protocol_errors += 1
            err = ProtocolError(f"malformed request: {type(exc).__name__}: {exc}")
            log.warning("protocol error from client %s: %s", self._shown(identity), err)
            self._refuse(identity, req_id, err)

    def _heard_loose(self, identity: bytes, header: dict[str, Any], frames: list[Any]) -> None:
        """A message from a connection without a pool: the marks it read count, and it is not yet silent."""
        loose = self._loose.get(identity)
        if loose is not None:
            loose.last_seen = time.monotonic()
            if loose.socket is None and self._router is not None:
                loose.socket = self._router.peer(identity, frames[0])
            _acknowledge(loose.unread, header)

    def _who(self, identity: bytes, frame: Any) -> _Client:
        """Who the client opening a pool is, read from its message's ``frame`` (its label, the name it sent, is
        added once :meth:`_check_open` has checked it). With ``--auth``: its public key (ZAP's user id, the key
        its CURVE handshake proved), shown by the name of its key file; else its connection, shown by its
        ZeroMQ identity (or unix-socket connection)."""
        user = self._auth.user(frame) if self._auth is not None else None
        if self._auth is not None and user is not None:
            return _Client(b"key:" + user.encode(), self._auth.holder(user), "")
        return _Client(b"connection:" + identity, peer_name(identity), "")

    def _shown(self, identity: bytes) -> str:
        """How logs name the client of the connection ``identity``."""
        return self._name(identity, self.sessions.get(identity))

    @staticmethod
    def _name(identity: bytes, session: _Session | None) -> str:
        """How logs name the client of the connection ``identity``, whose pool's session is ``session`` (if any)."""
        return session.who.shown if session is not None else peer_name(identity)

    def _on_gone(self, identity: bytes, reason: str, eof: bool) -> None:
        """A client's unix-socket connection ended (``eof``: it closed it or exited; else it sent bytes that are no
        message, or one over --max-message-bytes): its pool is closed now, not after --client-timeout of silence."""
        session, _ = self._forget(identity)
        name = self._name(identity, session)
        if not eof:
            self.protocol_errors += 1
            log.warning("protocol error from client %s: it %s; its connection is closed", name, reason)
        if session is not None:
            log.info("client %s's connection ended: releasing its %d envs", name, session.num_envs)
            self._close_pool(session)

    def _refuse(self, identity: bytes, req_id: Any, err: AioEnvError) -> None:
        """Answer a request (or a message too broken to have an id) with an error."""
        fields = {Key.ID: req_id if isinstance(req_id, int) else None, Key.ERROR: relay_wire(err)}
        self.send(identity, Op.ERROR, fields)

    def _submit(self, session: _Session, kind: str, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        coord = session.coord
        req_id = header[Key.ID]
        if not isinstance(req_id, int):
            raise ProtocolError(f"request id must be an int, got {req_id!r}")
        ids = coord.resolve(header[Key.ENV])
        timeout = header.get(Key.TIMEOUT)
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ProtocolError(f"'to' must be a positive number of seconds, got {timeout!r}")
        # every field checked first, so that nothing is claimed for a malformed request
        if kind == "step":
            leaves = _step_actions(header, arrays, ids.size, coord.slab)
            info_list = _flag(header, Key.INFO_LIST)
        elif kind == "reset":
            seeds, options = _reset_fields(header, ids.size)
        else:
            fields, per_env = _call_fields(header), _per_env(header, Key.VALUES, ids.size)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "client %s request %s: %s for envs %s",
                session.outlet.client,
                req_id,
                kind,
                ids.tolist(),
                extra={"client": session.outlet.client, "request_id": req_id, "kind": kind, "env_ids": ids.tolist()},
            )
        sink = _Relay(session.outlet, req_id, kind)
        if kind == "step":
            coord.step(ids, leaves, sink, info_list=info_list, timeout=timeout)
        elif kind == "reset":
            coord.reset(ids, seeds, options, sink, timeout=timeout)
        else:
            coord.call(ids, fields, per_env, sink)

    # ------------------------------------------------------------ sessions

    async def _open(
        self, identity: bytes, req_id: Any, header: dict[str, Any], sock: Peer | None, who: _Client
    ) -> None:
        try:
            reply = await self._make_session(identity, header, sock, who)
        except AioEnvError as exc:
            log.info("refused a pool for client %s: %s", who.shown, exc.message)
            self.send(identity, Op.ERROR, {Key.ID: req_id, Key.ERROR: relay_wire(exc)})
        except (KeyError, TypeError, ValueError) as exc:
            err = UsageError(f"cannot open the pool: {exc}")
            log.info("refused a pool for client %s: %s", who.shown, err.message)
            self.send(identity, Op.ERROR, {Key.ID: req_id, Key.ERROR: relay_wire(err)})
        else:
            self.send(identity, Op.RESULT, {Key.ID: req_id, **reply})

    async def _make_session(
        self, identity: bytes, header: dict[str, Any], sock: Peer | None, who: _Client
    ) -> dict[str, Any]:
        """Open a client's pool: check the request and the limits, start its coordinator, keep it as a session;
        returns the OPEN reply's fields (the envs' spaces and how the pool runs)."""
        env, n, label = self._check_open(identity, header)
        who = replace(who, label=label)
        opts = self._pool_options(header, n)
        self.allow.check(env, opts.env_kwargs)
        opts = replace(opts, workers=self._admit(who, n, opts.workers))
        sources, _ = parse_sources(env, n, opts.env_kwargs, None, strict=True)
        self._opening[identity] = (who, n, opts.workers)
        try:
            coord, described = await self._start_coordinator(identity, n, sources, opts)
        finally:
            self._opening.pop(identity, None)
        gone = isinstance(self._router, StreamRouter) and not self._router.connected(identity)
        if self.closing or gone or (why := _unportable(described)):
            await coord.aclose()
            if gone:  # the client's unix-socket connection ended meanwhile: nobody would ever close this pool
                raise ConnectionLost("the client's connection ended while its pool was being made")
            raise PoolClosed("the server is shutting down") if self.closing else UsageError(why)
        outlet = _Outlet(self, identity, who.shown)
        loose = self._loose.pop(identity, None)  # what it was sent before it had a pool counts on
        unread = loose.unread if loose is not None else Unread(self.config.limits.mark_every, self._tally, self._nonces)
        self.sessions[identity] = _Session(
            identity, env, n, coord, time.monotonic(), outlet, unread, sock, who, opts.workers
        )
        log.info(
            "client %s (named %r) opened %d %s envs on %d %s workers",
            who.shown,
            who.label,
            n,
            printable(env),
            opts.workers,
            opts.executor,
        )
        chosen = {
            "num_workers": opts.workers,
            "executor": opts.executor,
            "max_message_bytes": self.config.limits.max_message_bytes,
        }
        return {Key.SPACES: {**described, "_server": chosen}, Key.BEAT: self._sweep.interval}

    def _check_open(self, identity: bytes, header: dict[str, Any]) -> tuple[str, int, str]:
        """``(env, num_envs, client)`` of an OPEN this server may serve, else the error that says why not."""
        if self.closing:
            raise PoolClosed("the server is shutting down")
        if identity in self.sessions or identity in self._opening:
            raise UsageError("this client connection already has a pool")
        if (why := self._dropped.why(identity)) is not None:
            raise UsageError(f"this client connection was dropped ({why}): open a pool on a new connection")
        env, n, client = (
            header.get(Key.ENV),
            header.get(Key.NUM_ENVS),
            client_label(header.get(Key.CLIENT), error=UsageError),
        )
        if not isinstance(env, str) or not env or len(env) > _MAX_ENV_NAME:
            shown = f"a name of {len(env)} characters" if isinstance(env, str) and env else repr(env)[:64]
            raise UsageError(
                f"env must be a name (a gymnasium id or 'pkg.module:factory') of at most {_MAX_ENV_NAME} characters, "
                f"got {shown}"
            )
        n = positive_int("num_envs", n, error=UsageError)
        return env, n, client

    def _pool_options(self, header: dict[str, Any], n: int) -> _PoolOptions:
        """The pool options of an OPEN, checked, with the server's defaults filled in."""
        opt = dict(header.get(Key.OPT) or {})
        kwargs = header.get(Key.KW) or {}
        if not isinstance(kwargs, dict):
            raise UsageError(f"env_kwargs must be a map, got {type(kwargs).__name__}")
        workers = (
            positive_int("num_workers", opt.get("num_workers"), allow_none=True, error=UsageError)
            or self.config.workers
            or min(n, usable_cpus())
        )
        return _PoolOptions(
            env_kwargs=kwargs,
            autoreset_mode=choice(
                "autoreset_mode", opt.get("autoreset", "next_step"), AUTORESET_MODES, error=UsageError
            ),
            executor=choice("executor", opt.get("executor") or self.config.executor, EXECUTORS, error=UsageError),
            on_timeout=choice("on_timeout", opt.get("on_timeout", "error"), ON_TIMEOUT, error=UsageError),
            workers=min(workers, n),
            max_concurrency=positive_int(
                "max_concurrency", opt.get("max_concurrency"), allow_none=True, error=UsageError
            ),
            max_worker_rss=positive_int("max_worker_rss", opt.get("max_worker_rss"), allow_none=True, error=UsageError),
        )

    async def _start_coordinator(
        self, identity: bytes, n: int, sources: EnvSources, opts: _PoolOptions
    ) -> tuple[Coordinator, dict[str, Any]]:
        """A started coordinator for a client's pool (on worker hosts when the server has a fleet) and the
        description of its envs; a pool that cannot start is closed again, and a capacity error says how a
        larger ``num_workers`` would help."""
        self._pools += 1
        placed: dict[str, Any] = {}
        if self.fleet is not None:
            placed = {
                "launch": self.fleet.launch,
                "name_prefix": f"{self._instance}.p{self._pools}.",
                "when_room": self.fleet.when_room,
            }
        coord: Coordinator | None = None
        try:
            coord = Coordinator(
                n,
                sources,
                Coordinator.private_directory(),
                autoreset_mode=opts.autoreset_mode,
                executor=opts.executor,
                on_remade=lambda ids: self.send(identity, Op.EVENT, {Key.EVENT: "remade", Key.ENV: ids.tolist()}),
                max_concurrency=opts.max_concurrency,
                on_timeout=opts.on_timeout,
                max_worker_rss=opts.max_worker_rss,
                **placed,
            )
            return coord, await coord.start(opts.workers)
        except BaseException as exc:
            if coord is not None:
                await coord.aclose()
            fleet = self.fleet
            if isinstance(exc, CapacityError) and opts.workers < n and fleet and fleet.placement.serves(opts.executor):
                raise CapacityError(
                    f"cannot place {n} envs in {opts.workers} worker processes: {exc.message}; a larger num_workers "
                    "splits the pool into smaller blocks"
                ) from exc
            raise

    def _admit(self, who: _Client, n: int, workers: int, *, client: bool = True) -> int:
        """Check that ``who`` may make ``n`` more envs (a ``CapacityError`` says which limit refuses them); returns
        the worker processes its pool gets: ``workers``, or fewer if the caps on worker processes leave fewer.
        ``client=False``: ``who`` is not a client (the HTTP port), held to the server's bounds in all only."""
        held = [(s.who, s.num_envs, s.workers) for s in self.sessions.values()] + list(self._opening.values())
        held += self.elsewhere
        mine = [(k, w) for c, k, w in held if c.key == who.key] if client else []
        active = sum(k for _, k, _ in held)
        limit = self.config.max_envs
        if limit is not None and active + n > limit:
            raise CapacityError(f"cannot make {n} more envs: {active} are active and the server allows {limit} in all")
        per = self.config.max_envs_per_client if client else None
        if per is not None and sum(k for k, _ in mine) + n > per:
            raise CapacityError(
                f"cannot make {n} more envs for client {who.shown}: it has {sum(k for k, _ in mine)} active and the "
                f"server allows {per} per client (aioenv serve --max-envs-per-client)"
            )
        pools = self.config.max_pools_per_client if client else None
        if pools is not None and len(mine) + 1 > pools:
            raise CapacityError(
                f"cannot open another pool for client {who.shown}: it has {len(mine)} open and the server allows "
                f"{pools} per client (aioenv serve --max-pools-per-client)"
            )
        room = workers
        for cap, used, flag in (
            (self.config.max_workers, sum(w for _, _, w in held), "--max-workers"),
            (
                self.config.max_workers_per_client if client else None,
                sum(w for _, w in mine),
                "--max-workers-per-client",
            ),
        ):
            if cap is not None and used >= cap:
                whose = "the server's pools" if flag == "--max-workers" else f"client {who.shown}'s pools"
                raise CapacityError(
                    f"cannot start a worker process for {n} more envs: {whose} hold {used} and the server allows "
                    f"{cap} (aioenv serve {flag})"
                )
            if cap is not None:
                room = min(room, cap - used)
        return room

    async def _close(self, identity: bytes, req_id: Any) -> None:
        session = self.sessions.pop(identity, None)
        if session is not None:  # what it has not read counts on, as a connection without a pool's
            self._loose[identity] = _Loose(session.unread, time.monotonic(), session.socket)
            await asyncio.shield(self._close_pool(session))  # a server closing meanwhile waits for it, not cancels it
            log.info("client %s closed its %d %s envs", session.client, session.num_envs, printable(session.env))
        self.send(identity, Op.RESULT, {Key.ID: req_id})

    def _reap(self) -> None:
        """The idle-client sweep: pools of clients silent for the client timeout are closed and their envs released,
        connections without a pool forgotten. A peer whose release fails is logged and dropped all the same; the
        others are released, and the next sweep is due whatever happened in this one."""
        try:
            now, late = time.monotonic(), self._sweep.late()
            for identity, session in list(self.sessions.items()):
                session.last_seen += late  # the time the server did not run is not the client's silence
                if now - session.last_seen > self.config.client_timeout:
                    self._release_silent(identity, session, now)
            for identity, loose in list(self._loose.items()):
                loose.last_seen += late
                if now - loose.last_seen > self.config.client_timeout:  # forgotten; what it left unread is freed
                    self._forget_silent(identity, loose)
        finally:
            if not self.closing:
                self._reaper = asyncio.get_running_loop().call_later(self._sweep.interval, self._reap)

    def _release_silent(self, identity: bytes, session: _Session, now: float) -> None:
        """Close the pool of a client silent since ``session.last_seen`` and release its envs (see :meth:`_reap`)."""
        del self.sessions[identity]
        log.warning(
            "client %s silent for %.0f s: releasing its %d envs",
            session.client,
            now - session.last_seen,
            session.num_envs,
        )
        try:
            session.unread.release()
        except Exception:  # its envs still go: the pool is closed below
            log.exception("releasing what client %s left unread failed", session.client)
        self._close_pool(session)

    def _forget_silent(self, identity: bytes, loose: _Loose) -> None:
        """Forget a connection without a pool, silent for the client timeout (see :meth:`_reap`)."""
        del self._loose[identity]
        try:
            try:
                if loose.unread.unread and loose.socket is not None:
                    loose.socket.cut()
            finally:  # what it left unread stops counting, cut or not
                loose.unread.release()
        except Exception:
            log.exception("forgetting a silent connection without a pool failed")

    def gauges(self) -> ServerGauges:
        """A snapshot of the state Prometheus reads (:mod:`aioenv.server.metrics`); safe from another thread."""
        from aioenv.server.metrics import ServerGauges  # prometheus-client is imported only with metrics on

        sessions = list(self.sessions.values())  # read from the HTTP thread: copy first
        slots = [slot for s in sessions for slot in s.coord.slots]
        return ServerGauges(
            made=sum(s.num_envs for s in sessions),
            busy=sum(int(np.count_nonzero(s.coord.sched.busy)) for s in sessions),
            in_flight=sum(s.coord.sched.in_flight for s in sessions),
            clients=len({s.who.key for s in sessions}),
            pools=len(sessions),
            workers=sum(1 for slot in slots if slot.proc is not None),
            restarts=sum(slot.restarts for slot in slots),
            protocol_errors=self.all_protocol_errors,
            hosts=self.fleet.status() if self.fleet is not None else None,
            hosts_joined=len(self.fleet.agents) if self.fleet is not None else 0,
            hosts_lost=self.fleet.lost if self.fleet is not None else 0,
        )

    def status(self) -> dict[str, Any]:
        """The server's state: sessions, clients, envs, limits."""
        sessions = list(self.sessions.values())
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "endpoint": self.endpoint,
            "uptime": time.time() - self.started,
            "sessions": len(sessions),
            "clients": len({s.who.key for s in sessions}),
            "envs": sum(s.num_envs for s in sessions),
            "in_flight": sum(s.coord.sched.in_flight for s in sessions),
            "max_envs": self.config.max_envs,
            "max_envs_per_client": self.config.max_envs_per_client,
            "max_pools_per_client": self.config.max_pools_per_client,
            "workers": sum(s.workers for s in sessions),
            "max_workers": self.config.max_workers,
            "max_workers_per_client": self.config.max_workers_per_client,
            "protocol_errors": self.all_protocol_errors,
            # [client, env, envs, the name it gave itself]; at most _STATUS_POOLS, the rest counted
            "pools": [[s.client, s.env, s.num_envs, s.who.label] for s in sessions[:_STATUS_POOLS]],
            "pools_not_listed": max(0, len(sessions) - _STATUS_POOLS),
            "worker_endpoint": self.fleet.endpoint if self.fleet else None,
            "hosts": self.fleet.status() if self.fleet else [],
        }


class Port(Protocol):
    """Another way in to a server's envs beside its ZeroMQ port (the HTTP port, :mod:`aioenv.openenv.serve`):
    started once the server listens, closed before it."""

    async def start(self, server: Server) -> None:
        """Start serving; what it holds counts against the server's bounds (:meth:`Server.admit_elsewhere`).

        Raises:
            AioEnvError: it cannot start (the server then stops too).
        """
        ...

    async def aclose(self) -> None:
        """Stop serving and release what it holds; idempotent, and safe after a :meth:`start` that raised."""
        ...


async def serve(config: ServerConfig, ready: Any = None, ports: Sequence[Port] = ()) -> None:
    """Run a server until SIGTERM or SIGINT, then shut it down cleanly. ``ready(server)`` is called once
    it listens, and ``ports`` have started."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        server = Server(config)
        await server.start()
        started: list[Port] = []
        try:
            for port in ports:
                started.append(port)
                await port.start(server)
            if ready is not None:
                ready(server)
            await stop.wait()
            log.info("shutting down: closing %d sessions", len(server.sessions))
        finally:
            for port in reversed(started):
                await port.aclose()
            await server.aclose()
    finally:
        # given back while the loop runs: uvloop restores a handler only then (its close() leaves SIGINT a no-op
        # for the rest of the process), which matters to a program that runs serve() among other things
        for sig in signals:
            loop.remove_signal_handler(sig)


def _step_actions(header: dict[str, Any], arrays: list[np.ndarray], n: int, slab: Slab | None) -> list[np.ndarray]:
    """A client's step's action leaves for ``n`` envs, checked as far as the server can (row counts, and
    row shapes when they go into a slab's rows)."""
    leaves = leaves_from_wire(header[Key.ACT], arrays)
    if any(leaf.shape[:1] != (n,) for leaf in leaves):
        raise ProtocolError(f"a step for {n} envs carries actions of other lengths")
    if slab is not None and [leaf.shape[1:] for leaf in leaves] != [store.shape[1:] for store in slab.act]:
        raise ProtocolError(f"a step carries actions of shapes {[leaf.shape for leaf in leaves]}")
    return leaves


def _request_id(header: dict[str, Any]) -> int | None:
    """A message's request id: an int, or absent. Anything else is refused, never echoed back (a peer must
    not make the server hold copies of what it sent)."""
    req_id = header.get(Key.ID)
    if req_id is not None and type(req_id) is not int:
        raise ProtocolError(f"a request id must be an int, got a {type(req_id).__name__}")
    return req_id


def _acknowledge(unread: Unread, header: dict[str, Any]) -> None:
    """The marks a client says it read (``ackk``, the last kept one, then ``ack``, the last one; see
    :mod:`aioenv.server.peers`), if it names them."""
    for key in (Key.ACK_KEPT, Key.ACK):
        ack = header.get(key)
        if ack is not None:
            if type(ack) is not int:
                raise ProtocolError(f"{key!r} must be an int, got a {type(ack).__name__}")
            unread.ack(ack)


def _flag(header: dict[str, Any], key: str) -> bool:
    """A boolean field (absent: False)."""
    value = header.get(key, False)
    if not isinstance(value, bool):
        raise ProtocolError(f"{key!r} must be true or false, got {value!r}")
    return value


def _per_env(header: dict[str, Any], key: str, n: int) -> list[Any] | None:
    """A field with one entry per env of the request (absent or None: None)."""
    value = header.get(key)
    if value is not None and (not isinstance(value, list) or len(value) != n):
        raise ProtocolError(f"{key!r} must be a list with one entry per env ({n}), got {value!r}")
    return value


def _reset_fields(header: dict[str, Any], n: int) -> tuple[list[int | None], dict[str, Any] | None]:
    """A client's reset's seeds (one per env of the request, None: none) and options, checked."""
    seeds = _per_env(header, Key.SEED, n) or [None] * n
    if not all(s is None or (type(s) is int and 0 <= s < 2**64) for s in seeds):
        raise ProtocolError(f"seeds must be ints in [0, 2**64) or None, got {seeds!r}")
    options = header.get(Key.OPT)
    if options is not None and not isinstance(options, dict):
        raise ProtocolError(f"reset options must be a map or None, got {options!r}")
    return seeds, options


def _call_fields(header: dict[str, Any]) -> dict[str, Any]:
    """A CALL's kind, name, args and keyword args, checked."""
    fields = {k: header[k] for k in (Key.KIND, Key.NAME, Key.ARGS, Key.KW) if k in header}
    if fields.get(Key.KIND) not in ("call", "get", "set"):
        raise ProtocolError(f"a call's kind must be call, get or set, got {fields.get(Key.KIND)!r}")
    name = fields.get(Key.NAME)
    if not isinstance(name, str):
        raise ProtocolError(f"a call's name must be a string, got {name!r}")
    args, kw = fields.get(Key.ARGS, []), fields.get(Key.KW, {})
    if not isinstance(args, list) or not isinstance(kw, dict):
        raise ProtocolError("a call's args must be a list and its kw a map")
    _public(name)
    if fields[Key.KIND] == "call" and name in _BY_NAME:  # gymnasium's wrappers reach attributes named in args
        _public(args[0] if args else kw.get("name"))
    return fields


#: gymnasium's methods that get, set or look for the attribute their first argument names.
_BY_NAME = frozenset(("get_wrapper_attr", "set_wrapper_attr", "has_wrapper_attr"))


def _public(name: Any) -> None:
    """``UsageError`` unless ``name`` names a public attribute: a client never reaches an env's private parts
    (``__class__``, ``__init__``, ``_np_random``) nor goes through one attribute to another (``unwrapped.close``)."""
    if not isinstance(name, str) or not name or name.startswith("_") or "." in name:
        raise UsageError(f"a client's call names a public attribute of its envs (no '_' prefix, no dots), got {name!r}")

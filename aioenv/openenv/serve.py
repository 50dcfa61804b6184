"""``aioenv serve --http``: the server's envs to OpenEnv's clients over WebSocket, and to any language over HTTP.

Design. The operator names each env the port serves and how many sessions it may hold at once
(``--http-env CartPole-v1=64``). When the port starts it makes one pool of that many envs for each name, in worker
processes on the server's executor (no env code runs in the server's process), counted against the server's
``--max-envs`` like a client's pool. A session a client opens holds one env of that pool (a *lease*) until it
closes; its resets and steps go to the pool as that env's own requests (:meth:`aioenv.Pool.step_env`), so no
session ever waits for another: whichever env finishes is answered. The pools run with autoreset disabled: a
session resets its env before its first step and after its episode ends, as OpenEnv's clients do.

Protocols:

- ``/ws`` and ``/envs/{env}/ws``: OpenEnv's WebSocket protocol. The client sends ``{"type": "reset", "data":
  {"seed": 1}}``, ``{"type": "step", "data": {"action": ...}}``, ``{"type": "state"}`` or ``{"type": "close"}``;
  the port answers ``{"type": "observation", "data": {"observation": {"obs": ..., "terminated": ...,
  "truncated": ..., "info": ...}, "reward": 1.0, "done": false}}``, ``{"type": "state", ...}`` or ``{"type":
  "error", "data": {"message": ..., "code": ...}}``. OpenEnv's ``EnvClient`` (and any trainer built on it) works
  unchanged against it.
- Beyond OpenEnv, batches on one connection: ``/envs/{env}/ws?sessions=K`` holds ``K`` envs; a message that names
  one (``"session": i``, with an ``"id"`` of the client's) runs beside the others and its answer, tagged with
  both, comes as soon as that env finishes; ``{"type": "step_batch", "data": {"actions": {"0": a0, "3": a3}}}``
  steps several at once, each answered as it finishes (first finished, first answered).
- HTTP sessions for clients without WebSocket: ``POST /envs/{env}/sessions``, then ``POST
  /sessions/{id}/reset``, ``POST /sessions/{id}/step``, ``GET /sessions/{id}/state``, ``DELETE /sessions/{id}``.
  ``GET /health``, ``GET /envs``, ``GET /schema`` and ``GET /envs/{env}/schema`` (the action and observation
  JSON schemas, :mod:`aioenv.openenv.jsonvalues`). ``GET /openapi.json`` describes all of it, so that a client
  in any language can be generated.

Limits, each with a default: the sessions of one env (its pool's size), of one client (``--http-max-sessions-
per-client``; a client is its peer address), the size of a message (``--max-message-bytes``, the same bound as the
ZeroMQ port), a deadline on every reset and step (``--http-step-timeout``: an overrun fails with ``StepTimeout``
and the env is replaced by a fresh one, to be reset), and a session idle for ``--http-idle-timeout`` is closed
and its env given back (at most an eighth of the timeout later). A client that vanishes gives its envs back when
its connection ends.

Who may reach it: the port listens on loopback unless told otherwise; beyond loopback only with a bearer token
(``--http-token-file``: every request must carry ``Authorization: Bearer TOKEN``) or ``--insecure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import uvicorn
from fastapi import FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

import aioenv
from aioenv.core.sinks import ResetResult, StepResult
from aioenv.errors import AioEnvError, CapacityError, UsageError
from aioenv.logs import printable
from aioenv.openenv.heap import LongLived
from aioenv.openenv.jsonvalues import JsonValueError, from_json, json_schema, jsonable, to_json
from aioenv.server.server import Server
from aioenv.transport.spawn import usable_cpus
from aioenv.transport.zmqio import is_loopback
from aioenv.wire.options import Executor

__all__ = ["HttpConfig", "HttpPort", "http_exposure", "parse_http_env", "parse_http_env_kwargs", "split_bind"]

log = logging.getLogger("aioenv.openenv")

#: Close codes (RFC 6455): a policy violation (no token, over a limit) and a server going away.
_POLICY, _GOING_AWAY = 1008, 1001


@dataclass(frozen=True)
class HttpConfig:
    """What ``aioenv serve --http`` was told."""

    bind: str = "127.0.0.1:8000"  # HOST:PORT; beyond loopback only with a token or insecure
    envs: dict[str, int] = field(default_factory=dict)  # env name -> sessions it may hold at once
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env name -> its kwargs (the operator's)
    default_env: str | None = None  # the env of /ws and /schema (None: the first of envs)
    token: str | None = None  # every request carries "Authorization: Bearer TOKEN"
    insecure: bool = False  # listen beyond loopback without a token
    max_sessions_per_client: int = 256
    step_timeout: float = 60.0  # seconds a reset or step may run before it fails with StepTimeout
    idle_timeout: float = 300.0  # seconds a session may stay silent before it is closed
    max_message_bytes: int = 256 << 20
    executor: Executor = "inline"
    workers: int | None = None  # worker processes per env's pool (None: the usable cores, at most one per env)


def parse_http_env(text: str) -> tuple[str, int]:
    """``"NAME=SESSIONS"`` (``--http-env``) as ``(name, sessions)``.

    Raises:
        ValueError: not ``NAME=N`` with a positive ``N``.
    """
    name, sep, count = text.rpartition("=")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise ValueError(f"expected NAME=SESSIONS (e.g. CartPole-v1=64), got {text!r}")
    return name, int(count)


def parse_http_env_kwargs(text: str) -> tuple[str, dict[str, Any]]:
    """``'NAME={"key": value}'`` (``--http-env-kwargs``) as ``(name, kwargs)``.

    Raises:
        ValueError: not ``NAME=`` followed by a JSON object.
    """
    name, sep, rest = text.partition("={")
    try:
        kwargs = json.loads("{" + rest) if sep and name else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected NAME=JSON-OBJECT, got {text!r}: {exc}") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f'expected NAME=JSON-OBJECT (e.g. MyEnv-v0={{"size": 8}}), got {text!r}')
    return name, kwargs


def http_exposure(bind: str, *, token: str | None, insecure: bool) -> list[str]:
    """The warnings a port on ``bind`` logs at start (see :mod:`aioenv.server.exposure`).

    Raises:
        UsageError: a non-loopback ``bind`` without a token or ``insecure``.
    """
    host, _ = split_bind(bind)
    if token is not None or is_loopback(f"tcp://{host}:1"):
        return []
    if not insecure:
        raise UsageError(
            f"refusing to serve HTTP on {bind} without --http-token-file: it is not a loopback address, and anyone "
            "who reaches it could step the envs it serves. Give a token file, or bind a loopback address, or, on a "
            "network that only trusted peers reach, pass --insecure (see SECURITY.md)"
        )
    return [
        f"--insecure: the HTTP port {bind} admits every peer without a token: anyone who reaches it can step "
        "the envs it serves"
    ]


def split_bind(bind: str) -> tuple[str, int]:
    """``"HOST:PORT"`` as ``(host, port)``; ``[::1]:8000`` for IPv6.

    Raises:
        ValueError: no port, or a port outside 0..65535.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:8000), got {bind!r}")
    return host.strip("[]"), int(port)


# ------------------------------------------------------------------ wire models (and the OpenAPI document)


class ResetBody(BaseModel):
    """A reset: OpenEnv's ``ResetRequest`` (``episode_id`` is kept and shown in the state)."""

    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    episode_id: str | None = Field(default=None, max_length=255)
    options: dict[str, Any] | None = None


class StepBody(BaseModel):
    """A step: OpenEnv's ``StepRequest``; ``action`` is one element of the env's action space as JSON."""

    model_config = ConfigDict(extra="allow")
    action: Any


class ObservationBody(BaseModel):
    """What a reset or a step gives: OpenEnv's ``StepResponse``."""

    observation: dict[str, Any] = Field(description="obs (the env's observation as JSON), terminated, truncated, info")
    reward: float | None = None
    done: bool = False


class SessionBody(BaseModel):
    """A new HTTP session."""

    session_id: str
    env: str


class StateBody(BaseModel):
    """A session's state: OpenEnv's ``State``."""

    episode_id: str | None = None
    step_count: int = 0
    env: str
    session_id: str | None = None


# ------------------------------------------------------------------ envs and sessions


class Shelf:
    """One env name's pool and which of its envs no session holds."""

    def __init__(self, name: str, pool: aioenv.Pool) -> None:
        self.name = name
        self.pool = pool
        self.free: deque[int] = deque(range(pool.num_envs))
        self.obs_space: gymnasium.Space[Any] = pool.single_observation_space
        self.act_space: gymnasium.Space[Any] = pool.single_action_space
        self.schema = {
            "action": {
                "type": "object",
                "properties": {"action": json_schema(self.act_space)},
                "required": ["action"],
            },
            "observation": {
                "type": "object",
                "properties": {
                    "obs": json_schema(self.obs_space),
                    "terminated": {"type": "boolean"},
                    "truncated": {"type": "boolean"},
                    "info": {"type": "object"},
                },
            },
            "state": StateBody.model_json_schema(),
        }


class Session:
    """One env of a shelf, held by one client until :meth:`release`."""

    def __init__(self, shelf: Shelf, env_id: int, client: str, on_release: Callable[[Session], None]) -> None:
        self.shelf = shelf
        self.env_id = env_id
        self.client = client
        self.id = secrets.token_urlsafe(16)
        self.episode_id: str | None = None
        self.step_count = 0
        self.needs_reset = True
        self.last_used = time.monotonic()
        self.busy: asyncio.Future[Any] | None = None
        self.released = False
        self._on_release = on_release
        #: What the port does when the session has been idle too long: an HTTP session is closed; a WebSocket
        #: connection closes itself once all its sessions are idle (:meth:`_Connection.idle`).
        self.on_idle: Callable[[], None] = self.release

    async def reset(self, body: ResetBody) -> dict[str, Any]:
        """Reset the env; OpenEnv's observation data."""
        result: ResetResult = await self._run(
            self.shelf.pool.reset_env(self.env_id, seed=body.seed, options=body.options)
        )
        self.needs_reset, self.step_count = False, 0
        self.episode_id = body.episode_id or secrets.token_hex(8)
        return _observation(self.shelf.obs_space, result.obs, None, False, False, result.info)

    async def step(self, action: Any) -> dict[str, Any]:
        """Step the env with ``action`` (JSON, checked against the action space); OpenEnv's observation data.

        Raises:
            UsageError: the env must be reset first.
            JsonValueError: ``action`` is not an element of the action space.
        """
        if self.needs_reset:
            raise UsageError(
                f"session {self.id} of {self.shelf.name}: reset first (a new session, an ended episode, or an env "
                "replaced after a failure starts with a reset)"
            )
        value = from_json(self.shelf.act_space, action, f"action for {self.shelf.name} (session {self.id[:8]})")
        result: StepResult = await self._run(self.shelf.pool.step_env(self.env_id, value))
        self.step_count += 1
        if result.terminated or result.truncated:
            self.needs_reset = True
        return _observation(
            self.shelf.obs_space,
            result.obs,
            float(result.reward),
            bool(result.terminated),
            bool(result.truncated),
            result.info,
        )

    def state(self) -> dict[str, Any]:
        """OpenEnv's state data."""
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "env": self.shelf.name,
            "session_id": self.id,
        }

    async def _run(self, fut: asyncio.Future[Any]) -> Any:
        if self.released:  # its env may be another session's by now: nothing reaches it
            fut.cancel()
            raise UsageError(f"session {self.id[:8]} of {self.shelf.name} is closed (idle too long, or closed)")
        self.last_used = time.monotonic()
        self.busy = fut
        try:
            return await asyncio.shield(fut)  # a client that goes away leaves the row to arrive, then releases
        except AioEnvError:
            self.needs_reset = True  # a failed step or reset (StepTimeout, EnvError, a crash): reset before stepping
            raise
        finally:
            self.last_used = time.monotonic()

    def release(self) -> None:
        """Give the env back: at once, or when its request in flight is answered. Idempotent."""
        if self.released:
            return
        self.released = True
        busy = self.busy
        if busy is not None and not busy.done():
            busy.add_done_callback(self._answered)
        else:
            self._on_release(self)

    def _answered(self, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled():
            fut.exception()  # read: its client is gone, and nobody else will
        self._on_release(self)


def _observation(
    space: gymnasium.Space[Any], obs: Any, reward: float | None, terminated: bool, truncated: bool, info: Any
) -> dict[str, Any]:
    return {
        "observation": {
            "obs": to_json(space, obs),
            "terminated": terminated,
            "truncated": truncated,
            "info": jsonable({k: v for k, v in dict(info).items() if k != "env_id"}),
        },
        "reward": reward,
        "done": terminated or truncated,
    }


class HttpPort:
    """The port: its pools (one per env name), the sessions that hold their envs, the app, and the HTTP server."""

    def __init__(self, config: HttpConfig) -> None:
        if not config.envs:
            raise UsageError("the HTTP port serves the envs named by --http-env NAME=SESSIONS: none was named")
        if config.default_env is not None and config.default_env not in config.envs:
            raise UsageError(
                f"--http-default-env {config.default_env!r} is not one of --http-env's {list(config.envs)}"
            )
        self.config = config
        self.shelves: dict[str, Shelf] = {}
        self.sessions: dict[str, Session] = {}  # by id: every open session (WebSocket and HTTP)
        self._http: dict[str, Session] = {}  # by id: the HTTP sessions (closed by DELETE or when idle)
        self._per_client: dict[str, int] = {}
        self._server: _Embedded | None = None
        self._serving: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        #: The process's collector, kept off the connections' objects while the port serves (see heap.py).
        self.heap = LongLived()
        self.app = self._build_app()

    @property
    def default_env(self) -> str:
        """The env of ``/ws`` and ``/schema``."""
        return self.config.default_env or next(iter(self.config.envs))

    @property
    def address(self) -> str:
        """``HOST:PORT`` it listens on (the port chosen, if it was 0)."""
        assert self._server is not None
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"

    async def start(self, server: Server | None = None) -> None:
        """Make each env's pool, then listen. With ``server``, each pool counts against its bounds (envs and worker
        processes, :meth:`~aioenv.server.server.Server.admit_elsewhere`), and gets at most its share of workers.

        Raises:
            UsageError: the bind is not served (see :func:`http_exposure`), an env's space has no JSON form.
            AioEnvError: a pool could not be made (its envs failed, no capacity).
        """
        for warning in http_exposure(self.config.bind, token=self.config.token, insecure=self.config.insecure):
            log.warning(warning)
        host, port = split_bind(self.config.bind)
        try:
            for name, count in self.config.envs.items():
                pool = await aioenv.make(
                    name,
                    count,
                    env_kwargs=self.config.env_kwargs.get(name),
                    executor=self.config.executor,
                    num_workers=self._workers(server, count),
                    autoreset_mode="disabled",
                    step_timeout=self.config.step_timeout,
                    reset_timeout=self.config.step_timeout,
                )
                try:
                    self.shelves[name] = Shelf(name, pool)  # TypeError: a space with no JSON form
                except TypeError:
                    await pool.aclose()
                    raise
                log.info("HTTP port: %d sessions of %s", count, printable(name))
        except TypeError as exc:
            await self.aclose()
            raise UsageError(f"cannot serve {name!r} over HTTP: {exc}") from None
        except BaseException:
            await self.aclose()
            raise
        web = _Embedded(
            uvicorn.Config(
                self.app,
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                ws="websockets-sansio",
                ws_max_size=self.config.max_message_bytes,
                ws_per_message_deflate=False,
                ws_ping_interval=20.0,
                ws_ping_timeout=20.0,
                h11_max_incomplete_event_size=64 << 10,
                timeout_graceful_shutdown=1,
                access_log=False,
            )
        )
        self._server = web
        self._serving = asyncio.create_task(web.serve())
        while not web.started:
            if self._serving.done():
                self._serving.result()  # the bind failed: raise its error
                raise OSError(f"cannot serve HTTP on {self.config.bind}")
            await asyncio.sleep(0.01)
        self._reaper = asyncio.create_task(self._reap())
        self.heap.start()
        log.info("HTTP port listening on %s (%s)", self.address, ", ".join(self.shelves))

    def _workers(self, server: Server | None, sessions: int) -> int | None:
        wanted = min(self.config.workers or usable_cpus(), sessions)
        return server.admit_elsewhere("the HTTP port", sessions, wanted) if server is not None else self.config.workers

    async def aclose(self) -> None:
        """Stop listening, close every session and every pool. Idempotent."""
        if self._reaper is not None:
            self._reaper.cancel()
        self.heap.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._serving is not None:
            with contextlib.suppress(Exception):
                await self._serving
        shelves, self.shelves = list(self.shelves.values()), {}
        await asyncio.gather(*(s.pool.aclose() for s in shelves), return_exceptions=True)

    # ------------------------------------------------------------ sessions

    def lease(self, env: str, client: str) -> Session:
        """A session holding a free env of ``env``.

        Raises:
            UsageError: no such env.
            CapacityError: every env of ``env`` is held, or ``client`` holds its limit.
        """
        shelf = self.shelves.get(env)
        if shelf is None:
            raise UsageError(f"this port serves {sorted(self.shelves)}, not {printable(env)!r}")
        held = self._per_client.get(client, 0)
        if held >= self.config.max_sessions_per_client:
            raise CapacityError(
                f"client {client} holds {held} sessions and the port allows "
                f"{self.config.max_sessions_per_client} per client (--http-max-sessions-per-client)"
            )
        if not shelf.free:
            raise CapacityError(
                f"all {shelf.pool.num_envs} sessions of {env} are in use (aioenv serve --http-env {env}=N)"
            )
        session = Session(shelf, shelf.free.popleft(), client, self._give_back)
        self.sessions[session.id] = session
        self._per_client[client] = held + 1
        return session

    def _give_back(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self._http.pop(session.id, None)
        left = self._per_client.get(session.client, 1) - 1
        if left:
            self._per_client[session.client] = left
        else:
            self._per_client.pop(session.client, None)
        if self.shelves.get(session.shelf.name) is session.shelf:
            session.shelf.free.append(session.env_id)

    async def _reap(self) -> None:
        # A sweep walks every session (~2 ms at 4,096 of them): every eighth of the timeout, so that a silent
        # session is closed at most that late, and a port of thousands of sessions does not walk them every second.
        while True:
            await asyncio.sleep(self.config.idle_timeout / 8)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                busy = session.busy is not None and not session.busy.done()
                if not busy and now - session.last_used > self.config.idle_timeout:
                    session.on_idle()

    # ------------------------------------------------------------ the app

    def _client(self, peer: Any) -> str:
        return f"{peer.host}" if peer is not None else "unknown"

    def _authorized(self, headers: Any) -> bool:
        token = self.config.token
        if token is None:
            return True
        scheme, _, given = str(headers.get("authorization", "")).partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())

    def _build_app(self) -> FastAPI:
        app = FastAPI(
            title="aioenv",
            version=aioenv.__version__,
            description="aioenv's envs over HTTP and OpenEnv's WebSocket protocol (see docs/openenv.md).",
        )
        port = self

        @app.middleware("http")
        async def _auth(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
            if not port._authorized(request.headers) and request.url.path not in ("/health",):
                return JSONResponse({"detail": "a bearer token is required (Authorization: Bearer TOKEN)"}, 401)
            return await call_next(request)

        @app.get("/health")
        async def health() -> dict[str, str]:
            """Whether the port serves."""
            return {"status": "healthy"}

        @app.get("/envs")
        async def envs() -> dict[str, dict[str, int]]:
            """Each env served: its sessions in all and free now."""
            return {n: {"sessions": s.pool.num_envs, "free": len(s.free)} for n, s in port.shelves.items()}

        @app.get("/schema")
        async def schema() -> dict[str, Any]:
            """The default env's action, observation and state JSON schemas (OpenEnv's ``/schema``)."""
            return port._shelf(port.default_env).schema

        @app.get("/envs/{env}/schema")
        async def env_schema(env: str) -> dict[str, Any]:
            """An env's action, observation and state JSON schemas."""
            return port._shelf(env).schema

        @app.post("/envs/{env}/sessions", status_code=201)
        async def open_session(env: str, request: Request) -> SessionBody:
            """Open an HTTP session holding one env (reset it before its first step)."""
            try:
                session = port.lease(env, port._client(request.client))
            except UsageError as exc:
                raise HTTPException(404, exc.message) from None
            except CapacityError as exc:
                raise HTTPException(429, exc.message) from None
            port._http[session.id] = session
            session.on_idle = port._idle_http(session)
            return SessionBody(session_id=session.id, env=env)

        @app.post("/sessions/{sid}/reset")
        async def http_reset(sid: str, body: ResetBody | None = None) -> ObservationBody:
            """Reset a session's env."""
            session = port._http_session(sid)
            return ObservationBody(**await _answer(session.reset(body or ResetBody())))

        @app.post("/sessions/{sid}/step")
        async def http_step(sid: str, body: StepBody) -> ObservationBody:
            """Step a session's env with ``action``."""
            session = port._http_session(sid)
            return ObservationBody(**await _answer(session.step(body.action)))

        @app.get("/sessions/{sid}/state")
        async def http_state(sid: str) -> StateBody:
            """A session's episode id and step count."""
            return StateBody(**port._http_session(sid).state())

        @app.delete("/sessions/{sid}", status_code=204)
        async def http_close(sid: str) -> None:
            """Close a session: its env is given back."""
            port._http_session(sid).release()

        @app.websocket("/ws")
        async def ws_default(ws: WebSocket) -> None:
            await port._websocket(ws, port.default_env)

        @app.websocket("/envs/{env}/ws")
        async def ws_env(ws: WebSocket, env: str) -> None:
            await port._websocket(ws, env)

        return app

    def _idle_http(self, session: Session) -> Callable[[], None]:
        def idle() -> None:
            log.info(
                "HTTP session %s of %s idle for %.0f s: closed",
                session.id[:8],
                session.shelf.name,
                self.config.idle_timeout,
            )
            session.release()

        return idle

    def _shelf(self, env: str) -> Shelf:
        shelf = self.shelves.get(env)
        if shelf is None:
            raise HTTPException(404, f"this port serves {sorted(self.shelves)}, not {printable(env)!r}")
        return shelf

    def _http_session(self, sid: str) -> Session:
        session = self._http.get(sid)
        if session is None:
            raise HTTPException(404, "no such session (closed, idle too long, or never opened)")
        return session

    async def _websocket(self, ws: WebSocket, env: str) -> None:
        if not self._authorized(ws.headers):
            await ws.close(_POLICY, "a bearer token is required (Authorization: Bearer TOKEN)")
            return
        await ws.accept()
        raw = ws.query_params.get("sessions", "1")
        count = int(raw) if raw.isdigit() else 0
        client = self._client(ws.client)
        held: list[Session] = []
        try:
            if count < 1:
                raise UsageError(f"sessions must be a positive integer, got {printable(raw)!r}")
            held.extend(self.lease(env, client) for _ in range(count))
        except AioEnvError as exc:
            for session in held:
                session.release()
            code = "CAPACITY_REACHED" if isinstance(exc, CapacityError) else "SESSION_ERROR"
            await ws.send_text(_error(exc.message, code))
            await ws.close(_POLICY)
            return
        conn = _Connection(ws, held, self.config.idle_timeout)
        for session in held:
            session.on_idle = conn.idle
        try:
            await conn.serve()
        finally:
            conn.end()
            with contextlib.suppress(Exception):  # already closed by the client
                await ws.close()


async def _answer(call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """An HTTP request's answer, or the HTTP error its failure is."""
    try:
        return await call
    except JsonValueError as exc:
        raise HTTPException(422, str(exc)) from None
    except UsageError as exc:
        raise HTTPException(409, exc.message) from None
    except AioEnvError as exc:
        raise HTTPException(500, f"{type(exc).__name__}: {exc.message}") from None


def _error(message: str, code: str, tag: dict[str, Any] | None = None, **extra: Any) -> str:
    """An error message; ``tag`` (the request's ``session`` and ``id``) beside ``data``, as on an answer."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}, **(tag or {})})


class _Connection:
    """One WebSocket connection and the sessions it holds: OpenEnv's one-at-a-time messages, and aioenv's tagged
    ones that run side by side."""

    def __init__(self, ws: WebSocket, sessions: list[Session], idle_timeout: float) -> None:
        self.ws = ws
        self.sessions = sessions
        self.idle_timeout = idle_timeout
        self.tasks: set[asyncio.Task[None]] = set()
        self.lock = asyncio.Lock()  # one message written at a time
        self.closing = False
        self.last_message = time.monotonic()

    def idle(self) -> None:
        """A session of it has been idle too long: close the connection once all of them have."""
        now = time.monotonic()
        if self.closing or now - self.last_message <= self.idle_timeout:
            return
        if any(now - s.last_used <= self.idle_timeout for s in self.sessions):
            return
        self.closing = True
        log.info("WebSocket connection of %d sessions idle for %.0f s: closed", len(self.sessions), self.idle_timeout)
        self._spawn(self.ws.close(1000, "idle"))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the reading loop, held in :attr:`tasks` (bounded, and cancelled by :meth:`end`)."""
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def send(self, text: str) -> None:
        async with self.lock:
            await self.ws.send_text(text)

    async def serve(self) -> None:
        # Requests in flight (or answers a client has not read, waiting for its socket to drain) are bounded: past
        # the bound the port reads no more from this connection until some are answered, and the client's own
        # sends block (flow control), so a client that never reads holds a bounded amount of the port's memory.
        bound = 4 * len(self.sessions) + 16
        while True:
            while len(self.tasks) >= bound:
                await asyncio.wait(set(self.tasks), return_when=asyncio.FIRST_COMPLETED)
            try:
                raw = await self.ws.receive_text()
            except (WebSocketDisconnect, RuntimeError):  # RuntimeError: closed by the port (idle)
                return
            except KeyError:  # a binary frame: OpenEnv's messages are text
                await self.send(_error("messages are JSON text frames", "INVALID_JSON"))
                continue
            try:
                message = json.loads(raw)
            except json.JSONDecodeError as exc:
                await self.send(_error(f"Invalid JSON: {exc}", "INVALID_JSON"))
                continue
            except RecursionError:  # arrays or objects nested deeper than Python's parser goes
                await self.send(_error("Invalid JSON: nested too deep", "INVALID_JSON"))
                continue
            if not isinstance(message, dict):
                await self.send(_error(f"a message is a JSON object, got {type(message).__name__}", "INVALID_JSON"))
                continue
            kind = message.get("type")
            if kind == "close":
                return
            tag = {k: message[k] for k in ("session", "id") if k in message}
            self.last_message = time.monotonic()  # any message keeps the connection alive
            if kind == "step_batch":
                self._batch(message, tag)
                continue
            if "session" in message:  # aioenv's own: runs beside the others, answered tagged when done
                self._spawn(self._one(message, tag))
            else:
                await self._one(message, tag)

    def _session(self, tag: dict[str, Any]) -> Session:
        index = tag.get("session", 0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.sessions):
            raise JsonValueError(f"session must be an integer in [0, {len(self.sessions) - 1}], got {index!r}")
        return self.sessions[index]

    async def _one(self, message: dict[str, Any], tag: dict[str, Any]) -> None:
        kind = message.get("type")
        data = message.get("data") or {}
        try:
            session = self._session(tag)
            if session.busy is not None and not session.busy.done():
                raise UsageError(f"session {tag.get('session', 0)} has a request in flight: one at a time per env")
            if not isinstance(data, dict):
                raise JsonValueError(f"data must be a JSON object, got {type(data).__name__}")
            if kind == "reset":
                body = ResetBody.model_validate(data)
                reply = {"type": "observation", "data": await session.reset(body)}
            elif kind == "step":
                if "action" not in data:
                    raise JsonValueError("step data must hold 'action': one element of the action space (GET /schema)")
                reply = {"type": "observation", "data": await session.step(data["action"])}
            elif kind == "state":
                reply = {"type": "state", "data": session.state()}
            else:
                raise _Unknown(
                    f"Unknown message type: {printable(str(kind))!r} (reset, step, state, close, step_batch)"
                )
        except _Unknown as exc:
            await self._reply(_error(str(exc), "UNKNOWN_TYPE", tag))
        except (JsonValueError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            await self._reply(_error(str(exc), "VALIDATION_ERROR", tag))
        except AioEnvError as exc:
            await self._reply(_error(exc.message, "EXECUTION_ERROR", tag, error=type(exc).__name__))
        else:
            await self._reply(json.dumps({**reply, **tag}))

    def _batch(self, message: dict[str, Any], tag: dict[str, Any]) -> None:
        actions = (message.get("data") or {}).get("actions") if isinstance(message.get("data"), dict) else None
        if not isinstance(actions, dict) or not actions:
            error = _error("step_batch data must hold 'actions': {session index: action}", "VALIDATION_ERROR", tag)
            self._spawn(self._reply(error))
            return
        for key, action in actions.items():
            index: Any = int(key) if isinstance(key, str) and key.isdigit() else key
            self._spawn(self._one({"type": "step", "data": {"action": action}}, {**tag, "session": index}))

    async def _reply(self, text: str) -> None:
        with contextlib.suppress(Exception):  # the client went away: its sessions are given back by end()
            await self.send(text)

    def end(self) -> None:
        for task in self.tasks:
            task.cancel()
        for session in self.sessions:
            session.release()


class _Unknown(Exception):
    """A message of a type the port does not know."""


class _Embedded(uvicorn.Server):
    """A uvicorn server run on the caller's loop, which leaves signals to the caller (``aioenv serve`` handles
    SIGTERM and SIGINT itself)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

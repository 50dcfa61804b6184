"""One OpenEnv WebSocket session as an :class:`aioenv.AsyncEnv`.

:class:`OpenEnvEnv` speaks OpenEnv's ``/ws`` protocol itself (with ``websockets``, which OpenEnv's own client
uses too): JSON messages ``{"type": "reset" | "step" | "close", "data": ...}``, answered by
``{"type": "observation" | "error", "data": ...}``. An observation's ``data`` is
``{"observation": {...}, "reward": ..., "done": ..., "metadata": {...}}``:

- ``observation`` (less ``done``, ``reward`` and ``metadata``) is the env's observation, a value of its
  ``observation_space`` (:mod:`aioenv.openenv.spaces`);
- ``done`` is ``terminated`` (OpenEnv has no truncation: ``truncated`` is always False);
- ``reward`` is the reward (``None``, as a reset's, is 0.0);
- ``metadata`` is ``info``.

A reset sends ``{"seed": seed, **options}`` (an OpenEnv env's ``reset`` takes ``seed``, ``episode_id`` and its own
keywords). The session opens at the env's first reset, and again at a reset after the connection was lost (a
server that was restarted is reached again); an ``"error"`` reply raises :class:`OpenEnvError` and a lost connection
:class:`OpenEnvConnectionError`, which the pool reports as the env's ``EnvError``. ``close`` sends ``"close"`` and
closes the socket, so the server ends the session (and closes its environment) at once.

The env's spaces come from the server's ``/schema``, read once per process and URL (:func:`server_fields`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aioenv.env import AsyncEnv
from aioenv.openenv.spaces import ACTION_EXTRAS, OBSERVATION_EXTRAS, ObjectField, SchemaError, fields_of

__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_MESSAGE_BYTES",
    "OpenEnvConnectionError",
    "OpenEnvEnv",
    "OpenEnvError",
    "base_urls",
    "observation_result",
    "server_fields",
]

#: Seconds to open a session (the TCP connection and the WebSocket handshake) or read ``/schema``.
CONNECT_TIMEOUT = 10.0
#: The largest message a session accepts from its server (an observation), in bytes.
MAX_MESSAGE_BYTES = 64 << 20
#: Seconds a closing session waits for the server's side of the close handshake.
CLOSE_TIMEOUT = 2.0


class OpenEnvError(RuntimeError):
    """The OpenEnv server answered ``"error"`` (its message and code are in the text)."""


class OpenEnvConnectionError(ConnectionError):
    """The session's connection could not be opened or was lost (the next reset opens a new one)."""


def base_urls(url: str) -> tuple[str, str]:
    """``(http base, ws endpoint)`` of a server's URL: ``ws://h:p``, ``http://h:p`` (``wss``/``https`` alike), with or
    without a path prefix; ``ValueError`` naming what is expected for anything else."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "http": "http", "wss": "https", "https": "https"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise ValueError(f"expected an OpenEnv server's URL, ws://HOST:PORT or http://HOST:PORT, got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/ws"):
        path = path[: -len("/ws")]
    http = urlunsplit((scheme, parts.netloc, path, "", ""))
    ws = urlunsplit(("wss" if scheme == "https" else "ws", parts.netloc, path + "/ws", "", ""))
    return http, ws


_FIELDS: dict[str, tuple[ObjectField, ObjectField]] = {}
_FIELDS_LOCK = threading.Lock()


def server_fields(http_base: str, timeout: float = CONNECT_TIMEOUT) -> tuple[ObjectField, ObjectField]:
    """``(action, observation)`` fields of the server at ``http_base``, from its ``/schema``, read once per process:
    every env of a worker shares the spaces (and a replaced env is made without a request)."""
    with _FIELDS_LOCK:
        if http_base in _FIELDS:
            return _FIELDS[http_base]
        url = http_base + "/schema"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as reply:  # http(s) only: see base_urls
                schema = json.loads(reply.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise OpenEnvConnectionError(f"cannot read the OpenEnv server's schemas at {url}: {exc}") from None
        if not isinstance(schema, dict) or "action" not in schema or "observation" not in schema:
            raise SchemaError(f"{url} answered no 'action' and 'observation' schemas: {str(schema)[:200]}")
        fields = fields_of(schema["action"], ACTION_EXTRAS), fields_of(schema["observation"], OBSERVATION_EXTRAS)
        _FIELDS[http_base] = fields
        return fields


def observation_result(field: ObjectField, data: dict[str, Any]) -> tuple[Any, float, bool, dict[str, Any]]:
    """``(obs, reward, terminated, info)`` of an ``"observation"`` reply's ``data`` (see the module). Older servers
    (OpenEnv 0.3) send no ``metadata``: their info is empty."""
    reward, info = data.get("reward"), data.get("metadata")
    info = dict(info) if isinstance(info, dict) else {}
    return field.decode(data.get("observation")), 0.0 if reward is None else float(reward), bool(data.get("done")), info


class OpenEnvEnv(AsyncEnv[dict[str, Any], dict[str, Any]]):
    """One session of the OpenEnv server at ``url`` (``ws://HOST:PORT`` or ``http://HOST:PORT``); see the module.

    Args:
        url: the server's base URL.
        connect_timeout: seconds to open the session or read ``/schema``.
        max_message_bytes: the largest observation message accepted.
        headers: extra HTTP headers of the WebSocket handshake (e.g. ``{"Authorization": "Bearer ..."}``).
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._point_at(url)
        self.connect_timeout = float(connect_timeout)
        self.max_message_bytes = int(max_message_bytes)
        self.headers = dict(headers or {})
        self._action, self._observation = self._fields()
        self.action_space = self._action.space
        self.observation_space = self._observation.space
        self._ws: Any = None  # websockets' ClientConnection while a session is open

    def _fields(self) -> tuple[ObjectField, ObjectField]:
        """``(action, observation)`` fields of the env's server (read once per process and server)."""
        return server_fields(self.http_base, self.connect_timeout)

    def _point_at(self, url: str) -> None:
        """Open the next session on the server at ``url`` (one this env started again may have moved)."""
        self.url = url
        self.http_base, self.ws_url = base_urls(url)

    async def _ensure_server(self) -> None:
        """Before a session opens: have the server it opens on running. A server someone else runs is as it is."""

    async def _replace_server(self) -> bool:
        """After a session was refused: replace the server, if this env runs it (then True: try once more)."""
        return False

    async def _open_session(self) -> None:
        await self._ensure_server()
        try:
            await self._connect()
        except OpenEnvConnectionError:
            if not await self._replace_server():
                raise
            await self._connect()

    async def _connect(self) -> None:
        from websockets.asyncio.client import connect

        try:
            self._ws = await connect(
                self.ws_url,
                open_timeout=self.connect_timeout,
                max_size=self.max_message_bytes,
                close_timeout=CLOSE_TIMEOUT,
                additional_headers=self.headers or None,
                proxy=None,
            )
        except Exception as exc:  # noqa: BLE001 - refused, timed out, or websockets' own handshake errors
            raise OpenEnvConnectionError(
                f"cannot open a session on the OpenEnv server {self.ws_url}: {exc!r}"
            ) from None

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        ws = self._ws
        try:
            await ws.send(json.dumps(message))
            text = await ws.recv()
        except ConnectionClosed as exc:
            self._ws = None
            # A server that refuses a session (at its limit, its env failed to start) says why, then closes: that
            # reply may be waiting still, read before the close.
            text = None
            with contextlib.suppress(ConnectionClosed):
                text = await ws.recv()
            if text is None:
                raise OpenEnvConnectionError(
                    f"the OpenEnv server {self.ws_url} closed the session during {message['type']} ({exc}); "
                    "reset to open a new one"
                ) from None
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not isinstance(reply.get("data"), dict):
            raise OpenEnvError(f"the OpenEnv server {self.ws_url} answered {message['type']} with {str(text)[:200]!r}")
        data: dict[str, Any] = reply["data"]
        if reply.get("type") == "error":
            why = str(data.get("message", ""))
            if data.get("errors"):
                why += f": {json.dumps(data['errors'])[:500]}"
            code = data.get("code")
            raise OpenEnvError(f"the OpenEnv server {self.ws_url} refused {message['type']} ({code}): {why}")
        return data

    def _result(self, data: dict[str, Any]) -> tuple[Any, float, bool, dict[str, Any]]:
        return observation_result(self._observation, data)

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode (opening the session first when there is none); ``options`` go to the server's reset."""
        if self._ws is None:
            await self._open_session()
        data = dict(options or {})
        if seed is not None:
            data["seed"] = int(seed)
        try:
            reply = await self._call({"type": "reset", "data": data})
        except OpenEnvError:
            await self._end_session()  # the server may have ended it (a refused one): the next reset opens one
            raise
        obs, _, _, info = self._result(reply)
        return obs, info

    async def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Send ``action`` (a value of ``action_space``, or a dict of its fields) as the OpenEnv action's JSON."""
        if self._ws is None:
            raise OpenEnvConnectionError(f"no open session on the OpenEnv server {self.ws_url}: reset first")
        obs, reward, done, info = self._result(await self._call({"type": "step", "data": self._action.encode(action)}))
        return obs, reward, done, False, info

    async def close(self) -> None:
        """End the session: ``"close"``, then the socket's close handshake (at most :data:`CLOSE_TIMEOUT`)."""
        await self._end_session()

    async def _end_session(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await ws.send(json.dumps({"type": "close"}))
        with contextlib.suppress(Exception):
            await ws.close()

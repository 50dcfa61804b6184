"""CURVE authentication for ``aioenv serve`` (ZeroMQ's CURVE through pyzmq's ``zmq.auth``).

Keys are files written by ``aioenv keygen DIR --name NAME``: ``NAME.key`` (the public key, safe to
share) and ``NAME.key_secret`` (the key pair, keep it private). A server started with
``--auth DIR`` uses ``DIR/server.key_secret`` as its own key pair and admits exactly the peers whose
public key is one of the other ``DIR/*.key`` files: its own ``server.key`` (which every client holds,
to know the server) admits nobody. A client passes its own key pair and the server's
public key: ``aioenv.make(..., endpoint=..., curve_keys=("alice.key_secret", "server.key"))``. A peer
without an admitted key completes no handshake: it learns nothing, not even an error, and its pool
fails with ``ConnectionLost`` after the heartbeat timeout. Traffic of admitted peers is encrypted.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

__all__ = ["Refusals", "ServerAuth", "client_configurer", "create_keys"]

log = logging.getLogger("aioenv.auth")


def create_keys(directory: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """Write a new key pair ``NAME.key`` / ``NAME.key_secret`` into ``directory`` (created 0700 if needed)."""
    path = Path(directory)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"a key name is a plain file name, got {name!r}")
    if (path / f"{name}.key_secret").exists():
        raise FileExistsError(f"{path / (name + '.key_secret')} exists: pick another name or remove it first")
    public, secret = zmq.auth.create_certificates(path, name)
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def _load(path: str | os.PathLike[str], *, secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, private = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the key file {path}: {exc}") from exc
    if secret and private is None:
        raise ValueError(f"{path} holds a public key only: pass the .key_secret file (made by aioenv keygen)")
    return public, private


def client_configurer(keys: tuple[str, str]) -> Callable[[zmq.Socket[Any]], None]:
    """Socket options for a client with ``keys = (own .key_secret file, the server's .key file)``."""
    own, server = keys
    public, private = _load(own, secret=True)
    server_public, _ = _load(server, secret=False)

    def configure(sock: zmq.Socket[Any]) -> None:
        sock.curve_publickey = public
        sock.curve_secretkey = private
        sock.curve_serverkey = server_public

    return configure


class ServerAuth:
    """The server side: its key pair from ``DIR/server.key_secret``; admitted peers: the public keys of
    ``DIR/*.key`` other than the server's own (``admitted`` names their files)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        own = self.directory / "server.key_secret"
        if not own.exists():
            raise ValueError(f"{own} is missing: run `aioenv keygen {directory} --name server` first")
        self.public, self.private = _load(own, secret=True)
        clients = {p.name: _load(p, secret=False)[0] for p in sorted(self.directory.glob("*.key"))}
        clients = {name: key for name, key in clients.items() if name != "server.key" and key != self.public}
        self.admitted = sorted(clients)
        self._keys = frozenset(clients.values())
        self._holders = {key.decode("ascii"): name.removesuffix(".key") for name, key in clients.items()}
        self._authenticator: Any = None
        self.refusals = Refusals()

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP's question for a CURVE handshake: is this (z85-encoded) client key admitted?"""
        if key in self._keys:
            return True
        self.refusals.refused(key)
        return False

    def user(self, frame: Any) -> str | None:
        """The client a received message (``frame``, one of its frames) came from: the public key (z85) its CURVE
        handshake proved, which the ZAP handler gave its connection as user id; None when ZeroMQ cannot say."""
        try:
            user = frame.get("User-Id")
        except (zmq.ZMQError, AttributeError, TypeError):
            return None
        return user if isinstance(user, str) and user in self._holders else None

    def holder(self, user: str) -> str:
        """How logs and the status name the client of public key ``user``: its key file's name (``alice`` for
        ``alice.key``)."""
        return self._holders.get(user, f"key {user[:8]}...")

    def start(self) -> None:
        """Start the ZAP handler (in this event loop) that checks peers' keys."""
        from zmq.auth.asyncio import AsyncioAuthenticator

        self._authenticator = AsyncioAuthenticator(zmq.Context.instance())
        self._authenticator.start()
        self._authenticator.configure_curve_callback(domain="*", credentials_provider=self)

    def configure(self, sock: zmq.Socket[Any]) -> None:
        """Make ``sock`` a CURVE server (before it binds)."""
        sock.curve_secretkey = self.private
        sock.curve_publickey = self.public
        sock.curve_server = True

    def stop(self) -> None:
        """Stop the ZAP handler."""
        if self._authenticator is not None:
            self._authenticator.stop()
            self._authenticator = None


class Refusals:
    """Logs refused CURVE handshakes without letting a flood of them flood the log: a line the first time a
    key is refused and then at most once per ``every`` seconds for it, and at most ``burst`` lines per
    ``every`` seconds in all (the rest are counted and reported in the next line). Keys appear as the
    first 8 characters of the public key (never a secret key: the server never sees one)."""

    def __init__(self, every: float = 60.0, burst: int = 10, remember: int = 4096) -> None:
        self.every, self.burst, self.remember = every, burst, remember
        self.count = 0  # every refusal since the start
        self._last: OrderedDict[bytes, float] = OrderedDict()  # key -> when it was last logged
        self._window = (0.0, 0)  # (start of the current window, lines logged in it)
        self._unlogged = 0

    def refused(self, key: bytes, now: float | None = None) -> bool:
        """Count a refusal of ``key`` (z85 public key); True when it was logged."""
        now = time.monotonic() if now is None else now
        self.count += 1
        start, lines = self._window if now - self._window[0] < self.every else (now, 0)
        seen = self._last.get(key)
        if (seen is not None and now - seen < self.every) or lines >= self.burst:
            self._window = (start, lines)
            self._unlogged += 1
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.remember:
            self._last.popitem(last=False)
        self._window = (start, lines + 1)
        more = f" ({self._unlogged} more refusals not logged)" if self._unlogged else ""
        self._unlogged = 0
        log.warning("refused a CURVE handshake: key %s... is not admitted%s", key[:8].decode(errors="replace"), more)
        return True

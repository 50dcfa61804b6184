"""Turning the ``env`` argument of :func:`aioenv.make` into wire-safe source descriptions.

- ``"CartPole-v1"`` (a gymnasium id) -> ``{"kind": "gym", "id": ...}``
- ``"pkg.module:factory"`` (or gymnasium's ``"module:EnvId-v0"``) -> ``{"kind": "entry", "target": ...}``
- a callable -> written with cloudpickle to a file in the pool's private directory and sent as
  ``{"kind": "pickle", "path": ...}``: local workers load it from disk; no pickle crosses a socket.
- a sequence of callables -> one source per distinct callable, env ``i`` uses the ``i``-th.
- ``"openenv+ws://HOST:PORT"``, ``"openenv+app:pkg.module:app"`` or ``"openenv+image:IMAGE"`` (an OpenEnv
  environment) -> ``{"kind": "openenv", "url" | "app" | "image": ...}`` (workers make them with
  :mod:`aioenv.openenv.source`); local pools only.

A server's sources (``strict=True``) carry ``"strict": true``: a client over the network named them, so the
worker checks what a name leads to before it calls anything (:func:`workers.sources.reach`); the server never
imports a client's module itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aioenv.errors import UsageError
from aioenv.wire.options import positive_int

__all__ = ["OPENENV_PREFIX", "EnvSources", "openenv_source", "parse_sources"]

#: What the name of an OpenEnv environment starts with (:mod:`aioenv.openenv.source`).
OPENENV_PREFIX = "openenv+"


@dataclass
class EnvSources:
    """Sources by key, and the key of each env (``keys[i]`` for env ``i``)."""

    sources: dict[str, dict[str, Any]]
    keys: list[str]

    @property
    def asynchronous(self) -> bool:
        """Whether every env is known to be an ``aioenv.AsyncEnv`` without making one (OpenEnv sessions), so
        ``executor="auto"`` chooses ``async`` without timing an env."""
        return all(s.get("kind") == "openenv" for s in self.sources.values())

    def for_envs(self, env_ids: Sequence[int]) -> tuple[list[list[Any]], dict[str, dict[str, Any]]]:
        """The MAKE payload for ``env_ids``: ``[[env_id, key]]`` and the sources they use."""
        pairs = [[int(i), self.keys[int(i)]] for i in env_ids]
        used = {key for _, key in pairs}
        return pairs, {k: v for k, v in self.sources.items() if k in used}


def parse_sources(
    env: Any, num_envs: int | None, env_kwargs: dict[str, Any] | None, private_dir: str | None, strict: bool = False
) -> tuple[EnvSources, int]:
    """Validate ``env``/``num_envs`` and describe the sources; returns ``(sources, num_envs)``.

    ``private_dir`` is where pickled factories are written; ``None`` means callables are refused
    (a remote pool sends names only). ``strict``: a client over the network named ``env`` (a server's pool).
    """
    kwargs = dict(env_kwargs or {})
    if isinstance(env, str):
        if num_envs is None:
            raise TypeError(f"num_envs is required with env={env!r}: how many copies should the pool run?")
        source: dict[str, Any]
        if env.startswith(OPENENV_PREFIX):
            if strict:
                raise UsageError(
                    f"env {env!r}: a server does not open OpenEnv sessions, start OpenEnv apps or run containers a "
                    "client names; "
                    "make the pool on the client's machine (without endpoint=)"
                )
            source = openenv_source(env, kwargs)
            return EnvSources({"0": source}, ["0"] * _check_count(num_envs)), num_envs
        if ":" in env:
            source = {"kind": "entry", "target": env, "kwargs": kwargs}
        else:
            source = {"kind": "gym", "id": env, "kwargs": kwargs}
        if strict:
            source["strict"] = True
        return EnvSources({"0": source}, ["0"] * _check_count(num_envs)), num_envs
    if callable(env):
        if num_envs is None:
            raise TypeError("num_envs is required with a single env factory: how many copies should the pool run?")
        key = _pickle_factory(env, 0, private_dir)
        src = {"kind": "pickle", "path": key, "kwargs": kwargs}
        return EnvSources({"0": src}, ["0"] * _check_count(num_envs)), num_envs
    if isinstance(env, Sequence) and env and all(callable(f) for f in env):
        if num_envs is not None and num_envs != len(env):
            raise ValueError(
                f"num_envs={num_envs} but {len(env)} env factories were given; pass one or make them agree"
            )
        return _factory_sources(env, kwargs, private_dir), len(env)
    raise TypeError(
        "env must be a gymnasium id ('CartPole-v1'), a 'pkg.module:factory' string, a callable that returns "
        f"an env, or a sequence of such callables; got {type(env).__name__}"
    )


_APP_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*")
#: A container image reference: ``[registry[:port]/]name[:tag][@digest]`` (never an option of the engine's).
_IMAGE = re.compile(r"[a-z0-9][A-Za-z0-9._/:-]{0,254}(@sha256:[0-9a-f]{64})?")
_OPENENV_SCHEMES = ("ws", "wss", "http", "https")


def openenv_source(env: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The source of an OpenEnv name: ``"openenv+ws://HOST:PORT"`` (``ws``, ``wss``, ``http``, ``https``; a running
    server), ``"openenv+app:pkg.module:app"`` (an app each worker serves) or ``"openenv+image:IMAGE"`` (a container
    of the image per env); ``ValueError`` naming the forms."""
    rest = env[len(OPENENV_PREFIX) :]
    if rest.startswith("app:") and _APP_TARGET.fullmatch(rest[len("app:") :]):
        return {"kind": "openenv", "app": rest[len("app:") :], "kwargs": kwargs}
    if rest.startswith("image:") and _IMAGE.fullmatch(rest[len("image:") :]):
        return {"kind": "openenv", "image": rest[len("image:") :], "kwargs": kwargs}
    parts = urlsplit(rest)
    if rest.startswith(("app:", "image:")) or parts.scheme not in _OPENENV_SCHEMES or not parts.hostname:
        raise ValueError(
            f"expected 'openenv+ws://HOST:PORT', 'openenv+http://HOST:PORT' (a running OpenEnv server), "
            f"'openenv+app:pkg.module:app' (an OpenEnv app served by each worker) or 'openenv+image:IMAGE' (a "
            f"container of an OpenEnv image per env, IMAGE as 'name:tag' or 'registry/name@sha256:...'), got {env!r}"
        )
    return {"kind": "openenv", "url": rest, "kwargs": kwargs}


def _factory_sources(
    factories: Sequence[Callable[..., Any]], kwargs: dict[str, Any], private_dir: str | None
) -> EnvSources:
    """One pickled source per distinct factory (by identity), env ``i`` using the ``i``-th factory's."""
    sources: dict[str, dict[str, Any]] = {}
    keys: list[str] = []
    seen: dict[int, str] = {}
    for fn in factories:
        if id(fn) not in seen:
            new = str(len(seen))
            seen[id(fn)] = new
            sources[new] = {"kind": "pickle", "path": _pickle_factory(fn, int(new), private_dir), "kwargs": kwargs}
        keys.append(seen[id(fn)])
    return EnvSources(sources, keys)


def _check_count(num_envs: Any) -> int:
    return positive_int("num_envs", num_envs)


def _pickle_factory(fn: Callable[..., Any], index: int, private_dir: str | None) -> str:
    if private_dir is None:
        raise TypeError(
            "a remote pool takes env names only (a gymnasium id or 'pkg.module:factory'), not a callable: "
            "callables are shipped with cloudpickle to local workers only"
        )
    import cloudpickle

    path = os.path.join(private_dir, f"factory-{index}.pkl")
    with open(path, "wb") as fh:
        cloudpickle.dump(fn, fh)
    return path

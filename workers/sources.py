"""Turning an env *source* description from a MAKE message into env objects.

A source is a dict:

- ``{"kind": "gym", "id": "CartPole-v1", "kwargs": {...}}``: ``gymnasium.make``.
- ``{"kind": "entry", "target": "pkg.module:factory", "kwargs": {...}}``: import and call.
  When the module has no such attribute the string is handed to ``gymnasium.make``,
  which understands ``"module:EnvId-v0"`` (it imports the module to register the id).
- ``{"kind": "pickle", "path": ".../factory-0.pkl", "kwargs": {...}}``: a callable shipped
  with cloudpickle by a *local* coordinator. The bytes are read from a file in the
  private directory the worker was started with (``--trusted-dir``), never from a socket;
  a path outside that directory is refused.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

Factory = Callable[[], Any]


class SourceError(ValueError):
    """A source description that cannot be turned into an env factory."""


def resolve(source: Any, trusted_dir: str | None) -> Factory:
    """Return a zero-argument callable that makes one env from ``source``."""
    if not isinstance(source, dict):
        raise SourceError(f"env source must be a map, got {type(source).__name__}")
    kind = source.get("kind")
    kwargs = source.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise SourceError(f"env_kwargs must be a map, got {type(kwargs).__name__}")
    if kind == "gym":
        env_id = _str_field(source, "id")
        return lambda: _gym_make(env_id, kwargs)
    if kind == "entry":
        return _entry_point(_str_field(source, "target"), kwargs)
    if kind == "pickle":
        return _pickled(_str_field(source, "path"), kwargs, trusted_dir)
    raise SourceError(f"unknown env source kind {kind!r}: expected 'gym', 'entry' or 'pickle'")


def _str_field(source: dict[str, Any], key: str) -> str:
    value = source.get(key)
    if not isinstance(value, str) or not value:
        raise SourceError(f"env source field {key!r} must be a non-empty string, got {value!r}")
    return value


def _gym_make(env_id: str, kwargs: dict[str, Any]) -> Any:
    import gymnasium

    return gymnasium.make(env_id, **kwargs)


def _entry_point(target: str, kwargs: dict[str, Any]) -> Factory:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise SourceError(f"expected 'pkg.module:factory', got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SourceError(f"cannot import module {module_name!r} for env source {target!r}: {exc}") from exc
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            # "module:EnvId-v0": gymnasium's own syntax, the import above registered the id.
            return lambda: _gym_make(target, kwargs)
    if not callable(obj):
        raise SourceError(f"{target!r} is a {type(obj).__name__}, expected a callable that returns an env")
    factory = obj
    return lambda: factory(**kwargs)


def _pickled(path: str, kwargs: dict[str, Any], trusted_dir: str | None) -> Factory:
    if trusted_dir is None:
        raise SourceError(
            "this worker accepts no pickled env factories (it was not started by a local pool); "
            "use a gymnasium id or 'pkg.module:factory'"
        )
    real = os.path.realpath(path)
    if os.path.dirname(real) != os.path.realpath(trusted_dir):
        raise SourceError(f"refusing to load a pickled factory outside the worker's trusted directory: {path!r}")
    import cloudpickle

    with open(real, "rb") as fh:
        factory: Callable[..., Any] = cloudpickle.load(fh)
    if kwargs:
        return lambda: factory(**kwargs)
    return factory

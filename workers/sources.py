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
- ``{"kind": "openenv", "url": "ws://HOST:PORT" | "app": "pkg.module:app" | "image": IMAGE, "kwargs": {...}}``: an
  OpenEnv session per env (:mod:`aioenv.openenv.source`); never from a server's client (``strict``).

A source a server made from a client's request carries ``"strict": true``: a client over the network named it,
so :func:`reach` checks what the name leads to before anything is called (a class or a function defined in the
named module, or a gymnasium id that module registers; no path through anything else, no private names), no
env_kwargs that would point gymnasium at other code (:data:`CODE_KWARGS`) pass, and no pickle is loaded. A
local pool's own names keep the freedom its caller chose them with.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import types
from collections.abc import Callable
from typing import Any

from aioenv.errors import UsageError
from aioenv.wire.options import CODE_KWARGS, private_part

Factory = Callable[[], Any]


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


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
    if source.get("strict", False) is not False:
        try:
            return _strict(source, kind, kwargs)
        except SourceError as exc:  # the client asked for it: its error, not the env's
            raise UsageError(str(exc)) from None
    if kind == "gym":
        env_id = _str_field(source, "id")
        return lambda: _gym_make(env_id, kwargs)
    if kind == "entry":
        return _entry_point(_str_field(source, "target"), kwargs)
    if kind == "pickle":
        return _pickled(_str_field(source, "path"), kwargs, trusted_dir)
    if kind == "openenv":
        from aioenv.openenv.source import factory

        try:
            return factory(source, kwargs)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
    raise SourceError(f"unknown env source kind {kind!r}: expected 'gym', 'entry', 'pickle' or 'openenv'")


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


def _strict(source: dict[str, Any], kind: Any, kwargs: dict[str, Any]) -> Factory:
    """The factory of a source a client over the network named, checked before anything is called."""
    if source.get("strict") is not True:
        raise SourceError(f"env source field 'strict' must be true or false, got {source.get('strict')!r}")
    name = source.get("id") if kind == "gym" else source.get("target")
    if not isinstance(name, str) or kind not in ("gym", "entry"):
        raise SourceError(f"a client's env source must be a gymnasium id or 'pkg.module:factory', got {source!r}")
    if code := sorted(CODE_KWARGS.intersection(kwargs)):
        raise SourceError(f"env {name!r}: env_kwargs {code[0]!r} would point gymnasium at other code")
    if ":" not in name:
        return lambda: _gym_make(name, kwargs)
    factory = reach(name)
    if factory is None:
        return lambda: _gym_make(name, kwargs)
    return lambda: factory(**kwargs)


def reach(target: str) -> Callable[..., Any] | None:
    """What a client's ``"pkg.module:factory"`` name leads to, called by nobody yet: a class or a function defined
    in ``pkg.module`` (through classes defined there when the name is a dotted path: a class's classmethod or
    staticmethod); None for gymnasium's ``"module:EnvId"`` when importing the module registered that id.
    ``SourceError`` naming the env, what is expected and what it leads to, for anything else: a private part,
    an imported module or function, a builtin, a ``functools.partial``, a bound method of another object."""
    module_name, _, attr = target.partition(":")
    if private := private_part(target):
        raise SourceError(f"env {target!r} names {private!r}, which starts with '_': private names are never served")
    if not module_name or not attr or ":" in attr:
        raise SourceError(f"env {target!r}: expected 'pkg.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own code failed: the client is told, the process goes on
        raise SourceError(f"env {target!r}: cannot import module {module_name!r}: {exc!r}") from exc
    path = attr.split(".")
    if not all(_NAME.fullmatch(p) for p in path) or (len(path) == 1 and attr not in vars(module)):
        _registered(target, module_name, attr)
        return None
    expected = f"a class or a function defined in {module_name!r}"
    owner: Any = module
    for i, part in enumerate(path):
        where = ":".join((module_name, ".".join(path[:i]))) if i else module_name
        if part not in vars(owner):
            raise SourceError(f"env {target!r}: {where!r} has no {part!r}; expected {expected}")
        found = vars(owner)[part]  # the object's own namespace: no inherited names, no __getattr__
        if i < len(path) - 1:
            if not (isinstance(found, type) and found.__module__ == module_name):
                raise SourceError(f"env {target!r} leads through {_what(found)}; expected {expected}")
            owner = found
            continue
        if isinstance(found, (classmethod, staticmethod)) and owner is not module:
            func = found.__func__
            if isinstance(func, types.FunctionType) and func.__module__ == module_name:
                bound: Callable[..., Any] = found.__get__(None, owner)
                return bound
        elif isinstance(found, (type, types.FunctionType)) and found.__module__ == module_name:
            return found
        raise SourceError(f"env {target!r} is {_what(found)}; expected {expected}")
    raise AssertionError("unreachable")


def _registered(target: str, module_name: str, env_id: str) -> None:
    """None when importing ``module_name`` registered the gymnasium id ``env_id``, else ``SourceError``."""
    import gymnasium

    if env_id not in gymnasium.envs.registry:
        raise SourceError(
            f"env {target!r}: {module_name!r} defines no {env_id!r} and registers no such gymnasium id; expected "
            f"a class or a function defined in {module_name!r}, or a gymnasium id it registers"
        )


def _what(obj: Any) -> str:
    """What ``obj`` is, for an error message: ``a module ('os')``, ``a function defined in 'posix'``."""
    if isinstance(obj, types.ModuleType):
        return f"a module ({obj.__name__!r})"
    if isinstance(obj, functools.partial):
        return "a functools.partial"
    kind = "a class" if isinstance(obj, type) else f"a {type(obj).__name__}"
    where = getattr(obj, "__module__", None)
    if where is None:
        owner = getattr(obj, "__self__", None)
        where = getattr(type(owner), "__module__", None) if owner is not None else None
    return f"{kind} defined in {where!r}" if isinstance(where, str) else kind

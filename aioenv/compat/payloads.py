"""How the drop-in adapters carry arbitrary values: ``get_attr``, ``env_method`` and ``set_attr``.

Worker processes import this module (the env factories of :class:`~aioenv.compat.sb3.AioVecEnv`
live here), so it imports neither Stable-Baselines3 nor torch.

Arbitrary values (``get_attr``/``env_method``/``set_attr``) and exceptions of their own type
----------------------------------------------------------------------------------------------
The pool's wire carries msgpack only: no pickle ever crosses a socket. Values that msgpack
carries exactly (:func:`is_plain`) travel inline. Anything else is pickled (cloudpickle) into a
file of the pool's private 0700 directory, the same trust model as pickled env factories
(``workers/sources.py``): only the file's *name* crosses the socket, and each side loads files
from that directory only. A worker knows the directory from ``--trusted-dir`` (exported as
``$AIOENV_TRUSTED_DIR``); a worker without one (a remote worker) refuses pickled payloads and can
return msgpack values only.

Helper request ``payload`` (a msgpack map): ``{}`` ("get", "has"), ``{"key": [module, qualname]}``
("is_wrapped"), ``{"args": [...], "kw": {...}}`` or ``{"file": name}`` holding ``(args, kwargs)``
("call"), ``{"value": v}`` or ``{"file": name}`` ("set"); every request also carries ``"tag"``, a
token the worker puts in the names of the result files it writes. Reply (a msgpack map):
``{"ok": value}``, ``{"file": name}`` holding ``(ok, value_or_exception)``, or
``{"exc": [module, qualname, message]}`` for an exception that could not be pickled.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import glob
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

__all__ = [
    "HELPER_NAME",
    "TRUSTED_DIR_ENV",
    "CompatFactory",
    "PayloadError",
    "Transfer",
    "class_key",
    "is_plain",
]

#: Name of the helper attached to every env made by a :class:`CompatFactory`.
HELPER_NAME = "_aioenv_compat"

#: Environment variable through which a worker started with ``--trusted-dir`` tells in-worker code
#: the directory it may load pickled payloads from (set by ``python -m workers``).
TRUSTED_DIR_ENV = "AIOENV_TRUSTED_DIR"

_RESULT_PREFIX = "compat-res-"
_ARG_PREFIX = "compat-arg-"
_TAG = re.compile(r"[0-9a-f]{16}")
_NUMERIC_KINDS = frozenset("biufc")
_MAX_DEPTH = 32


class PayloadError(ValueError):
    """A pickled payload that must not be loaded: outside the trusted directory, or no trusted directory."""


def class_key(cls: type) -> list[str]:
    """``[module, qualname]`` of a class: enough to recognise it in a worker without importing it."""
    return [cls.__module__, cls.__qualname__]


def is_plain(value: Any, _depth: int = 0) -> bool:
    """True when msgpack (with aioenv's tuple and numpy extensions) carries ``value`` back exactly:
    same types, same values. Anything else travels pickled through a file."""
    if _depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if value is None or kind in (bool, float, str, bytes):
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if kind in (list, tuple):
        return all(is_plain(v, _depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and is_plain(v, _depth + 1) for k, v in value.items())
    if kind is np.ndarray or isinstance(value, np.generic):
        return value.dtype.kind in _NUMERIC_KINDS and not value.dtype.fields
    return False


# ---------------------------------------------------------------- file helpers (both sides)


def _inside(directory: str, name: Any) -> str:
    """The real path of file ``name`` in ``directory``; :class:`PayloadError` for anything else."""
    if not isinstance(name, str) or not name or name != os.path.basename(name) or name in (".", ".."):
        raise PayloadError(f"refusing a pickled payload that is not a plain file name: {name!r}")
    real_dir = os.path.realpath(directory)
    real = os.path.realpath(os.path.join(real_dir, name))
    if os.path.dirname(real) != real_dir:
        raise PayloadError(f"refusing to load a pickled payload outside the trusted directory: {name!r}")
    return real


def _write(directory: str, prefix: str, obj: Any) -> str:
    """Pickle ``obj`` into a new private file of ``directory``; returns the file's name."""
    data = cloudpickle.dumps(obj)  # before the file exists: a failure leaves nothing behind
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".pkl", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return os.path.basename(path)


def _read(path: str, *, delete: bool) -> Any:
    """Load a pickled file (no symlinks followed); unlink it first when ``delete``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        if delete:
            os.unlink(path)
        return cloudpickle.load(fh)


# ---------------------------------------------------------------- worker side


def _trusted_dir() -> str | None:
    return os.environ.get(TRUSTED_DIR_ENV) or None


def _load_arg(payload: dict[str, Any], trusted_dir: str | None) -> Any:
    """The pickled argument named by ``payload["file"]``, from the trusted directory only."""
    if trusted_dir is None:
        raise PayloadError(
            "this worker has no trusted directory (it was not started by a local pool, e.g. a remote worker): "
            "it accepts no pickled arguments, only msgpack values are supported there"
        )
    return _read(_inside(trusted_dir, payload["file"]), delete=False)  # the coordinator deletes it


def _is_wrapped(env: Any, key: Sequence[str]) -> bool:
    """SB3's ``is_wrapped``: walk ``env.env`` through gymnasium wrappers, matching classes by MRO name."""
    import gymnasium

    target = (key[0], key[1])
    current = env
    while isinstance(current, gymnasium.Wrapper):
        if any((c.__module__, c.__qualname__) == target for c in type(current).__mro__):
            return True
        current = current.env
    return False


def _exc_reply(exc: BaseException) -> dict[str, Any]:
    return {"exc": [type(exc).__module__, type(exc).__qualname__, str(exc)]}


def _reply(ok: bool, value: Any, tag: str, trusted_dir: str | None) -> dict[str, Any]:
    """A msgpack reply: the value inline when plain, else the name of a pickled result file."""
    if ok and is_plain(value):
        return {"ok": value}
    if trusted_dir is None:
        if not ok:
            return _exc_reply(value)
        return _exc_reply(
            TypeError(
                f"cannot return a {type(value).__module__}.{type(value).__qualname__} from this worker: it has no "
                "trusted directory (e.g. a remote worker), only msgpack values are supported there"
            )
        )
    try:
        return {"file": _write(trusted_dir, f"{_RESULT_PREFIX}{tag}-", (ok, value))}
    except Exception as exc:  # noqa: BLE001 - an unpicklable value becomes a clear error for the caller
        if not ok:
            return _exc_reply(value)
        return _exc_reply(TypeError(f"cannot send {type(value).__name__} back from the worker: {exc}"))


def _helper(env: Any, op: str, name: str = "", payload: Any = None, trusted_dir: str | None = None) -> Any:
    """The worker side of the compat calls (run through ``Pool.call(HELPER_NAME, ...)``).

    ``op``: ``"get"`` (``env.get_wrapper_attr(name)``), ``"has"``, ``"call"``, ``"set"``
    (``setattr(env, name, value)`` on the outer env, as SB3 does) or ``"is_wrapped"``; ``payload``
    and the reply are described in the module docstring. ``trusted_dir`` defaults to
    ``$AIOENV_TRUSTED_DIR``. Raises :class:`PayloadError` (the call fails for this env) for a
    pickled argument outside the trusted directory or on a worker without one.
    """
    trusted = trusted_dir if trusted_dir is not None else _trusted_dir()
    fields = payload if isinstance(payload, dict) else {}
    tag = fields.get("tag")
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        tag = secrets.token_hex(8)
    if op == "is_wrapped":
        return {"ok": _is_wrapped(env, fields["key"])}
    if op == "has":
        try:
            env.get_wrapper_attr(name)
        except AttributeError:
            return {"ok": False}
        except Exception as exc:  # noqa: BLE001 - a property that raised: the caller re-raises it
            return _reply(False, exc, tag, trusted)
        return {"ok": True}
    # Arguments are loaded before anything runs: a refused file fails the call as PayloadError.
    if op == "call":
        args, kwargs = _load_arg(fields, trusted) if "file" in fields else (fields["args"], fields["kw"])
    elif op == "set":
        new = _load_arg(fields, trusted) if "file" in fields else fields["value"]
    elif op != "get":
        raise ValueError(f"unknown compat operation {op!r}")
    try:
        if op == "get":
            value = env.get_wrapper_attr(name)
        elif op == "call":
            value = env.get_wrapper_attr(name)(*args, **kwargs)
        else:
            setattr(env, name, new)
            value = None
    except Exception as exc:  # noqa: BLE001 - the caller re-raises it with its own type
        return _reply(False, exc, tag, trusted)
    return _reply(True, value, tag, trusted)


# ---------------------------------------------------------------- coordinator side


def _rebuild_exception(module: Any, qualname: Any, message: Any) -> BaseException:
    """An exception described by a worker that could not pickle it: its own type when builtin."""
    if module == "builtins" and isinstance(qualname, str):
        cls = getattr(builtins, qualname, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            with contextlib.suppress(Exception):
                return cls(message)
    return RuntimeError(f"{module}.{qualname}: {message}")


class Transfer:
    """One compat call's payload files in the pool's private directory (the coordinator side).

    Use as a context manager: :meth:`payload` builds the request (pickling into a file only what
    msgpack cannot carry exactly), :meth:`decode` turns the replies into values (re-raising the
    envs' own exceptions), and leaving the block deletes the argument file and every result file
    the workers wrote for this call, whatever happened.
    """

    def __init__(self, private_dir: str) -> None:
        self.private_dir = private_dir
        self.tag = secrets.token_hex(8)
        self._arg: str | None = None

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def payload(
        self, inline: dict[str, Any] | None = None, pickled: Any = None, *, plain: bool = True
    ) -> dict[str, Any]:
        """The request map: ``inline`` fields when ``plain``, else ``pickled`` written to a file."""
        fields: dict[str, Any] = {"tag": self.tag}
        if plain:
            fields.update(inline or {})
        else:
            self._arg = _write(self.private_dir, f"{_ARG_PREFIX}{self.tag}-", pickled)
            fields["file"] = self._arg
        return fields

    def decode(self, replies: Sequence[Any]) -> list[Any]:
        """One value per reply (env order); every result file is read and deleted, then the first
        env's exception, if any, is raised with its own type."""
        out: list[Any] = []
        first: BaseException | None = None
        for reply in replies:
            try:
                out.append(self._one(reply))
            except Exception as exc:  # noqa: BLE001 - re-raised below, once every file was consumed
                out.append(None)
                first = first or exc
        if first is not None:
            raise first
        return out

    def _one(self, reply: Any) -> Any:
        if not isinstance(reply, dict):
            raise TypeError(f"malformed compat reply: {type(reply).__name__}")
        if "ok" in reply:
            return reply["ok"]
        if "exc" in reply:
            raise _rebuild_exception(*list(reply["exc"])[:3])
        name = reply.get("file")
        if not isinstance(name, str) or not name.startswith(f"{_RESULT_PREFIX}{self.tag}-"):
            raise PayloadError(f"refusing a compat result file that this call did not ask for: {name!r}")
        ok, value = _read(_inside(self.private_dir, name), delete=True)
        if not ok:
            raise value
        return value

    def cleanup(self) -> None:
        """Delete this call's argument file and any result file left (a failed or interrupted call)."""
        names = [self._arg] if self._arg else []
        pattern = os.path.join(glob.escape(self.private_dir), f"{_RESULT_PREFIX}{self.tag}-*")
        for path in [*(os.path.join(self.private_dir, n) for n in names), *glob.glob(pattern)]:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._arg = None


class CompatFactory:
    """Wraps an env factory: makes the env, then attaches the compat helper as ``env._aioenv_compat``.

    The helper lets the adapters get/set/call arbitrary values and check the wrapper chain, which
    the pool's msgpack-only ``call`` cannot do (see the module docstring for how non-msgpack values
    travel). The env itself is not wrapped: its wrapper chain, spaces and behaviour are exactly
    those ``env_fn`` built.
    """

    def __init__(self, env_fn: Callable[..., Any]) -> None:
        self.env_fn = env_fn

    def __call__(self, **kwargs: Any) -> Any:
        """Make the env (``kwargs`` from the pool's ``env_kwargs``) and attach the helper."""
        env = self.env_fn(**kwargs)
        # __slots__ or a frozen object: the helper is unavailable (get_attr etc. then fail clearly).
        with contextlib.suppress(AttributeError, TypeError):
            setattr(env, HELPER_NAME, functools.partial(_helper, env))
        return env

"""How errors cross the wire: a plain msgpack map out (:func:`to_wire`, :func:`relay_wire`), an
exception of the :mod:`aioenv.errors` tree back (:func:`from_wire`).

A map: ``{"kind": class name in the tree, "env_id", "type": the remote exception's type name,
"module": the module defining that type, "message", "traceback": formatted remote traceback text}``;
a relayed one (a server passing an error on to its client) adds ``"final": True`` and what the
rebuilt error carried (``remote_message``, a crashed worker's name and exit code). Nothing is pickled.
"""

from __future__ import annotations

import traceback
from typing import Any

import aioenv.errors as tree
from aioenv.errors import AioEnvError, EnvError, ProtocolError, WorkerCrashed

__all__ = ["error_fields", "from_wire", "relay_wire", "to_wire"]

#: Every class of the public tree by name: the ``kind`` an error crosses the wire as.
_BY_NAME: dict[str, type[AioEnvError]] = {name: getattr(tree, name) for name in tree.__all__}


def to_wire(exc: BaseException, *, env_id: int | None = None, traceback_text: str = "") -> dict[str, Any]:
    """Describe an exception as a msgpack-able dict (for a worker's reply)."""
    if isinstance(exc, AioEnvError):
        kind = type(exc).__name__
        message = exc.message
    else:
        kind = "EnvError"
        message = f"{type(exc).__name__}: {exc}"
    desc: dict[str, Any] = {
        "kind": kind if kind in _BY_NAME else "EnvError",
        "env_id": env_id,
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": message,
        "traceback": traceback_text,
    }
    if isinstance(exc, WorkerCrashed):  # e.g. EnvRemade: which worker died, and how
        desc["worker"] = exc.worker
        desc["exitcode"] = exc.exitcode
    return desc


def error_fields(exc: BaseException, env_id: int | None) -> dict[str, Any]:
    """``exc`` as an error description for the wire, with its formatted traceback (env errors; an aioenv
    error carries none): what a worker answers for a failed row."""
    tb = "".join(traceback.format_exception(exc)) if not isinstance(exc, AioEnvError) else ""
    return to_wire(exc, env_id=env_id, traceback_text=tb)


def relay_wire(err: AioEnvError) -> dict[str, Any]:
    """Describe an error that was already rebuilt here for the next hop (a server to its client),
    keeping its type, message, env, remote type and traceback: :func:`from_wire` gives it back as is."""
    desc: dict[str, Any] = {
        "kind": type(err).__name__ if type(err).__name__ in _BY_NAME else "EnvError",
        "env_id": err.env_id,
        "type": getattr(err, "remote_type", "") or type(err).__name__,
        "message": err.message,
        "traceback": getattr(err, "remote_traceback", ""),
        "final": True,
    }
    if isinstance(err, EnvError):
        desc["remote_message"] = err.remote_message
        desc["module"] = err.remote_module
    if isinstance(err, WorkerCrashed):
        desc["worker"] = err.worker
        desc["exitcode"] = err.exitcode
    return desc


def from_wire(desc: Any, *, context: str = "") -> AioEnvError:
    """Rebuild an error sent by :func:`to_wire`. Unknown or malformed input gives a ProtocolError.

    ``context`` (e.g. ``"step"``) is put in front of the message to say what failed.
    """
    if not isinstance(desc, dict):
        return ProtocolError(f"malformed error description: expected a map, got {type(desc).__name__}")
    cls = _BY_NAME.get(str(desc.get("kind", "EnvError")), EnvError)
    env_id = desc.get("env_id")
    env_id = env_id if isinstance(env_id, int) else None
    if desc.get("final"):  # relayed (see relay_wire): the message is complete already
        return _relayed(cls, desc, env_id)
    remote_type = str(desc.get("type", ""))
    remote_message = str(desc.get("message", ""))
    where = f"env {env_id}" if env_id is not None else "worker"
    prefix = f"{context} failed for {where}: " if context else f"{where}: "
    if issubclass(cls, EnvError):
        return cls(
            prefix + remote_message,
            env_id=env_id,
            remote_type=remote_type,
            remote_message=remote_message,
            remote_traceback=str(desc.get("traceback", "")),
            remote_module=str(desc.get("module", "")),
        )
    if issubclass(cls, WorkerCrashed):
        return _crashed(cls, prefix + remote_message, desc, env_id)
    return cls(prefix + remote_message, env_id=env_id)


def _relayed(cls: type[AioEnvError], desc: dict[str, Any], env_id: int | None) -> AioEnvError:
    message = str(desc.get("message", ""))
    if issubclass(cls, EnvError):
        return cls(
            message,
            env_id=env_id,
            remote_type=str(desc.get("type", "")),
            remote_message=str(desc.get("remote_message", "")),
            remote_traceback=str(desc.get("traceback", "")),
            remote_module=str(desc.get("module", "")),
        )
    if issubclass(cls, WorkerCrashed):
        return _crashed(cls, message, desc, env_id)
    return cls(message, env_id=env_id)


def _crashed(cls: type[WorkerCrashed], message: str, desc: dict[str, Any], env_id: int | None) -> WorkerCrashed:
    code = desc.get("exitcode")
    return cls(
        message, env_id=env_id, worker=str(desc.get("worker", "")), exitcode=code if isinstance(code, int) else None
    )

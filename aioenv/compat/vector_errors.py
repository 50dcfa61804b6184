"""What :class:`aioenv.vector.AioVectorEnv` raises, so that code written for gymnasium's ``AsyncVectorEnv``
catches it with the ``except`` clauses it already has.

An aioenv error is re-raised as a class deriving from both the aioenv error and the type ``AsyncVectorEnv``
raises in that case (:func:`as_peer_error`), so ``except aioenv.EnvError`` and ``except ValueError`` both work:

- :class:`aioenv.EnvError` (an env raised in ``reset``/``step``, or its factory raised): also the env's own
  exception type, as ``AsyncVectorEnv`` re-raises it, when this process knows that type: a builtin exception,
  or a class of a module this process has imported (code that catches a class has imported it). The type is
  the error's ``remote_module`` and ``remote_type`` (from a peer that does not send the module: the remote
  traceback's last line, ``module.QualName: message``); anything else stays ``EnvError``.
- :class:`aioenv.StepTimeout` (``step_timeout``): also ``multiprocessing.TimeoutError``, what a
  ``step_wait(timeout)`` raises there.
- :class:`aioenv.WorkerCrashed` (the worker died): also ``EOFError``, what ``AsyncVectorEnv`` raises when an env
  process dies.
- :class:`aioenv.PoolClosed`: also gymnasium's ``ClosedEnvironmentError``.
- a seed gymnasium refuses (:func:`seed_error`): ``aioenv.UsageError`` and ``gymnasium.error.Error``.

:class:`WaitTimeout` is what a ``*_wait(timeout)`` that expires raises: ``multiprocessing.TimeoutError`` (as
``AsyncVectorEnv``) that is also the builtin ``TimeoutError``. :func:`log_env_errors` logs failed envs through
gymnasium's logger in ``AsyncVectorEnv``'s words.
"""

from __future__ import annotations

import builtins
import multiprocessing
import sys
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from gymnasium import logger
from gymnasium.error import ClosedEnvironmentError
from gymnasium.error import Error as GymnasiumError

from aioenv.errors import AioEnvError, EnvError, PoolClosed, StepTimeout, UsageError, WorkerCrashed

__all__ = ["WaitTimeout", "as_peer_error", "combined_error", "log_env_errors", "remote_class", "seed_error"]

#: For aioenv errors that are not an env's own: the type ``AsyncVectorEnv`` raises in that case.
_PEER_BASES: tuple[tuple[type[AioEnvError], type[Exception]], ...] = (
    (StepTimeout, multiprocessing.TimeoutError),
    (WorkerCrashed, EOFError),
    (PoolClosed, ClosedEnvironmentError),
)

_TRACEBACK_HEAD = "Traceback (most recent call last):"


class WaitTimeout(multiprocessing.TimeoutError, TimeoutError):
    """A ``*_wait(timeout)`` that expired: ``multiprocessing.TimeoutError`` as ``AsyncVectorEnv`` raises it, and
    the builtin ``TimeoutError`` too. The call goes on in the background; the next call waits for it first."""


def _raised_name(traceback_text: str, name: str) -> str | None:
    """The qualified name (``module.QualName``) of the exception a formatted traceback ends with, or None.

    The final exception's header is the first unindented line after the last ``Traceback`` line; Python
    prefixes the type with its module unless the module is ``builtins`` or ``__main__``."""
    lines = traceback_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line == _TRACEBACK_HEAD]
    for line in lines[starts[-1] + 1 if starts else 0 :]:
        if not line or line[0].isspace():
            continue
        head = line.split(":", 1)[0].strip()
        if head == name or head.endswith("." + name):
            return head
    return None


def _exception_class(obj: object, name: str) -> type[Exception] | None:
    is_class = isinstance(obj, type) and issubclass(obj, Exception) and obj.__name__ == name
    return obj if is_class and not issubclass(cast(type, obj), AioEnvError) else None  # type: ignore[return-value]


def remote_class(err: EnvError) -> type[Exception] | None:
    """The class of the exception the env raised, when this process knows it (never imports anything)."""
    name = err.remote_type
    if not name.isidentifier():
        return None
    module = err.remote_module
    tried = [name if module in ("builtins", "__main__") else f"{module}.{name}"] if module else []
    # a nested class, or a peer that does not send the module: the traceback's last line names the type
    tried.append(_raised_name(err.remote_traceback, name) or name)
    for qualified in tried:
        found = _lookup(qualified, name)
        if found is not None:
            return found
    return None


def _lookup(qualified: str, name: str) -> type[Exception] | None:
    """The exception class ``qualified`` (``module.QualName``, or a bare builtin or ``__main__`` name) names among
    the modules already imported here, or None."""
    if "." not in qualified:
        for namespace in (builtins, sys.modules.get("__main__")):
            found = _exception_class(getattr(namespace, qualified, None), name)
            if found is not None:
                return found
        return None
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        obj: Any = sys.modules.get(".".join(parts[:cut]))
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        found = _exception_class(obj, name)
        if found is not None:
            return found
    return None


def _reduce(self: AioEnvError) -> tuple[Any, ...]:
    bases = type(self).__bases__
    return (_rebuild, (bases[0], bases[1], self.message, self.__dict__.copy()))


def _rebuild(aio: type[AioEnvError], peer: type[Exception], message: str, state: dict[str, Any]) -> AioEnvError:
    cls = _combined(aio, peer) or aio
    err = cls.__new__(cls)
    err.args = (message,)
    err.__dict__.update(state)
    return err


#: The classes :func:`_combined` made, by ``(aioenv class, peer class)``.
_COMBINED: dict[tuple[type, type], type[AioEnvError] | None] = {}


def _combined(aio: type[AioEnvError], peer: type[Exception]) -> type[AioEnvError] | None:
    """A class deriving from ``aio`` and ``peer`` (None when Python cannot combine them); one per pair."""
    key: tuple[type, type] = (aio, peer)
    if key not in _COMBINED:
        _COMBINED[key] = _make_combined(aio, peer)
    return _COMBINED[key]


def _make_combined(aio: type[AioEnvError], peer: type[Exception]) -> type[AioEnvError] | None:
    name = f"{aio.__name__}[{peer.__qualname__}]"
    try:
        cls = type(name, (aio, peer), {"__module__": __name__, "__qualname__": name, "__reduce__": _reduce})
    except TypeError:  # an instance lay-out conflict
        return None
    return cast(type[AioEnvError], cls)


def combined_error(aio: type[AioEnvError], peer: type[Exception], message: str, **kwargs: Any) -> AioEnvError:
    """A new ``aio`` error that is also a ``peer`` (just an ``aio`` when they cannot be combined)."""
    return (_combined(aio, peer) or aio)(message, **kwargs)


def seed_error(seeds: Sequence[Any], env_ids: Sequence[int]) -> AioEnvError | None:
    """gymnasium's refusal of a seed (``gymnasium.error.Error``, what ``AsyncVectorEnv``'s envs raise from
    ``reset``), also an ``aioenv.UsageError``, naming the env (``seeds[j]`` is env ``env_ids[j]``'s); None when
    every seed is None or an int >= 0."""
    for env_id, seed in zip(env_ids, seeds, strict=True):
        if seed is None or (isinstance(seed, (int, np.integer)) and seed >= 0):
            continue
        if isinstance(seed, (int, np.integer)):
            why = f"Seed must be greater or equal to zero, actual value: {seed}"
        else:
            why = f"Seed must be a python integer, actual type: {type(seed)}"
        return combined_error(UsageError, GymnasiumError, f"seed {seed!r} for env {env_id}: {why}", env_id=env_id)
    return None


def _peer_type(err: AioEnvError) -> type[Exception] | None:
    if isinstance(err, EnvError):
        return remote_class(err)
    return next((peer for aio, peer in _PEER_BASES if isinstance(err, aio)), None)


def as_peer_error(exc: BaseException) -> BaseException:
    """``exc`` as ``AsyncVectorEnv``'s callers catch it (see the module docstring); the same object when it is
    not an aioenv error, already of the peer's type, or no combined class can be made."""
    if not isinstance(exc, AioEnvError):
        return exc
    peer = _peer_type(exc)
    if peer is None or isinstance(exc, peer):
        return exc
    cls = _combined(type(exc), peer)
    if cls is None:
        return exc
    try:
        new = cls.__new__(cls)
    except Exception:  # noqa: BLE001 - a peer class whose __new__ wants arguments: keep the aioenv error
        return exc
    new.args = exc.args
    new.__dict__.update(exc.__dict__)
    new.__cause__, new.__suppress_context__ = exc.__cause__, exc.__suppress_context__
    return new.with_traceback(exc.__traceback__)


def log_env_errors(exc: BaseException) -> None:
    """Log the envs that raised, as ``AsyncVectorEnv`` logs them (gymnasium's logger, the same words): for each,
    ``Received the following error from Worker-<env> - Shutting it down`` and its remote traceback, then
    ``Raising the last exception back to the main process.`` Here "shutting it down" means the env is out of
    service until it is reset; the other envs go on. Nothing is logged for other errors."""
    if not isinstance(exc, EnvError):
        return
    failed = exc.errors or ({exc.env_id: exc} if exc.env_id is not None else {})
    logged = False
    for env_id in sorted(failed):
        err = failed[env_id]
        if isinstance(err, EnvError) and err.remote_traceback:
            logger.error("Received the following error from Worker-%s - Shutting it down", env_id)
            logger.error("%s", err.remote_traceback)
            logged = True
    if logged:
        logger.error("Raising the last exception back to the main process.")

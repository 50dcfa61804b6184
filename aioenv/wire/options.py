"""The names a pool's options take on the wire, and the checks every entry point applies to them.

A pool's ``executor``, ``autoreset_mode`` and ``on_timeout`` travel in MAKE (local workers, a server's
sessions, worker hosts), so their allowed values are defined here once, as ``Literal`` types with the
tuple of their values beside them. :func:`positive_int` and :func:`positive_seconds` are the one
check of a count and of a duration: a pool raises ``ValueError``, a server ``UsageError`` (pass
``error=``), with the same message.
"""

from __future__ import annotations

from typing import Any, Literal, TypeGuard, TypeVar, get_args, overload

import numpy as np

__all__ = [
    "AUTORESET_MODES",
    "CODE_KWARGS",
    "EXECUTORS",
    "ON_TIMEOUT",
    "POOL_EXECUTORS",
    "AutoresetName",
    "Executor",
    "OnTimeout",
    "PoolExecutor",
    "MAX_LABEL",
    "choice",
    "client_label",
    "is_int",
    "positive_int",
    "positive_seconds",
    "private_part",
]

Name = TypeVar("Name", bound=str)

#: env_kwargs names that would point gymnasium at other code (an env spec's fields that name code): a client over
#: the network never passes them. gymnasium>=1.0's ``make`` takes ``max_episode_steps`` and
#: ``disable_env_checker`` itself (they name no code) and hands every other keyword to the env's constructor.
CODE_KWARGS = frozenset(("entry_point", "vector_entry_point", "additional_wrappers"))


def private_part(name: str) -> str | None:
    """The first part of a ``"pkg.module:attr.path"`` name that starts with ``_`` (None when none does, or for a
    name without a colon)."""
    module, colon, attr = name.partition(":")
    if not colon:
        return None
    return next((p for p in (*module.split("."), *attr.split(".")) if p.startswith("_")), None)


#: How a worker runs its envs: one after another (``inline``), one thread each (``thread``), or as
#: coroutines of one event loop (``async``).
Executor = Literal["inline", "thread", "async"]
EXECUTORS: tuple[Executor, ...] = get_args(Executor)

#: What a local pool accepts: a worker executor, ``in_process`` (the envs run in the pool's own process
#: and thread, no worker process) or ``auto`` (chosen from what the envs' first steps cost).
PoolExecutor = Literal["inline", "thread", "async", "in_process", "auto"]
POOL_EXECUTORS: tuple[PoolExecutor, ...] = get_args(PoolExecutor)

#: gymnasium's autoreset modes by name (``gymnasium.vector.AutoresetMode`` values).
AutoresetName = Literal["next_step", "same_step", "disabled"]
AUTORESET_MODES: tuple[AutoresetName, ...] = get_args(AutoresetName)

#: What a step past its deadline becomes: a ``StepTimeout`` error, or a truncated row.
OnTimeout = Literal["error", "truncate"]
ON_TIMEOUT: tuple[OnTimeout, ...] = get_args(OnTimeout)


#: The longest client name (a label the client chooses for itself, shown in a server's log and status).
MAX_LABEL = 128


def client_label(value: Any, *, error: type[Exception] = ValueError) -> str:
    """``value`` if it can be a client's name: printable text (no control characters, no newline) of at most
    :data:`MAX_LABEL` characters, or empty; else ``error`` saying what a name must be and what arrived (a
    length and a type, never the bytes themselves)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise error(f"a client name must be text, got a {type(value).__name__}")
    if len(value) > MAX_LABEL:
        raise error(f"a client name is at most {MAX_LABEL} characters, got {len(value)}")
    if not value.isprintable():
        raise error(f"a client name must be printable text (no control characters), got {value!r}")
    return value


def choice(name: str, value: Any, allowed: tuple[Name, ...], *, error: type[Exception] = ValueError) -> Name:
    """``value`` if it is one of ``allowed`` (typed as they are); else ``error`` naming the option, the choices
    and the value."""
    for name_ in allowed:
        if value == name_ and isinstance(value, str):
            return name_
    raise error(f"{name} must be one of {list(allowed)}, got {value!r}")


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a Python or numpy integer (``True`` and ``False`` are not)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@overload
def positive_int(
    name: str, value: Any, *, allow_none: Literal[False] = ..., error: type[Exception] = ..., unit: str = ...
) -> int: ...


@overload
def positive_int(
    name: str, value: Any, *, allow_none: bool, error: type[Exception] = ..., unit: str = ...
) -> int | None: ...


def positive_int(
    name: str, value: Any, *, allow_none: bool = False, error: type[Exception] = ValueError, unit: str = "int"
) -> int | None:
    """``value`` as an int >= 1 (a numpy integer is accepted; a bool is not); None passes when ``allow_none``.
    The error says ``{name} must be a positive {unit}`` and what arrived."""
    if value is None and allow_none:
        return None
    if not is_int(value) or value < 1:
        raise error(f"{name} must be a positive {unit}, got {value!r}")
    return int(value)


def positive_seconds(name: str, value: Any, *, error: type[Exception] = ValueError) -> float | None:
    """``value`` as a float > 0, or None (no limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise error(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)

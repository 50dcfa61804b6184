"""Errors the coordinator gives requests it cannot serve as asked: a call with a value the wire cannot
carry (:func:`unsendable`), and one env's copy of an error shared by many (:func:`for_env`)."""

from __future__ import annotations

import numpy as np

from aioenv.errors import AioEnvError, UsageError

__all__ = ["for_env", "unsendable"]


def unsendable(kind: str, env_ids: np.ndarray, exc: BaseException) -> UsageError:
    """The error of a ``kind`` request for ``env_ids`` whose message could not be built or encoded (a value
    msgpack cannot carry, such as an int beyond 64 bits or an arbitrary object). Nothing was sent and the
    envs are free again, so the caller may retry with other values."""
    envs = env_ids.tolist()
    where = f"env {envs[0]}" if len(envs) == 1 else f"envs {envs[:8]}{' ...' if len(envs) > 8 else ''}"
    return UsageError(
        f"cannot send the {kind} of {where}: a value it carries cannot cross to the workers "
        f"({type(exc).__name__}: {exc}); nothing was sent and the envs are free",
        env_id=envs[0] if len(envs) == 1 else None,
    )


def for_env(err: AioEnvError, env_id: int) -> AioEnvError:
    """``err`` for one env (a copy with its env id when it named none)."""
    if err.env_id == env_id:
        return err
    copy = type(err).__new__(type(err))
    copy.__dict__.update(err.__dict__)
    copy.args = err.args
    copy.env_id = env_id
    return copy

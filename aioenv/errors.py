"""The aioenv exception tree.

Every error aioenv raises on purpose derives from :class:`AioEnvError`, so one
``except aioenv.AioEnvError`` catches them all. Where a standard exception has
the same meaning the aioenv error also subclasses it, so generic code keeps
working (``except TimeoutError`` catches a step deadline)::

    AioEnvError
    ├── EnvError              the env's own code raised (remote type, message, traceback text)
    │   └── EpisodeEnded      stepped an env whose episode ended (autoreset_mode="disabled")
    ├── InvalidAction         (also ValueError) an action does not fit the action space
    ├── StepTimeout           (also TimeoutError) a step or reset overran its deadline
    ├── WorkerCrashed         the worker hosting the env died; the env was re-made elsewhere
    │   └── EnvRemade         a step of an env re-made since (it was idle when its worker died): reset it
    ├── ProtocolError         a malformed or incompatible message (e.g. protocol version mismatch)
    ├── PoolClosed            the pool is closed (or closing)
    ├── CapacityError         no room for more envs (server limits)
    ├── ConnectionLost        (also ConnectionError) the aioenv server did not answer, or stopped answering
    └── UsageError            (also RuntimeError) API misuse: a busy env, recv with nothing to wait for

Errors that happen on a worker cross the wire as a plain dict and are rebuilt on
the other side (:mod:`aioenv.wire.errors`); the remote traceback travels as text
and is kept on the rebuilt exception (``remote_traceback``), so nothing of it is lost.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AioEnvError",
    "CapacityError",
    "ConnectionLost",
    "EnvError",
    "EnvRemade",
    "EpisodeEnded",
    "InvalidAction",
    "PoolClosed",
    "ProtocolError",
    "StepTimeout",
    "UsageError",
    "WorkerCrashed",
]


class AioEnvError(Exception):
    """Root of every error aioenv raises.

    Attributes:
        env_id: the env the error concerns, or None when it concerns no single env.
        partial: when a batched call (``step``, ``reset``) failed for some envs, the result of
            the envs that succeeded, shaped as the call returns it (rows named by ``info["env_id"]``).
        errors: for such a call, every env's error by env id.
    """

    def __init__(self, message: str, *, env_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.env_id = env_id
        #: For a failed batched call: the rows that succeeded, as the call would have returned them.
        self.partial: Any = None
        #: For a failed batched call: every failure of the call, by env id.
        self.errors: dict[int, AioEnvError] = {}

    def __reduce__(self) -> Any:
        # Keep keyword-only attributes through pickling (concurrent.futures, multiprocessing).
        return (_rebuild, (type(self), self.message, self.__dict__.copy()))


def _rebuild(cls: type[AioEnvError], message: str, state: dict[str, Any]) -> AioEnvError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class EnvError(AioEnvError):
    """The env raised an exception in reset, step or a method call.

    Attributes:
        env_id: the env that raised.
        remote_type: the exception's type name on the worker, e.g. ``"ValueError"``.
        remote_module: the module that defines that type, e.g. ``"builtins"`` ("" if unknown).
        remote_message: ``str()`` of the remote exception.
        remote_traceback: the formatted traceback text from the worker ("" if none).

    The env is marked broken until it is reset; other envs are unaffected.
    """

    def __init__(
        self,
        message: str,
        *,
        env_id: int | None = None,
        remote_type: str = "",
        remote_message: str = "",
        remote_traceback: str = "",
        remote_module: str = "",
    ) -> None:
        super().__init__(message, env_id=env_id)
        self.remote_type = remote_type
        self.remote_module = remote_module
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        if self.remote_traceback:
            return f"{self.message}\n\nRemote traceback (worker side):\n{self.remote_traceback.rstrip()}"
        return self.message


class EpisodeEnded(EnvError):
    """A step for an env whose episode ended, with ``autoreset_mode="disabled"``: reset it first."""


class InvalidAction(AioEnvError, ValueError):
    """An action does not fit the action space (shape, dtype or bounds); nothing was sent."""


class StepTimeout(AioEnvError, TimeoutError):
    """A step or reset overran its deadline; the env was replaced."""


class WorkerCrashed(AioEnvError):
    """The worker process hosting the env died while the request was in flight.

    Attributes:
        env_id: the env whose request failed.
        worker: the worker's name.
        exitcode: the worker's exit code (negative: killed by that signal), if known.

    The env is re-made on a fresh worker with its recorded seed; reset it before stepping.
    """

    def __init__(
        self,
        message: str,
        *,
        env_id: int | None = None,
        worker: str = "",
        exitcode: int | None = None,
    ) -> None:
        super().__init__(message, env_id=env_id)
        self.worker = worker
        self.exitcode = exitcode


class EnvRemade(WorkerCrashed):
    """A step of an env that was re-made on a fresh worker since its last reset: its worker died (or was
    stopped after another env's deadline) while this env had no request in flight, so this is the first
    the caller hears of it. Reset the env before stepping it. A :class:`WorkerCrashed`, so one
    ``except WorkerCrashed`` handles every crash.

    Attributes:
        worker: the name of the worker that died.
        exitcode: its exit code (negative: killed by that signal), if known.
    """


class ProtocolError(AioEnvError):
    """A message was malformed or spoke another protocol version."""


class PoolClosed(AioEnvError):
    """The pool is closed or closing; no more requests are accepted."""


class CapacityError(AioEnvError):
    """No room for more envs: the server's limits are reached."""


class ConnectionLost(AioEnvError, ConnectionError):
    """A remote pool's server did not answer (wrong address, server down) or stopped answering; the
    requests in flight failed with this error and the pool is closed."""


class UsageError(AioEnvError, RuntimeError):
    """The API was misused: a request for a busy env, a recv that can never be satisfied."""

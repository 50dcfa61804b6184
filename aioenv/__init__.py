"""aioenv: an asyncio-native environment pool for reinforcement learning and LLM agents.

``await aioenv.make("CartPole-v1", 8)`` starts worker processes that host the envs
and returns a :class:`Pool` whose calls are awaitable: batched ``reset``/``step``,
EnvPool-style ``send``/``recv`` with first-finished batches, and per-env futures
(``step_env``/``reset_env``). Errors form one tree rooted at :class:`AioEnvError`.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING

from aioenv._version import __version__
from aioenv.errors import (
    AioEnvError,
    CapacityError,
    ConnectionLost,
    EnvError,
    EnvRemade,
    EpisodeEnded,
    InvalidAction,
    PoolClosed,
    ProtocolError,
    StepTimeout,
    UsageError,
    WorkerCrashed,
)
from aioenv.wire.version import PROTOCOL_VERSION

if TYPE_CHECKING:
    from aioenv import vector
    from aioenv._loop import run
    from aioenv.core.sinks import ResetResult, StepResult
    from aioenv.env import AsyncEnv
    from aioenv.pool import Pool, make
    from aioenv.sync import SyncPool, make_sync

# The names below load on first use. Every worker process imports aioenv.errors, which runs this module first:
# importing the pool, the coordinator and the vector facade here cost each worker ~0.15 s of its ~0.65 s of
# imports.
_LAZY = {
    "AsyncEnv": "aioenv.env",
    "Pool": "aioenv.pool",
    "ResetResult": "aioenv.core.sinks",
    "StepResult": "aioenv.core.sinks",
    "SyncPool": "aioenv.sync",
    "make": "aioenv.pool",
    "make_sync": "aioenv.sync",
    "run": "aioenv._loop",
}

__all__ = [
    "PROTOCOL_VERSION",
    "AioEnvError",
    "AsyncEnv",
    "CapacityError",
    "ConnectionLost",
    "EnvError",
    "EnvRemade",
    "EpisodeEnded",
    "InvalidAction",
    "Pool",
    "PoolClosed",
    "ProtocolError",
    "ResetResult",
    "StepResult",
    "StepTimeout",
    "SyncPool",
    "UsageError",
    "WorkerCrashed",
    "__version__",
    "make",
    "make_sync",
    "run",
    "vector",
]


def __getattr__(name: str) -> object:
    """Import a public name on first use (see ``_LAZY``); ``aioenv.vector`` is the module itself."""
    if name == "vector":
        return importlib.import_module("aioenv.vector")  # importing it binds it here
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'aioenv' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names (imported yet or not), the subpackages imported so far and the module's dunders."""
    loaded = {k for k, v in globals().items() if isinstance(v, types.ModuleType) and v.__name__.startswith("aioenv.")}
    return sorted({*__all__, *loaded, *(k for k in globals() if k.startswith("__"))})

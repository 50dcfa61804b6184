"""aioenv: an asyncio-native environment pool for reinforcement learning and LLM agents.

``await aioenv.make("CartPole-v1", 8)`` starts worker processes that host the envs
and returns a :class:`Pool` whose calls are awaitable: batched ``reset``/``step``,
EnvPool-style ``send``/``recv`` with first-finished batches, and per-env futures
(``step_env``/``reset_env``). Errors form one tree rooted at :class:`AioEnvError`.
"""

from aioenv import vector
from aioenv._loop import run
from aioenv._version import __version__
from aioenv.core.sinks import ResetResult, StepResult
from aioenv.env import AsyncEnv
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
from aioenv.pool import Pool, make
from aioenv.sync import SyncPool, make_sync
from aioenv.wire.version import PROTOCOL_VERSION

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

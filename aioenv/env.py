"""``aioenv.AsyncEnv``: the base class of envs whose ``reset``/``step`` are coroutines.

Async envs suit LLM, HTTP and tool-calling environments that mostly wait: many of
them run concurrently in one worker's event loop (the ``async`` executor).
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import gymnasium

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class AsyncEnv(Generic[ObsT, ActT]):
    """An environment with coroutine ``reset``/``step`` (gymnasium's signatures, awaited).

    Subclasses set ``observation_space`` and ``action_space`` and implement
    :meth:`reset` and :meth:`step`; :meth:`close` is optional.

    Host them with ``executor="async"``: each env gets an actor task in its worker's event
    loop, so thousands of envs per worker wait concurrently. Blocking calls (``time.sleep``,
    sync HTTP clients) inside these coroutines stall every env of the worker: await instead.
    ``close`` may be a coroutine or a plain method.
    """

    observation_space: gymnasium.Space[Any]
    action_space: gymnasium.Space[Any]
    metadata: ClassVar[dict[str, Any]] = {}
    render_mode: str | None = None

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsT, dict[str, Any]]:
        """Start an episode; returns ``(obs, info)``."""
        raise NotImplementedError

    async def step(self, action: ActT) -> tuple[ObsT, float, bool, bool, dict[str, Any]]:
        """Advance one step; returns ``(obs, reward, terminated, truncated, info)``."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release resources (optional)."""

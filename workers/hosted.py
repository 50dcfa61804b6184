"""One hosted env and its episode bookkeeping (autoreset modes), independent of any executor.

The state machine follows gymnasium 1.x's ``SyncVectorEnv`` exactly, so that the
same seeds and actions give the same trajectories:

- ``next_step``: the step after an episode ended resets the env and returns its
  first obs with reward 0, terminated/truncated False; the action is ignored.
- ``same_step``: an episode that ends resets at once; the row's info carries
  ``final_obs`` and ``final_info`` (in that order, before the reset's info).
- ``disabled``: stepping an env whose episode ended raises :class:`EpisodeEnded`.

An env that raised is *broken* until it is reset; an env that was (re)made has
never been reset. Stepping either is refused with a clear error.

:class:`HostedEnv` drives a ``gymnasium.Env`` (``inline`` and ``thread`` executors);
:class:`AsyncHostedEnv` the same state machine over an ``aioenv.AsyncEnv`` whose
``reset``/``step``/``close`` are coroutines (``async`` executor).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from aioenv.errors import EpisodeEnded, UsageError

NEXT_STEP = "next_step"
SAME_STEP = "same_step"
DISABLED = "disabled"

StepOut = tuple[Any, float, bool, bool, dict[str, Any]]


def is_async_env(env: Any) -> bool:
    """True for envs whose ``step`` and ``reset`` are coroutine functions (``aioenv.AsyncEnv`` and alikes)."""
    return inspect.iscoroutinefunction(getattr(env, "step", None)) and inspect.iscoroutinefunction(
        getattr(env, "reset", None)
    )


def check_executor(env: Any, executor: str) -> None:
    """Refuse an env the executor cannot run, saying which executor would."""
    if executor == "async":
        if not is_async_env(env):
            raise TypeError(
                f"executor='async' runs envs whose reset/step are coroutines (aioenv.AsyncEnv), got "
                f"{type(env).__name__} with a plain step(): use executor='inline' or 'thread' for gymnasium envs"
            )
    elif inspect.iscoroutinefunction(getattr(env, "step", None)):
        raise TypeError(
            f"{type(env).__name__}.step is a coroutine function (an async env): use executor='async', not {executor!r}"
        )


class HostedEnv:
    """An env plus its autoreset state.

    Attributes:
        env_id: the pool-wide id of this env.
        env: the gymnasium-style env object (sync ``reset``/``step``).
    """

    __slots__ = ("_blocked", "_pending_reset", "env", "env_id", "mode")

    def __init__(self, env_id: int, env: Any, mode: str) -> None:
        self.env_id = env_id
        self.env = env
        self.mode = mode
        self._pending_reset = False  # the last step ended an episode
        self._blocked: str | None = "it has not been reset since it was made"

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Reset the env; clears any broken/ended state."""
        self._blocked = "its last reset raised"
        obs, info = self.env.reset(seed=seed, options=options)
        self._blocked = None
        self._pending_reset = False
        return obs, info

    def before_step(self) -> None:
        """Raise if the env may not be stepped now."""
        if self._blocked is not None:
            raise UsageError(
                f"env {self.env_id} cannot be stepped: {self._blocked}; reset it first", env_id=self.env_id
            )
        if self._pending_reset and self.mode == DISABLED:
            raise EpisodeEnded(
                f"env {self.env_id}'s episode ended and autoreset_mode is 'disabled': reset it before stepping",
                env_id=self.env_id,
                remote_type="EpisodeEnded",
            )

    def step(self, action: Any) -> StepOut:
        """One step with the autoreset rules of the mode. Any exception marks the env broken."""
        self.before_step()
        try:
            return self._step(action)
        except BaseException as exc:
            self._blocked = f"its last step raised {type(exc).__name__}: {exc}"
            raise

    def _step(self, action: Any) -> StepOut:
        env = self.env
        if self.mode == NEXT_STEP and self._pending_reset:
            obs, info = env.reset()
            self._pending_reset = False
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = env.step(action)
        ended = bool(terminated or truncated)
        if self.mode == SAME_STEP:
            if ended:
                final = {"final_obs": obs, "final_info": info}
                obs, info = env.reset()
                final.update(info)
                info = final
        else:
            self._pending_reset = ended
        return obs, reward, terminated, truncated, info

    def mark_ended(self) -> None:
        """The env was replaced after its episode was cut short (``on_timeout="truncate"``): the
        caller saw a truncated row, so the next step starts a new episode as after any truncation."""
        self._blocked = None
        self._pending_reset = True

    def mark_broken(self, why: str) -> None:
        """Refuse steps until the next reset (used by executors for failures outside ``step``)."""
        self._blocked = why

    def close(self) -> None:
        """Close the env, ignoring its errors (it is going away)."""
        with contextlib.suppress(Exception):  # a failing close must not stop the others
            self.env.close()


class AsyncHostedEnv(HostedEnv):
    """:class:`HostedEnv`'s state machine for envs with coroutine ``reset``/``step`` (``close`` may be
    a coroutine too)."""

    __slots__ = ()

    async def areset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Reset the env; clears any broken/ended state."""
        self._blocked = "its last reset raised"
        obs, info = await self.env.reset(seed=seed, options=options)
        self._blocked = None
        self._pending_reset = False
        return obs, info

    async def astep(self, action: Any) -> StepOut:
        """One step with the autoreset rules of the mode. Any exception (or cancellation) marks the env broken."""
        self.before_step()
        try:
            return await self._astep(action)
        except BaseException as exc:
            self._blocked = f"its last step raised {type(exc).__name__}: {exc}"
            raise

    async def _astep(self, action: Any) -> StepOut:
        env = self.env
        if self.mode == NEXT_STEP and self._pending_reset:
            obs, info = await env.reset()
            self._pending_reset = False
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = await env.step(action)
        ended = bool(terminated or truncated)
        if self.mode == SAME_STEP:
            if ended:
                final = {"final_obs": obs, "final_info": info}
                obs, info = await env.reset()
                final.update(info)
                info = final
        else:
            self._pending_reset = ended
        return obs, reward, terminated, truncated, info

    async def aclose(self) -> None:
        """Close the env (awaiting a coroutine ``close``), ignoring its errors."""
        with contextlib.suppress(Exception):
            result = self.env.close()
            if inspect.isawaitable(result):
                await result

    def close(self) -> None:
        """Synchronous close is not available for async envs: use :meth:`aclose`."""
        raise TypeError("an async env is closed with `await hosted.aclose()`")

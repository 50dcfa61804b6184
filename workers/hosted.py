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

:class:`EpisodeState` holds that bookkeeping. :class:`HostedEnv` drives a ``gymnasium.Env``
with it (``inline`` and ``thread`` executors: ``reset``, ``step``, ``close``);
:class:`AsyncHostedEnv` drives an ``aioenv.AsyncEnv`` whose ``reset``/``step``/``close`` are
coroutines (``async`` executor: ``areset``, ``astep``, ``aclose``). The two are siblings, not parent
and child: neither can stand where the other's calls are expected.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
from typing import Any

import numpy as np

from aioenv.errors import EnvRemade, EpisodeEnded, UsageError
from aioenv.wire.spaces import for_wire

NEXT_STEP = "next_step"
SAME_STEP = "same_step"
DISABLED = "disabled"

StepOut = tuple[Any, float, bool, bool, dict[str, Any]]


#: The types almost every reward has, checked by identity before the general (slower) test.
_PLAIN_REWARDS = frozenset((float, int, bool, np.float64, np.float32, np.int64, np.bool_))


def _check_reward(reward: Any) -> Any:
    """A reward is a real number (a bool, a numpy scalar or a one-element numeric array will do): anything
    else, None above all, would turn into NaN in the batch without a word. Returns it as a scalar (a
    one-element array's item), so that a worker writes a batch's rewards with one numpy call."""
    if type(reward) in _PLAIN_REWARDS or isinstance(reward, numbers.Real | np.bool_):
        return reward
    if not (isinstance(reward, np.ndarray) and reward.size == 1 and reward.dtype.kind in "biuf"):  # e.g. shape ()
        raise TypeError(f"step returned reward {reward!r} ({type(reward).__name__}): a reward must be a real number")
    return reward.item()


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


class EpisodeState:
    """An env plus its autoreset state: whether it may be stepped, and whether its next step resets it.

    Attributes:
        env_id: the pool-wide id of this env.
        env: the env object.
        mode: the autoreset mode (``next_step``, ``same_step`` or ``disabled``).
    """

    __slots__ = ("_blocked", "_pending_reset", "_remade", "env", "env_id", "mode")

    def __init__(self, env_id: int, env: Any, mode: str) -> None:
        self.env_id = env_id
        self.env = env
        self.mode = mode
        self._pending_reset = False  # the last step ended an episode
        self._blocked: str | None = "it has not been reset since it was made"
        self._remade: dict[str, Any] | None = None  # why it was made again (a MAKE's "remade"), until a reset

    def before_reset(self) -> None:
        """A reset starts: until it returns, the env counts as broken (a reset that raises leaves it so)."""
        self._blocked = "its last reset raised"

    def after_reset(self) -> None:
        """A reset returned: the env may be stepped again."""
        self._blocked = None
        self._remade = None
        self._pending_reset = False

    def mark_replaced(self) -> None:
        """The env replaces one whose request overran its deadline (its caller got StepTimeout)."""
        self._blocked = "it was replaced after its last request overran its deadline"

    def mark_remade(self, remade: dict[str, Any]) -> None:
        """The env replaces one whose worker died (``remade``: a MAKE's ``{"why", "worker", "code"}``): its
        next step raises :class:`~aioenv.errors.EnvRemade`, a crash, until a reset."""
        self._remade = remade

    def final(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        """The info a ``same_step`` reset's info is merged into: the ended episode's ``final_obs`` (as it will
        cross the wire) and ``final_info``, in that order (see the module)."""
        return {"final_obs": for_wire(self.env.observation_space, obs), "final_info": info}

    def failed_step(self, exc: BaseException) -> None:
        """A step raised (or was cancelled): refuse steps until the next reset."""
        detail = f": {exc}" if str(exc) else ""
        self._blocked = f"its last step raised {type(exc).__name__}{detail}"

    def mark_ended(self) -> None:
        """The env was replaced after its episode was cut short (``on_timeout="truncate"``): the
        caller saw a truncated row, so the next step starts a new episode as after any truncation."""
        self._blocked = None
        self._pending_reset = True

    def before_step(self) -> None:
        """Raise if the env may not be stepped now."""
        if self._remade is not None and self._blocked is not None:
            code = self._remade.get("code")
            raise EnvRemade(
                f"env {self.env_id} was re-made on a fresh worker since its last reset, while it had no request in "
                f"flight: {self._remade.get('why')}; reset it before stepping",
                env_id=self.env_id,
                worker=str(self._remade.get("worker", "")),
                exitcode=code if isinstance(code, int) else None,
            )
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


class HostedEnv(EpisodeState):
    """:class:`EpisodeState` over a gymnasium-style env (sync ``reset``/``step``/``close``)."""

    __slots__ = ()

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Reset the env; clears any broken/ended state."""
        self.before_reset()
        obs, info = self.env.reset(seed=seed, options=options)
        self.after_reset()
        return obs, info

    def step(self, action: Any) -> StepOut:
        """One step with the autoreset rules of the mode. Any exception marks the env broken.

        This runs once per env per step in every worker (and per env in the caller's process for
        ``executor="in_process"``), so it is one method: the checks of :meth:`before_step` guard the call to it,
        and a plain reward skips :func:`_check_reward`."""
        if self._blocked is not None or (self._pending_reset and self.mode == DISABLED):
            self.before_step()  # raises: the env may not be stepped now
        env = self.env
        try:
            if self._pending_reset and self.mode == NEXT_STEP:
                obs, info = env.reset()
                self._pending_reset = False
                return obs, 0.0, False, False, info
            obs, reward, terminated, truncated, info = env.step(action)
            if type(reward) not in _PLAIN_REWARDS:
                reward = _check_reward(reward)
            ended = bool(terminated or truncated)
            if self.mode != SAME_STEP:
                self._pending_reset = ended
            elif ended:
                final = self.final(obs, info)  # before the reset: an env may reuse its observation's array
                obs, info = env.reset()
                final.update(info)
                info = final
            return obs, reward, terminated, truncated, info
        except BaseException as exc:
            self.failed_step(exc)
            raise

    def close(self) -> None:
        """Close the env, ignoring its errors (it is going away)."""
        with contextlib.suppress(Exception):  # a failing close must not stop the others
            self.env.close()


class AsyncHostedEnv(EpisodeState):
    """:class:`EpisodeState` over an env with coroutine ``reset``/``step`` (``close`` may be a coroutine too)."""

    __slots__ = ()

    async def areset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        """Reset the env; clears any broken/ended state."""
        self.before_reset()
        obs, info = await self.env.reset(seed=seed, options=options)
        self.after_reset()
        return obs, info

    async def astep(self, action: Any) -> StepOut:
        """One step with the autoreset rules of the mode. Any exception (or cancellation) marks the env broken.

        One coroutine per step, not a checking one around a stepping one: thousands of these run per second
        in an ``async`` worker, and each coroutine layer costs a frame and an ``await`` of its own."""
        if self._blocked is not None or (self._pending_reset and self.mode == DISABLED):
            self.before_step()  # raises: the env may not be stepped now
        env = self.env
        try:
            if self.mode == NEXT_STEP and self._pending_reset:
                obs, info = await env.reset()
                self._pending_reset = False
                return obs, 0.0, False, False, info
            obs, reward, terminated, truncated, info = await env.step(action)
            if type(reward) not in _PLAIN_REWARDS:
                reward = _check_reward(reward)
            ended = bool(terminated or truncated)
            if self.mode != SAME_STEP:
                self._pending_reset = ended
            elif ended:
                final = self.final(obs, info)  # before the reset: an env may reuse its observation's array
                obs, info = await env.reset()
                final.update(info)
                info = final
            return obs, reward, terminated, truncated, info
        except BaseException as exc:
            self.failed_step(exc)
            raise

    async def aclose(self) -> None:
        """Close the env (awaiting a coroutine ``close``), ignoring its errors."""
        with contextlib.suppress(Exception):
            result = self.env.close()
            if inspect.isawaitable(result):
                await result

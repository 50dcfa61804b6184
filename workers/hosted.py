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
PLAIN_REWARDS = frozenset((float, int, bool, np.float64, np.float32, np.int64, np.bool_))


def _check_reward(reward: Any) -> Any:
    """A reward is a real number (a bool, a numpy scalar or a one-element numeric array will do): anything
    else, None above all, would turn into NaN in the batch without a word. Returns it as a scalar (a
    one-element array's item), so that a worker writes a batch's rewards with one numpy call."""
    if type(reward) in PLAIN_REWARDS or isinstance(reward, numbers.Real | np.bool_):
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
        blocked: why the env may not be stepped now (None: it may); set and cleared by the methods below.
        pending_reset: its last step ended an episode (``next_step``: the next step resets it).
    """

    __slots__ = ("_remade", "blocked", "env", "env_id", "mode", "pending_reset")

    def __init__(self, env_id: int, env: Any, mode: str) -> None:
        self.env_id = env_id
        self.env = env
        self.mode = mode
        self.pending_reset = False  # the last step ended an episode
        self.blocked: str | None = "it has not been reset since it was made"
        self._remade: dict[str, Any] | None = None  # why it was made again (a MAKE's "remade"), until a reset

    def before_reset(self) -> None:
        """A reset starts: until it returns, the env counts as broken (a reset that raises leaves it so)."""
        self.blocked = "its last reset raised"

    def after_reset(self) -> None:
        """A reset returned: the env may be stepped again."""
        self.blocked = None
        self._remade = None
        self.pending_reset = False

    def mark_replaced(self) -> None:
        """The env replaces one whose request overran its deadline (its caller got StepTimeout)."""
        self.blocked = "it was replaced after its last request overran its deadline"

    def mark_remade(self, remade: dict[str, Any]) -> None:
        """The env replaces one whose worker died (``remade``: a MAKE's ``{"why", "worker", "code"}``): its
        next step raises :class:`~aioenv.errors.EnvRemade`, a crash, until a reset."""
        self._remade = remade

    def final(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        """The info a ``same_step`` reset's info is merged into: the ended episode's ``final_obs`` (as it will
        cross the wire) and ``final_info``, in that order (see the module)."""
        return {"final_obs": for_wire(self.env.observation_space, obs), "final_info": info}

    def settle(self, reward: Any, terminated: Any, truncated: Any) -> tuple[Any, bool]:
        """After a step that ended its episode or returned a reward of an unusual type: the reward checked
        (:func:`_check_reward`) and whether the episode ended, recorded outside ``same_step`` (the next step
        resets the env, or is refused with ``disabled``). Callers skip it for a plain reward mid-episode,
        which changes nothing here."""
        if type(reward) not in PLAIN_REWARDS:
            reward = _check_reward(reward)
        ended = bool(terminated or truncated)
        if self.mode != SAME_STEP:
            self.pending_reset = ended
        return reward, ended

    def failed_step(self, exc: BaseException) -> None:
        """A step raised (or was cancelled): refuse steps until the next reset."""
        detail = f": {exc}" if str(exc) else ""
        self.blocked = f"its last step raised {type(exc).__name__}{detail}"

    def mark_ended(self) -> None:
        """The env was replaced after its episode was cut short (``on_timeout="truncate"``): the
        caller saw a truncated row, so the next step starts a new episode as after any truncation."""
        self.blocked = None
        self.pending_reset = True

    def mid_episode(self) -> bool:
        """Whether a step is an ordinary step: the env is not broken, has been reset, and its episode has not
        ended (nothing to refuse, nothing to reset first)."""
        return self.blocked is None and not self.pending_reset

    def before_step(self) -> None:
        """Raise if the env may not be stepped now."""
        if self._remade is not None and self.blocked is not None:
            code = self._remade.get("code")
            raise EnvRemade(
                f"env {self.env_id} was re-made on a fresh worker since its last reset, while it had no request in "
                f"flight: {self._remade.get('why')}; reset it before stepping",
                env_id=self.env_id,
                worker=str(self._remade.get("worker", "")),
                exitcode=code if isinstance(code, int) else None,
            )
        if self.blocked is not None:
            raise UsageError(f"env {self.env_id} cannot be stepped: {self.blocked}; reset it first", env_id=self.env_id)
        if self.pending_reset and self.mode == DISABLED:
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

        An env mid-episode (:meth:`mid_episode`) is stepped at once, and only a step that ends its episode or
        returns an unusual reward goes on to :meth:`after_step`; the rest goes through :meth:`_step_waiting`.
        (A worker's batched loop does the first part itself, without a call per env: ``Worker.step_rows``.)"""
        if not self.mid_episode():
            return self._step_waiting(action)
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
            if terminated or truncated or type(reward) not in PLAIN_REWARDS:
                return self.after_step(obs, reward, terminated, truncated, info)
        except BaseException as exc:
            self.failed_step(exc)
            raise
        return obs, reward, terminated, truncated, info

    def after_step(self, obs: Any, reward: Any, terminated: Any, truncated: Any, info: dict[str, Any]) -> StepOut:
        """What follows a step that ended its episode or returned a reward of an unusual type: the reward
        checked, the episode's end recorded (``next_step``, ``disabled``) or the env reset at once
        (``same_step``, its info then carrying ``final_obs`` and ``final_info``). The caller marks the env
        broken if this raises."""
        reward, ended = self.settle(reward, terminated, truncated)
        if ended and self.mode == SAME_STEP:
            final = self.final(obs, info)  # before the reset: an env may reuse its observation's array
            obs, info = self.env.reset()
            final.update(info)
            info = final
        return obs, reward, terminated, truncated, info

    def _step_waiting(self, action: Any) -> StepOut:
        """A step of an env not mid-episode: refused (broken, never reset, or ended with autoreset disabled),
        a ``next_step`` reset (reward 0, the action ignored), or, for a ``same_step`` env whose episode was cut
        short by a deadline, an ordinary step."""
        if self.blocked is not None or self.mode == DISABLED:
            self.before_step()  # raises: the env may not be stepped now
        try:
            if self.mode == NEXT_STEP:
                obs, info = self.env.reset()
                self.pending_reset = False
                return obs, 0.0, False, False, info
            obs, reward, terminated, truncated, info = self.env.step(action)
            return self.after_step(obs, reward, terminated, truncated, info)
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
        if self.blocked is not None or (self.pending_reset and self.mode == DISABLED):
            self.before_step()  # raises: the env may not be stepped now
        env = self.env
        try:
            if self.mode == NEXT_STEP and self.pending_reset:
                obs, info = await env.reset()
                self.pending_reset = False
                return obs, 0.0, False, False, info
            obs, reward, terminated, truncated, info = await env.step(action)
            if terminated or truncated or type(reward) not in PLAIN_REWARDS:
                reward, ended = self.settle(reward, terminated, truncated)
                if ended and self.mode == SAME_STEP:
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

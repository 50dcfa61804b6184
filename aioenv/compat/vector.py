"""``aioenv.vector.AioVectorEnv``: a drop-in for ``gymnasium.vector.AsyncVectorEnv`` on an aioenv pool.

Change one line::

    envs = gymnasium.vector.AsyncVectorEnv(env_fns, autoreset_mode=mode)   # before
    envs = aioenv.vector.AioVectorEnv(env_fns, autoreset_mode=mode)        # after

and everything else (``reset(seed=..., options={"reset_mask": mask})``, ``step``, the
``*_async``/``*_wait`` pairs, ``call``/``get_attr``/``set_attr``, ``render``, ``close``,
gymnasium's vector wrappers) behaves as before: the same seeds and actions give the same
observations, rewards, terminations, truncations and infos as ``SyncVectorEnv``. The envs
run in aioenv worker processes (started with ``python -m workers``, not forked) driven
by a :class:`aioenv.SyncPool`.
"""

from __future__ import annotations

import concurrent.futures
import copy as _copy
import multiprocessing
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, cast

import gymnasium
import numpy as np
from gymnasium import Space, logger
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv

from aioenv.sync import SyncPool
from aioenv.wire.options import Executor

__all__ = ["AioVectorEnv"]


class _State(Enum):
    """What an ``*_async`` call left pending (values as gymnasium's ``AsyncState``)."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


def _has_text(space: Space[Any]) -> bool:
    if isinstance(space, gymnasium.spaces.Text):
        return True
    if isinstance(space, gymnasium.spaces.Dict):
        return any(_has_text(s) for s in space.spaces.values())
    if isinstance(space, gymnasium.spaces.Tuple):
        return any(_has_text(s) for s in space.spaces)
    return False


def _to_gymnasium(space: Space[Any], value: Any) -> Any:
    """aioenv's batched obs -> gymnasium's: Text leaves (object arrays ``(B,)``) become tuples of str."""
    if isinstance(space, gymnasium.spaces.Text):
        return tuple(value.tolist())
    if isinstance(space, gymnasium.spaces.Dict):
        return {key: _to_gymnasium(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gymnasium.spaces.Tuple):
        return tuple(_to_gymnasium(sub, v) for sub, v in zip(space.spaces, value, strict=True))
    return value


def _copy_tree(value: Any) -> Any:
    """A copy of a batched obs (dicts/tuples of arrays) that shares no array with it."""
    if isinstance(value, dict):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copy_tree(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    return _copy.deepcopy(value)


def _set_rows(full: Any, rows: Any, ids: np.ndarray) -> Any:
    """``full`` (a batch of ``num_envs`` rows) with rows ``ids`` replaced by ``rows`` (``len(ids)`` rows)."""
    if isinstance(full, dict):
        return {k: _set_rows(v, rows[k], ids) for k, v in full.items()}
    if isinstance(full, tuple):
        return tuple(_set_rows(f, r, ids) for f, r in zip(full, rows, strict=True))
    out = np.array(full, copy=True)
    out[ids] = rows
    return out


def _scatter_info(info: dict[str, Any], ids: np.ndarray, n: int) -> dict[str, Any]:
    """A batched info over ``len(ids)`` rows spread to ``n`` rows (rows ``ids``), as gymnasium's
    ``_add_info`` builds it for a partial reset: absent rows are 0 / None with their ``_key`` mask False."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _scatter_info(value, ids, n)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == ids.size:
            if value.dtype == object:
                full = np.full((n, *value.shape[1:]), None, dtype=object)
            else:
                full = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
            full[ids] = value
            out[key] = full
        else:
            out[key] = value
    return out


def _without_env_id(info: dict[str, Any]) -> dict[str, Any]:
    if "env_id" in info:
        info = {k: v for k, v in info.items() if k not in ("env_id", "_env_id")}
    return info


def _checked_concurrency(max_concurrency: object) -> int | None:
    """``max_concurrency`` as gymnasium's ``AsyncVectorEnv`` checks it (same messages)."""
    if max_concurrency is None:
        return None
    if not isinstance(max_concurrency, (int, np.integer)) or isinstance(max_concurrency, bool):
        raise ValueError(f"`max_concurrency` must be an integer or None, got {type(max_concurrency)}.")
    if max_concurrency < 1:
        raise ValueError(f"`max_concurrency` must be a positive or None, got {max_concurrency}.")
    return int(max_concurrency)


def _custom_spaces(observation_mode: object) -> tuple[Space[Any], Space[Any]] | None:
    """The ``(observation_space, single_observation_space)`` an ``observation_mode`` tuple gives; None for
    ``"same"``; an error for ``"different"`` (an aioenv pool's envs share their spaces) or anything else."""
    if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
        if not all(isinstance(s, Space) for s in observation_mode):
            raise TypeError(
                "Expected both elements of observation_mode to be Spaces, got "
                f"{type(observation_mode[0])} and {type(observation_mode[1])}"
            )
        return observation_mode[0], observation_mode[1]
    if observation_mode == "different":
        raise ValueError(
            "AioVectorEnv does not support observation_mode='different': every env of an aioenv pool must "
            "have the same spaces (pass a tuple (observation_space, single_observation_space) instead)"
        )
    if observation_mode != "same":
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
            f"observation space, actual got {observation_mode}"
        )
    return None


class AioVectorEnv(VectorEnv[Any, Any, np.ndarray]):
    """A ``gymnasium.vector.VectorEnv`` whose envs run in aioenv worker processes; a drop-in for
    ``gymnasium.vector.AsyncVectorEnv`` (same constructor, methods, results and misuse errors).

    Args:
        env_fns: one callable per env, each returning a ``gymnasium.Env`` (shipped to the workers
            with cloudpickle; every env must have the same spaces).
        shared_memory: accepted and ignored: observations travel as raw array frames (over a pipe, or ZeroMQ).
        copy: accepted and ignored: every call returns fresh arrays (as ``copy=True``).
        context: accepted and ignored: workers are started with ``python -m workers``, never forked.
        daemon: accepted and ignored: workers always die with the pool (and with this process).
        worker: must be None; a custom multiprocessing worker function cannot run in aioenv's
            workers (``ValueError`` otherwise).
        observation_mode: ``"same"``, or a tuple ``(observation_space, single_observation_space)``
            that only replaces the advertised spaces (as gymnasium). ``"different"`` is refused
            (``ValueError``): an aioenv pool requires identical spaces.
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value (``"NextStep"``, ...).
        max_concurrency: at most this many envs run at once (the pool's ``max_concurrency``); it also
            bounds ``num_workers`` (the ``inline`` executor runs one env at a time per worker).
        num_workers: aioenv worker processes (default ``min(num_envs, os.cpu_count(), max_concurrency)``).
        step_timeout: seconds; a step or reset that overruns fails with ``aioenv.StepTimeout``.
        executor: ``"inline"`` (default), or ``"thread"`` for envs that block on I/O: each env on
            its own thread, so their steps overlap (see ``docs/api.md``).

    Shapes: ``N = num_envs``. Observations are batched as gymnasium does (``(N, *shape)`` arrays,
    dicts/tuples of them, tuples of ``N`` str for ``Text``); rewards ``(N,)`` float64;
    terminations/truncations ``(N,)`` bool; infos are gymnasium's dict of ``(N, ...)`` arrays with
    ``_key`` masks.

    Errors: misuse raises gymnasium's ``AlreadyPendingCallError``, ``NoAsyncCallError`` and
    ``ClosedEnvironmentError``; a ``*_wait(timeout)`` that times out raises
    ``multiprocessing.TimeoutError`` (as ``AsyncVectorEnv``); an env that raised surfaces as
    ``aioenv.EnvError`` carrying the remote traceback (``err.remote_traceback``).

    Calls of env methods (``call``, ``get_attr``, ``set_attr``, ``render``) move arguments and results
    as msgpack: numbers, str, lists, tuples, dicts and numpy arrays, not arbitrary objects.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gymnasium.Env[Any, Any]]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | tuple[Space[Any], Space[Any]] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        num_workers: int | None = None,
        step_timeout: float | None = None,
        executor: Executor = "inline",
    ) -> None:
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.copy = copy
        self.context = context
        self.daemon = daemon
        self.worker = worker
        self.observation_mode = observation_mode
        mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        if worker is not None:
            raise ValueError(
                "AioVectorEnv does not support a custom `worker`: envs run in aioenv's own worker processes "
                "(python -m workers), not in a multiprocessing target; pass worker=None"
            )
        self.max_concurrency = _checked_concurrency(max_concurrency)
        custom_spaces = _custom_spaces(observation_mode)
        fns = list(env_fns)
        if not fns:
            raise ValueError("env_fns is empty: give at least one env factory")
        if num_workers is None and max_concurrency is not None:
            num_workers = min(len(fns), int(max_concurrency))
        self.autoreset_mode = mode
        self._state = _State.DEFAULT
        self._pending: concurrent.futures.Future[Any] | None = None
        self._reset_ids: np.ndarray | None = None
        self._last_obs: Any = None
        self._sp = SyncPool(
            fns,
            autoreset_mode=mode,
            num_workers=num_workers,
            step_timeout=step_timeout,
            executor=executor,
            max_concurrency=max_concurrency,
        )
        self._adopt(mode, custom_spaces)

    def _adopt(self, mode: AutoresetMode, custom_spaces: tuple[Space[Any], Space[Any]] | None) -> None:
        """Take the started pool's size, metadata and spaces (the observation spaces given, if any)."""
        sp = self._sp
        self.num_envs = sp.num_envs
        self.metadata = dict(sp.metadata)
        self.metadata["autoreset_mode"] = mode
        self.render_mode = sp.render_mode
        self.single_action_space = sp.single_action_space
        self.action_space = sp.action_space
        self._pool_obs_space = sp.single_observation_space
        if custom_spaces is not None:
            self.observation_space, self.single_observation_space = custom_spaces
        else:
            self.single_observation_space = sp.single_observation_space
            self.observation_space = sp.observation_space
        self._text = _has_text(self._pool_obs_space)

    # ------------------------------------------------------------ helpers

    @property
    def pool(self) -> SyncPool:
        """The :class:`aioenv.SyncPool` running the envs."""
        return self._sp

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def _assert_default(self, what: str) -> None:
        if self._state != _State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )

    def _start(self, state: _State, name: str, *args: Any, **kwargs: Any) -> None:
        self._pending = self._sp.submit(name, *args, **kwargs)
        self._state = state

    def _wait(self, state: _State, call: str, timeout: float | None) -> Any:
        self._assert_is_running()
        if self._state != state:
            raise NoAsyncCallError(
                f"Calling `{call}_wait` without any prior call to `{call}_async`.",
                state.value,
            )
        fut = self._pending
        assert fut is not None
        try:
            try:
                return fut.result(timeout)
            except TimeoutError:
                if fut.done():
                    raise  # the call's own error (StepTimeout is a TimeoutError too)
                if fut.cancel():  # the envs' requests finish in the background
                    message = f"The call to `{call}_wait` has timed out after {timeout} second(s)."
                    raise multiprocessing.TimeoutError(message) from None
                return fut.result()  # it finished just now
        except BaseException:  # KeyboardInterrupt: cancel, as above
            if not fut.done():
                fut.cancel()
            raise
        finally:
            self._state, self._pending = _State.DEFAULT, None

    def _obs_out(self, obs: Any) -> Any:
        return _to_gymnasium(self._pool_obs_space, obs) if self._text else obs

    # ------------------------------------------------------------ reset

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env, or those of ``options["reset_mask"]`` (a ``(N,)`` bool array).

        ``seed``: None, an int (env ``i`` gets ``seed + i``) or a list of ``N`` seeds. As gymnasium's
        vector envs do, ``"reset_mask"`` is popped from the caller's ``options`` dict (wrappers such as
        ``RecordEpisodeStatistics`` depend on that); the rest of ``options`` goes to each env's ``reset``.

        Returns:
            ``(obs, info)``: obs batched over all ``N`` envs (envs outside ``reset_mask`` keep their
            last obs); info with rows only for the envs reset (``_key`` masks).
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Start the resets (see :meth:`reset`); collect them with :meth:`reset_wait`.

        Raises:
            ClosedEnvironmentError: after :meth:`close`.
            AlreadyPendingCallError: another ``*_async`` call is pending.
        """
        self._assert_is_running()
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(cast(Sequence[int | None], seed))
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                f"but got length={len(seeds)}."
            )
        self._assert_default("reset_async")
        ids: np.ndarray | None = None
        if options is not None and "reset_mask" in options:
            mask = options.pop("reset_mask")  # popped from the caller's dict, exactly as gymnasium does
            if not isinstance(mask, np.ndarray):
                raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
            if mask.shape != (self.num_envs,):
                raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {mask.shape}")
            if mask.dtype != np.bool_:
                raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
            if not np.any(mask):
                raise ValueError(
                    "`options['reset_mask']` must contain a boolean array with at least one True value, "
                    f"got reset_mask={mask}"
                )
            if self._last_obs is None and not mask.all():
                raise ValueError("a partial reset (reset_mask) needs a full reset first")
            ids = np.flatnonzero(mask)
            seeds = [seeds[int(i)] for i in ids]
        self._start(_State.WAITING_RESET, "reset", ids, seed=seeds, options=options)
        self._reset_ids = ids

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for :meth:`reset_async` and return ``(obs, info)`` as :meth:`reset` does.

        Raises:
            NoAsyncCallError: no :meth:`reset_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
        """
        ids = self._reset_ids
        obs, info = self._wait(_State.WAITING_RESET, "reset", timeout)
        info = _without_env_id(info)
        if ids is not None and ids.size != self.num_envs:
            obs = _set_rows(self._last_obs, obs, ids)
            info = _scatter_info(info, ids, self.num_envs)
        self._last_obs = _copy_tree(obs)
        return self._obs_out(obs), info

    # ------------------------------------------------------------ step

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (an element of :attr:`action_space`, ``N`` rows).

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``: rewards ``(N,)`` float64,
            terminations/truncations ``(N,)`` bool.
        """
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Start a step of every env; collect it with :meth:`step_wait`.

        Raises:
            ClosedEnvironmentError: after :meth:`close`.
            AlreadyPendingCallError: another ``*_async`` call is pending.
        """
        self._assert_is_running()
        self._assert_default("step_async")
        self._start(_State.WAITING_STEP, "step", actions)

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for :meth:`step_async`; returns what :meth:`step` returns.

        On a timeout the step goes on in the background and its results are discarded (the next call
        waits for it first).

        Raises:
            NoAsyncCallError: no :meth:`step_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
            aioenv.EnvError: an env raised (``remote_traceback`` has the worker-side traceback).
        """
        obs, reward, terminated, truncated, info = self._wait(_State.WAITING_STEP, "step", timeout)
        self._last_obs = _copy_tree(obs)
        return self._obs_out(obs), reward, terminated, truncated, _without_env_id(info)

    # ------------------------------------------------------------ methods and attributes

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every env; a tuple of ``N`` results."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call`; collect it with :meth:`call_wait`.

        Raises:
            ClosedEnvironmentError: after :meth:`close`.
            AlreadyPendingCallError: another ``*_async`` call is pending.
        """
        self._assert_is_running()
        self._assert_default("call_async")
        self._start(_State.WAITING_CALL, "call", name, *args, **kwargs)

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for :meth:`call_async`; a tuple with one result per env.

        Raises:
            NoAsyncCallError: no :meth:`call_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
        """
        return tuple(self._wait(_State.WAITING_CALL, "call", timeout))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every env; a tuple of ``N`` values."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Set attribute ``name`` of every env: a list/tuple gives one value per env, anything else is set on all.

        Raises:
            ValueError: a list/tuple whose length is not ``N``.
            AlreadyPendingCallError: another ``*_async`` call is pending.
        """
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._assert_default("set_attr")
        self._sp.set_attr(name, list(values))

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]  # as AsyncVectorEnv
        """The ``np_random_seed`` of every env."""
        return self.get_attr("np_random_seed")

    def render(self) -> tuple[Any, ...] | None:
        """Every env's ``render()`` result: a tuple of ``N`` frames (e.g. ``(H, W, 3)`` uint8 arrays)."""
        return self.call("render")

    # ------------------------------------------------------------ close

    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close the pool: a pending call fails, envs are closed, worker processes stopped (never hangs).

        ``timeout`` and ``terminate`` are accepted for compatibility: aioenv's shutdown escalates to
        SIGTERM/SIGKILL by itself.
        """
        if self._state != _State.DEFAULT:
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            self._state, self._pending = _State.DEFAULT, None
        sp = getattr(self, "_sp", None)
        if sp is not None:
            sp.close()

    def __del__(self) -> None:
        if getattr(self, "_sp", None) is not None and not getattr(self, "closed", True):
            self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={getattr(self, 'num_envs', '?')})"

"""``aioenv.vector.AioVectorEnv``: a drop-in for ``gymnasium.vector.AsyncVectorEnv`` on an aioenv pool.

Change one line::

    envs = gymnasium.vector.AsyncVectorEnv(env_fns, autoreset_mode=mode)   # before
    envs = aioenv.vector.AioVectorEnv(env_fns, autoreset_mode=mode)        # after

and everything else (``reset(seed=..., options={"reset_mask": mask})``, ``step``, the
``*_async``/``*_wait`` pairs, ``call``/``get_attr``/``set_attr``, ``render``, ``close``,
gymnasium's vector wrappers) behaves as before: the same seeds and actions give the same
observations, rewards, terminations, truncations and infos as ``AsyncVectorEnv``, and code that
catches ``AsyncVectorEnv``'s exceptions catches this one's (:mod:`aioenv.compat.vector_errors`). The
envs run in aioenv worker processes (started with ``python -m workers``, not forked) driven by a
:class:`aioenv.SyncPool`. docs/migrating.md has the table of every argument and method.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy as _copy
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Any, NoReturn, cast

import gymnasium
import numpy as np
from gymnasium import Space, logger
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import create_empty_array, iterate

from aioenv._compat import HAS_AUTORESET_MODE, AutoresetMode
from aioenv.compat import vector_args as args
from aioenv.compat import vector_batch as batch
from aioenv.compat.payloads import HELPER_NAME, Transfer, is_plain
from aioenv.compat.vector_errors import WaitTimeout, as_peer_error, combined_error, log_env_errors, seed_error
from aioenv.compat.vector_worker import PEER_CALL
from aioenv.errors import AioEnvError, InvalidAction
from aioenv.sync import SyncPool
from aioenv.wire.options import PoolExecutor, is_int
from aioenv.wire.spaces import check_actions, has_object_leaves

__all__ = ["AioVectorEnv"]

#: Names ``AsyncVectorEnv.call`` refuses (its worker's commands).
_RESERVED = ("reset", "step", "close", "_setattr", "_check_spaces")
#: ``AsyncVectorEnv`` attributes with no counterpart here.
_PEER_ONLY = ("parent_pipes", "processes", "error_queue")


class _State(Enum):
    """What an ``*_async`` call left pending (values as gymnasium's ``AsyncState``)."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


# ---------------------------------------------------------------- the vector env


class AioVectorEnv(VectorEnv[Any, Any, np.ndarray]):
    """A ``gymnasium.vector.VectorEnv`` whose envs run in aioenv worker processes; a drop-in for
    ``gymnasium.vector.AsyncVectorEnv`` (same constructor, methods, results and errors).

    Args:
        env_fns: one callable per env, each returning a ``gymnasium.Env`` (shipped to the workers with
            cloudpickle).
        shared_memory: as ``AsyncVectorEnv``: True refuses observation spaces gymnasium cannot put in shared
            memory, with its errors (a user-defined space ``ValueError``, ``Graph``/``Sequence`` ``TypeError``).
            Observations travel as raw arrays either way.
        copy: as ``AsyncVectorEnv``: with ``copy=False`` and ``shared_memory=True`` the returned observations are
            the vector env's own last observations (what a partial reset returns for the envs it does not reset),
            so changing them in place changes that; otherwise it keeps a private copy. Unlike ``AsyncVectorEnv``,
            every call returns new arrays (a later step never writes into arrays returned earlier).
        context: a ``multiprocessing`` start method name, checked as ``AsyncVectorEnv`` does (``ValueError`` for an
            unknown one); workers are always fresh interpreters (``python -m workers``), as with ``"spawn"``;
            ``"fork"`` warns.
        daemon: accepted: workers always end with this vector env (and with this process), and envs may start
            processes of their own whatever its value.
        worker: must be None; a custom multiprocessing worker function cannot run in aioenv's workers
            (``ValueError`` otherwise).
        observation_mode: ``"same"``; ``"different"`` (observation spaces may differ in their bounds, not in shape
            or dtype: each env is made once in this process to read its space, as ``AsyncVectorEnv`` does); or a
            tuple ``(observation_space, single_observation_space)``.
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value (``"NextStep"``, ...).
        max_concurrency: at most this many envs run at once (the pool's ``max_concurrency``); it also bounds
            ``num_workers`` (the ``inline`` executor runs one env at a time per worker).
        num_workers: aioenv worker processes (default ``min(num_envs, usable CPUs, max_concurrency)``); 0 runs
            every env in this process (``executor="thread"``: each on a thread of its own; see ``docs/api.md``).
        step_timeout: seconds; a step or reset that overruns fails with ``aioenv.StepTimeout`` (also a
            ``multiprocessing.TimeoutError``) and its env is replaced.
        executor: ``"inline"`` (default: worker processes, as ``AsyncVectorEnv`` has), ``"thread"`` for envs that
            block on I/O (each env on its own thread, so their steps overlap), ``"auto"`` (chosen from what one
            env's steps cost, always worker processes: cheap envs on as few as pay) or ``"in_process"`` (every
            env in this process: no message, and no isolation; see ``docs/api.md``).

    Shapes: ``N = num_envs``. Observations are batched as gymnasium does (``(N, *shape)`` arrays,
    dicts/tuples of them, tuples of ``N`` values for ``Text`` and other object spaces); rewards ``(N,)``
    float64; terminations/truncations ``(N,)`` bool; infos are gymnasium's dict of ``(N, ...)`` arrays with
    ``_key`` masks.

    Errors: misuse raises gymnasium's ``AlreadyPendingCallError``, ``NoAsyncCallError`` and
    ``ClosedEnvironmentError``; a ``*_wait(timeout)`` that expires raises ``multiprocessing.TimeoutError``; an
    env that raised surfaces as ``aioenv.EnvError`` that is also the env's own exception type (when this process
    knows it), with the remote traceback, logged as ``AsyncVectorEnv`` logs it; the other envs' rows are in
    ``err.partial``. An action that does not fit the action space raises ``aioenv.InvalidAction`` (a
    ``ValueError``; a ``TypeError`` too for what ``AsyncVectorEnv`` cannot iterate) before anything is sent;
    the action of an env that autoresets in this step is not used and not checked.
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
        executor: PoolExecutor = "inline",
    ) -> None:
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.copy = copy
        self.context = context
        self.daemon = daemon
        self.worker = worker
        self.observation_mode = observation_mode
        mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        self.autoreset_mode = mode
        self.max_concurrency = args.checked_concurrency(max_concurrency)
        if worker is not None:
            raise ValueError(
                "AioVectorEnv does not support a custom `worker`: envs run in aioenv's own worker processes "
                "(python -m workers), not in a multiprocessing target; pass worker=None"
            )
        args.checked_context(context, type(self).__name__)
        fns = args.checked_env_fns(env_fns, type(self).__name__)
        if not fns:
            raise ValueError("env_fns is empty: give at least one env factory")
        self.num_envs = len(fns)
        spaces = self._given_spaces(fns)
        if num_workers is None and self.max_concurrency is not None:
            num_workers = min(len(fns), self.max_concurrency)
        self._state = _State.DEFAULT
        self._pending: concurrent.futures.Future[Any] | None = None
        #: Whether the ``*_async`` about to run belongs to ``step``/``reset``/``call``, whose wait follows at once.
        self._then_wait = False
        self._transfer: Transfer | None = None
        self._reset_ids: np.ndarray | None = None
        self._last_obs: Any = None
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)
        self._ids = np.arange(self.num_envs)
        self._filler: list[Any] = []  # one valid action, made when first needed
        self._sp = self._start_pool(fns, spaces, num_workers, step_timeout, executor)
        try:
            self._adopt(spaces)
        except BaseException:
            self._sp.close()
            raise

    def _given_spaces(self, fns: list[Callable[..., Any]]) -> tuple[Space[Any], Space[Any]] | None:
        """``(observation_space, single_observation_space)`` fixed by ``observation_mode`` before the pool starts
        (checked against ``shared_memory``), or None for ``"same"`` (the pool's own)."""
        spaces = args.custom_spaces(self.observation_mode)
        if spaces is None and self.observation_mode == "different":
            spaces = args.different_spaces(fns)
        if spaces is not None and self.shared_memory:
            error = args.shared_memory_error(spaces[1])
            if error is not None:
                raise error
        return spaces

    def _start_pool(
        self,
        fns: list[Callable[..., Any]],
        spaces: tuple[Space[Any], Space[Any]] | None,
        num_workers: int | None,
        step_timeout: float | None,
        executor: PoolExecutor,
    ) -> SyncPool:
        """Start the pool on :class:`~aioenv.compat.vector_worker.VectorFactory` env factories; errors as
        ``AsyncVectorEnv``'s callers catch them."""
        owner = type(self).__name__
        try:
            return SyncPool(
                args.factories(fns, None if spaces is None else spaces[1], owner),
                autoreset_mode=self.autoreset_mode,
                num_workers=num_workers,
                step_timeout=step_timeout,
                executor=executor,
                max_concurrency=self.max_concurrency,
            )
        except ValueError as exc:
            mismatch = args.space_mismatch_error(exc, self.observation_mode, owner)
            if mismatch is None:
                raise
            raise mismatch from None
        except AioEnvError as exc:
            _raise_as_peer(exc)

    def _adopt(self, spaces: tuple[Space[Any], Space[Any]] | None) -> None:
        """Take the started pool's spaces (or those ``observation_mode`` gave), metadata and render mode."""
        sp = self._sp
        self.single_action_space = sp.single_action_space
        self.action_space = sp.action_space
        self._pool_obs_space = sp.single_observation_space
        if spaces is not None:
            self.observation_space, self.single_observation_space = spaces
        else:
            self.single_observation_space = sp.single_observation_space
            self.observation_space = sp.observation_space
            error = args.shared_memory_error(self.single_observation_space) if self.shared_memory else None
            if error is not None:
                raise error
        self._objects = has_object_leaves(self._pool_obs_space)
        self._shares_obs = not self.copy and self.shared_memory
        metadata = self._helper_wait(*self._helper_start("get", "metadata", env_ids=[0]))[0]
        self.metadata = dict(metadata or {})  # the env's own, every value (the pool keeps msgpack values only)
        if HAS_AUTORESET_MODE:  # (gymnasium 1.0's vector envs name none: the peer's metadata is the env's own)
            self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = sp.render_mode

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

    @contextlib.contextmanager
    def _waited_at_once(self) -> Iterator[None]:
        """For ``step``, ``reset`` and ``call``: their ``*_async`` runs the call to its end in the caller's thread
        where the pool's calls run there (:meth:`aioenv.SyncPool.answer`), since their ``*_wait`` follows at once.
        A ``*_async`` called on its own returns at once and the envs step while the caller goes on, as with
        ``AsyncVectorEnv`` (:meth:`aioenv.SyncPool.submit`, which gives the pool's loop back to its thread)."""
        self._then_wait = True
        try:
            yield
        finally:
            self._then_wait = False

    def _start(self, state: _State, pending: concurrent.futures.Future[Any]) -> None:
        self._pending = pending
        self._state = state

    def _wait(self, state: _State, call: str, timeout: float | None) -> Any:
        """The pending call's result; its error as ``AsyncVectorEnv``'s callers catch it (env errors logged)."""
        self._assert_is_running()
        if self._state != state:
            raise NoAsyncCallError(f"Calling `{call}_wait` without any prior call to `{call}_async`.", state.value)
        fut = self._pending
        assert fut is not None
        try:
            return _result(fut, call, timeout)
        except AioEnvError as exc:
            if state != _State.WAITING_CALL:
                log_env_errors(exc)
            _raise_as_peer(exc)
        finally:
            self._state, self._pending = _State.DEFAULT, None

    def _obs_out(self, obs: Any) -> Any:
        return batch.to_gymnasium(self._pool_obs_space, obs) if self._objects else obs

    def _keep(self, obs: Any) -> None:
        """Remember the last batch (what a partial reset returns for the envs it does not reset). As in
        ``AsyncVectorEnv``, with ``copy=False`` and ``shared_memory=True`` that is the very batch returned (changing
        it in place changes what a partial reset returns), otherwise a private copy."""
        self._last_obs = obs if self._shares_obs else batch.copy_tree(obs)

    def _absorb_partial(self, exc: BaseException, step: bool) -> None:
        """After a failed call: the rows of the envs that succeeded (``err.partial``) become their last obs."""
        partial = getattr(exc, "partial", None)
        if not isinstance(exc, AioEnvError) or partial is None or self._last_obs is None:
            return
        obs, info = partial[0], partial[-1]
        ids = np.asarray(info.get("env_id", []), dtype=np.int64)
        if ids.size:
            self._last_obs = batch.set_rows(self._last_obs, obs, ids)
            if step and self.autoreset_mode == AutoresetMode.NEXT_STEP:
                self._autoreset[:] = False
                self._autoreset[ids] = np.logical_or(partial[2], partial[3])

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
        with self._waited_at_once():
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
            gymnasium.error.Error: a negative seed or one that is not an int (also ``aioenv.UsageError``).
        """
        self._assert_is_running()
        if seed is None:
            seeds: list[Any] = [None] * self.num_envs
        elif is_int(seed):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(cast(Sequence[Any], seed))
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                f"but got length={len(seeds)}."
            )
        self._assert_default("reset_async")
        ids = self._reset_mask(options)
        if ids is not None:
            seeds = [seeds[int(i)] for i in ids]
        error = seed_error(seeds, self._ids.tolist() if ids is None else ids.tolist())
        if error is not None:
            raise error
        start = self._sp.answer if self._then_wait else self._sp.submit
        self._start(_State.WAITING_RESET, start(self._sp.pool.reset, ids, seed=seeds, options=options))
        self._reset_ids = ids

    def _reset_mask(self, options: dict[str, Any] | None) -> np.ndarray | None:
        """The env ids of ``options["reset_mask"]`` (popped from the caller's dict, as gymnasium does), checked
        with gymnasium's errors; None without one."""
        if options is None or "reset_mask" not in options:
            return None
        mask = options.pop("reset_mask")
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
        return np.flatnonzero(mask)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for :meth:`reset_async` and return ``(obs, info)`` as :meth:`reset` does.

        Raises:
            NoAsyncCallError: no :meth:`reset_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
            aioenv.EnvError: an env raised (also the env's own exception type; ``err.partial``: the others).
        """
        ids = self._reset_ids
        try:
            obs, info = self._wait(_State.WAITING_RESET, "reset", timeout)
        except (AioEnvError, TimeoutError) as exc:
            self._absorb_partial(exc, step=False)
            raise
        info = batch.without_env_id(info)
        if ids is not None and ids.size != self.num_envs:
            obs = batch.set_rows(self._last_obs, obs, ids)
            info = batch.scatter_info(info, ids, self.num_envs)
        self._autoreset[slice(None) if ids is None else ids] = False
        self._keep(obs)
        return self._obs_out(obs), info

    # ------------------------------------------------------------ step

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (an element of :attr:`action_space`, ``N`` rows).

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``: rewards ``(N,)`` float64,
            terminations/truncations ``(N,)`` bool.
        """
        with self._waited_at_once():
            self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Check ``actions`` and start a step of every env; collect it with :meth:`step_wait`.

        Raises:
            ClosedEnvironmentError: after :meth:`close`.
            AlreadyPendingCallError: another ``*_async`` call is pending.
            aioenv.InvalidAction: (a ``ValueError``; also a ``TypeError`` for what ``AsyncVectorEnv`` cannot
                iterate, e.g. one scalar) an action does not fit the action space, or not ``N`` actions;
                nothing was sent.
        """
        self._assert_is_running()
        self._assert_default("step_async")
        leaves = self._checked_actions(actions)
        self._start(_State.WAITING_STEP, self._sp.submit_step_checked(leaves, here=self._then_wait))

    def _checked_actions(self, actions: Any) -> list[np.ndarray]:
        """The pool's checked leaves for ``actions``; the actions of envs that autoreset in this step are not
        used (``next_step``), so a bad one there is replaced by a valid action instead of refused."""
        space = self.single_action_space
        try:
            return check_actions(space, actions, self._ids)
        except InvalidAction as exc:
            error = exc
        mask = self._autoreset
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and mask.any():
            replaced = batch.replace_rows(space, actions, mask, self._valid_action())
            if replaced is not None:
                try:
                    return check_actions(space, replaced, self._ids)
                except InvalidAction as exc:
                    if exc.env_id is not None and not mask[exc.env_id]:
                        error = exc  # it names an env that does step
        raise self._peer_action_error(actions, error) from None

    def _valid_action(self) -> Any:
        """One action of the action space (sampled once from a seeded copy: the caller's space RNG is untouched)."""
        if not self._filler:
            space = _copy.deepcopy(self.single_action_space)
            space.seed(0)
            self._filler.append(space.sample())
        return self._filler[0]

    def _peer_action_error(self, actions: Any, error: InvalidAction) -> InvalidAction:
        """``error``, also a ``TypeError`` when ``AsyncVectorEnv`` raises one for ``actions`` (cannot iterate them)."""
        try:
            iterate(self.action_space, actions)
        except TypeError:
            combined = combined_error(type(error), TypeError, error.message, env_id=error.env_id)
            return cast(InvalidAction, combined)
        except Exception:  # noqa: BLE001 - the peer's own other failures: InvalidAction says it better
            pass
        return error

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for :meth:`step_async`; returns what :meth:`step` returns.

        On a timeout the step goes on in the background and its results are discarded (the next call
        waits for it first).

        Raises:
            NoAsyncCallError: no :meth:`step_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
            aioenv.EnvError: an env raised, also the env's own exception type (``remote_traceback`` has the
                worker-side traceback; ``err.partial`` the other envs' rows, named by ``info["env_id"]``).
        """
        try:
            obs, reward, terminated, truncated, info = self._wait(_State.WAITING_STEP, "step", timeout)
        except (AioEnvError, TimeoutError) as exc:
            self._absorb_partial(exc, step=True)
            raise
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            np.logical_or(terminated, truncated, out=self._autoreset)
        self._keep(obs)
        return self._obs_out(obs), reward, terminated, truncated, batch.without_env_id(info)

    # ------------------------------------------------------------ methods and attributes

    def _helper_start(
        self,
        op: str,
        name: str,
        *,
        inline: Any = None,
        pickled: Any = None,
        plain: bool = True,
        env_ids: Any = None,
        here: bool = True,
    ) -> tuple[concurrent.futures.Future[Any], Transfer]:
        """Start the compat helper (:mod:`aioenv.compat.payloads`) on the envs: any picklable value both ways.
        ``here``: its wait follows at once (:meth:`aioenv.SyncPool.answer`; else :meth:`~aioenv.SyncPool.submit`)."""
        private_dir = self._sp.pool.private_dir
        assert private_dir is not None, "AioVectorEnv takes env factories: its pool is always local"
        transfer = Transfer(private_dir)
        try:
            fields = transfer.payload(inline, pickled, plain=plain)
            start = self._sp.answer if here else self._sp.submit
            return start(self._sp.pool.call, HELPER_NAME, op, name, fields, env_ids=env_ids), transfer
        except BaseException:
            transfer.cleanup()
            raise

    def _helper_wait(self, fut: concurrent.futures.Future[Any], transfer: Transfer) -> list[Any]:
        with transfer:
            try:
                replies = self._sp.wait(fut)
            except AioEnvError as exc:
                _raise_as_peer(exc)
            return transfer.decode(replies)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every env; a tuple of ``N`` results."""
        with self._waited_at_once():
            self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call`; collect it with :meth:`call_wait`. Arguments may be any picklable values.

        Raises:
            ClosedEnvironmentError: after :meth:`close`.
            AlreadyPendingCallError: another ``*_async`` call is pending.
            ValueError: ``name`` is ``reset``, ``step`` or ``close`` (``AsyncVectorEnv``'s refusal; nothing is sent).
        """
        self._assert_is_running()
        self._assert_default("call_async")
        if name in _RESERVED:
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        inline = {"args": [name, *args], "kw": dict(kwargs)}
        fut, transfer = self._helper_start(
            "call",
            PEER_CALL,
            inline=inline,
            pickled=((name, *args), kwargs),
            plain=is_plain(inline),
            here=self._then_wait,
        )
        self._pending, self._transfer, self._state = fut, transfer, _State.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Wait for :meth:`call_async`; a tuple with one result per env (any picklable value).

        Raises:
            NoAsyncCallError: no :meth:`call_async` is pending.
            multiprocessing.TimeoutError: not done after ``timeout`` seconds.
            Exception: the env's own exception (e.g. ``AttributeError`` for a missing attribute).
        """
        transfer = self._transfer
        try:
            replies = self._wait(_State.WAITING_CALL, "call", timeout)
            if transfer is None:
                raise NoAsyncCallError("Calling `call_wait` without any prior call to `call_async`.", "call")
            return tuple(transfer.decode(replies))
        finally:
            if transfer is not None and self._state == _State.DEFAULT:
                transfer.cleanup()
                self._transfer = None

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every env (called when it is a method, as in ``AsyncVectorEnv``); a tuple of ``N``."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Set attribute ``name`` of every env (``env.set_wrapper_attr``): a list/tuple gives one value per env,
        anything else is set on all. Values may be any picklable objects.

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
        if is_plain(list(values)):
            try:
                self._sp.set_attr(name, list(values))
            except AioEnvError as exc:
                _raise_as_peer(exc)
            return
        started = [
            self._helper_start("call", "set_wrapper_attr", pickled=((name, value), {}), plain=False, env_ids=[i])
            for i, value in enumerate(values)
        ]
        for fut, transfer in started:
            self._helper_wait(fut, transfer)

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]  # as AsyncVectorEnv
        """The ``np_random_seed`` of every env."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only, as AsyncVectorEnv's
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]  # as AsyncVectorEnv
        """The ``np_random`` generator of every env (copies: changing them changes nothing in the envs)."""
        return self.get_attr("np_random")

    @property
    def observations(self) -> Any:
        """The last observations (``AsyncVectorEnv``'s buffer): zeros before the first reset."""
        if self._last_obs is None:
            return create_empty_array(self.single_observation_space, self.num_envs, fn=np.zeros)
        return self._obs_out(self._last_obs)

    def render(self) -> tuple[Any, ...] | None:
        """Every env's ``render()`` result: a tuple of ``N`` frames (e.g. ``(H, W, 3)`` uint8 arrays)."""
        return self.call("render")

    def __getattr__(self, name: str) -> NoReturn:
        if name in _PEER_ONLY:
            raise AttributeError(
                f"{type(self).__name__} has no `{name}`: its envs run in aioenv worker processes, several per "
                "worker; `.pool` is the aioenv.SyncPool that runs them"
            )
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    # ------------------------------------------------------------ close

    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Close the pool: a pending call fails, envs are closed, worker processes stopped (never hangs).

        ``timeout`` and ``terminate`` are accepted for compatibility: aioenv's shutdown escalates to
        SIGTERM/SIGKILL by itself.
        """
        if self._state != _State.DEFAULT:
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            self._state, self._pending = _State.DEFAULT, None
        if self._transfer is not None:
            self._transfer.cleanup()
            self._transfer = None
        sp = self.__dict__.get("_sp")
        if sp is not None:
            sp.close()

    def __del__(self) -> None:
        if self.__dict__.get("_sp") is not None and not self.__dict__.get("closed", True):
            self.close()

    def __repr__(self) -> str:
        if "num_envs" not in self.__dict__:
            return f"{type(self).__name__}(num_envs=?)"
        return super().__repr__()


def _result(fut: concurrent.futures.Future[Any], call: str, timeout: float | None) -> Any:
    """``fut``'s result within ``timeout``; :class:`WaitTimeout` (the call cancelled: its requests finish in the
    background) when it is not done by then."""
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        if not fut.done() and fut.cancel():
            raise WaitTimeout(f"The call to `{call}_wait` has timed out after {timeout} second(s).") from None
        return fut.result()  # done meanwhile, or the call's own error (StepTimeout is a TimeoutError too)
    except BaseException:  # KeyboardInterrupt: cancel, as above
        if not fut.done():
            fut.cancel()
        raise


def _raise_as_peer(exc: AioEnvError) -> NoReturn:
    """Raise ``exc`` as ``AsyncVectorEnv``'s callers catch it (:func:`~aioenv.compat.vector_errors.as_peer_error`)."""
    peer = as_peer_error(exc)
    if peer is exc:
        raise exc
    raise peer from None

"""``AioVecEnv``: a drop-in for Stable-Baselines3's ``SubprocVecEnv``, run by an aioenv pool.

Change one line::

    from stable_baselines3.common.vec_env import SubprocVecEnv
    venv = SubprocVecEnv([make_env(i) for i in range(8)])
    # becomes
    from aioenv.compat.sb3 import AioVecEnv
    venv = AioVecEnv([make_env(i) for i in range(8)])

Behaviour mirrors ``SubprocVecEnv`` (and ``DummyVecEnv``): ``step`` returns
``(obs, rewards, dones, infos)`` with SB3's autoreset (``infos[i]["terminal_observation"]``
and ``infos[i]["TimeLimit.truncated"]``, the new episode's first obs returned),
``reset()`` returns obs only and sets ``reset_infos``, ``seed``/``set_options`` apply at
the next ``reset()``, and ``env_method``/``get_attr``/``set_attr``/``env_is_wrapped`` take
``indices``. Values crossing to and from the envs (method arguments, results, attributes)
keep their types, as with ``SubprocVecEnv``: msgpack values travel inline, anything else is
pickled with cloudpickle into a file of the pool's private 0700 directory and only the file's
name crosses the socket (see :mod:`aioenv.compat`). A step is one message per worker.

As with ``SubprocVecEnv``, ``actions[i]`` goes to env ``i`` whatever the action space: ``Dict`` and
``Tuple`` actions are a sequence of per-env dicts/tuples (checked for the whole batch before anything is
sent; a bad one raises ``aioenv.InvalidAction`` naming the env, the space and what arrived). ``indices``
resolve exactly as SB3's ``_get_indices`` and ``SubprocVecEnv``'s remotes do (an int, a negative int, a
repeated index, the same ``IndexError``/``TypeError`` for a bad one). ``start_method`` is validated as
``SubprocVecEnv`` validates it (``ValueError`` for one ``multiprocessing`` does not know).

Rewards are float64 and dones bool, as ``SubprocVecEnv`` stacks the envs' Python floats and bools
(``DummyVecEnv``'s rewards are float32).

Differences (docs/migrating.md has the list): workers are never forked (``start_method="fork"`` warns),
several envs run per worker (``num_workers`` defaults to ``min(n_envs, usable CPUs)``); rewards are float64
whatever type an env's reward has (``SubprocVecEnv`` stacks what the envs return: int64 for int rewards);
infos and ``reset_infos`` are lists (``SubprocVecEnv``'s are tuples); any other keyword argument is an aioenv
pool option (``num_workers``, ``step_timeout``, ``seed``, ``env_kwargs``); errors are aioenv's
(``aioenv.EnvError`` with the remote traceback) except that ``get_attr``/``env_method`` re-raise the env's own
exception type (an ``AttributeError`` stays one); a closed ``AioVecEnv`` raises ``aioenv.PoolClosed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, ParamSpec

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from aioenv.compat.payloads import HELPER_NAME, CompatFactory, Transfer, class_key, is_plain
from aioenv.compat.vector_args import checked_env_fns
from aioenv.errors import InvalidAction, PoolClosed
from aioenv.sync import SyncPool
from aioenv.wire.spaces import check_actions

__all__ = ["AioVecEnv"]

P = ParamSpec("P")


class _Answered:
    """A call's outcome, taken at once (a step answered inside the call, in the caller's thread), read back
    as a done ``Future``'s: :meth:`result` returns the value or raises the call's error (SB3 raises a step's
    errors from ``step_wait``)."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any, error: Exception | None) -> None:
        self._value, self._error = value, error

    @classmethod
    def of(cls, call: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> _Answered:
        """``call(*args, **kwargs)``'s outcome (its value, or the ``Exception`` it raised; Ctrl-C goes on at once)."""
        try:
            return cls(call(*args, **kwargs), None)
        except Exception as exc:  # noqa: BLE001 - the step's error is step_wait's to raise
            return cls(None, exc)

    def result(self) -> Any:
        """The value, or the call's error raised."""
        if self._error is not None:
            raise self._error
        return self._value


def _batched_obs(obs: Any, space: spaces.Space[Any]) -> VecEnvObs:
    """A pool's batched observation in SB3's form: an array, a dict of arrays or a tuple of arrays."""
    if isinstance(space, spaces.Dict):
        return {key: obs[key] for key in space.spaces}
    if isinstance(space, spaces.Tuple):
        return tuple(obs)
    return np.asarray(obs)


def _stack_obs(obs_list: Sequence[Any], space: spaces.Space[Any]) -> VecEnvObs:
    """Stack per-env observations as SB3 does: an array, a dict of arrays or a tuple of arrays."""
    if isinstance(space, spaces.Dict):
        return {key: np.stack([o[key] for o in obs_list]) for key in space.spaces}
    if isinstance(space, spaces.Tuple):
        return tuple(np.stack([o[i] for o in obs_list]) for i in range(len(space.spaces)))
    return np.stack(obs_list)


async def _gather(dispatch: Callable[[int], asyncio.Future[Any]], count: int) -> list[Any]:
    """On the pool's loop: dispatch one request per env, wait for all, then raise the first failure."""
    futures: list[asyncio.Future[Any]] = []
    refused: BaseException | None = None
    for env_id in range(count):
        try:
            futures.append(dispatch(env_id))
        except Exception as exc:  # noqa: BLE001 - raised below, once the dispatched requests finished
            refused = exc
            break
    results = await asyncio.gather(*futures, return_exceptions=True)
    if refused is not None:
        raise refused
    for res in results:
        if isinstance(res, BaseException):
            raise res
    return results


def _checked_start_method(start_method: Any) -> None:
    """Validate ``start_method`` as ``SubprocVecEnv`` does (``multiprocessing.get_context`` raises ValueError for
    a method it does not know); warn for ``"fork"``, the one method whose semantics aioenv does not give."""
    if start_method is None:
        return
    multiprocessing.get_context(start_method)
    if start_method == "fork":
        warnings.warn(
            "AioVecEnv ignores start_method='fork': aioenv never forks, its workers are fresh interpreters that "
            "receive the env factories pickled with cloudpickle (as with 'spawn' or 'forkserver')",
            UserWarning,
            stacklevel=3,
        )


# ------------------------------------------------------------ per-env Dict/Tuple actions (SB3's actions[i])


def _show(value: Any) -> str:
    """A short description of what arrived: its type (an array's dtype and shape too) and a repr cut short."""
    text = " ".join(repr(value).split())
    kind = f"ndarray {value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
    return f"{kind} {text if len(text) <= 80 else text[:77] + '...'}"


def _row_error(env_id: int, path: str, expected: str, row: Any) -> InvalidAction:
    at = f" at action{path}" if path else ""
    return InvalidAction(f"invalid action for env {env_id}{at}: expected {expected}, got {_show(row)}", env_id=env_id)


def _columns(space: spaces.Space[Any], rows: Sequence[Any], env_ids: Sequence[int], path: str = "") -> Any:
    """Per-env actions (``rows[j]`` for env ``env_ids[j]``) in the batched form ``check_actions`` takes: a dict or
    tuple of columns for ``Dict``/``Tuple`` spaces, recursively; a structure that does not fit names its env."""
    if isinstance(space, spaces.Dict):
        keys = list(space.spaces)
        for env_id, row in zip(env_ids, rows, strict=True):
            if not isinstance(row, Mapping) or len(row) != len(keys) or any(key not in row for key in keys):
                raise _row_error(env_id, path, f"a dict with the keys {keys} of {space!r}", row)
        return {key: _columns(space[key], [row[key] for row in rows], env_ids, f"{path}[{key!r}]") for key in keys}
    if isinstance(space, spaces.Tuple):
        size = len(space.spaces)
        for env_id, row in zip(env_ids, rows, strict=True):
            sequence = isinstance(row, tuple | list) or (isinstance(row, np.ndarray) and row.ndim == 1)
            if not sequence or len(row) != size:
                raise _row_error(env_id, path, f"a tuple of {size} values of {space!r}", row)
        return tuple(_columns(sub, [row[k] for row in rows], env_ids, f"{path}[{k}]") for k, sub in enumerate(space))
    return rows


def _blame(space: spaces.Space[Any], rows: Sequence[Any], env_ids: Sequence[int], path: str = "") -> None:
    """After a whole-batch error (a shape or dtype that does not stack) in rows that :func:`_columns` accepted:
    raise an ``InvalidAction`` naming the first env whose value does not fit, and where."""
    if isinstance(space, spaces.Dict | spaces.Tuple):
        items: Iterable[tuple[Any, spaces.Space[Any]]]
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        for key, sub in items:
            _blame(sub, [row[key] for row in rows], env_ids, f"{path}[{key!r}]")
        return
    for env_id, value in zip(env_ids, rows, strict=True):
        try:
            check_actions(space, [value], np.array([env_id]))
        except InvalidAction as exc:
            raise _row_error(env_id, path, f"a value of {space!r}", value) from exc


def _check_per_env(space: spaces.Space[Any], actions: Any, all_ids: np.ndarray) -> list[np.ndarray]:
    """Check a sequence of per-env ``Dict``/``Tuple`` actions (``actions[i]`` for env ``i``, as SB3 passes them)
    and return the pool's leaves; every error is an ``InvalidAction`` that names the env."""
    if isinstance(actions, Mapping):
        raise InvalidAction(
            f"invalid action batch: expected a sequence of {len(all_ids)} per-env actions, each in {space!r} "
            f"(actions[i] goes to env i, as in SubprocVecEnv), got {_show(actions)}"
        )
    if len(actions) != len(all_ids):
        raise ValueError(f"expected {len(all_ids)} actions (actions[i] for env i), got {len(actions)}")
    rows, ids = list(actions), all_ids.tolist()
    try:
        return check_actions(space, _columns(space, rows, ids), all_ids)
    except InvalidAction as exc:
        if exc.env_id is None:
            _blame(space, rows, ids)
        raise


def _rounds(env_ids: list[int]) -> list[tuple[list[int], list[int]]]:
    """Split ``env_ids`` (repeats allowed, as in SB3's ``indices``) into rounds of distinct envs, in order: each
    round is (positions in ``env_ids``, env ids); the k-th occurrence of an env goes to round k."""
    seen: dict[int, int] = {}
    rounds: list[tuple[list[int], list[int]]] = []
    for position, env_id in enumerate(env_ids):
        k = seen.get(env_id, 0)
        seen[env_id] = k + 1
        if k == len(rounds):
            rounds.append(([], []))
        rounds[k][0].append(position)
        rounds[k][1].append(env_id)
    return rounds


def _no_subprocesses(name: str) -> property:
    """A ``SubprocVecEnv`` attribute that has no meaning here: reading it raises a clear ``AttributeError``."""

    def refuse(_self: AioVecEnv) -> Any:
        raise AttributeError(
            f"AioVecEnv has no {name!r} (a SubprocVecEnv attribute): its envs run in aioenv worker processes, "
            "several per worker; AioVecEnv.pool is the aioenv.SyncPool that runs them"
        )

    return property(refuse, doc=f"Not offered: ``SubprocVecEnv.{name}`` (raises ``AttributeError``).")


class AioVecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` whose envs run in aioenv worker processes.

    Args:
        env_fns: one callable per env, each returning a ``gymnasium.Env`` (as for ``SubprocVecEnv``).
            They are shipped to the workers with cloudpickle.
        start_method: validated as ``SubprocVecEnv`` validates it (``ValueError`` for a method ``multiprocessing``
            does not know); workers are fresh interpreters whatever it is, as with ``"spawn"``/``"forkserver"``
            (``"fork"`` warns: aioenv never forks).
        **aioenv_options: options of :class:`aioenv.Pool` (``num_workers``, ``step_timeout``, ``seed``,
            ``env_kwargs``). ``autoreset_mode`` and ``batch_size`` are fixed by SB3's semantics.
    """

    processes = _no_subprocesses("processes")
    remotes = _no_subprocesses("remotes")
    work_remotes = _no_subprocesses("work_remotes")

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env[Any, Any]]],
        start_method: str | None = None,
        **aioenv_options: Any,
    ) -> None:
        for fixed in ("autoreset_mode", "batch_size", "num_envs"):
            if fixed in aioenv_options:
                raise TypeError(f"AioVecEnv fixes {fixed!r} (SB3 semantics); do not pass it")
        env_fns = checked_env_fns(env_fns, "AioVecEnv")
        if not env_fns:
            raise ValueError("AioVecEnv needs at least one env factory")
        _checked_start_method(start_method)
        self.waiting = False
        self.closed = False
        self.start_method = start_method
        self._pending: Future[Any] | _Answered | None = None
        #: Whether the ``step_async`` about to run belongs to :meth:`step`, whose ``step_wait`` follows at once.
        self._then_wait = False
        by_id: dict[int, CompatFactory] = {}  # the same callable twice stays one source
        factories = [by_id.setdefault(id(fn), CompatFactory(fn)) for fn in env_fns]
        self._all_ids = np.arange(len(env_fns))
        self._positions = tuple(range(len(env_fns)))  # indexed as SubprocVecEnv indexes its tuple of remotes
        self.pool = SyncPool(factories, autoreset_mode="same_step", **aioenv_options)
        try:
            super().__init__(len(env_fns), self.pool.single_observation_space, self.pool.single_action_space)
        except BaseException:
            self.pool.close()
            raise
        # SB3 passes Dict and Tuple actions as a sequence of per-env values (plain spaces pay nothing for this)
        self._per_env_actions = isinstance(self.action_space, spaces.Dict | spaces.Tuple)

    def _check_open(self) -> None:
        if self.closed:
            raise PoolClosed("this AioVecEnv is closed: make a new one")

    # ------------------------------------------------------------ stepping

    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        """Step every env (``step_async`` then ``step_wait``, as SB3's ``VecEnv.step``): where the pool's calls run
        in this thread (:attr:`aioenv.SyncPool.runs_in_caller`, the default), the whole step runs inside
        ``step_async``, with no hop to the pool's loop thread and back."""
        self._then_wait = True
        try:
            self.step_async(actions)
        finally:
            self._then_wait = False
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Dispatch a step of every env (``actions[i]`` for env ``i``, one message per worker);
        :meth:`step_wait` collects them.

        ``actions`` is a batch array for Box/Discrete/MultiDiscrete/MultiBinary spaces and, for Dict and Tuple
        spaces, a sequence of per-env dicts/tuples (a list or an object array), as SB3 passes them. Nothing is
        sent unless every env's action fits: ``aioenv.InvalidAction`` names the env, the space and what arrived."""
        if self.waiting:
            raise RuntimeError("step_async was already called: call step_wait() first")
        self._check_open()
        # The whole batch is checked before anything is sent (InvalidAction, a ValueError, names the env),
        # here and once: the pool takes the checked leaves as they are.
        if self._per_env_actions:
            leaves = _check_per_env(self.pool.single_action_space, actions, self._all_ids)
        else:
            if len(actions) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} actions (actions[i] for env i), got {len(actions)}")
            leaves = check_actions(self.pool.single_action_space, actions, self._all_ids)
        # info_list: one message per worker, each env's own info dict back (SB3's infos)
        if self.pool.runs_in_caller and self._then_wait:  # step(): answered inside the call, in this thread
            self._pending = _Answered.of(self.pool.step_checked, leaves, info_list=True)
        else:  # the loop thread may send later: a leaf may be the caller's array, reused. A step_async on its own
            # returns at once and the envs step while the caller goes on (envs in this process: it is answered)
            leaves = [np.array(leaf, copy=True) for leaf in leaves]
            self._pending = self.pool.submit_step_checked(leaves, info_list=True)
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """Results of the pending steps: ``(obs, rewards, dones, infos)`` with SB3's autoreset."""
        if not self.waiting:
            raise RuntimeError("step_wait called without step_async")
        pending, self._pending = self._pending, None
        self.waiting = False
        assert pending is not None
        obs, reward, terminated, truncated, raw_infos = pending.result()
        dones = terminated | truncated
        infos = [dict(env_info) for env_info in raw_infos]  # the caller's own (VecMonitor adds "episode")
        for info, time_limit in zip(infos, (truncated & ~terminated).tolist(), strict=True):
            info["TimeLimit.truncated"] = time_limit  # a Python bool: cheaper per env than a numpy scalar
        for env_id in np.flatnonzero(dones).tolist():  # same_step autoreset: {"final_obs", "final_info", **reset's}
            raw = infos[env_id]
            info = dict(raw.pop("final_info") or {})
            info["TimeLimit.truncated"] = raw.pop("TimeLimit.truncated")
            info["terminal_observation"] = raw.pop("final_obs")
            self.reset_infos[env_id] = raw
            infos[env_id] = info
        # SubprocVecEnv's rewards: np.stack of the envs' Python floats, float64 (a copy: SB3 adds to it in place)
        return _batched_obs(obs, self.observation_space), np.array(reward, dtype=np.float64), dones, infos

    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds and options set by :meth:`seed`/:meth:`set_options` (used once)."""
        self._check_open()
        self._drain()
        seeds, options, core = list(self._seeds), list(self._options), self.pool.pool
        results = self._on_loop(
            lambda env_id: core.reset_env(env_id, seed=seeds[env_id], options=options[env_id] or None)
        ).result()
        self.reset_infos = [dict(r.info) for r in results]
        self._reset_seeds()
        self._reset_options()
        return _stack_obs([r.obs for r in results], self.observation_space)

    def _on_loop(self, dispatch: Callable[[int], asyncio.Future[Any]]) -> Future[list[Any]]:
        """Dispatch one request per env in a single hop to the pool's event loop; all results, env order."""
        return self.pool.run_coroutine(_gather(dispatch, self.num_envs))

    def _drain(self) -> None:
        """Wait out steps still in flight (their results are dropped)."""
        pending, self._pending = self._pending, None
        self.waiting = False
        if pending is not None:
            with contextlib.suppress(Exception):  # results nobody will read
                pending.result()

    def close(self) -> None:
        """Wait for pending steps, then close the envs and stop the workers. Idempotent."""
        if self.closed:
            return
        try:
            self._drain()
        finally:
            self.pool.close()
            self.closed = True

    # ------------------------------------------------------------ rendering

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One RGB frame per env (``render_mode="rgb_array"``), as ``SubprocVecEnv.get_images``."""
        self._check_open()
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        return list(self.pool.call("render"))

    # ------------------------------------------------------------ attributes and methods

    def _helper(
        self,
        op: str,
        name: str,
        indices: VecEnvIndices,
        inline: dict[str, Any] | None = None,
        *,
        pickled: Any = None,
        plain: bool = True,
    ) -> list[Any]:
        """Run the compat helper on each env in ``indices``: one value per index, the envs' own exceptions.

        ``indices`` resolve as in ``SubprocVecEnv`` (:meth:`_env_ids`); an env named twice runs twice, in order.
        The request carries ``inline`` when ``plain``, else ``pickled`` goes through a file of the pool's
        private directory (see :class:`aioenv.compat.payloads.Transfer`; every file is gone when this returns)."""
        self._check_open()
        ids = self._env_ids(indices)
        private_dir = self.pool.pool.private_dir
        assert private_dir is not None, "AioVecEnv takes env factories: its pool is always local"
        results: list[Any] = [None] * len(ids)
        with Transfer(private_dir) as transfer:
            fields = transfer.payload(inline, pickled, plain=plain)
            for positions, env_ids in _rounds(ids):
                values = transfer.decode(self.pool.call(HELPER_NAME, op, name, fields, env_ids=env_ids))
                for position, value in zip(positions, values, strict=True):
                    results[position] = value
        return results

    def _env_ids(self, indices: VecEnvIndices) -> list[int]:
        """SB3's ``_get_indices``, then each index looked up as ``SubprocVecEnv`` looks up its tuple of remotes: a
        negative index counts from the end; a bad one raises the ``IndexError``/``TypeError`` it raises there, with
        a message that names it."""
        n, positions, ids = self.num_envs, self._positions, []
        try:
            indexes: Iterable[Any] = iter(self._get_indices(indices))
        except TypeError:
            got = f"{type(indices).__name__} {indices!r}"
            hint = ": pass int(i) or [i], SB3 takes no numpy integer alone" if isinstance(indices, np.integer) else ""
            raise TypeError(
                f"indices must be None, an int or an iterable of ints (as in SB3), got {got}{hint}"
            ) from None
        for index in indexes:
            try:
                ids.append(positions[index])
            except IndexError:
                raise IndexError(f"env index {index!r} is out of range: {n} envs, 0..{n - 1} (or -{n}..-1)") from None
            except TypeError:
                raise TypeError(f"an env index must be an int, got {type(index).__name__} {index!r}") from None
        return ids

    def has_attr(self, attr_name: str) -> bool:
        """True when every env has ``attr_name`` (looked up through its wrappers)."""
        return all(self._helper("has", attr_name, None))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """``env.get_wrapper_attr(attr_name)`` of each env in ``indices`` (all when None)."""
        return self._helper("get", attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """``setattr(env, attr_name, value)`` on each env in ``indices`` (the outermost wrapper, as SB3)."""
        self._helper("set", attr_name, indices, inline={"value": value}, pickled=value, plain=is_plain(value))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call ``method_name(*method_args, **method_kwargs)`` on each env in ``indices``; one result each."""
        inline = {"args": list(method_args), "kw": dict(method_kwargs)}
        plain = is_plain(inline)
        return self._helper(
            "call", method_name, indices, inline=inline, pickled=(method_args, method_kwargs), plain=plain
        )

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]], indices: VecEnvIndices = None
    ) -> list[bool]:
        """Whether each env in ``indices`` has a ``wrapper_class`` (or subclass) in its wrapper chain."""
        return [bool(x) for x in self._helper("is_wrapped", "", indices, inline={"key": class_key(wrapper_class)})]

"""EnvPool's Python interface for any gymnasium env, run by an aioenv pool.

Change one line::

    import envpool                          # before
    import aioenv.compat.envpool as envpool  # after

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, batch_size=4)
    env.async_reset()
    while True:
        obs, rew, term, trunc, info = env.recv()
        env_id = info["env_id"]
        env.send(policy(obs), env_id)

What matches EnvPool (checked side by side against envpool 1.2.5 in ``tests/compat/test_envpool.py``):
``make``/``make_gym``/``make_gymnasium``/``make_dm``/``make_spec``; ``env_type`` ``"gymnasium"`` and
``"gym"`` (the same gymnasium 5-tuple, as EnvPool 1.x) and ``"dm"`` (batched ``dm_env.TimeStep``, needs
the ``dm`` extra); ``send(action, env_id)`` (arrays or EnvPool's dict actions), ``recv()`` (the first
``batch_size`` envs to finish; with ``batch_size == num_envs`` every env sent, in the order sent),
``step(action, env_id)`` (``send`` then ``recv``), ``reset(env_id)`` (the reset then ``recv``),
``async_reset()``; ``info["env_id"]`` (int32), ``info["players"]["env_id"]``, ``info["elapsed_step"]``;
single-env spaces; ``config``/``spec.config``; the seed rule (an int gives env ``i`` the seed
``seed + i``; a list gives one per env); next-step autoreset; float32 rewards.

EnvPool's 104 Atari tasks (``"Pong-v5"``, ...; ``pip install "aioenv[atari]"``) are EnvPool's own, row for row
(:mod:`aioenv.compat.envpool_atari`); EnvPool's MuJoCo v2/v3 ids are made as the gymnasium v4 envs they equal.

What differs, and every option and method: ``docs/migrating.md``, "From EnvPool". In short: any
gymnasium id or ``"pkg.module:factory"`` works; envs run in worker processes (``num_threads`` sets how
many); input EnvPool would crash on, block forever on or silently misread is refused with a clear
error (``aioenv.InvalidAction`` naming the task, the env, the expected space and what arrived;
``aioenv.UsageError`` for unknown, repeated or busy env ids and for a ``recv`` that could never return).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar, overload

import gymnasium
import numpy as np

from aioenv._compat import AutoresetMode
from aioenv.compat import envpool_atari, envpool_dm
from aioenv.compat.envpool_spec import EnvSpec, build_spec, worker_count
from aioenv.errors import EnvError, InvalidAction, StepTimeout, UsageError, WorkerCrashed
from aioenv.sync import SyncPool

__all__ = [
    "DMEnvPool",
    "EnvPool",
    "EnvSpec",
    "GymnasiumEnvPool",
    "list_all_envs",
    "make",
    "make_dm",
    "make_gym",
    "make_gymnasium",
    "make_spec",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_ENV_TYPES = ("dm", "gym", "gymnasium")
_INTEGER_SPACES = (gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete, gymnasium.spaces.MultiBinary)
_ROW_FAILURES = (EnvError, WorkerCrashed, StepTimeout)  # a failed env's row, consumed by the recv that raises it
Rows = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


def make_spec(task_id: str, **kwargs: Any) -> EnvSpec:
    """EnvPool's ``make_spec``: the :class:`EnvSpec` (spaces, ``config``) ``make`` would build, without a pool.

    Raises gymnasium's own error (``gymnasium.error.NameNotFound``) for an unknown gymnasium id, and
    ``ValueError`` for an option out of range, naming the task, the option and the value.
    """
    return build_spec(task_id, dict(kwargs))


@overload
def make(task_id: str, env_type: Literal["dm"], **kwargs: Any) -> DMEnvPool: ...
@overload
def make(task_id: str, env_type: Literal["gym", "gymnasium"] = ..., **kwargs: Any) -> GymnasiumEnvPool: ...
@overload
def make(task_id: str, env_type: str, **kwargs: Any) -> DMEnvPool | GymnasiumEnvPool: ...
def make(task_id: str, env_type: str = "gymnasium", **kwargs: Any) -> DMEnvPool | GymnasiumEnvPool:
    """EnvPool's ``make``: ``num_envs`` copies of ``task_id`` behind EnvPool's Python interface.

    Args:
        task_id: a gymnasium id (``"CartPole-v1"``) or ``"pkg.module:factory"``.
        env_type: ``"gymnasium"`` or ``"gym"`` (both give gymnasium's ``(obs, rew, term, trunc, info)``, as
            EnvPool 1.x) or ``"dm"`` (a batched ``dm_env.TimeStep``; needs ``pip install "aioenv[dm]"``).
            EnvPool requires it; here it defaults to ``"gymnasium"``.
        **kwargs: EnvPool's options: ``num_envs`` (default 1), ``batch_size`` (rows ``recv`` returns; default
            ``num_envs``), ``num_threads`` (worker processes; 0 = ``min(num_envs, usable CPUs)``), ``seed`` (an int
            gives env ``i`` the seed ``seed + i``, default 42; a sequence gives one per env), ``env_seed``,
            ``max_episode_steps``, ``reward_threshold``, ``render_mode`` (None or ``"rgb_array"``),
            ``render_env_id``, ``max_num_players=1``, ``gym_reset_return_info=True``; accepted and ignored with a
            warning: ``thread_affinity_offset``, ``base_path``; aioenv's ``step_timeout`` (seconds); anything
            else is a keyword argument of ``gymnasium.make`` (or of the factory).
    """
    if env_type not in _ENV_TYPES:
        raise ValueError(f"{task_id}: env_type should be one of 'dm', 'gym', or 'gymnasium', got {env_type!r}")
    if env_type == "dm":
        envpool_dm.import_dm_env()  # a missing dm-env is reported before any worker starts
    step_timeout = kwargs.pop("step_timeout", None)
    spec = build_spec(task_id, dict(kwargs))
    if env_type == "dm":
        return DMEnvPool(spec, step_timeout=step_timeout)
    return GymnasiumEnvPool(spec, step_timeout=step_timeout)


def make_gymnasium(task_id: str, **kwargs: Any) -> GymnasiumEnvPool:
    """EnvPool's ``make_gymnasium``: ``make(task_id, env_type="gymnasium", **kwargs)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: str, **kwargs: Any) -> GymnasiumEnvPool:
    """EnvPool's ``make_gym``: as in EnvPool 1.x, the same gymnasium-API pool as :func:`make_gymnasium`."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: str, **kwargs: Any) -> DMEnvPool:
    """EnvPool's ``make_dm``: ``make(task_id, env_type="dm", **kwargs)`` (needs the ``dm`` extra)."""
    return make(task_id, "dm", **kwargs)


def list_all_envs() -> list[str]:
    """Every task id ``make`` takes by name: each id registered with gymnasium, then EnvPool's Atari ids
    (``"Pong-v5"``, ...) when ale-py and OpenCV are installed (``pip install "aioenv[atari]"``). A
    ``"pkg.module:factory"`` is a valid ``task_id`` too."""
    ids = list(gymnasium.registry)
    if envpool_atari.installed():
        ids += [task for task in envpool_atari.ATARI_TASKS if task not in gymnasium.registry]
    return ids


def _take_rows(tree: Any, idx: np.ndarray, n: int) -> Any:
    """``tree`` (a batch of ``n`` rows: arrays, dicts and tuples of them) with its rows in order ``idx``."""
    if isinstance(tree, dict):
        return {k: _take_rows(v, idx, n) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_take_rows(v, idx, n) for v in tree)
    if isinstance(tree, np.ndarray) and tree.ndim and tree.shape[0] == n:
        return tree[idx]
    return tree


class EnvPool:
    """What EnvPool's pools share, backed by :class:`aioenv.SyncPool`; made by :func:`make`.

    Rows are named by env id (``info["env_id"]``). Each call below returns B rows: ``batch_size`` for
    ``recv``, and for ``step``/``reset`` in async mode (``batch_size < num_envs``); in sync mode every env
    sent, in the order sent. How the rows look is the subclass's: :class:`GymnasiumEnvPool` or
    :class:`DMEnvPool`.
    """

    def __init__(self, spec: EnvSpec, *, step_timeout: float | None = None) -> None:
        config = spec.config
        self.spec = spec
        self.num_envs: int = int(config.num_envs)
        self.batch_size: int = int(config.batch_size)
        self._pool = SyncPool(
            spec.source,
            self.num_envs,
            batch_size=self.batch_size,
            num_workers=worker_count(config),
            executor="inline",  # EnvPool's num_threads are worker processes here, each stepping its envs in turn
            autoreset_mode="next_step",
            seed=list(config.env_seed) or int(config.seed),
            env_kwargs=spec.env_kwargs or None,
            step_timeout=step_timeout,
        )
        self.observation_space: gymnasium.Space[Any] = self._pool.single_observation_space
        self.action_space: gymnasium.Space[Any] = self._pool.single_action_space
        spec._spaces = (self.observation_space, self.action_space)
        self.render_mode: str | None = spec.env_kwargs.get("render_mode")
        self._all_ids = np.arange(self.num_envs, dtype=np.int32)
        self._all_ids.flags.writeable = False
        self._elapsed = np.zeros(self.num_envs, dtype=np.int32)
        self._ended = np.zeros(self.num_envs, dtype=np.bool_)  # the env's last row ended an episode
        self._resetting = np.zeros(self.num_envs, dtype=np.bool_)  # the env's request in flight is a reset
        self._order = np.zeros(self.num_envs, dtype=np.int64)  # when each env was last sent to (sync recv order)
        self._sends = 0
        self._outstanding = 0
        #: Of the rows :meth:`_finish` made last: which start an episode, and the env's own discounts (Atari).
        self._first_rows = np.zeros(0, dtype=np.bool_)
        self._discounts: np.ndarray | None = None  # rows sent (send, async_reset) and not yet returned by recv
        self.closed = False

    # ------------------------------------------------------------ EnvPool attributes

    @property
    def config(self) -> dict[str, Any]:
        """EnvPool's config as a dict (``spec.config._asdict()``)."""
        return dict(self.spec.config._asdict())

    @property
    def all_env_ids(self) -> np.ndarray:
        """``np.arange(num_envs)``, int32 (read-only)."""
        return self._all_ids

    @property
    def is_async(self) -> bool:
        """True when ``batch_size < num_envs``."""
        return self.batch_size != self.num_envs

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        config = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"aioenv.compat.envpool.{type(self).__name__}({self.spec.task_id!r}, {config})"

    def seed(self, seed: int | list[int] | None = None) -> None:
        """Abandoned in EnvPool: seeds are fixed by ``make(..., seed=)``. Warns and does nothing."""
        warnings.warn(
            "The `seed` function in envpool is abandoned. You can set seed by envpool.make(..., seed=seed) instead.",
            stacklevel=2,
        )

    def xla(self) -> Any:
        """EnvPool's XLA interface does not exist here: raises RuntimeError."""
        raise RuntimeError("aioenv.compat.envpool has no XLA interface: its envs run in worker processes, not C++")

    # ------------------------------------------------------------ actions and rows

    def _split_dict(self, action: Any, env_id: Any) -> tuple[Any, Any]:
        """EnvPool's dict action ``{"action": a, "env_id": ids, "players.env_id": ids}`` as ``(a, env_id)``; an
        explicit ``env_id`` argument wins over the dict's, as in EnvPool."""
        if not isinstance(action, dict) or isinstance(self.action_space, gymnasium.spaces.Dict):
            return action, env_id
        rest = dict(action)
        ids = rest.pop("env_id", None)
        players = rest.pop("players.env_id", None)
        nested = rest.pop("players", None)
        if isinstance(nested, dict):
            players = nested.get("env_id", players)
        env_id = ids if env_id is None else env_id
        if set(rest) != {"action"}:
            raise InvalidAction(
                f"{self.spec.task_id}: a dict action for {self.action_space} holds 'action' (and optionally "
                f"'env_id', 'players.env_id'); got keys {sorted(map(str, action))}"
            )
        want = self._all_ids if env_id is None else np.asarray(env_id).reshape(-1)
        if players is not None and not np.array_equal(np.asarray(players).reshape(-1), want):
            raise ValueError(
                f"{self.spec.task_id}: players.env_id {np.asarray(players).tolist()} must equal env_id "
                f"{want.tolist()} (single-player envs: one player per env)"
            )
        return rest["action"], env_id

    def _cast(self, action: Any, count: int) -> Any:
        """EnvPool's leniency kept where it is exact: integral floats and bools for integer spaces, one env's
        unbatched action; anything else goes to aioenv's check as it is."""
        space = self.action_space
        if isinstance(action, dict | tuple) and isinstance(space, gymnasium.spaces.Dict | gymnasium.spaces.Tuple):
            return action
        arr = np.asarray(action)
        if isinstance(space, _INTEGER_SPACES) and (
            arr.dtype.kind == "b" or (arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all())
        ):
            arr = arr.astype(space.dtype)
        if arr.ndim == 0 or (count == 1 and space.shape and arr.shape == tuple(space.shape)):
            arr = arr.reshape(1, *arr.shape)
        return arr

    def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``fn(*args)`` with the task id added to the message of an ``InvalidAction`` or a ``UsageError``
        (raised before anything was sent)."""
        try:
            return fn(*args, **kwargs)
        except (InvalidAction, UsageError) as err:
            raise type(err)(f"{self.spec.task_id}: {err.message}", env_id=err.env_id) from err

    def _sent(self, ids: np.ndarray, *, resetting: bool) -> None:
        self._resetting[ids] = resetting
        self._order[ids] = self._sends + np.arange(ids.size)
        self._sends += ids.size
        self._outstanding += ids.size

    def _finish(self, out: tuple[Any, ...]) -> Rows:
        """EnvPool's row bookkeeping: ``elapsed_step`` (0 on a reset row, or the env's own count), ``players``,
        float32 reward, and for envs with fixed info keys exactly those, in EnvPool's order."""
        obs, rew, term, trunc, info = out
        ids = np.asarray(info["env_id"], dtype=np.int32)
        fresh = self._resetting[ids] | self._ended[ids]
        self._elapsed[ids] = np.where(fresh, 0, self._elapsed[ids] + 1)
        self._resetting[ids] = False
        term, trunc = np.asarray(term, dtype=np.bool_), np.asarray(trunc, dtype=np.bool_)
        self._ended[ids] = term | trunc
        self._first_rows = fresh
        self._discounts = np.asarray(info["discount"], np.float32) if self.spec.env_discounts else None
        keys = self.spec.info_keys
        rest = {k: info[k] for k in (info if keys is None else keys) if k in info and k != "env_id"}
        if self.spec.env_counts_steps and "elapsed_step" in info:
            self._elapsed[ids] = np.asarray(info["elapsed_step"], dtype=np.int32)
        rest.pop("elapsed_step", None)
        info = {"env_id": ids, "players": {"env_id": ids.copy()}, **rest, "elapsed_step": self._elapsed[ids].copy()}
        return obs, np.asarray(rew, dtype=np.float32), term, trunc, info

    def _take(self, n: int) -> tuple[Any, ...]:
        try:
            out: tuple[Any, ...] = self._pool.recv(min_results=n, max_results=n)
        except _ROW_FAILURES:
            self._outstanding -= 1
            raise
        self._outstanding -= len(out[4]["env_id"])
        return out

    def _recv_rows(self) -> Rows:
        """The next rows of what was sent: ``batch_size`` rows in async mode; in sync mode all of them, in the
        order sent (none sent: an empty batch, as EnvPool)."""
        n = self._outstanding
        if self.is_async:
            if n < self.batch_size:
                raise UsageError(
                    f"{self.spec.task_id}: recv() returns batch_size={self.batch_size} rows, but only {n} "
                    "requests are in flight (EnvPool would wait forever): send() to more envs first"
                )
            return self._finish(self._take(self.batch_size))
        if n == 0:
            return self._finish(self._pool.recv(min_results=0, max_results=1, timeout=0))
        out = self._take(n)
        order = self._order[np.asarray(out[4]["env_id"])]
        if order.size > 1 and not bool(np.all(order[1:] > order[:-1])):
            out = _take_rows(out, np.argsort(order, kind="stable"), order.size)
        return self._finish(out)

    def _ids(self, env_id: Any) -> np.ndarray:
        return self._all_ids if env_id is None else np.asarray(env_id).reshape(-1)

    def _step_rows(self, action: Any, env_id: Any) -> Rows:
        if self.is_async or self._outstanding:
            self.send(action, env_id)
            return self._recv_rows()
        action, env_id = self._split_dict(action, env_id)
        ids = self._ids(env_id)  # sync mode, nothing in flight: one step call, rows in env_id order
        return self._finish(self._call(self._pool.step, self._cast(action, ids.size), env_id))

    def _reset_rows(self, env_id: Any) -> Rows:
        ids = self._ids(env_id)
        if self.is_async or self._outstanding:
            self._call(self._pool.send_reset, env_id, options=self.spec.reset_options)
            self._sent(ids, resetting=True)
            return self._recv_rows()
        obs, info = self._call(self._pool.reset, env_id, options=self.spec.reset_options)
        self._resetting[ids] = True
        n = len(info["env_id"])
        return self._finish((obs, np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_), info))

    def _to(self, rows: Rows, reset: bool) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------ EnvPool API

    def send(self, action: Any, env_id: Any = None) -> None:
        """Dispatch one step for each env in ``env_id`` (all when None) and return at once.

        ``action``: one row per env, ``(len(env_id), *action_space.shape)``, or EnvPool's dict
        ``{"action": ..., "env_id": ..., "players.env_id": ...}``. Checked before anything is sent.

        Raises:
            InvalidAction: an action that does not fit the space or the env count (task, env, space, value).
            UsageError: an unknown or repeated env id, or an env whose last request is still in flight or unread.
        """
        action, env_id = self._split_dict(action, env_id)
        ids = self._ids(env_id)
        self._call(self._pool.send, self._cast(action, ids.size), env_id)
        self._sent(ids, resetting=False)

    def recv(self, reset: bool = False, return_info: bool = True) -> Any:
        """The next rows of ``send``/``async_reset``: the first ``batch_size`` to finish (async mode), or every env
        sent, in the order sent (sync mode). ``reset=True``: the gymnasium pool returns ``(obs, info)``.

        Raises:
            UsageError: async mode with fewer than ``batch_size`` requests in flight (EnvPool would hang).
        """
        return self._to(self._recv_rows(), reset)

    def async_reset(self) -> None:
        """Dispatch a reset of every env; their first rows come through :meth:`recv` (reward 0)."""
        self._call(self._pool.send_reset, None, options=self.spec.reset_options)
        self._sent(self._all_ids, resetting=True)

    def step(self, action: Any, env_id: Any = None) -> Any:
        """EnvPool's ``step``: ``send(action, env_id)`` then ``recv()``. In sync mode that is exactly the envs of
        ``env_id`` (all when None), in that order; in async mode the first ``batch_size`` rows to finish."""
        return self._to(self._step_rows(action, env_id), False)

    def render(self, env_ids: Any = None, camera_id: int | None = None) -> np.ndarray:
        """RGB frames ``(B, H, W, 3)`` of ``env_ids`` (default ``render_env_id``); needs ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            raise RuntimeError(f"{self.spec.task_id}: make the pool with render_mode='rgb_array' to render it")
        if camera_id is not None:
            raise ValueError(f"{self.spec.task_id}: camera_id is not supported; pass the env's own camera option")
        ids = np.asarray(self.spec.render_env_id if env_ids is None else env_ids).reshape(-1)
        return np.asarray(self._pool.render(ids))

    def close(self, **kwargs: Any) -> None:
        """Close the envs and stop the workers. Idempotent; keyword arguments are accepted and ignored."""
        if not self.closed:
            self.closed = True
            self._pool.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GymnasiumEnvPool(EnvPool, gymnasium.vector.VectorEnv[Any, Any, Any], gymnasium.Env[Any, Any]):  # type: ignore[misc]
    """EnvPool's gymnasium pool (``env_type="gymnasium"`` or ``"gym"``), a ``gymnasium.vector.VectorEnv`` and, as
    EnvPool's, a ``gymnasium.Env`` too (so ``gymnasium.Wrapper`` takes it).

    ``step``/``recv`` return ``(obs, rew, term, trunc, info)``: obs ``(B, *obs_shape)``, rew ``(B,)`` float32,
    term/trunc ``(B,)`` bool, ``info["env_id"]``/``info["elapsed_step"]`` ``(B,)`` int32,
    ``info["players"]["env_id"]``; ``reset`` returns ``(obs, info)``. ``observation_space``/``action_space``
    are one env's, as EnvPool's (``single_*`` are the same).
    """

    is_vector_env = True

    def __init__(self, spec: EnvSpec, *, step_timeout: float | None = None) -> None:
        super().__init__(spec, step_timeout=step_timeout)
        self.single_observation_space = self.observation_space
        self.single_action_space = self.action_space
        self.metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def _to(self, rows: Rows, reset: bool) -> Any:
        return (rows[0], rows[4]) if reset else rows

    def reset(
        self, env_id: Any = None, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs in ``env_id`` (all when None) and ``recv``: ``(obs, info)``, obs ``(B, *obs_shape)``.

        In sync mode the rows are exactly ``env_id``'s, in that order; in async mode the first ``batch_size``
        rows to finish (EnvPool's ``reset`` is ``send`` + ``recv`` too). As EnvPool's gymnasium API: ``seed`` is
        ignored with a warning (seeds are fixed by ``make``); ``options={"reset_mask": mask}`` picks the envs.
        """
        if seed is not None:
            warnings.warn(
                "EnvPool seeds are fixed when the environment is created. reset(seed=...) is ignored; "
                "pass seed to envpool.make instead.",
                stacklevel=2,
            )
        masked = self._masked_ids(options)
        if masked is not None:
            if env_id is not None:
                raise ValueError("Pass either env_id or options['reset_mask'], not both.")
            env_id = masked
        rows = self._reset_rows(env_id)
        return rows[0], rows[4]

    def _masked_ids(self, options: dict[str, Any] | None) -> np.ndarray | None:
        if options is None:
            return None
        unknown = set(options) - {"reset_mask"}
        if unknown:
            raise ValueError(f"Unsupported Gymnasium reset options for EnvPool: {sorted(unknown)}")
        if options.get("reset_mask") is None:
            return None
        mask = np.asarray(options["reset_mask"], dtype=np.bool_)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {mask.shape}")
        if not mask.any():
            raise ValueError("reset_mask must select at least one environment.")
        return np.flatnonzero(mask).astype(np.int32)

    def render(self, env_ids: Any = None, camera_id: int | None = None) -> np.ndarray:  # type: ignore[override]
        """See :meth:`EnvPool.render`."""
        return super().render(env_ids, camera_id)

    def close(self, **kwargs: Any) -> None:
        """See :meth:`EnvPool.close`."""
        super().close(**kwargs)


class DMEnvPool(EnvPool):
    """EnvPool's dm_env pool (``env_type="dm"``; needs ``pip install "aioenv[dm]"``); a virtual subclass of
    ``dm_env.Environment``.

    ``step``/``recv``/``reset`` return one batched ``dm_env.TimeStep``: ``step_type`` ``(B,)`` int32 (0 FIRST,
    1 MID, 2 LAST), ``reward`` ``(B,)`` float32, ``discount`` ``(B,)`` float32 (0 on LAST), ``observation`` a
    ``State`` namedtuple ``(env_id (B,) int32, players(env_id), obs (B, *obs_shape))``; a ``Dict`` observation
    space gives one field per key instead of ``obs``. The env's own info keys are not part of it.
    """

    def __init__(self, spec: EnvSpec, *, step_timeout: float | None = None) -> None:
        envpool_dm.import_dm_env().Environment.register(DMEnvPool)
        super().__init__(spec, step_timeout=step_timeout)

    def _to(self, rows: Rows, reset: bool) -> Any:
        keys = self.spec.info_keys or ()
        return envpool_dm.timestep(
            self.observation_space, rows, info_keys=keys, first=self._first_rows, discount=self._discounts
        )

    def reset(self, env_id: Any = None) -> Any:
        """Reset the envs in ``env_id`` (all when None) and ``recv``: a TimeStep of FIRST rows (see :meth:`step`)."""
        return self._to(self._reset_rows(env_id), True)

    def observation_spec(self) -> Any:
        """dm_env specs of ``TimeStep.observation``: ``State(env_id, players(env_id), obs)``."""
        return envpool_dm.observation_spec(self.observation_space, self.spec.dm_info_specs())

    def action_spec(self) -> Any:
        """dm_env spec of one env's action (``DiscreteArray`` for ``Discrete(n)``, ``BoundedArray`` for ``Box``)."""
        return envpool_dm.space_spec(self.action_space, "action")

    def reward_spec(self) -> Any:
        """dm_env's default reward spec: a float64 scalar ``Array`` named ``reward``."""
        return envpool_dm.reward_spec()

    def discount_spec(self) -> Any:
        """dm_env's default discount spec: a float64 scalar in [0, 1] named ``discount``."""
        return envpool_dm.discount_spec()

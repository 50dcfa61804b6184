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

What matches EnvPool: ``make``/``make_gymnasium``/``make_spec``; ``send(action, env_id)``,
``recv()`` (the first ``batch_size`` envs to finish), ``async_reset()``, ``step(action, env_id)``,
``reset(env_id)``; ``info["env_id"]`` (int32), ``info["players"]["env_id"]`` and
``info["elapsed_step"]``; single-env ``observation_space``/``action_space``; ``config`` and
``spec.config``; the seed rule (an int gives env ``i`` the seed ``seed + i``; a list gives one
per env); next-step autoreset (the step after an episode ended resets that env, ignores its
action and returns its first obs with reward 0); float32 rewards.

What differs: any gymnasium id (or ``"pkg.module:factory"``) works, envs run in worker
processes rather than C++ threads (``num_threads`` sets the number of worker processes);
``step``/``reset`` return exactly the envs asked for, in ``env_id`` order (EnvPool's ``reset``
in async mode returns ``batch_size`` rows); keyword arguments that are not EnvPool options
are passed to ``gymnasium.make``; extra env info keys are batched as gymnasium's vector envs do.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from aioenv.sync import SyncPool

__all__ = ["EnvPool", "EnvSpec", "make", "make_gymnasium", "make_spec"]

#: EnvPool options this adapter understands (anything else is an env keyword argument).
_OPTIONS = (
    "num_envs",
    "batch_size",
    "num_threads",
    "max_num_players",
    "thread_affinity_offset",
    "base_path",
    "seed",
    "gym_reset_return_info",
    "max_episode_steps",
)


class EnvSpec:
    """What ``envpool.make_spec`` returns: the task's single-env spaces and its ``config`` dict.

    Attributes:
        task_id: the gymnasium id (or ``"pkg.module:factory"``).
        config: EnvPool-style configuration (``num_envs``, ``batch_size``, ``seed``, ``max_episode_steps``,
            ..., plus the env keyword arguments under ``env_kwargs``).
        observation_space / action_space: one env's spaces (made once, locally, to read them).
    """

    def __init__(self, task_id: str, config: dict[str, Any]) -> None:
        self.task_id = task_id
        self.config = config
        self._spaces: tuple[gymnasium.Space[Any], gymnasium.Space[Any]] | None = None

    def _read_spaces(self) -> tuple[gymnasium.Space[Any], gymnasium.Space[Any]]:
        if self._spaces is None:
            env = _make_local(self.task_id, self.config)
            try:
                self._spaces = (env.observation_space, env.action_space)
            finally:
                env.close()
        return self._spaces

    @property
    def observation_space(self) -> gymnasium.Space[Any]:
        """One env's observation space."""
        return self._read_spaces()[0]

    @property
    def action_space(self) -> gymnasium.Space[Any]:
        """One env's action space."""
        return self._read_spaces()[1]

    @property
    def gymnasium_observation_space(self) -> gymnasium.Space[Any]:
        """Alias of :attr:`observation_space` (EnvPool's name)."""
        return self.observation_space

    @property
    def gymnasium_action_space(self) -> gymnasium.Space[Any]:
        """Alias of :attr:`action_space` (EnvPool's name)."""
        return self.action_space

    def __repr__(self) -> str:
        return f"EnvSpec({self.task_id!r}, config={self.config!r})"


def _env_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    kwargs = dict(config.get("env_kwargs") or {})
    if config.get("max_episode_steps") is not None:
        kwargs["max_episode_steps"] = int(config["max_episode_steps"])
    return kwargs


def _make_local(task_id: str, config: dict[str, Any]) -> Any:
    """One env made in this process, the way the workers make it (to read its spaces)."""
    kwargs = _env_kwargs(config)
    module, _, attr = task_id.partition(":")
    if attr.isidentifier():  # "pkg.module:factory"
        import importlib

        return getattr(importlib.import_module(module), attr)(**kwargs)
    return gymnasium.make(task_id, **kwargs)


def make_spec(task_id: str, **kwargs: Any) -> EnvSpec:
    """EnvPool's ``make_spec``: the spec (spaces and ``config``) of ``task_id`` with these options."""
    num_envs = int(kwargs.pop("num_envs", 1))
    batch_size = kwargs.pop("batch_size", None)
    batch_size = num_envs if batch_size in (None, 0) else int(batch_size)
    seed = kwargs.pop("seed", 42)
    max_num_players = int(kwargs.pop("max_num_players", 1))
    if max_num_players != 1:
        raise ValueError("aioenv.compat.envpool supports single-player envs only (max_num_players=1)")
    num_threads = kwargs.pop("num_threads", None)
    config: dict[str, Any] = {
        "num_envs": num_envs,
        "batch_size": batch_size,
        "num_threads": int(num_threads) if num_threads else min(num_envs, os.cpu_count() or 1),
        "max_num_players": 1,
        "thread_affinity_offset": kwargs.pop("thread_affinity_offset", -1),
        "base_path": kwargs.pop("base_path", ""),
        "seed": seed,
        "gym_reset_return_info": bool(kwargs.pop("gym_reset_return_info", True)),
        "max_episode_steps": kwargs.pop("max_episode_steps", None),
        "env_kwargs": kwargs,
    }
    return EnvSpec(task_id, config)


def make(
    task_id: str,
    env_type: str = "gymnasium",
    num_envs: int = 1,
    batch_size: int | None = None,
    seed: int | Sequence[int] = 42,
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> EnvPool:
    """EnvPool's ``make``: a pool of ``num_envs`` copies of ``task_id`` with EnvPool's Python interface.

    Args:
        task_id: a gymnasium id (``"CartPole-v1"``) or ``"pkg.module:factory"``.
        env_type: ``"gymnasium"`` (the only API offered; ``"gym"`` and ``"dm"`` are refused).
        num_envs: how many envs.
        batch_size: rows :meth:`EnvPool.recv` returns (default ``num_envs``: synchronous mode).
        seed: an int gives env ``i`` the seed ``seed + i``; a sequence gives one seed per env.
        max_episode_steps: time limit (passed to ``gymnasium.make``).
        **kwargs: ``num_threads`` (worker processes), EnvPool options accepted for compatibility
            (``thread_affinity_offset``, ``base_path``, ``gym_reset_return_info``, ``max_num_players=1``),
            ``step_timeout`` (an aioenv option); anything else goes to ``gymnasium.make``.
    """
    if env_type != "gymnasium":
        raise ValueError(f"aioenv.compat.envpool offers env_type='gymnasium' only, got {env_type!r}")
    step_timeout = kwargs.pop("step_timeout", None)
    spec = make_spec(
        task_id, num_envs=num_envs, batch_size=batch_size, seed=seed, max_episode_steps=max_episode_steps, **kwargs
    )
    return EnvPool(spec, step_timeout=step_timeout)


def make_gymnasium(task_id: str, **kwargs: Any) -> EnvPool:
    """EnvPool's ``make_gymnasium``: ``make(task_id, env_type="gymnasium", **kwargs)``."""
    return make(task_id, env_type="gymnasium", **kwargs)


class EnvPool:
    """An EnvPool-style vectorized env (gymnasium API) backed by :class:`aioenv.SyncPool`.

    Made by :func:`make`. Rows are named by ``info["env_id"]``; ``send``/``recv`` give the first
    ``batch_size`` envs to finish; ``step``/``reset`` are ``send`` + wait for exactly those envs.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, spec: EnvSpec, *, step_timeout: float | None = None) -> None:
        config = spec.config
        self.spec = spec
        self.num_envs: int = int(config["num_envs"])
        self.batch_size: int = int(config["batch_size"])
        seed = config["seed"]
        seeds: Any = seed if isinstance(seed, (int, np.integer)) or seed is None else [int(s) for s in seed]
        self._pool = SyncPool(
            spec.task_id,
            self.num_envs,
            batch_size=self.batch_size,
            num_workers=int(config["num_threads"]),
            autoreset_mode="next_step",
            seed=seeds,
            env_kwargs=_env_kwargs(config) or None,
            step_timeout=step_timeout,
        )
        self.observation_space: gymnasium.Space[Any] = self._pool.single_observation_space
        self.action_space: gymnasium.Space[Any] = self._pool.single_action_space
        spec._spaces = (self.observation_space, self.action_space)
        self.render_mode: str | None = getattr(self._pool, "render_mode", None)
        self._elapsed = np.zeros(self.num_envs, dtype=np.int32)
        self._ended = np.zeros(self.num_envs, dtype=np.bool_)  # the env's last row ended an episode
        self._resetting = np.zeros(self.num_envs, dtype=np.bool_)  # the env's request in flight is a reset
        self.closed = False

    # ------------------------------------------------------------ EnvPool attributes

    @property
    def config(self) -> dict[str, Any]:
        """EnvPool's config dict (a copy)."""
        return dict(self.spec.config)

    @property
    def single_observation_space(self) -> gymnasium.Space[Any]:
        """Same as :attr:`observation_space` (EnvPool exposes single-env spaces)."""
        return self.observation_space

    @property
    def single_action_space(self) -> gymnasium.Space[Any]:
        """Same as :attr:`action_space`."""
        return self.action_space

    @property
    def all_env_ids(self) -> np.ndarray:
        """``np.arange(num_envs)`` as int32."""
        return np.arange(self.num_envs, dtype=np.int32)

    @property
    def is_async(self) -> bool:
        """True when ``batch_size < num_envs``."""
        return self.batch_size != self.num_envs

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        config = ", ".join(f"{k}={v!r}" for k, v in self.spec.config.items())
        return f"aioenv.compat.envpool.EnvPool({self.spec.task_id!r}, {config})"

    def seed(self, seed: int | list[int] | None = None) -> None:
        """Abandoned in EnvPool: seeds are fixed by ``make(..., seed=)``. Warns and does nothing."""
        warnings.warn(
            "The `seed` function in envpool is abandoned. You can set seed by envpool.make(..., seed=seed) instead.",
            stacklevel=2,
        )

    # ------------------------------------------------------------ helpers

    def _ids(self, env_id: Any) -> np.ndarray:
        if env_id is None:
            return self.all_env_ids
        return np.asarray(env_id, dtype=np.int32).reshape(-1)

    def _actions(self, action: Any, ids: np.ndarray) -> Any:
        if isinstance(action, dict):
            return action
        arr = np.asarray(action)
        space = self.action_space
        if isinstance(space, gymnasium.spaces.Box | gymnasium.spaces.Discrete | gymnasium.spaces.MultiDiscrete):
            dtype = space.dtype
            if dtype is not None and arr.dtype != dtype and np.can_cast(arr.dtype, dtype, "same_kind"):
                arr = arr.astype(dtype)
        if arr.ndim == 0 or (ids.size == 1 and arr.shape == tuple(space.shape or ())):
            arr = arr.reshape(1, *arr.shape)
        return arr

    def _finish(self, out: tuple[Any, ...]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """EnvPool's row bookkeeping: ``elapsed_step``, ``players``, float32 reward."""
        obs, rew, term, trunc, info = out
        ids = np.asarray(info["env_id"], dtype=np.int32)
        fresh = self._resetting[ids] | self._ended[ids]
        self._elapsed[ids] = np.where(fresh, 0, self._elapsed[ids] + 1)
        self._resetting[ids] = False
        self._ended[ids] = np.asarray(term, dtype=np.bool_) | np.asarray(trunc, dtype=np.bool_)
        info = dict(info)
        info["env_id"] = ids
        info["players"] = {"env_id": ids.copy()}
        info["elapsed_step"] = self._elapsed[ids].copy()
        return obs, np.asarray(rew, dtype=np.float32), np.asarray(term), np.asarray(trunc), info

    # ------------------------------------------------------------ EnvPool API

    def send(self, action: Any, env_id: Any = None) -> None:
        """Dispatch one step for each env in ``env_id`` (all when None); returns at once."""
        ids = self._ids(env_id)
        self._pool.send(self._actions(action, ids), ids)
        self._resetting[ids] = False

    def recv(
        self, reset: bool = False, return_info: bool = True
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]] | tuple[Any, dict[str, Any]]:
        """The first ``batch_size`` results of ``send``/``async_reset``: ``(obs, rew, term, trunc, info)``.

        ``reset=True`` returns ``(obs, info)`` (as EnvPool's ``reset`` does internally).
        """
        out = self._finish(self._pool.recv())
        if reset:
            return out[0], out[4]
        return out

    def async_reset(self) -> None:
        """Dispatch a reset of every env; the first obs come through :meth:`recv` (reward 0)."""
        ids = self.all_env_ids
        self._pool.send_reset(ids)
        self._resetting[ids] = True

    def step(self, action: Any, env_id: Any = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the envs in ``env_id`` (all when None) and wait for all of them; rows in ``env_id`` order."""
        ids = self._ids(env_id)
        out = self._pool.step(self._actions(action, ids), ids)
        self._resetting[ids] = False
        return self._finish(out)

    def reset(
        self, env_id: Any = None, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs in ``env_id`` (all when None) and wait: ``(obs, info)``, rows in ``env_id`` order.

        As EnvPool's gymnasium API: ``seed`` is ignored with a warning (seeds are fixed by ``make``);
        ``options={"reset_mask": mask}`` selects the envs to reset.
        """
        if seed is not None:
            warnings.warn(
                "EnvPool seeds are fixed when the environment is created. reset(seed=...) is ignored; "
                "pass seed to envpool.make instead.",
                stacklevel=2,
            )
        if options is not None:
            unknown = set(options) - {"reset_mask"}
            if unknown:
                raise ValueError(f"Unsupported Gymnasium reset options for EnvPool: {sorted(unknown)}")
            mask = options.get("reset_mask")
            if mask is not None:
                if env_id is not None:
                    raise ValueError("Pass either env_id or options['reset_mask'], not both.")
                mask = np.asarray(mask, dtype=np.bool_)
                if mask.shape != (self.num_envs,) or not mask.any():
                    raise ValueError(f"reset_mask must have shape ({self.num_envs},) and select at least one env")
                env_id = np.flatnonzero(mask).astype(np.int32)
        ids = self._ids(env_id)
        self._resetting[ids] = True
        obs, info = self._pool.reset(ids)
        out = self._finish((obs, np.zeros(ids.size), np.zeros(ids.size, bool), np.zeros(ids.size, bool), info))
        return out[0], out[4]

    def render(self, env_ids: Any = None) -> np.ndarray:
        """RGB frames ``(B, H, W, 3)`` of ``env_ids`` (default: env 0), made with ``render_mode="rgb_array"``."""
        ids = np.asarray([0] if env_ids is None else env_ids, dtype=np.int32).reshape(-1)
        return np.asarray(self._pool.render(ids))

    def close(self) -> None:
        """Close the envs and stop the workers. Idempotent."""
        if not self.closed:
            self.closed = True
            self._pool.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

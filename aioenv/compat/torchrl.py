"""``AioEnv``: a TorchRL environment (``torchrl.envs.EnvBase``) over an aioenv pool.

Construct it with the arguments of :class:`aioenv.Pool` (and TorchRL's ``device``)::

    from aioenv.compat.torchrl import AioEnv
    from torchrl.envs import StepCounter, TransformedEnv
    from torchrl.collectors import Collector

    env = TransformedEnv(AioEnv("CartPole-v1", 32, seed=0), StepCounter())
    collector = Collector(env, policy, frames_per_batch=32 * 16, total_frames=32 * 16 * 200)

One ``AioEnv`` is a batched env of ``batch_size == (num_envs,)`` (in the place of a ``SerialEnv`` or
``ParallelEnv`` of ``GymEnv``\\ s); without ``num_envs`` (``AioEnv("Pendulum-v1")``) it is one env, unbatched
(``batch_size == ()``), in the place of one ``GymEnv``. Its specs are made from the env's gymnasium spaces as
``GymEnv`` makes them (:mod:`aioenv.compat.torchrl_specs` has the table). A step is one batched call to the
pool, whose envs run wherever ``executor`` puts them (``"auto"``: in this process, in worker processes, or both).

TorchRL resets envs itself, after they are done, with a ``"_reset"`` mask: so the pool runs with
``autoreset_mode="disabled"``, and a reset (full or partial) resets exactly the envs of the mask, in one
call; the other rows of its result carry those envs' last observation (TorchRL keeps its own values there).
A ``"_step"`` mask (partial steps, as ``rollout(break_when_all_done=True)`` sends) steps only those envs;
the other rows carry their env's last observation and done flags and a reward of 0. An env that is done and
is stepped without a reset (TorchRL's collectors do it after ``rollout(break_when_any_done=True)`` on their
env) is left as it is: its row is done again, with its last observation and a reward of 0, and TorchRL then
resets it.

Seeds: ``seed=`` (int: env ``i`` gets ``seed + i``; or one per env) and ``env.set_seed(s)`` apply at each
env's next reset, so ``env.set_seed(0); env.reset()`` starts the episodes that
``gymnasium.vector.SyncVectorEnv.reset(seed=0)`` starts. ``env.reset(seed=s)`` and
``env.reset(options={...})`` pass through to the envs reset.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from aioenv.compat.torchrl_specs import NestedKey, SpaceMap, nested
from aioenv.errors import UsageError
from aioenv.pool import Pool
from aioenv.pool_options import SEED_LIMIT
from aioenv.sync import SyncPool
from aioenv.wire.options import is_int

__all__ = ["AioEnv"]

_DONE_KEYS = ("done", "terminated", "truncated")


def _seed_list(seed: Any, num_envs: int, where: str) -> list[int | None]:
    """One seed (or None) per env from ``seed``: None, an int (env ``i``: ``seed + i``) or one per env.

    Raises:
        UsageError: a seed that is not None or an int in ``[0, 2**64)`` (after adding ``i``), or a sequence of
            the wrong length.
    """
    if seed is None:
        return [None] * num_envs
    if is_int(seed):
        seeds: list[Any] = [int(seed) + i for i in range(num_envs)]
    elif isinstance(seed, Sequence) and not isinstance(seed, str | bytes):
        seeds = list(seed)
        if len(seeds) != num_envs:
            raise UsageError(f"{where}: {len(seeds)} seeds for {num_envs} envs; give one per env, or an int")
    else:
        raise UsageError(f"{where}: a seed is None, an int, or one int (or None) per env; got {seed!r}")
    for env_id, value in enumerate(seeds):
        if value is not None and not (is_int(value) and 0 <= int(value) < SEED_LIMIT):
            raise UsageError(f"{where}: seed {value!r} for env {env_id} is not an int in [0, 2**64)", env_id=env_id)
    return [None if value is None else int(value) for value in seeds]


#: ``AioEnv``'s own keyword arguments (the rest go to the pool).
_OWN_OPTIONS = ("categorical_action_encoding", "device", "run_type_checks", "allow_done_after_reset")


def _pool_option_names() -> list[str]:
    """The keyword options :class:`aioenv.Pool` takes (``seed``, ``executor``, ...)."""
    params = inspect.signature(Pool.__init__).parameters.values()
    return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def _check_options(env: Any, num_envs: int | None, pool_options: dict[str, Any]) -> Any:
    """Check ``pool_options`` before anything starts; pop and return the ``batch_size`` given (None if none).

    Raises:
        TypeError: an option neither ``AioEnv`` nor :class:`aioenv.Pool` takes (the nearest names suggested).
        UsageError: ``autoreset_mode`` other than ``"disabled"``, or ``batch_size`` other than ``num_envs``.
    """
    known = _pool_option_names()
    for name in pool_options:
        if name not in known:
            near = difflib.get_close_matches(name, [*known, *_OWN_OPTIONS], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(
                f"AioEnv() got an unexpected keyword argument {name!r}{hint}: it takes {', '.join(_OWN_OPTIONS)} "
                f"and aioenv.Pool's options ({', '.join(known)})"
            )
    autoreset = pool_options.pop("autoreset_mode", "disabled")
    if str(getattr(autoreset, "value", autoreset)).lower() not in ("disabled", "autoresetmode.disabled"):
        raise UsageError(
            f"AioEnv runs its pool with autoreset_mode='disabled' (TorchRL resets done envs itself, with a "
            f"'_reset' mask); got autoreset_mode={autoreset!r}"
        )
    pool_batch = pool_options.pop("batch_size", None)
    known_n = num_envs if num_envs is not None else (len(env) if isinstance(env, list | tuple) else None)
    if known_n is not None:
        _check_batch(pool_batch, known_n)
    return pool_batch


def _check_batch(pool_batch: Any, n: int) -> None:
    """Raise ``UsageError`` unless ``pool_batch`` is None, ``n`` or ``(n,)``."""
    if pool_batch is not None and pool_batch not in (n, (n,)):
        raise UsageError(
            f"AioEnv's batch_size is (num_envs,) = ({n},); got batch_size={pool_batch!r} (a pool's recv batch "
            f"size has no meaning here: every step is one batched call)"
        )


def _checked_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None).

    Raises:
        ValueError: ``device`` names no torch device (``"gpu"``).
    """
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"AioEnv(device={device!r}): not a torch device ({exc})") from None


class AioEnv(EnvBase):  # type: ignore[misc]  # torchrl ships no type information: EnvBase is Any to mypy
    """A batched TorchRL env (``batch_size == (num_envs,)``) whose envs an aioenv pool runs.

    Args:
        env: what :class:`aioenv.Pool` takes: a gymnasium id, ``"pkg.module:factory"``, a callable or a list
            of callables.
        num_envs: the number of envs (B); may be omitted with a list of callables (B is their number). Omitted
            with a gymnasium id, a ``"pkg.module:factory"`` string or one callable: one env, unbatched
            (``batch_size == ()``, no B in the shapes below), as ``GymEnv``.
        categorical_action_encoding: ``Discrete``/``MultiDiscrete`` spaces (actions and observations) as
            indices (``Categorical``, ``(B,)``) instead of one-hot (``OneHot``, ``(B, n)``), as ``GymEnv``'s
            option of that name.
        device: TorchRL's env device: where the tensors it returns live (None: CPU tensors, no device).
        run_type_checks: ``EnvBase``'s option of that name.
        allow_done_after_reset: ``EnvBase``'s option of that name.
        **pool_options: :class:`aioenv.Pool`'s options (``seed``, ``executor``, ``num_workers``,
            ``env_kwargs``, ``step_timeout``, ``endpoint``, ...). ``autoreset_mode`` can only be
            ``"disabled"`` (TorchRL resets envs itself) and ``batch_size`` only ``num_envs``.

    TensorDict entries (B = ``num_envs``): ``"observation"`` ``(B, *obs_shape)`` (a ``Dict`` observation
    space: one entry per key instead), ``"action"`` ``(B, n)`` int64 one-hot for ``Discrete(n)`` (``(B,)``
    with ``categorical_action_encoding=True``; ``(B, *shape)`` for ``Box``), ``"reward"`` ``(B, 1)`` float32,
    ``"done"``/``"terminated"``/``"truncated"`` ``(B, 1)`` bool. Infos are not carried.

    Raises:
        UsageError: a pool option ``AioEnv`` cannot honour, or a bad seed (before anything starts).
        TypeError: an unknown keyword argument (before anything starts), or an observation or action space
            without a TorchRL spec (Tuple, Text, Graph, ...; the pool is closed again).
        ValueError: a ``device`` that is no torch device, or what :class:`aioenv.Pool` refuses (``num_envs``,
            ``executor``, ...).
    """

    def __init__(
        self,
        env: Any,
        num_envs: int | None = None,
        *,
        categorical_action_encoding: bool = False,
        device: torch.device | str | int | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        **pool_options: Any,
    ) -> None:
        pool_batch = _check_options(env, num_envs, pool_options)
        torch_device = _checked_device(device)
        if not isinstance(categorical_action_encoding, bool | np.bool_):
            raise TypeError(f"AioEnv: categorical_action_encoding is a bool, got {categorical_action_encoding!r}")
        seed = pool_options.get("seed")
        # one env, unbatched, as GymEnv; the pool has one env and the rows are squeezed on the way out
        self._unbatched = num_envs is None and (isinstance(env, str) or callable(env))
        pool = SyncPool(env, 1 if self._unbatched else num_envs, autoreset_mode="disabled", **pool_options)
        try:
            n = pool.num_envs
            _check_batch(pool_batch, n)
            super().__init__(
                device=torch_device,
                batch_size=torch.Size([] if self._unbatched else [n]),
                run_type_checks=run_type_checks,
                allow_done_after_reset=allow_done_after_reset,
            )
            # the seed each env resets with next (None: no seed), from seed=, set_seed() or reset(seed=)
            self._seeds: list[int | None] = _seed_list(seed, n, "AioEnv(seed=...)")
            self._pool = pool
            self._num_envs = n
            self._obs_map = SpaceMap.build(
                pool.single_observation_space, "observation", categorical=categorical_action_encoding
            )
            self._act_map = SpaceMap.build(
                pool.single_action_space, "action", categorical=categorical_action_encoding, role="action"
            )
            self._make_specs()
            # each env's last observation (for rows a partial call leaves alone) and (terminated, truncated)
            self._last: dict[NestedKey, torch.Tensor] = {
                leaf.key: leaf.spec.zero((n,)).cpu() for leaf in self._obs_map.leaves
            }
            self._ended = torch.zeros(n, 2, dtype=torch.bool)
        except BaseException:
            pool.close()
            raise
        self.is_closed = False

    def _make_specs(self) -> None:
        device = self.device
        batch = tuple(self.batch_size)
        self.full_observation_spec = self._obs_map.composite(batch, device)
        self.full_action_spec = self._act_map.composite(batch, device)
        self.full_reward_spec = Composite(
            reward=Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device), shape=batch, device=device
        )
        self.full_done_spec = Composite(
            {key: Categorical(2, shape=(*batch, 1), dtype=torch.bool, device=device) for key in _DONE_KEYS},
            shape=batch,
            device=device,
        )

    # ------------------------------------------------------------------ public

    @property
    def num_envs(self) -> int:
        """The number of envs (B); ``batch_size == (num_envs,)``, or ``()`` for one env made unbatched."""
        return self._num_envs

    @property
    def pool(self) -> SyncPool:
        """The :class:`aioenv.SyncPool` running the envs (``autoreset_mode="disabled"``), for ``call``,
        ``get_attr``, ``render`` and ``describe_placement``-style questions. Stepping it behind the env's back
        desynchronises TorchRL's view of the episodes."""
        return self._pool

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the pool (its worker processes stop); idempotent."""
        self.is_closed = True
        pool = self.__dict__.get("_pool")
        if pool is not None:
            pool.close()

    def __enter__(self) -> AioEnv:
        """``with AioEnv(...) as env:`` closes the pool on the way out."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- EnvBase API

    def _set_seed(self, seed: int | None) -> None:
        """Env ``i`` resets with ``seed + i`` at its next reset (None: no seed)."""
        self._seeds = _seed_list(seed, self._num_envs, "AioEnv.set_seed")

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Reset the envs of ``tensordict["_reset"]`` (all without it) in one call to the pool.

        Keyword Args:
            seed: an int (env ``i`` gets ``seed + i``) or one per env; overrides ``set_seed``'s for those envs.
            options: a dict passed to every env's ``reset``.

        Returns:
            ``(B,)`` TensorDict: the observation entries and ``done``/``terminated``/``truncated`` ``(B, 1)``
            False. Rows not reset carry their env's last observation (TorchRL keeps its own values there).
        """
        seed = kwargs.pop("seed", None)
        options = kwargs.pop("options", None)
        if kwargs:
            raise TypeError(
                f"AioEnv.reset() got unexpected keyword arguments {sorted(kwargs)}: it takes seed=, options="
            )
        n = self._num_envs
        mask = self._mask(tensordict, "_reset")
        ids = None if mask is None else mask.nonzero()[:, 0]
        env_ids: list[int] = list(range(n)) if ids is None else ids.tolist()
        if seed is not None:
            given = _seed_list(seed, n, "AioEnv.reset(seed=...)")
            for i in env_ids:
                self._seeds[i] = given[i]
        if env_ids:
            seeds = [self._seeds[i] for i in env_ids]
            obs, _info = self._pool.reset(None if ids is None else env_ids, seed=seeds, options=options)
            for i in env_ids:
                self._seeds[i] = None
            entries = self._remember(self._obs_map.to_tensors(obs), ids)
        else:
            entries = {key: value.clone() for key, value in self._last.items()}
        if ids is None:
            self._ended.zero_()
        else:
            self._ended[ids] = False
        flags = torch.zeros(n, 1, dtype=torch.bool)
        for key in _DONE_KEYS:
            entries[(key,)] = flags if key == "done" else flags.clone()
        return self._out(entries)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Step the envs (those of ``tensordict["_step"]`` when given) with ``tensordict``'s actions.

        An env that is done (its episode ended and it was not reset since) is not stepped: its row says it is
        done again, and the step or reset that follows in TorchRL's loop (``step_and_maybe_reset``) resets it.
        TorchRL steps a done env after ``rollout(break_when_any_done=True)`` on the env a collector runs (its PPO
        tutorial's evaluation): ``GymEnv`` steps the gymnasium env past its end, which reports it done again.

        Returns:
            ``(B,)`` TensorDict: observation entries, ``reward`` ``(B, 1)`` float32, ``done``/``terminated``/
            ``truncated`` ``(B, 1)`` bool. Rows not stepped (outside ``"_step"``, or done) carry their env's last
            observation and done flags, and a reward of 0.

        Raises:
            aioenv.InvalidAction: an action of the wrong shape, not one-hot, or outside the space.
        """
        n = self._num_envs
        if self._unbatched:
            tensordict = tensordict.unsqueeze(0)
        mask = self._live(self._mask(tensordict, "_step"))
        ids = None if mask is None else mask.nonzero()[:, 0]
        if ids is not None and not len(ids):  # nothing to step: every row as it was
            entries = {key: value.clone() for key, value in self._last.items()}
            ended = self._ended.clone()
            rewards = torch.zeros(n, 1, dtype=torch.float32)
        else:
            given = tensordict if mask is None else tensordict[mask]
            actions = self._act_map.from_tensordict(given, n if ids is None else len(ids))
            obs, reward, terminated, truncated, _info = self._pool.step(actions, None if ids is None else ids.tolist())
            entries = self._remember(self._obs_map.to_tensors(obs), ids)
            ended, rewards = self._outcome(reward, terminated, truncated, ids)
        entries[("reward",)] = rewards
        entries[("terminated",)] = ended[:, :1]
        entries[("truncated",)] = ended[:, 1:]
        entries[("done",)] = ended.any(dim=1, keepdim=True)
        return self._out(entries)

    # --------------------------------------------------------------- internals

    def _out(self, entries: dict[NestedKey, torch.Tensor]) -> TensorDictBase:
        """The ``(B,)`` TensorDict of ``entries`` (rows of all B envs); for one env made unbatched, its row alone."""
        out = TensorDict(nested(entries), batch_size=[self._num_envs], device=self.device)
        return out[0] if self._unbatched else out

    def _mask(self, tensordict: TensorDictBase | None, key: str) -> torch.Tensor | None:
        """The ``(B,)`` bool mask at ``key`` (None when absent or all True)."""
        if tensordict is None:
            return None
        mask = tensordict.get(key, None)
        if mask is None:
            return None
        mask = mask.reshape(self._num_envs, -1).any(-1).cpu()
        return None if bool(mask.all()) else mask

    def _live(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """``mask`` (None: every env) less the envs that are done: those stay as they are, done, without a step.

        Returns:
            None when every env is stepped, else the ``(B,)`` bool mask of the envs to step (all False: none).
        """
        ended = self._ended.any(dim=1)
        if not bool(ended.any()):
            return mask
        live = ~ended if mask is None else mask & ~ended
        return None if bool(live.all()) else live

    def _outcome(
        self, reward: Any, terminated: Any, truncated: Any, ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Record the pool's ``(R,)`` flags of the envs stepped (all, or those of ``ids``) as their episodes' state.

        Returns:
            ``(B, 2)`` bool (terminated, truncated) of every env, and ``(B, 1)`` float32 rewards (0 for envs not
            stepped).
        """
        rows = len(reward)
        term = torch.from_numpy(np.ascontiguousarray(terminated, dtype=np.bool_)).reshape(rows, 1)
        trunc = torch.from_numpy(np.ascontiguousarray(truncated, dtype=np.bool_)).reshape(rows, 1)
        rewards = torch.from_numpy(np.asarray(reward, dtype=np.float32)).reshape(rows, 1)
        if ids is None:
            ended = torch.cat([term, trunc], dim=1)
            self._ended.copy_(ended)
            return ended, rewards
        self._ended[ids, :1] = term
        self._ended[ids, 1:] = trunc
        full = torch.zeros(self._num_envs, 1, dtype=torch.float32)
        full[ids] = rewards
        return self._ended.clone(), full

    def _remember(self, rows: dict[NestedKey, torch.Tensor], ids: torch.Tensor | None) -> dict[NestedKey, torch.Tensor]:
        """Copy the pool's observation rows (all envs, or those of ``ids``) into the env's last observations.

        Returns:
            the observation entries for all B envs: ``rows`` themselves (all envs), else a copy of the last
            observations with ``ids``' rows replaced.
        """
        if ids is None:
            for key, value in rows.items():
                self._last[key].copy_(value)
            return rows
        out: dict[NestedKey, torch.Tensor] = {}
        for key, value in rows.items():
            last = self._last[key]
            last[ids] = value
            out[key] = last.clone()
        return out

    def __repr__(self) -> str:
        return f"AioEnv(num_envs={self._num_envs}, device={self.device}, pool={self._pool!r})"

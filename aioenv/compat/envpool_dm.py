"""``env_type="dm"`` of :mod:`aioenv.compat.envpool`: rows as ``dm_env.TimeStep``, spaces as dm_env specs.

EnvPool's dm pool returns one batched ``TimeStep`` per ``recv``/``step``/``reset``:

- ``step_type`` ``(B,)`` int32: 0 (FIRST) for a reset row (an autoreset included), 2 (LAST) when the
  episode ended (terminated or truncated), 1 (MID) otherwise;
- ``reward`` ``(B,)`` float32 (0 on FIRST rows); ``discount`` ``(B,)`` float32: 0.0 on LAST rows, 1.0
  otherwise (EnvPool's rule, truncation included);
- ``observation``: a ``State`` namedtuple ``(env_id (B,) int32, players=players(env_id), obs)``, where
  a ``Dict`` observation space gives one field per key instead of ``obs``; an env with fixed info keys
  (EnvPool's Atari tasks: ``lives``, ``reward``, ``terminated``, ``ram``) adds one field per key after them.

dm-env is optional: this module imports it only when a dm pool or spec is asked for.
"""

from __future__ import annotations

import keyword
import re
from collections import namedtuple
from functools import lru_cache
from typing import Any

import gymnasium
import numpy as np

#: The pip extra that installs dm-env.
EXTRA = "dm"
_INT32 = np.iinfo(np.int32)


def import_dm_env() -> Any:
    """The ``dm_env`` module, or an ImportError that says what to install."""
    try:
        import dm_env
    except ImportError as exc:
        raise ImportError(
            "aioenv.compat.envpool: env_type='dm' returns dm_env.TimeStep and needs the dm-env package: "
            f'pip install "aioenv[{EXTRA}]" (or pip install dm-env)'
        ) from exc
    return dm_env


def _ident(name: str) -> str:
    """EnvPool's rule for a namedtuple name: non-word characters become ``_``; a leading digit or a keyword
    gets a ``_`` prefix."""
    ident = re.sub(r"\W", "_", str(name))
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"_{ident}"
    return ident


@lru_cache(maxsize=256)
def _namedtuple(name: str, keys: tuple[str, ...]) -> Any:
    fields: list[str] = []
    used: dict[str, int] = {}
    for key in keys:
        field = _ident(key)
        if field in used:  # EnvPool's rule for two keys that sanitise alike
            used[field] += 1
            field = f"{field}_{used[field]}"
        else:
            used[field] = 0
        fields.append(field)
    return namedtuple(_ident(name), fields, rename=True)


def to_namedtuple(name: str, pairs: list[tuple[str, Any]]) -> Any:
    """A namedtuple called ``name`` with one field per ``(key, value)``; dict values become nested namedtuples."""
    values = [to_namedtuple(k, list(v.items())) if isinstance(v, dict) else v for k, v in pairs]
    return _namedtuple(name, tuple(k for k, _ in pairs))(*values)


def _obs_pairs(space: gymnasium.Space[Any], obs: Any) -> list[tuple[str, Any]]:
    if isinstance(space, gymnasium.spaces.Dict):
        return list(obs.items())
    return [("obs", obs)]


def state(space: gymnasium.Space[Any], obs: Any, env_id: np.ndarray, extra: list[tuple[str, Any]] | None = None) -> Any:
    """EnvPool's ``State``: ``env_id``, ``players(env_id)``, then the observation (``obs``, or one field per key),
    then ``extra`` (the env's fixed info fields)."""
    pairs: list[tuple[str, Any]] = [("env_id", env_id), ("players", {"env_id": env_id.copy()})]
    return to_namedtuple("State", pairs + _obs_pairs(space, obs) + (extra or []))


def timestep(
    space: gymnasium.Space[Any],
    out: tuple[Any, ...],
    *,
    info_keys: tuple[str, ...] = (),
    first: np.ndarray | None = None,
    discount: np.ndarray | None = None,
) -> Any:
    """One batched ``dm_env.TimeStep`` from the gymnasium-style rows ``(obs, rew, term, trunc, info)``.

    ``info_keys``: info fields the ``State`` carries after the observation. ``first``: which rows start an
    episode (default: ``elapsed_step == 0``). ``discount``: the env's own discounts (default: 0 on LAST rows).
    """
    dm_env = import_dm_env()
    obs, rew, term, trunc, info = out
    last = np.asarray(term, dtype=np.bool_) | np.asarray(trunc, dtype=np.bool_)
    first = np.asarray(info["elapsed_step"]) == 0 if first is None else first
    step_type = np.where(first, 0, np.where(last, 2, 1)).astype(np.int32)
    if discount is None:
        discount = np.where(last, 0.0, 1.0).astype(np.float32)
    pairs = [(key, info[key]) for key in info_keys]
    observation = state(space, obs, np.asarray(info["env_id"], dtype=np.int32), pairs)
    return dm_env.TimeStep(step_type=step_type, reward=rew, discount=discount, observation=observation)


def space_spec(space: gymnasium.Space[Any], name: str) -> Any:
    """The dm_env spec of one env's ``space``, as EnvPool names them.

    Raises:
        ValueError: a space dm_env has no spec for (e.g. ``Graph``), naming it.
    """
    specs = import_dm_env().specs
    if isinstance(space, gymnasium.spaces.Discrete):
        start, n = int(space.start), int(space.n)
        if start == 0:
            return specs.DiscreteArray(num_values=n, dtype=space.dtype, name=name)
        return specs.BoundedArray((), space.dtype, start, start + n - 1, name=name)
    if isinstance(space, gymnasium.spaces.Box):
        low, high = space.low, space.high
        if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
            low, high = low.flat[0], high.flat[0]  # one bound for every element, as EnvPool's specs hold it
        return specs.BoundedArray(space.shape, space.dtype, low, high, name=name)
    if isinstance(space, gymnasium.spaces.MultiBinary):
        return specs.BoundedArray(space.shape, space.dtype, 0, 1, name=name)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return specs.BoundedArray(space.shape, space.dtype, space.start, space.start + space.nvec - 1, name=name)
    if isinstance(space, gymnasium.spaces.Dict):
        return to_namedtuple(name, [(k, space_spec(s, k)) for k, s in space.spaces.items()])
    if isinstance(space, gymnasium.spaces.Tuple):
        return tuple(space_spec(s, f"{name}_{i}") for i, s in enumerate(space.spaces))
    if isinstance(space, gymnasium.spaces.Text):
        return specs.StringArray((), name=name)
    raise ValueError(f"no dm_env spec for {space}: env_type='dm' needs Box, Discrete, Multi*, Dict, Tuple or Text")


def observation_spec(space: gymnasium.Space[Any], extra: list[tuple[str, Any]] | None = None) -> Any:
    """EnvPool's dm observation spec: ``State(env_id, players(env_id), obs..., extra...)`` of specs."""
    specs = import_dm_env().specs
    env_id = specs.BoundedArray((), np.int32, _INT32.min, _INT32.max, name="env_id")
    pairs: list[tuple[str, Any]] = [("env_id", env_id), ("players", {"env_id": env_id})]
    if isinstance(space, gymnasium.spaces.Dict):
        pairs += [(k, space_spec(s, k)) for k, s in space.spaces.items()]
    else:
        pairs.append(("obs", space_spec(space, "obs")))
    return to_namedtuple("State", pairs + (extra or []))


def reward_spec() -> Any:
    """dm_env's default reward spec (what EnvPool's dm pool inherits): a float64 scalar ``Array``."""
    return import_dm_env().specs.Array(shape=(), dtype=float, name="reward")


def discount_spec() -> Any:
    """dm_env's default discount spec: a float64 scalar in [0, 1]."""
    return import_dm_env().specs.BoundedArray((), float, minimum=0.0, maximum=1.0, name="discount")

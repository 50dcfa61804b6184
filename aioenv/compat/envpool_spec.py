"""``make_spec`` of :mod:`aioenv.compat.envpool`: EnvPool's options checked, its ``config`` built.

EnvPool's ``make``/``make_spec`` take the pool's options and the task's own options as one set of
keyword arguments. Here the EnvPool options are taken out (honoured, ignored with a warning, or
refused with a clear error, as ``docs/migrating.md`` lists them) and everything else is a keyword
argument of ``gymnasium.make`` (or of the ``"pkg.module:factory"`` callable).
"""

from __future__ import annotations

import importlib
import warnings
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import gymnasium
import numpy as np

from aioenv.compat import envpool_atari
from aioenv.transport.spawn import usable_cpus
from aioenv.wire.options import is_int

#: The fields every ``config`` has, in EnvPool's order; the env's own keyword arguments follow them.
BASE_FIELDS = (
    "num_envs",
    "batch_size",
    "num_threads",
    "max_num_players",
    "thread_affinity_offset",
    "base_path",
    "seed",
    "env_seed",
    "gym_reset_return_info",
    "max_episode_steps",
    "reward_threshold",
)
#: EnvPool's MuJoCo ids whose gymnasium versions need mujoco-py (gone from gymnasium 1.x), made as the
#: gymnasium v4 env EnvPool's equals (the same model and observation; Ant's v3 observes contact forces).
#: Pusher-v2 has none: gymnasium's Pusher-v4 refuses mujoco >= 3.
MUJOCO_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "Ant-v3": ("Ant-v4", {"use_contact_forces": True}),
    "HalfCheetah-v3": ("HalfCheetah-v4", {}),
    "Hopper-v3": ("Hopper-v4", {}),
    "Humanoid-v3": ("Humanoid-v4", {}),
    "Swimmer-v3": ("Swimmer-v4", {}),
    "Walker2d-v3": ("Walker2d-v4", {}),
    "HumanoidStandup-v2": ("HumanoidStandup-v4", {}),
    "InvertedDoublePendulum-v2": ("InvertedDoublePendulum-v4", {}),
    "InvertedPendulum-v2": ("InvertedPendulum-v4", {}),
    "Reacher-v2": ("Reacher-v4", {}),
}
#: EnvPool options accepted and ignored (with a warning when set to anything but EnvPool's default).
_IGNORED = {"thread_affinity_offset": -1, "base_path": ""}
#: EnvPool rendering options aioenv cannot honour: the env renders itself in its worker.
_REFUSED = ("render_width", "render_height", "render_camera_id", "from_pixels")


class EnvSpec:
    """What ``envpool.make_spec`` returns: the task's single-env spaces and its ``config``.

    Attributes:
        task_id: the gymnasium id (or ``"pkg.module:factory"``).
        config: a namedtuple ``Config`` as EnvPool's: ``num_envs``, ``batch_size``, ``num_threads``,
            ``max_num_players``, ``thread_affinity_offset``, ``base_path``, ``seed``, ``env_seed``,
            ``gym_reset_return_info``, ``max_episode_steps``, ``reward_threshold``, then the env's own
            keyword arguments (``config.num_envs``, ``config._asdict()``).
        env_kwargs: the keyword arguments the env is made with (``max_episode_steps`` included when set).
        render_env_id: the env :meth:`EnvPool.render` shows by default.
        source: what the workers make: ``task_id``, or for an EnvPool Atari task
            ``"aioenv.compat.envpool_atari:AtariEnv"`` (its options in ``env_kwargs``).
        reset_options: the ``options`` an explicit ``reset``/``async_reset`` passes to the envs (None: none).
        info_keys: the env's own info keys, in EnvPool's order, when they are fixed (Atari: ``lives``,
            ``reward``, ``terminated``, ``ram``); the pool's rows then carry exactly these, without gymnasium's
            ``_key`` masks. None: every key the env gives, batched as gymnasium batches them.
        env_counts_steps: the env reports ``info["elapsed_step"]`` itself (Atari: counted across lives).
        env_discounts: the env reports ``info["discount"]`` for ``env_type="dm"`` itself (Atari).
        info_specs: makes the dm_env specs of the ``info_keys`` fields (Atari); None: no such fields.
    """

    def __init__(
        self,
        task_id: str,
        config: Any,
        env_kwargs: dict[str, Any],
        render_env_id: int = 0,
        *,
        source: str | None = None,
        reset_options: dict[str, Any] | None = None,
        info_keys: tuple[str, ...] | None = None,
        env_counts_steps: bool = False,
        env_discounts: bool = False,
        info_specs: Callable[[], list[tuple[str, Any]]] | None = None,
    ) -> None:
        self.task_id = task_id
        self.config = config
        self.env_kwargs = env_kwargs
        self.render_env_id = render_env_id
        self.source = source or task_id
        self.reset_options = reset_options
        self.info_keys = info_keys
        self.env_counts_steps = env_counts_steps
        self.env_discounts = env_discounts
        self._info_specs = info_specs
        self._spaces: tuple[gymnasium.Space[Any], gymnasium.Space[Any]] | None = None

    def _read_spaces(self) -> tuple[gymnasium.Space[Any], gymnasium.Space[Any]]:
        if self._spaces is None:
            env = make_local(self.source, self.env_kwargs)
            try:
                self._spaces = (env.observation_space, env.action_space)
            finally:
                env.close()
        return self._spaces

    @property
    def observation_space(self) -> gymnasium.Space[Any]:
        """One env's observation space (the env is made once, in this process, to read it)."""
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

    @property
    def reward_threshold(self) -> float | None:
        """The task's reward threshold (from its gymnasium registration), or None."""
        value = self.config.reward_threshold
        return None if value is None else float(value)

    def observation_spec(self) -> Any:
        """dm_env's observation spec: a ``State`` namedtuple of ``env_id``, ``players.env_id`` and the obs
        (``obs``, or one field per key of a ``Dict`` space). Needs the ``dm`` extra (dm-env)."""
        from aioenv.compat.envpool_dm import observation_spec

        return observation_spec(self.observation_space, self.dm_info_specs())

    def dm_info_specs(self) -> list[tuple[str, Any]]:
        """dm_env specs of the info fields the dm ``State`` carries (EnvPool's Atari tasks); none for others."""
        return [] if self._info_specs is None else self._info_specs()

    def action_spec(self) -> Any:
        """dm_env's action spec (a ``DiscreteArray`` for ``Discrete(n)``, a ``BoundedArray`` for ``Box``)."""
        from aioenv.compat.envpool_dm import space_spec

        return space_spec(self.action_space, "action")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.config._asdict().items())
        return f"EnvSpec({self.task_id!r}, {fields})"


def make_local(task_id: str, env_kwargs: dict[str, Any]) -> Any:
    """One env made in this process the way the workers make it (``workers/sources.py``)."""
    module, _, attr = task_id.partition(":")
    if module and attr:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:  # "module:EnvId-v0": gymnasium's own syntax
                return gymnasium.make(task_id, **env_kwargs)
        return obj(**env_kwargs)
    return gymnasium.make(task_id, **env_kwargs)


@lru_cache(maxsize=64)
def _config_type(fields: tuple[str, ...]) -> Any:
    return namedtuple("Config", fields, rename=True)  # EnvPool's config is a collections.namedtuple too


def _count(task_id: str, name: str, value: Any, low: int, high: int | None = None) -> int:
    if not is_int(value) or value < low:
        raise ValueError(f"{task_id}: {name} must be an int >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{task_id}: {name}={value} exceeds num_envs={high}")
    return int(value)


def _seed_list(task_id: str, name: str, value: Any, num_envs: int) -> list[int]:
    seeds = np.asarray(value).reshape(-1).tolist() if isinstance(value, np.ndarray) else list(value)
    if len(seeds) != num_envs:
        raise ValueError(f"{task_id}: {name} has {len(seeds)} seeds for num_envs={num_envs}: give one per env")
    return [_seed(task_id, name, s) for s in seeds]


def _seed(task_id: str, name: str, value: Any) -> int:
    if not is_int(value) or value < 0:
        raise ValueError(f"{task_id}: {name} must hold ints >= 0 (gymnasium seeds are non-negative), got {value!r}")
    return int(value)


def _seeds(task_id: str, kwargs: dict[str, Any], num_envs: int) -> tuple[int, list[int]]:
    """``(seed, env_seed)`` as EnvPool's config holds them: a sequence ``seed`` becomes ``env_seed``."""
    seed = kwargs.pop("seed", 42)
    env_seed = kwargs.pop("env_seed", None)
    if isinstance(seed, Sequence | np.ndarray) and not isinstance(seed, str | bytes):
        if env_seed is not None:
            raise ValueError(f"{task_id}: pass either seed as an int or a list, or env_seed, not both")
        return 0, _seed_list(task_id, "seed", seed, num_envs)
    base = _seed(task_id, "seed", seed)
    return base, ([] if env_seed is None else _seed_list(task_id, "env_seed", env_seed, num_envs))


def _registered(task_id: str) -> tuple[int | None, float | None]:
    """``(max_episode_steps, reward_threshold)`` of a gymnasium id; raises gymnasium's error for an unknown one."""
    if ":" in task_id:
        return None, None  # "pkg.module:factory" (or "module:EnvId"): resolved by the workers
    spec = gymnasium.spec(task_id)
    return spec.max_episode_steps, spec.reward_threshold


def _pop_ignored(task_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    values = {}
    for name, default in _IGNORED.items():
        values[name] = kwargs.pop(name, default)
        if values[name] != default:
            warnings.warn(
                f"{task_id}: {name}={values[name]!r} is ignored: aioenv runs envs in worker processes, "
                "not in EnvPool's C++ thread pool",
                stacklevel=4,
            )
    return values


def _pop_render(task_id: str, kwargs: dict[str, Any]) -> tuple[int, str | None]:
    """Take the render options out of ``kwargs``, checked: ``(render_env_id, render_mode)``."""
    for name in _REFUSED:
        if name in kwargs:
            raise ValueError(
                f"{task_id}: {name} is not supported by aioenv.compat.envpool: each env renders itself with "
                "render_mode='rgb_array' (pass the env's own size options, e.g. width=/height= for MuJoCo)"
            )
    mode = kwargs.pop("render_mode", None)
    if mode not in (None, "rgb_array"):
        raise ValueError(f"{task_id}: render_mode must be None or 'rgb_array' (the envs run in workers), got {mode!r}")
    return int(kwargs.pop("render_env_id", 0)), mode


def _pool_options(task_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take EnvPool's pool options out of ``kwargs``, checked: the first fields of ``config``."""
    num_envs = _count(task_id, "num_envs", kwargs.pop("num_envs", 1), 1)
    batch_size = kwargs.pop("batch_size", None) or num_envs
    batch_size = _count(task_id, "batch_size", batch_size, 1, num_envs)
    num_threads = _count(task_id, "num_threads", kwargs.pop("num_threads", None) or 0, 0)
    players = kwargs.pop("max_num_players", 1)
    if players != 1:
        raise ValueError(
            f"{task_id}: aioenv.compat.envpool runs single-player envs only (max_num_players=1), got {players!r}"
        )
    return {"num_envs": num_envs, "batch_size": batch_size, "num_threads": num_threads, "max_num_players": 1}


def build_spec(task_id: str, kwargs: dict[str, Any]) -> EnvSpec:
    """The :class:`EnvSpec` for ``task_id`` and EnvPool keyword arguments ``kwargs`` (consumed)."""
    if not isinstance(task_id, str) or not task_id:
        raise TypeError(f"task_id must be a gymnasium id or 'pkg.module:factory', got {task_id!r}")
    values = _common_options(task_id, kwargs)
    if envpool_atari.atari_task(task_id) is not None:
        return _atari_spec(task_id, values, kwargs)
    source, defaults = MUJOCO_ALIASES.get(task_id, (task_id, {}))
    kwargs = {**defaults, **kwargs}
    default_steps, default_threshold = _registered(source)
    steps = kwargs.pop("max_episode_steps", None)
    values["max_episode_steps"] = default_steps if steps is None else _count(task_id, "max_episode_steps", steps, 1)
    values["reward_threshold"] = kwargs.pop("reward_threshold", default_threshold)
    render_env_id, render_mode = _pop_render(task_id, kwargs)
    env_kwargs = dict(kwargs)
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    if steps is not None:
        env_kwargs["max_episode_steps"] = values["max_episode_steps"]
    values.update(kwargs)
    config = _config_type(tuple(values))(**values)
    return EnvSpec(task_id, config, env_kwargs, render_env_id, source=source)


def _common_options(task_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The first fields of every ``config``, up to ``gym_reset_return_info``, taken out of ``kwargs``."""
    if kwargs.pop("gym_reset_return_info", True) is not True:
        raise ValueError(
            "EnvPool's gym API now follows gymnasium reset semantics and always returns an info dictionary "
            "after resets (gym_reset_return_info must be True)."
        )
    values = _pool_options(task_id, kwargs)
    values.update(_pop_ignored(task_id, kwargs))
    values["seed"], values["env_seed"] = _seeds(task_id, kwargs, values["num_envs"])
    values["gym_reset_return_info"] = True
    return values


def _atari_spec(task_id: str, values: dict[str, Any], kwargs: dict[str, Any]) -> EnvSpec:
    """An EnvPool Atari task: its options checked (an unknown one is a ``TypeError``, as in EnvPool), its
    ``config`` in EnvPool's field order (no ``reward_threshold``), its envs :class:`.envpool_atari.AtariEnv`."""
    render_env_id, render_mode = _pop_render(task_id, kwargs)
    try:
        options = envpool_atari.atari_options(task_id, kwargs)
    except envpool_atari.UnknownOption as exc:
        raise TypeError(str(exc)) from None
    envpool_atari.import_ale()  # a missing ale-py is reported here, before any worker starts
    values["max_episode_steps"] = options.pop("max_episode_steps")
    values.update(options)
    config = _config_type(tuple(values))(**values)
    env_kwargs = {**options, "task_id": task_id, "max_episode_steps": values["max_episode_steps"]}
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    return EnvSpec(
        task_id,
        config,
        env_kwargs,
        render_env_id,
        source=envpool_atari.SOURCE,
        reset_options={"force_reset": True},
        info_keys=envpool_atari.INFO_KEYS,
        env_counts_steps=True,
        env_discounts=True,
        info_specs=envpool_atari.dm_info_specs,
    )


def worker_count(config: Any) -> int:
    """Worker processes for ``config``: ``num_threads``, or ``min(num_envs, usable CPUs)`` when it is 0."""
    return int(config.num_threads) or min(int(config.num_envs), usable_cpus())

"""EnvPool's Atari tasks (``Pong-v5``, ``Breakout-v5``, ...) as gymnasium envs over ``ale-py``.

:class:`AtariEnv` is EnvPool's C++ Atari env (``envpool/atari/atari_env.h``) step for step, on the emulator and
ROMs of ``ale-py`` (``pip install "aioenv[atari]"``): the same options and defaults, the same wrappers in the
same order (random no-ops, fire reset, episodic life, frame skip with a max over the last two frames,
grey scale, resize, frame stack, reward clip, a step limit counted across lives), the same info keys
(``lives``, ``reward`` before clipping, ``terminated`` (the game is over), ``ram``, ``elapsed_step``).
:mod:`aioenv.compat.envpool` makes it for EnvPool's Atari task ids; the workers make it by name
(``"aioenv.compat.envpool_atari:AtariEnv"``), so only its options cross the wire.

The no-op counts are drawn as EnvPool draws them (libstdc++'s ``uniform_int_distribution`` over
``std::mt19937(seed)``), so the same seed gives the same frames: side by side with EnvPool 1.2.5 every row of
every game is equal, pixels included. What cannot match (docs/migrating.md, "EnvPool's Atari tasks"): sticky
actions (``repeat_action_probability > 0``) are drawn by each emulator build's own RNG.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium
import numpy as np

from aioenv.wire.options import is_int

__all__ = [
    "ATARI_TASKS",
    "INFO_KEYS",
    "SOURCE",
    "AtariEnv",
    "UnknownOption",
    "atari_options",
    "dm_info_specs",
    "atari_task",
    "import_ale",
    "installed",
]

#: What the workers make for an EnvPool Atari task (its options travel as ``env_kwargs``).
SOURCE = "aioenv.compat.envpool_atari:AtariEnv"

#: EnvPool's Atari task ids (EnvPool 1.2.5's ``list_all_envs()``), each named after its ``ale-py`` ROM.
_GAMES = (
    "adventure",
    "air_raid",
    "alien",
    "amidar",
    "assault",
    "asterix",
    "asteroids",
    "atlantis",
    "atlantis2",
    "backgammon",
    "bank_heist",
    "basic_math",
    "battle_zone",
    "beam_rider",
    "berzerk",
    "blackjack",
    "bowling",
    "boxing",
    "breakout",
    "carnival",
    "casino",
    "centipede",
    "chopper_command",
    "crazy_climber",
    "crossbow",
    "darkchambers",
    "defender",
    "demon_attack",
    "donkey_kong",
    "double_dunk",
    "earthworld",
    "elevator_action",
    "enduro",
    "entombed",
    "et",
    "fishing_derby",
    "flag_capture",
    "freeway",
    "frogger",
    "frostbite",
    "galaxian",
    "gopher",
    "gravitar",
    "hangman",
    "haunted_house",
    "hero",
    "human_cannonball",
    "ice_hockey",
    "jamesbond",
    "journey_escape",
    "kaboom",
    "kangaroo",
    "keystone_kapers",
    "king_kong",
    "klax",
    "koolaid",
    "krull",
    "kung_fu_master",
    "laser_gates",
    "lost_luggage",
    "mario_bros",
    "miniature_golf",
    "montezuma_revenge",
    "mr_do",
    "ms_pacman",
    "name_this_game",
    "othello",
    "pacman",
    "phoenix",
    "pitfall",
    "pitfall2",
    "pong",
    "pooyan",
    "private_eye",
    "qbert",
    "riverraid",
    "road_runner",
    "robotank",
    "seaquest",
    "sir_lancelot",
    "skiing",
    "solaris",
    "space_invaders",
    "space_war",
    "star_gunner",
    "superman",
    "surround",
    "tennis",
    "tetris",
    "tic_tac_toe_3d",
    "time_pilot",
    "trondead",
    "turmoil",
    "tutankham",
    "up_n_down",
    "venture",
    "video_checkers",
    "video_chess",
    "video_cube",
    "video_pinball",
    "wizard_of_wor",
    "word_zapper",
    "yars_revenge",
    "zaxxon",
)
#: Task id -> ROM name, as EnvPool names them: ``"tic_tac_toe_3d"`` is ``"TicTacToe3d-v5"``.
ATARI_TASKS: dict[str, str] = {"".join(p.capitalize() for p in g.split("_")) + "-v5": g for g in _GAMES}

#: EnvPool's Atari options and their defaults, in EnvPool's order (``AtariEnvFns::DefaultConfig``);
#: ``max_episode_steps`` (27000 agent steps, 108000 frames) is a pool option there, an env option here.
DEFAULTS: dict[str, Any] = {
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "task": "pong",
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}
MAX_EPISODE_STEPS = 27000
#: The env's own info keys, in EnvPool's order (``elapsed_step`` follows them, as in EnvPool).
INFO_KEYS = ("lives", "reward", "terminated", "ram")
_AT_LEAST_ONE = ("stack_num", "frame_skip", "noop_max", "img_height", "img_width", "max_episode_steps")
_RAW = (210, 160)  # an Atari screen, rows x columns
_U32 = 1 << 32


class UnknownOption(ValueError):
    """An option EnvPool's Atari envs do not have (EnvPool raises ``TypeError`` for it; so does ``make``)."""


def installed() -> bool:
    """Whether ale-py and OpenCV can be imported (the ``atari`` extra), without importing them."""
    return all(importlib.util.find_spec(name) is not None for name in ("ale_py", "cv2"))


def import_ale() -> Any:
    """``ale_py`` (with OpenCV, which resizes the frames), or an ImportError that says how to install them."""
    try:
        importlib.import_module("cv2")
        return importlib.import_module("ale_py")
    except ImportError as exc:
        raise ImportError(
            "EnvPool's Atari tasks need ale-py (its ROMs ship in the wheel) and OpenCV: "
            f"pip install 'aioenv[atari]' ({exc})"
        ) from exc


def atari_task(task_id: str) -> str | None:
    """The ROM name of an EnvPool Atari task id (``"Pong-v5"`` -> ``"pong"``), or None for any other id."""
    return ATARI_TASKS.get(task_id)


def atari_options(task_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of ``task_id`` with EnvPool's default where ``given`` has none, checked.

    Raises:
        UnknownOption: an option EnvPool's Atari envs do not have (the message lists theirs).
        ValueError: a value of the wrong type or out of range (the task, the option and the value).
    """
    unknown = sorted(set(given) - set(DEFAULTS) - {"max_episode_steps"})
    if unknown:
        raise UnknownOption(
            f"{task_id}: unknown option(s) {unknown} for an Atari task; its options are "
            f"{sorted([*DEFAULTS, 'max_episode_steps'])} and the pool's (num_envs, batch_size, seed, ...)"
        )
    values = {**DEFAULTS, "max_episode_steps": MAX_EPISODE_STEPS, **given}
    rom = atari_task(task_id)
    if values["task"] != DEFAULTS["task"] and values["task"] != rom:
        raise ValueError(f"{task_id}: task is the ROM the id names ({rom!r}), got {values['task']!r}")
    values["task"] = rom or values["task"]
    for name, default in values.items():
        value = values[name]
        if isinstance(DEFAULTS.get(name), bool):
            if not isinstance(value, bool | np.bool_):
                raise ValueError(f"{task_id}: {name} must be a bool, got {value!r}")
            values[name] = bool(value)
        elif is_int(default):
            low = 1 if name in _AT_LEAST_ONE else -1
            if not is_int(value) or isinstance(value, bool) or value < low:
                raise ValueError(f"{task_id}: {name} must be an int >= {low}, got {value!r}")
            values[name] = int(value)
    prob = values["repeat_action_probability"]
    if isinstance(prob, bool) or not isinstance(prob, int | float | np.floating | np.integer) or not 0 <= prob <= 1:
        raise ValueError(f"{task_id}: repeat_action_probability must be a float in [0, 1], got {prob!r}")
    values["repeat_action_probability"] = float(prob)
    return values


def dm_info_specs() -> list[tuple[str, Any]]:
    """dm_env specs of the info fields EnvPool's Atari ``State`` carries, as EnvPool declares them (its float
    spec's minimum is the smallest positive float32, as EnvPool's C++ default has it)."""
    specs = importlib.import_module("dm_env").specs
    i32, f32 = np.iinfo(np.int32), np.finfo(np.float32)
    return [
        ("lives", specs.BoundedArray((), np.int32, i32.min, i32.max, name="lives")),
        ("reward", specs.BoundedArray((), np.float32, f32.tiny, f32.max, name="reward")),
        ("terminated", specs.DiscreteArray(2, dtype=np.int32, name="terminated")),
        ("ram", specs.BoundedArray((128,), np.uint8, 0, 255, name="ram")),
    ]


class AtariEnv(gymnasium.Env[np.ndarray, np.int64]):
    """One EnvPool Atari env: ``(stack_num * channels, img_height, img_width)`` uint8 observations.

    Args:
        task: the ROM name (``"pong"``); ``task_id`` is the EnvPool id it is shown as in errors.
        options: EnvPool's Atari options (:data:`DEFAULTS`, ``max_episode_steps``), checked by
            :func:`atari_options`.

    ``reset(options={"force_reset": True})`` starts a new game even after a lost life under
    ``episodic_life`` (what EnvPool's own ``reset`` does); without it, a reset after a lost life goes on
    with the same game (EnvPool's autoreset).
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - gymnasium's own attribute

    def __init__(self, task: str = "pong", task_id: str | None = None, render_mode: str | None = None, **options: Any):
        name = task_id or next((k for k, v in ATARI_TASKS.items() if v == task), task)
        opts = atari_options(name, {**options, "task": task})
        ale_py = import_ale()
        self.task_id = name
        self.render_mode = render_mode
        self._opts = opts
        self._rom = str(ale_py.roms.get_rom_path(task))
        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self._noop, self._fire = ale_py.Action.NOOP, ale_py.Action.FIRE
        self._load(0)
        actions = self.ale.getLegalActionSet() if opts["full_action_space"] else self.ale.getMinimalActionSet()
        self._actions = list(actions)
        self._fire_reset = bool(opts["use_fire_reset"]) and self._fire in self._actions
        self._gray = bool(opts["gray_scale"])
        channels = 1 if self._gray else 3
        self._size = (int(opts["img_width"]), int(opts["img_height"]))  # cv2's (width, height)
        self._interp = "area" if opts["use_inter_area_resize"] else "linear"
        rows, cols = self.ale.getScreenDims()  # EnvPool reads the first 210 rows (Adventure's screen has 250)
        screen = (rows, cols) if self._gray else (rows, cols, 3)
        self._screen = np.zeros(screen, np.uint8)
        raw = _RAW if self._gray else (*_RAW, 3)
        self._pool = [np.zeros(raw, np.uint8), np.zeros(raw, np.uint8)]  # the last two frames of a step
        self._stack = np.zeros((int(opts["stack_num"]), channels, self._size[1], self._size[0]), np.uint8)
        shape = (self._stack.shape[0] * channels, *self._stack.shape[2:])
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gymnasium.spaces.Discrete(len(self._actions))
        self._max_steps = int(opts["max_episode_steps"])
        self._elapsed = self._max_steps + 1  # as EnvPool: the first reset starts a game
        self._lives = 0
        self._cv2 = importlib.import_module("cv2")
        self._gen = np.random.RandomState(0)

    def _load(self, seed: int) -> None:
        self.ale.setFloat("repeat_action_probability", self._opts["repeat_action_probability"])
        self.ale.setInt("random_seed", seed % 2**31)
        self.ale.loadROM(self._rom)
        for name, available, choose in (
            ("mode", self.ale.getAvailableModes, self.ale.setMode),
            ("difficulty", self.ale.getAvailableDifficulties, self.ale.setDifficulty),
        ):
            value = self._opts[name]
            if value >= 0:
                allowed = [int(v) for v in available()]
                if value not in allowed:
                    raise ValueError(
                        f"{self.task_id}: {name} must be -1 (the game's default) or one of {allowed}, got {value}"
                    )
                choose(value)

    def _grab(self, into: np.ndarray) -> None:
        if self._gray:
            self.ale.getScreenGrayscale(self._screen)
        else:
            self.ale.getScreenRGB(self._screen)
        into[:] = self._screen[: _RAW[0], : _RAW[1]]

    def _push(self, push_all: bool, maxpool: bool) -> None:
        """EnvPool's ``PushStack``: the newest frame (max of the last two when ``maxpool``) resized onto the stack."""
        frame = self._pool[0]
        if maxpool:
            np.maximum(frame, self._pool[1], out=frame)
        interp = self._cv2.INTER_AREA if self._interp == "area" else self._cv2.INTER_LINEAR
        small = self._cv2.resize(frame, self._size, interpolation=interp)
        small = small[None] if self._gray else small.transpose(2, 0, 1)
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = small
        if push_all:
            self._stack[:] = small

    def _state(self, info_reward: float, discount: float = 1.0) -> tuple[np.ndarray, dict[str, Any]]:
        info = {
            "discount": np.float32(discount),  # for env_type="dm" (not an info key of EnvPool's gymnasium rows)
            "lives": np.int32(self._lives),
            "reward": np.float32(info_reward),
            "terminated": np.int32(self.ale.game_over()),
            "ram": self.ale.getRAM().astype(np.uint8, copy=True),
            "elapsed_step": np.int32(self._elapsed),
        }
        return self._stack.reshape(self.observation_space.shape).copy(), info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """EnvPool's ``Reset``: a new game unless a life was lost under ``episodic_life``, then 1 to ``noop_max``
        no-op frames (one fewer with fire reset), then FIRE where the game has it.

        A ``seed`` (the pool gives env ``i`` the seed ``seed + i`` at its first reset, as EnvPool does) seeds ALE
        and the no-op draws; ``options={"force_reset": True}`` starts a new game (EnvPool's explicit reset)."""
        super().reset(seed=seed)
        force = seed is not None or bool((options or {}).get("force_reset", False))
        if seed is not None:
            self._load(seed)
            self._gen = np.random.RandomState(seed % 2**32)
        noop = _uniform(self._gen, self._opts["noop_max"]) + 1 - int(self._fire_reset)
        push_all = False
        if force or not self._opts["episodic_life"] or self.ale.game_over() or self._elapsed >= self._max_steps:
            self.ale.reset_game()
            self._elapsed = 0
            push_all = True
        for _ in range(noop):
            self.ale.act(self._noop)
            if self.ale.game_over():
                self.ale.reset_game()
                push_all = True
        if self._fire_reset:
            self.ale.act(self._fire)
        self._grab(self._pool[0])
        self._push(push_all, maxpool=False)
        self._lives = int(self.ale.lives())
        return self._state(0.0)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """EnvPool's ``Step``: ``frame_skip`` frames of the action (fewer when the game ends), the max of the
        last two frames pushed, the step limit, a lost life ending the episode under ``episodic_life``."""
        act = self._actions[int(action)]
        reward = 0.0
        done = False
        skip = self._opts["frame_skip"]
        pooled = min(skip, 2)
        while skip > 0 and not done:
            reward += self.ale.act(act)
            done = bool(self.ale.game_over())
            if skip <= pooled:
                self._grab(self._pool[pooled - skip])
            skip -= 1
        self._push(False, maxpool=self._opts["frame_skip"] > 1 and skip == 0)
        self._elapsed += 1
        done |= self._elapsed >= self._max_steps
        lives = int(self.ale.lives())
        if self._opts["episodic_life"] and 0 < lives < self._lives:
            done = True
        info_reward = reward
        if self._opts["reward_clip"]:
            reward = float(np.sign(reward))
        previous, self._lives = self._lives, lives
        truncated = done and self._elapsed >= self._max_steps
        if self._opts["zero_discount_on_life_loss"]:
            discount = float(lives == previous and not done)
        else:
            discount = 1.0 - float(done)
        obs, info = self._state(info_reward, discount)
        return obs, float(np.float32(reward)), done and not truncated, truncated, info

    def render(self) -> np.ndarray | None:
        """The raw screen, ``(210, 160, 3)`` uint8, with ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        return np.asarray(self.ale.getScreenRGB())[: _RAW[0], : _RAW[1]]


def _uniform(gen: np.random.RandomState, n: int) -> int:
    """``std::uniform_int_distribution<>(0, n - 1)(std::mt19937)`` as libstdc++ draws it (Lemire's method), on
    numpy's MT19937 (seeded as ``std::mt19937(seed)``): EnvPool's no-op counts for the same seed."""
    product = int(gen.randint(0, _U32, dtype=np.uint32)) * n
    if product % _U32 < n:
        threshold = (_U32 - n) % n
        while product % _U32 < threshold:
            product = int(gen.randint(0, _U32, dtype=np.uint32)) * n
    return product >> 32

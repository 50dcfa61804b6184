"""EnvPool's Atari tasks in ``aioenv.compat.envpool``, side by side with the real EnvPool (1.2.5).

aioenv's Atari env (``aioenv/compat/envpool_atari.py``) runs EnvPool's C++ Atari env step for step on
``ale-py``'s emulator, with EnvPool's no-op draws for the same seed: so the rows are compared whole, pixels
included, on a few games with the options CleanRL uses and with the defaults. What cannot match (repeat action
probability above 0: ALE's sticky-action draws differ between the two emulator builds) is not compared.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioenv
import aioenv.compat.envpool as envpool
from aioenv.compat.envpool_atari import ATARI_TASKS, SOURCE, AtariEnv
from tests.support.scripts import run_python
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def real() -> ModuleType:
    """The real EnvPool (the ``test`` extra installs it)."""
    try:
        module = importlib.import_module("envpool")
    except ImportError as exc:  # pragma: no cover - a broken test install
        pytest.fail(f"the side-by-side tests need the real EnvPool: pip install envpool==1.2.5 ({exc})")
    return module


@contextlib.contextmanager
def both(real: ModuleType, task: str, **kw: Any) -> Iterator[tuple[Any, Any]]:
    """``(EnvPool's pool, aioenv's pool)`` of ``task`` made with the same arguments; both closed after."""
    theirs = real.make(task, "gymnasium", **kw)
    ours = envpool.make(task, "gymnasium", **kw)
    try:
        yield theirs, ours
    finally:
        ours.close()
        theirs.close()


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same arrays (dtype, shape, values) under the same keys, in the same order."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())


def side_by_side(theirs: Any, ours: Any, steps: int, seed: int = 0) -> list[Any]:
    """Reset both, then ``steps`` steps of the same random actions: every row must be the same. Returns
    EnvPool's rows (the reset's first)."""
    first = theirs.reset(), ours.reset()
    assert same(*first)
    rows = [first[0]]
    rng = np.random.default_rng(seed)
    for turn in range(steps):
        action = rng.integers(theirs.action_space.n, size=theirs.num_envs)
        out = theirs.step(action), ours.step(action)
        assert same(*out), f"step {turn}: the rows differ"
        rows.append(out[0])
    return rows


def test_breakout_with_cleanrls_options_row_for_row(real: ModuleType) -> None:
    """CleanRL's options (``episodic_life``, ``reward_clip``): pixels, rewards, flags and info the same, through
    lost lives (the episode ends for the learner, ``lives`` falls, the game goes on) and through game overs."""
    with both(real, "Breakout-v5", num_envs=2, seed=5, episodic_life=True, reward_clip=True) as (theirs, ours):
        rows = side_by_side(theirs, ours, 300)
    lives_lost = 0
    for before, after in itertools.pairwise(rows[1:]):
        _, _, term, _, info = before
        for env in np.flatnonzero(term):
            if info["lives"][env] > 0:  # a life lost, not the game: the next row goes on with the same game
                lives_lost += 1
                assert after[4]["elapsed_step"][env] == info["elapsed_step"][env]  # counted across lives
                assert after[4]["lives"][env] == info["lives"][env]
    assert lives_lost >= 3


def test_defaults_side_by_side(real: ModuleType) -> None:
    with both(real, "Pong-v5", num_envs=2) as (theirs, ours):
        theirs_cfg = dict(theirs.config, base_path="")  # EnvPool's asset folder; aioenv has none
        assert ours.config == theirs_cfg
        assert list(ours.config) == list(theirs.config)
        assert ours.config["max_episode_steps"] == 27000
        assert ours.config["repeat_action_probability"] == 0.0
        assert (ours.observation_space, ours.action_space) == (theirs.observation_space, theirs.action_space)
        rows = side_by_side(theirs, ours, 60)
    obs, _, _, _, info = rows[-1]
    assert obs.shape == (2, 4, 84, 84)
    assert obs.dtype == np.uint8
    assert list(info) == ["env_id", "players", "lives", "reward", "terminated", "ram", "elapsed_step"]
    spec = envpool.make_spec("Pong-v5")
    assert spec.observation_space == real.make_spec("Pong-v5").observation_space


@pytest.mark.parametrize("task", ["MsPacman-v5", "Adventure-v5", "SpaceInvaders-v5"])
def test_more_games_row_for_row(real: ModuleType, task: str) -> None:
    """A game without FIRE (no fire reset), one with a taller screen than 210 rows, one with large rewards."""
    with both(real, task, num_envs=2, seed=11, reward_clip=True) as (theirs, ours):
        rows = side_by_side(theirs, ours, 150)
    if task == "SpaceInvaders-v5":  # rewards of 5 to 30 points, clipped to 1; info keeps the points
        rewards = np.concatenate([r[1] for r in rows[1:]])
        points = np.concatenate([r[4]["reward"] for r in rows[1:]])
        assert points.max() > 1
        assert set(rewards.tolist()) <= {-1.0, 0.0, 1.0}
        assert (np.sign(points) == rewards).all()


@pytest.mark.parametrize(
    "options",
    [
        {"stack_num": 2, "img_height": 64, "img_width": 48},
        {"gray_scale": False, "stack_num": 3},
        {"frame_skip": 1, "noop_max": 1, "use_fire_reset": False},
        {"full_action_space": True, "use_inter_area_resize": False},
        {"max_episode_steps": 25},
        {"episodic_life": True, "mode": 4, "difficulty": 1},
    ],
)
def test_options_side_by_side(real: ModuleType, options: dict[str, Any]) -> None:
    with both(real, "Breakout-v5", num_envs=2, seed=3, **options) as (theirs, ours):
        assert ours.observation_space == theirs.observation_space
        assert ours.action_space == theirs.action_space
        rows = side_by_side(theirs, ours, 40)
    if "max_episode_steps" in options:  # the limit truncates, counted in agent steps
        _, _, term, trunc, info = rows[25]
        assert trunc.all()
        assert not term.any()
        assert (info["elapsed_step"] == 25).all()


def test_stack_order_newest_last(real: ModuleType) -> None:
    """The stack's last frame is the newest: a reset fills all four with the first frame, each step shifts."""
    with both(real, "Breakout-v5", num_envs=1, seed=1) as (theirs, ours):
        rows = side_by_side(theirs, ours, 12)
    first = rows[0][0][0]
    assert all((frame == first[-1]).all() for frame in first)
    for before, after in itertools.pairwise(rows[1:]):
        assert (after[0][0][:-1] == before[0][0][1:]).all()


def test_explicit_reset_starts_a_new_game_under_episodic_life(real: ModuleType) -> None:
    """After a lost life the autoreset goes on with the game; ``reset()`` starts a new one, as EnvPool's."""
    with both(real, "Breakout-v5", num_envs=1, seed=2, episodic_life=True) as (theirs, ours):
        side_by_side(theirs, ours, 10)
        while True:
            out = theirs.step(np.zeros(1, int)), ours.step(np.zeros(1, int))
            assert same(*out)
            if out[0][2][0]:
                break
        assert out[0][4]["lives"][0] == 4
        again = theirs.reset(), ours.reset()
        assert same(*again)
        assert again[1][1]["lives"][0] == 5
        assert again[1][1]["elapsed_step"][0] == 0


def test_unknown_and_bad_options(real: ModuleType) -> None:
    """A misspelt option is a TypeError on both; aioenv's names the task and lists its options. Values EnvPool
    takes without a word (zero frames, a probability of 2) are a ValueError here, naming option and value."""
    with pytest.raises(TypeError):
        real.make("Pong-v5", "gymnasium", episodic_lives=True)
    with pytest.raises(TypeError, match=r"Pong-v5: unknown option\(s\) \['episodic_lives'\].*'episodic_life'"):
        envpool.make("Pong-v5", "gymnasium", episodic_lives=True)
    for bad, said in [
        ({"frame_skip": 0}, "frame_skip must be an int >= 1, got 0"),
        ({"stack_num": 0}, "stack_num must be an int >= 1, got 0"),
        ({"repeat_action_probability": 2.0}, r"repeat_action_probability must be a float in \[0, 1\], got 2.0"),
        ({"episodic_life": 3}, "episodic_life must be a bool, got 3"),
        ({"task": "breakout"}, "task is the ROM the id names \\('pong'\\), got 'breakout'"),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real.make("Pong-v5", "gymnasium", **bad).close()  # EnvPool builds it
        with pytest.raises(ValueError, match=f"Pong-v5: {said}"):
            envpool.make("Pong-v5", "gymnasium", **bad)


def test_list_all_envs_has_envpools_atari_ids(real: ModuleType) -> None:
    registry = importlib.import_module("envpool.registration").registry
    theirs = {t for t in real.list_all_envs() if registry.specs[t][0] == "envpool.atari"}
    assert theirs == set(ATARI_TASKS)
    assert set(ATARI_TASKS) <= set(envpool.list_all_envs())


def test_a_server_makes_the_atari_env_by_name() -> None:
    """The env factory crosses the wire by name, its options as msgpack: a server's workers make it."""
    srv = ServerProcess("--allow-env", SOURCE, "--allow-env-kwargs", f"{SOURCE}=*")
    kwargs = {"task": "breakout", "episodic_life": True, "reward_clip": True}
    try:

        async def remote_rows() -> list[Any]:
            async with aioenv.Pool(SOURCE, 2, endpoint=srv.endpoint, env_kwargs=kwargs, seed=[4, 5]) as pool:
                first = await pool.reset()
                return [first] + [await pool.step(np.ones(2, dtype=np.int64)) for _ in range(20)]

        rows = aioenv.run(remote_rows())
    finally:
        srv.stop()
    local = [AtariEnv(**kwargs) for _ in range(2)]
    for i, env in enumerate(local):
        obs, _ = env.reset(seed=4 + i)
        assert (rows[0][0][i] == obs).all()
        for row in rows[1:]:
            obs, reward, *_ = env.step(1)
            assert (row[0][i] == obs).all()
            assert row[1][i] == reward


def test_without_ale_py_make_says_what_to_install() -> None:
    proc = run_python(
        "-c",
        "import sys; sys.modules['ale_py'] = None\n"
        "import aioenv.compat.envpool as envpool\n"
        "assert 'Pong-v5' not in envpool.list_all_envs()\n"
        "try:\n    envpool.make('Pong-v5', num_envs=1)\n"
        "except ImportError as exc:\n    print(exc)\n",
        timeout=60,
    )
    assert "pip install 'aioenv[atari]'" in proc.stdout, proc.stdout + proc.stderr


def dm_layout_and_values(step: Any) -> Any:
    """A ``dm_env.TimeStep`` as plain nested tuples with its field names, for :func:`same`."""
    if hasattr(step, "_fields"):
        return (tuple(step._fields), *(dm_layout_and_values(v) for v in step))
    return np.asarray(step)


@pytest.mark.parametrize("zero_discount", [False, True])
def test_dm_timesteps_side_by_side(real: ModuleType, zero_discount: bool) -> None:
    """``env_type="dm"``: EnvPool's ``State`` holds the info fields too (``lives``, ``reward``, ``terminated``,
    ``ram``); a reset after a lost life is a FIRST step; ``zero_discount_on_life_loss`` gives discount 0 there."""
    kw = {"num_envs": 2, "seed": 9, "episodic_life": not zero_discount, "zero_discount_on_life_loss": zero_discount}
    theirs, ours = real.make("Breakout-v5", "dm", **kw), envpool.make("Breakout-v5", "dm", **kw)
    try:
        assert str(ours.observation_spec()) == str(theirs.observation_spec())
        assert same(dm_layout_and_values(theirs.reset()), dm_layout_and_values(ours.reset()))
        rng = np.random.default_rng(0)
        discounts = []
        for turn in range(200):
            action = rng.integers(theirs.action_spec().num_values, size=2)
            got = theirs.step(action), ours.step(action)
            assert same(*(dm_layout_and_values(g) for g in got)), f"step {turn}"
            discounts.append(got[0].discount)
        assert (np.asarray(discounts) == 0).any()
    finally:
        ours.close()
        theirs.close()

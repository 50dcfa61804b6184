"""Pools on the gymnasium release that is installed, whichever of those aioenv admits (``gymnasium>=1.0,<2``).

The suite runs on the newest release in ``make test`` and on the oldest ones in ``make test-matrix`` (noxfile.py):
gymnasium 1.0 has no ``gymnasium.vector.AutoresetMode`` and gymnasium before 1.4 no ``Dict(sort_keys=...)``
(aioenv/_compat.py). These are the first things a user pinned to such a release would try: a pool of a
registered env, every autoreset mode, and an env with a ``Dict`` observation space on each executor.
"""

from __future__ import annotations

import numpy as np
import pytest

import aioenv
from aioenv._compat import AutoresetMode
from tests.envs.dictenv import make_dict_env

MODES = ["next_step", "same_step", "disabled"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_pool_of_cartpole_starts_and_steps_in_every_autoreset_mode(mode: str) -> None:
    async with aioenv.Pool("CartPole-v1", 2, autoreset_mode=mode, seed=0) as pool:
        assert pool.autoreset_mode is AutoresetMode[mode.upper()]
        obs, _ = await pool.reset()
        assert obs.shape == (2, 4)
        for _ in range(5):  # CartPole pushed one way ends after ~9 steps: none ends here (mode "disabled")
            obs, rew, term, trunc, _ = await pool.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 4)
        assert rew.shape == term.shape == trunc.shape == (2,)


@pytest.mark.parametrize("executor", ["in_process", "inline", "thread"])
async def test_a_pool_of_a_dict_observation_env_starts_on_every_executor(executor: str) -> None:
    single = make_dict_env().observation_space
    async with aioenv.Pool(make_dict_env, 2, executor=executor, seed=0) as pool:
        assert pool.single_observation_space == single
        assert list(pool.single_observation_space.spaces) == list(single.spaces)
        obs, _ = await pool.reset()
        assert set(obs) == set(single.spaces)
        assert obs["pos"].shape == (2, 3)
        obs, *_ = await pool.step(np.ones(2, dtype=np.int64))
        assert obs["count"].shape == (2,)

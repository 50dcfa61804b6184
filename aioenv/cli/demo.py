"""``aioenv demo``: a real pool of CartPole envs on local workers, driven EnvPool-style.

It starts the pool, resets it with a seed, then runs send/recv with a batch of
half the envs: each ``recv`` returns whichever envs finished first, and the
policy (a fixed rule on the pole angle) answers only those. It reports what it did.

The demo asks for ``executor="inline"`` (the envs in worker processes), to show the pool's
workers at work: left to ``executor="auto"``, a pool of a few CartPole envs runs them in the
caller's process, which is faster for envs this cheap (docs/api.md, "executor").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import aioenv


@dataclass
class DemoReport:
    """What one demo run did."""

    env: str
    num_envs: int
    num_workers: int
    batch_size: int
    startup_s: float
    steps: int
    seconds: float
    episodes: int
    mean_return: float

    @property
    def steps_per_s(self) -> float:
        """Env-steps per second over the send/recv loop."""
        return self.steps / self.seconds if self.seconds else 0.0


def policy(obs: np.ndarray, rng: np.random.Generator, explore: float = 0.3) -> np.ndarray:
    """Push the cart the way the pole leans, with some random pushes.

    obs ``(B, 4)`` -> actions ``(B,)`` int64.
    """
    greedy = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    noise = rng.random(obs.shape[0]) < explore
    return np.where(noise, rng.integers(0, 2, obs.shape[0]), greedy)


async def run_demo(num_envs: int = 16, steps: int = 5000, num_workers: int | None = None, seed: int = 0) -> DemoReport:
    """Run the demo and return its report."""
    start = time.perf_counter()
    batch_size = max(1, num_envs // 2)
    async with aioenv.Pool(
        "CartPole-v1", num_envs, batch_size=batch_size, num_workers=num_workers, executor="inline"
    ) as pool:
        rng = np.random.default_rng(seed)
        obs, info = await pool.reset(seed=seed)
        startup = time.perf_counter() - start
        returns = np.zeros(num_envs)
        finished: list[float] = []
        pool.send(policy(obs, rng), info["env_id"])
        done_steps = 0
        t0 = time.perf_counter()
        while done_steps < steps:
            obs, reward, terminated, truncated, info = await pool.recv()
            ids = info["env_id"]
            returns[ids] += reward
            ended = terminated | truncated
            finished.extend(returns[ids[ended]].tolist())
            returns[ids[ended]] = 0.0
            done_steps += ids.size
            pool.send(policy(obs, rng), ids)
        elapsed = time.perf_counter() - t0
        await pool.recv(min_results=num_envs, max_results=num_envs)  # collect what is still in flight
        return DemoReport(
            "CartPole-v1",
            num_envs,
            pool.num_workers,
            pool.batch_size,
            startup,
            done_steps,
            elapsed,
            len(finished),
            float(np.mean(finished)) if finished else 0.0,
        )

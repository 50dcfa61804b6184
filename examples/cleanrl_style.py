"""A CleanRL-style training loop on ``aioenv.vector.AioVectorEnv`` (pure numpy, no torch).

The algorithm is the cross-entropy method on a linear policy for CartPole: every env runs
one candidate weight vector for one episode; when enough episodes are done, the best
candidates (the elite) give the new mean and spread to sample from. Episodic returns come
from gymnasium's vector ``RecordEpisodeStatistics``, printed as CleanRL prints them.

The only aioenv-specific line is the vector env's constructor (it was
``gym.vector.AsyncVectorEnv(...)``)::

    python examples/cleanrl_style.py --total-steps 20000 --num-envs 8
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv.vector import AioVectorEnv


def parse_args() -> argparse.Namespace:
    """Command-line arguments (CleanRL names where they exist)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1", help="a gymnasium id with a Box obs and Discrete(2) actions")
    parser.add_argument("--total-steps", type=int, default=20_000, help="env steps over all envs")
    parser.add_argument("--num-envs", type=int, default=8, help="parallel envs (one candidate each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--population", type=int, default=24, help="episodes per CEM update")
    parser.add_argument("--elite-frac", type=float, default=0.25, help="fraction of episodes kept as elite")
    parser.add_argument("--noise", type=float, default=0.05, help="extra std added at each update (exploration)")
    args = parser.parse_args()
    for name in ("total_steps", "num_envs", "population"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0 < args.elite_frac <= 1:
        parser.error(f"--elite-frac must be in (0, 1], got {args.elite_frac}")
    if args.noise < 0:
        parser.error(f"--noise must be >= 0, got {args.noise}")
    return args


def make_env(env_id: str) -> Callable[[], gym.Env[Any, Any]]:
    """A factory, as CleanRL's ``make_env`` (shipped to aioenv's worker processes with cloudpickle)."""

    def thunk() -> gym.Env[Any, Any]:
        return gym.make(env_id)

    return thunk


def act(weights: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Linear policy per env: ``weights`` ``(N, D + 1)`` (last column a bias), ``obs`` ``(N, D)``.

    Returns actions ``(N,)`` int64.
    """
    logits = np.einsum("nd,nd->n", weights[:, :-1], obs) + weights[:, -1]
    return (logits > 0).astype(np.int64)


def main() -> None:
    """Train and print ``global_step=..., episodic_return=...`` for every finished episode."""
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(
        AioVectorEnv([make_env(args.env_id) for _ in range(args.num_envs)])
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action spaces are supported"
    obs_shape = envs.single_observation_space.shape or ()
    dim = int(np.prod(obs_shape)) + 1
    mean, std = np.zeros(dim), np.ones(dim)
    weights = rng.normal(mean, std, size=(args.num_envs, dim))  # (N, D + 1): one candidate per env
    finished: list[tuple[float, np.ndarray]] = []
    n_elite = max(1, int(args.population * args.elite_frac))
    start = time.time()
    obs, _ = envs.reset(seed=args.seed)
    global_step = 0
    try:
        while global_step < args.total_steps:
            obs, _rewards, _terminations, _truncations, infos = envs.step(act(weights, obs.reshape(args.num_envs, -1)))
            global_step += args.num_envs
            if "episode" in infos:
                for i in np.flatnonzero(infos["_episode"]):
                    ret = float(infos["episode"]["r"][i])
                    print(f"global_step={global_step}, episodic_return={ret:.1f}")
                    finished.append((ret, weights[i].copy()))
                    weights[i] = rng.normal(mean, std)  # a new candidate for the env's next episode
            if len(finished) >= args.population:
                finished.sort(key=lambda item: item[0], reverse=True)
                elite = np.stack([w for _, w in finished[:n_elite]])
                mean, std = elite.mean(axis=0), elite.std(axis=0) + args.noise
                mean_ret = np.mean([r for r, _ in finished])
                print(
                    f"update: mean_return={mean_ret:.1f} elite_return={finished[0][0]:.1f} "
                    f"sps={global_step / (time.time() - start):.0f}"
                )
                finished.clear()
    finally:
        envs.close()


if __name__ == "__main__":
    main()

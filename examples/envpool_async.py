"""EnvPool's asynchronous loop, unchanged, on aioenv workers: `python examples/envpool_async.py`.

Only the import differs from EnvPool's documentation: ``import aioenv.compat.envpool as envpool``.
``recv()`` returns the first ``batch_size`` envs to finish; the policy answers exactly those.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import aioenv.compat.envpool as envpool  # was: import envpool


def policy(env: envpool.EnvPool, obs: Any, env_id: np.ndarray) -> np.ndarray:
    """A random policy: one action per row of ``obs`` (put yours here)."""
    return np.stack([env.action_space.sample() for _ in env_id])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="CartPole-v1", help="any gymnasium id")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=2_000, help="recv/send rounds")
    args = parser.parse_args()
    for name in ("num_envs", "iterations"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 1 <= args.batch_size <= args.num_envs:
        parser.error(f"--batch-size must be between 1 and --num-envs ({args.num_envs}), got {args.batch_size}")

    env = envpool.make(args.task, env_type="gymnasium", num_envs=args.num_envs, batch_size=args.batch_size)
    env.action_space.seed(0)
    returns = np.zeros(args.num_envs)
    finished: list[float] = []
    try:
        env.async_reset()  # every env resets; results come through recv()
        for _ in range(args.iterations):
            obs, rew, term, trunc, info = env.recv()
            env_id = info["env_id"]
            returns[env_id] += rew
            for i in env_id[term | trunc]:
                finished.append(float(returns[i]))
                returns[i] = 0.0  # EnvPool autoreset: the next step of env i starts a new episode
            action = policy(env, obs, env_id)
            env.send(action, env_id)
        env.recv()  # the last batch sent
    finally:
        env.close()
    steps = args.iterations * args.batch_size
    mean = np.mean(finished) if finished else float("nan")
    print(f"{steps} env steps over {args.num_envs} envs; {len(finished)} episodes, mean return {mean:.1f}")


if __name__ == "__main__":
    main()

"""PPO (Stable-Baselines3) on CartPole, with its envs in an aioenv pool: `python examples/sb3_ppo.py`.

The only change from SB3's own example is the VecEnv class: ``AioVecEnv`` instead of
``SubprocVecEnv``. Needs the ``sb3`` extra (``make extras``). The default
budget trains in about a minute on a laptop CPU; ``--timesteps`` sets another.
The pool places the envs itself (``executor="auto"``): CartPole steps so fast that a few of them run
in this process, with no message at all; the first line printed says where they ran.
"""

from __future__ import annotations

import argparse
import functools

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

from aioenv.compat.sb3 import AioVecEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=40_000, help="environment steps to train for")
    parser.add_argument("--num-envs", type=int, default=4, help="envs run in parallel")
    parser.add_argument("--eval-episodes", type=int, default=5, help="episodes for the final evaluation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("timesteps", "num_envs", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")

    # Each factory is shipped to a worker process; a partial of gym.make keeps workers light
    # (nothing from SB3 or torch is imported there).
    env_fns = [functools.partial(gym.make, "CartPole-v1") for _ in range(args.num_envs)]
    aio = AioVecEnv(env_fns)  # was: SubprocVecEnv(env_fns)
    venv = VecMonitor(aio)
    venv.seed(args.seed)
    try:
        model = PPO("MlpPolicy", venv, n_steps=256, batch_size=256, n_epochs=4, seed=args.seed, device="cpu")
        print(f"training PPO on {args.num_envs} CartPole envs for {args.timesteps:,} steps...")
        print(f"where they run: {aio.pool.pool.describe_placement()}")
        model.learn(total_timesteps=args.timesteps)
        mean, std = evaluate_policy(model, venv, n_eval_episodes=args.eval_episodes)
        print(f"trained {model.num_timesteps} steps; mean episode return {mean:.1f} +/- {std:.1f}")
    finally:
        venv.close()


if __name__ == "__main__":
    main()

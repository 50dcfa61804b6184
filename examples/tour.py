"""The README's tour, runnable: `python examples/tour.py`."""

import numpy as np

import aioenv


async def main() -> None:
    async with aioenv.Pool("CartPole-v1", num_envs=8, seed=0) as pool:
        obs, info = await pool.reset()  # obs (8, 4), info["env_id"] (8,)
        obs, reward, terminated, truncated, info = await pool.step(np.ones(8, dtype=np.int64))

        # a subset of envs, in any order
        obs, info = await pool.reset(env_ids=[5, 2])

        # EnvPool style: results in the order they finish
        pool.send(np.zeros(8, dtype=np.int64))
        obs, reward, terminated, truncated, info = await pool.recv(min_results=4, max_results=4)
        pool.send(np.ones(4, dtype=np.int64), info["env_id"])  # answer the first four at once
        obs, reward, terminated, truncated, info = await pool.recv(min_results=8)  # all still in flight
        print(f"recv: envs {info['env_id']} obs {obs.shape} rewards {reward} ended {terminated | truncated}")

        # one env, one future
        result = await pool.step_env(0, 1)  # StepResult(obs, reward, ..., env_id=0)
        print(f"env {result.env_id}: reward {result.reward}, obs {np.round(result.obs, 3)}")


if __name__ == "__main__":
    aioenv.run(main())  # asyncio.run, on uvloop when installed

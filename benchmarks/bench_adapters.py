"""Facade and adapter overhead, measured side by side in one run.

On the same workload (CartPole-v1 unless ``--env-id`` says another, n envs, random actions pre-sampled), env-steps/s
of:

- ``aioenv.Pool.step`` (the async core, on uvloop) — the reference for the facade's cost; also with
  ``autoreset_mode="same_step"``, the autoreset SB3 needs (an episode's end resets in the same step and
  its last observation travels in the info), the reference for the SB3 adapter's own cost;
- ``aioenv.SyncPool.step`` and ``aioenv.vector.AioVectorEnv.step`` (the sync facade and the
  gymnasium drop-in);
- ``aioenv.compat.sb3.AioVecEnv.step`` (the Stable-Baselines3 drop-in), when SB3 is installed;
- the peers they replace: ``gymnasium.vector.AsyncVectorEnv`` and SB3's ``SubprocVecEnv``, and the simplest
  peers, which step every env in the caller's own thread: ``gymnasium.vector.SyncVectorEnv`` and SB3's
  ``DummyVecEnv`` (cheap envs such as CartPole make them the ones to beat; the pools run such envs in the
  caller's process, and the sync facades then run each call in the caller's thread).

Run: ``python benchmarks/bench_adapters.py [--env-id Ant-v5] [--num-envs 8 32] [--seconds 2] [--repeats 5] [--quick]``
(an env whose infos are numbers every step, as MuJoCo's are, shows what the pools' info area saves the adapters).
Ratios are medians over rounds of the ratio within a round (see :func:`run`).
Writes ``benchmarks/results/adapters.json`` and ``adapters.md`` (or ``--out DIR``).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from recorded import command  # noqa: E402 - found through the path set above

import aioenv  # noqa: E402

ENV_ID = "CartPole-v1"


def _actions(env_id: str, n: int, count: int = 64) -> list[np.ndarray]:
    """``count`` batches of ``n`` random actions of ``env_id``'s action space (seeded)."""
    env = gym.make(env_id)
    space = env.action_space
    env.close()
    space.seed(0)
    return [np.stack([np.asarray(space.sample()) for _ in range(n)]) for _ in range(count)]


def _loop(step: Callable[[np.ndarray], Any], acts: list[np.ndarray], n: int, seconds: float) -> float:
    for a in acts[:10]:  # warm up
        step(a)
    k = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(acts[k % len(acts)])
        k += 1
    return k * n / (time.perf_counter() - start)


def bench_pool(env_id: str, n: int, seconds: float, autoreset_mode: str = "next_step") -> float:
    """The async core: ``await pool.step`` in a uvloop loop."""
    acts = _actions(env_id, n)

    async def main() -> float:
        async with aioenv.Pool(env_id, n, autoreset_mode=autoreset_mode) as pool:
            await pool.reset(seed=0)
            for a in acts[:10]:
                await pool.step(a)
            k = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                await pool.step(acts[k % len(acts)])
                k += 1
            return k * n / (time.perf_counter() - start)

    return aioenv.run(main())


def bench_syncpool(env_id: str, n: int, seconds: float) -> float:
    """``aioenv.SyncPool.step`` (one private loop thread)."""
    with aioenv.SyncPool(env_id, n) as pool:
        pool.reset(seed=0)
        return _loop(pool.step, _actions(env_id, n), n, seconds)


def _vector_rate(env: Any, env_id: str, n: int, seconds: float, **reset: Any) -> float:
    """Env-steps/s of a vector env's lock-step ``step`` (gymnasium's ``reset(seed=...)`` or SB3's ``reset()``);
    closes it."""
    try:
        env.reset(**reset)
        return _loop(env.step, _actions(env_id, n), n, seconds)
    finally:
        env.close()


def _fns(env_id: str, n: int) -> list[Callable[[], gym.Env[Any, Any]]]:
    return [functools.partial(gym.make, env_id)] * n


def bench_aio_vector(env_id: str, n: int, seconds: float) -> float:
    """``aioenv.vector.AioVectorEnv.step`` (gymnasium drop-in)."""
    from aioenv.vector import AioVectorEnv

    return _vector_rate(AioVectorEnv(_fns(env_id, n)), env_id, n, seconds, seed=0)


def bench_async_vector(env_id: str, n: int, seconds: float) -> float:
    """gymnasium's ``AsyncVectorEnv`` (the peer AioVectorEnv replaces)."""
    return _vector_rate(gym.vector.AsyncVectorEnv(_fns(env_id, n)), env_id, n, seconds, seed=0)


def bench_sync_vector(env_id: str, n: int, seconds: float) -> float:
    """gymnasium's ``SyncVectorEnv`` (every env stepped in the caller's thread, in turn)."""
    return _vector_rate(gym.vector.SyncVectorEnv(_fns(env_id, n)), env_id, n, seconds, seed=0)


def bench_dummy(env_id: str, n: int, seconds: float) -> float:
    """SB3's ``DummyVecEnv`` (every env stepped in the caller's thread, in turn)."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    return _vector_rate(DummyVecEnv(_fns(env_id, n)), env_id, n, seconds)


def bench_aio_vecenv(env_id: str, n: int, seconds: float) -> float:
    """``aioenv.compat.sb3.AioVecEnv.step`` (SB3 drop-in)."""
    from aioenv.compat.sb3 import AioVecEnv

    return _vector_rate(AioVecEnv(_fns(env_id, n)), env_id, n, seconds)


def bench_subproc(env_id: str, n: int, seconds: float) -> float:
    """SB3's ``SubprocVecEnv`` (the peer AioVecEnv replaces)."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    return _vector_rate(SubprocVecEnv(_fns(env_id, n)), env_id, n, seconds)


CELLS: dict[str, Callable[[str, int, float], float]] = {
    "Pool.step (async core)": bench_pool,
    "Pool.step (async core, same_step)": functools.partial(bench_pool, autoreset_mode="same_step"),
    "SyncPool.step": bench_syncpool,
    "AioVectorEnv.step": bench_aio_vector,
    "AsyncVectorEnv.step": bench_async_vector,
    "AioVecEnv.step (SB3)": bench_aio_vecenv,
    "SubprocVecEnv.step (SB3)": bench_subproc,
    "SyncVectorEnv.step": bench_sync_vector,
    "DummyVecEnv.step (SB3)": bench_dummy,
}


#: ratio name -> (numerator cell, denominator cell); "/ Pool.step" ratios are facade costs.
RATIOS = {
    "SyncPool.step / Pool.step": ("SyncPool.step", "Pool.step (async core)"),
    "AioVectorEnv.step / Pool.step": ("AioVectorEnv.step", "Pool.step (async core)"),
    "AioVecEnv.step (SB3) / Pool.step": ("AioVecEnv.step (SB3)", "Pool.step (async core)"),
    # the adapter's own cost: the core with the autoreset SB3 needs (same_step)
    "AioVecEnv.step (SB3) / Pool.step same_step": ("AioVecEnv.step (SB3)", "Pool.step (async core, same_step)"),
    "AioVectorEnv.step / AsyncVectorEnv.step": ("AioVectorEnv.step", "AsyncVectorEnv.step"),
    "AioVecEnv.step (SB3) / SubprocVecEnv.step (SB3)": ("AioVecEnv.step (SB3)", "SubprocVecEnv.step (SB3)"),
    "SyncPool.step / SyncVectorEnv.step": ("SyncPool.step", "SyncVectorEnv.step"),
    "AioVecEnv.step (SB3) / DummyVecEnv.step (SB3)": ("AioVecEnv.step (SB3)", "DummyVecEnv.step (SB3)"),
}


def run(env_id: str, n: int, seconds: float, repeats: int) -> dict[str, Any]:
    """Run every cell once per round, ``repeats`` rounds, starting each round at the next cell (so no cell
    always runs first or after the same neighbour). Throughput: the median per cell. Ratios: the median
    over rounds of the ratio within a round (both cells measured minutes apart at most, so a machine
    that drifts, as shared ones do, moves both)."""
    rounds: list[dict[str, float]] = []
    errors: dict[str, str] = {}
    names = list(CELLS)
    for r in range(repeats):
        this: dict[str, float] = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name in errors:
                continue
            try:
                this[name] = CELLS[name](env_id, n, seconds)
                print(f"[{r + 1}/{repeats}] {name}: {this[name]:,.0f} env-steps/s", flush=True)
            except Exception as exc:  # noqa: BLE001 - a missing extra or a failure is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {exc}"
                print(f"[{r + 1}/{repeats}] {name}: unavailable ({errors[name]})", flush=True)
        rounds.append(this)
    samples = {name: [rnd[name] for rnd in rounds if name in rnd] for name in CELLS}
    medians = {k: statistics.median(v) for k, v in samples.items() if v}
    ratios: dict[str, float] = {}
    for label, (num, den) in RATIOS.items():
        paired = [rnd[num] / rnd[den] for rnd in rounds if num in rnd and rnd.get(den)]
        if paired:
            ratios[label] = statistics.median(paired)
    return {"steps_per_s": medians, "samples": samples, "errors": errors, "ratios": ratios}


def to_markdown(env_id: str, results: dict[int, dict[str, Any]], command: str) -> str:
    """The results (one per number of envs) as Markdown tables."""
    lines = [f"`{command}`"]
    for n, result in results.items():
        lines += ["", f"{env_id}, n={n}", "", "| implementation | env-steps/s |", "| --- | --: |"]
        for name in CELLS:
            value = result["steps_per_s"].get(name)
            cell = f"{value:,.0f}" if value else result["errors"].get(name, "-")
            lines.append(f"| {name} | {cell} |")
        lines += ["", "| ratio | value |", "| --- | --: |"]
        for name, value in result["ratios"].items():
            note = f" (facade cost {1 - value:.0%})" if "/ Pool.step" in name else ""
            lines.append(f"| {name} | {value:.2f}x{note} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Parse arguments, run the cells, write JSON and Markdown, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default=ENV_ID, help=f"the env every cell steps (default {ENV_ID})")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 32], help="one run per value")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 1 s per cell")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    seconds, repeats = (1.0, 1) if args.quick else (args.seconds, args.repeats)
    results = {n: run(args.env_id, n, seconds, repeats) for n in args.num_envs}
    payload = {
        "command": command(),
        "env_id": args.env_id,
        "runs": {str(n): result for n, result in results.items()},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "adapters.json").write_text(json.dumps(payload, indent=2))
    markdown = to_markdown(args.env_id, results, payload["command"])
    (args.out / "adapters.md").write_text(markdown)
    print()
    print(markdown)


if __name__ == "__main__":
    main()

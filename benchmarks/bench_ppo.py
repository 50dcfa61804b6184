"""A training loop end to end: Stable-Baselines3 PPO on CartPole through each VecEnv, in one run.

PPO (``MlpPolicy``, 8 CartPole-v1 envs, 40k steps by default) trains once per VecEnv: SB3's
``DummyVecEnv`` (every env in the training process) and ``SubprocVecEnv``, and aioenv's ``AioVecEnv``
with ``executor="auto"`` (the default) and with ``executor="inline"`` (worker processes). Each run is a
fresh process, so torch's thread pool is set up as the variant says: torch's default (one thread per
core: its threads compete with worker processes for the cores) or ``torch.set_num_threads(1)``.

Printed and written (``benchmarks/results/ppo.{json,md}``): wall time of ``model.learn`` (median of the
repeats), its ratio to DummyVecEnv's with the same torch threads, each repeat's ratio to the DummyVecEnv run
of its round (their spread: how much one run's ratio moves on this machine), and whether the learning curve
(every finished episode's return, in order) is DummyVecEnv's own in every repeat: the same seed must give
the same training.

Run: ``python benchmarks/bench_ppo.py [--timesteps 40000] [--num-envs 8] [--repeats 1] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from recorded import command  # noqa: E402 - found through the path set above

VECENVS = ("dummy", "aioenv-auto", "aioenv-inline", "subproc")


def train(vecenv: str, threads: int | None, timesteps: int, num_envs: int, seed: int) -> dict[str, Any]:
    """Train PPO once in this process; returns the wall time and the episode returns in order."""
    import functools

    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor

    sys.path.insert(0, str(ROOT))
    from aioenv.compat.sb3 import AioVecEnv

    if threads is not None:
        torch.set_num_threads(threads)
    fns = [functools.partial(gym.make, "CartPole-v1") for _ in range(num_envs)]
    made: Any
    if vecenv == "dummy":
        made = DummyVecEnv(fns)
    elif vecenv == "subproc":
        made = SubprocVecEnv(fns)
    else:
        made = AioVecEnv(fns, executor=vecenv.removeprefix("aioenv-"))
    placement = made.pool.pool.describe_placement() if isinstance(made, AioVecEnv) else ""
    venv = VecMonitor(made)
    venv.seed(seed)
    returns: list[float] = []

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            returns.extend(float(i["episode"]["r"]) for i in self.locals["infos"] if "episode" in i)
            return True

    try:
        model = PPO("MlpPolicy", venv, n_steps=256, batch_size=256, n_epochs=4, seed=seed, device="cpu")
        model.set_logger(Logger(None, []))  # no output: SB3's default logger makes a directory in /tmp per run
        start = time.perf_counter()
        model.learn(total_timesteps=timesteps, callback=Episodes())
        wall = time.perf_counter() - start
    finally:
        venv.close()
    return {"wall": wall, "returns": returns, "threads": torch.get_num_threads(), "placement": placement}


def run_child(vecenv: str, threads: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """One training in a fresh interpreter (its own torch thread pool)."""
    cmd = [sys.executable, __file__, "--child", vecenv, "--timesteps", str(args.timesteps)]
    cmd += ["--num-envs", str(args.num_envs), "--seed", str(args.seed)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=40_000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="runs per cell, median wall time reported")
    p.add_argument("--quick", action="store_true", help="4,096 steps, to check the script runs")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ppo.json")
    p.add_argument("--child", choices=VECENVS, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(train(args.child, args.threads, args.timesteps, args.num_envs, args.seed)))
        return
    if args.quick:
        args.timesteps = 4096
    cells: dict[str, dict[str, Any]] = {}
    for threads in (None, 1):
        for _ in range(args.repeats):
            for vecenv in VECENVS:  # interleaved: a slow minute of the machine hits every VecEnv alike
                got = run_child(vecenv, threads, args)
                cell = cells.setdefault(f"{vecenv}|{threads or 'default'}", {"runs": []})
                cell["runs"].append(got)
                placement = got["placement"]
                print(f"{vecenv:14} torch threads {got['threads']}: {got['wall']:6.1f} s {placement}", flush=True)
    rows = rows_of(cells)
    report = {
        "command": command(),
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "timesteps": args.timesteps,
        "num_envs": args.num_envs,
        "rows": rows,
    }
    write(report, args.out)


def rows_of(cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per cell (``"vecenv|threads"`` -> its ``runs``, the repeats in the order they ran, interleaved
    with the other VecEnvs'): the median wall time and its ratio to DummyVecEnv's, and each repeat's wall time
    over the DummyVecEnv run of the same round (paired: the same minute of the machine), whose spread says
    how far a single ratio can be trusted; the learning curve is the same only if every repeat's is."""
    rows = []
    for key, cell in cells.items():
        vecenv, threads = key.split("|")
        runs, dummy = cell["runs"], cells[f"dummy|{threads}"]["runs"]
        walls, dummy_walls = [r["wall"] for r in runs], [r["wall"] for r in dummy]
        wall = statistics.median(walls)
        rows.append(
            {
                "vecenv": vecenv,
                "torch_threads": runs[0]["threads"],
                "wall_s": round(wall, 2),
                "vs_dummy": round(wall / statistics.median(dummy_walls), 3),
                "walls_s": [round(w, 2) for w in walls],
                "vs_dummy_rounds": [round(w / d, 3) for w, d in zip(walls, dummy_walls, strict=True)],
                "same_curve": all(r["returns"] == dummy[0]["returns"] for r in runs),
                "episodes": len(runs[0]["returns"]),
                "placement": runs[0]["placement"],
            }
        )
    return rows


def write(report: dict[str, Any], out: Path) -> None:
    """The JSON and a Markdown table beside it; the table is printed too."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"`{report['command'].strip()}`",
        "",
        f"{report['machine']}, {report['when']}; PPO MlpPolicy, {report['num_envs']} CartPole-v1 envs, "
        f"{report['timesteps']:,} steps",
        "",
        "| VecEnv | torch threads | wall s | / DummyVecEnv | each round / DummyVecEnv's | same learning curve "
        "| where the envs ran |",
        "| --- | --: | --: | --: | --: | --- | --- |",
    ]
    for r in report["rows"]:
        curve = "yes" if r["same_curve"] else "NO"
        rounds = r.get("vs_dummy_rounds") or []
        spread = f"{min(rounds):.2f}-{max(rounds):.2f}x" if len(rounds) > 1 and r["vecenv"] != "dummy" else ""
        lines.append(
            f"| {r['vecenv']} | {r['torch_threads']} | {r['wall_s']:.1f} | {r['vs_dummy']:.2f}x | {spread} | "
            f"{curve} ({r['episodes']} episodes) | {r['placement']} |"
        )
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

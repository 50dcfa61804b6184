"""TorchRL's collector over ``aioenv.compat.torchrl.AioEnv`` against it over TorchRL's own batched envs.

The workload of issue 19: CartPole-v1, 32 envs, a 64x64 MLP policy (``ProbabilisticActor`` sampling a one-hot
action from the MLP's logits, ``torch.manual_seed(0)``), TorchRL's ``Collector`` with ``frames_per_batch``
frames per batch. Frames/s of:

- ``AioEnv("CartPole-v1", 32, seed=0)`` with the pool's default ``executor="auto"`` (``aioenv``), and with
  ``executor="inline"`` (every env in worker processes: ``aioenv inline``);
- TorchRL's ``SerialEnv(32, GymEnv("CartPole-v1"))`` (``serial``);
- TorchRL's ``ParallelEnv(2, SerialEnv(16, GymEnv("CartPole-v1")))`` (``parallel``).

Each cell runs in a fresh Python process (TorchRL's ``ParallelEnv`` changes the process's torch thread count;
nothing one cell leaves behind reaches the next), with ``torch.set_num_threads(1)`` (the policy's batch is 32
rows: more threads only compete with the envs on a small machine). A cell builds the env and the collector,
collects two batches to warm up, then collects batches for ``--seconds`` and counts their frames. Cells run in
interleaved rounds with a rotating order; frames/s is the median per cell, a ratio the median over rounds of
the ratio within a round.

Run: ``python benchmarks/bench_torchrl.py [--seconds 5] [--repeats 3] [--frames-per-batch 1024] [--quick]
[--out DIR]``. Writes ``torchrl.json`` and ``torchrl.md`` to ``benchmarks/results`` (or ``--out DIR``) and
prints the table. ``--quick``: 1 round of 1 s per cell, a smoke run.
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
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from freshcell import run_fresh, versions  # noqa: E402 - found through the path set above
from recorded import command  # noqa: E402

ENV_ID = "CartPole-v1"
NUM_ENVS = 32

#: cell name -> what it measures (the Markdown table's second column)
CELLS = {
    "aioenv": 'AioEnv("CartPole-v1", 32), executor="auto" (the default)',
    "aioenv inline": 'AioEnv("CartPole-v1", 32, executor="inline"): every env in worker processes',
    "serial": 'SerialEnv(32, GymEnv("CartPole-v1"))',
    "parallel": 'ParallelEnv(2, SerialEnv(16, GymEnv("CartPole-v1")))',
}
#: ratio name -> (numerator cell, denominator cell)
RATIOS = {
    "aioenv / serial": ("aioenv", "serial"),
    "aioenv / parallel": ("aioenv", "parallel"),
    "aioenv inline / serial": ("aioenv inline", "serial"),
    "aioenv inline / parallel": ("aioenv inline", "parallel"),
}


# ----------------------------------------------------------------------------- one cell (in its own process)
def make_gym_env() -> Any:
    """One TorchRL ``GymEnv`` (a module-level function: ``ParallelEnv``'s workers unpickle it by reference)."""
    from torchrl.envs.libs.gym import GymEnv

    return GymEnv(ENV_ID)


def make_serial16() -> Any:
    """``SerialEnv(16, GymEnv)``, one of ``ParallelEnv``'s two workers."""
    from torchrl.envs import SerialEnv

    return SerialEnv(NUM_ENVS // 2, make_gym_env)


def build_env(cell: str) -> tuple[Any, str]:
    """The env of ``cell`` and a note (where the pool put its envs)."""
    from torchrl.envs import ParallelEnv, SerialEnv

    if cell in ("aioenv", "aioenv inline"):
        from aioenv.compat.torchrl import AioEnv

        options = {"executor": "inline"} if cell == "aioenv inline" else {}
        env = AioEnv(ENV_ID, NUM_ENVS, seed=0, **options)
        describe = getattr(env.pool.pool, "describe_placement", None)
        return env, describe() if callable(describe) else ""
    if cell == "serial":
        return SerialEnv(NUM_ENVS, make_gym_env), ""
    if cell == "parallel":
        return ParallelEnv(2, make_serial16), ""
    raise ValueError(f"unknown cell {cell!r}: one of {', '.join(CELLS)}")


def build_policy(env: Any) -> Any:
    """The 64x64 MLP policy: logits of the observation, a one-hot action sampled from them."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor

    torch.manual_seed(0)
    mlp = MLP(in_features=4, out_features=2, num_cells=[64, 64])
    return ProbabilisticActor(
        TensorDictModule(mlp, in_keys=["observation"], out_keys=["logits"]),
        spec=env.full_action_spec["action"],
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
    )


def run_cell(cell: str, seconds: float, frames_per_batch: int) -> dict[str, Any]:
    """Frames/s of TorchRL's ``Collector`` over the env of ``cell`` (in this process)."""
    import torch

    warnings.simplefilter("ignore", DeprecationWarning)  # torchrl.collectors' own deprecations at import
    from torchrl.collectors import Collector

    torch.set_num_threads(1)
    env, note = build_env(cell)
    collector = Collector(
        env,
        build_policy(env),
        frames_per_batch=frames_per_batch,
        total_frames=-1,
        auto_register_policy_transforms=False,
    )
    try:
        batches = iter(collector)
        for _ in range(2):  # warm up
            next(batches)
        frames, count = 0, 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            frames += next(batches).numel()
            count += 1
        elapsed = time.perf_counter() - start
    finally:
        collector.shutdown()
        if not env.is_closed:
            env.close()
    return {"frames_per_s": frames / elapsed, "frames": frames, "batches": count, "seconds": elapsed, "note": note}


# ----------------------------------------------------------------------------- the rounds (parent process)
def spawn_cell(cell: str, seconds: float, frames_per_batch: int) -> dict[str, Any]:
    """Run ``cell`` in a fresh interpreter; its result, or RuntimeError with its stderr."""
    args = ["--cell", cell, "--seconds", str(seconds), "--frames-per-batch", str(frames_per_batch)]
    return run_fresh(__file__, args, 600 + 4 * seconds, f"cell {cell!r}")


def run(seconds: float, repeats: int, frames_per_batch: int, cells: list[str]) -> dict[str, Any]:
    """Every cell once per round, ``repeats`` rounds, each round starting at the next cell."""
    rounds: list[dict[str, float]] = []
    errors: dict[str, str] = {}
    notes: dict[str, str] = {}
    for r in range(repeats):
        this: dict[str, float] = {}
        for cell in cells[r % len(cells) :] + cells[: r % len(cells)]:
            if cell in errors:
                continue
            try:
                out = spawn_cell(cell, seconds, frames_per_batch)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                errors[cell] = f"{type(exc).__name__}: {exc}"
                print(f"[{r + 1}/{repeats}] {cell}: failed ({errors[cell]})", flush=True)
                continue
            this[cell] = out["frames_per_s"]
            if out["note"]:
                notes[cell] = out["note"]
            print(f"[{r + 1}/{repeats}] {cell}: {this[cell]:,.0f} frames/s ({out['batches']} batches)", flush=True)
        rounds.append(this)
    samples = {cell: [rnd[cell] for rnd in rounds if cell in rnd] for cell in cells}
    medians = {cell: statistics.median(v) for cell, v in samples.items() if v}
    ratios: dict[str, float] = {}
    for label, (num, den) in RATIOS.items():
        paired = [rnd[num] / rnd[den] for rnd in rounds if num in rnd and rnd.get(den)]
        if paired:
            ratios[label] = statistics.median(paired)
    best_torchrl = max((medians[c] for c in ("serial", "parallel") if c in medians), default=None)
    target = None
    if best_torchrl and "aioenv" in medians:
        target = {
            "goal": "aioenv >= max(serial, parallel)",
            "aioenv": medians["aioenv"],
            "best_torchrl": best_torchrl,
            "met": medians["aioenv"] >= best_torchrl,
        }
    return {"frames_per_s": medians, "samples": samples, "ratios": ratios, "errors": errors, "notes": notes,
            "target": target}  # fmt: skip


def to_markdown(result: dict[str, Any]) -> str:
    """The results as Markdown tables."""
    v = result["versions"]
    lines = [
        f"`{result['command']}`",
        "",
        f"{result['cpus']} CPUs, Python {v['python']}, torch {v['torch']}, torchrl {v['torchrl']}, tensordict "
        f"{v['tensordict']}, gymnasium {v['gymnasium']}, {result['date']}",
        "",
        f"{ENV_ID}, {NUM_ENVS} envs, a 64x64 MLP policy, TorchRL's Collector, frames_per_batch="
        f"{result['frames_per_batch']}, {result['seconds']:g} s per cell, median of {result['repeats']}",
        "",
        "| env under the collector | frames/s |",
        "| --- | --: |",
    ]
    for cell in result["cells"]:
        value = result["frames_per_s"].get(cell)
        shown = f"{value:,.0f}" if value else result["errors"].get(cell, "-")
        lines.append(f"| {CELLS[cell]} | {shown} |")
    lines += ["", "| ratio | value |", "| --- | --: |"]
    lines += [f"| {name} | {value:.2f}x |" for name, value in result["ratios"].items()]
    if result["target"]:
        t = result["target"]
        lines += ["", f"Goal {t['goal']}: {'met' if t['met'] else 'MISSED'} ({t['aioenv']:,.0f} against "
                  f"{t['best_torchrl']:,.0f} frames/s)."]  # fmt: skip
    if result["notes"]:
        lines += ["", *(f"- {cell}: {note}" for cell, note in result["notes"].items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Parse arguments; run one cell (``--cell``) or every cell in rounds, write JSON and Markdown, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="collecting time per cell (default 5)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is reported (default 3)")
    parser.add_argument("--frames-per-batch", type=int, default=1024)
    parser.add_argument("--only", action="append", choices=list(CELLS), help="run these cells (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 s per cell")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="directory for the results")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell, print its JSON
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(run_cell(args.cell, args.seconds, args.frames_per_batch)), flush=True)
        return
    seconds, repeats = (1.0, 1) if args.quick else (args.seconds, args.repeats)
    cells = args.only or list(CELLS)
    result = run(seconds, repeats, args.frames_per_batch, cells)
    result.update(
        command=command(),
        cells=cells,
        seconds=seconds,
        repeats=repeats,
        frames_per_batch=args.frames_per_batch,
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        versions=versions(),
        machine={"platform": platform.platform()},
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "torchrl.json").write_text(json.dumps(result, indent=2))
    markdown = to_markdown(result)
    (args.out / "torchrl.md").write_text(markdown)
    print()
    print(markdown)


if __name__ == "__main__":
    main()

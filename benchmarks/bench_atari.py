"""EnvPool's Atari tasks: ``aioenv.compat.envpool`` against the real EnvPool, frames per second and a PPO run.

Two measurements, each run of each library in a fresh interpreter, the libraries interleaved (a slow minute of
the machine hits both alike):

- **random policy**: ``make("Pong-v5", num_envs=N)`` (EnvPool's defaults: 4 frames a step, 84x84 grey, 4
  stacked), random actions for ``--seconds`` seconds after a warm-up, in sync mode (``step`` of every env) and
  in async mode (EnvPool's ``send``/``recv`` loop, ``batch_size = N / 2``). Frames/s counts emulator frames
  (4 per step), as EnvPool's own benchmarks do.
- **PPO**: CleanRL's Atari PPO (``ppo_atari_envpool.py``: Nature CNN, ``episodic_life`` and ``reward_clip``,
  8 envs, 128 steps a rollout, 4 minibatches, 4 epochs, clip 0.1, learning rate 2.5e-4 annealed), written here
  after it, for ``--ppo-steps`` agent steps of ``--ppo-task`` on each library with the same seeds. Reported:
  wall time, steps/s, and every finished game's return (a game: all lives) in order; the environments are the
  same step for step (``tests/compat/test_envpool_atari.py``), so the two runs should learn alike.

Printed and written (``benchmarks/results/atari.{json,md}``).

Run: ``python benchmarks/bench_atari.py [--num-envs 8] [--seconds 5] [--repeats 3] [--ppo-steps 8192]``;
``--quick`` checks the script runs.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from recorded import command, settings  # noqa: E402 - found through the path set above

LIBS = ("envpool", "aioenv")
MODES = ("sync", "async")


def library(lib: str) -> Any:
    """The real EnvPool, or aioenv's drop-in for it (this checkout's)."""
    warnings.simplefilter("ignore")  # EnvPool's and gymnasium's deprecation notes
    if lib == "envpool":
        import envpool

        return envpool
    sys.path.insert(0, str(ROOT))
    import aioenv.compat.envpool as envpool_compat

    return envpool_compat


def random_policy(lib: str, mode: str, num_envs: int, seconds: float) -> dict[str, Any]:
    """Steps and frames per second of ``Pong-v5`` under random actions, after a one-second warm-up."""
    import numpy as np

    envpool = library(lib)
    batch = num_envs if mode == "sync" else max(1, num_envs // 2)
    env = envpool.make("Pong-v5", "gymnasium", num_envs=num_envs, batch_size=batch, seed=0)
    rng = np.random.default_rng(0)
    n = env.action_space.n
    try:
        if mode == "sync":
            env.reset()

            def one() -> int:
                env.step(rng.integers(n, size=num_envs))
                return num_envs
        else:
            env.async_reset()

            def one() -> int:
                *_, info = env.recv()
                ids = info["env_id"]
                env.send(rng.integers(n, size=len(ids)), ids)
                return len(ids)

        warm = time.perf_counter() + 1.0
        while time.perf_counter() < warm:
            one()
        steps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            steps += one()
    finally:
        env.close()
    return {"steps_per_s": steps / elapsed, "frames_per_s": 4 * steps / elapsed, "steps": steps}


def ppo(lib: str, task: str, total_steps: int, seed: int) -> dict[str, Any]:
    """CleanRL's Atari PPO, as ``ppo_atari_envpool.py`` runs it, on ``lib``; returns wall time and game returns."""
    import numpy as np
    import torch
    from torch import nn
    from torch.distributions.categorical import Categorical

    envpool = library(lib)
    num_envs, num_steps, minibatches, epochs = 8, 128, 4, 4
    gamma, lam, clip, ent_coef, vf_coef, lr = 0.99, 0.95, 0.1, 0.01, 0.5, 2.5e-4
    torch.manual_seed(seed)
    np.random.seed(seed)
    envs = envpool.make(task, "gym", num_envs=num_envs, episodic_life=True, reward_clip=True, seed=seed)
    n_actions = envs.action_space.n

    def layer(module: Any, std: float = 2**0.5) -> Any:
        torch.nn.init.orthogonal_(module.weight, std)
        torch.nn.init.constant_(module.bias, 0.0)
        return module

    body = nn.Sequential(
        layer(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(), layer(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
        layer(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(), layer(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
    )  # fmt: skip
    actor, critic = layer(nn.Linear(512, n_actions), 0.01), layer(nn.Linear(512, 1), 1.0)
    params = [*body.parameters(), *actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5)

    def policy(x: Any, action: Any = None) -> tuple[Any, Any, Any, Any]:
        hidden = body(x / 255.0)
        dist = Categorical(logits=actor(hidden))
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action), dist.entropy(), critic(hidden).flatten()

    shape = (num_steps, num_envs)
    obs_buf = torch.zeros(shape + envs.observation_space.shape)
    act_buf, logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(shape) for _ in range(5))
    returns, game = [], np.zeros(num_envs)
    next_obs = torch.Tensor(envs.reset()[0])
    next_done = torch.zeros(num_envs)
    iterations = max(1, total_steps // (num_envs * num_steps))
    start = time.perf_counter()
    for it in range(iterations):
        optimizer.param_groups[0]["lr"] = (1.0 - it / iterations) * lr
        for t in range(num_steps):
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                action, logp, _, value = policy(next_obs)
            act_buf[t], logp_buf[t], val_buf[t] = action, logp, value
            obs, reward, term, trunc, info = envs.step(action.numpy())
            rew_buf[t] = torch.tensor(reward)
            next_obs, next_done = torch.Tensor(obs), torch.Tensor(term | trunc)
            game += info["reward"]
            over = (term | trunc) & (info["lives"] == 0)
            returns.extend(float(r) for r in game[over])
            game[over] = 0.0
        with torch.no_grad():
            next_value = policy(next_obs)[3]
            adv, last = torch.zeros(shape), torch.zeros(num_envs)
            for t in reversed(range(num_steps)):
                alive = 1.0 - (next_done if t == num_steps - 1 else done_buf[t + 1])
                nxt = next_value if t == num_steps - 1 else val_buf[t + 1]
                delta = rew_buf[t] + gamma * nxt * alive - val_buf[t]
                adv[t] = last = delta + gamma * lam * alive * last
            ret = adv + val_buf
        b_obs, b_act = obs_buf.reshape((-1, *envs.observation_space.shape)), act_buf.reshape(-1)
        b_logp, b_adv, b_ret, b_val = logp_buf.reshape(-1), adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
        size = num_envs * num_steps
        for _ in range(epochs):
            order = np.random.permutation(size)
            for lo in range(0, size, size // minibatches):
                mb = order[lo : lo + size // minibatches]
                _, logp, entropy, value = policy(b_obs[mb], b_act.long()[mb])
                ratio = (logp - b_logp[mb]).exp()
                mb_adv = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
                pg = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
                clipped = b_val[mb] + torch.clamp(value - b_val[mb], -clip, clip)
                v_loss = 0.5 * torch.max((value - b_ret[mb]) ** 2, (clipped - b_ret[mb]) ** 2).mean()
                loss = pg - ent_coef * entropy.mean() + vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                optimizer.step()
    wall = time.perf_counter() - start
    envs.close()
    steps = iterations * num_envs * num_steps
    return {"wall_s": wall, "steps": steps, "steps_per_s": steps / wall, "returns": returns}


def run_child(*args: str) -> dict[str, Any]:
    """One measurement in a fresh interpreter; its result is the last line it prints."""
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds of each random-policy run")
    p.add_argument("--repeats", type=int, default=3, help="random-policy runs per cell (median reported)")
    p.add_argument("--ppo-steps", type=int, default=8192, help="agent steps of each PPO run (0: none)")
    p.add_argument("--ppo-task", default="Breakout-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="1 s runs, one repeat, 1,024 PPO steps")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "atari.json")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        kind, lib, *rest = args.child
        if kind == "random":
            print(json.dumps(random_policy(lib, rest[0], int(rest[1]), float(rest[2]))))
        else:
            print(json.dumps(ppo(lib, rest[0], int(rest[1]), int(rest[2]))))
        return
    if args.quick:
        args.seconds, args.repeats, args.ppo_steps = 1.0, 1, 1024
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for mode in MODES:
            for lib in LIBS:
                got = run_child("random", lib, mode, str(args.num_envs), str(args.seconds))
                runs.setdefault(f"{lib}|{mode}", []).append(got)
                print(f"{lib:8} {mode:5} {got['frames_per_s']:9.0f} frames/s", flush=True)
    rows = []
    for key, cell in runs.items():
        lib, mode = key.split("|")
        fps = statistics.median(r["frames_per_s"] for r in cell)
        base = statistics.median(r["frames_per_s"] for r in runs[f"envpool|{mode}"])
        rows.append(
            {
                "library": lib,
                "mode": mode,
                "frames_per_s": round(fps),
                "vs_envpool": round(fps / base, 3),
                "runs_frames_per_s": [round(r["frames_per_s"]) for r in cell],
            }
        )
    trained = {}
    if args.ppo_steps:
        for lib in LIBS:
            got = run_child("ppo", lib, args.ppo_task, str(args.ppo_steps), str(args.seed))
            trained[lib] = got
            print(f"{lib:8} PPO {got['steps']} steps in {got['wall_s']:.0f} s, {len(got['returns'])} games", flush=True)
    report = {
        "command": command(),
        "settings": settings(args),
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rows": rows,
        "ppo": trained,
        "ppo_same_returns": bool(trained) and trained["aioenv"]["returns"] == trained["envpool"]["returns"],
    }
    write(report, args.out)


def write(report: dict[str, Any], out: Path) -> None:
    """The JSON and a Markdown summary beside it; the summary is printed too."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    s = report["settings"]
    lines = [
        f"`{report['command'].strip()}`",
        "",
        f"{report['machine']}, {report['when']}; Pong-v5, {s['num_envs']} envs, random actions, "
        f"{s['seconds']:g} s a run, median of {s['repeats']}",
        "",
        "| library | mode | frames/s | / EnvPool | each run |",
        "| --- | --- | --: | --: | --- |",
    ]
    for r in report["rows"]:
        each = ", ".join(f"{f:,}" for f in r["runs_frames_per_s"])
        lines.append(f"| {r['library']} | {r['mode']} | {r['frames_per_s']:,} | {r['vs_envpool']:.2f}x | {each} |")
    if report["ppo"]:
        lines += [
            "",
            f"PPO (CleanRL's Atari PPO), {s['ppo_task']}, 8 envs, seed {s['seed']}:",
            "",
            "| library | agent steps | wall s | steps/s | games | mean return | returns in order |",
            "| --- | --: | --: | --: | --: | --: | --- |",
        ]
        for lib, r in report["ppo"].items():
            games = r["returns"]
            mean = f"{statistics.fmean(games):.2f}" if games else "-"
            shown = ", ".join(f"{g:g}" for g in games[:40]) + (" ..." if len(games) > 40 else "")
            lines.append(
                f"| {lib} | {r['steps']:,} | {r['wall_s']:.0f} | {r['steps_per_s']:.0f} | {len(games)} | {mean} | "
                f"{shown} |"
            )
        lines += ["", f"Same returns, game for game: {'yes' if report['ppo_same_returns'] else 'NO'}."]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""The pool's performance goals in one table: each goal, what its benchmark measured, and where it stands.

The goals (docs/performance.md, "The goals and where they stand") are spread over six benchmarks, each of
which measures its figures against its peers in the same run. This script gathers them: for each goal the
measured ratio, the bar, met or MISSED, and what this machine allows for it where a benchmark measures that
too (the ceiling: the same envs with no pool at all). Run from the repo root::

    .venv/bin/python benchmarks/bench_goals.py                # the committed results, at once
    .venv/bin/python benchmarks/bench_goals.py --run          # run the six benchmarks first (~35 min)
    .venv/bin/python benchmarks/bench_goals.py --run --quick  # their smoke runs (~3 min): figures mean nothing

Without ``--run`` it reads ``benchmarks/results/`` (or ``--results DIR``) and prints the table; each row says
when its figure was measured. With ``--run`` the benchmarks run one after another at their full settings (as
their committed results were made), their results going to ``--results`` (default: a new temporary directory;
never the committed ones), so every figure comes from this one invocation; ``goals.json`` and ``goals.md`` go
next to them (or to ``--out``, which a read without ``--run`` writes to as well). A missed goal never fails the
script: it exits 1 only when a benchmark it ran failed or a results file is unreadable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bars import MIB, fmt_bar_value, meets  # noqa: E402 - no psutil here (benchutil's): reading needs no extra
from recorded import command  # noqa: E402

Results = dict[str, Any]


@dataclass(frozen=True)
class Source:
    """A benchmark whose results hold goals: its script, its results file, and how it is run for them."""

    script: str
    results: str  # file name, in the results directory
    args: tuple[str, ...] = ()  # the arguments of a full run
    quick: tuple[str, ...] = ("--quick",)  # of a smoke run
    out_is_dir: bool = False  # --out takes the directory (else the JSON file's path)

    def out(self, directory: Path) -> Path:
        """What its ``--out`` takes for its results to land in ``directory``."""
        return directory if self.out_is_dir else directory / self.results


SOURCES: dict[str, Source] = {
    "small": Source("bench_small.py", "small.json"),
    "core": Source("bench_core.py", "core.json"),
    "ppo": Source("bench_ppo.py", "ppo.json", ("--repeats", "3")),
    "latency": Source("bench_latency.py", "latency.json", out_is_dir=True),
    "remote": Source("bench_remote.py", "remote.json", out_is_dir=True),
    "placement": Source("bench_placement.py", "placement.json"),
}


@dataclass(frozen=True)
class Goal:
    """One goal: ``value(results) op threshold``; ``ceiling(results)``: what this machine allows, as text."""

    name: str
    source: str  # a key of SOURCES
    op: str  # ">=", "<" or "<=" (bars.OPS)
    threshold: float
    unit: str  # "x", "%" or "MiB" (bars.fmt_bar_value)
    value: Callable[[Results], float | None]
    ceiling: Callable[[Results], str] = lambda _: ""


# ------------------------------------------------------------------ reading each benchmark's results


def small_ratio(size: int) -> Callable[[Results], float | None]:
    """bench_small: the median over alternated rounds of SyncVectorEnv's time per call over the pool's."""
    return lambda res: res["results"][f"{size}/auto"]["ratio"]


def core_ratio(workload: str, alternated: str) -> Callable[[Results], float | None]:
    """bench_core: a workload's pool against SyncVectorEnv alternated in one process in short slices (the median
    of the rounds' ratios; ``alternated``: ``"alternated"`` for step(), ``"alternated_sendrecv"`` for send/recv)."""
    return lambda res: res["workloads"][workload][alternated]["ratio"]


def core_ceiling(workload: str, alternated: str) -> Callable[[Results], str]:
    """bench_core's context of a workload: the quartiles of the alternated rounds; its envs split over as many
    processes as the pool's workers, stepping with no pool at all, free-running and lock-step; and the pool's
    step() and send/recv cells, each measured on its own (seconds apart from SyncVectorEnv's)."""

    def text(res: Results) -> str:
        wl = res["workloads"][workload]
        q1, q3 = wl[alternated]["quartiles"]
        r = wl["ratios"]
        return (
            f"rounds' quartiles {q1:.2f}-{q3:.2f}x; no pool, a process per worker: {r['cores/sync']:.2f}x "
            f"free-running, {r['cores_lockstep/sync']:.2f}x lock-step; cells apart: step() "
            f"{r['aioenv_step/sync']:.2f}x, send/recv {r['aioenv_sendrecv/sync']:.2f}x"
        )

    return text


def ppo_ratio(res: Results) -> float | None:
    """bench_ppo: AioVecEnv (``executor="auto"``) wall time over DummyVecEnv's, torch's default threads; None
    when the learning curve differs (then the wall time does not compare)."""
    rows = [r for r in res["rows"] if r["vecenv"] == "aioenv-auto"]
    row = max(rows, key=lambda r: r["torch_threads"])
    return row["vs_dummy"] if row["same_curve"] else None


def ppo_note(res: Results) -> str:
    rows = {r["torch_threads"]: r for r in res["rows"] if r["vecenv"] == "aioenv-auto"}
    curve = "same learning curve" if all(r["same_curve"] for r in rows.values()) else "learning curves DIFFER"
    threads = ", ".join(f"torch threads {t}: {r['vs_dummy']:.2f}x{rounds(r)}" for t, r in sorted(rows.items()))
    return f"{curve}; {threads}"


def rounds(row: dict[str, Any]) -> str:
    """The spread of a bench_ppo row's per-round ratios (recorded since the rounds are), or nothing."""
    each = row.get("vs_dummy_rounds") or []
    return f" (rounds {min(each):.2f}-{max(each):.2f}x)" if len(each) > 1 else ""


def bar_value(name_part: str, about: str | None = None) -> Callable[[Results], float | None]:
    """The value of the bar a benchmark judged itself (bench_latency, bench_remote) whose name holds
    ``name_part`` (and whose ``about`` is ``about``, when given)."""

    def value(res: Results) -> float | None:
        found = [b for b in res["bars"] if name_part in b["name"] and (about is None or b["about"] == about)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} bars named like {name_part!r} ({about or 'any loop'})")
        return found[0]["value"]

    return value


def alone(section: str, loop: str) -> Callable[[Results], str]:
    """bench_latency: where the loop's ceiling sits, what aioenv reached, what the same envs reach stepped
    alone (in one process, no pool), each as a fraction of ideal (envs / mean latency), and what
    the same loop reaches over bare pipes with no pool."""

    def text(res: Results) -> str:
        cells = res["sections"][section]["cells"]
        by_itself, ours = cells["the envs alone, no pool"], cells[loop]
        out = (
            f"of ideal: the loop's ceiling {ours['loop_ceiling']:.1%}, aioenv {ours['fraction_of_ideal']:.1%}, "
            f"the envs alone with no pool {by_itself['fraction_of_ideal']:.1%}"
        )
        bare = cells.get("no pool, the same loop over bare pipes")
        if bare is not None and bare.get("status") == "ok":
            out += f", the same loop over bare pipes with no pool {bare['fraction_of_ideal']:.1%}"
        return out

    return text


def remote_speeds(res: Results) -> str:
    """bench_remote: the interleaved cells' steps/s (medians of their repeats), and what a relay process costs
    the same loop with no pool (relay / direct over bare pipes) when the run has those cells."""
    sec = res["sections"]["cartpole"]
    out = ", ".join(f"{where} {cell['steps_per_s']:,.0f}" for where, cell in sec["cells"].items()) + " steps/s"
    if (bare := sec.get("ratio_bare_relay_direct")) is not None:
        out += f"; no pool, a relay process / direct over bare pipes {bare:.2f}x"
    alt = sec.get("alternated") or {}
    if "cpu" in alt:  # the three pools alternated in one process (remote_alternated.py)
        speeds = ", ".join(f"{where} {value:,.0f}" for where, value in alt["steps_per_s"].items())
        cpu = alt["cpu"]
        costs = ", ".join(
            f"{where} {c['client_us_per_batch']:,.0f}"
            + (f" + server {c['server_us_per_batch']:,.0f}" if c["server_us_per_batch"] is not None else "")
            for where, c in cpu.items()
        )
        out += f"; alternated in one process: {speeds} steps/s, CPU µs a batch {costs}"
    return out


def placement_worst(res: Results) -> float | None:
    """bench_placement: the default placement over the best explicit one, the worst make of every workload."""
    return min(cell["worst"] for cell in res["results"].values())


def placement_each(res: Results) -> str:
    """bench_placement: each workload's worst make, and the usable CPUs."""
    each = ", ".join(f"{name} {cell['worst']:.2f}x" for name, cell in res["results"].items())
    return f"worst make per workload ({res['usable_cpus']} usable CPUs): {each}"


def mib(value: Callable[[Results], float | None]) -> Callable[[Results], float | None]:
    """``value``'s bytes in MiB."""
    return lambda res: None if (v := value(res)) is None else v / MIB


GOALS: list[Goal] = [
    Goal("CartPole-v1 n=8, lock-step step() / SyncVectorEnv", "small", ">=", 1.0, "x", small_ratio(8)),
    Goal("CartPole-v1 n=32, lock-step step() / SyncVectorEnv", "small", ">=", 1.0, "x", small_ratio(32)),
    Goal(
        "CartPole-v1 n=128, send/recv / SyncVectorEnv, alternated",
        "core",
        ">=",
        1.6,
        "x",
        core_ratio("cartpole-128", "alternated_sendrecv"),
        core_ceiling("cartpole-128", "alternated_sendrecv"),
    ),
    Goal(
        "Ant-v5 n=32, step() / SyncVectorEnv, alternated",
        "core",
        ">=",
        1.9,
        "x",
        core_ratio("ant-32", "alternated"),
        core_ceiling("ant-32", "alternated"),
    ),
    Goal("SB3 PPO, 8 CartPole-v1 envs: AioVecEnv / DummyVecEnv wall time", "ppo", "<=", 1.1, "x", ppo_ratio, ppo_note),
    Goal(
        "64 thread envs (20 ms), recv() batch 16: of the loop's ceiling",
        "latency",
        ">=",
        0.97,
        "%",
        bar_value("thread, 64 SleepEnv, mean 20 ms: of loop ceiling"),
        alone("thread64", "batch:16"),
    ),
    Goal(
        "1,024 async envs (20 ms), recv() batch 256: of the loop's ceiling",
        "latency",
        ">=",
        0.97,
        "%",
        bar_value("async, 1,024 AsyncSleepEnv, mean 20 ms: of loop ceiling", "recv(), batch_size=256"),
        alone("async1k", "batch:256"),
    ),
    Goal(
        "10,000 async envs (1 s): of ideal",
        "latency",
        ">=",
        0.97,
        "%",
        bar_value("async, 10,000 AsyncSleepEnv, mean 1000 ms: of ideal"),
    ),
    Goal(
        "10,000 async envs (1 s): RSS of the process tree",
        "latency",
        "<=",
        1024.0,
        "MiB",
        mib(bar_value("async, 10,000 AsyncSleepEnv, mean 1000 ms: process tree RSS")),
    ),
    Goal(
        "remote pool (aioenv serve, unix socket), CartPole-v1 n=128 send/recv / embedded, alternated",
        "remote",
        ">=",
        0.8,
        "x",
        bar_value("alternated, remote (unix socket) / embedded"),
        remote_speeds,
    ),
    Goal(
        "remote pool (aioenv serve, tcp loopback), CartPole-v1 n=128 send/recv / embedded, alternated",
        "remote",
        ">=",
        0.8,
        "x",
        bar_value("alternated, remote (tcp) / embedded"),
        remote_speeds,
    ),
    Goal(
        "default placement / the best explicit one, every workload's worst make",
        "placement",
        ">=",
        0.9,
        "x",
        placement_worst,
        placement_each,
    ),
]


def when(res: Results) -> str:
    """When a benchmark ran (its results' date, to the minute)."""
    stamp = str(res.get("date") or res.get("when") or "")
    return stamp[:16].replace("T", " ")


def judge(goal: Goal, results: dict[str, Results | str]) -> dict[str, Any]:
    """A goal's row: its value, met or not, the ceiling and when it was measured; or why there is no value."""
    row: dict[str, Any] = {"goal": goal.name, "source": SOURCES[goal.source].script, "op": goal.op}
    row |= {"threshold": goal.threshold, "unit": goal.unit, "value": None, "met": None, "ceiling": "", "when": ""}
    res = results[goal.source]
    if isinstance(res, str):  # why it could not be read
        row["missing"] = res
        return row
    try:
        value = goal.value(res)
        ceiling = goal.ceiling(res)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        row["missing"] = f"{SOURCES[goal.source].results} has no figure for it ({type(exc).__name__}: {exc})"
        return row
    row |= {"value": value, "met": meets(value, goal.op, goal.threshold), "ceiling": ceiling, "when": when(res)}
    return row


# ------------------------------------------------------------------ running, reading, writing


def run_sources(names: list[str], results: Path, quick: bool) -> dict[str, str]:
    """Run the benchmarks ``names`` one after another into ``results``; name -> why it failed, for those that did."""
    failed: dict[str, str] = {}
    for name in names:
        src = SOURCES[name]
        cmd = [sys.executable, str(ROOT / "benchmarks" / src.script), *(src.quick if quick else src.args)]
        print(f"== {command(cmd[1:])}", flush=True)
        proc = subprocess.run([*cmd, "--out", str(src.out(results))], cwd=ROOT, check=False)
        if proc.returncode != 0:
            failed[name] = f"{src.script} exited with code {proc.returncode}"
    if failed:
        hint = 'one that stops at an import needs the bench extra: make bench-goals, or pip install -e ".[bench]"'
        print(f"({hint})", file=sys.stderr)
    return failed


def read_sources(results: Path, failed: dict[str, str], ran: list[str] | None) -> dict[str, Results | str]:
    """Each benchmark's results, or why there are none; ``ran``: the benchmarks this invocation ran (None: it
    ran none, it reads what is there), whose results alone it reads."""
    out: dict[str, Results | str] = {}
    for name, src in SOURCES.items():
        path = results / src.results
        if name in failed:
            out[name] = failed[name]
        elif ran is not None and name not in ran:
            out[name] = f"{src.script} was not run (--only)"
        elif not path.is_file():
            out[name] = f"no {src.results} among the results (run benchmarks/{src.script})"
        else:
            try:
                out[name] = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                out[name] = f"{src.results} is unreadable: {exc}"
    return out


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """The table of goals (and how many were met) under ``header``."""
    word = {True: "met", False: "MISSED", None: "n/a"}
    lines = [
        header,
        "",
        "| goal | measured | bar | result | on this machine | measured by, when (UTC) |",
        "| --- | --: | --: | --- | --- | --- |",
    ]
    for r in rows:
        cells = [
            r["goal"],
            fmt_bar_value(r, r["value"]),
            f"{r['op']} {fmt_bar_value(r, r['threshold'], measured=False)}",
            word[r["met"]],
            r.get("missing") or r["ceiling"],
            f"{r['source']}, {r['when']}" if r["when"] else r["source"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    met = sum(1 for r in rows if r["met"])
    return "\n".join([*lines, "", f"{met} of {len(rows)} goals met."]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="store_true", help="run the benchmarks first (into --results)")
    p.add_argument("--quick", action="store_true", help="with --run: their smoke runs (the figures mean nothing)")
    p.add_argument("--only", action="append", choices=list(SOURCES), help="with --run: run only these (repeatable)")
    p.add_argument(
        "--results", type=Path, help="results directory (default: benchmarks/results; with --run, a new one)"
    )
    p.add_argument("--out", type=Path, help="write goals.json and goals.md here (default: with --run, --results)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    committed = ROOT / "benchmarks" / "results"
    if (args.quick or args.only) and not args.run:
        p.error("--quick and --only choose what --run runs; add --run")
    if args.run and args.results is not None and args.results.resolve() == committed.resolve():
        p.error("--run writes a new set of results: give --results a directory other than benchmarks/results")
    if not args.run and args.results is not None and not args.results.is_dir():
        p.error(f"--results {args.results}: no such directory (the benchmarks write theirs with --run)")
    if args.run and args.results is None:
        args.results = Path(tempfile.mkdtemp(prefix="aioenv-goals-"))
    results = args.results or committed
    print(f"results: {results}", flush=True)
    ran = (args.only or list(SOURCES)) if args.run else None
    failed = run_sources(ran, results, args.quick) if ran is not None else {}
    read = read_sources(results, failed, ran)
    rows = [judge(goal, read) for goal in GOALS]
    if args.run:
        how = "measured by this run" + (" (smoke runs: the figures mean nothing)" if args.quick else "")
    else:
        how = "as " + ("benchmarks/results" if results == committed else str(results)) + " holds them"
    cmd = command([str(Path(__file__)), *(sys.argv[1:] if argv is None else argv)], drop=("--out", "--results"))
    text = markdown(rows, f"`{cmd}`\n\nThe goals, {how}.")
    print(text, end="")
    out = args.out or (results if args.run else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "goals.json").write_text(json.dumps({"command": cmd, "measured": how, "rows": rows}, indent=1))
        (out / "goals.md").write_text(text)
    unreadable = any("unreadable" in r.get("missing", "") for r in rows)
    return 1 if failed or unreadable else 0


if __name__ == "__main__":
    sys.exit(main())

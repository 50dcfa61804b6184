"""Issue 56's cells on a machine with many cores, in one command that fits a short lease.

A session may be lent a machine with 16 cores for minutes at a time (``docs/performance.md``, "On a machine
with many cores"); every figure the goals of a big machine need must come out of one run there. This script
runs the project's own benchmarks one after another, each with the sizes of those goals and windows short
enough for the whole to fit ``--budget`` seconds, and gathers what they wrote into two files (the device
returns few):

1. ``core``: ``bench_core.py`` on CartPole-v1 n = 32 and 256, Ant-v5 n = 32 and 128: SyncVectorEnv,
   AsyncVectorEnv (n <= 64), the floor, the ceiling, aioenv's ``step()`` and ``send``/``recv``, and each pool
   process's CPU per message against the floor's;
2. ``latency``: ``bench_latency.py``, 1,024 async envs (20 ms) in batches of 256;
3. ``latency-x8``: the same with ``--scale 8``: 8,192 async envs in batches of 2,048 and 512 thread envs in
   batches of 128;
4. ``remote``: ``bench_remote.py``, CartPole-v1 n = 256 ``send``/``recv`` embedded, over tcp and over a unix
   socket, in windows and alternated in one process (with the client's and the server's CPU a batch);
5. ``placement``: ``bench_placement.py``, ``executor="auto"`` against every explicit placement on the workloads
   of 1 (one make each);
6. ``adapters``: ``bench_adapters.py``, 64 CartPoles through SB3's ``AioVecEnv``, ``DummyVecEnv`` and
   ``SubprocVecEnv``;
7. ``adapters-ant``: the same with 64 Ant-v5, whose numeric infos every step go through the pools' info area;
8. ``lockstep-bare``: ``bare_lockstep.py``, a lock-step exchange of no pool with 16 worker processes that each
   step 2 CartPoles a request: the floor's blocking way, an event loop's, one shared done pipe (the pool's way),
   first-finished batches, and one futex wake-up for every worker (``bell``), each the driving process's CPU per
   message. Whether the bell spends less of it than the shared pipe where every worker has a core of its own is
   what 2 vCPUs cannot tell (docs/performance.md, "Measured and left out (2026-12-01, evening)");
9. ``cost-shapes``: ``cost_shapes.py``, the pool's CPU per message for CartPole, stand-ins of Ant-v5 that differ
   from it in one thing at a time, and Ant-v5: whether what MuJoCo's workers leave a pool's caches still costs it
   where it has a core of its own (docs/performance.md, "What of Ant's cost per message is the pool's");
10. ``latency-trace``: ``latency_trace.py --scale 8``, 512 thread envs in batches of 128 and 8,192 async envs in
    batches of 2,048 whose steps say when they began and ended: where the rest of a step's time goes between the
    pool handing a batch over and the envs starting their next steps, on a machine where the thread goal read 81.5%
    (docs/performance.md, "A recorded row wakes no worker loop").

Before the first step it makes sure the pool runs its compiled hot path (``aioenv/_speedups.c``): a working tree
carried to another machine holds no build of it for that machine's Python, so where none imports it is compiled
in place with the interpreter's own compiler settings (``sysconfig``); the record says which path ran and why.

The goals' cells come first; the three steps that only take figures apart (8 to 10) run last, while the budget
leaves them room. A step runs only while the budget leaves it its estimate; one that overruns what is left is
stopped, and the steps after it still run if they fit. Outputs, in ``--out`` (default ``benchmarks/results/many_core``):
``many_core.json`` (each step's command, exit code, seconds and the JSON its benchmark wrote) and
``many_core.md`` (each step's Markdown, in order).

Run (``--quick``: every step at its smallest, here, to check the script before a lease)::

    python benchmarks/many_core.py [--quick] [--budget 540] [--only STEP] [--out DIR]

On the 16-core machine (``../shared/tools/many-core/``: wheels carried in ``.whl``)::

    bash .whl/run.sh python3 benchmarks/many_core.py --out $OUT
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_goals import Source  # noqa: E402 - found through the path set above
from recorded import command  # noqa: E402

from aioenv import _hot  # noqa: E402
from aioenv.transport.spawn import usable_cpus  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "many_core"
#: The whole run's seconds by default: a 10-minute command with room for the machine's own start.
DEFAULT_BUDGET = 540.0


@dataclass(frozen=True)
class Step:
    """One benchmark run (``source``: its script, its arguments, full and ``--quick``, and where its results land)
    and how many seconds it takes at most on 16 cores (``estimate``) or here (``quick_estimate``)."""

    name: str
    source: Source
    estimate: float
    quick_estimate: float


CORE_WORKLOADS = ("cartpole-32", "cartpole-256", "ant-32", "ant-128")
PLACEMENT_WORKLOADS = ("cartpole-32", "cartpole-32-sr", "cartpole-256", "cartpole-256-sr", "ant-32", "ant-128")


def _only(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(arg for name in names for arg in ("--only", name))


STEPS = (
    Step(
        "core",
        Source(
            "bench_core.py",
            "core.json",
            (*_only(CORE_WORKLOADS), "--seconds", "1", "--repeats", "1", "--rounds", "5"),
            ("--quick", "--only", "cartpole-32"),
        ),
        200.0,
        120.0,
    ),
    Step(
        "latency",
        Source(
            "bench_latency.py",
            "latency.json",
            ("--only", "async1k", "--loops", "batch:256", "--seconds", "3", "--retries", "0"),
            ("--quick", "--only", "async1k", "--loops", "batch:16"),
            out_is_dir=True,
        ),
        40.0,
        40.0,
    ),
    Step(
        "latency-x8",
        Source(
            "bench_latency.py",
            "latency.json",
            ("--only", "async1k", "--only", "thread64", "--scale", "8", "--loops", "batch:256", "--seconds", "3"),
            ("--quick", "--only", "async1k", "--only", "thread64", "--scale", "2", "--loops", "batch:8"),
            out_is_dir=True,
        ),
        90.0,
        60.0,
    ),
    Step(
        "remote",
        Source(
            "bench_remote.py",
            "remote.json",
            (
                *("--only", "cartpole", "--cartpole-envs", "256", "--num-workers", "8"),
                *("--repeats", "2", "--seconds", "2", "--alternated-seconds", "8"),
            ),
            ("--quick", "--only", "cartpole"),
            out_is_dir=True,
        ),
        75.0,
        60.0,
    ),
    Step(
        "placement",
        Source(
            "bench_placement.py",
            "placement.json",
            (*_only(PLACEMENT_WORKLOADS), "--makes", "1", "--rounds", "4"),
            ("--quick", "--only", "cartpole-32-sr"),
        ),
        150.0,
        60.0,
    ),
    Step(
        "adapters",
        Source(
            "bench_adapters.py",
            "adapters.json",
            ("--num-envs", "64", "--seconds", "1", "--repeats", "3"),
            ("--quick", "--num-envs", "8"),
            out_is_dir=True,
        ),
        60.0,
        60.0,
    ),
    Step(
        "adapters-ant",
        Source(
            "bench_adapters.py",
            "adapters.json",
            ("--env-id", "Ant-v5", "--num-envs", "64", "--seconds", "1", "--repeats", "3"),
            ("--quick", "--env-id", "Ant-v5", "--num-envs", "4"),
            out_is_dir=True,
        ),
        90.0,
        90.0,
    ),
    Step(
        "lockstep-bare",
        Source(
            "bare_lockstep.py",
            "bare_lockstep.json",
            ("--workers", "16", "--seconds", "2", "--cartpole", "2"),
            ("--workers", "4", "--seconds", "0.3", "--cartpole", "2"),
        ),
        40.0,
        20.0,
    ),
    Step(
        "cost-shapes",
        Source(
            "cost_shapes.py",
            "cost_shapes.json",
            ("--workers", "16", "--envs", "32", "--seconds", "1", "--rounds", "2"),
            ("--workers", "2", "--envs", "4", "--seconds", "0.1", "--rounds", "1"),
        ),
        60.0,
        30.0,
    ),
    Step(
        "latency-trace",
        Source(
            "latency_trace.py",
            "latency_trace.json",
            ("--scale", "8", "--seconds", "3", "--warmup", "1"),
            ("--quick",),
        ),
        45.0,
        20.0,
    ),
)
STEP_NAMES = tuple(step.name for step in STEPS)


def run_step(step: Step, quick: bool, scratch: Path, left: float) -> dict[str, Any]:
    """Run one step with at most ``left`` seconds; its record: command, exit code, seconds, results (or why
    there are none), and its Markdown."""
    src = step.source
    where = scratch / step.name
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / src.script), *(src.quick if quick else src.args)]
    cmd += ["--out", str(src.out(where))]
    shown = command(cmd[1:])
    print(f"== [{step.name}] {shown} (at most {left:.0f} s)", flush=True)
    start = time.monotonic()
    record: dict[str, Any] = {"command": shown}
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)  # its servers and workers: one group to stop
    try:
        record["returncode"] = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        record["returncode"] = None
        record["why"] = f"stopped after {left:.0f} s, what was left of the budget"
    record["seconds"] = round(time.monotonic() - start, 1)
    results = where / src.results
    markdown = results.with_suffix(".md")
    if results.is_file():
        record["results"] = json.loads(results.read_text())
    else:
        record.setdefault("why", f"{src.script} wrote no {src.results}")
    record["markdown"] = markdown.read_text() if markdown.is_file() else ""
    return record


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a step that overran: SIGTERM to its whole process group (the benchmark, and the servers and workers it
    started), then, 10 s on, SIGKILL to whatever of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def ensure_compiled() -> str:
    """Make sure this tree's ``aioenv/_speedups.c`` imports under this Python (built in place when no build does)
    and say how the steps' pools run: compiled, or on the pure-Python twins and why."""
    probe = [sys.executable, "-c", "from aioenv import _hot; print(_hot.compiled is not None)"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    def compiled() -> bool:
        return subprocess.run(probe, capture_output=True, text=True, cwd=ROOT, env=env).stdout.strip() == "True"

    if _hot.pure_chosen():
        return f"pure Python ({_hot.PURE_ENV} is set)"
    if compiled():
        return "compiled (aioenv/_speedups.c, built already)"
    try:
        target = build_speedups(ROOT / "aioenv")
    except subprocess.CalledProcessError as exc:
        return f"pure Python (building aioenv/_speedups.c failed: {(exc.stderr or exc.stdout).strip()[-300:]})"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"pure Python (building aioenv/_speedups.c failed: {exc})"
    if not compiled():
        return f"pure Python ({target.name} was built but does not import)"
    return f"compiled (aioenv/_speedups.c, built here as {target.name})"


def build_speedups(into: Path) -> Path:
    """Compile ``aioenv/_speedups.c`` into ``into`` for this Python, with its own compiler settings; the module's
    path. Raises ``OSError`` (no compiler) or ``subprocess.CalledProcessError`` (its output in ``stderr``)."""
    target = into / f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}"
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    flags = [*shlex.split(sysconfig.get_config_var("CFLAGS") or ""), "-O2", "-fPIC", "-shared"]
    cmd = [*cc, *flags, "-I", sysconfig.get_path("include"), str(ROOT / "aioenv" / "_speedups.c"), "-o", str(target)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if build.returncode != 0:
        raise subprocess.CalledProcessError(build.returncode, cmd, build.stdout, build.stderr)
    return target


def run(names: list[str], quick: bool, budget: float, out: Path) -> dict[str, Any]:
    """Run the steps ``names`` in order within ``budget`` seconds; write and return the gathered record."""
    began = time.monotonic()
    summary: dict[str, Any] = {
        "command": command(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": quick,
        "budget_s": budget,
        "steps": {},
    }
    summary["cpus"] = usable_cpus()
    summary["hot_path"] = ensure_compiled()
    print(f"== the hot path: {summary['hot_path']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="aioenv-many-core-") as tmp:
        for step in STEPS:
            if step.name not in names:
                continue
            left = budget - (time.monotonic() - began)
            estimate = step.quick_estimate if quick else step.estimate
            if left < estimate:
                why = f"not run: {left:.0f} s of the budget left, it takes up to {estimate:.0f} s"
                print(f"== [{step.name}] {why}", flush=True)
                summary["steps"][step.name] = {"why": why, "markdown": ""}
                continue
            summary["steps"][step.name] = run_step(step, quick, Path(tmp), left)
    summary["seconds"] = round(time.monotonic() - began, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "many_core.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "many_core.md").write_text(to_markdown(summary))
    return summary


def to_markdown(summary: dict[str, Any]) -> str:
    """Each step's command and outcome, then the Markdown its benchmark wrote."""
    lines = [
        f"# Many cores: `{summary['command']}`",
        "",
        f"{summary['date']}, {summary['cpus']} usable CPUs, {summary.get('seconds', '?')} s of a "
        f"{summary['budget_s']:.0f} s budget; the pools' hot path: {summary.get('hot_path', '?')}",
        "",
    ]
    for name, record in summary["steps"].items():
        outcome = record.get("why") or f"exit {record.get('returncode')}, {record.get('seconds')} s"
        lines += [f"## {name}", "", f"`{record.get('command', '')}`: {outcome}", "", record["markdown"], ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="every step at its smallest (a check of the script)")
    p.add_argument("--only", action="append", choices=STEP_NAMES, help="run these steps (repeatable; default all)")
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help=f"seconds for the whole run (default {DEFAULT_BUDGET:g})",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for many_core.json and many_core.md")
    args = p.parse_args(argv)
    if args.budget <= 0:
        p.error(f"--budget must be positive, got {args.budget}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary = run(args.only or list(STEP_NAMES), args.quick, args.budget, args.out)
    failed = [name for name, record in summary["steps"].items() if record.get("returncode") not in (0,)]
    print(f"\nwrote {args.out / 'many_core.json'} and {args.out / 'many_core.md'} ({summary['seconds']} s)")
    if failed:
        print(f"steps that did not complete: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

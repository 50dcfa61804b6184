"""The documentation's figures, drawn from the benchmarks' recorded results and from docs/architecture.md.

Nothing here is drawn by hand: each chart reads the newest run of its benchmark in ``benchmarks/results``
(``NAME.json`` or ``goals/NAME.json``, whichever ``date`` is later), and the step diagram reads the numbered
walk of "One step, end to end" in docs/architecture.md. Each figure's caption names the command and the machine
that produced its data, as the result file records them.

The site's build draws them at every build (docs/hooks.py); ``python docs/figures.py OUT_DIR`` writes them to a
folder, to look at one alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import io
import itertools
import json
import math
import pathlib
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Text as outlines, so that boxes fit their text in any browser; fixed ids and no date, so that the same results
# give the same file.
matplotlib.rcParams.update(
    {
        "svg.fonttype": "path",
        "svg.hashsalt": "aioenv",
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)

AIOENV = "#1f6fb4"  # aioenv's own series: solid, this blue and its shades
PEER = "#d9822b"  # a peer's series: dashed, orange and its shades
CEILING = "#555555"


@dataclasses.dataclass(frozen=True)
class Drawn:
    """One figure: the SVG, its text alternative, and its caption (HTML: what it shows, the command, the machine)."""

    svg: bytes
    alt: str
    caption: str


@dataclasses.dataclass(frozen=True)
class Run:
    """One benchmark result file: its data, where it is, and the command and machine that produced it."""

    path: pathlib.Path
    data: dict[str, Any]

    @property
    def command(self) -> str:
        return str(self.data.get("command", "(command not recorded)"))

    @property
    def machine(self) -> str:
        """The machine as the file records it: CPUs, platform, Python, date."""
        machine = self.data.get("machine")
        parts: list[str] = []
        if isinstance(machine, str):
            parts.append(machine)
        else:
            machine = machine or {}
            cpus = machine.get("cpu_count", self.data.get("cpus"))
            parts.append(f"{cpus} CPUs" if cpus else "CPU count not recorded")
            platform = machine.get("platform")
            if platform:
                parts.append(_platform(platform))
            python = machine.get("python") or self.data.get("versions", {}).get("python")
            if python:
                parts.append(f"Python {python}")
        parts.append(_when(self.data))
        return ", ".join(parts)

    def cite(self, results: pathlib.Path) -> str:
        """The caption's provenance: ``command`` on the machine, and the file the figure read."""
        rel = self.path.relative_to(results.parent.parent) if results.parent.parent in self.path.parents else self.path
        return (
            f"Data: <code>{html.escape(self.command)}</code> on {html.escape(self.machine)} "
            f"(<code>{html.escape(str(rel))}</code>)."
        )


def _platform(platform: str) -> str:
    """``Linux-6.18.44-fc-v782-x86_64-with-glibc2.36`` -> ``Linux 6.18.44 x86_64``."""
    match = re.match(r"(\w+)-([\d.]+)[^_]*?-(x86_64|aarch64|arm64)", platform)
    return f"{match.group(1)} {match.group(2)} {match.group(3)}" if match else platform


def _when(data: dict[str, Any]) -> str:
    raw = data.get("date") or data.get("when")
    if not raw:
        return "date not recorded"
    try:
        moment = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return str(raw)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def newest(results: pathlib.Path, name: str) -> Run:
    """The later run of ``NAME.json`` and ``goals/NAME.json`` (by the date each records)."""
    paths = [p for p in (results / f"{name}.json", results / "goals" / f"{name}.json") if p.exists()]
    if not paths:
        raise FileNotFoundError(f"no {name}.json in {results} or {results / 'goals'}: run benchmarks/bench_{name}.py")
    return max((Run(p, json.loads(p.read_text())) for p in paths), key=lambda r: _when(r.data))


def _svg(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def _rate(x: float, _pos: object = None) -> str:
    return f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"


def _log_axes(ax: Any, xticks: Sequence[float], *, logy: bool = True) -> None:
    """Logarithmic axes labelled with plain numbers: the x ticks at the sizes measured, y in k."""
    ax.set_xscale("log")
    ax.set_xticks(list(xticks), [f"{x:g}" for x in xticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_rate))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


# --- throughput against the number of envs ---------------------------------------------------------------------

CORE_SERIES = (  # key in core.json, label, colour, style
    ("aioenv_step", "aioenv step() (executor auto)", AIOENV, "-"),
    ("aioenv_sendrecv", "aioenv send/recv", "#5aa0dc", "-"),
    ("workers_step", "aioenv step(), every env in worker processes", "#0b3d66", "-"),
    ("sync", "gymnasium SyncVectorEnv", PEER, "--"),
    ("async", "gymnasium AsyncVectorEnv", "#a0522d", "--"),
    ("cores", "ceiling: the envs split over the cores, no pool", CEILING, ":"),
)


def throughput(results: pathlib.Path) -> Drawn:
    """CartPole env-steps/s against the number of envs, aioenv against gymnasium's vector envs; Ant beside it."""
    run = newest(results, "core")
    workloads = run.data["workloads"]
    cartpole = sorted((w for w in workloads.values() if w["env_id"] == "CartPole-v1"), key=lambda w: w["num_envs"])
    others = [w for w in workloads.values() if w["env_id"] != "CartPole-v1"]
    fig, axes = plt.subplots(1, 1 + len(others), figsize=(9.5, 4.2), width_ratios=[2.2] + [1] * len(others))
    axes = list(axes) if len(others) else [axes]
    ax = axes[0]
    sizes = [w["num_envs"] for w in cartpole]
    for key, label, colour, style in CORE_SERIES:
        values = [w[key]["steps_per_s"] for w in cartpole]
        ax.plot(sizes, values, style, color=colour, marker="o", label=label)
    ax.set(xlabel="number of envs", ylabel="env-steps/s", title="CartPole-v1")
    _log_axes(ax, sizes)
    for ax, work in zip(axes[1:], others, strict=True):
        labels = [label for _, label, _, _ in CORE_SERIES]
        values = [work[key]["steps_per_s"] for key, *_ in CORE_SERIES]
        colours = [colour for _, _, colour, _ in CORE_SERIES]
        ax.bar(range(len(values)), values, color=colours)
        ax.set_xticks(range(len(values)), [_short(label) for label in labels], rotation=60, ha="right")
        ax.set(title=f"{work['env_id']}, {work['num_envs']} envs", ylabel="env-steps/s")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_rate))
        ax.grid(axis="x", visible=False)
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, -0.02)
    )
    fig.tight_layout()
    return Drawn(
        _svg(fig),
        "env-steps per second against the number of envs, aioenv and gymnasium's vector envs",
        "Env-steps per second against the number of envs: aioenv's pool (solid), gymnasium's "
        "<code>SyncVectorEnv</code> and <code>AsyncVectorEnv</code> (dashed) and the ceiling, the same envs split "
        "over the cores with no pool at all (dotted); both axes logarithmic. " + run.cite(results),
    )


def _short(label: str) -> str:
    return {
        "aioenv step() (executor auto)": "aioenv step()",
        "aioenv step(), every env in worker processes": "aioenv, workers",
        "gymnasium SyncVectorEnv": "SyncVectorEnv",
        "gymnasium AsyncVectorEnv": "AsyncVectorEnv",
        "ceiling: the envs split over the cores, no pool": "ceiling",
    }.get(label, label)


ADAPTER_PAIRS = (  # aioenv's drop-in, its peer(s), colour
    ("SyncPool.step", ("SyncVectorEnv.step",), "#1f6fb4"),
    ("AioVectorEnv.step", ("AsyncVectorEnv.step",), "#2a9d8f"),
    ("AioVecEnv.step (SB3)", ("SubprocVecEnv.step (SB3)", "DummyVecEnv.step (SB3)"), "#8e44ad"),
)


def peers(results: pathlib.Path) -> Drawn:
    """Each drop-in adapter against the peer it replaces, and the collector against TorchRL's."""
    adapters = newest(results, "adapters")
    collect = newest(results, "collect")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9.5, 4.2), width_ratios=[2.2, 1])
    sizes = sorted(int(n) for n in adapters.data["runs"])
    for ours, theirs, colour in ADAPTER_PAIRS:
        rate = [adapters.data["runs"][str(n)]["steps_per_s"] for n in sizes]
        ax.plot(sizes, [r[ours] for r in rate], "-", color=colour, marker="o", label=f"aioenv {ours}")
        for style, peer in zip(("--", ":"), theirs, strict=False):
            ax.plot(sizes, [r[peer] for r in rate], style, color=colour, marker="s", label=peer)
    ax.set(xlabel="number of envs", ylabel="env-steps/s", title="CartPole-v1, adapters")
    _log_axes(ax, sizes)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    values = collect.data["workloads"]["cartpole"]["values"]
    names = list(values)
    bx.bar(range(len(names)), [values[n] for n in names], color=[AIOENV if "aioenv" in n else PEER for n in names])
    bx.set_xticks(range(len(names)), names, rotation=30, ha="right")
    bx.set(title="CartPole-v1, collectors", ylabel="frames/s")
    bx.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_rate))
    bx.grid(axis="x", visible=False)
    fig.tight_layout()
    return Drawn(
        _svg(fig),
        "each aioenv adapter's env-steps per second against the peer it replaces, and aioenv's collector against "
        "TorchRL's",
        "Each drop-in against the peer it replaces, on the same envs (solid: aioenv; dashed and dotted: the peer), "
        "and <code>aioenv.collect.Collector</code> against TorchRL's collector over <code>SerialEnv</code> and "
        "<code>ParallelEnv</code>. Adapters: " + adapters.cite(results) + " Collectors: " + collect.cite(results),
    )


# --- latency-heavy envs: the fraction of the ceiling against the batch size -------------------------------------


def latency(results: pathlib.Path) -> Drawn:
    """For envs that mostly wait: each loop's throughput as a fraction of its ceiling, against the batch size."""
    run = newest(results, "latency")
    sections = [s for s in run.data["sections"].values() if len(s["cells"]) > 1]
    fig, axes = plt.subplots(1, len(sections), figsize=(4.8 * len(sections), 4.0), sharey=True)
    for ax, section in zip(axes, sections, strict=True):
        groups: dict[str, list[tuple[float, float]]] = {}
        for cell in section["cells"].values():
            if cell.get("fraction_of_ceiling") is None or cell.get("implementation") == "the envs alone, no pool":
                continue
            impl = cell["implementation"]
            if impl.startswith("aioenv"):
                impl = (
                    "aioenv, threads of your process" if "num_workers=0" in cell["loop"] else "aioenv, worker processes"
                )
            groups.setdefault(impl, []).append((float(cell["rows_per_recv"]), float(cell["fraction_of_ceiling"])))
        for index, (impl, points) in enumerate(sorted(groups.items())):
            points.sort()
            ours = impl.startswith("aioenv")
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                "-" if ours else "--",
                marker="o" if ours else "s",
                color=(AIOENV, "#5aa0dc")[index % 2] if ours else (PEER, "#a0522d")[index % 2],
                label=impl,
            )
        ax.axhline(1.0, color=CEILING, linestyle=":", label="the loop's ceiling")
        ax.set(xlabel="rows per recv() (batch size; min_results=1 at its mean)", title=section["title"])
        xs = [x for points in groups.values() for x, _ in points]
        low, high = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
        _log_axes(ax, [2.0**k for k in range(low, high + 1)], logy=False)
        for name, cell in section["cells"].items():
            if name.startswith("any") and cell.get("fraction_of_ceiling") is not None:
                ax.annotate(
                    "min_results=1",
                    (cell["rows_per_recv"], cell["fraction_of_ceiling"]),
                    textcoords="offset points",
                    xytext=(4, -14 if "@here" in name else 8),
                    fontsize=7,
                    color="#333333",
                )
        ax.set_ylim(0, 1.08)
        ax.legend(fontsize=8, loc="lower left")
    axes[0].set_ylabel("fraction of the loop's ceiling")
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    fig.tight_layout()
    return Drawn(
        _svg(fig),
        "latency-heavy envs: each loop's throughput as a fraction of its ceiling, against the batch size",
        "Envs whose steps only wait (lognormal, mean 20 ms): what each loop reaches as a fraction of its ceiling, the "
        "most that loop can reach with no overhead at all (a batch waits for its slowest env), against the rows each "
        "<code>recv()</code> returns. " + run.cite(results),
    )


# --- scaling with cores -----------------------------------------------------------------------------------------

SCALING_SERIES = (
    ("cores", "ceiling, free-running", CEILING, ":"),
    ("cores_lockstep", "ceiling, lock-step", "#999999", ":"),
    ("aioenv_step", "aioenv step()", AIOENV, "-"),
    ("aioenv_sendrecv", "aioenv send/recv", "#5aa0dc", "-"),
)


def scaling(results: pathlib.Path) -> Drawn:
    """Speed-up over one core (``SyncVectorEnv``) against the cores of the machine, from every core run recorded."""
    runs = sorted(
        (Run(p, json.loads(p.read_text())) for p in sorted(results.rglob("core*.json"))),
        key=lambda r: (r.data["machine"]["cpu_count"], _when(r.data)),
    )
    by_cpus = {r.data["machine"]["cpu_count"]: r for r in runs}  # the newest run of each machine size
    names = list(next(iter(by_cpus.values())).data["workloads"])
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names), 3.6), sharey=True)
    top = max(by_cpus)
    for ax, name in zip(axes, names, strict=True):
        ax.plot([1, top], [1, top], color="#cccccc", linestyle="-", label="ideal: speed-up = cores")
        for key, label, colour, style in SCALING_SERIES:
            cpus = [1]
            speedup = [1.0]
            for count, run in sorted(by_cpus.items()):
                work = run.data["workloads"].get(name)
                if work:
                    base = work["sync"]["steps_per_s"]
                    value = work["cores"]["lockstep_per_s"] if key == "cores_lockstep" else work[key]["steps_per_s"]
                    cpus.append(count)
                    speedup.append(value / base)
            ax.plot(cpus, speedup, style, color=colour, marker="o", label=label)
        work = by_cpus[top].data["workloads"][name]
        ax.set(title=f"{work['env_id']}, {work['num_envs']} envs", xlabel="cores")
        ax.set_xticks(sorted({1, *by_cpus}))
    axes[0].set_ylabel("env-steps/s over SyncVectorEnv (one core)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, frameon=False, bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    sizes = sorted(by_cpus)
    missing = (
        f" The results hold runs on {', '.join(map(str, sizes))}-core machines only: no 16-core run is recorded "
        "yet; <code>make bench</code> on a larger machine adds its points."
        if max(sizes) < 16
        else ""
    )
    cites = " ".join(run.cite(results) for run in by_cpus.values())
    return Drawn(
        _svg(fig),
        "speed-up over one core against the number of cores, aioenv and the ceiling",
        "Scaling with cores: env-steps/s over <code>SyncVectorEnv</code> (all envs on one core), for aioenv and for "
        "the ceiling (the envs split over as many processes as cores, each stepping its slice alone; lock-step: "
        f"every batch waits for its slowest slice).{missing} {cites}",
    )


# --- the path of one step ---------------------------------------------------------------------------------------

_STEP = re.compile(r"^(\d+)\. \*\*(.+?)\*\*(?: \(`([^`]+)`(, in its own process)?\))?:(.*)$")
_NAME = re.compile(r"`((?:[\w/]+\.py )?[A-Z]?\w*\.?\w+)`")


@dataclasses.dataclass(frozen=True)
class Stage:
    """One numbered stage of the walk: its title, its file, the functions it names, and whose process runs it."""

    number: int
    title: str
    file: str
    calls: list[str]
    worker: bool


def _is_call(name: str) -> bool:
    """A project function or class the walk names (``Pool.step``, ``encode``): no file, attribute or constant."""
    if name.endswith(".py") or name.isupper():
        return False
    head, _, tail = name.partition(".")
    return not tail or head[:1].isupper()


def walk(architecture: pathlib.Path) -> list[Stage]:
    """The numbered stages of "One step, end to end" in docs/architecture.md."""
    text = architecture.read_text(encoding="utf-8")
    section = text.split("## One step, end to end", 1)[1].split("\n## ", 1)[0]
    items: list[list[str]] = []
    for line in section.splitlines():
        if re.match(r"^\d+\. ", line):
            items.append([line])
        elif items and line.startswith("   ") and not line.strip().startswith("|"):
            items[-1].append(line.strip())
        elif items and line.strip() == "":
            continue
        elif items and not line.startswith("   "):
            break
    stages = []
    for lines in items:
        first, *rest = lines
        match = _STEP.match(first)
        if not match:
            raise ValueError(
                f"docs/architecture.md: a step of the walk reads {first!r}, not '1. **Title** (`file`): ...'"
            )
        body = " ".join([match.group(5), *rest])
        unique = list(dict.fromkeys(m for m in re.findall(r"`([A-Za-z_][\w.]*)`", body) if _is_call(m)))
        stages.append(
            Stage(
                number=int(match.group(1)),
                title=match.group(2),
                file=match.group(3) or "",
                calls=unique[:4],
                worker=bool(match.group(4)) or (match.group(3) or "").startswith("workers/"),
            )
        )
    if len(stages) < 3:
        raise ValueError(f"docs/architecture.md: the walk has {len(stages)} numbered steps, expected the whole path")
    return stages


def step_path(architecture: pathlib.Path) -> Drawn:
    """The path of one ``await pool.step(actions)``, as boxes and arrows over the two processes."""
    stages = walk(architecture)
    pool_side = [s for s in stages if not s.worker]
    fig, ax = plt.subplots(figsize=(10, 4.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    ax.add_patch(FancyBboxPatch((0.05, 1.75), 9.9, 2.75, boxstyle="round,pad=0.02", fc="#eef4fb", ec="#9bbbd9"))
    ax.text(0.2, 4.3, "the pool's process (your event loop)", fontsize=9, color="#0b3d66", weight="bold")
    ax.add_patch(FancyBboxPatch((0.05, 0.05), 9.9, 1.45, boxstyle="round,pad=0.02", fc="#fbf1e6", ec="#e0b98a"))
    ax.text(0.2, 1.3, "a worker process", fontsize=9, color="#7a4a12", weight="bold")
    width = 9.6 / len(pool_side)
    centres: dict[int, tuple[float, float]] = {}
    for index, stage in enumerate(pool_side):
        centres[stage.number] = (0.2 + width * (index + 0.5), 3.0)
    for stage in stages:
        if stage.worker:
            before = max((n for n in centres if n < stage.number), default=stage.number)
            after = min((n for n in centres if n > stage.number), default=before)
            centres[stage.number] = ((centres[before][0] + centres[after][0]) / 2, 0.72)
    box_w, box_h = width - 0.25, 1.3
    for stage in stages:
        x, y = centres[stage.number]
        colour = ("#fde7cf", "#c7853a") if stage.worker else ("#ffffff", "#1f6fb4")
        ax.add_patch(
            FancyBboxPatch(
                (x - box_w / 2, y - box_h / 2), box_w, box_h, boxstyle="round,pad=0.03", fc=colour[0], ec=colour[1]
            )
        )
        title = textwrap.fill(f"{stage.number}. {stage.title}", 19)
        ax.text(x, y + box_h / 2 - 0.1, title, ha="center", va="top", fontsize=8.5, weight="bold")
        lines = ([stage.file] if stage.file else []) + stage.calls
        top = y + box_h / 2 - 0.22 - 0.2 * title.count("\n") - 0.14
        ax.text(x, top, "\n".join(lines), ha="center", va="top", fontsize=6.8, family="monospace", linespacing=1.25)
    ordered = [s.number for s in stages]
    for a, b in itertools.pairwise(ordered):
        (xa, ya), (xb, yb) = centres[a], centres[b]
        if ya == yb:
            start, end = (xa + box_w / 2, ya), (xb - box_w / 2, yb)
        else:
            down = yb < ya
            start = (xa + (0.15 if down else 0.0), ya - box_h / 2 if down else ya + box_h / 2)
            end = (xb - (0.0 if down else 0.15), yb + box_h / 2 if down else yb - box_h / 2)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#333333", lw=1.2))
    return Drawn(
        _svg(fig),
        "the path of one pool.step: the pool, the seam, the coordinator, the worker process, and back to the result",
        "The path of one <code>await pool.step(actions)</code> in a pool with a local inline worker, drawn from the "
        "numbered walk of “One step, end to end” (docs/architecture.md): each box names its file and the first "
        "project functions and classes the walk names there. "
        "<code>python benchmarks/walk.py --executor inline --list</code> prints the whole path from a running pool.",
    )


FIGURES: dict[str, Callable[[pathlib.Path, pathlib.Path], Drawn]] = {
    "throughput": lambda results, _arch: throughput(results),
    "peers": lambda results, _arch: peers(results),
    "latency": lambda results, _arch: latency(results),
    "scaling": lambda results, _arch: scaling(results),
    "step-path": lambda _results, arch: step_path(arch),
}


def draw_all(results: pathlib.Path, architecture: pathlib.Path) -> dict[str, Drawn]:
    """Every figure, by name (its file is ``NAME.svg``)."""
    return {name: draw(results, architecture) for name, draw in FIGURES.items()}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/figures.py OUT_DIR", file=sys.stderr)
        return 2
    out = pathlib.Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, drawn in draw_all(ROOT / "benchmarks" / "results", ROOT / "docs" / "architecture.md").items():
        (out / f"{name}.svg").write_bytes(drawn.svg)
        print(f"{out / name}.svg: {drawn.alt}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

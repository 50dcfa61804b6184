"""``make soak``: the chaos soak for minutes, with a progress bar and a summary table.

    python -m tests.chaos.soak                        # every scenario, 60 s each
    python -m tests.chaos.soak --seconds 300 --only server --seed 7

Exit status 0 when every request got exactly one documented reply and nothing leaked, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

import aioenv
from tests.chaos.harness import OUTCOMES, Tally
from tests.chaos.scenarios import SCENARIOS


async def _run(name: str, seconds: float, seed: int, progress: Progress) -> Tally:
    tally = Tally()
    task = progress.add_task(name, total=seconds, counts="")
    running = asyncio.ensure_future(SCENARIOS[name](seconds, seed, tally))
    start = time.monotonic()
    while not running.done():
        await asyncio.wait([running], timeout=0.5)
        faults = sum(tally.faults.values())
        counts = f"{tally.requests:,} requests, {faults} faults, {len(tally.violations)} violations"
        progress.update(task, completed=min(seconds, time.monotonic() - start), counts=counts)
    progress.update(task, completed=seconds)
    return running.result()


def _table(results: dict[str, Tally], seconds: float) -> Table:
    table = Table(title=f"chaos soak: {seconds:g} s per scenario")
    table.add_column("")
    for name in results:
        table.add_column(name, justify="right")
    rows = [("requests", lambda t: t.requests), ("replies", lambda t: t.replies)]
    rows += [(f"  {outcome}", lambda t, o=outcome: t.outcomes[o]) for outcome in ["ok", *(n for _, n in OUTCOMES)]]
    for label, get in rows:
        table.add_row(label, *(f"{get(t):,}" for t in results.values()))
    faults = sorted({f for t in results.values() for f in t.faults})
    for fault in faults:
        table.add_row(f"fault: {fault}", *(f"{t.faults[fault]:,}" for t in results.values()))
    table.add_row("violations", *(str(len(t.violations)) for t in results.values()))
    table.add_row("leaks", *(str(len(t.leaks)) for t in results.values()))
    return table


async def main(argv: list[str] | None = None) -> int:
    """Run the scenarios, print the table and every violation or leak; 0 when there were none."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="per scenario (default 60)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", action="append", choices=list(SCENARIOS), help="repeatable; default: all")
    p.add_argument("--json", type=Path, help="also write the counts here")
    args = p.parse_args(argv)
    console = Console()
    columns = [
        TextColumn("{task.description:<13}"),
        BarColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[counts]}"),
    ]
    logging.getLogger("aioenv").setLevel(logging.CRITICAL)  # the faults' warnings are the point: keep the bar clean
    results: dict[str, Tally] = {}
    with Progress(*columns, console=console) as progress:
        for i, name in enumerate(args.only or SCENARIOS):
            results[name] = await _run(name, args.seconds, args.seed + i, progress)
    console.print(_table(results, args.seconds))
    bad = [(name, f"{kind}: {what}") for name, t in results.items() for kind, items in
           (("violation", t.violations), ("leak", t.leaks)) for what in items]  # fmt: skip
    for name, what in bad:
        console.print(f"[red]{name}: {what}[/]")
    if args.json is not None:
        args.json.write_text(json.dumps({n: {"requests": t.requests, "outcomes": t.outcomes, "faults": t.faults,
                                             "violations": t.violations, "leaks": t.leaks}
                                         for n, t in results.items()}, indent=2) + "\n")  # fmt: skip
    console.print("[green]every request got exactly one reply; nothing leaked[/]" if not bad else "[red]FAILED[/]")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(aioenv.run(main()))

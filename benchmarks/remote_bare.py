"""The ``cartpole`` case's cells of no pool (``bench_remote.py``): the same loop over bare pipes, with and without
a relay process (see ``bare_relay.py``).

:func:`bare_cell` times one, as :func:`benchutil.run_cell` times a pool: warm-up, window, CPU per part (the
relay is part ``server``, the bare workers ``local_workers``, our aioenv servers ``idle``), processes left
behind. Its figures sit beside the pool cells' in the case's table, and the case reports relay / direct
beside remote / embedded: what a process in between costs by itself on this machine.

Not a package module: ``bench_remote.py`` puts ``benchmarks/`` on ``sys.path`` before importing it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from typing import Any

from bare_relay import BarePipes
from benchutil import (
    Managed,
    Parts,
    Spec,
    classify,
    cpu_snapshot,
    cpu_usage,
    local_leftovers,
    run_async,
    timed_window,
    window_figures,
)

from aioenv.transport.spawn import usable_cpus

__all__ = ["BARE_DIRECT", "BARE_RELAY", "bare_cell"]

BARE_DIRECT = "no pool, direct"
BARE_RELAY = "no pool, via a relay"


def bare_cell(name: str, label: str, spec: Spec, relay: bool, idle: Sequence[Managed]) -> dict[str, Any]:
    """One timed window of :class:`bare_relay.BarePipes` with ``spec``'s envs, batch and workers; ``idle``: our
    servers (idle during the cell). Errors are recorded, not raised."""
    where = BARE_RELAY if relay else BARE_DIRECT
    print(f"[{name}] {where}, {label} ...", flush=True)
    batch = spec.batch_size
    if batch is None:
        raise ValueError(f"the bare-pipe cells run batch:N loops, not {spec.label!r}")
    idle_pids = frozenset(m.pid for m in idle)
    workers = spec.num_workers or usable_cpus()  # as many as the pool's default (BarePipes keeps it <= num_envs)

    async def window() -> dict[str, Any]:
        t0 = time.perf_counter()
        async with BarePipes(spec.num_envs, batch, workers, relay=relay) as pipes:
            t1 = time.perf_counter()

            def parts_of() -> Parts:
                return classify(pipes.relay_pid, idle=idle_pids)

            win = await timed_window(pipes.once, spec.warmup, spec.seconds, parts_of, cpu_snapshot)
        cpu = cpu_usage(win.cpu0, win.cpu1, win.elapsed, win.steps)
        res = window_figures(win.steps, win.calls, win.elapsed, pipes.num_workers, (t0, t1, t1), cpu)
        return res | {"processes": {part: len(procs) for part, procs in win.parts.items()}}

    try:
        res = run_async(window(), 60.0 + 3 * (spec.warmup + spec.seconds)) | {"status": "ok"}
    except Exception as exc:  # noqa: BLE001 - report it, keep the other cells
        traceback.print_exc()
        res = {"status": f"error: {type(exc).__name__}: {exc}"}
    keep = [m.pid for m in idle]
    res["leftover_processes"] = local_leftovers(keep[0], keep_trees=keep[1:]) if keep else []
    res |= {"where": where, "loop": spec.label}
    if res["status"] == "ok":
        print(f"[{name}] {where}, {label}: {res['steps_per_s']:,.0f} steps/s", flush=True)
    return res

"""Worker hosts placed by Ray (``aioenv.ray``) against the same number of local workers, and the start-up of hosts.

One run on a local Ray cluster (``ray.init(num_cpus=--ray-cpus)``, started here) measures:

1. **start-up**: ``place_hosts`` of ``--hosts`` hosts (4 by default) against a server, ``--startup-repeats``
   times: seconds until Ray placed the placement group and the actors were asked for, until every host
   joined the server, and for ``close()`` (hosts stopped, actors killed, group removed);
2. **throughput**, for two envs: ``CartPole-v1`` (inline workers; a send/recv loop with
   ``batch_size = n/2``) and the latency env ``aioenv.envs.latency:AsyncSleepEnv`` (async workers; mean 20 ms,
   sigma 0.5, cap 200 ms; a ``recv(min_results=1)`` loop; ideal ``n / mean`` steps/s), each in three cells
   with ``--num-workers`` worker processes (the number of hosts by default):

   - ``embedded``: a pool in this process, its workers local children;
   - ``server, local workers``: a pool on ``aioenv serve`` (a subprocess) whose workers are its children;
   - ``server, Ray hosts``: a pool on a second ``aioenv serve --worker-bind tcp://0.0.0.0:0 --local-capacity 0
     --insecure`` whose workers run under worker hosts that Ray placed (``--hosts`` inline hosts for CartPole, as many
     async ones for the latency env), dialing this node's address over tcp.

   The cells of a repeat are interleaved (their order reverses every other repeat); each figure is the median
   of ``--repeats``. The client loop and its figures are ``bench_remote.py``'s (:func:`benchutil.pool_cell`).

CPU per cell, in % of one core: ``client`` (this process), ``server``, ``host`` (the cell's worker hosts),
``server_workers`` (the cell's workers under a server or a host), ``local_workers`` (an embedded pool's), and
``idle``: everything else of ours (Ray's own daemons and actor processes, the other server, the other hosts),
left out of the CPU per env-step. On a machine with few cores every process shares them: the Ray cells pay
for Ray's daemons in ``outside`` CPU too.

Run (from the repo root; ``pip install 'aioenv[ray]'``; a full run takes about 3 minutes)::

    .venv/bin/python benchmarks/bench_ray.py                           # the full run
    .venv/bin/python benchmarks/bench_ray.py --quick --out /tmp/ray    # smoke: tiny sizes, 0.5 s windows

Writes ``ray.json`` (machine, parameters, every figure) and ``ray.md`` (the tables) to ``benchmarks/results/`` or
``--out DIR``. A cell that raises is recorded as ``error: ...`` and the others go on; the run exits 1 when a
cell failed or a process was left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT, HERE):  # this checkout (aioenv), and benchmarks/ (benchutil)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchutil import (  # noqa: E402
    ASYNC_ENV,
    EPISODE_STEPS,
    Parts,
    Server,
    Spec,
    descendants,
    describe,
    fmt,
    md_table,
    median_cell,
    not_templates,
    pool_cell,
    run_async,
    run_header,
    sig,
    write_atomic,
)
from recorded import settings  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results"
WHERE = ("embedded", "server, local workers", "server, Ray hosts")
BIG = 1_000_000  # each host's capacity: room for any pool (placement then spreads workers evenly)


# ------------------------------------------------------------------ parameters
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 2 hosts, tiny pools, 0.5 s windows, 1 repeat")
    p.add_argument("--hosts", type=int, help="worker hosts per executor (default 4, --quick 2)")
    p.add_argument("--num-workers", type=int, help="worker processes per pool (default: --hosts)")
    p.add_argument("--cartpole-envs", type=int, help="CartPole envs per pool (default 128, --quick 16)")
    p.add_argument("--latency-envs", type=int, help="latency envs per pool (default 1024, --quick 64)")
    p.add_argument("--seconds", type=float, help="timed window per cell (default 5, --quick 0.5)")
    p.add_argument("--warmup", type=float, help="warm-up per cell (default 1, --quick 0.2)")
    p.add_argument("--repeats", type=int, help="repeats of each cell (default 3, --quick 1)")
    p.add_argument("--startup-repeats", type=int, help="placements of --hosts hosts timed (default 3, --quick 1)")
    p.add_argument("--ray-cpus", type=float, default=float(os.cpu_count() or 1), help="logical CPUs of the cluster")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for ray.json and ray.md")
    args = p.parse_args(argv)
    quick = args.quick
    args.hosts = args.hosts or (2 if quick else 4)
    args.num_workers = args.num_workers or args.hosts
    args.cartpole_envs = args.cartpole_envs or (16 if quick else 128)
    args.latency_envs = args.latency_envs or (64 if quick else 1024)
    args.seconds = args.seconds or (0.5 if quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (0.2 if quick else 1.0)
    args.repeats = args.repeats or (1 if quick else 3)
    args.startup_repeats = args.startup_repeats or (1 if quick else 3)
    args.host_cpus = sig(args.ray_cpus / (2 * args.hosts))  # both sets of hosts fit in the cluster
    return args


def specs(args: argparse.Namespace) -> dict[str, Spec]:
    """The two pools: CartPole (inline) and the latency env (async)."""
    n, m = args.cartpole_envs, args.latency_envs
    latency = {"mean": 0.02, "sigma": 0.5, "cap": 0.2, "episode_steps": EPISODE_STEPS}
    return {
        "cartpole": Spec("CartPole-v1", n, f"batch:{n // 2}", None, None, args.num_workers, args.warmup, args.seconds),
        "latency": Spec(ASYNC_ENV, m, "any", "async", latency, args.num_workers, args.warmup, args.seconds),
    }


# ------------------------------------------------------------------ processes
def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def parts_for(server: Server | None, host_pids: set[int], embedded: bool) -> Parts:
    """This process tree split for one cell (see the module docstring): ``server`` and ``host_pids`` serve the
    cell; an ``embedded`` pool's workers are this process's own ``-m workers`` children."""
    me = psutil.Process()
    parts: Parts = {name: [] for name in ("server", "host", "server_workers", "local_workers", "idle")}
    parts["client"] = [me]
    serving = {p.pid for p in descendants(server.pid)} if server is not None else set()
    under_hosts = {p.pid for pid in host_pids for p in descendants(pid)}
    for proc in me.children(recursive=True):
        if server is not None and proc.pid == server.pid:
            parts["server"].append(proc)
        elif proc.pid in host_pids:
            parts["host"].append(proc)
        elif proc.pid in serving or proc.pid in under_hosts:
            parts["server_workers"].append(proc)
        elif embedded and "-m workers" in _cmdline(proc) and proc.ppid() == me.pid:
            parts["local_workers"].append(proc)
        else:
            parts["idle"].append(proc)
    return parts


# ------------------------------------------------------------------ the measurements
def time_startup(worker_endpoint: str, args: argparse.Namespace, i: int) -> dict[str, Any]:
    """Place ``--hosts`` hosts, wait until they joined, close them: the seconds of each stage."""
    from aioenv.ray import place_hosts

    t0 = time.perf_counter()
    hosts = place_hosts(
        worker_endpoint, args.hosts, capacity=BIG, num_cpus=args.host_cpus, name_prefix=f"start{i}", join_timeout=None
    )
    t1 = time.perf_counter()
    try:
        hosts.wait_joined(120.0)
        t2 = time.perf_counter()
        nodes = sorted({h.node_ip for h in hosts.info()})
    finally:
        t3 = time.perf_counter()
        hosts.close()
        t4 = time.perf_counter()
    row = {"group_ready_s": sig(t1 - t0), "joined_s": sig(t2 - t0), "close_s": sig(t4 - t3), "nodes": nodes}
    print(f"[startup {i}] {args.hosts} hosts: group {row['group_ready_s']:.2f} s, joined {row['joined_s']:.2f} s, "
          f"closed in {row['close_s']:.2f} s", flush=True)  # fmt: skip
    return row


def run_one(where: str, spec: Spec, servers: dict[str, Server], host_pids: set[int]) -> dict[str, Any]:
    """One cell: the pool of ``spec`` embedded, on the local-workers server, or on the Ray-hosts server."""
    server = {"embedded": None, WHERE[1]: servers["local"], WHERE[2]: servers["ray"]}[where]
    hosts = host_pids if where == WHERE[2] else set()
    timeout = 120.0 + 3 * (spec.warmup + spec.seconds) + spec.num_envs / 50
    endpoint = server.endpoint if server is not None else None
    try:
        cell = run_async(pool_cell(spec, endpoint, lambda: parts_for(server, hosts, server is None)), timeout)
        cell["status"] = "ok"
        cpu = cell["cpu"]
        print(f"  {where}: {cell['steps_per_s']:,.0f} steps/s, {cpu['us_per_step']:.1f} µs CPU/step, "
              f"startup {cell['startup_s']['total']:.2f} s", flush=True)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - report it, keep the other cells
        traceback.print_exc()
        cell = {"status": f"error: {type(exc).__name__}: {exc}"}
        print(f"  {where}: {cell['status']}", flush=True)
    cell["where"] = where
    cell["leftover_processes"] = []
    return cell


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Everything, on a local Ray cluster started here (and shut down before returning)."""
    import ray

    from aioenv.ray import place_hosts

    out: dict[str, Any] = {
        **run_header(),
        "params": settings(args),
    }
    t0 = time.perf_counter()
    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    out["ray"] = {
        "version": ray.__version__,
        "init_s": sig(time.perf_counter() - t0),
        "node_ip": ray.util.get_node_ip_address(),
    }
    servers: dict[str, Server] = {}
    placed = []
    try:
        servers["local"] = Server()
        # --insecure: the Ray cluster is this machine's own (ray.init above), its hosts dial this node's address
        servers["ray"] = Server(["--worker-bind", "tcp://0.0.0.0:0", "--local-capacity", "0", "--insecure"])
        assert servers["ray"].worker_endpoint is not None
        wep = servers["ray"].worker_endpoint
        out["startup"] = [time_startup(wep, args, i) for i in range(args.startup_repeats)]
        hosts = {
            "cartpole": place_hosts(wep, args.hosts, capacity=BIG, num_cpus=args.host_cpus, name_prefix="inline"),
            "latency": place_hosts(
                wep, args.hosts, capacity=BIG, executor="async", num_cpus=args.host_cpus, name_prefix="async"
            ),
        }
        placed = list(hosts.values())
        out["sections"] = {}
        for name, spec in specs(args).items():
            host_pids = {h.host_pid for h in hosts[name].info() if h.host_pid is not None}
            print(f"[{name}] {spec.env} n={spec.num_envs}, {spec.label}, {spec.num_workers} workers", flush=True)
            runs: dict[str, list[dict[str, Any]]] = {where: [] for where in WHERE}
            for r in range(args.repeats):
                for where in WHERE if r % 2 == 0 else WHERE[::-1]:
                    runs[where].append(run_one(where, spec, servers, host_pids))
            cells = {where: median_cell(attempts) for where, attempts in runs.items()}
            out["sections"][name] = {"env": spec.env, "num_envs": spec.num_envs, "loop": spec.label, "cells": cells}
            if name == "latency":
                out["sections"][name]["ideal_steps_per_s"] = sig(spec.num_envs / 0.02)
    finally:
        for placed_hosts in placed:
            placed_hosts.close()
        out["servers"] = {name: srv.stop() for name, srv in servers.items()}
        ray.shutdown()
    time.sleep(1.0)
    out["leftover_processes"] = describe(not_templates(psutil.Process().children(recursive=True)))
    return out


# ------------------------------------------------------------------ report
def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``0.93x``."""
    return f"{a / b:.2f}x" if a and b else "n/a"


def markdown(res: dict[str, Any]) -> str:
    """The report: start-up, then one table per env."""
    params = res["params"]
    lines = [
        "# Worker hosts placed by Ray vs local workers",
        "",
        f"`{res['command']}` on {res['date']}: {res['machine']['cpu_count']} CPUs, Python {res['machine']['python']}, "
        f"Ray {res['ray']['version']} (`ray.init` {res['ray']['init_s']:.1f} s, node {res['ray']['node_ip']}). "
        f"{params['hosts']} hosts per executor, {params['host_cpus']} Ray CPUs each; {params['num_workers']} worker "
        f"processes per pool; {params['repeats']} repeat(s) of {params['seconds']} s windows (medians).",
        "",
        f"## Start-up of {params['hosts']} hosts",
        "",
    ]
    rows = [
        [str(i), fmt(s["group_ready_s"], ".2f"), fmt(s["joined_s"], ".2f"), fmt(s["close_s"], ".2f")]
        for i, s in enumerate(res.get("startup", []))
    ]
    lines += md_table(["placement", "group placed, s", "all joined, s", "close, s"], rows)
    for name, section in res.get("sections", {}).items():
        cells = section["cells"]
        local = cells[WHERE[1]].get("steps_per_s")
        embedded = cells[WHERE[0]].get("steps_per_s")
        ideal = section.get("ideal_steps_per_s")
        lines += ["", f"## {name}: {section['env']}, {section['num_envs']} envs, {section['loop']}", ""]
        head = ["where", "steps/s", "vs server, local workers", "vs embedded", "CPU µs/step", "startup s", "status"]
        if ideal:
            head.insert(2, "of ideal")
        rows = []
        for where, cell in cells.items():
            value = cell.get("steps_per_s")
            cpu = cell.get("cpu", {})
            row = [where, fmt(value), ratio(value, local), ratio(value, embedded), fmt(cpu.get("us_per_step"), ".1f")]
            row += [fmt(cell.get("startup_s", {}).get("total"), ".2f"), cell["status"]]
            if ideal:
                row.insert(2, f"{value / ideal:.1%}" if value else "n/a")
            rows.append(row)
        lines += md_table(head, rows)
    left = res.get("leftover_processes") or []
    lines += ["", f"Processes left behind after the run: {', '.join(left) if left else 'none'}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write ray.json and ray.md; 1 when a cell failed or something was left behind."""
    args = parse_args(argv)
    res = bench(args)
    text = markdown(res)
    print(text)
    write_atomic(args.out / "ray.json", json.dumps(res, indent=2, default=str) + "\n")
    write_atomic(args.out / "ray.md", text)
    print(f"wrote {args.out / 'ray.json'} and {args.out / 'ray.md'}")
    failed = [
        f"{name}/{where}"
        for name, section in res.get("sections", {}).items()
        for where, cell in section["cells"].items()
        if not all(s == "ok" for s in cell.get("repeats_status", [cell["status"]]))
    ]
    if failed or res["leftover_processes"]:
        print(f"FAILED cells: {failed}; left behind: {res['leftover_processes']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Remote pools: the same client loops over ``aioenv serve`` (tcp, unix socket) and embedded, side by side in one run.

The script starts ``aioenv serve --bind tcp://127.0.0.1:0`` as a subprocess (a free local port, read
from its ``listening on`` log line), runs four cases against it, and stops it with SIGTERM at the end
(it must exit 0 and leave no worker behind). Every cell warms up, then counts the rows received over a
timed window. Four cases:

1. ``cartpole``: CartPole-v1, n=128, ``batch_size=64``, the EnvPool-style loop (``recv()``, then ``send``
   random actions for exactly the returned rows), embedded pool vs remote pool with the same
   ``num_workers`` (2), on this server (ZeroMQ over tcp) and on a second one the case starts on a unix
   socket (``--bind unix:///...``: no ZeroMQ, see aioenv/transport/stream.py). Two more cells run the same
   loop with no pool over bare pipes (``bare_relay.py``): straight to worker processes, and through a relay
   process that passes each message on unread; relay / direct is what a process in between costs by itself.
   Repeats interleaved (the order rotates), the medians reported. Then the three pools at once, alternated in
   one process in slices of 0.25 s (``remote_alternated.py``): the medians of the rounds' ratios, which a slow
   minute of the machine moves far less than windows of their own, and the client's and the server's CPU per
   ``recv()`` batch. Bars: each remote / embedded >= 0.8x, of the windows and alternated.
2. ``async1k``: 1,024 ``AsyncSleepEnv`` (``asyncio.sleep``, lognormal mean 20 ms, sigma 0.5, cap 200 ms)
   with ``executor="async"``, under two client loops (``recv()`` with ``batch_size=64`` and
   ``recv(min_results=1, max_results=1024)``), remote and embedded. Ideal = 1024 / 0.02 steps/s.
   Bar: the best remote loop >= 95% of ideal (the embedded figures are beside it for comparison).
3. ``clients``: 50 client processes with 64 ``AsyncSleepEnv`` (mean 20 ms, ``executor="async"``,
   ``num_workers=1``: one server worker per client, 50 in all) served at once by the one server. Each
   client process (this script, ``client`` sub-command) makes its pool and resets, says ready; once all
   are ready the parent gives them one common start time, every client warms up and then measures its
   own steps/s over the same wall-clock window. Reported: the total, per-client min / median / max,
   the spread (max / min and coefficient of variation), the server's state during the run
   (``aioenv status --json``), CPU of the server, its workers and the clients, and memory.
4. ``hosts``: what running the workers on a worker host costs. The pool, loop and repeats of case 1 in
   three interleaved cells: ``embedded``, ``remote`` (this server, its own workers) and ``remote via host``:
   a second server, ``aioenv serve ... --worker-bind tcp://127.0.0.1:0 --local-capacity 0`` (it runs no
   env itself), with one worker host, ``aioenv worker --connect WORKER_PORT --capacity 4096``, whose child
   processes are the pool's workers; both started once for the case and stopped with SIGTERM at its end
   (exit 0, nothing left behind). Reported: medians, via-host / embedded and via-host / remote. No bar
   (the extra cost is the worker -> server hop, over tcp instead of the pipe of a local worker).

CPU use over each window is recorded per part (this process, the server, a worker host, the server's
workers wherever they run, local workers, our idle processes, other programs, time stolen by the host) to
tell a saturated CPU from idle waiting.

Run (from the repo root; a full run takes about 2.5 minutes on 2 cores)::

    .venv/bin/python benchmarks/bench_remote.py                          # all four cases
    .venv/bin/python benchmarks/bench_remote.py --only clients --clients 20
    .venv/bin/python benchmarks/bench_remote.py --only hosts --repeats 5
    .venv/bin/python benchmarks/bench_remote.py --quick --out /tmp/remote   # smoke: small sizes, ~15 s

Options: ``--seconds`` (window of cases 1, 2 and 4, default 5), ``--clients-seconds`` (default 10),
``--repeats`` (cases 1 and 4, default 3), ``--alternated-seconds`` (case 1's alternated pools, default 12),
``--num-workers`` (cases 1, 2 and 4, default 2), ``--clients`` /
``--client-envs`` (default 50 x 64), ``--client-loop``. Writes ``remote.json`` (machine, parameters, every
figure) and ``remote.md`` (tables with the bars, met or missed) to ``benchmarks/results/`` or ``--out DIR``.
Bars are informative: a missed bar never fails the run; a cell that raises is recorded as ``error: ...`` and
the others go on.

The code is in seven files of ``benchmarks/``: this one (the entry point: cases 1-2, bars, the report and
the command line), ``remote_bare.py`` and ``bare_relay.py`` (case 1's cells of no pool), ``remote_alternated.py``
(case 1's pools alternated),
``remote_clients.py`` (case 3 and the ``client`` sub-command), ``remote_hosts.py`` (case 4) and
``benchutil.py`` (the server and worker-host subprocesses, one timed pool cell, CPU and memory accounting,
formatting helpers).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (ROOT, HERE):  # this checkout (aioenv), and benchmarks/ (benchutil, remote_clients, remote_hosts)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchutil import (  # noqa: E402
    ASYNC_ENV,
    EPISODE_STEPS,
    PIDS_SEEN,
    WINDOW_HEAD,
    Server,
    Spec,
    bar,
    describe,
    fmt,
    md_bars,
    md_table,
    median_cell,
    not_templates,
    parse_loop,
    ratio,
    run_cell,
    run_header,
    sig,
    window_columns,
    write_atomic,
)
from recorded import settings  # noqa: E402
from remote_alternated import alternated, md_alternated  # noqa: E402
from remote_bare import BARE_DIRECT, BARE_RELAY, bare_cell  # noqa: E402
from remote_clients import bench_clients, client_main, md_clients  # noqa: E402
from remote_hosts import bench_hosts, hosts_notes, md_hosts  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results"
SECTIONS = ("cartpole", "async1k", "clients", "hosts")
BARS = {"cartpole_remote_vs_embedded": 0.8, "async1k_remote_fraction": 0.95}
DISTURBED_PCT = 20.0  # CPU of other programs + steal during a window (% of a core) that makes a note


# ------------------------------------------------------------------ cases 1 and 2
def bench_cartpole(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    """CartPole-v1 embedded, on ``server`` (ZeroMQ over tcp) and on a second server on a unix socket (started and
    stopped here), and the same loop with no pool, direct and via a relay (remote_bare.py), repeats interleaved
    (the order rotates); medians, remote / embedded and relay / direct."""
    n = args.cartpole_envs or (16 if args.quick else 128)
    spec = Spec("CartPole-v1", n, f"batch:{n // 2}", None, None, args.num_workers, args.warmup, args.seconds)
    label = f"CartPole-v1 n={n}, {spec.label}"
    unix = Server(unix=True)
    print(f"second server pid {unix.pid} listening on {unix.endpoint}", flush=True)
    wheres = ["embedded", "remote", "remote unix", BARE_DIRECT, BARE_RELAY]
    runs: dict[str, list[dict[str, Any]]] = {where: [] for where in wheres}
    try:
        for r in range(args.repeats):
            for where in wheres[r % 5 :] + wheres[: r % 5]:
                repeat = f"{label}, repeat {r + 1}"
                if where in (BARE_DIRECT, BARE_RELAY):
                    runs[where].append(bare_cell("cartpole", repeat, spec, where == BARE_RELAY, [server, unix]))
                    continue
                on, idle = (unix, server) if where == "remote unix" else (server, unix)
                cell = run_cell("cartpole", repeat, spec, on, where != "embedded", where=where, idle=[idle])
                runs[where].append(cell)
        print(f"[cartpole] the three pools alternated in one process for {args.alternated_seconds:g} s", flush=True)
        try:
            alt = alternated(spec, server, unix, args.alternated_seconds)
        except Exception as exc:  # noqa: BLE001 - report it, keep the other figures
            alt = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"[cartpole] alternated: {alt}", flush=True)
    finally:
        stopped = unix.stop() | {"command": unix.command}
    cells = {where: median_cell(attempts) for where, attempts in runs.items()}
    speed = {w: cells[w].get("steps_per_s") if cells[w]["status"] == "ok" else None for w in runs}
    params = dataclasses.asdict(spec) | {"batch_size": spec.batch_size, "repeats": args.repeats}
    return {
        "title": f"CartPole-v1 n={n}, batch_size={spec.batch_size}, {spec.num_workers} workers",
        "params": params,
        "cells": cells,
        "ratio_remote_embedded": ratio(speed["remote"], speed["embedded"]),
        "ratio_unix_embedded": ratio(speed["remote unix"], speed["embedded"]),
        "ratio_bare_relay_direct": ratio(speed[BARE_RELAY], speed[BARE_DIRECT]),
        "alternated": alt,
        "unix_server": stopped,
    }


def bench_async(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    """1,024 AsyncSleepEnv, every client loop, remote and embedded."""
    n, mean = (128, 0.02) if args.quick else (1024, 0.02)
    kwargs = {"mean": mean, "sigma": 0.5, "cap": 0.2, "episode_steps": EPISODE_STEPS}
    loops = ("batch:16", "any") if args.quick else tuple(args.loops)
    ideal = n / mean
    print(f"[async1k] {n:,} AsyncSleepEnv, mean {mean * 1e3:g} ms: ideal {ideal:,.0f} steps/s", flush=True)
    cells: dict[str, dict[str, Any]] = {}
    for loop in loops:
        spec = Spec(ASYNC_ENV, n, loop, "async", kwargs, args.num_workers, args.warmup, args.seconds)
        for where in ("remote", "embedded"):
            cell = run_cell("async1k", f"{n} async envs, {spec.label}", spec, server, where == "remote")
            if cell["status"] == "ok":
                cell["fraction_of_ideal"] = sig(cell["steps_per_s"] / ideal)
                print(f"[async1k] {where}, {spec.label}: {cell['fraction_of_ideal']:.1%} of ideal", flush=True)
            cells[f"{where} {loop}"] = cell
    best = {}
    for where in ("remote", "embedded"):
        ok = {k: c for k, c in cells.items() if c["where"] == where and c["status"] == "ok"}
        best[where] = max(ok, key=lambda k: ok[k]["steps_per_s"]) if ok else None
    return {
        "title": f"{n:,} AsyncSleepEnv (mean {mean * 1e3:g} ms), executor=async, {args.num_workers} workers",
        "params": {
            "env": ASYNC_ENV,
            "num_envs": n,
            "env_kwargs": kwargs,
            "loops": list(loops),
            "num_workers": args.num_workers,
            "warmup": args.warmup,
            "seconds": args.seconds,
            "ideal_steps_per_s": ideal,
        },
        "cells": cells,
        "best": best,
    }


# ------------------------------------------------------------------ bars
def judge(sections: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The bars of the cases that ran (informative only)."""
    bars = []
    if sec := sections.get("cartpole"):
        about = sec["cells"]["remote"]["loop"] + f", medians of {sec['params']['repeats']}"
        threshold = BARS["cartpole_remote_vs_embedded"]
        bars.append(
            bar(f"{sec['title']}: remote (tcp) / embedded", sec["ratio_remote_embedded"], ">=", threshold, "x", about)
        )
        value = sec.get("ratio_unix_embedded")
        bars.append(bar(f"{sec['title']}: remote (unix socket) / embedded", value, ">=", threshold, "x", about))
        alt = sec["alternated"]
        about = f"recv(), batch_size={sec['params']['batch_size']}, alternated in one process"
        about += f", medians of {alt['rounds']} rounds" if "error" not in alt else f": {alt['error']}"
        for name, key in (("tcp", "ratio_remote_embedded"), ("unix socket", "ratio_unix_embedded")):
            title = f"{sec['title']}: alternated, remote ({name}) / embedded"
            bars.append(bar(title, alt.get(key), ">=", threshold, "x", about))
    if sec := sections.get("async1k"):
        best = sec["best"]["remote"]
        value = sec["cells"][best]["fraction_of_ideal"] if best else None
        about = f"remote, best loop: {sec['cells'][best]['loop']}" if best else "no remote loop ran"
        threshold = BARS["async1k_remote_fraction"]
        bars.append(bar(f"{sec['title']}: remote, of ideal", value, ">=", threshold, "%", about))
    return bars


# ------------------------------------------------------------------ report
def md_pools(sections: dict[str, dict[str, Any]]) -> list[str]:
    """Cases 1 and 2: one row per cell."""
    head = ["case", "pool, client loop", "steps/s", "of ideal", "rows/recv", "CPU this process", "CPU server"]
    head += ["CPU workers", *WINDOW_HEAD]
    rows = []
    for name in ("cartpole", "async1k"):
        if not (sec := sections.get(name)):
            continue
        for key, cell in sec["cells"].items():
            what = f"{cell['where']}, {cell['loop']}"
            if name == "async1k" and sec["best"].get(cell["where"]) == key:
                what += " (best)"
            if name == "cartpole":
                runs = ", ".join(fmt(v) for v in cell["repeats_steps_per_s"])
                what += f" (median of {runs})"
            if cell["status"] != "ok":
                rows.append([sec["title"], what, cell["status"], *["n/a"] * 9])
                continue
            cpu = cell["cpu"]
            workers = cpu["server_workers"] + cpu["local_workers"]
            rows.append(
                [
                    sec["title"],
                    what,
                    fmt(cell["steps_per_s"]),
                    fmt(cell.get("fraction_of_ideal"), ".1%"),
                    fmt(cell["rows_per_recv"], ",.1f"),
                    fmt(cpu["client"], ".0f", "%"),
                    fmt(cpu["server"], ".0f", "%") if cell["where"] != "embedded" else "-",
                    fmt(workers, ".0f", "%"),
                    *window_columns(cell),
                ]
            )
    return md_table(head, rows, left=2)


def render_markdown(res: dict[str, Any]) -> str:
    """The tables, the command that produced them and any problem noticed."""
    m = res["machine"]
    about = f"{m['cpu_count']} CPUs, {m['memory_gib']} GiB, Python {m['python']}, {m['loop']}, "
    about += f"hot path {m.get('hot_path', '?')}, pyzmq {m['pyzmq']} (libzmq {m['libzmq']}), "
    about += f"load {m['load_avg_1m']} at start / "
    about += f"{res['load_avg_1m_end']} at end, {res['date']}"
    lines = [f"`{res['command']}`", "", about, "", f"Server: `{res['server']['command']}` on {res['endpoint']}."]
    secs = res["sections"]
    if "cartpole" in secs or "async1k" in secs:
        lines += ["", *md_pools(secs)]
        lines += [
            "",
            "ideal = envs / mean latency. CPU: % of one core over the window; workers = the pool's worker "
            "processes (the server's for a remote pool); outside = other programs and the kernel, stolen = taken "
            "by the host (both noise). CPU µs/step: this process + server + workers per env-step.",
        ]
    if (sec := secs.get("cartpole")) and (bare := sec.get("ratio_bare_relay_direct")) is not None:
        tcp, unix = (fmt(sec[key], ".2f", "x") for key in ("ratio_remote_embedded", "ratio_unix_embedded"))
        lines += [
            "",
            f"No pool, over bare pipes: via a relay process / direct {bare:.2f}x, what a process and a hop each "
            f"way cost by themselves (remote / embedded: tcp {tcp}, unix socket {unix}).",
        ]
    if sec := secs.get("cartpole"):
        lines += ["", *md_alternated(sec)]
    if sec := secs.get("clients"):
        lines += ["", *md_clients(sec)]
    if sec := secs.get("hosts"):
        lines += ["", *md_hosts(sec)]
    if res["bars"]:
        lines += ["", *md_bars(res["bars"])]
    notes = []
    for name, sec in secs.items():
        cells = sec.get("cells", {name: sec})
        for key, cell in cells.items():
            if cell.get("leftover_processes"):
                notes.append(f"- {name} {key}: processes left behind: {cell['leftover_processes']}")
            cpu = cell.get("cpu", {})
            if cpu and cpu["outside"] + cpu["steal"] > DISTURBED_PCT:
                notes.append(
                    f"- {name} {key}: disturbed: the rest of the machine used {cpu['outside']:.0f}% of a core and "
                    f"the host stole {cpu['steal']:.0f}% during the window"
                )
    if sec := secs.get("hosts"):
        notes += hosts_notes(sec)
    srv = res["server"]
    if srv["exit_code"] != 0:
        notes.append(f"- the server exited with {srv['exit_code']} after SIGTERM (expected 0)")
    if srv["workers_left"]:
        notes.append(f"- the server left workers behind: {srv['workers_left']}")
    if srv["problems"]:
        notes.append(f"- the server logged {len(srv['problems'])} warning/error lines, e.g. `{srv['problems'][0]}`")
    notes += [f"- processes left at exit: {p}" for p in res.get("leftover_processes_at_exit", [])]
    lines += ["", f"Server stopped with SIGTERM: exit code {srv['exit_code']} in {srv['stop_s']:.2f} s."]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ CLI
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--quick`` fills in small sizes for whatever was not given)."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: n=16, 128 async envs, 4 clients x 8 envs, short")
    p.add_argument("--only", action="append", choices=SECTIONS, metavar="NAME", help=f"repeatable: {SECTIONS}")
    p.add_argument("--seconds", type=float, help="window of cases 1, 2 and 4 (default 5, --quick 0.5)")
    p.add_argument("--warmup", type=float, help="warm-up of cases 1, 2 and 4 (default 1, --quick 0.2)")
    p.add_argument("--repeats", type=int, help="cases 1 and 4 repeats, median reported (default 3, --quick 1)")
    p.add_argument("--num-workers", type=int, default=2, help="worker processes of every pool of cases 1, 2 and 4")
    p.add_argument(
        "--cartpole-envs",
        type=int,
        metavar="N",
        help="case 1's CartPoles (default 128, --quick 16), recv() in batches of N/2",
    )
    p.add_argument(
        "--alternated-seconds",
        type=float,
        help="case 1's three pools alternated in one process for this long in all (default 12, --quick 1.5)",
    )
    p.add_argument(
        "--loops",
        type=lambda s: [parse_loop(x) for x in s.split(",")],
        default=["batch:64", "any"],
        help="case 2 client loops, comma-separated: batch:N (recv() with batch_size N) or any "
        "(recv(min_results=1, max_results=num_envs)); default batch:64,any",
    )
    p.add_argument("--clients", type=int, help="case 3 client processes (default 50, --quick 4)")
    p.add_argument("--client-envs", type=int, help="envs per client (default 64, --quick 8)")
    p.add_argument("--client-mean", type=float, default=0.02, help="case 3 mean step latency, seconds")
    p.add_argument("--client-loop", type=parse_loop, default="any", help="case 3 client loop (default any)")
    p.add_argument("--clients-seconds", type=float, help="case 3 window (default 10, --quick 1)")
    p.add_argument("--clients-warmup", type=float, help="case 3 warm-up (default 3, --quick 0.6)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for remote.json and remote.md")
    args = p.parse_args(argv)
    if args.cartpole_envs is not None and args.cartpole_envs < 2:
        p.error(f"--cartpole-envs must be at least 2, got {args.cartpole_envs}")
    if args.alternated_seconds is not None and not args.alternated_seconds > 0:
        p.error(f"--alternated-seconds must be a positive number of seconds, got {args.alternated_seconds}")
    q = args.quick
    defaults = {
        "seconds": 0.5 if q else 5.0,
        "warmup": 0.2 if q else 1.0,
        "repeats": 1 if q else 3,
        "alternated_seconds": 1.5 if q else 12.0,
        "clients": 4 if q else 50,
        "client_envs": 8 if q else 64,
        "clients_seconds": 1.0 if q else 10.0,
        "clients_warmup": 0.6 if q else 3.0,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    """Start the server, run the selected cases, stop it, write JSON + Markdown, print the tables."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    args = parse_args(argv)
    selected = [name for name in SECTIONS if name in set(args.only or SECTIONS)]
    res: dict[str, Any] = run_header() | {
        "settings": settings(args) | {"bars": BARS},
        "sections": {},
    }
    t0 = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its server (finally)
    server = Server()
    res["endpoint"] = server.endpoint
    print(f"server pid {server.pid} listening on {server.endpoint}", flush=True)
    try:
        cases = {"cartpole": bench_cartpole, "async1k": bench_async, "clients": bench_clients, "hosts": bench_hosts}
        for name in selected:
            res["sections"][name] = cases[name](args, server)
    finally:
        res["server"] = server.stop() | {"command": server.command}
    print(f"server stopped: exit code {res['server']['exit_code']} in {res['server']['stop_s']:.2f} s", flush=True)
    res["bars"] = judge(res["sections"])
    res["pids_seen"] = sorted(PIDS_SEEN | {server.pid})
    res["leftover_processes_at_exit"] = describe(
        psutil.wait_procs(not_templates(psutil.Process().children(recursive=True)), 3.0)[1]
    )
    res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    res["total_s"] = sig(time.perf_counter() - t0)
    md = render_markdown(res)
    write_atomic(args.out / "remote.json", json.dumps(res, indent=2) + "\n")
    write_atomic(args.out / "remote.md", md)
    print("\n" + md)
    print(f"wrote {args.out / 'remote.json'} and {args.out / 'remote.md'} ({res['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Case 4 of ``bench_remote.py``: the pool's workers on a worker host (the ``hosts`` case).

:func:`bench_hosts` starts, once for the section, a second server that runs no env itself
(``aioenv serve --bind tcp://127.0.0.1:0 --worker-bind tcp://127.0.0.1:0 --local-capacity 0``) and one worker
host (``aioenv worker --connect WORKER_PORT --capacity 4096``) admitted by it: every pool made on that server
gets its worker processes started by the host, as the host's children. CartPole-v1 then runs with the Spec and
client loop of the ``cartpole`` case in three cells per repeat, interleaved (the order reverses every other
repeat):

- ``embedded``: a local pool;
- ``remote``: the run's main server, whose workers are its own children and reach it over a pipe each;
- ``remote via host``: the second server, whose workers run under the host and reach it over tcp (its worker
  port): the one difference with ``remote``.

Reported: the medians of the repeats and the ratios via-host / embedded and via-host / remote (informative,
no bar), the second server's ``aioenv status --json`` once the host joined, and how the host and the second
server stopped: SIGTERM to the host, then to the server; both must exit 0 and leave nothing behind.

CPU per cell (:func:`benchutil.classify`): the host process is part ``host``, its children count as the
server's workers; the server not serving the cell, and an idle host, are part ``idle`` (left out of the CPU
per step). :func:`md_hosts` is the case's Markdown, :func:`hosts_notes` its problems for the report's notes.

Not a package module: ``bench_remote.py`` puts ``benchmarks/`` on ``sys.path`` before importing it.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import traceback
from typing import Any

from benchutil import (
    WINDOW_HEAD,
    Server,
    Spec,
    WorkerHost,
    fmt,
    local_leftovers,
    md_table,
    median_cell,
    ratio,
    run_cell,
    server_status,
    sig,
    window_columns,
)

HOST_CAPACITY = 4096  # envs the worker host takes (far more than the case needs)
HOST_NAME = "bench-host"
HOST_SERVER_ARGS = ("--worker-bind", "tcp://127.0.0.1:0", "--local-capacity", "0")
VIA_HOST = "remote via host"
WHERE = ("embedded", "remote", VIA_HOST)  # the cells of a repeat, in the order of even repeats


def bench_hosts(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    """CartPole-v1 embedded, on ``server`` and on a second server whose workers run under a worker host."""
    n = 16 if args.quick else 128
    spec = Spec("CartPole-v1", n, f"batch:{n // 2}", None, None, args.num_workers, args.warmup, args.seconds)
    label = f"CartPole-v1 n={n}, {spec.label}"
    params = dataclasses.asdict(spec) | {
        "batch_size": spec.batch_size,
        "repeats": args.repeats,
        "host_capacity": HOST_CAPACITY,
        "host_name": HOST_NAME,
    }
    out: dict[str, Any] = {
        "title": f"CartPole-v1 n={n}, batch_size={spec.batch_size}, {spec.num_workers} workers",
        "params": params,
    }
    runs: dict[str, list[dict[str, Any]]] = {where: [] for where in WHERE}
    host_server: Server | None = None
    host: WorkerHost | None = None
    try:
        t0 = time.perf_counter()
        host_server = Server(HOST_SERVER_ARGS)
        assert host_server.worker_endpoint is not None  # Server raises without one
        host = WorkerHost(host_server.worker_endpoint, HOST_CAPACITY, HOST_NAME)
        out["startup_s"] = sig(time.perf_counter() - t0)  # second server up and the host admitted
        out["status_at_start"] = server_status(host_server.endpoint)
        print(
            f"[hosts] second server pid {host_server.pid} on {host_server.endpoint}, worker host {HOST_NAME} (pid "
            f"{host.pid}) joined at {host_server.worker_endpoint} after {out['startup_s']:.2f} s",
            flush=True,
        )
        for r in range(args.repeats):
            for where in WHERE if r % 2 == 0 else WHERE[::-1]:
                about = f"{label}, repeat {r + 1}"
                if where == VIA_HOST:
                    cell = run_cell("hosts", about, spec, host_server, True, where=where, hosts=[host], idle=[server])
                else:
                    remote = where == "remote"
                    cell = run_cell("hosts", about, spec, server, remote, where=where, idle=[host_server, host])
                runs[where].append(cell)
        out["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - report it, keep the rest of the run
        traceback.print_exc()
        out["status"] = f"error: {type(exc).__name__}: {exc}"
    finally:  # the host first (it stops its workers and leaves), then the server
        if host is not None:
            out["worker_host"] = host.stop() | {
                "pid": host.pid,
                "command": host.command,
                "name": host.name,
                "capacity": host.capacity,
            }
        if host_server is not None:
            out["host_server"] = host_server.stop() | {
                "pid": host_server.pid,
                "command": host_server.command,
                "endpoint": host_server.endpoint,
                "worker_endpoint": host_server.worker_endpoint,
            }
    out["leftover_processes"] = local_leftovers(server.pid) + server.wait_no_workers()
    for name in ("worker_host", "host_server"):
        if stopped := out.get(name):
            print(
                f"[hosts] {name.replace('_', ' ')} stopped: exit code {stopped['exit_code']} in "
                f"{stopped['stop_s']:.2f} s, workers left {stopped['workers_left']}",
                flush=True,
            )
    if out["leftover_processes"]:
        print(f"[hosts] LEFT BEHIND {out['leftover_processes']}", flush=True)
    out["cells"] = {where: median_cell(attempts) for where, attempts in runs.items() if attempts}
    speed = {w: c["steps_per_s"] for w, c in out["cells"].items() if c["status"] == "ok"}
    out["ratio_host_embedded"] = ratio(speed.get(VIA_HOST), speed.get("embedded"))
    out["ratio_host_remote"] = ratio(speed.get(VIA_HOST), speed.get("remote"))
    out["ratio_remote_embedded"] = ratio(speed.get("remote"), speed.get("embedded"))
    print(
        f"[hosts] medians: {', '.join(f'{w} {v:,.0f}' for w, v in speed.items())} steps/s; via host / embedded "
        f"{fmt(out['ratio_host_embedded'], '.2f', 'x')}, via host / remote {fmt(out['ratio_host_remote'], '.2f', 'x')}",
        flush=True,
    )
    return out


def md_hosts(sec: dict[str, Any]) -> list[str]:
    """Case 4: one row per cell (medians), the ratios in a sentence, and how the host and second server stopped."""
    cells = sec.get("cells", {})
    if not cells:
        return [f"{sec['title']}, workers on a worker host: {sec.get('status')}"]
    speed = {w: c["steps_per_s"] for w, c in cells.items() if c["status"] == "ok"}
    head = [
        f"{sec['title']}: where the pool runs",
        "steps/s",
        "/ embedded",
        "/ remote",
        "rows/recv",
        "CPU this process",
        "CPU server",
    ]
    head += ["CPU host", "CPU workers", *WINDOW_HEAD]
    rows = []
    for where, cell in cells.items():
        runs = ", ".join(fmt(v) for v in cell["repeats_steps_per_s"])
        what = f"{where}, {cell['loop']} (median of {runs})"
        if cell["status"] != "ok":
            rows.append([what, cell["status"], *["n/a"] * (len(head) - 2)])
            continue
        cpu = cell["cpu"]
        rows.append(
            [
                what,
                fmt(cell["steps_per_s"]),
                fmt(ratio(speed[where], speed.get("embedded")), ".2f", "x"),
                fmt(ratio(speed[where], speed.get("remote")), ".2f", "x"),
                fmt(cell["rows_per_recv"], ",.1f"),
                fmt(cpu["client"], ".0f", "%"),
                fmt(cpu["server"], ".0f", "%") if where != "embedded" else "-",
                fmt(cpu["host"], ".0f", "%") if where == VIA_HOST else "-",
                fmt(cpu["server_workers"] + cpu["local_workers"], ".0f", "%"),
                *window_columns(cell),
            ]
        )
    srv, host = sec.get("host_server", {}), sec.get("worker_host", {})
    lines = md_table(head, rows)
    lines += [
        "",
        f"Workers on a worker host: remote via host / embedded = {fmt(sec['ratio_host_embedded'], '.2f', 'x')}, "
        f"remote via host / remote = {fmt(sec['ratio_host_remote'], '.2f', 'x')} (medians of "
        f"{sec['params']['repeats']}, the three cells interleaved; informative, no bar). Remote via host: a second "
        f"server (`{srv.get('command', 'n/a')}`) that runs no env itself, its pools' worker processes started by "
        f"one worker host on this machine (`{host.get('command', 'n/a')}`). The client -> server hop is tcp in "
        "both remote cells; the extra cost of the host is the worker -> server hop, over tcp (the server's worker "
        "port) instead of a pipe (a local worker and its coordinator). CPU host: the `aioenv worker` process; "
        "workers: the pool's worker processes (the host's children in the via-host cell); the server not "
        "serving a cell is left out.",
    ]
    if srv and host:
        left = srv["workers_left"] + host["workers_left"] + sec["leftover_processes"]
        lines += [
            "",
            f"Worker host, then second server, stopped with SIGTERM: exit codes {host['exit_code']} / "
            f"{srv['exit_code']} in {host['stop_s']:.2f} / {srv['stop_s']:.2f} s; "
            + (f"left behind: {left}." if left else "nothing left behind."),
        ]
    return lines


def hosts_notes(sec: dict[str, Any]) -> list[str]:
    """What went wrong in case 4, for the report's notes (empty when nothing did)."""
    notes = []
    if sec.get("status", "ok") != "ok":
        notes.append(f"- hosts: {sec['status']}")
    for name, what in (("worker_host", "the worker host"), ("host_server", "the second server")):
        if not (stopped := sec.get(name)):
            continue
        if stopped["exit_code"] != 0:
            notes.append(f"- hosts: {what} exited with {stopped['exit_code']} after SIGTERM (expected 0)")
        if stopped["workers_left"]:
            notes.append(f"- hosts: {what} left workers behind: {stopped['workers_left']}")
        if stopped["problems"]:
            count, first = len(stopped["problems"]), stopped["problems"][0]
            notes.append(f"- hosts: {what} logged {count} warning/error lines, e.g. `{first}`")
    if sec.get("leftover_processes"):
        notes.append(f"- hosts: processes left behind at the end of the case: {sec['leftover_processes']}")
    return notes

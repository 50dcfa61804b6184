"""Processes as the tests see them: a hang guard, this process's children, whether a worker is gone,
the worker process of a pool's slot.

Plain functions a test calls with its own arguments (a pid, a pool, a slot), so not fixtures.
``worker_pid`` and ``wait_new_worker`` read the coordinator's slots: a pool has no public view of its
worker processes.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, NamedTuple

#: Upper bound for anything that should finish promptly: a hang guard, never a speed check.
HANG = 30.0


class ProcInfo(NamedTuple):
    """One process as /proc shows it."""

    pid: int
    ppid: int
    state: str  # "R", "S", "Z" (zombie: exited, not reaped) ...
    cmdline: str


def _read(pid: str, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as fh:
        return fh.read()


def proc_table(env_token: str | None = None) -> list[ProcInfo]:
    """Every process in /proc (those whose environment holds ``env_token``, when given); a process that
    exits while it is read is left out."""
    out = []
    needle = env_token.encode() if env_token is not None else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle is not None and needle not in _read(entry, "environ"):
                continue
            stat = _read(entry, "stat").decode(errors="replace")
            cmdline = _read(entry, "cmdline").replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out.append(ProcInfo(int(entry), int(fields[1]), fields[0], cmdline))
    return out


def child_processes() -> list[tuple[int, str, str]]:
    """``(pid, state, cmdline)`` of this process's children."""
    me = os.getpid()
    return [(p.pid, p.state, p.cmdline) for p in proc_table() if p.ppid == me]


#: What a worker template's command line holds (``python -m workers.zygote``; its forks, the workers, keep it).
TEMPLATE = "-m workers.zygote"


def worker_processes(parent: int | None = None) -> list[tuple[int, str, str]]:
    """``(pid, state, cmdline)`` of the processes ``parent`` (default: this process) started for its pools: its
    children but its worker templates (``python -m workers.zygote``, kept while it runs), and the templates'
    children (the workers forked from them)."""
    me = os.getpid() if parent is None else parent
    table = proc_table()
    templates = {p.pid for p in table if p.ppid == me and TEMPLATE in p.cmdline}
    return [
        (p.pid, p.state, p.cmdline) for p in table if (p.ppid == me and p.pid not in templates) or p.ppid in templates
    ]


def workers_of(parent: int) -> list[int]:
    """Pids of the live worker processes (``python -m workers``) ``parent`` started, forked or not."""
    return [pid for pid, state, cmd in worker_processes(parent) if state != "Z" and "-m workers " in cmd]


def templates_of(parent: int) -> list[int]:
    """Pids of ``parent``'s worker templates."""
    return [p.pid for p in proc_table() if p.ppid == parent and TEMPLATE in p.cmdline]


def children(pid: int) -> list[int]:
    """Pids of the direct children of ``pid``."""
    return [p.pid for p in proc_table() if p.ppid == pid]


def descendants(pid: int) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of every descendant of ``pid``."""
    table = proc_table()
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for p in table:
            if p.ppid == parent:
                out.append((p.pid, p.cmdline))
                todo.append(p.pid)
    return out


def processes_with_env(token: str) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of the live processes (not zombies) whose environment holds ``token``: every
    process a server started with that token spawned, orphaned or not."""
    return [(p.pid, p.cmdline) for p in proc_table(token) if p.state != "Z"]


def process_gone(pid: int, marker: str = "workers") -> bool:
    """True when ``pid`` is gone: no such process, or the pid now runs something unrelated.
    A zombie (exited, not reaped) is *not* gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return True
    if stat[stat.rindex(")") + 2] == "Z" or not cmdline:
        # exited but not reaped (a leak), or exiting: the kernel empties a process's cmdline when it releases
        # its memory, before the process turns zombie
        return False
    return marker.encode() not in cmdline  # the pid was reused by an unrelated process


def worker_pid(pool: Any, index: int) -> int:
    """The pid of the process in worker slot ``index``."""
    slot = pool._runner.slots[index]
    assert not slot.in_process, f'worker slot {index} runs in this process: the test needs executor="inline"'
    return int(slot.proc.pid)


async def wait_new_worker(pool: Any, index: int, old_pid: int) -> int:
    """Wait until slot ``index`` runs a new process that said HELLO and re-made its envs; returns its pid."""
    coord = pool._runner
    async with asyncio.timeout(HANG):
        while True:
            slot = coord.slots[index]
            remaking = any(r.kind == "make" for r in coord.sched.requests.values() if r.worker == index)
            if slot.proc is not None and slot.proc.pid != old_pid and slot.ready and not remaking:
                return int(slot.proc.pid)
            await asyncio.sleep(0.01)

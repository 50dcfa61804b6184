"""``python -I .../aioenv/openenv/reaper.py ENGINE LABEL PARENT``: remove every container labelled
``aioenv.owner=LABEL`` once process ``PARENT`` is gone or lets go of this one (:mod:`aioenv.openenv.container`).

``PARENT`` (the process that starts containers: a worker) starts this with a pipe on its stdin and its own session,
so that nothing aimed at the parent's process group (a coordinator reaping a worker) reaches it. It waits until its
stdin ends (the parent closed the pipe, or died: the kernel closes a dead process's end) or its parent is no longer
``PARENT``. Then it waits for the engine commands that may still create a container (the parent writes ``+PID`` when
it starts one, ``-PID`` when that one has ended: a ``run`` outlives a SIGKILLed parent) to end, and removes every
container of ``LABEL`` (``ENGINE ps -aq --filter label=...``, then ``ENGINE rm -f``), and exits.

It runs from its file with the standard library alone (``-I``: neither the project nor the site packages are
imported), so it starts in milliseconds and holds a few MB while it waits.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

__all__ = ["ENGINE_TIMEOUT", "OWNER_LABEL", "main", "owner_filter", "read_commands", "sweep", "wait_parent"]

#: The label every container of a reaper carries: ``aioenv.owner=LABEL``.
OWNER_LABEL = "aioenv.owner"
#: Seconds one engine command may take (a ``run`` included) before it is given up.
ENGINE_TIMEOUT = 120.0
#: Seconds between two looks at the parent.
WATCH_INTERVAL = 0.5

Run = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def owner_filter(label: str) -> str:
    """The engine's ``--filter`` for the containers of ``label``."""
    return f"label={OWNER_LABEL}={label}"


def read_commands(text: str, running: set[int]) -> None:
    """Apply the parent's ``+PID`` / ``-PID`` lines in ``text`` to ``running`` (anything else is ignored)."""
    for line in text.split():
        if len(line) > 1 and line[0] in "+-" and line[1:].isdigit():
            (running.add if line[0] == "+" else running.discard)(int(line[1:]))


def wait_parent(parent: int, fd: int, running: set[int], interval: float = WATCH_INTERVAL) -> None:
    """Return once ``fd`` (the pipe from the parent) ends or this process's parent is no longer ``parent``; the
    commands the parent announces meanwhile are kept in ``running``."""
    pending = ""
    while os.getppid() == parent:
        ready, _, _ = select.select([fd], [], [], interval)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        pending += chunk.decode("ascii", "replace")
        complete, _, pending = pending.rpartition("\n")
        read_commands(complete, running)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_commands(running: Iterable[int], timeout: float = ENGINE_TIMEOUT) -> None:
    """Wait (at most ``timeout`` seconds) until none of the engine commands ``running`` runs still."""
    deadline = time.monotonic() + timeout
    pids = [pid for pid in running if _alive(pid)]
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [pid for pid in pids if _alive(pid)]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=ENGINE_TIMEOUT, stdin=subprocess.DEVNULL)


def sweep(engine: str, label: str, run: Run = _run) -> list[str]:
    """Remove every container of ``label`` (running or not); their ids. An engine that fails is asked once more."""
    for _attempt in range(2):
        try:
            listed = run([engine, "ps", "-aq", "--filter", owner_filter(label)])
        except (OSError, subprocess.SubprocessError):
            continue
        if listed.returncode != 0:
            continue
        ids = listed.stdout.split()
        if not ids:
            return []
        try:
            removed = run([engine, "rm", "-f", *ids])
        except (OSError, subprocess.SubprocessError):
            continue
        if removed.returncode == 0:
            return ids
    return []


def main(argv: list[str]) -> None:
    """Wait for the parent ``argv = [engine, label, parent]`` to let go, then sweep its containers."""
    if len(argv) != 3 or not argv[2].isdigit():
        raise SystemExit("usage: python -I reaper.py ENGINE LABEL PARENT_PID")
    engine, label, parent = argv[0], argv[1], int(argv[2])
    running: set[int] = set()
    if os.getppid() == parent:
        wait_parent(parent, sys.stdin.fileno(), running)
    wait_commands(running)
    sweep(engine, label)


if __name__ == "__main__":
    main(sys.argv[1:])

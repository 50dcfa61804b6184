"""Shared fixtures and helpers for the pool tests (real worker processes, real sockets)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Upper bound for anything that should finish promptly: a hang guard, never a speed check.
HANG = 30.0


def child_processes() -> list[tuple[int, str, str]]:
    """``(pid, state, cmdline)`` of this process's children (from /proc)."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == me:
            out.append((int(entry), fields[0], cmdline))
    return out


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
    if stat[stat.rindex(")") + 2] == "Z":
        return False  # exited but not reaped: still a leak
    return marker.encode() not in cmdline  # the pid was reused by an unrelated process


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    """Every test must leave no worker process (running or zombie) behind."""
    before = {pid for pid, _, _ in child_processes()}
    yield
    leaked = [
        (pid, state, cmd)
        for pid, state, cmd in child_processes()
        if pid not in before and (state == "Z" or "-m workers" in cmd)
    ]
    assert not leaked, f"worker processes left behind: {leaked}"


@pytest.fixture
def gate(tmp_path: Path) -> Any:
    """Paths for ProbeEnv's slow action: ``gate.path`` (create it to let slow steps finish) and
    ``gate.markers`` (where slow steps announce they started)."""

    class Gate:
        path = str(tmp_path / "gate")
        markers = str(tmp_path / "markers")

        def open(self) -> None:
            Path(self.path).touch()

        def kwargs(self, **extra: Any) -> dict[str, Any]:
            return {"gate": self.path, "marker_dir": self.markers, **extra}

        async def started(self, ident: int) -> None:
            """Wait until the slow step of the env with this ident is running."""
            marker = os.path.join(self.markers, f"started-{ident}")
            async with asyncio.timeout(HANG):
                while not os.path.exists(marker):
                    await asyncio.sleep(0.005)

    os.makedirs(Gate.markers)
    return Gate()


def worker_pid(pool: Any, index: int) -> int:
    """The pid of the process in worker slot ``index``."""
    return int(pool._coord.slots[index].proc.pid)


async def wait_new_worker(pool: Any, index: int, old_pid: int) -> int:
    """Wait until slot ``index`` runs a new process that said HELLO and re-made its envs; returns its pid."""
    coord = pool._coord
    async with asyncio.timeout(HANG):
        while True:
            slot = coord.slots[index]
            remaking = any(r.kind == "make" for r in coord.sched.requests.values() if r.worker == index)
            if slot.proc is not None and slot.proc.pid != old_pid and slot.ready and not remaking:
                return int(slot.proc.pid)
            await asyncio.sleep(0.01)


@pytest.fixture
def other_host() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: ``(namespace, its address, this side's address)``."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")  # CI runs as root: this test runs there
    tag = os.getpid() % 10_000
    ns, host_if, ns_if = f"aioenv-t{tag}", f"aet{tag}h", f"aet{tag}n"
    subnet = f"10.213.{os.getpid() % 250}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=HANG)

    ip("netns", "add", ns)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{subnet}.1/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{subnet}.2/30", "dev", ns_if)
        ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, f"{subnet}.2", f"{subnet}.1"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=HANG)  # takes the veth pair along

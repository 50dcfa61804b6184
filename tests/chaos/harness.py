"""The chaos soak: real pools under random faults, with the invariants checked by the harness.

Traffic: every env of a pool has one request in flight at a time, ``step_env`` with a random action of
:mod:`tests.envs.chaotic` (instant, short, raising, hanging past the deadline), or ``reset_env`` after any
error. Faults, at random intervals: worker processes SIGKILLed or SIGSTOPped for a while; with a server,
also its worker host stopped for a while, client processes SIGKILLed mid-step and the server itself paused
for longer than the clients' patience.

Invariants, checked here and reported in a :class:`Tally`:

- every request gets exactly one reply within the hang guard: a result, or an error of the documented
  kinds (:data:`OUTCOMES`); anything else (no reply, an undocumented exception, a ``UsageError``, which
  this traffic never deserves) is a *violation*;
- nothing is left behind once the pools are closed: child processes, file descriptors, threads, shared
  memory and private directories of this process (:class:`Leaks`), and sessions on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import tempfile
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aioenv
from aioenv.errors import (
    AioEnvError,
    ConnectionLost,
    EnvError,
    EnvRemade,
    PoolClosed,
    StepTimeout,
    WorkerCrashed,
)
from aioenv.transport import zygote
from tests.envs.chaotic import INSTANT, RAISE, SHORT, STALL
from tests.support.procs import HANG, proc_table, templates_of, workers_of

#: The replies a request may get, by the name the tally counts them under (most specific first).
OUTCOMES: list[tuple[type[AioEnvError], str]] = [
    (EnvRemade, "env re-made (EnvRemade)"),
    (WorkerCrashed, "worker crashed (WorkerCrashed)"),
    (StepTimeout, "deadline (StepTimeout)"),
    (EnvError, "env raised (EnvError)"),
    (ConnectionLost, "server lost (ConnectionLost)"),
    (PoolClosed, "pool closed (PoolClosed)"),
]
#: How often each action is drawn: mostly instant and short steps, a few raising and hanging ones.
ACTIONS, WEIGHTS = [INSTANT, SHORT, RAISE, STALL], [0.55, 0.37, 0.05, 0.03]
#: The deadline of steps and resets in the soak's pools (a hanging step overruns it).
STEP_TIMEOUT = 1.0


@dataclass
class Tally:
    """What a soak did and saw."""

    requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)

    @property
    def replies(self) -> int:
        """Requests answered (with a result or a documented error)."""
        return sum(self.outcomes.values())

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to this one."""
        self.requests += other.requests
        self.outcomes.update(other.outcomes)
        self.faults.update(other.faults)
        self.violations += other.violations
        self.leaks += other.leaks


async def ask(tally: Tally, what: str, request: Callable[[], Awaitable[Any]]) -> str:
    """Make one request and classify its one reply (the hang guard catches a reply that never comes)."""
    tally.requests += 1
    try:
        await asyncio.wait_for(request(), HANG)
    except AioEnvError as exc:
        for kind, name in OUTCOMES:
            if isinstance(exc, kind):
                tally.outcomes[name] += 1
                return name
        tally.violations.append(f"{what}: undocumented reply {type(exc).__name__}: {exc}")
        return "violation"
    except TimeoutError:  # not a StepTimeout (caught above): asyncio.wait_for's guard
        tally.violations.append(f"{what}: no reply within {HANG:g} s")
        return "violation"
    except Exception as exc:  # noqa: BLE001 - the point of the harness: anything else is a violation
        tally.violations.append(f"{what}: {type(exc).__name__}: {exc}")
        return "violation"
    tally.outcomes["ok"] += 1
    return "ok"


async def drive_env(pool: aioenv.Pool, env_id: int, rng: random.Random, stop: asyncio.Event, tally: Tally) -> str:
    """One env's traffic until ``stop``; returns the last outcome (a remote pool's caller reopens the pool
    after ``ConnectionLost``)."""
    outcome = "reset"
    while not stop.is_set():
        if outcome == "ok":
            action = rng.choices(ACTIONS, WEIGHTS)[0]
            outcome = await ask(tally, f"step of env {env_id}", lambda a=action: pool.step_env(env_id, a))
        else:
            outcome = await ask(tally, f"reset of env {env_id}", lambda: pool.reset_env(env_id))
        if outcome in ("server lost (ConnectionLost)", "pool closed (PoolClosed)", "violation"):
            return outcome
        if outcome == "worker crashed (WorkerCrashed)":
            await asyncio.sleep(0.05)  # as a caller would: its envs may fail fast until a host has room again
    return outcome


async def drive_pool(pool: aioenv.Pool, rng: random.Random, stop: asyncio.Event, tally: Tally) -> list[str]:
    """Every env of ``pool`` driven until ``stop``."""
    seeds = [rng.random() for _ in range(pool.num_envs)]
    runs = [drive_env(pool, i, random.Random(seeds[i]), stop, tally) for i in range(pool.num_envs)]
    return list(await asyncio.gather(*runs))


async def pause(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT (if it still exists)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def hit_workers(
    pids: Callable[[], list[int]], rng: random.Random, stop: asyncio.Event, tally: Tally, label: str = "worker"
) -> None:
    """Every 0.5-2 s, SIGKILL a random one of ``pids()`` or SIGSTOP it for 0.5-2.5 s."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(0.5, 2.0))
        alive = pids()
        if stop.is_set() or not alive:
            continue
        pid = rng.choice(alive)
        if rng.random() < 0.5:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            tally.faults[f"{label} SIGKILL"] += 1
        else:
            tally.faults[f"{label} SIGSTOP 0.5-2.5 s"] += 1
            await pause(pid, rng.uniform(0.5, 2.5))


def worker_pids(parent: int) -> list[int]:
    """The worker processes (``python -m workers``) ``parent`` started (its children, or its template's)."""
    return workers_of(parent)


@dataclass(frozen=True)
class Leaks:
    """What this process holds that a closed pool must have given back."""

    children: frozenset[int]
    fds: frozenset[tuple[int, str]]  # (descriptor, what it is: a path, socket:[inode], pipe:[inode], ...)
    threads: int
    shm: frozenset[str]
    private_dirs: frozenset[str]

    @classmethod
    def now(cls) -> Leaks:
        """A snapshot of this process."""
        me = os.getpid()
        # the process's worker templates stay for its next pools (aioenv.transport.zygote), as a thread pool would
        templates = set(templates_of(me))
        held = {t.sock.fileno() for t in zygote._templates.values()}  # their control sockets
        return cls(
            children=frozenset(p.pid for p in proc_table() if p.ppid == me and p.pid not in templates),
            fds=frozenset((fd, what) for fd, what in _descriptors() if fd not in held),
            threads=threading.active_count(),
            shm=frozenset(n for n in os.listdir("/dev/shm") if "aioenv" in n),
            private_dirs=frozenset(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("aioenv-")),
        )

    def grown_since(self, before: Leaks) -> list[str]:
        """What is held now and was not ``before`` (empty: nothing leaked)."""
        found = [f"child process {pid}" for pid in sorted(self.children - before.children)]
        found += [f"file descriptor {fd} ({what})" for fd, what in sorted(self.fds - before.fds)]
        if self.threads > before.threads:
            found.append(f"{self.threads - before.threads} threads")
        found += [f"shared memory {n}" for n in sorted(self.shm - before.shm)]
        tmp = tempfile.gettempdir()
        found += [f"private directory {tmp}/{n}" for n in sorted(self.private_dirs - before.private_dirs)]
        return found


def _descriptors() -> list[tuple[int, str]]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own descriptor, say)
            out.append((int(name), os.readlink(f"/proc/self/fd/{name}")))
    return out


async def settled_leaks(before: Leaks) -> list[str]:
    """What leaked since ``before``, once what is being released has had the hang guard's time to go."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG
    while (found := Leaks.now().grown_since(before)) and loop.time() < deadline:
        await asyncio.sleep(0.1)
    return found

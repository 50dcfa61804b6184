"""``executor="auto"``: where a pool's envs run, decided from what one env's steps cost.

A message to a worker process and back costs ~100-150 µs on a small VM (two wake-ups of another
process, see docs/performance.md). An env whose whole batch steps faster than that runs fastest in the
caller's own process, with no message at all; an env that computes for longer gains from more cores;
an env that mostly waits (I/O) wants threads; an ``aioenv.AsyncEnv`` wants an ``async`` worker.

:func:`probe` starts a worker process for the purpose, which makes one extra env, resets it and
times a few steps with sampled actions (about 20 ms of steps, :mod:`workers.probe`), then closes it:
an env that hangs or crashes costs that process (killed after :data:`PROBE_LIMIT`), not the caller.
:func:`choose` turns the timings into a :class:`Choice`, pure arithmetic (unit-tested without envs):

- a coroutine ``step``: ``async`` workers;
- a step that takes over 1 ms of wall time while using under half of it on the CPU: ``thread`` workers;
- ``num_envs x step`` under :data:`ROUND_TRIP`, or a single usable CPU: every env in this process;
- a step under :data:`SHARE_LIMIT` and more than one CPU: this process steps a share of the envs while
  worker processes step the rest at the same time (the share balances this process's batch against the
  workers' batch plus a round trip);
- otherwise ``inline`` worker processes, one per usable CPU.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aioenv.core.launcher import LaunchSpec, WorkerProc, launch_local
from aioenv.core.sources import EnvSources
from aioenv.errors import WorkerCrashed
from aioenv.wire.errors import from_wire
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = ["PROBE_LIMIT", "ROUND_TRIP", "SHARE_LIMIT", "Choice", "Cost", "choose", "probe"]

#: Seconds of a batch's round trip to worker processes and back (messages, wake-ups, the pool's own
#: work per message), as measured on a 2-vCPU VM; a batch cheaper than this runs faster in-process.
ROUND_TRIP = 150e-6
#: The pool's own seconds per call in this process, which a share stepped here adds to that share.
CALL_COST = 25e-6
#: Steps dearer than this run in worker processes only (an expensive env gains little from sharing the
#: caller's core, and keeps the safety of a process of its own).
SHARE_LIMIT = 50e-6
#: Seconds the process timing an env gets (making the env, a reset, its steps): past them it is killed
#: and the envs go to ``inline`` worker processes.
PROBE_LIMIT = 5.0


@dataclass(frozen=True)
class Cost:
    """What one env's steps cost: mean wall and CPU seconds per step (``asynchronous``: a coroutine env)."""

    step: float = 0.0
    cpu: float = 0.0
    asynchronous: bool = False


@dataclass(frozen=True)
class Choice:
    """Where a pool's envs run: ``executor`` of its worker processes (``"in_process"``: there are none),
    ``num_workers`` of them, and the first ``in_process`` envs in the caller's process; ``why`` in words."""

    executor: str
    num_workers: int
    in_process: int
    why: str


async def probe(sources: EnvSources, env_id: int, seed: int | None, private_dir: str) -> Cost:
    """Time env ``env_id``'s steps in a worker process of its own, started for this and stopped after
    (see :mod:`workers.probe`); raises :class:`TimeoutError` past :data:`PROBE_LIMIT` (the process is
    killed), :class:`~aioenv.errors.WorkerCrashed` if it dies, or what the env raised."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[dict[str, Any]] = loop.create_future()
    _pairs, found = sources.for_envs([env_id])
    request = encode(Op.PROBE, {Key.ID: 1, Key.SOURCES: next(iter(found.values())), Key.SEED: seed}, trusted=True)

    def on_message(identity: bytes, frames: list[Any]) -> None:
        header, _ = decode(frames, trusted=True)
        if header[Key.OP] == Op.HELLO:
            proc.port.send(identity, request)
        elif not answer.done():
            answer.set_result(header)

    def on_exit(ended: WorkerProc) -> None:
        if not answer.done():
            answer.set_exception(WorkerCrashed(f"the process timing the env {ended.describe()}", worker=ended.name))

    proc = launch_local(LaunchSpec("probe", "inline", 1, private_dir, on_exit, on_message))
    try:
        async with asyncio.timeout(PROBE_LIMIT):
            header = await answer
    finally:
        asked = proc.port.send(b"probe", encode(Op.CLOSE, {Key.ID: 0})) if answer.done() else False
        await proc.stop(1.0, ask_first=asked)
    if header[Key.OP] == Op.ERROR:
        raise from_wire(header[Key.ERROR])
    timed = header[Key.VALUES]
    return Cost(asynchronous=True) if timed.get("async") else Cost(float(timed["step"]), float(timed["cpu"]))


def choose(cost: Cost, num_envs: int, cpus: int) -> Choice:
    """Where ``num_envs`` envs of this ``cost`` run best with ``cpus`` usable CPUs; see the module docstring."""
    workers = max(1, min(num_envs, cpus))
    if cost.asynchronous:
        return Choice("async", workers, 0, "the env's step is a coroutine")
    step_us = f"{cost.step * 1e6:.0f} µs"
    if cost.step > 1e-3 and cost.cpu < cost.step / 2:
        return Choice("thread", workers, 0, f"a step takes {step_us}, mostly waiting")
    batch = num_envs * cost.step
    if cpus < 2 or batch <= ROUND_TRIP:
        why = "one usable CPU" if cpus < 2 else f"{num_envs} steps take {batch * 1e6:.0f} µs, less than a round trip"
        return Choice("in_process", 0, num_envs, why)
    if cost.step > SHARE_LIMIT:
        return Choice("inline", workers, 0, f"a step takes {step_us}")
    others = min(cpus - 1, num_envs - 1)
    # Balance CALL_COST + here * step (this process) against ROUND_TRIP + (n - here) * step / others
    # (the workers at the same time): here = (ROUND_TRIP - CALL_COST + n * step / others) / (step * (1 + 1/others)).
    # (A batch dearer than ROUND_TRIP leaves the workers at least one env each.)
    step = max(cost.step, 1e-9)
    here = round((ROUND_TRIP - CALL_COST + num_envs * step / others) / (step * (1 + 1 / others)))
    here = max(1, min(here, num_envs - others))
    return Choice("inline", others, here, f"a step takes {step_us}: this process shares the work")

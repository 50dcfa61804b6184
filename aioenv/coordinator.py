"""The coordinator: routes requests to worker processes and replies back to sinks.

It owns the ROUTER socket (:mod:`aioenv.transport`), the local worker processes
(:mod:`aioenv.launcher`) and the env/request tables (:mod:`aioenv.scheduler`).
It never runs env code. Failures it handles:

- a worker process that exits (any signal) is noticed at once through its pidfd:
  its in-flight requests fail with :class:`WorkerCrashed`, a fresh process takes
  its slot and re-makes its envs (they need a reset before stepping);
- a request past its deadline fails with :class:`StepTimeout` and its worker,
  stuck inside the env, is killed and replaced as above;
- shutdown: CLOSE, wait, SIGTERM, wait, SIGKILL; never hangs.

Messages to a worker that has not said HELLO yet wait in its outbox.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from aioenv.errors import (
    AioEnvError,
    PoolClosed,
    ProtocolError,
    StepTimeout,
    WorkerCrashed,
    from_wire,
)
from aioenv.launcher import LocalProcess, describe_exit
from aioenv.protocol import Op, decode, encode, leaves_from_wire
from aioenv.results import Part
from aioenv.scheduler import Request, Scheduler
from aioenv.sources import EnvSources
from aioenv.transport import Router

log = logging.getLogger("aioenv.coordinator")

#: A slot whose worker died this many times is given up (its envs fail fast).
MAX_RESTARTS = 20

Build = Callable[[Request], tuple[dict[str, Any], list[np.ndarray]]]


class _Slot:
    """A worker position; its process is replaced when it dies."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.name = ""
        self.proc: LocalProcess | None = None
        self.ready = False
        self.outbox: list[list[Any]] = []
        self.restarts = 0
        self.dead_reason = ""


class Coordinator:
    """Local workers behind one ROUTER socket, for one pool.

    Args:
        num_envs: size of the env table.
        sources: how to make each env.
        autoreset_mode: ``"next_step"``, ``"same_step"`` or ``"disabled"``.
        executor: the workers' executor.
        on_remade: called with the env ids re-made after a crash or a timeout.
    """

    def __init__(
        self,
        num_envs: int,
        sources: EnvSources,
        private_dir: str,
        *,
        autoreset_mode: str,
        executor: str,
        on_remade: Callable[[np.ndarray], None],
    ) -> None:
        self.sched = Scheduler(num_envs)
        self.sources = sources
        self.private_dir = private_dir
        self.autoreset_mode = autoreset_mode
        self.executor = executor
        self.on_remade = on_remade
        self.slots: list[_Slot] = []
        self._by_name: dict[bytes, _Slot] = {}
        self._router: Router | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.closing = False
        self._retired: list[LocalProcess] = []
        self.loop = asyncio.get_running_loop()

    @staticmethod
    def private_directory() -> str:
        """A fresh 0700 directory for the socket and pickled factories."""
        return tempfile.mkdtemp(prefix="aioenv-")

    # ------------------------------------------------------------ start

    async def start(self, num_workers: int) -> dict[str, Any]:
        """Start workers, make every env; returns the env description ({"obs", "act", "metadata", ...})."""
        self._router = Router(f"ipc://{self.private_dir}/coord.sock", self._on_message)
        blocks = self.sched.place(num_workers)
        for index in range(num_workers):
            slot = _Slot(index)
            self.slots.append(slot)
            self._spawn(slot)
        makes = [self._make(slot, ids) for slot, ids in zip(self.slots, blocks, strict=True)]
        replies = await asyncio.gather(*makes)
        described: dict[str, Any] = {}
        for reply in replies:
            described.update(reply)
        return described

    def _spawn(self, slot: _Slot) -> None:
        slot.generation += 1
        slot.name = f"w{slot.index}.{slot.generation}"
        slot.ready = False
        slot.outbox = []
        self._by_name[slot.name.encode()] = slot
        assert self._router is not None
        slot.proc = LocalProcess(slot.name, self._router.endpoint, self.private_dir, self.executor, self._on_exit)

    async def _make(self, slot: _Slot, env_ids: np.ndarray) -> dict[str, Any]:
        fut: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._send_make(slot, env_ids, fut)
        return await fut

    def _send_make(self, slot: _Slot, env_ids: np.ndarray, sink: asyncio.Future[Any] | None) -> None:
        """Ask ``slot``'s worker to make ``env_ids``; ``sink`` gets the spaces (None: a re-make, only logged)."""
        pairs, sources = self.sources.for_envs(env_ids.tolist())
        req = self.sched.open(slot.index, "make", env_ids, sink=sink)
        fields = {"id": req.id, "envs": pairs, "sources": sources, "autoreset": self.autoreset_mode}
        self._send(slot, encode(Op.MAKE, fields))

    # ------------------------------------------------------------ requests

    def submit(self, kind: str, env_ids: np.ndarray, sink: Any, build: Build, *, timeout: float | None = None) -> None:
        """Send one request per worker covering ``env_ids`` (already claimed); replies go to ``sink``."""
        deadline = None if timeout is None else self.loop.time() + timeout
        op = {"step": Op.STEP, "reset": Op.RESET, "call": Op.CALL}[kind]
        groups = self.sched.split(env_ids)
        sink.parts(len(groups))
        for worker, positions in groups:
            ids = env_ids[positions] if positions.size != env_ids.size else env_ids
            req = self.sched.open(worker, kind, ids, sink=sink, positions=positions, deadline=deadline)
            fields, arrays = build(req)
            fields["id"] = req.id
            fields["env"] = ids.tolist()
            slot = self.slots[worker]
            if slot.dead_reason:
                self.sched.finish(req.id)
                dead = lambda e, s=slot: self._crashed(s.name, "-", None, s.dead_reason, e, kind)  # noqa: E731
                sink.deliver(Part.failed(ids, dead), positions)
                continue
            self._send(slot, encode(op, fields, arrays))
        if deadline is not None:
            self._arm_timer()

    def _send(self, slot: _Slot, frames: list[Any]) -> None:
        if not slot.ready:
            slot.outbox.append(frames)
            return
        assert self._router is not None
        if not self._router.send(slot.name.encode(), frames):
            slot.outbox.append(frames)  # reconnecting; flushed at its next HELLO

    # ------------------------------------------------------------ replies

    def _on_message(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        slot = self._by_name.get(identity)
        if slot is None:
            log.warning("dropping a message from unknown peer %r", identity)
            return
        try:
            header, arrays = decode(frames)
        except ProtocolError as exc:
            log.error("malformed message from worker %s: %s", slot.name, exc)
            return
        op = header["op"]
        if op == Op.HELLO:
            slot.ready = True
            outbox, slot.outbox = slot.outbox, []
            for queued in outbox:
                self._send(slot, queued)
            return
        req = self.sched.finish(header.get("id"))
        if req is None:
            return  # a late reply to a request that timed out or was failed: dropped
        try:
            self._deliver(req, op, header, arrays)
        except Exception as exc:
            log.exception("bad reply from worker %s", slot.name)
            err = ProtocolError(f"malformed reply from worker {slot.name}: {exc}")
            self._deliver_part(req, Part.failed(req.env_ids, lambda e: _with_env(err, e)))

    def _deliver(self, req: Request, op: str, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        kind = req.kind
        if op == Op.ERROR:
            desc = header.get("error")
            part = Part.failed(req.env_ids, lambda e: from_wire({**(desc or {}), "env_id": e}, context=kind))
            self._deliver_part(req, part)
            return
        errors = {int(row): from_wire(d, context=kind) for row, d in (header.get("err") or {}).items()}
        if kind == "make":
            self._made(req, header, errors)
            return
        if kind == "call":
            part = Part(req.env_ids, errors=errors, values=header["values"])
        else:
            extras = [arrays[i] for i in header.get("x", [])] or None
            obs = leaves_from_wire(header["obs"], arrays)
            part = Part(req.env_ids, obs, extras, header.get("info"), errors, binfo=header.get("binfo"))
        self._deliver_part(req, part)

    def _deliver_part(self, req: Request, part: Part) -> None:
        if req.kind == "make":
            self._fail_make(req, part.errors[min(part.errors)])
            return
        req.sink.deliver(part, req.positions)

    def _made(self, req: Request, header: dict[str, Any], errors: dict[int, AioEnvError]) -> None:
        if errors:
            self._fail_make(req, errors[min(errors)], more=len(errors) - 1)
        elif req.sink is not None and not req.sink.done():
            req.sink.set_result(dict(header.get("spaces") or {}))

    @staticmethod
    def _fail_make(req: Request, err: BaseException, more: int = 0) -> None:
        """A MAKE failed: raise it to ``start()``, or log it for a re-make (nobody awaits that one).

        The envs of a failed re-make stay broken: requests for them get the worker's clear error.
        """
        if req.sink is None:
            also = f" (and {more} more envs)" if more else ""
            log.error("re-making envs %s failed%s: %s", req.env_ids.tolist(), also, err)
        elif not req.sink.done():
            req.sink.set_exception(err)

    # ------------------------------------------------------------ failures

    @staticmethod
    def _crashed(name: str, pid: object, code: int | None, how: str, env_id: int, kind: str) -> WorkerCrashed:
        return WorkerCrashed(
            f"{kind} failed for env {env_id}: its worker {name} (pid {pid}) {how} while the request was in "
            "flight; the env is re-made on a fresh worker: reset it before stepping",
            env_id=env_id,
            worker=name,
            exitcode=code,
        )

    def _on_exit(self, proc: LocalProcess) -> None:
        slot = next((s for s in self.slots if s.proc is proc), None)
        if slot is None or self.closing:
            return  # a retired process (already replaced), or shutdown
        log.warning("worker %s (pid %d) %s", slot.name, proc.pid, describe_exit(proc.returncode))
        self._restart(slot, describe_exit(proc.returncode))

    def _restart(self, slot: _Slot, how: str) -> None:
        """Fail the slot's in-flight requests with WorkerCrashed, start a fresh worker, re-make its envs."""
        proc = slot.proc
        name, pid, code = slot.name, proc.pid if proc else "?", proc.returncode if proc else None
        if proc is not None and proc.returncode is None:
            self._retired.append(proc)  # killed, not yet reaped: aclose waits for it
        self._by_name.pop(name.encode(), None)
        for req in self.sched.lose_worker(slot.index):
            if req.kind == "make":
                self._fail_make(req, WorkerCrashed(f"worker {name} {how} while making its envs", worker=name))
            else:
                part = Part.failed(req.env_ids, lambda e, k=req.kind: self._crashed(name, pid, code, how, e, k))
                self._deliver_part(req, part)
        slot.restarts += 1
        if slot.restarts > MAX_RESTARTS:
            slot.dead_reason = f"died {slot.restarts} times; aioenv gave up restarting it"
            slot.proc = None
            log.error("worker slot %d %s", slot.index, slot.dead_reason)
            return
        self._spawn(slot)
        env_ids = self.sched.envs_of(slot.index)
        self._send_make(slot, env_ids, None)
        self.on_remade(env_ids)

    def _arm_timer(self) -> None:
        when = self.sched.next_deadline()
        if when is None or (self._timer_at is not None and self._timer_at <= when):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        stuck: set[int] = set()
        for req in self.sched.expire(self.loop.time()):
            stuck.add(req.worker)
            slot = self.slots[req.worker]

            def timeout_error(env_id: int, kind: str = req.kind, slot: _Slot = slot) -> StepTimeout:
                return StepTimeout(
                    f"{kind} of env {env_id} overran its deadline; its worker {slot.name} is restarted and the "
                    "env re-made: reset it before stepping",
                    env_id=env_id,
                )

            self._deliver_part(req, Part.failed(req.env_ids, timeout_error))
        for worker in stuck:
            slot = self.slots[worker]
            if slot.proc is not None:
                slot.proc.kill()  # stuck inside the env's code: only a new process frees the slot
                self._restart(slot, "was killed because a request overran its deadline")
        self._arm_timer()

    # ------------------------------------------------------------ shutdown

    async def aclose(self, grace: float = 5.0) -> None:
        """Fail what is in flight with PoolClosed, stop every worker for sure, remove the private dir.

        Workers that said HELLO get CLOSE (they close their envs) and ``grace`` seconds; the others
        get SIGTERM at once. Then SIGTERM, then SIGKILL, ``grace`` seconds apart. Idempotent.
        """
        if self.closing:
            return
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        for req in self.sched.drain():
            err = PoolClosed(f"the pool was closed while env {int(req.env_ids[0])}'s {req.kind} was in flight")
            if req.kind == "make":
                self._fail_make(req, err)
            else:
                req.sink.fail(err)
        stops = [p.stop(grace, ask_first=False) for p in self._retired]
        for slot in self.slots:
            if slot.proc is None:
                continue
            asked = (
                slot.ready
                and self._router is not None
                and self._router.send(slot.name.encode(), encode(Op.CLOSE, {"id": 0}))
            )
            stops.append(slot.proc.stop(grace, ask_first=bool(asked)))
        await asyncio.gather(*stops)
        if self._router is not None:
            self._router.close()
        shutil.rmtree(self.private_dir, ignore_errors=True)


def _with_env(err: AioEnvError, env_id: int) -> AioEnvError:
    return type(err)(err.message, env_id=env_id)

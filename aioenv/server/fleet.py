"""Remote worker hosts of a server: ``aioenv serve --worker-bind`` and ``aioenv worker --connect``.

A *worker host* is an ``aioenv worker`` process (:mod:`workers.agent`) on any machine. It connects to
the server's worker port, JOINs with its capacity (envs) and executor, and PINGs every second. When a
pool needs a worker process, the server places it on the least-loaded host with room
(:mod:`aioenv.core.placement`) and sends that host SPAWN; the host starts ``python -m workers`` connected to
the same port, which says HELLO like any local worker and is then driven by its pool's coordinator
exactly as a local one. The reply to JOIN says how often to PING: a quarter of ``worker_timeout``, at
most every second (:mod:`aioenv.wire.beat`), so a healthy host is never dropped for one late PING.
The host reports each child's exit (EXITED), so a crash is noticed at once; a host that stops answering for
``worker_timeout`` seconds, or leaves, is dropped and each of its
processes counts as crashed: in-flight requests fail with ``WorkerCrashed`` and the envs are re-made
on another host. The server's own machine is the host ``"local"``: with unlimited capacity (the
default) it is the last resort, used when no worker host has room; ``local_capacity`` K makes it one
host among the others; 0 keeps every env off the server.

Messages on the worker port (msgpack headers, :mod:`aioenv.wire.protocol`)::

    host -> server  JOIN {name, host, pid, executor, capacity}   reply RESULT {beat}, or ERROR (refused;
                                                                  with "retry": its name is taken)
                    PING                                          reply PONG, or ERROR {"rejoin": true}
                    STARTED {name, pid} / EXITED {name, code}     a child process started / exited
                    LEAVE                                         the host stops (its children are gone)
    server -> host  SPAWN {name, executor} / KILL {name, sig}

Only names cross: a host runs ``python -m workers`` with env sources that are names, never pickles.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import zmq

from aioenv.core.launcher import LaunchSpec, LocalProcess, Port, WorkerProc, describe_exit, launch_local
from aioenv.core.placement import LOCAL, Placement
from aioenv.errors import AioEnvError, ProtocolError, UsageError
from aioenv.logs import peer_name
from aioenv.server.peers import Sweep
from aioenv.transport.router import Router
from aioenv.wire.beat import interval_for
from aioenv.wire.errors import relay_wire
from aioenv.wire.options import EXECUTORS, choice, positive_int
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = ["Fleet", "RemoteProcess"]

log = logging.getLogger("aioenv.fleet")

_HOST_OPS = (Op.PING, Op.STARTED, Op.EXITED, Op.LEAVE)
_CLIENT_OPS = (Op.OPEN, Op.STATUS, Op.STEP, Op.RESET, Op.CALL, Op.CLOSE)  # what a client sends a server


class _Agent:
    """A joined worker host."""

    def __init__(self, identity: bytes, name: str, host: str, pid: Any, executor: str, capacity: int) -> None:
        self.identity = identity
        self.name = name
        self.host = host
        self.pid = pid
        self.executor = executor
        self.capacity = capacity
        self.last_seen = time.monotonic()
        self.children: dict[str, RemoteProcess] = {}


class RemoteProcess:
    """A worker process that a worker host started for a coordinator (a :class:`~aioenv.core.launcher.WorkerProc`)."""

    def __init__(self, fleet: Fleet, agent: _Agent, spec: LaunchSpec) -> None:
        self.name = spec.name
        self.spec = spec
        self.agent = agent
        self.fleet = fleet
        self.port: Port = fleet.router
        self.exited = asyncio.Event()
        self._pid: int | str = "?"
        self._code: int | None = None
        self._how = ""

    @property
    def pid(self) -> int | str:
        """Its pid on its host (``"?"`` until the host reports it)."""
        return self._pid

    @property
    def returncode(self) -> int | None:
        """Its exit code, once its host reported it (None if the host was lost)."""
        return self._code

    def describe(self) -> str:
        """How it ended, in words (naming its host)."""
        return self._how or f"is running on host {self.agent.name}"

    def kill(self) -> None:
        """Ask its host to SIGKILL it."""
        self.fleet.signal(self, "SIGKILL")

    async def stop(self, grace: float, *, ask_first: bool = True) -> None:
        """Wait for its exit, asking its host for SIGTERM, then SIGKILL; if the host never confirms,
        the process is written off (the host kills its children when it loses the server)."""
        stages = (None, "SIGTERM", "SIGKILL") if ask_first else ("SIGTERM", "SIGKILL")
        for sig in stages:
            if self.exited.is_set():
                return
            if sig is not None:
                self.fleet.signal(self, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), grace)
        self.ended(None, f"did not confirm its exit on host {self.agent.name}")

    def started(self, pid: Any) -> None:
        """Its host started it."""
        if isinstance(pid, int):
            self._pid = pid

    def ended(self, code: int | None, how: str) -> None:
        """It exited or was lost: free its room and tell its coordinator (once)."""
        if self.exited.is_set():
            return
        self._code = code
        self._how = how
        self.exited.set()
        self.fleet.forget(self)
        self.spec.on_exit(self)


def _port_of(endpoint: str | None) -> str:
    """How to name the server's client port to a peer: its address, or its port when bound to all addresses."""
    if endpoint is None:
        return "its --bind address"
    host, _, port = endpoint.rpartition(":")
    if host.split("//")[-1] in ("0.0.0.0", "*", "[::]", "::"):
        return f"port {port} of this host"
    return endpoint


class Fleet:
    """The server's worker hosts and their processes; see the module docstring.

    Args:
        bind: the worker port, e.g. ``"tcp://0.0.0.0:5556"``.
        configure: socket options before bind (CURVE, see :mod:`aioenv.transport.auth`).
        local_capacity: envs the server may host itself (None: unlimited; 0: remote hosts only).
        worker_timeout: seconds of silence after which a host is dropped.
        client_endpoint: the server's client port, named to a client that knocks here by mistake.
        max_message_bytes: the largest message a host or worker may send (None: no bound).
    """

    def __init__(
        self,
        bind: str,
        *,
        configure: Callable[[zmq.Socket[bytes]], None] | None = None,
        local_capacity: int | None = None,
        worker_timeout: float = 10.0,
        client_endpoint: str | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        self.client_endpoint = client_endpoint
        self.placement = Placement()
        if local_capacity != 0:
            self.placement.add(LOCAL, local_capacity)
        self.worker_timeout = worker_timeout
        self.router = Router(bind, self._on_message, configure, max_message_bytes=max_message_bytes)
        self.agents: dict[bytes, _Agent] = {}
        self._children: dict[bytes, RemoteProcess] = {}
        self.lost = 0  # hosts dropped for silence
        self._waiting: list[Callable[[], bool]] = []  # retries of workers that found no room
        self._retry_soon = False
        self.protocol_errors = 0
        self._sweep = Sweep(interval_for(worker_timeout))
        self._reaper = asyncio.get_running_loop().call_later(self._sweep.interval, self._reap)

    @property
    def endpoint(self) -> str:
        """The worker port bound (with the port chosen, if it was 0)."""
        return self.router.endpoint

    # ------------------------------------------------------------ launching (a coordinator's launch function)

    def launch(self, spec: LaunchSpec) -> WorkerProc:
        """Place ``spec``'s worker on the least-loaded host with room and start it there.

        Raises:
            CapacityError: no host serving ``spec.executor`` has room for ``spec.envs`` envs.
        """
        host = self.placement.choose(spec.envs, spec.executor)
        if host.name == LOCAL:
            on_exit = spec.on_exit

            def released(proc: Any) -> None:
                self.placement.release(LOCAL, spec.envs)
                on_exit(proc)
                self._room_freed()

            local: LocalProcess = launch_local(dataclasses.replace(spec, on_exit=released))
            return local
        agent = next(a for a in self.agents.values() if a.name == host.name)
        proc = RemoteProcess(self, agent, spec)
        agent.children[spec.name] = proc
        self._children[spec.name.encode()] = proc
        self.router.send(agent.identity, encode(Op.SPAWN, {Key.NAME: spec.name, Key.EXECUTOR: spec.executor}))
        log.info("worker %s (%d %s envs) placed on host %s", spec.name, spec.envs, spec.executor, agent.name)
        return proc

    def when_room(self, retry: Callable[[], bool]) -> None:
        """Call ``retry()`` whenever room may have freed up (a host joined, a worker ended) until it returns
        True (a coordinator's worker that could not be restarted for want of room)."""
        self._waiting.append(retry)

    def _room_freed(self) -> None:
        if self._waiting and not self._retry_soon:
            self._retry_soon = True
            asyncio.get_running_loop().call_soon(self._retry)

    def _retry(self) -> None:
        self._retry_soon = False
        waiting, self._waiting = self._waiting, []
        for retry in waiting:  # oldest first
            try:
                done = retry()
            except Exception:  # a bug in one pool's retry must not starve the others
                log.exception("retrying a worker start failed")
                done = True
            if not done:
                self._waiting.append(retry)

    def signal(self, proc: RemoteProcess, sig: str) -> None:
        """Ask ``proc``'s host to send it ``sig``."""
        if not proc.exited.is_set():
            self.router.send(proc.agent.identity, encode(Op.KILL, {Key.NAME: proc.name, Key.SIGNAL: sig}))

    def forget(self, proc: RemoteProcess) -> None:
        """``proc`` is gone: free its room."""
        self._children.pop(proc.name.encode(), None)
        if proc.agent.children.pop(proc.name, None) is not None:
            self.placement.release(proc.agent.name, proc.spec.envs)
            self._room_freed()

    # ------------------------------------------------------------ messages

    def _on_message(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        """A message on the worker port: a worker process's (passed to its pool), a host's JOIN, a message
        of a host that is not joined, or one of a joined host. A malformed one is refused and counted."""
        child = self._children.get(identity)
        if child is not None:
            child.spec.on_message(identity, frames)
            return
        req_id: Any = None
        try:
            header, _ = decode(frames)
            req_id = header.get(Key.ID)
            if req_id is not None and type(req_id) is not int:  # never echo a peer's payload back
                req_id = None
                raise ProtocolError("a request id must be an int")
            op = header[Key.OP]
            agent = self.agents.get(identity)
            if op == Op.JOIN:
                self._on_join(identity, req_id, header)
            elif agent is None:
                self._on_stranger(identity, req_id, op)
            else:
                self._on_host_message(agent, identity, req_id, op, header)
        except (AioEnvError, KeyError, TypeError, ValueError) as exc:
            self.protocol_errors += 1
            error: AioEnvError = exc if isinstance(exc, AioEnvError) else ProtocolError(f"malformed message: {exc}")
            log.warning("refused a message on the worker port from %s: %s", peer_name(identity), error)
            self._refuse(identity, req_id, error)

    def _on_join(self, identity: bytes, req_id: Any, header: dict[str, Any]) -> None:
        """A host asks to join: admitted, or told to retry while its name is still taken."""
        try:
            self._join(identity, header)
        except _NameTaken as exc:
            self._refuse(identity, req_id, exc.error, retry=True)
            return
        self.router.send(identity, encode(Op.RESULT, {Key.ID: req_id, Key.BEAT: self._sweep.interval}))

    def _on_stranger(self, identity: bytes, req_id: Any, op: str) -> None:
        """A message from a peer that is not a joined host: each kind of stray peer is told what it needs."""
        if op == Op.HELLO:  # a worker whose pool is gone (e.g. from before a restart): let it go
            self.router.send(identity, encode(Op.CLOSE, {Key.ID: 0}))
        elif op in _CLIENT_OPS:  # a client given the worker port instead of the client port
            err = UsageError(
                "this is an aioenv server's worker port (for `aioenv worker --connect`): clients "
                f"connect to its client port, {_port_of(self.client_endpoint)}"
            )
            self._refuse(identity, req_id, err)
        elif op in _HOST_OPS:  # a host that was dropped, or joined a server that restarted
            err = UsageError("this worker host is not joined (it was dropped or the server restarted): join again")
            self._refuse(identity, req_id, err, rejoin=True)
        # else: a late reply of a worker that was written off: never answer one

    def _on_host_message(self, agent: _Agent, identity: bytes, req_id: Any, op: str, header: dict[str, Any]) -> None:
        """A joined host's heartbeat, news of its worker processes, or its goodbye."""
        agent.last_seen = time.monotonic()
        if op == Op.PING:
            self.router.send(identity, encode(Op.PONG, {Key.ID: req_id}))
        elif op == Op.STARTED:
            proc = agent.children.get(str(header[Key.NAME]))
            if proc is not None:
                proc.started(header.get(Key.PID))
        elif op == Op.EXITED:
            proc = agent.children.get(str(header[Key.NAME]))
            code = header.get(Key.CODE)
            code = code if isinstance(code, int) else None
            if proc is not None:
                proc.ended(code, f"{describe_exit(code)} on host {agent.name}")
        elif op == Op.LEAVE:
            log.info("worker host %s left", agent.name)
            self._drop(agent, f"was lost: its host {agent.name} stopped")
        else:
            raise ProtocolError(f"unknown op {op!r} on the worker port")

    def _refuse(self, identity: bytes, req_id: Any, err: AioEnvError, **flags: bool) -> None:
        fields = {Key.ID: req_id if isinstance(req_id, int) else None, Key.ERROR: relay_wire(err), **flags}
        self.router.send(identity, encode(Op.ERROR, fields))

    def _join(self, identity: bytes, header: dict[str, Any]) -> None:
        capacity = header.get(Key.CAPACITY)
        name = str(header.get(Key.NAME) or identity.decode(errors="replace"))
        executor = choice("a worker host's executor", header.get(Key.EXECUTOR), EXECUTORS, error=UsageError)
        capacity = positive_int("a worker host's capacity", capacity, error=UsageError, unit="number of envs")
        if name == LOCAL:
            raise UsageError(f"{LOCAL!r} names the server's own machine: give the worker host another --name")
        if any(a.name == name and a.identity != identity for a in self.agents.values()):
            raise _NameTaken(
                UsageError(
                    f"a worker host named {name!r} is already joined (a previous run is dropped after "
                    f"{self.worker_timeout:g} s of silence): give each host its own --name"
                )
            )
        old = self.agents.get(identity)
        if old is not None:  # it restarted or lost us: what it ran is gone
            self._drop(old, f"was lost: its host {old.name} rejoined")
        agent = _Agent(identity, name, str(header.get(Key.HOST, "")), header.get(Key.PID), executor, capacity)
        self.agents[identity] = agent
        self.placement.add(name, capacity, executor)
        log.info("worker host %s joined from %s (%d %s envs)", name, agent.host or "?", capacity, executor)
        self._room_freed()

    def _drop(self, agent: _Agent, how: str) -> None:
        """Forget ``agent``; each of its processes counts as crashed (its pool re-makes the envs elsewhere)."""
        self.agents.pop(agent.identity, None)
        self.placement.remove(agent.name)
        for proc in list(agent.children.values()):
            # Its processes may still be alive and connected to this port: told both ways to stop.
            self.router.send(agent.identity, encode(Op.KILL, {Key.NAME: proc.name, Key.SIGNAL: "SIGKILL"}))
            self.router.send(proc.name.encode(), encode(Op.CLOSE, {Key.ID: 0}))
            proc.ended(None, how)

    def _reap(self) -> None:
        now, late = time.monotonic(), self._sweep.late()
        for agent in list(self.agents.values()):
            agent.last_seen += late  # the time the server did not run is not the host's silence
            if now - agent.last_seen > self.worker_timeout:
                self.lost += 1
                log.warning("worker host %s silent for %.0f s: dropping it", agent.name, now - agent.last_seen)
                self._drop(agent, f"was lost: its host {agent.name} stopped answering heartbeats")
        self._reaper = asyncio.get_running_loop().call_later(self._sweep.interval, self._reap)

    # ------------------------------------------------------------ state

    def status(self) -> list[dict[str, Any]]:
        """One row per host: name, address, executor, capacity, load, processes."""
        rows = []
        agents = list(self.agents.values())  # also read from the metrics thread: iterate copies
        for host in list(self.placement.hosts.values()):
            agent = next((a for a in agents if a.name == host.name), None)
            rows.append(
                {
                    "name": host.name,
                    "host": agent.host if agent else "",
                    "executor": host.executor or "any",
                    "capacity": host.capacity,
                    "envs": host.load,
                    "processes": len(agent.children) if agent else None,
                }
            )
        return rows

    def close(self) -> None:
        """Stop listening (after the pools were closed); hosts notice and wait to rejoin."""
        self._reaper.cancel()
        self.router.close()


class _NameTaken(Exception):
    """A JOIN under a name another connection holds: refused for now (the host tries again)."""

    def __init__(self, error: UsageError) -> None:
        super().__init__(error.message)
        self.error = error

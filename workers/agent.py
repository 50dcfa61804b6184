"""``aioenv worker --connect tcp://HOST:5556``: a worker host that runs worker processes for a server.

The host connects a DEALER socket to the server's worker port, JOINs with its capacity and executor, and
then does what the server asks: SPAWN starts ``python -m workers --connect <the same port>`` (which
hosts a pool's envs and talks to the server directly), KILL signals one of them. Workers are forked from
the host's worker template, which it starts before it joins (``AIOENV_WORKER_START=fork``, the default
here as in ``aioenv serve``: :mod:`aioenv.transport.zygote`), or started afresh
(``AIOENV_WORKER_START=exec``). It reports every child's start and exit at once (each child's exit
descriptor is polled next to the socket; nothing busy-waits) and PINGs as often as the server's reply to
JOIN asks (a quarter of its ``--worker-timeout``, at most every ``HEARTBEAT`` seconds:
:mod:`aioenv.wire.beat`). When the server has been silent for ``server_timeout`` seconds, or says it
does not know this host (it restarted), the host kills its children (their pools have written them off)
and JOINs again until a server answers. A JOIN refused for a name still taken (a previous run of this
host the server has not dropped yet) is retried; one refused for good (a protocol version mismatch) ends
the host with exit code 2. SIGTERM or SIGINT: children get SIGTERM, then SIGKILL, the server gets LEAVE,
and the host exits 0. Children also die with the host (``PR_SET_PDEATHSIG``: a forked one with its
template, which dies with the host), so none outlive it. See :mod:`aioenv.server.fleet`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from typing import Any

import zmq

from aioenv.errors import ProtocolError
from aioenv.transport.spawn import TEMPLATE_WAIT, WorkerProcess, launch_worker, warm_up
from aioenv.wire.beat import HEARTBEAT as BEAT_DEFAULT
from aioenv.wire.beat import heard_interval
from aioenv.wire.options import EXECUTORS, choice, positive_int
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = ["HEARTBEAT", "WorkerHost"]

log = logging.getLogger("aioenv.worker")

#: Seconds between JOINs while not joined, and between PINGs at most (the server may ask for more often).
HEARTBEAT = BEAT_DEFAULT
_SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT}


class _Child:
    def __init__(self, name: str, proc: WorkerProcess) -> None:
        self.name = name
        self.proc = proc


class WorkerHost:
    """Runs worker processes for one server; see the module docstring.

    Args:
        endpoint: the server's worker port, e.g. ``"tcp://10.0.0.5:5556"``.
        capacity: envs this host may run at once (over all its worker processes).
        executor: the executor its worker processes use (the server sends it only pools of that kind).
        name: how the server names this host (unique per server; default: hostname-pid).
        server_timeout: seconds of server silence after which the children are killed and it rejoins.
        curve: ``(own .key_secret file, server .key file)`` for a server started with ``--auth``.
    """

    def __init__(
        self,
        endpoint: str,
        capacity: int,
        executor: str = "inline",
        *,
        name: str | None = None,
        server_timeout: float = 10.0,
        curve: tuple[str, str] | None = None,
    ) -> None:
        positive_int("capacity", capacity, unit="number of envs")
        choice("executor", executor, EXECUTORS)
        self.endpoint = endpoint
        self.capacity = capacity
        self.executor = executor
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.server_timeout = server_timeout
        self.curve = curve
        self.children: dict[str, _Child] = {}
        self.joined = False
        self._stop = False
        self._heard = self._hinted = 0.0  # when the server last wrote; when we last said it is silent
        self._next_beat = 0.0  # when the next PING (or JOIN) is due
        self._beat_every = HEARTBEAT  # seconds between PINGs: what the server's reply to JOIN asked, at most this

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (or a refusal: a wrong protocol version, a clashing name); exit code."""
        warm_up(TEMPLATE_WAIT)  # (forked workers: the template's imports made before any is asked for)
        self.sock = self._connect()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        # A signal writes a byte here, which wakes the poll at once (pyzmq retries a poll that EINTR cut short).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        log.info("worker host %s: %d %s envs, joining %s", self.name, self.capacity, self.executor, self.endpoint)
        self._heard = self._hinted = time.monotonic()
        self._next_beat = 0.0
        code = 0
        try:
            while not self._stop:
                self._beat()
                self._watch_server()
                self._wait(wake_r)
                if self._read_messages():
                    code = 2  # refused: a wrong protocol version or a clashing name
                    self._stop = True
        finally:
            self._stop_children()
            if self.joined:
                self._send(encode(Op.LEAVE, {Key.ID: 0}))
            self.sock.close(linger=1000)
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
        log.info("worker host %s stopped", self.name)
        return code

    def _connect(self) -> zmq.Socket[bytes]:
        """The DEALER socket to the server's worker port (with CURVE keys when given)."""
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, f"host:{self.name}:{os.getpid()}:{uuid.uuid4().hex[:8]}".encode())
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # no queueing for a server that is not there: JOIN is re-sent
        if self.curve is not None:
            from aioenv.transport.auth import client_configurer

            client_configurer(self.curve)(sock)
        sock.connect(self.endpoint)
        return sock

    def _beat(self) -> None:
        """A PING every ``_beat_every`` seconds once joined, a JOIN every ``HEARTBEAT`` until then."""
        now = time.monotonic()
        if now >= self._next_beat:
            self._send(encode(Op.PING, {Key.ID: 0}) if self.joined else self._join_message())
            self._next_beat = now + (self._beat_every if self.joined else HEARTBEAT)

    def _watch_server(self) -> None:
        """A joined host whose server went silent stops its workers and joins again; one that cannot join
        says, once per timeout, what to check."""
        now = time.monotonic()
        if self.joined and now - self._heard > self.server_timeout:
            log.warning(
                "server silent for %.0f s: stopping %d workers, joining again", now - self._heard, len(self.children)
            )
            self._lose_server()
            self._hinted = now
        if not self.joined and now - max(self._heard, self._hinted) > self.server_timeout:
            self._hinted = now
            log.warning(
                "no answer from %s yet: is `aioenv serve --worker-bind` listening there (with --auth: are "
                "this host's --key and --server-key admitted)? still trying",
                self.endpoint,
            )

    def _wait(self, wake_r: int) -> None:
        """Sleep until the server writes, a worker process exits (its pidfd), a signal arrives, or the next
        heartbeat is due; reap the workers that exited."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(wake_r, zmq.POLLIN)
        for child in self.children.values():
            poller.register(child.proc.exit_fd, zmq.POLLIN)
        ready = dict(poller.poll(int(max(0.0, self._next_beat - time.monotonic()) * 1000) + 1))
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        for child in list(self.children.values()):
            if child.proc.exit_fd in ready:
                self._reap(child)

    def _read_messages(self) -> bool:
        """Handle every message the server has sent; True when the server refused this host."""
        while int(self.sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            self._heard = time.monotonic()
            if self._on_message(self.sock.recv_multipart(zmq.NOBLOCK)):
                return True
        return False

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop = True

    def _join_message(self) -> list[bytes]:
        fields = {
            Key.ID: 1,
            Key.NAME: self.name,
            Key.HOST: socket.gethostname(),
            Key.PID: os.getpid(),
            Key.EXECUTOR: self.executor,
            Key.CAPACITY: self.capacity,
        }
        return encode(Op.JOIN, fields)

    def _send(self, frames: list[Any]) -> None:
        with contextlib.suppress(zmq.Again):  # not connected: the next heartbeat tries again
            self.sock.send_multipart(frames, zmq.NOBLOCK)

    def _on_message(self, frames: list[bytes]) -> bool:
        """Handle one message from the server; True when it refused this host for good."""
        try:
            header, _ = decode(frames)
        except ProtocolError as exc:
            log.error("cannot read the server's message: %s", exc)
            return "version" in str(exc)
        op = header.get(Key.OP)
        if op == Op.RESULT and header.get(Key.ID) == 1 and not self.joined:
            self.joined = True
            self._beat_every = heard_interval(header.get(Key.BEAT), HEARTBEAT)
            self._next_beat = min(self._next_beat, time.monotonic() + self._beat_every)
            log.info("joined the server at %s (a PING every %.3g s)", self.endpoint, self._beat_every)
        elif op == Op.SPAWN:
            self._spawn(str(header[Key.NAME]), str(header.get(Key.EXECUTOR) or self.executor))
        elif op == Op.KILL:
            child = self.children.get(str(header.get(Key.NAME)))
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(_SIGNALS.get(str(header.get(Key.SIGNAL)), signal.SIGKILL))
        elif op == Op.ERROR:
            message = (header.get(Key.ERROR) or {}).get("message", "")
            if header.get(Key.REJOIN):
                log.warning("the server does not know this host (%s): joining again", message)
                self._lose_server()
            elif header.get(Key.RETRY):  # e.g. its name is taken (by a host the server has not dropped yet)
                log.error("the server refused this host for now: %s (trying again)", message)
            else:
                log.error("the server refused this host: %s", message)
                return header.get(Key.ID) == 1  # a refused JOIN: wrong settings, say so and exit
        return False

    def _spawn(self, name: str, executor: str) -> None:
        args = ["--connect", self.endpoint, "--name", name, "--executor", executor]
        if self.curve is not None:
            args += ["--curve-secret", self.curve[0], "--server-key", self.curve[1]]
        try:
            proc = launch_worker(args)  # forked from the template, or afresh (it dies with this host either way)
        except OSError as exc:  # e.g. out of processes or memory: the server re-places it or fails its envs
            log.error("cannot start worker %s: %s", name, exc)
            self._send(encode(Op.EXITED, {Key.ID: 0, Key.NAME: name, Key.CODE: 127}))
            return
        self.children[name] = _Child(name, proc)
        self._send(encode(Op.STARTED, {Key.ID: 0, Key.NAME: name, Key.PID: proc.pid}))
        log.info("started worker %s (pid %d, %s)", name, proc.pid, executor)

    def _reap(self, child: _Child) -> None:
        code = child.proc.finish()  # its envs' own processes go with it, and it is reaped
        del self.children[child.name]
        self._send(encode(Op.EXITED, {Key.ID: 0, Key.NAME: child.name, Key.CODE: code}))
        log.info("worker %s exited with %d", child.name, code)

    def _lose_server(self) -> None:
        self._stop_children(grace=0.0)
        self.joined = False

    def _stop_children(self, grace: float = 3.0) -> None:
        """SIGTERM (when given grace), wait, SIGKILL, reap: no child outlives this call, nor what its envs started
        (each reaped worker's process group is ended)."""
        children = list(self.children.values())
        self.children.clear()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if sig == signal.SIGTERM and grace <= 0:
                continue
            for child in children:
                if child.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.send_signal(sig)
            deadline = time.monotonic() + wait
            for child in children:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(max(0.0, deadline - time.monotonic()))

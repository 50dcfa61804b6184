"""The client side of a remote pool: ``await aioenv.make("CartPole-v1", 8, endpoint="tcp://host:5555")``.

A :class:`RemoteCoordinator` stands where a :class:`~aioenv.core.coordinator.Coordinator` stands for a
local pool, so :class:`~aioenv.pool.Pool` keeps every check, sink and result assembly and behaves
the same. Each call is one message to the server (``aioenv serve``, :mod:`aioenv.server.server`), whose own
coordinator runs it on its workers (deadlines, crash recovery and the concurrency limit happen
there) and relays rows back as they finish, at their positions in the call (:mod:`aioenv.core.relay`).

Liveness: the client sends PING every ``HEARTBEAT`` seconds, or as often as the server's reply to OPEN
asks (a quarter of its ``--client-timeout``, :mod:`aioenv.wire.beat`), and four times in its own
``SERVER_TIMEOUT`` at least; a server that says nothing for ``SERVER_TIMEOUT`` seconds (wrong address, down,
unreachable) is given up: requests in flight fail with :class:`~aioenv.errors.ConnectionLost` and so does
every later call. Time this client's own event loop did not run (the caller's blocking code, a loaded machine)
is no silence of the server's: its replies wait unread in the socket meanwhile, and the heartbeat adds its own
lateness to the last time heard. The server likewise releases the envs of a client it has not heard from
(``aioenv serve --client-timeout``): a loop that stops for longer than that loses its pool on the server's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import zmq

from aioenv.core.failures import for_env, unsendable
from aioenv.core.lifecycle import REMOTE, Lifecycle, Phase
from aioenv.core.relay import decode_block, decode_part
from aioenv.core.replies import route_block
from aioenv.core.runner import Requests
from aioenv.core.scheduler import Build, Request, Scheduler
from aioenv.core.sinks import Part, RecvQueue, Sink
from aioenv.errors import AioEnvError, ConnectionLost, PoolClosed, ProtocolError, UsageError
from aioenv.transport.dial import ClientLink, dial
from aioenv.transport.zmqio import frames_nbytes
from aioenv.wire.beat import HEARTBEAT as BEAT_DEFAULT
from aioenv.wire.beat import heard_interval, interval_for
from aioenv.wire.errors import from_wire
from aioenv.wire.options import client_label
from aioenv.wire.protocol import Key, Op, decode, encode

__all__ = ["CLIENT_ID", "HEARTBEAT", "SERVER_TIMEOUT", "RemoteCoordinator"]

log = logging.getLogger("aioenv.remote")

#: Seconds between the client's PINGs, at most (the server, or a short :data:`SERVER_TIMEOUT`, may ask for more).
HEARTBEAT = BEAT_DEFAULT
#: A server silent for this long (seconds) is given up.
SERVER_TIMEOUT = 10.0
#: This process's id as a client (per-client limits on the server count every pool it opens).
CLIENT_ID = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _own_beat() -> float:
    """Seconds between this client's PINGs on its own account: :data:`HEARTBEAT`, and four a
    :data:`SERVER_TIMEOUT` at least (:func:`aioenv.wire.beat.interval_for`), so that a server still working on a
    call (an OPEN whose workers take their time to start) is heard from three times before it is given up."""
    return min(HEARTBEAT, interval_for(SERVER_TIMEOUT))


_OPS = {"step": Op.STEP, "reset": Op.RESET, "call": Op.CALL}


class RemoteCoordinator(Requests):
    """Requests of one :class:`~aioenv.pool.Pool` to an aioenv server (see the module docstring).

    Args:
        endpoint: the server, ``"tcp://host:port"``.
        num_envs: envs in the pool.
        env: the env's name (a gymnasium id or ``"pkg.module:factory"``): only names cross the network.
        env_kwargs: keyword arguments for the env.
        options: the pool's options for the server (autoreset mode, executor, deadlines, ...).
        on_remade: called with env ids the server re-made after a crash or a deadline.
        curve_keys: ``(own .key_secret file, the server's .key file)`` for a server started with ``--auth``.
    """

    def __init__(
        self,
        endpoint: str,
        num_envs: int,
        env: str,
        env_kwargs: dict[str, Any] | None,
        options: dict[str, Any],
        *,
        on_remade: Callable[[np.ndarray], None],
        curve_keys: tuple[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.curve_keys = curve_keys
        Requests.__init__(self, Scheduler(num_envs))
        self.sched.place(1)
        self.slab: None = None  # rows cross the network in the messages (see aioenv.transport.slab)
        self.env = env
        self.env_kwargs = dict(env_kwargs or {})
        self.options = options
        self.on_remade = on_remade
        self.loop = asyncio.get_running_loop()
        #: NEW, STARTING (the OPEN), RUNNING, LOST (the server is gone: calls raise :attr:`lost`), CLOSING, CLOSED.
        self.life = Lifecycle("remote pool", Phase.NEW, REMOTE)
        self.lost: ConnectionLost | None = None
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_call = -1  # open/close ids are negative: never a request id
        self._dealer: ClientLink | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._beat_every = _own_beat()  # seconds between PINGs: what the server's reply to OPEN asks, at most this
        self._beat_due = 0.0  # when the next PING is due (loop time)
        self._last_heard = self.loop.time()
        self._ack: int | None = None  # the mark of the last message read (see aioenv.server.peers)
        self._ack_kept: int | None = None  # the last kept (odd) mark read
        self.max_message_bytes: int | None = None  # the largest request the server takes (told at OPEN)

    @property
    def closing(self) -> bool:
        """Whether :meth:`aclose` began."""
        return self.life.state is Phase.CLOSING or self.life.state is Phase.CLOSED

    def check_open(self) -> None:
        """Raise :attr:`lost` once the server is gone, ``PoolClosed`` once closing."""
        if self.lost is not None:
            raise self.lost
        if self.life.state is not Phase.RUNNING:
            raise PoolClosed(f"the remote pool is {self.life.state.value}: it takes no requests")

    # ------------------------------------------------------------ runner calls with no envs in this process

    def answer_waiting(self, enough: Callable[[], bool]) -> None:
        """Nothing to do: every env runs on the server (:meth:`aioenv.core.runner.Runner.answer_waiting`)."""

    def in_env_code(self) -> bool:
        """False: no env code of a remote pool runs in this process."""
        return False

    def runs_env_code(self) -> bool:
        """False: no env code of a remote pool runs in this process."""
        return False

    def interrupt_env_code(self) -> None:
        """Nothing to interrupt: no env code of a remote pool runs in this process."""

    def poll_budget(self) -> float | None:
        """None: a remote pool's replies come over the network, not worth polling for
        (:meth:`aioenv.core.runner.Runner.poll_budget`)."""
        return None

    def note_wait(self, seconds: float) -> None:
        """Nothing to note: :meth:`poll_budget` gives no budget."""

    # ------------------------------------------------------------ start and stop

    async def start(self, num_workers: int | None) -> dict[str, Any]:
        """Ask the server to open the pool; returns the env description (spaces, metadata).

        Raises:
            ConnectionLost: no server answers. Any error of the server's (``UsageError``, ``EnvError``...).
        """
        self.life.move(Phase.STARTING)
        client_label(CLIENT_ID, error=UsageError)  # the server refuses a name too long or not printable
        identity = f"{CLIENT_ID}-{uuid.uuid4().hex[:8]}".encode()
        try:
            self._dealer = dial(self.endpoint, identity, self._on_message, self._on_disconnect, self.curve_keys)
        except ConnectionError as exc:  # a unix:// path nobody listens on
            raise ConnectionLost(f"{exc} (is `aioenv serve --bind {self.endpoint}` running?)") from exc
        self._last_heard = self.loop.time()
        self._arm_beat()
        fields = {Key.ENV: self.env, Key.NUM_ENVS: self.sched.num_envs, Key.KW: self.env_kwargs, Key.CLIENT: CLIENT_ID}
        fields[Key.OPT] = {**self.options, "num_workers": num_workers}
        reply = await self._call(Op.OPEN, fields)
        self._beat_every = heard_interval(reply.get(Key.BEAT), _own_beat())
        if self._beat is not None and self.lost is None:  # the next PING at the pace the server asked
            self._beat.cancel()
            self._arm_beat()
        described = dict(reply.get(Key.SPACES) or {})
        most = dict(described.get("_server") or {}).get("max_message_bytes")
        self.max_message_bytes = most if isinstance(most, int) else None
        if self.lost is not None:  # lost while the server opened it
            raise self.lost
        if self.closing:
            raise PoolClosed("the pool was closed while the server opened it")
        self.life.move(Phase.RUNNING)
        return described

    async def _call(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        if self.lost is not None:
            raise self.lost
        assert self._dealer is not None
        call_id = self._next_call
        self._next_call -= 1
        fut: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._calls[call_id] = fut
        if not self._dealer.send(encode(op, self._acked({**fields, Key.ID: call_id}))):
            self._calls.pop(call_id, None)
            raise self._unreachable()
        try:
            return await fut
        finally:
            self._calls.pop(call_id, None)

    async def aclose(self, grace: float = 5.0) -> None:
        """Close the pool on the server (its envs and workers), fail what is in flight; idempotent."""
        if self.closing:
            return
        self.life.move(Phase.CLOSING)
        if self._beat is not None:
            self._beat.cancel()
        if self._dealer is not None and self.lost is None:
            with contextlib.suppress(AioEnvError, TimeoutError):
                await asyncio.wait_for(self._call(Op.CLOSE, {}), grace)
        self._fail_all(lambda: PoolClosed("the pool was closed while the request was in flight"))
        if self._dealer is not None:
            self._dealer.close()
        self.life.move(Phase.CLOSED)

    # ------------------------------------------------------------ requests

    def submit(self, kind: str, env_ids: np.ndarray, sink: Sink, build: Build, *, timeout: float | None) -> None:
        """Send one request covering ``env_ids`` (already claimed); rows come back to ``sink``."""
        positions = np.arange(env_ids.size)
        req = self.sched.open(0, kind, env_ids, sink=sink, positions=positions)
        try:
            fields, arrays = build(req)
            fields[Key.ID] = req.id
            fields[Key.ENV] = env_ids.tolist()
            if timeout is not None:
                fields[Key.TIMEOUT] = float(timeout)
            frames = encode(_OPS[kind], self._acked(fields), arrays)
        except Exception as exc:  # a value the wire cannot carry: nothing sent, nothing left claimed
            self.sched.finish(req.id)
            raise unsendable(kind, env_ids, exc) from exc
        if self.max_message_bytes is not None and (size := frames_nbytes(frames)) > self.max_message_bytes:
            self.sched.finish(req.id)
            raise self._too_large(kind, env_ids, size)
        assert self._dealer is not None
        if not self._dealer.send(frames):
            self.sched.finish(req.id)
            err = self._unreachable()
            sink.deliver(Part.failed(env_ids, lambda e: for_env(err, e)), positions)

    def _acked(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the last mark this client read, which keeps the server's count of its unread
        replies low (see :mod:`aioenv.server.peers`)."""
        if self._ack is not None:
            fields[Key.ACK] = self._ack
        if self._ack_kept is not None and self._ack_kept != self._ack:
            fields[Key.ACK_KEPT] = self._ack_kept
        return fields

    def _too_large(self, kind: str, env_ids: np.ndarray, size: int) -> UsageError:
        envs = env_ids.tolist()
        return UsageError(
            f"the {kind} of envs {envs[:8]}{' ...' if len(envs) > 8 else ''} is a message of {size} bytes and the "
            f"aioenv server at {self.endpoint} takes at most {self.max_message_bytes} (aioenv serve "
            "--max-message-bytes); nothing was sent and the envs are free",
            env_id=envs[0] if len(envs) == 1 else None,
        )

    def _unreachable(self) -> ConnectionLost:
        return ConnectionLost(
            f"no connection to the aioenv server at {self.endpoint} (down, unreachable, or it refused this "
            "client's keys)"
        )

    def _on_message(self, frames: list[zmq.Frame]) -> None:
        try:
            header, arrays = decode(frames)
        except ProtocolError as exc:
            log.error("malformed message from the server at %s: %s", self.endpoint, exc)
            return
        self._last_heard = self.loop.time()
        mark = header.get(Key.MARK)
        if type(mark) is int:  # read: acknowledged in the next message to the server (see aioenv.server.peers)
            self._ack = mark
            if mark & 1:  # a mark the server keeps until it is acknowledged
                self._ack_kept = mark
        op = header[Key.OP]
        req_id = header.get(Key.ID)
        if op == Op.PONG:
            return
        if op == Op.EVENT:
            self._event(header)
            return
        call = self._calls.get(req_id) if isinstance(req_id, int) else None
        if call is not None:
            if call.done():
                return
            if op == Op.ERROR:
                call.set_exception(from_wire(header.get(Key.ERROR)))
            else:
                call.set_result(header)
            return
        try:
            self._rows(op, header, arrays)
        except (ValueError, TypeError, KeyError, IndexError, ProtocolError) as exc:
            log.error("malformed reply from the server at %s: %s", self.endpoint, exc)

    def _event(self, header: dict[str, Any]) -> None:
        event = header.get(Key.EVENT)
        if event == "remade":
            self.on_remade(np.asarray(header.get(Key.ENV) or [], dtype=np.int64))
        elif event == "closing" and self.lost is None:
            self._lose(ConnectionLost(f"the aioenv server at {self.endpoint} shut down; the pool is unusable"))
        elif event == "dropped" and self.lost is None:
            why = from_wire(header.get(Key.ERROR))
            self._give_up(ConnectionLost(f"{why.message} (the aioenv server at {self.endpoint}); the pool is unusable"))

    def _rows(self, op: str, header: dict[str, Any], arrays: list[Any]) -> None:
        req_id = header.get(Key.ID)
        if op == Op.ERROR:  # the request failed as a whole: every row not answered yet
            req = self.sched.finish(req_id)
            if req is not None:
                err = from_wire(header.get(Key.ERROR))
                _fail_request(req, err)
            return
        for entry in header[Key.PARTS]:  # rows of one or more requests (aioenv.core.relay)
            if "blk" in entry:  # a worker's block of rows, as it came
                block, segments = decode_block(entry, arrays)
                route_block(self.sched, block, segments, _deliver, self._bad_rows)
                continue
            pos = np.asarray(entry[Key.POS], dtype=np.int64).reshape(-1)
            req = self.sched.finish_rows(entry[Key.ID], pos)
            if req is not None:
                req.rows_sink().deliver(decode_part(entry, arrays, req.env_ids[pos]), pos)

    def _bad_rows(self, exc: ValueError) -> None:
        log.error("malformed reply from the server at %s: %s", self.endpoint, exc)

    # ------------------------------------------------------------ liveness

    def _arm_beat(self) -> None:
        self._beat_due = self.loop.time() + self._beat_every
        self._beat = self.loop.call_later(self._beat_every, self._heartbeat)

    def _heartbeat(self) -> None:
        if self.closing or self.lost is not None or self._dealer is None:
            return
        now = self.loop.time()
        # The time this loop did not run (the caller's own blocking code, a loaded machine) is no silence of the
        # server's: its replies wait unread in the socket until the loop reads them. It is added to the last time
        # heard, as a server's sweep adds its own lateness (aioenv.server.peers.Sweep).
        self._last_heard += max(0.0, now - self._beat_due)
        silent = now - self._last_heard
        if silent > SERVER_TIMEOUT:
            self._give_up(
                ConnectionLost(
                    f"the aioenv server at {self.endpoint} has not answered for {silent:.0f} s "
                    "(wrong address, server down or unreachable); the pool is unusable"
                )
            )
            return
        with contextlib.suppress(zmq.ZMQError):
            self._dealer.send(encode(Op.PING, self._acked({Key.ID: 0})))  # unsent when disconnected: silence tells
        self._arm_beat()

    def _on_disconnect(self, reason: str) -> None:
        """The unix-socket connection ended: the server stopped or dropped this pool (no reconnecting here)."""
        if not self.closing and self.lost is None:
            self._give_up(ConnectionLost(f"{reason} (the aioenv server at {self.endpoint}); the pool is unusable"))

    def _lose(self, lost: ConnectionLost) -> None:
        """Every later call raises ``lost`` (requests in flight may still be answered)."""
        self.lost = lost
        if self.life.can(Phase.LOST):  # not once closing: the close goes on
            self.life.move(Phase.LOST)

    def _give_up(self, lost: ConnectionLost) -> None:
        """The pool is unusable: ``lost`` fails every request and call in flight, and every later one."""
        self._lose(lost)
        log.error("%s", lost)
        self._fail_all(lambda: lost)
        for fut in list(self._calls.values()):
            if not fut.done():
                fut.set_exception(lost)

    def _fail_all(self, make_error: Callable[[], AioEnvError]) -> None:
        for req in self.sched.drain():  # every request of a remote pool has a sink (see submit)
            _fail_request(req, make_error())


def _fail_request(req: Request, err: AioEnvError) -> None:
    """Fail every row ``req`` still waits for with ``err`` (a copy naming each row's env)."""
    assert req.positions is not None, "a remote pool's requests cover positions of their call"
    req.rows_sink().deliver(Part.failed(req.env_ids, lambda e: for_env(err, e)), req.positions)


def _deliver(sink: Sink, _req: Request | None, part: Part, positions: np.ndarray | None) -> None:
    """Hand a segment's rows to its sink (see :data:`aioenv.core.replies.Deliver`)."""
    if positions is None:  # a merged run of rows bound for a RecvQueue, which keeps no positions
        assert isinstance(sink, RecvQueue)
        sink.deliver(part)
    else:
        sink.deliver(part, positions)

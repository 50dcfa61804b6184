"""The worker process: a link to the coordinator (:mod:`workers.link`), HELLO, then one request at a time.

The loop blocks in ``recv`` (no busy-waiting) and answers every request with
exactly one RESULT or ERROR carrying the request's id. A batch request (step,
reset, call) for k envs is answered by one message holding all k rows; an env
that raises fails only its own row (``"err"``: row -> error description). A pool's
own worker may share rows with it (``--slab``, :mod:`aioenv.transport.slab`): a step or reset
marked ``"sh"`` reads its actions from, and writes its results to, the envs' rows,
and the reply carries only infos and errors. Such a step of a contiguous run of envs may come as a lane message
(:mod:`aioenv.wire.lane`: a fixed-size frame, no msgpack), and is answered in kind when nothing but the rows
(in the slab) is to be said.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from aioenv.errors import ProtocolError
from aioenv.transport.pipe import LinkClosed
from aioenv.transport.slab import Slab
from aioenv.wire import lane, spaces
from aioenv.wire.errors import error_fields
from aioenv.wire.info_wire import put_binfo
from aioenv.wire.infos import batch_infos
from aioenv.wire.protocol import (
    Key,
    Local,
    Op,
    decode,
    encode,
    leaves_from_wire,
    leaves_to_wire,
    local,
    pack,
    pickle_allowed,
)
from workers.hosted import PLAIN_REWARDS, HostedEnv, check_executor
from workers.link import open_link
from workers.probe import probe_env
from workers.sources import resolve

if TYPE_CHECKING:  # (a worker on its pool's pipe never imports ZeroMQ: see workers.link)
    import zmq

log = logging.getLogger("aioenv.worker")

Reply = tuple[dict[str, Any], list[np.ndarray]]

#: Bytes of an observation row up to which the rows bound for given leaves (the shared rows) are stacked first and
#: written in one assignment (:func:`put_obs`): cheaper than a numpy assignment per row (~0.4 µs each on a 2-vCPU
#: VM). Larger rows are written one by one: stacking them would copy each twice.
SMALL_ROW = 4096
#: The most runs of env ids (a lane step's ``first``, ``count``) a worker keeps as lists: a lock-step pool names
#: one run per worker, a first-finished one a few; beyond that each is built again (a list of ints, ~1 µs).
_RUNS_KEPT = 64


class Group:
    """Envs made from one source share spaces and the row readers/writers built for them."""

    __slots__ = (
        "act_space",
        "factory",
        "obs_dtype",
        "obs_row",
        "obs_small",
        "obs_space",
        "plain_act",
        "plain_obs",
        "read_action",
        "write_obs",
    )

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        self.obs_space: Any = None
        self.act_space: Any = None
        self.write_obs: Any = None
        self.read_action: Any = None
        #: One numeric leaf each (see ``spaces.is_plain_leaf``): the step loop indexes the row itself.
        self.plain_obs = self.plain_act = False
        #: A plain observation leaf's dtype and row shape (see :meth:`stack_obs`).
        self.obs_dtype: np.dtype[Any] | None = None
        self.obs_row: tuple[int, ...] = ()
        #: A plain observation's row is small (at most SMALL_ROW bytes): see :func:`put_obs`.
        self.obs_small = False

    def adopt_spaces(self, env: Any) -> None:
        """Take the spaces of the group's first env."""
        if self.obs_space is None:
            self.obs_space = env.observation_space
            self.act_space = env.action_space
            self.write_obs = spaces.row_writer(self.obs_space)
            self.read_action = spaces.row_reader(self.act_space)
            self.plain_obs = spaces.is_plain_leaf(self.obs_space)
            self.plain_act = spaces.is_plain_leaf(self.act_space)
            if self.plain_obs:
                dtype, self.obs_row = spaces.leaf_specs(self.obs_space)[0]
                self.obs_dtype = np.dtype(dtype)
                self.obs_small = self.obs_dtype.itemsize * int(np.prod(self.obs_row)) <= SMALL_ROW

    def stack_obs(self, values: list[Any]) -> np.ndarray | None:
        """The observations ``values`` (one env's each) of a plain space as its leaf ``(len(values), *row)``, made in
        one numpy call (as ``SyncVectorEnv`` batches its envs' observations), or None when they do not all convert
        to that (a value of another shape, one numpy cannot cast): then write them row by row, which says which
        one is at fault. A row's write casts as this one does (``np.array(..., dtype)`` and ``leaf[i] = value``
        both cast unsafely). Every value must be an observation: a failed row's placeholder could pass (None
        becomes NaN in a float leaf of scalar rows), so :func:`put_obs` stacks only steps without failures."""
        try:
            batch = np.array(values, dtype=self.obs_dtype)
        except (ValueError, TypeError, OverflowError):
            return None
        return batch if batch.shape == (len(values), *self.obs_row) else None


class Worker:
    """Hosts envs for one coordinator; see the module docstring."""

    def __init__(
        self,
        endpoint: str | int,
        name: str,
        *,
        trusted_dir: str | None = None,
        executor: str = "inline",
        configure: Callable[[zmq.Socket[Any]], None] | None = None,
        slab_fd: int | None = None,
        done_fd: int | None = None,
        quiet_fds: tuple[int, int] | None = None,
    ) -> None:
        self.configure = configure  # socket options before connect (CURVE keys for a remote server)
        self.slab_fd = slab_fd  # the pool's shared rows (aioenv.transport.slab), mapped when it says how they lie
        #: The pool's done pipe (aioenv.wire.lane), written to once the pool says as which slot and with what token.
        self.done_fd = done_fd
        self._done_as: tuple[int, int] | None = None
        #: The pool's quiet pipe (its write end) and countdown pipe (its read end, non-blocking), for the steps of
        #: a quiet call (aioenv.wire.lane.QUIET); None: this worker has none, and answers those as any other.
        self.quiet_fds = quiet_fds
        self.slab: Slab | None = None
        self.endpoint = endpoint  # a ZeroMQ endpoint, or the descriptor of an inherited pipe
        self.name = name
        self.trusted_dir = trusted_dir
        self.executor = executor
        self.envs: dict[int, HostedEnv] = {}
        self.group_of: dict[int, Group] = {}
        self.groups: dict[str, Group] = {}
        self.mode = "next_step"
        self._runs: dict[tuple[int, int], list[int]] = {}  # the env ids of each run a lane step named so far
        #: Pickled values travel both ways (a pool's in-process worker: its peer is its own process).
        self.trusted = False
        #: What env code may raise that fails its own row only. In a worker process a ``SystemExit`` (an env that
        #: calls ``sys.exit()``) is one more such failure, not the end of the process and of its other envs; a
        #: pool's in-process worker lets it through to the caller (``workers.inproc``).
        self.env_failures: tuple[type[BaseException], ...] = (Exception, SystemExit)
        self.handlers: dict[str, Callable[[dict[str, Any], list[np.ndarray]], Reply]] = {
            Op.MAKE: self.on_make,
            Op.STEP: self.on_step,
            Op.RESET: self.on_reset,
            Op.CALL: self.on_call,
            Op.SLAB: self.on_slab,
            Op.PROBE: self.on_probe,
        }

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        """Connect, say HELLO, serve until CLOSE (or until the coordinator's end is gone)."""
        link = open_link(self.endpoint, self.name, self.configure)
        link.send(self.hello())
        try:
            while True:
                reply, done = self.handle(link.recv())
                if reply:  # (a lane step answered on the done pipe has no reply here)
                    link.send(reply)
                if done:
                    return
        except LinkClosed:
            log.debug("worker %s: the coordinator closed the pipe", self.name)
        finally:
            self.close_all()
            link.close()

    def interrupted(self, frames: Sequence[Any], exc: BaseException) -> list[Any]:
        """The ERROR reply to a request that ``exc`` (a ``KeyboardInterrupt`` or ``SystemExit`` raised in env code,
        which :meth:`handle` lets through) cut short: the request still gets its one reply."""
        req_id: Any
        try:
            first = frames[0]
            if type(first) is memoryview and lane.is_lane(first):
                req_id = lane.read_step(first)[0]
            else:
                req_id = decode(frames, trusted=self.trusted)[0].get(Key.ID)
        except (ProtocolError, ValueError):
            req_id = None
        return self._failed(req_id, exc)

    def hello(self) -> list[Any]:
        """The HELLO message a worker sends first: its name, process id and executor."""
        return encode(Op.HELLO, {Key.NAME: self.name, Key.PID: os.getpid(), Key.EXECUTOR: self.executor})

    def handle(self, frames: Sequence[Any]) -> tuple[list[Any], bool]:
        """Answer one request: its reply (exactly one RESULT, PONG or ERROR carrying the request's id), and
        whether it was CLOSE (the envs are closed then, and the worker is done)."""
        first = frames[0]
        if type(first) is memoryview and lane.is_lane(first):
            return self.on_lane_step(first), False
        req_id: Any = None
        try:
            header, arrays = decode(frames, trusted=self.trusted)
            req_id = header.get(Key.ID)
            op = header[Key.OP]
            if op == Op.CLOSE:
                self.close_all()
                return encode(Op.RESULT, {Key.ID: req_id}), True
            if op == Op.PING:
                return encode(Op.PONG, {Key.ID: req_id}), False
            handler = self.handlers.get(op)
            if handler is None:
                raise ProtocolError(f"worker {self.name} got unknown op {op!r}")
            fields, out = handler(header, arrays)
            env_ids = header.get(Key.ENV) or []
            info_list = bool(header.get(Key.INFO_LIST))
            return self._result(req_id, fields, out, env_ids, info_list, type(first) is Local), False
        except Exception as exc:  # every request gets a reply, a failed one an ERROR
            log.debug("request %s failed", req_id, exc_info=True)
            return self._failed(req_id, exc), False

    def _result(
        self,
        req_id: Any,
        fields: dict[str, Any],
        out: list[np.ndarray],
        env_ids: list[int],
        info_list: bool,
        here: bool,
    ) -> list[Any]:
        """The RESULT answering ``req_id`` with a handler's ``fields`` and arrays ``out`` for ``env_ids``
        (``info_list``: each row's own info; ``here``: the request came from this process, see ``Local``)."""
        fields[Key.ID] = req_id
        if Key.INFO in fields:  # infos: batched, and one that cannot cross the wire fails its row alone
            return encode_reply(fields, out, env_ids, info_list, trusted=self.trusted)
        if here and not out and Key.ERRORS not in fields:
            return local(Op.RESULT, fields)  # ids and flags back to this process (see Local)
        return encode(Op.RESULT, fields, out, trusted=self.trusted)

    @staticmethod
    def _failed(req_id: Any, exc: BaseException) -> list[Any]:
        """The ERROR answering ``req_id``, which ``exc`` failed as a whole."""
        return encode(Op.ERROR, {Key.ID: req_id, Key.ERROR: error_fields(exc, None)})

    # ------------------------------------------------------------------ ops

    def on_make(self, header: dict[str, Any], _arrays: list[np.ndarray]) -> Reply:
        """Make envs: ``{"envs": [[env_id, source_key], ...], "sources": {key: source}, "autoreset": mode}``;
        env ids in ``"ended"`` start as if their episode had just been truncated (see ``mark_ended``)."""
        self.mode = str(header.get(Key.AUTORESET, self.mode))
        if "slab" in header:  # a re-made worker: the pool's rows exist already
            self.on_slab(header, _arrays)
        for key, source in dict(header.get(Key.SOURCES, {})).items():
            if key not in self.groups:
                self.groups[key] = Group(resolve(source, self.trusted_dir))
        errors: dict[int, Any] = {}
        described: dict[str, Any] = {}
        ended = set(header.get(Key.ENDED) or ())
        remade = header.get(Key.REMADE) if isinstance(header.get(Key.REMADE), dict) else None
        for row, (env_id, key) in enumerate(header[Key.ENVS]):
            try:
                group = self.groups[key]
                env = group.factory()
                check_executor(env, self.executor)
                group.adopt_spaces(env)
                old = self.envs.pop(env_id, None)
                if old is not None:
                    old.close()
                self.envs[env_id] = HostedEnv(env_id, env, self.mode)
                if env_id in ended:
                    self.envs[env_id].mark_ended()
                elif remade is not None:
                    self.envs[env_id].mark_remade(remade)
                self.group_of[env_id] = group
                if key not in described:
                    described[key] = describe_env(env, self.trusted or pickle_allowed())
            except self.env_failures as exc:
                errors[row] = error_fields(exc, env_id)
        return {Key.SPACES: described, Key.ERRORS: errors}, []

    def on_probe(self, header: dict[str, Any], _arrays: list[np.ndarray]) -> Reply:
        """Time one env made from ``header["sources"]`` (a source), reset with ``header["seed"]``: see
        :mod:`workers.probe`; ``{"values": {"step", "cpu"} or {"async": True}}``."""
        seed = header.get(Key.SEED)
        return {Key.VALUES: probe_env(resolve(header[Key.SOURCES], self.trusted_dir), seed)}, []

    def on_slab(self, header: dict[str, Any], _arrays: list[np.ndarray]) -> Reply:
        """Map the pool's shared rows as ``header["slab"]`` lays them out (see :mod:`aioenv.transport.slab`)."""
        self.slab = mapped_slab(self.name, self.slab_fd, self.slab, header[Key.SLAB])
        self._take_done_pipe(header)
        return {}, []

    def _take_done_pipe(self, header: dict[str, Any]) -> None:
        """``header["dp"]``: as which slot, with what token, this worker writes its DONEs to the pool's done pipe."""
        self._done_as = done_pipe_as(self.name, self.done_fd, header, self._done_as)

    def _no_slab(self) -> NoReturn:
        """A step or reset over shared rows came before the message that says how they lie."""
        no_slab(self.name)

    def on_step(self, header: dict[str, Any], arrays: list[np.ndarray]) -> Reply:
        """Step ``header["env"]`` with the batched action leaves, one row per env; or, with ``"sh"``, through
        the slab: env ``e``'s action is row ``e`` of its action leaves, its results go to row ``e`` of the
        observation leaves, reward, terminated and truncated."""
        env_ids: list[int] = header[Key.ENV]
        group = self.group(env_ids)
        if header.get(Key.SHARED):
            return self.step_shared(env_ids, group, self.slab or self._no_slab(), shared_rows(env_ids))
        obs, extras, infos, errors = self.step_apart(env_ids, group, leaves_from_wire(header[Key.ACT], arrays))
        return batch_reply(obs, infos, errors, extras)

    def step_shared(self, env_ids: list[int], group: Group, slab: Slab, at: slice | np.ndarray) -> Reply:
        """:meth:`step_rows` over the slab: each env's action from its row, its results to its row (``at``: the
        rows of ``env_ids``, made once for the writes); the reply carries only infos and errors."""
        _, rewards, terminated, truncated, infos, errors = self.step_rows(env_ids, group, slab.act, slab.obs, env_ids)
        slab.put_extras(at, rewards, terminated, truncated)
        return shared_reply(infos, errors)

    def on_lane_step(self, frame: memoryview) -> list[Any]:
        """Answer a step in the lane's format (:mod:`aioenv.wire.lane`): a contiguous run of envs over the slab.
        The reply is the lane's ``DONE`` when no env failed and none had an info (or, with the step's ``FINALS``
        flag, none but a same_step end's that :func:`finals_to_slab` moved to the slab; with its ``INFOS`` flag, infos
        the slab's info area took, a DONE that says so: :mod:`aioenv.transport.slab_infos`), else the protocol's
        RESULT over shared rows, as :meth:`on_step` answers; a request that cannot be served gets an ERROR."""
        req_id: Any = None
        quiet = False
        try:
            req_id, first, count, info_list, finals, to_area, quiet = lane.read_step(frame)
            quiet = quiet and self.quiet_fds is not None
            slab = self.slab or self._no_slab()
            run = self._runs.get((first, count))
            if run is None:
                rows = slab.reward.size
                if count < 1:
                    raise ProtocolError(f"worker {self.name} got a lane step of no envs (expected 1 to {rows})")
                if first + count > rows:
                    raise ProtocolError(
                        f"worker {self.name} got a lane step of envs {first} to {first + count - 1}: "
                        f"the pool shares rows for envs 0 to {rows - 1}"
                    )
                run = list(range(first, first + count))
                if len(self._runs) < _RUNS_KEPT:
                    self._runs[(first, count)] = run
            at = slice(first, first + count)
            fields, out = self.step_shared(run, self.group(run), slab, at)
            if Key.ERRORS not in fields:
                if Key.INFO not in fields or (finals and finals_to_slab(fields[Key.INFO], slab, at)):
                    return self._done(req_id, quiet=quiet)  # nothing but the rows, which are in the slab
                area = slab.info
                if to_area and area is not None and area.write(fields[Key.INFO], at):
                    return self._done(req_id, True, quiet)  # the rows, their infos in the slab's info area
            return self._result(req_id, fields, out, run, info_list, False)
        except Exception as exc:  # every request gets a reply, a failed one an ERROR
            log.debug("request %s failed", req_id, exc_info=True)
            return self._failed(req_id, exc)
        finally:  # (a KeyboardInterrupt's ERROR too: see interrupted)
            if quiet:
                self._count_down(req_id)

    def _count_down(self, req_id: int) -> None:
        """Take one byte of the pool's countdown pipe, this worker's reply to the quiet step ``req_id`` written (on
        the quiet pipe, or sent after this on its own); the worker that finds none left is the call's last, and
        wakes the pool (:data:`aioenv.wire.lane.QUIET`)."""
        assert self.quiet_fds is not None, "only a worker with the quiet pipes answers a step quietly"
        try:
            os.read(self.quiet_fds[1], 1)
            return
        except BlockingIOError:
            pass
        except OSError as exc:  # the pool closed the pipes, or something in this process did: no more quiet answers
            log.debug("worker %s: the countdown pipe is closed (%s)", self.name, exc)
            self.quiet_fds = None
            return
        if self._done_as is not None and self.done_fd is not None:
            try:
                os.write(self.done_fd, lane.wake(*self._done_as, req_id))
            except OSError as exc:
                log.debug("worker %s: the done pipe is closed (%s)", self.name, exc)

    def _done(self, req_id: int, infos: bool = False, quiet: bool = False) -> list[Any]:
        """A lane step's DONE (``infos``: its infos are in the slab's info area): a record on the pool's done pipe, or
        with ``quiet`` its quiet pipe (no reply on this worker's own pipe then), or the DONE message when this worker
        has none or it is closed."""
        if self._done_as is not None and self.done_fd is not None:
            try:
                fd = self.quiet_fds[0] if quiet and self.quiet_fds is not None else self.done_fd
                os.write(fd, lane.record(*self._done_as, req_id, infos))
                return []
            except OSError as exc:  # the pool closed its end: the worker's own pipe still carries replies
                log.debug("worker %s: the done pipe is closed (%s)", self.name, exc)
                self._done_as = None
        return [lane.done(req_id, infos)]

    def step_apart(
        self, env_ids: list[int], group: Group, acts: list[np.ndarray]
    ) -> tuple[list[np.ndarray], list[np.ndarray], list[Any] | None, dict[int, Any]]:
        """:meth:`step_rows` into arrays of the step's own (no shared rows): row ``i`` for ``env_ids[i]``.

        Returns ``(obs leaves, [reward (k,) float64, terminated (k,) bool, truncated (k,) bool], infos, errors)``
        (see :meth:`step_rows`; a failed row's extras are 0.0, False, False)."""
        obs, rewards, terminated, truncated, infos, errors = self.step_rows(
            env_ids, group, acts, None, range(len(env_ids))
        )
        return obs, extra_arrays(rewards, terminated, truncated), infos, errors

    def step_rows(
        self,
        env_ids: list[int],
        group: Group,
        acts: list[np.ndarray],
        obs: list[np.ndarray] | None,
        rows: Sequence[int],
    ) -> tuple[list[np.ndarray], list[Any], list[Any], list[Any], list[Any] | None, dict[int, Any]]:
        """Step each env of ``env_ids`` (all of ``group``'s spaces) with row ``rows[i]`` of the action leaves
        ``acts`` and write its observation to that row of the leaves ``obs`` (None: leaves of their own, with
        ``len(env_ids)`` rows, ``rows`` being ``range(len(env_ids))``).

        Returns ``(obs, rewards, terminated, truncated, infos, errors)``: the observation leaves, three lists of
        ``len(env_ids)`` values (a failed row's are 0.0, False, False), each env's info dict (None: no env had
        one) and row -> error fields. An env that raises fails its own row only (:attr:`env_failures`); what else
        it raises (a ``KeyboardInterrupt``) goes on to the caller (the env it cut short is broken until reset)."""
        n = len(env_ids)
        infos: list[Any] | None = None
        errors: dict[int, Any] = {}
        envs = self.envs
        read_action = group.read_action
        # A plain space's row is indexed here, without a call per env (the common Box/Discrete case).
        act0 = acts[0] if group.plain_act else None
        # Observations, rewards and flags are gathered in lists and written after the loop (put_obs; one numpy
        # call each for the extras, by the caller), as SyncVectorEnv batches them: cheaper than numpy element
        # and row assignments per env.
        outs: list[Any] = [None] * n
        rewards: list[Any] = [0.0] * n
        terminated: list[Any] = [False] * n
        truncated: list[Any] = [False] * n
        for i, (env_id, row) in enumerate(zip(env_ids, rows, strict=True)):
            try:
                hosted = envs.get(env_id) or self.hosted(env_id)
                action = act0[row] if act0 is not None else read_action(acts, row)
                if hosted.blocked is None and not hosted.pending_reset:  # hosted.mid_episode(), without the call
                    # HostedEnv.step's first part, here rather than through a call per env (~3% of a CartPole
                    # step() of 8 envs in this process): only an end or an unusual reward goes further.
                    try:
                        o, reward, term, trunc, info = hosted.env.step(action)
                        if term or trunc or type(reward) not in PLAIN_REWARDS:
                            o, reward, term, trunc, info = hosted.after_step(o, reward, term, trunc, info)
                    except BaseException as exc:
                        hosted.failed_step(exc)
                        raise
                    outs[i], rewards[i], terminated[i], truncated[i] = o, reward, term, trunc
                else:
                    outs[i], rewards[i], terminated[i], truncated[i], info = hosted.step(action)
                if info:
                    if infos is None:
                        infos = [None] * n
                    infos[i] = info
            except self.env_failures as exc:  # one env's failure is its row's alone
                rewards[i], terminated[i], truncated[i] = 0.0, False, False
                errors[i] = error_fields(exc, env_id)
        obs, infos = put_obs(group, obs, rows, outs, env_ids, (rewards, terminated, truncated), infos, errors)
        return obs, rewards, terminated, truncated, infos, errors

    def on_reset(self, header: dict[str, Any], _arrays: list[np.ndarray]) -> Reply:
        """Reset ``header["env"]`` with per-env seeds (``"seed"``) and shared options (``"opt"``); with
        ``"sh"`` the observations go to the envs' shared rows."""
        env_ids: list[int] = header[Key.ENV]
        seeds = header.get(Key.SEED) or [None] * len(env_ids)
        options = header.get(Key.OPT)
        group = self.group(env_ids)
        slab = (self.slab or self._no_slab()) if header.get(Key.SHARED) else None
        n = len(env_ids)
        outs: list[Any] = [None] * n  # written after the loop, as a step's (put_obs)
        infos: list[Any] | None = None
        errors: dict[int, Any] = {}
        for i, env_id in enumerate(env_ids):
            try:
                outs[i], info = self.hosted(env_id).reset(seeds[i], options)
                if info:
                    if infos is None:
                        infos = [None] * n
                    infos[i] = info
            except self.env_failures as exc:
                errors[i] = error_fields(exc, env_id)
        if slab is not None:
            _, infos = put_obs(group, slab.obs, env_ids, outs, env_ids, None, infos, errors)
            return shared_reply(infos, errors)
        obs, infos = put_obs(group, None, range(n), outs, env_ids, None, infos, errors)
        return batch_reply(obs, infos, errors, [])

    def on_call(self, header: dict[str, Any], _arrays: list[np.ndarray]) -> Reply:
        """``kind``: "call" (method or attribute), "get" (attribute) or "set" (one value per env)."""
        spec = CallSpec(header)
        results: list[Any] = []
        errors: dict[int, Any] = {}
        for i, env_id in enumerate(header[Key.ENV]):
            try:
                results.append(checked_value(spec.apply(self.hosted(env_id).env, i)))
            except self.env_failures as exc:
                results.append(None)
                errors[i] = error_fields(exc, env_id)
        return {Key.VALUES: results, Key.ERRORS: errors}, []

    def close_all(self) -> None:
        """Close every hosted env."""
        for hosted in self.envs.values():
            hosted.close()
        self.envs.clear()
        self.group_of.clear()

    def hosted(self, env_id: int) -> HostedEnv:
        """The env ``env_id``, or a clear error when this worker does not host it (e.g. its re-make failed)."""
        env = self.envs.get(env_id)
        if env is None:
            raise ProtocolError(f"worker {self.name} hosts no env {env_id}", env_id=env_id)
        return env

    def group(self, env_ids: list[int]) -> Group:
        """The group (spaces, readers, writers) of the envs ``env_ids``, which share their spaces."""
        for env_id in env_ids:
            group = self.group_of.get(env_id)
            if group is not None:
                return group
        raise ProtocolError(f"worker {self.name} hosts none of the envs {env_ids[:8]}")


class CallSpec:
    """A CALL request's ``kind`` ("call": method or attribute, "get": attribute, "set": one value per
    row), ``name``, arguments and per-row values; :meth:`apply` performs it on one env."""

    __slots__ = ("args", "kind", "kwargs", "name", "values")

    def __init__(self, header: dict[str, Any]) -> None:
        self.kind = header.get(Key.KIND)
        name = header.get(Key.NAME)
        if not isinstance(name, str):
            raise ProtocolError(f"call needs a string 'name', got {name!r}")
        self.name: str = name
        self.args = header.get(Key.ARGS) or []
        self.kwargs = header.get(Key.KW) or {}
        self.values = header.get(Key.VALUES) or []

    def apply(self, env: Any, row: int) -> Any:
        """Do the call on ``env`` (through wrappers) for request row ``row``; the value must cross the wire."""
        name = self.name
        if self.kind == "set":
            if hasattr(env, "set_wrapper_attr"):
                env.set_wrapper_attr(name, self.values[row])
            else:
                setattr(env, name, self.values[row])
            return None
        attr = env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)
        return attr(*self.args, **self.kwargs) if self.kind == "call" and callable(attr) else attr


def checked_value(value: Any) -> Any:
    """``value`` if msgpack can carry it; else a ``TypeError`` now, failing one row, not the whole reply."""
    pack(value)
    return value


def describe_env(env: Any, may_pickle: bool) -> dict[str, Any]:
    """The env's spaces, metadata and render mode, for the coordinator; ``TypeError`` for a user-defined space
    unless ``may_pickle`` (this worker talks only to the pool that started it: nothing else may be pickled)."""
    for space in (env.observation_space, env.action_space):
        if not may_pickle and not spaces.is_portable(space):
            raise TypeError(spaces.not_portable(space, "a worker that is not a local pool's own"))
    metadata = {}
    for key, value in dict(getattr(env, "metadata", {}) or {}).items():
        try:
            pack(value)
            metadata[str(key)] = value
        except TypeError:
            continue
    return {
        "obs": spaces.describe_space(env.observation_space),
        "act": spaces.describe_space(env.action_space),
        "metadata": metadata,
        "render_mode": getattr(env, "render_mode", None),
    }


def extra_arrays(rewards: list[Any], terminated: list[Any], truncated: list[Any]) -> list[np.ndarray]:
    """The rows' ``[reward (k,) float64, terminated (k,) bool, truncated (k,) bool]``, one numpy call each."""
    return [np.array(rewards, np.float64), np.array(terminated, np.bool_), np.array(truncated, np.bool_)]


def put_obs(
    group: Group,
    obs: list[np.ndarray] | None,
    rows: Sequence[int],
    outs: list[Any],
    env_ids: Sequence[int],
    extras: tuple[list[Any], list[Any], list[Any]] | None,
    infos: list[Any] | None,
    errors: dict[int, Any],
) -> tuple[list[np.ndarray], list[Any] | None]:
    """Write the envs' observations ``outs`` (row ``i`` to row ``rows[i]`` of the leaves ``obs``; None: leaves of
    their own, ``rows`` being ``range(len(outs))``), skipping the rows in ``errors``.

    A plain space's rows are batched in one numpy call when they all fit (:meth:`Group.stack_obs`), unless they go
    to leaves given and are large (over :data:`SMALL_ROW` bytes: a batch would copy them twice, and a row's own
    assignment costs little beside its copy); otherwise, and for other spaces, they are written row by row, and a
    row whose observation does not fit the space fails as if its step or reset had raised: its ``extras`` (a step's
    rewards, terminated, truncated lists; None for a reset) become 0.0, False, False, its info goes, ``errors``
    gets its error (for ``env_ids[i]``). Returns the leaves and the infos (None: no info left)."""
    batch = group.stack_obs(outs) if group.plain_obs and not errors and (obs is None or group.obs_small) else None
    if batch is not None:
        if obs is None:
            return [batch], infos
        obs[0][rows] = batch
        return obs, infos
    if obs is None:
        obs = spaces.empty_batch(group.obs_space, len(outs))
    write = group.write_obs
    for i, row in enumerate(rows):
        if i in errors:
            continue
        try:
            write(obs, row, outs[i])
        except Exception as exc:  # noqa: BLE001 - a malformed observation fails its own row
            if extras is not None:
                for extra, empty in zip(extras, (0.0, False, False), strict=True):
                    extra[i] = empty
            if infos is not None:
                infos[i] = None
            errors[i] = error_fields(exc, env_ids[i])
    return obs, infos if infos is None or any(info is not None for info in infos) else None


def batch_reply(
    obs: list[np.ndarray], infos: list[Any] | None, errors: dict[int, Any], extra: list[np.ndarray]
) -> Reply:
    arrays: list[np.ndarray] = []
    fields: dict[str, Any] = {Key.OBS: leaves_to_wire(obs, arrays)}
    fields[Key.EXTRAS] = list(range(len(arrays), len(arrays) + len(extra)))
    arrays.extend(extra)
    if infos is not None:
        fields[Key.INFO] = infos
    if errors:
        fields[Key.ERRORS] = errors
    return fields, arrays


def shared_rows(env_ids: list[int]) -> slice | np.ndarray:
    """The index of ``env_ids``' rows in the shared slab, made once for the writes of a reply: a slice when
    they are one ascending run (a whole pool's or worker's step), else an index array. Indexing with the list
    itself would convert it again for every write (~3 µs each for 8 envs, 13 µs for 128)."""
    first, last = env_ids[0], env_ids[-1]
    if last - first + 1 == len(env_ids) and env_ids == list(range(first, last + 1)):
        return slice(first, last + 1)
    return np.array(env_ids, dtype=np.intp)


def finals_to_slab(infos: list[Any], slab: Slab, at: slice) -> bool:
    """Move the final observations of a ``same_step`` step's ended envs (the rows ``at``) to the slab's area of
    them (:mod:`aioenv.transport.slab`), when that is all the infos say: every row that has an info ended
    (terminated or truncated in the slab), every row that ended has one, and each is ``{"final_obs": obs,
    "final_info": {}}`` with ``obs`` an array of the area's dtype and row shape, as the pool will rebuild it.
    Returns whether it did (False: nothing written, the infos go in the reply as they are)."""
    final = slab.final
    if final is None:
        return False
    dtype, shape = final.dtype, final.shape[1:]
    rows: list[int] = []
    values: list[np.ndarray] = []
    for i, info in enumerate(infos):
        if info is None:
            continue
        if type(info) is not dict or len(info) != 2:
            return False
        obs, final_info = info.get("final_obs"), info.get("final_info")
        if type(final_info) is not dict or final_info or type(obs) is not np.ndarray:
            return False
        if obs.dtype != dtype or obs.shape != shape:
            return False
        rows.append(i)
        values.append(obs)
    ended = (slab.terminated[at] | slab.truncated[at]).nonzero()[0]
    if ended.size != len(rows) or ended.tolist() != rows:
        return False
    base = at.start
    for i, obs in zip(rows, values, strict=True):
        final[base + i] = obs
    return True


def mapped_slab(name: str, fd: int | None, current: Slab | None, layout: Any) -> Slab:
    """The pool's shared rows as ``layout`` (a SLAB's or a re-made worker's MAKE's ``"slab"``) lays them out, for
    worker ``name`` started with their descriptor ``fd``: ``current`` when it is mapped so already, else a new
    mapping.

    Raises:
        ProtocolError: the worker was started without shared rows (no ``--slab``).
        ValueError: ``layout`` is malformed or does not fit the file (:meth:`Slab.attach`).
    """
    if fd is None:
        raise ProtocolError(f"worker {name} was started without shared rows (--slab)")
    if current is not None and current.layout == layout:
        return current
    return Slab.attach(fd, layout)


def done_pipe_as(
    name: str, fd: int | None, header: dict[str, Any], current: tuple[int, int] | None
) -> tuple[int, int] | None:
    """As which slot, with what token, worker ``name`` writes records to the pool's done pipe (:mod:`aioenv.wire.lane`)
    once ``header`` (a SLAB's, or a re-made worker's MAKE's) says so in ``"dp"``: ``(slot, token)``, or ``current``
    when it says nothing or the worker was started without the pipe (``fd`` None).

    Raises:
        ProtocolError: ``"dp"`` is not ``[slot, token]`` with a slot below 2**32 and a token of 1 .. 2**64 - 1.
    """
    given = header.get(Key.DONE_PIPE)
    if given is None or fd is None:
        return current
    slot, token = given if type(given) is list and len(given) == 2 else (None, None)
    if type(slot) is not int or type(token) is not int or not 0 <= slot < 2**32 or not 0 < token < 2**64:
        raise ProtocolError(f"worker {name} got a done pipe as {given!r} (expected [slot, token])")
    return slot, token


def no_slab(name: str) -> NoReturn:
    """Refuse a step or reset over shared rows that came to worker ``name`` before the message that says how they
    lie.

    Raises:
        ProtocolError: always.
    """
    raise ProtocolError(f"worker {name} got a request for shared rows before their layout")


def shared_reply(infos: list[Any] | None, errors: dict[int, Any]) -> Reply:
    """A step or reset reply whose rows are in the slab: only infos and errors travel."""
    fields: dict[str, Any] = {Key.SHARED: 1}
    if infos is not None:
        fields[Key.INFO] = infos
    if errors:
        fields[Key.ERRORS] = errors
    return fields, []


def encode_reply(
    fields: dict[str, Any],
    arrays: list[np.ndarray],
    env_ids: list[int],
    info_list: bool = False,
    *,
    trusted: bool = False,
) -> list[Any]:
    """Encode a reply. A batch's infos travel column-batched (``"binfo"``, see
    :func:`aioenv.wire.infos.batch_infos`); a single env's, or every env's when the request asked for
    ``"ilist"``, as raw dicts (``"info"``)."""
    infos = fields.pop("info", None)
    try:
        return encode(Op.RESULT, *_with_infos(fields, arrays, infos, info_list), trusted=trusted)
    except (TypeError, OverflowError):  # OverflowError: an int beyond 64 bits
        pass
    # Some env's info holds a value msgpack cannot carry: fail that row alone.
    errors = fields.setdefault("err", {})
    for i, info in enumerate(infos or []):
        if info is None:
            continue
        try:
            pack(info)
        except (TypeError, OverflowError) as exc:
            infos[i] = None
            err = TypeError(f"env {env_ids[i]}'s info cannot cross the wire: {exc}")
            errors[i] = error_fields(err, env_ids[i])
    return encode(Op.RESULT, *_with_infos(fields, arrays, infos, info_list), trusted=trusted)


def _with_infos(
    fields: dict[str, Any], arrays: list[np.ndarray], infos: list[Any] | None, info_list: bool
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The reply's fields and arrays with ``infos``: as they are (``"info"``) or batched (``"binfo"``, its
    numeric columns among the arrays: see :mod:`aioenv.wire.info_wire`)."""
    if infos is None:
        return fields, arrays
    if len(infos) == 1 or info_list:
        return {**fields, Key.INFO: infos}, arrays
    fields, arrays = dict(fields), list(arrays)  # a second try (see encode_reply) starts from the rows' own again
    put_binfo(fields, batch_infos(infos, len(infos)), arrays)
    return fields, arrays

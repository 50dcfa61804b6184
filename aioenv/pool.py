"""``aioenv.Pool``: the asyncio API over a pool of envs hosted by worker processes.

Every batched call takes ``env_ids`` (None = all envs, in order) and returns
gymnasium-style tuples whose rows follow the ids given; ``info["env_id"]``
(int32, shape ``(B,)``) names each row's env. See ``docs/api.md`` for the tour.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from aioenv._compat import AutoresetMode
from aioenv._loop import consume
from aioenv.core import costs
from aioenv.core.coordinator import SPIN_AT_MOST, Coordinator
from aioenv.core.launcher import LocalProcess, Spawn, in_process_unavailable, spawn_here
from aioenv.core.lifecycle import POOL, Lifecycle, Phase
from aioenv.core.remote import RemoteCoordinator
from aioenv.core.runner import Runner
from aioenv.core.sinks import Gather, RecvQueue, ResetResult, Single, Sink, StepResult
from aioenv.core.sources import parse_sources
from aioenv.errors import InvalidAction, PoolClosed, ProtocolError, UsageError
from aioenv.pool_options import (
    MODES,
    check_in_process,
    checked_allow_in_process,
    checked_curve_keys,
    checked_endpoint,
    checked_on_timeout,
    checked_seeds,
    mode_name,
    pool_executor,
    worker_executor,
    workers_asked,
)
from aioenv.transport.spawn import usable_cpus
from aioenv.wire import spaces
from aioenv.wire.checks import space_text
from aioenv.wire.options import (
    AutoresetName,
    OnTimeout,
    PoolExecutor,
    positive_int,
    positive_seconds,
)
from aioenv.wire.protocol import Key

__all__ = ["ForkGuard", "Pool", "make"]

log = logging.getLogger("aioenv.pool")

_FOREIGN_LOOP = (
    "this pool belongs to the event loop it was started in, and was called from another thread or loop (its "
    "replies would never arrive there): use aioenv.SyncPool from threads, or hand the call to the pool's loop "
    "with asyncio.run_coroutine_threadsafe(coro, loop)"
)


#: Children forked so far on the way to this process (each child counts one more than its parent at the fork).
_FORKS = [0]
os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))


class ForkGuard:
    """The process that started a pool, told apart from a child forked from it by comparing two ints (asking the
    system for the process id on every call would cost more than the comparison)."""

    __slots__ = ("forks", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.forks = _FORKS[0]

    def check(self) -> None:
        """Refuse a pool's call in a child forked from the process that started the pool: its worker processes,
        sockets and event loop belong to that process, so the call would hang, or disturb them.

        Raises:
            UsageError: in a forked child, naming both processes and the ways out.
        """
        if _FORKS[0] != self.forks:
            raise UsageError(
                f"this pool was started in process {self.pid} and is used in process {os.getpid()}, a child forked "
                "from it (os.fork(), or multiprocessing's 'fork' start method): its worker processes, sockets and "
                "event loop belong to the parent, where a call from here would hang or disturb them. Make a new pool "
                "in the child, or start child processes with multiprocessing's 'spawn' or 'forkserver' method"
            )


def _space(desc: Any, key: str) -> Any:
    """A space the workers (or a server) described; a description this side cannot read is a ProtocolError."""
    try:
        return spaces.space_from_description(desc[key])
    except (ValueError, TypeError, KeyError) as exc:
        raise ProtocolError(f"the envs' {key} space came described in a way this pool cannot read: {exc}") from exc


def _no_envs_here(needs_workers: object) -> str | None:
    """Why ``executor="auto"`` may not keep envs in this process (or None): the pool's options need worker
    processes, or a module of the caller's shadows the worker runtime."""
    if needs_workers:
        return "step_timeout, reset_timeout or max_worker_rss needs worker processes"
    return in_process_unavailable()


def _same_description(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two envs described their spaces identically (descriptions holding arrays, such as a Box's
    bounds, compare as unequal: they are then decoded and compared as spaces)."""
    try:
        return bool(a.get("obs") == b.get("obs") and a.get("act") == b.get("act"))
    except ValueError:  # numpy arrays inside: "the truth value of an array ... is ambiguous"
        return False


#: The event loop running in this thread, or None (asyncio's own, for loop implementations: no exception to catch
#: on the path every call takes).
_running_loop = asyncio._get_running_loop


def _take_back(queue: RecvQueue, rows: int, exc: BaseException) -> None:
    """A ``send``/``send_reset`` of ``rows`` rows raised ``exc``: no longer expect the rows that will not come.

    An ``Exception`` (a bad action, a busy env, a value the wire cannot carry) is raised before anything goes
    out: none of them comes. A Ctrl-C (or SystemExit) inside an env stepped in this process comes after: the
    call went out as messages and stands, and every row of it is answered, the interrupted ones with the
    interruption (some are delivered before the interrupt reaches here, others once their env code is done)."""
    if isinstance(exc, Exception):
        queue.expect(-rows)


async def _poll_turn() -> None:
    """Let the event loop read the replies that have arrived, before a ``recv`` that waits for nothing returns.

    Without it, ``recv(min_results=0)`` with nothing ready would return without ever suspending, and a loop
    that polls with it would spin for ever: the replies on their way are read by the loop's I/O callbacks,
    which never get a turn. Two yields: asyncio runs the I/O callbacks one turn's poll finds after the
    callbacks already queued, this task's wake-up among them (uvloop needs only the first)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def _polled(runner: Runner, future: asyncio.Future[Any]) -> Any:
    """``await future`` (a call's, dispatched by ``runner``), polling for its replies first (:func:`_poll_first`)
    and telling ``runner`` how long the wait took. A task cancelled while it polls cancels ``future``, as it would
    while awaiting it (the call's rows are dropped as they come, their envs freed)."""
    if future.done():
        return await future
    start = None
    budget = runner.poll_budget()
    if budget is not None:
        try:
            start = await _poll_first(budget, future.done)
        except BaseException:
            future.cancel()
            raise
    try:
        return await future
    finally:
        if start is not None:
            runner.note_wait(time.monotonic() - start)


async def _poll_first(budget: float, done: Callable[[], bool], most: float | None = None) -> float:
    """Poll for a wait's replies for the ``budget`` (s) its runner gave (:meth:`aioenv.core.runner.Runner.poll_budget`,
    asked by the caller, which makes no poll where it gives none; at most ``most`` seconds), until ``done()``; returns
    when the wait began (``time.monotonic()``), for the caller to tell the runner how long it took once it is over.
    The poll yields to the event loop turn after turn, so the other tasks and I/O go on as usual."""
    start = time.monotonic()
    if most is not None:
        budget = min(budget, most)
    if budget > 0:
        await _poll_until(done, start + budget)
    return start


async def _poll_until(done: Callable[[], bool], until: float) -> None:
    """Yield to the event loop until ``done()`` or ``time.monotonic()`` reaches ``until``: every turn, the loop
    reads the descriptors that are ready, the replies' among them, without sleeping in the kernel."""
    monotonic, sleep = time.monotonic, asyncio.sleep
    while not done() and monotonic() < until:
        await sleep(0)


class Pool:
    """A pool of ``num_envs`` envs run by worker processes, driven from asyncio.

    Construct it, then ``await pool.start()`` or use ``async with Pool(...) as pool``;
    :func:`make` does both. Arguments are those of :func:`make`.

    Attributes:
        num_envs: number of envs, ids ``0 .. num_envs - 1``.
        batch_size: rows ``recv()`` returns by default.
        single_observation_space / single_action_space: one env's spaces.
        observation_space / action_space: batched over ``num_envs`` (as gymnasium's vector envs).
        autoreset_mode: a ``gymnasium.vector.AutoresetMode``.
        metadata: the env's metadata plus ``"autoreset_mode"``.
        closed: True once :meth:`aclose` began.
    """

    def __init__(
        self,
        env: Any,
        num_envs: int | None = None,
        *,
        batch_size: int | None = None,
        num_workers: int | None = None,
        executor: PoolExecutor | None = None,
        autoreset_mode: AutoresetName | str | AutoresetMode = "next_step",
        seed: int | Sequence[int | None] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        step_timeout: float | None = None,
        reset_timeout: float | None = None,
        on_timeout: OnTimeout = "error",
        max_concurrency: int | None = None,
        max_worker_rss: int | None = None,
        endpoint: str | None = None,
        curve_keys: tuple[str, str] | None = None,
        allow_in_process: bool = False,
        max_loop_hold: float | None = None,
    ) -> None:
        self.endpoint = checked_endpoint(endpoint)
        self._curve_keys = checked_curve_keys(curve_keys, endpoint)
        self._asked_executor = None if executor is None else pool_executor(executor)
        self._asked_workers = workers_asked(num_workers)
        check_in_process(
            self._asked_executor,
            self._asked_workers,
            endpoint=endpoint,
            step_timeout=step_timeout,
            reset_timeout=reset_timeout,
            max_worker_rss=max_worker_rss,
        )
        #: Whether ``executor="auto"`` may place envs in this process (see :func:`make`).
        self.allow_in_process = checked_allow_in_process(allow_in_process, self._asked_executor, endpoint)
        if self._asked_workers == 0 and self._asked_executor == "inline":
            self._asked_executor = "in_process"  # the inline executor in this process
        self._mode = mode_name(autoreset_mode)
        self.step_timeout = positive_seconds("step_timeout", step_timeout)
        self.reset_timeout = positive_seconds("reset_timeout", reset_timeout)
        self.on_timeout = checked_on_timeout(on_timeout, self._mode)
        self.max_concurrency = positive_int("max_concurrency", max_concurrency, allow_none=True)
        self.max_worker_rss = positive_int("max_worker_rss", max_worker_rss, allow_none=True, unit="number of bytes")
        #: The most seconds a call holds the event loop for envs stepped in this process (None: the default).
        self.max_loop_hold = positive_seconds("max_loop_hold", max_loop_hold)
        self._env_name = env if isinstance(env, str) else ""
        self._env_kwargs = env_kwargs
        # a remote pool sends names only: no private directory, callables refused by parse_sources
        self._private_dir = Coordinator.private_directory() if endpoint is None else None
        try:  # a refused argument must not leave the private directory behind
            self._size(env, num_envs, env_kwargs, batch_size, seed)
        except BaseException:
            self._remove_private_dir()
            raise
        self.executor: PoolExecutor = self._asked_executor or "auto"
        #: How many envs (the first ones) run in this process (see ``executor="in_process"``, ``"auto"`` with
        #: ``allow_in_process=True`` and ``num_workers=0``).
        self.envs_in_process = self.num_envs if self.executor == "in_process" or self._asked_workers == 0 else 0
        #: Why ``executor="auto"`` chose what it did ("" until it did).
        self.placement_reason = ""
        self._recorded = list(self._seeds)
        #: NEW, STARTING, RUNNING, CLOSING, CLOSED (see :mod:`aioenv.core.lifecycle`).
        self._life = Lifecycle("pool", Phase.NEW, POOL)
        #: What runs the envs (a local or a remote coordinator), once :meth:`start` made it.
        self._runner: Runner | None = None
        #: Where its worker processes are started (see :class:`aioenv.core.launcher.Spawn`; SyncPool sets its own).
        self._spawn: Spawn = spawn_here
        #: The event loop whose sockets, futures and timers the pool uses (None until it runs).
        self._home: asyncio.AbstractEventLoop | None = None
        self._started_here = ForkGuard()  # the process whose workers and sockets these are (set again at start)
        self.metadata: dict[str, Any] = {}
        self.render_mode: str | None = None

    def _size(
        self,
        env: Any,
        num_envs: int | None,
        env_kwargs: dict[str, Any] | None,
        batch_size: int | None,
        seed: int | Sequence[int | None] | None,
    ) -> None:
        """Check the env sources and the counts that follow from them: ``num_envs``, ``batch_size``,
        ``num_workers`` and each env's first seed."""
        self._sources, self.num_envs = parse_sources(env, num_envs, env_kwargs, self._private_dir)
        self.batch_size = positive_int("batch_size", batch_size, allow_none=True) or self.num_envs
        if self.batch_size > self.num_envs:
            raise ValueError(f"batch_size={self.batch_size} exceeds num_envs={self.num_envs}")
        workers = self._asked_workers if self._asked_workers is not None else min(self.num_envs, usable_cpus())
        # in-process envs need no worker process: they all run in this process
        self.num_workers = 0 if self._asked_executor == "in_process" else min(workers, self.num_envs)
        self._seeds = self._initial_seeds(seed)

    def _initial_seeds(self, seed: Any) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        return checked_seeds(seed, list(range(self.num_envs)))

    # ------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` began."""
        return self._life.state is Phase.CLOSING or self._life.state is Phase.CLOSED

    async def start(self) -> Pool:
        """Start the workers and make every env (idempotent: a pool started or starting is returned as it is).
        Returns the pool.

        Raises:
            PoolClosed: the pool was closed (before, or while it started).
        """
        if self.closed:
            raise PoolClosed("this pool was closed; make a new one")
        if self._life.state is not Phase.NEW:
            return self
        self._life.move(Phase.STARTING)
        try:
            if self.endpoint is not None:
                described = await self._start_remote(self.endpoint)
            else:
                assert self._private_dir is not None
                adopt = await self._place_by_cost() if self.executor == "auto" else None
                coord = self._runner = Coordinator(
                    self.num_envs,
                    self._sources,
                    self._private_dir,
                    autoreset_mode=self._mode,
                    executor=worker_executor(self.executor),
                    on_remade=self._on_remade,
                    max_concurrency=self.max_concurrency,
                    on_timeout=self.on_timeout,
                    max_worker_rss=self.max_worker_rss,
                    in_process=self.envs_in_process,
                    adopt=adopt,
                    max_loop_hold=self.max_loop_hold,
                    spawn=self._spawn,
                )
                described = await coord.start(self.num_workers)
            if self.closed:
                raise PoolClosed("the pool was closed while it started")
            self._adopt(described)
            self._life.move(Phase.RUNNING)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _place_by_cost(self) -> tuple[LocalProcess, int | None] | None:
        """``executor="auto"``: time one env of this pool in a worker process and choose where the envs run
        (:mod:`aioenv.core.costs`). Options that need worker processes keep the envs in them. Returns that
        process and its rows' descriptor when the envs go to ``inline`` workers (it becomes the first), else
        None (it was closed)."""
        needs_workers = self.step_timeout or self.reset_timeout or self.max_worker_rss
        cpus = usable_cpus()
        choice, probed = await self._timed_choice(cpus, needs_workers)
        if self._asked_workers == 0:  # every env in this process, on the executor the probe suggests
            executor = "in_process" if choice.executor == "inline" else choice.executor
            choice = costs.Choice(executor, 0, self.num_envs, f"num_workers=0 keeps every env here; {choice.why}")
        elif self._asked_workers is not None:  # worker processes asked for by number: every env goes to them
            executor = "inline" if choice.executor == "in_process" else choice.executor
            why = choice.why if executor == choice.executor and not choice.in_process else ""
            why = why or f"num_workers={self._asked_workers} asks for worker processes"
            choice = costs.Choice(executor, self._asked_workers, 0, why)
        self.executor = choice.executor  # type: ignore[assignment]  # a PoolExecutor by construction
        self.num_workers, self.envs_in_process = choice.num_workers, choice.in_process
        self.placement_reason = choice.why
        log.info("executor='auto' chose %s", self.describe_placement())
        if probed is None:
            return None
        if choice.executor == "inline" and choice.num_workers > 0:
            return probed.take()
        await probed.release()
        return None

    async def _timed_choice(self, cpus: int, needs_workers: object) -> tuple[costs.Choice, costs.Probed | None]:
        """Where the envs run best, from one env timed in a worker process (returned with the choice, None when
        timing failed); sources known to be async (OpenEnv sessions) are not timed: ``async`` workers."""
        if self._sources.asynchronous:
            return costs.Choice("async", max(1, min(self.num_envs, cpus)), 0, "OpenEnv sessions are async envs"), None
        try:
            assert self._private_dir is not None
            probed = await costs.probe(self._sources, 0, self._seeds[0], self._private_dir)
        except TimeoutError:
            why = f"timing one env took over {costs.PROBE_LIMIT:g} s"
            return costs.Choice("inline", self.num_workers, 0, why), None
        except Exception as exc:  # noqa: BLE001 - the workers will make the envs and report what fails
            why = f"timing one env failed ({type(exc).__name__}: {str(exc).splitlines()[0]})"
            return costs.Choice("inline", self.num_workers, 0, why), None
        allowed = self.allow_in_process
        try:  # its waits poll where a CPU is left to them (an awaited call's, a SyncPool's): the model counts that
            choice = costs.choose(
                probed.cost, self.num_envs, cpus, self.batch_size, allow_in_process=allowed, polls=SPIN_AT_MOST
            )
        except BaseException:  # the probe's process is no one's yet: stop it
            await probed.release()
            raise
        if choice.in_process and (not_here := _no_envs_here(needs_workers)):
            choice = costs.Choice("inline", max(1, min(self.num_envs, cpus)), 0, not_here)
        return choice, probed

    @functools.cached_property
    def observation_space(self) -> gymnasium.Space[Any]:
        """The observation space batched over ``num_envs`` (gymnasium's ``batch_space``), built on first use:
        for spaces that do not batch into arrays (``Text``, ``Graph``) it holds a copy per env."""
        return batch_space(self.single_observation_space, self.num_envs)

    @functools.cached_property
    def action_space(self) -> gymnasium.Space[Any]:
        """The action space batched over ``num_envs``, built on first use (see :attr:`observation_space`)."""
        return batch_space(self.single_action_space, self.num_envs)

    def describe_placement(self) -> str:
        """Where the envs run, in words (``"32 envs in this process"``, ``"32 envs on 2 inline worker(s)"``,
        ``"20 envs in this process, 12 on 1 inline worker(s)"``), with why ``executor="auto"`` chose it."""
        here = f"{self.envs_in_process} envs in this process"
        if self.envs_in_process and self.executor in ("thread", "async") and not self.num_workers:
            here += ", each on a thread of its own" if self.executor == "thread" else ", as coroutines on its loop"
        if not self.num_workers:
            placed = here
        else:
            there = f"on {self.num_workers} {self.executor} worker(s)"
            others = self.num_envs - self.envs_in_process
            placed = f"{here}, {others} {there}" if self.envs_in_process else f"{others} envs {there}"
        return f"{placed} ({self.placement_reason})" if self.placement_reason else placed

    async def _start_remote(self, endpoint: str) -> dict[str, Any]:
        options = {
            "autoreset": self._mode,
            "executor": None if self._asked_executor == "auto" else self._asked_executor,  # auto: the server's
            "step_timeout": self.step_timeout,
            "reset_timeout": self.reset_timeout,
            "on_timeout": self.on_timeout,
            "max_concurrency": self.max_concurrency,
            "max_worker_rss": self.max_worker_rss,
        }
        remote = RemoteCoordinator(
            endpoint,
            self.num_envs,
            self._env_name,
            self._env_kwargs,
            options,
            on_remade=self._on_remade,
            curve_keys=self._curve_keys,
        )
        self._runner = remote
        described = await remote.start(self._asked_workers)
        info = described.pop("_server", {})  # what the server chose: workers, executor
        self.num_workers = int(info.get("num_workers", self.num_workers))
        self.executor = pool_executor(info.get("executor", self.executor))  # the server checked it too
        return described

    def _remove_private_dir(self) -> None:
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)

    def _adopt(self, described: dict[str, Any]) -> None:
        descs = list(described.values())
        first = descs[0]
        self.single_observation_space = _space(first, "obs")
        self.single_action_space = _space(first, "act")
        for other in descs[1:]:
            if _same_description(other, first):
                continue  # described alike (almost always): no need to decode the same spaces again
            obs, act = _space(other, "obs"), _space(other, "act")
            if obs != self.single_observation_space or act != self.single_action_space:
                raise ValueError(
                    "all envs of a pool must share their spaces: got observation spaces "
                    f"{self.single_observation_space} and {obs}, action spaces {self.single_action_space} and {act}"
                )
        self.metadata = dict(first.get("metadata") or {})
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.get("render_mode")
        assert self._runner is not None
        self._recv: RecvQueue = self._runner.recv_queue(self.single_observation_space)
        self._home = asyncio.get_running_loop()
        self._started_here = ForkGuard()

    @property
    def autoreset_mode(self) -> AutoresetMode:
        """The autoreset mode, as gymnasium's enum."""
        return MODES[self._mode]

    @property
    def private_dir(self) -> str | None:
        """The 0700 directory of this pool's pickled factories and payloads; None for a remote pool."""
        return self._private_dir

    def _on_remade(self, env_ids: np.ndarray) -> None:
        for env_id in env_ids.tolist():
            self._seeds[env_id] = self._recorded[env_id]

    async def __aenter__(self) -> Pool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Graceful shutdown: in-flight requests fail with PoolClosed, envs are closed, workers stopped
        (CLOSE, then SIGTERM, then SIGKILL); never hangs. Idempotent."""
        if self.closed:
            return
        if self._home is not None:  # it ran: closed in the process and on the loop it was started in
            self._started_here.check()
            if _running_loop() is not self._home:
                raise UsageError(_FOREIGN_LOOP)
        self._life.move(Phase.CLOSING)
        try:
            if self._home is not None:
                self._recv.fail_waiter(PoolClosed("the pool was closed while recv() was waiting"))
            if self._runner is not None:
                await self._runner.aclose()
            else:
                self._remove_private_dir()
        finally:
            self._life.move(Phase.CLOSED)

    def _in_env_code(self) -> bool:
        """Whether the calling thread runs env code of this pool in this process (``executor="in_process"``: an
        env that calls its own pool, which would wait for the very thread it runs on)."""
        return self._runner is not None and self._runner.in_env_code()

    def _idle_between_calls(self) -> bool:
        """Whether nothing of this pool needs its event loop between calls while none of its requests is out: no
        server to keep in touch with, no env on a thread or coroutine of this process (``num_workers=0``)."""
        return self.endpoint is None and not (self.envs_in_process and self.executor in ("thread", "async"))

    def _waits_for_replies(self) -> bool:
        """Whether a request of this pool is out, or held to go out later: its reply is still to come."""
        return self._runner is not None and self._runner.waits_for_replies()

    def _settled(self) -> bool:
        """Whether the event loop has taken in all that happened to this pool's worker processes so far."""
        return self._runner is None or self._runner.settled()

    def _wait_here(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """Block until ``future`` (a call's) is done, for as long as the event loop need not run (see
        :meth:`aioenv.core.runner.Runner.wait_here`); whether it is done."""
        return self._runner is not None and self._runner.wait_here(future, timeout)

    def _runs_env_code(self) -> bool:
        """Whether env code of this pool runs (or waits to run) in this process now."""
        return self._runner is not None and self._runner.runs_env_code()

    def _interrupt_env_code(self) -> None:
        """Raise ``KeyboardInterrupt`` inside the env code of this pool that runs in this process now, if any
        (a second Ctrl-C in one call of :class:`aioenv.SyncPool`: an env whose step never ends is cut short)."""
        if self._runner is not None:
            self._runner.interrupt_env_code()

    def _core(self) -> Runner:
        """The runner, checked where every public call enters: the pool runs, and is called from the process
        and the event loop it was started in."""
        runner = self._runner
        if self._life.state is not Phase.RUNNING or runner is None:
            if self.closed:
                raise PoolClosed("the pool is closed")
            raise UsageError(
                "the pool is not started: use `await aioenv.make(...)`, `await pool.start()` or `async with`"
            )
        if _FORKS[0] != self._started_here.forks:  # a forked child (ForkGuard.check, without a call on this path)
            self._started_here.check()
        if _running_loop() is not self._home:
            raise UsageError(_FOREIGN_LOOP)
        return runner

    def __repr__(self) -> str:
        state = {Phase.NEW: "not started", Phase.CLOSING: "closed", Phase.LOST: "running"}.get(
            self._life.state, self._life.state.value
        )
        here = f" in_process={self.envs_in_process}" if self.envs_in_process else ""
        return (
            f"<aioenv.Pool num_envs={self.num_envs} workers={self.num_workers} executor={self.executor}{here} {state}>"
        )

    # ------------------------------------------------------------ dispatch helpers

    def _ids(self, env_ids: Any) -> np.ndarray:
        """``env_ids`` checked and normalised once per call (see :meth:`aioenv.core.runner.Runner.resolve`)."""
        return self._core().resolve(env_ids)

    def _dispatch_step(
        self,
        runner: Runner,
        actions: Any,
        ids: np.ndarray,
        sink: Sink,
        *,
        info_list: bool = False,
        checked: bool = False,
    ) -> None:
        """Check ``actions`` for ``ids`` (resolved by ``runner``, which the caller's :meth:`_core` returned: that
        check is made once a call) and hand the step to ``runner``, which claims the envs and sends it; the rows go
        to ``sink``.

        ``checked``: ``actions`` are the leaves :func:`aioenv.wire.spaces.check_actions` returned for ``ids``
        already (an adapter that checked them in its caller's thread), owned by this call."""
        leaves: list[np.ndarray] = actions if checked else spaces.check_actions(self.single_action_space, actions, ids)
        runner.step(ids, leaves, sink, info_list=info_list, timeout=self.step_timeout)

    def _seeds_for(self, ids: np.ndarray, seed: Any) -> list[int | None]:
        """The seed each env of ``ids`` resets with (validates; changes nothing)."""
        if seed is None:
            return [self._seeds[i] for i in ids.tolist()]
        return checked_seeds(seed, ids.tolist())

    def _record_seeds(self, ids: np.ndarray, seeds: list[int | None]) -> None:
        for i, s in zip(ids.tolist(), seeds, strict=True):
            self._seeds[i] = None  # the pool's seed applies to the first reset only
            if s is not None:
                self._recorded[i] = s  # what a re-made env resets with

    def _dispatch_reset(self, ids: np.ndarray, seed: Any, options: Any, sink: Sink) -> None:
        """Check the seeds and options for ``ids`` (from :meth:`_ids`) and hand the resets to the runner."""
        runner = self._core()
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        seeds = self._seeds_for(ids, seed)
        runner.reset(ids, seeds, options, sink, timeout=self.reset_timeout)
        self._record_seeds(ids, seeds)  # only once the resets are on their way: a refused one records nothing

    # ------------------------------------------------------------ batched API

    async def reset(
        self,
        env_ids: Any = None,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset ``env_ids`` (all when None) and wait for them.

        ``seed``: an int gives env ``i`` the seed ``seed + i``; a sequence gives one per env in ``env_ids``;
        None uses the pool's ``seed`` the first time (and after a crash), then none.

        Returns:
            ``(obs, info)``: obs batched with B = len(env_ids) rows; ``info["env_id"]`` (B,) int32.
        """
        return await self._start_reset(env_ids, seed=seed, options=options)

    def _start_reset(
        self, env_ids: Any = None, *, seed: int | Sequence[int | None] | None = None, options: Any = None
    ) -> asyncio.Future[tuple[Any, dict[str, Any]]]:
        """:meth:`reset` without the coroutine: dispatch now, return the future of its result (for
        :class:`aioenv.SyncPool`, which completes it from another thread without a task per call)."""
        ids = self._ids(env_ids)
        sink = Gather("reset", ids, self.single_observation_space)
        try:
            self._dispatch_reset(ids, seed, options, sink)
        except BaseException:  # as in _start_step
            sink.future.add_done_callback(consume)
            raise
        return sink.future

    async def step(
        self, actions: Any, env_ids: Any = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step ``env_ids`` (all when None) with ``actions`` (batched, one row per env in that order) and wait.

        Returns:
            ``(obs, reward, terminated, truncated, info)``: B = len(env_ids) rows; reward ``(B,)`` float64,
            terminated/truncated ``(B,)`` bool, ``info["env_id"]`` ``(B,)`` int32.

        Raises:
            InvalidAction: an action does not fit the space (nothing was sent).
            EnvError: an env raised; ``err.partial`` holds the other rows, ``err.errors`` every failure.
            WorkerCrashed / StepTimeout: for the envs concerned, likewise.
        """
        future = self._start_step(actions, env_ids)
        runner = self._runner
        assert runner is not None, "the call above checked that the pool runs"
        result: tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]
        result = await _polled(runner, future)
        return result

    def _start_step(
        self, actions: Any, env_ids: Any = None, *, info_list: bool = False, checked: bool = False
    ) -> asyncio.Future[Any]:
        """:meth:`step` (``info_list``: ``info`` is a list with each env's own info dict, in row order, as
        Stable-Baselines3 wants; still one message per worker) without the coroutine: dispatch now and return
        the future of its result (see :meth:`_start_reset`; ``checked``: see :meth:`_dispatch_step`). Done
        already when every env ran in this process within the call (``max_loop_hold``)."""
        runner = self._core()
        ids = runner.resolve(env_ids)
        sink = Gather("step", ids, self.single_observation_space, info_list=info_list)
        try:
            self._dispatch_step(runner, actions, ids, sink, info_list=info_list, checked=checked)
        except BaseException:  # as in _start_reset
            sink.future.add_done_callback(consume)
            raise
        return sink.future

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps for ``env_ids`` and return at once; results arrive through :meth:`recv`."""
        runner = self._core()
        ids = runner.resolve(env_ids)
        queue = self._recv
        queue.expect(ids.size)  # before dispatch: a row may be answered at once (see Coordinator.submit)
        try:
            self._dispatch_step(runner, actions, ids, queue)
        except BaseException as exc:
            _take_back(queue, ids.size, exc)
            raise

    def send_reset(
        self,
        env_ids: Any = None,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Dispatch resets; their rows come through :meth:`recv` with reward 0 and terminated/truncated False."""
        ids = self._ids(env_ids)
        queue = self._recv_sink()
        queue.expect(ids.size)
        try:
            self._dispatch_reset(ids, seed, options, queue)
        except BaseException as exc:
            _take_back(queue, ids.size, exc)
            raise

    def _recv_sink(self) -> RecvQueue:
        self._core()
        return self._recv

    async def recv(
        self, *, min_results: int | None = None, max_results: int | None = None, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Results of ``send``/``send_reset`` in the order they finished.

        Waits for at least ``min_results`` (default ``batch_size``) and returns at most ``max_results``
        (default ``max(batch_size, min_results)``). With ``timeout`` (s) it returns what is ready when
        time is up, possibly nothing; the rest stay queued. ``min_results=0`` polls: the replies that have
        arrived are read first (the event loop gets a turn), then what is ready returns, possibly nothing.
        A failed env's error is raised by the recv that reaches it (rows before it are returned first).

        Raises:
            UsageError: without a timeout, when fewer results are ready and in flight than ``min_results``.
        """
        runner = self._core()
        need = self.batch_size if min_results is None else int(min_results)
        most = max(self.batch_size, need) if max_results is None else int(max_results)
        if need < 0 or most < 1 or need > most:
            raise UsageError(f"recv needs 0 <= min_results <= max_results and max_results >= 1, got {need} and {most}")
        queue = self._recv
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        if need == 0 and not queue.ready and queue.in_flight:
            await _poll_turn()
        while True:
            if timeout is None and queue.ready + queue.in_flight < need:
                if need > self.num_envs:
                    n = self.num_envs
                    why = f"the pool has {n} envs, so at most {n} results are ever ready at once"
                else:
                    why = f"{queue.ready} results are ready and {queue.in_flight} in flight; send() more steps first"
                raise UsageError(f"recv(min_results={need}) can never be satisfied: {why}, or pass a timeout")
            if queue.ready < need:
                # A share: step the envs here only now that this call would wait, and only if the worker
                # processes' rows that arrived do not already make up its rows. Those go first, so their envs
                # step again at once while this process steps its own (answered inside send(), they would
                # starve the workers).
                runner.answer_waiting(lambda: queue.ready >= need)
            start = None
            budget = runner.poll_budget() if queue.ready < need and queue.in_flight else None
            if budget is not None:  # (see _polled; a deadline bounds the poll too)
                left = None if deadline is None else deadline - asyncio.get_running_loop().time()
                start = await _poll_first(budget, lambda: queue.ready >= need or not queue.in_flight, left)
            left = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            await queue.wait(need, left)
            if start is not None:
                runner.note_wait(time.monotonic() - start)
            if self.closed:
                raise PoolClosed("the pool was closed")
            # Another recv waiting at the same time may have taken the rows this one was woken for: wait again.
            if queue.ready >= need or (
                deadline is not None and (queue.in_flight == 0 or asyncio.get_running_loop().time() >= deadline)
            ):
                return queue.take(most)

    # ------------------------------------------------------------ per-env futures

    def step_env(self, env_id: int, action: Any) -> asyncio.Future[StepResult]:
        """Step one env; the returned future gets its :class:`StepResult` (not ``recv``)."""
        fut: asyncio.Future[StepResult] = asyncio.get_running_loop().create_future()
        runner = self._core()
        ids = runner.one(env_id)
        sink = Single("step", fut, self.single_observation_space)
        leaves = _one_discrete(self.single_action_space, action)
        if leaves is not None:
            self._dispatch_step(runner, leaves, ids, sink, checked=True)
        else:
            self._dispatch_step(runner, _batch_one(self.single_action_space, action), ids, sink)
        return fut

    def reset_env(
        self, env_id: int, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> asyncio.Future[ResetResult]:
        """Reset one env; the returned future gets its :class:`ResetResult`. An int seed is used as is."""
        fut: asyncio.Future[ResetResult] = asyncio.get_running_loop().create_future()
        seeds = None if seed is None else checked_seeds([seed], [env_id])
        self._dispatch_reset(
            self._core().one(env_id), seeds, options, Single("reset", fut, self.single_observation_space)
        )
        return fut

    # ------------------------------------------------------------ methods and attributes

    async def _call(self, kind: str, name: str, env_ids: Any, **fields: Any) -> list[Any]:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        runner = self._core()
        ids = runner.resolve(env_ids)
        sink = Gather("call", ids, self.single_observation_space)
        per_env = fields.pop("per_env", None)
        runner.call(ids, {Key.KIND: kind, Key.NAME: name, **fields}, per_env, sink)
        values: list[Any] = await sink.future  # one per env of ids
        return values

    async def call(self, name: str, *args: Any, env_ids: Any = None, **kwargs: Any) -> list[Any]:
        """Call method ``name`` on each env (through wrappers); an attribute is returned as is.

        Returns a list with one result per env in ``env_ids`` order. Arguments and results cross the wire
        as msgpack (numbers, str, lists, dicts, tuples, numpy arrays).
        """
        return await self._call("call", name, env_ids, args=list(args), kw=kwargs)

    async def get_attr(self, name: str, env_ids: Any = None) -> list[Any]:
        """Attribute ``name`` of each env (one per env in ``env_ids`` order)."""
        return await self._call("get", name, env_ids)

    async def set_attr(self, name: str, values: Any, env_ids: Any = None) -> None:
        """Set attribute ``name``: a list/tuple gives one value per env, anything else is set on all."""
        ids = self._ids(env_ids)
        if isinstance(values, (list, tuple)):
            if len(values) != ids.size:
                raise ValueError(f"set_attr got {len(values)} values for {ids.size} envs")
            per_env = list(values)
        else:
            per_env = [values] * ids.size
        await self._call("set", name, ids, per_env=per_env)

    async def render(self, env_ids: Any = None) -> np.ndarray:
        """RGB frames of each env, shape ``(B, H, W, 3)`` uint8 (envs made with ``render_mode="rgb_array"``)."""
        frames = await self.call("render", env_ids=env_ids)
        for env_id, frame in zip(self._ids(env_ids).tolist(), frames, strict=True):
            if not isinstance(frame, np.ndarray):
                raise UsageError(
                    f"env {env_id}'s render() returned {type(frame).__name__}, not an RGB array: make the pool with "
                    "env_kwargs={'render_mode': 'rgb_array'}",
                    env_id=env_id,
                )
        return np.stack(frames)


async def make(env: Any, num_envs: int | None = None, **options: Any) -> Pool:
    """Create and start a :class:`Pool`.

    Args:
        env: a gymnasium id (``"CartPole-v1"``), ``"pkg.module:factory"``, a callable returning an env
            (shipped to local workers with cloudpickle), a sequence of callables, one per env, or an OpenEnv
            environment: ``"openenv+ws://HOST:PORT"`` (a session of a running server per env),
            ``"openenv+app:pkg.module:app"`` (an app each worker serves) or ``"openenv+image:IMAGE"`` (a container of
            the image per env, through docker or podman); see ``docs/openenv.md``.
        num_envs: how many envs (may be omitted with a sequence of callables).

    Keyword Args:
        batch_size (int | None): rows :meth:`Pool.recv` returns by default (default ``num_envs``).
        num_workers (int | None): worker processes (default ``min(num_envs, usable CPUs)``: the CPUs this process may
            run on, its affinity mask, see :func:`aioenv.transport.spawn.usable_cpus`). ``0``: none, every env runs in
            this process on ``executor`` (``"thread"``: a thread each; ``"async"``: coroutines on this loop;
            ``"inline"``: as ``"in_process"``; ``thread`` and ``async`` with no deadline: ``step_timeout`` is refused).
        executor (str | None): ``"auto"`` (default: chosen from what one env's steps cost, in worker processes unless
            ``allow_in_process``), ``"inline"`` (envs stepped one after another in each worker: CPU-bound envs),
            ``"thread"`` (each env on its own thread: blocking I/O envs) or ``"async"`` (:class:`aioenv.AsyncEnv`
            coroutines, thousands per worker: LLM/HTTP envs).
        autoreset_mode (str): ``"next_step"`` (default), ``"same_step"`` or ``"disabled"`` (gymnasium 1.x semantics).
        seed (int | Sequence[int | None] | None): int (env ``i`` gets ``seed + i`` at its first reset) or one seed per
            env.
        env_kwargs (dict[str, Any] | None): keyword arguments for ``gymnasium.make`` / the factory.
        step_timeout (float | None): seconds from dispatch; a step that overruns fails with ``StepTimeout`` and its env
            is replaced (an ``async`` step is cancelled; a hung ``inline``/``thread`` step restarts its worker).
        reset_timeout (float | None): likewise for explicit resets (``reset``, ``send_reset``, ``reset_env``); default
            None, no deadline. An autoreset happens inside a step and counts under ``step_timeout``.
        on_timeout (str): ``"error"`` (default) or ``"truncate"``: a late step comes back as a truncated row (the env's
            last observation, reward 0, ``info["timeout"]`` True) and the env's next step starts a new episode, so a
            training loop need not handle exceptions. Envs replaced along with it (a restarted worker's) end their
            episodes the same way with ``info["env_replaced"]`` True.
        max_concurrency (int | None): at most this many steps/resets running at once across the pool (e.g. an upstream
            rate limit); the rest wait, in order, and their deadlines start when they are sent.
        max_worker_rss (int | None): bytes of resident memory a worker process may hold; one over it is replaced the
            next moment it has no request in flight, its envs re-made (their next step raises ``EnvRemade``; see
            :mod:`aioenv.core.memory`). For envs that leak. Local worker processes (and a server's own).
        endpoint (str | None): ``"tcp://host:port"`` of an ``aioenv serve`` server: the same pool, run by the server's
            workers (``env`` must then be a name: a gymnasium id or ``"pkg.module:factory"``). The server picks
            ``num_workers`` and ``executor`` when they are not given. ``"unix:///path"``: a server on this machine
            started with ``--bind unix:///path``, reached without ZeroMQ (faster round trips).
        curve_keys (tuple[str, str] | None): for a server started with ``--auth``: ``(your .key_secret file, the
            server's .key file)``, as written by ``aioenv keygen``.
        allow_in_process (bool): let ``executor="auto"`` keep cheap envs in this process (all of them, or a share beside
            worker processes), where a step sends no message; default False: ``auto`` places envs in worker processes
            only. In this process an env that hangs or slows down holds the event loop, and a crash, ``os._exit``, a
            leak or a ``SystemExit`` in an env is this process's (``docs/api.md``).
        max_loop_hold (float | None): for envs stepped one after another in this process (``executor="in_process"``, or
            what ``auto`` keeps here): the most seconds a call holds the event loop (default 0.01). Their env code runs
            on a thread of this process; a call that takes longer is answered once it is done, and the loop goes on
            meanwhile (``step_timeout`` applies as in a worker process).
    """
    pool = Pool(env, num_envs, **options)
    return await pool.start()


_SIMPLE = (
    gymnasium.spaces.Box,
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)


def _one_discrete(space: gymnasium.Space[Any], action: Any) -> list[np.ndarray] | None:
    """A valid integer action of a ``Discrete`` space as checked leaves (one array of shape (1,)),
    without the batch checks; None for anything else, which the general path checks (and explains)."""
    if type(space) is not gymnasium.spaces.Discrete or not isinstance(action, (int, np.integer)):
        return None
    if isinstance(action, bool):
        return None
    a = int(action)
    start = int(space.start)
    if not start <= a < start + int(space.n):
        return None
    return [np.array([a], dtype=space.dtype)]


def _batch_one(space: gymnasium.Space[Any], action: Any) -> Any:
    """One env's action as a batch of one row (for :meth:`Pool.step_env`)."""
    if isinstance(space, _SIMPLE):
        return np.asarray(action)[None]
    if isinstance(space, gymnasium.spaces.Text):
        out = np.empty(1, dtype=object)
        out[0] = action
        return out
    try:
        return concatenate(space, [action], create_empty_array(space, 1))  # type: ignore[arg-type]
    except Exception as exc:
        raise InvalidAction(f"action {action!r} does not fit {space_text(space)}: {exc}") from exc

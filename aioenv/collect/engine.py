"""The stepping core of every collector: one pool, one policy, each env's trajectory, as :class:`Chunk`\\ s.

Two ways to step, chosen by ``mode``:

- ``sync`` (:meth:`Engine.lockstep_batch`): every env each step, one ``pool.step`` (lock-step), ``T`` steps made
  one ``(T, num_envs)`` batch. A ``next_step`` reset step stays in its row, marked ``valid=False``.
- ``async`` (:meth:`Engine.advance`): ``pool.send``/``pool.recv``. Each ``recv`` returns the rows that
  finished first; the policy is called with those rows and their actions are sent at once, while the other
  envs are still stepping. An ``async`` policy runs as a task, so rows keep arriving while it thinks; with
  ``per_env`` each env gets its own call. Reset steps are not recorded (they are not transitions); a
  ``next_step`` reset step goes out in the same ``pool.send`` as the actions the policy chose at once for the
  other rows of its ``recv`` (one message per ``recv``, as a hand loop sends them).

Whatever the autoreset mode, ``next_obs`` is the observation the step really produced: at an episode's end,
the final one (``next_step`` and ``disabled`` return it; ``same_step`` carries it in ``info["final_obs"]``).
The engine resets an env itself when ``max_frames_per_traj`` truncates it, when its episode ends under
``autoreset_mode="disabled"``, and (``on_error="reset"``) after a failed step.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import numpy as np

import aioenv.collect._tree as _tree
from aioenv._compat import AutoresetMode
from aioenv.collect.batch import Batch, LockstepRows
from aioenv.collect.chunk import Chunk, LockstepLog, Trajectories
from aioenv.collect.options import Options
from aioenv.collect.policy import PolicyRunner, RandomActions
from aioenv.errors import AioEnvError, PoolClosed, UsageError
from aioenv.pool import Pool

__all__ = ["Engine"]

READY, STEP, AUTORESET, RESET, POLICY = range(5)
_NONE = np.zeros(0, dtype=np.int32)  # no env ids


def _error_text(exc: BaseException) -> str:
    """``Type: message``, the message's first line only (an ``EnvError`` also carries the remote traceback)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _expand_info(info: dict[str, Any], rows: np.ndarray, n: int) -> dict[str, Any]:
    """A batched info of some rows spread out over ``n`` rows (the others empty)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _expand_info(value, rows, n)
        elif isinstance(value, np.ndarray) and value.shape[:1] == rows.shape:
            full = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
            full[rows] = value
            out[key] = full
    return out


def _constant(a: np.ndarray) -> np.ndarray:
    """``a``, read-only: the engine hands it to many steps (what a batch keeps of it is copied)."""
    a.flags.writeable = False
    return a


def _flag(info: dict[str, Any], key: str, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of a boolean info entry (``info[key]`` with its ``_key`` mask), False where absent."""
    value = info.get(key)
    if value is None:
        return np.zeros(rows.size, dtype=np.bool_)
    picked = np.asarray(value)[rows]
    flags = np.array([bool(v) for v in picked], dtype=np.bool_) if picked.dtype == object else picked.astype(bool)
    mask = info.get(f"_{key}")
    return flags & np.asarray(mask)[rows] if mask is not None else flags


class Engine:
    """Steps ``pool`` with ``runner``'s actions and records each env's transitions (see the module)."""

    def __init__(self, pool: Pool, runner: PolicyRunner, opts: Options, *, keep_info: bool = False) -> None:
        self.pool = pool
        self.runner = runner
        self.opts = opts
        self.keep_info = keep_info
        self.n = pool.num_envs
        self.all_ids = np.arange(self.n, dtype=np.int32)
        mode = pool.autoreset_mode
        self.next_step = mode == AutoresetMode.NEXT_STEP
        self.same_step = mode == AutoresetMode.SAME_STEP
        self.disabled = mode == AutoresetMode.DISABLED
        self.trajs = Trajectories(self.n)
        self.phase = np.full(self.n, READY, dtype=np.int8)
        self.sent_at = np.zeros(self.n)
        self.version = np.zeros(self.n, dtype=np.int64)
        self.policy_s = np.zeros(self.n)
        self._all_rows = _constant(np.ones(self.n, dtype=np.bool_))  # a lock-step's rows when none is pending
        self._no_rows = _constant(np.zeros(self.n, dtype=np.bool_))
        # sync mode: the env's next step is next_step's reset; ``_no_rows`` itself when none is (known from the
        # step that set it, with no look at the rows)
        self.pending = self._no_rows
        self.cur_obs: Any = None
        self.cur_action: Any = None
        self.random_actions = RandomActions(pool.single_action_space, opts.seed)
        #: Choose actions at random (``init_random_frames``) instead of calling the policy.
        self.random = False
        #: Valid transitions recorded so far.
        self.frames = 0
        self.in_flight = 0
        self._tasks: dict[asyncio.Future[Any], tuple[np.ndarray, float, int]] = {}
        self._recv_task: asyncio.Future[Any] | None = None
        self._finished: collections.deque[asyncio.Future[Any]] = collections.deque()  # done, not yet handled
        self._wake = asyncio.Event()

    # ------------------------------------------------------------ recording

    def _record(
        self,
        ids: np.ndarray,
        action: Any,
        step: tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]],
        info_rows: np.ndarray | None,
        times: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> tuple[Chunk, np.ndarray | None, np.ndarray | None]:
        """Record the steps of envs ``ids``, every one a transition (``step``: their obs, reward, terminated,
        truncated; ``info`` with the rows at ``info_rows``, None: row i at i). ``times``: env seconds, policy
        seconds, policy version of each row.

        Returns the chunk, then the rows whose env will reset in its next step (``next_step``) and those the
        engine must reset itself, each None when there are none (the common case: no episode ended)."""
        o, reward, terminated, truncated, info = step
        ended = terminated | truncated
        any_end = bool(ended.any())
        next_obs = o
        if self.same_step and any_end:
            next_obs = _tree.tmap(np.copy, o)
            final_obs = info["final_obs"]
            for row in np.flatnonzero(ended):
                _tree.put_row(next_obs, int(row), final_obs[row if info_rows is None else info_rows[row]])
        steps = self.trajs.steps[ids]
        cap = self.opts.max_frames_per_traj
        # as a TimeLimit (and TorchRL's StepCounter): truncated at the cap even if it also terminated there
        ours = steps + 1 >= cap if cap else None
        done = ended
        if ours is not None and ours.any():
            truncated = truncated | ours
            done = ended | ours
        else:
            ours = None
        env_s, pol_s, versions = times
        n = ids.size
        rows = self.all_ids[:n] if info_rows is None else info_rows
        chunk = Chunk(
            env_id=ids,
            obs=_tree.take(self.cur_obs, ids),
            action=action,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            next_obs=next_obs,
            valid=self._all_rows[:n],
            cut=self._no_rows[:n],
            traj_id=self.trajs.traj[ids],
            step_count=steps,
            policy_version=versions,
            env_seconds=env_s,
            policy_seconds=pol_s,
            timeout=_flag(info, "timeout", rows),
            info=info if self.keep_info else None,
            info_row=rows if self.keep_info else None,
        )
        self.frames += n
        self.trajs.steps[ids] = steps + 1
        if not any_end and ours is None:
            return chunk, None, None
        self.trajs.restart(ids[done])
        explicit = None
        if ours is not None:
            explicit = ours & ~ended
        if self.disabled and any_end:
            explicit = ended if explicit is None else explicit | ended
        return chunk, ended if self.next_step and any_end else None, explicit

    def _failed(self, ids: np.ndarray, action: Any, text: str, env_s: np.ndarray) -> Chunk:
        """Rows for steps (or policy calls) of ``ids`` that failed: not transitions, their trajectory cut."""
        n = ids.size
        obs = _tree.take(self.cur_obs, ids)
        chunk = Chunk(
            env_id=ids.astype(np.int32),
            obs=obs,
            action=action,
            reward=np.zeros(n),
            terminated=np.zeros(n, dtype=np.bool_),
            truncated=np.zeros(n, dtype=np.bool_),
            next_obs=obs,
            valid=np.zeros(n, dtype=np.bool_),
            cut=np.ones(n, dtype=np.bool_),
            traj_id=self.trajs.traj[ids].copy(),
            step_count=self.trajs.steps[ids].copy(),
            policy_version=self.version[ids].copy(),
            env_seconds=env_s,
            policy_seconds=self.policy_s[ids].copy(),
            timeout=np.zeros(n, dtype=np.bool_),
            error=[text] * n,
        )
        self.trajs.restart(ids)
        return chunk

    # ------------------------------------------------------------ lock-step (mode="sync")

    async def start(self) -> None:
        """Reset every env (a fresh start for every trajectory)."""
        if self.opts.mode == "sync":
            self.cur_obs, _ = await self.pool.reset()
            self.pending = self._no_rows
        else:
            self._reset(self.all_ids)

    async def reset_all(self) -> None:
        """Cut every trajectory and reset every env (``reset_at_each_iter``); steps in flight are dropped."""
        await self.drain()
        self.trajs.restart(self.all_ids)
        await self.start()

    async def lockstep_batch(self, steps: int, *, cut_last: bool = False) -> Batch:
        """``steps`` lock-steps of every env with the policy's actions, as one ``(steps, num_envs)`` batch
        (:class:`aioenv.collect.batch.LockstepRows`; ``cut_last``: every trajectory cut after it). The rows'
        trajectory ids and step counts are worked out once for all of them (:class:`LockstepLog`), also when a step
        raises (for the steps before it, whose rows are then dropped)."""
        log = LockstepLog(self.trajs, steps, running=bool(self.opts.max_frames_per_traj))
        rows = LockstepRows(log, self.all_ids, steps)
        try:
            for _ in range(steps):
                await self._lockstep(rows)
        finally:
            self.frames += log.settle()
        return rows.batch(cut_last=cut_last)

    async def _lockstep(self, rows: LockstepRows) -> None:
        ids, runner = self.all_ids, self.runner
        t0 = time.perf_counter()
        version = -1 if self.random else runner.version  # (read before the call: an update meanwhile is the next's)
        if self.random:
            actions = self.random_actions(ids.size)
        elif runner.is_async:
            actions = await runner.acall(self.cur_obs, ids)
        else:  # a plain call: no coroutine to make and await (the common step)
            actions = runner.call(self.cur_obs, ids)
        # ours to keep, whatever the policy does with its output
        actions = np.array(actions) if isinstance(actions, np.ndarray) else _tree.tmap(np.array, actions)
        t1 = time.perf_counter()
        failed: np.ndarray | None = None
        try:
            step = await self.pool.step(actions)
        except AioEnvError as exc:
            if self.opts.on_error == "raise" or not exc.errors or -1 in exc.errors:
                raise
            step, failed = self._merge_partial(exc)
        t2 = time.perf_counter()
        valid = self._all_rows if self.pending is self._no_rows else ~self.pending  # the constant: no row left out
        if failed is not None:
            valid = valid & ~failed
        next_obs, autoreset, explicit = self._record_all(actions, step, valid, (t2 - t1, t1 - t0, version), rows)
        if failed is not None and failed.any():
            rows.log.cut(failed)
            explicit = failed if explicit is None else explicit | failed
        self.pending = autoreset
        self.cur_obs = step[0]
        if explicit is not None and explicit.any():
            if next_obs is self.cur_obs:
                self.cur_obs = _tree.tmap(np.copy, self.cur_obs)
            reset_ids = ids[explicit]
            reset_obs, _ = await self.pool.reset(env_ids=reset_ids)
            _tree.put(self.cur_obs, reset_ids, reset_obs)

    def _record_all(
        self,
        action: Any,
        step: tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]],
        valid: np.ndarray,
        times: tuple[float, float, int],
        rows: LockstepRows,
    ) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """:meth:`_record` for a lock-step of every env into ``rows``, with whole-array operations only (no row
        indexing): the step's ``next_obs`` as recorded, the rows whose env resets in its next step, and those the
        engine must reset itself (None: none). ``times``: env seconds, policy seconds and policy version, the same
        for every row."""
        o, reward, terminated, truncated, info = step
        log = rows.log
        every = valid is self._all_rows  # no row to leave out (the common step): no masking
        ended = terminated | truncated
        finals = ended if every else valid & ended
        any_final = any_end = bool(np.count_nonzero(finals))  # (ndarray.any() costs several times as much)
        next_obs = o
        if self.same_step and any_final:
            next_obs = _tree.tmap(np.copy, o)
            final_obs = info["final_obs"]
            for row in np.flatnonzero(finals):
                _tree.put_row(next_obs, int(row), final_obs[row])
        cap = self.opts.max_frames_per_traj
        ours: np.ndarray | None = None
        done = finals
        if cap:
            # as a TimeLimit (and TorchRL's StepCounter): truncated at the cap even if it also terminated there
            assert log.steps_now is not None, "a log kept step by step for a cap"
            ours = valid & (log.steps_now + 1 >= cap)
            if np.count_nonzero(ours):
                truncated = truncated | ours
                done = valid & (terminated | truncated)
                any_final = True
        env_s, pol_s, version = times
        timeout = info.get("timeout")
        log.note(valid, done, any_final, env_s, pol_s)  # (the frames too are counted once per batch)
        rows.add(
            self.cur_obs,
            action,
            (next_obs, reward, terminated, truncated),
            version,
            None if timeout is None else _flag(info, "timeout", self.all_ids),
        )
        explicit: np.ndarray | None = None
        if ours is not None:
            explicit = ours & ~ended
        if self.disabled and any_final:
            explicit = finals if explicit is None else explicit | finals
        return next_obs, finals if self.next_step and any_end else self._no_rows, explicit

    def _merge_partial(self, exc: AioEnvError) -> tuple[tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any], Any]:
        """A whole step's rows out of a failed ``pool.step``: the rows that succeeded, the others empty."""
        failed = np.zeros(self.n, dtype=np.bool_)
        failed[list(exc.errors)] = True
        obs = _tree.tmap(np.copy, self.cur_obs)
        reward = np.zeros(self.n)
        terminated = np.zeros(self.n, dtype=np.bool_)
        truncated = np.zeros(self.n, dtype=np.bool_)
        info: dict[str, Any] = {}
        if exc.partial is not None:
            p_obs, p_reward, p_term, p_trunc, p_info = exc.partial
            rows = np.asarray(p_info["env_id"], dtype=np.intp)
            _tree.put(obs, rows, p_obs)
            reward[rows], terminated[rows], truncated[rows] = p_reward, p_term, p_trunc
            info = _expand_info(p_info, rows, self.n)
        return (obs, reward, terminated, truncated, info), failed

    # ------------------------------------------------------------ first finished (mode="async")

    def _send(self, ids: np.ndarray, actions: Any, version: int, policy_s: float, again: np.ndarray) -> None:
        """Send ``actions`` for ``ids``, and in the same message the steps that only reset the envs ``again``
        (``next_step``: their last actions; the pool ignores them), as one ``pool.send``."""
        if self.cur_action is None:
            self.cur_action = _tree.empty_rows(actions, self.n)
        if again.size:
            both = _tree.tmap(lambda a, b: np.concatenate((a, b)), actions, _tree.take(self.cur_action, again))
            self.pool.send(both, np.concatenate((ids, again)))
            self.phase[again] = AUTORESET
            self.in_flight += again.size
        else:
            self.pool.send(actions, ids)
        _tree.put(self.cur_action, ids, actions)
        self.phase[ids] = STEP
        self.sent_at[ids] = time.perf_counter()
        self.version[ids] = version
        self.policy_s[ids] = policy_s
        self.in_flight += ids.size

    def _reset(self, ids: np.ndarray) -> None:
        if ids.size:
            self.pool.send_reset(ids)
            self.phase[ids] = RESET
            self.in_flight += ids.size

    def _autoreset(self, ids: np.ndarray) -> None:
        """The step that resets ``ids`` (``next_step``): their last actions again; the pool ignores them."""
        if ids.size:
            self.pool.send(_tree.take(self.cur_action, ids), ids)
            self.phase[ids] = AUTORESET
            self.in_flight += ids.size

    def _act(self, ids: np.ndarray, again: np.ndarray = _NONE) -> None:
        """Choose and send actions for ``ids`` (at random, at once, or as policy tasks); ``again``: envs whose
        next step only resets them, sent with the actions chosen at once (see :meth:`_send`)."""
        if not ids.size or (self.runner.is_async and not self.random):
            self._autoreset(again)
            if ids.size:
                self._start_policy(ids)
            return
        try:
            if self.random:
                self._send(ids, self.random_actions(ids.size), -1, 0.0, again)
                return
            t0 = time.perf_counter()
            version = self.runner.version
            actions = self.runner.call(_tree.take(self.cur_obs, ids), ids)
            self._send(ids, actions, version, time.perf_counter() - t0, again)
        except BaseException:
            if again.size and self.phase[again[0]] != AUTORESET:  # nothing was sent: the reset steps go alone
                self._autoreset(again)
            raise

    def _start_policy(self, ids: np.ndarray) -> None:
        """An async policy's calls for ``ids`` as tasks (one per env with ``per_env``)."""
        obs = _tree.take(self.cur_obs, ids)
        t0 = time.perf_counter()
        version = self.runner.version
        self.phase[ids] = POLICY
        if self.runner.per_env:
            for j in range(ids.size):
                task = self._watch(asyncio.ensure_future(self.runner.acall_one(_tree.take(obs, j), int(ids[j]))))
                self._tasks[task] = (ids[j : j + 1], t0, version)
        else:
            self._tasks[self._watch(asyncio.ensure_future(self.runner.acall(obs, ids)))] = (ids, t0, version)

    async def _recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        least = min(self.opts.min_results, self.in_flight)
        return await self.pool.recv(min_results=least, max_results=self.opts.max_results)

    def _watch(self, fut: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Have ``fut`` wake :meth:`advance` when it is done (O(1), however many calls are in flight)."""
        fut.add_done_callback(self._on_done)
        return fut

    def _on_done(self, fut: asyncio.Future[Any]) -> None:
        self._finished.append(fut)
        self._wake.set()

    async def advance(self) -> list[Chunk]:
        """Wait for the next rows that finish (or policy answers), send what follows; the chunks recorded."""
        if not self._tasks and self._recv_task is None:
            if not self.in_flight:
                raise UsageError("the collector has nothing in flight: call start() first")
            try:
                return self._on_rows(await self._recv())
            except AioEnvError as exc:
                return self._on_error(exc)
        if self.in_flight and self._recv_task is None:
            self._recv_task = self._watch(asyncio.ensure_future(self._recv()))
        while not self._finished:
            self._wake.clear()
            await self._wake.wait()
        chunks: list[Chunk] = []
        while self._finished:
            fut = self._finished.popleft()
            if fut is self._recv_task:
                self._recv_task = None
                try:
                    chunks += self._on_rows(fut.result())
                except AioEnvError as exc:
                    chunks += self._on_error(exc)
            elif fut in self._tasks:
                chunks += self._on_policy(fut)
        return chunks

    def _on_policy(self, fut: asyncio.Future[Any]) -> list[Chunk]:
        ids, t0, version = self._tasks.pop(fut)
        try:
            actions = fut.result()
        except Exception as exc:  # the user's policy: any failure is that env's failed turn
            if self.opts.on_error == "raise":
                raise
            filler = self.random_actions(ids.size)
            chunk = self._failed(ids, filler, f"policy: {_error_text(exc)}", np.zeros(ids.size))
            self._reset(ids)
            return [chunk]
        self._send(ids, actions, version, time.perf_counter() - t0, _NONE)
        return []

    def _on_error(self, exc: AioEnvError) -> list[Chunk]:
        self.in_flight -= 1
        env = exc.env_id
        if self.opts.on_error == "raise" or env is None or self.phase[env] == RESET:
            raise exc
        ids = np.array([env], dtype=np.int32)
        chunks = []
        if self.phase[env] == STEP:
            env_s = np.array([time.perf_counter() - self.sent_at[env]])
            chunks.append(self._failed(ids, _tree.take(self.cur_action, ids), f"env: {_error_text(exc)}", env_s))
        else:
            self.trajs.restart(ids)
        self._reset(ids)
        return chunks

    def _on_rows(self, step: tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]) -> list[Chunk]:
        o, reward, terminated, truncated, info = step
        ids = np.asarray(info["env_id"], dtype=np.int32)
        now = time.perf_counter()
        self.in_flight -= ids.size
        if self.cur_obs is None:
            self.cur_obs = _tree.empty_rows(o, self.n)
        stepped = self.phase[ids] == STEP
        if stepped.all():  # the common case: every row a step's, none a reset's: no rows to pick out
            rows: np.ndarray | None = None
            sids, part = ids, step
        elif stepped.any():
            rows = np.flatnonzero(stepped)
            sids = ids[rows]
            part = (_tree.take(o, rows), reward[rows], terminated[rows], truncated[rows], info)
        else:
            _tree.put(self.cur_obs, ids, o)
            self._act(ids)
            return []
        times = (now - self.sent_at[sids], self.policy_s[sids], self.version[sids])
        chunk, autoreset, explicit = self._record(sids, _tree.take(self.cur_action, sids), part, rows, times)
        _tree.put(self.cur_obs, ids, o)
        if autoreset is None and explicit is None:
            self._act(ids)
            return [chunk]
        ready = np.ones(ids.size, dtype=np.bool_)
        picked = np.arange(ids.size) if rows is None else rows
        if autoreset is not None:
            ready[picked[autoreset]] = False
        if explicit is not None:
            ready[picked[explicit]] = False
            self._reset(sids[explicit])
        self._act(ids[ready], _NONE if autoreset is None else sids[autoreset])
        return [chunk]

    async def drain(self, timeout: float = 30.0) -> None:
        """Cancel policy calls and take (and drop) every row still in flight, within ``timeout`` seconds."""
        tasks = list(self._tasks)
        self._tasks.clear()
        self._finished.clear()
        if self._recv_task is not None:
            tasks.append(self._recv_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks[: len(tasks) - (self._recv_task is not None)]:
            if not task.cancelled():
                task.exception()  # retrieved: a policy call that failed as it was being dropped is not logged
        if self._recv_task is not None:
            task, self._recv_task = self._recv_task, None
            if not task.cancelled():
                exc = task.exception()
                self.in_flight -= 1 if exc is not None else int(task.result()[4]["env_id"].size)
        deadline = time.monotonic() + timeout
        while self.in_flight > 0 and not self.pool.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                step = await self.pool.recv(min_results=self.in_flight, max_results=self.in_flight, timeout=left)
            except PoolClosed:
                break
            except AioEnvError:
                self.in_flight -= 1
                continue
            self.in_flight -= int(step[4]["env_id"].size)
        self.phase[:] = READY
        self.in_flight = 0
        self._finished.clear()

"""``aioenv.collect.Collector``: batches of transitions from a pool and a policy, as TorchRL's collectors give them."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import numpy as np

from aioenv.collect.batch import Batch, flat, padded
from aioenv.collect.chunk import Chunk
from aioenv.collect.driver import Driver
from aioenv.collect.engine import Engine
from aioenv.collect.options import Options
from aioenv.collect.policy import PolicyRunner
from aioenv.collect.tensors import available
from aioenv.errors import UsageError
from aioenv.pool import Pool
from aioenv.sync import SyncPool

__all__ = ["Collector"]


class Collector(Driver[Any]):
    """Iterate batches of transitions from ``pool`` with ``policy``.

    ``Collector(pool, policy, frames_per_batch=..., **options)``; ``async for batch in collector`` over an
    :class:`aioenv.Pool` (local or remote), ``for batch in collector`` over an :class:`aioenv.SyncPool`.
    The collector resets every env when it starts; ``aclose()``/``close()`` (or ``async with``/``with``)
    waits for the steps still in flight, so the pool can be used again afterwards.

    Args:
        pool: an :class:`aioenv.Pool` or :class:`aioenv.SyncPool` (any autoreset mode).
        policy: ``policy(obs, env_ids) -> actions`` (``obs`` ``(B, ...)``, ``env_ids`` ``(B,)`` int32, actions
            ``(B, ...)``; a one-argument function gets ``obs`` only), an ``async def`` of the same form, or a
            ``torch.nn.Module`` called as ``module(torch.as_tensor(obs))`` that returns the actions. See
            :mod:`aioenv.collect.policy`.
        frames_per_batch: frames per batch. ``mode="sync"``: rounded up to a multiple of ``num_envs``, a batch
            is ``(T, B) = (frames_per_batch / num_envs, num_envs)``; ``mode="async"``: exactly this many
            transitions.
        total_frames: stop after this many frames (the last batch may go past it); -1 or None: never stop.
        max_frames_per_traj: a trajectory that reaches this many transitions is truncated (``truncated=True``
            on its last) and its env reset, as TorchRL's ``StepCounter(max_steps)`` does.
        init_random_frames: the first batches, until this many frames, take actions sampled from the action
            space (seeded by ``seed``), not the policy (``policy_version`` -1).
        reset_at_each_iter: reset every env at the start of each batch (every trajectory is cut at the end
            of its batch; in ``async`` mode, steps in flight at that moment are dropped).
        split_trajs: yield batches split per trajectory, padded: ``(K, L)`` with ``valid`` as the mask.
        mode: ``"sync"``: every env each step, lock-step (``pool.step``). ``"async"``: the envs that finished
            first (``pool.recv``); each batch is flat, grouped by env.
        min_results: ``async`` mode: each ``recv`` waits for at least this many rows (default 1).
        max_results: ``async`` mode: each ``recv`` takes at most this many rows (default: the pool's
            ``batch_size`` or more).
        per_env: ``async`` mode: call the policy once per env, ``policy(obs_row, env_id) -> action``; an
            async policy's calls then run on their own and each action goes out as soon as it is ready.
        output: ``"numpy"`` (a :class:`Batch`) or ``"tensordict"`` (``Batch.to_tensordict()``).
        on_error: ``"raise"`` (default): a failed step raises from the iteration. ``"reset"``: the env's
            trajectory is cut, the env is reset and collection goes on.
        background: collect in the background, at most ``queue_size`` batches ahead of the consumer.
        queue_size: see ``background`` (default 2).
        seed: seeds the random actions of ``init_random_frames``.

    Attributes:
        frames: frames collected into batches so far.
        batches: batches built so far (in background mode including those waiting in the queue).
        policy_version: how many :meth:`update_policy` calls have taken effect.
    """

    def __init__(
        self,
        pool: Pool | SyncPool,
        policy: Any,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        mode: str = "sync",
        min_results: int = 1,
        max_results: int | None = None,
        per_env: bool = False,
        output: str = "numpy",
        on_error: str = "raise",
        background: bool = False,
        queue_size: int = 2,
        seed: int | None = None,
    ) -> None:
        self.opts = Options.checked(
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            split_trajs=split_trajs,
            mode=mode,
            min_results=min_results,
            max_results=max_results,
            per_env=per_env,
            output=output,
            on_error=on_error,
            background=background,
            queue_size=queue_size,
            seed=seed,
        )
        if self.opts.output == "tensordict" and not available():
            raise UsageError("output='tensordict' needs torch and tensordict installed (pip install tensordict)")
        super().__init__(pool, background=self.opts.background, queue_size=self.opts.queue_size)
        self.runner = PolicyRunner(policy, self.pool.single_action_space, per_env=self.opts.per_env)
        self.frames = 0
        self.batches = 0

    @property
    def policy_version(self) -> int:
        """How many :meth:`update_policy` calls have taken effect (batches record it per row)."""
        return self.runner.version

    def update_policy(self, weights: Any) -> None:
        """Give the policy new weights; they take effect before the next batch starts (thread-safe).

        ``weights``: a state dict for a torch module (or any policy with ``load_state_dict``), copied now;
        or a callable, which replaces the policy. In ``async`` mode, actions already sent (and, in
        background mode, batches already queued) keep the version they were chosen with: see
        ``Batch.policy_version``.
        """
        with self._lock:
            self.runner.stage(weights)

    def _steps_here(self) -> bool:
        """A lock-step pull awaits nothing but the pool's calls, unless the policy, or one staged to replace it, is
        async."""
        with self._lock:
            return self.opts.mode == "sync" and not self.runner.may_await()

    async def _produce(self) -> AsyncGenerator[Any, None]:
        opts = self.opts
        engine = Engine(self.pool, self.runner, opts)
        steps_per_batch = -(-opts.frames_per_batch // engine.n)
        await engine.start()
        carry: list[Chunk] = []
        first = True
        try:
            while self.frames < opts.total_frames:
                with self._lock:
                    self.runner.apply_staged()
                if opts.reset_at_each_iter and not first:
                    await engine.reset_all()
                    carry = []
                first = False
                engine.random = self.frames < opts.init_random_frames
                batch: Batch
                if opts.mode == "sync":
                    batch = await engine.lockstep_batch(steps_per_batch, cut_last=opts.reset_at_each_iter)
                else:
                    chunks = carry
                    have = sum(int(np.count_nonzero(c.valid)) for c in chunks)
                    while have < opts.frames_per_batch:
                        fresh = await engine.advance()
                        chunks = [*chunks, *fresh]
                        have += sum(int(np.count_nonzero(c.valid)) for c in fresh)
                    batch, carry = flat(chunks, opts.frames_per_batch, cut_last=opts.reset_at_each_iter)
                self.frames += batch.frames
                self.batches += 1
                if opts.split_trajs:
                    batch = padded(batch)
                yield batch.to_tensordict() if opts.output == "tensordict" else batch
        finally:
            await engine.drain()

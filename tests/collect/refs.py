"""References for the collector tests: gymnasium's ``SyncVectorEnv`` stepped by hand, and policies.

- :func:`replay`: a ``SyncVectorEnv`` stepped with the actions a time-major batch recorded, one row of
  the grid per step (``next_step``, ``same_step``, and ``disabled`` with the collector's resets), giving the
  transitions the batch must hold, row for row.
- :func:`reference_per_env`: a ``SyncVectorEnv`` (``same_step``) driven by an observation-only policy, split
  into each env's sequence of transitions; a collector with the same policy must give each env the same
  sequence, whatever order the envs' steps were interleaved in (``async`` mode) and however its resets went.
- :func:`per_env`: a collector's batches as each env's valid transitions, in time order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv

from aioenv._compat import AutoresetMode
from aioenv.collect import Batch

MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}
Transition = tuple[Any, Any, float, bool, bool, Any]


def cart_policy(obs: np.ndarray) -> np.ndarray:
    """CartPole actions that depend on the observation only, and look random (episodes of ~10-30 steps)."""
    return (np.floor(np.abs(obs[..., 1]) * 1e4) % 2).astype(np.int64)


def vector(n: int, mode: str, **make_kwargs: Any) -> SyncVectorEnv:
    """``n`` CartPole-v1 in a SyncVectorEnv with ``mode`` autoreset."""
    return SyncVectorEnv([lambda: gym.make("CartPole-v1", **make_kwargs)] * n, autoreset_mode=MODES[mode])


def replay(
    batches: Sequence[Batch], n: int, mode: str, seed: int, *, reset_each: bool = False, **make_kwargs: Any
) -> None:
    """Step a SyncVectorEnv with each time-major batch's actions and assert it saw exactly the batch's rows:
    obs, reward, flags and next_obs (the final observation at an episode's end), and which rows are valid."""
    env = vector(n, mode, **make_kwargs)
    obs, _ = env.reset(seed=seed)
    ended_before = np.zeros(n, dtype=bool)
    for i, batch in enumerate(batches):
        assert batch.layout == "time_major"
        if reset_each and i:
            obs, _ = env.reset()
            ended_before[:] = False
        for t in range(batch.shape[0]):
            np.testing.assert_array_equal(batch.obs[t], obs, err_msg=f"batch {i} obs row {t}")
            nxt, reward, term, trunc, info = env.step(batch.action[t])
            true_next = nxt.copy()
            if mode == "same_step":
                for e in np.flatnonzero(term | trunc):
                    true_next[e] = info["final_obs"][e]
            np.testing.assert_array_equal(batch.next_obs[t], true_next, err_msg=f"batch {i} next_obs row {t}")
            np.testing.assert_array_equal(batch.reward[t], reward)
            np.testing.assert_array_equal(batch.terminated[t], term)
            np.testing.assert_array_equal(batch.truncated[t], trunc)
            reset_row = ended_before if mode == "next_step" else np.zeros(n, dtype=bool)
            np.testing.assert_array_equal(batch.valid[t], ~reset_row, err_msg=f"batch {i} valid row {t}")
            ended_before = term | trunc
            if mode == "disabled" and ended_before.any():
                nxt, _ = env.reset(options={"reset_mask": ended_before})
            obs = nxt
    env.close()


def reference_per_env(
    policy: Callable[[np.ndarray], np.ndarray], n: int, seed: int, steps: int, **make_kwargs: Any
) -> list[list[Transition]]:
    """Each env's first transitions under ``policy`` in a ``same_step`` SyncVectorEnv (``steps`` lock-steps)."""
    env = vector(n, "same_step", **make_kwargs)
    obs, _ = env.reset(seed=seed)
    out: list[list[Transition]] = [[] for _ in range(n)]
    for _ in range(steps):
        action = policy(obs)
        nxt, reward, term, trunc, info = env.step(action)
        for e in range(n):
            true_next = info["final_obs"][e] if term[e] or trunc[e] else nxt[e]
            out[e].append((obs[e], action[e], float(reward[e]), bool(term[e]), bool(trunc[e]), true_next))
        obs = nxt
    env.close()
    return out


def per_env(batches: Sequence[Batch], n: int) -> list[list[Transition]]:
    """Each env's valid transitions across ``batches``, in time order."""
    out: list[list[Transition]] = [[] for _ in range(n)]
    for batch in batches:
        for part in batch.split():  # trajectories by ascending id: an env's later trajectories have larger ids
            e = int(part.env_id[0])
            for r in range(part.shape[0]):
                flags = (float(part.reward[r]), bool(part.terminated[r]), bool(part.truncated[r]))
                out[e].append((part.obs[r], part.action[r], *flags, part.next_obs[r]))
    return out


def assert_same_sequences(got: list[list[Transition]], want: list[list[Transition]], at_least: int) -> None:
    """Every env's collected transitions are a prefix of its reference (and at least ``at_least`` long)."""
    for e, (g, w) in enumerate(zip(got, want, strict=True)):
        assert len(g) >= at_least, f"env {e}: only {len(g)} transitions"
        assert len(g) <= len(w), f"env {e}: the reference is too short ({len(w)} < {len(g)})"
        for k, (a, b) in enumerate(zip(g, w, strict=False)):
            for name, x, y in zip(
                ("obs", "action", "reward", "terminated", "truncated", "next_obs"), a, b, strict=True
            ):
                np.testing.assert_array_equal(x, y, err_msg=f"env {e} transition {k}: {name}")


def assert_trajectories_consistent(batch: Batch) -> None:
    """Within each trajectory of ``batch``: step counts go 0, 1, ... (from its first row here), each
    next_obs is the next obs, only the last row may be done, and traj_end is set exactly where the
    trajectory stops (done, or cut by the collector) or nowhere if it goes on after the batch."""
    for part in batch.split():
        steps = part.step_count
        np.testing.assert_array_equal(steps, np.arange(steps[0], steps[0] + steps.size))
        assert len(set(part.env_id.tolist())) == 1
        np.testing.assert_array_equal(part.next_obs[:-1], part.obs[1:])
        assert not part.done[:-1].any()
        assert not part.traj_end[:-1].any()
        if part.done[-1]:
            assert part.traj_end[-1]

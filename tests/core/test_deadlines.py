"""Truncate mode's bookkeeping and the deadline timer (aioenv.core.deadlines), without workers."""

from __future__ import annotations

import asyncio

import numpy as np

from aioenv.core.deadlines import DeadlineTimer, Truncation, cancel_fields, timeout_error
from aioenv.core.scheduler import Scheduler
from aioenv.core.sinks import Part
from aioenv.errors import StepTimeout


def _obs_part(env_ids: list[int], values: list[float]) -> Part:
    ids = np.array(env_ids, dtype=np.int64)
    return Part(ids, [np.array(values, dtype=np.float32).reshape(-1, 1)])


def test_truncated_rows_carry_the_last_observation_and_failed_rows_are_not_remembered() -> None:
    trunc = Truncation(4)
    trunc.remember(_obs_part([0, 1, 2], [1.0, 2.0, 3.0]))
    failed = _obs_part([1, 3], [9.0, 9.0])
    failed.errors = {1: StepTimeout("late", env_id=3)}  # env 3's row failed: not an observation
    trunc.remember(failed)
    assert trunc.has_obs.tolist() == [True, True, True, False]
    part = trunc.part(np.array([1, 0]), {"timeout": True})
    assert part.obs is not None
    assert part.obs[0].ravel().tolist() == [9.0, 1.0]
    assert part.truncated.tolist() == [True, True]
    assert part.terminated.tolist() == [False, False]
    assert part.reward.tolist() == [0.0, 0.0]
    assert part.infos == [{"timeout": True}, {"timeout": True}]


def test_answer_truncates_envs_with_an_observation_and_fails_the_others() -> None:
    trunc = Truncation(4)
    trunc.remember(_obs_part([2], [5.0]))
    sched = Scheduler(4)
    sched.place(1)
    req = sched.open(0, "step", np.array([3, 2]), positions=np.array([7, 4]))
    out = trunc.answer(req, {"timeout": True}, lambda e: StepTimeout("late", env_id=e))
    (kept, kept_at), (failed, failed_at) = out
    assert kept.env_ids.tolist() == [2]
    assert kept_at.tolist() == [4]
    assert failed.env_ids.tolist() == [3]
    assert failed_at.tolist() == [7]
    assert failed.errors is not None
    assert failed.errors[0].env_id == 3


def test_owed_rows_are_paid_by_the_next_step_and_cleared_by_a_reset() -> None:
    trunc = Truncation(5)
    trunc.remember(_obs_part([0, 1, 2, 3], [0.0, 1.0, 2.0, 3.0]))
    # env 1's reset was lost (no truncated start), env 2's caller was told already, env 4 has no observation
    ended = trunc.owe(np.arange(5), must_reset=[np.array([1])], answered=[np.array([2])])
    assert ended.tolist() == [0, 2, 3]
    assert trunc.replaced_count == 2  # owed: envs 0 and 3
    ids, at, paid = trunc.settle("step", np.array([4, 3, 2]), np.array([10, 11, 12]))
    assert ids.tolist() == [4, 2]
    assert at is not None
    assert at.tolist() == [10, 12]
    assert paid is not None
    assert paid[0].env_ids.tolist() == [3]
    assert paid[1].tolist() == [11]
    assert paid[0].infos == [{"env_replaced": True}]
    ids, at, paid = trunc.settle("reset", np.array([0]), None)
    assert ids.tolist() == [0]
    assert at is None
    assert paid is None
    assert trunc.replaced_count == 0
    assert trunc.settle("step", np.array([0]), None)[2] is None  # the reset cleared env 0's debt


def test_cancel_fields_name_late_envs_and_the_steps_that_end_truncated() -> None:
    sched = Scheduler(4)
    sched.place(1)
    trunc = Truncation(4)
    trunc.remember(_obs_part([0], [1.0]))
    step = sched.open(0, "step", np.array([0, 1]))
    reset = sched.open(0, "reset", np.array([2]))
    cancel = sched.open(0, "cancel", np.array([], dtype=np.int64))
    assert cancel_fields([step, reset], trunc) == {"env": [0, 1, 2], "ended": [0]}
    assert cancel_fields([step, reset], None) == {"env": [0, 1, 2]}
    assert cancel_fields([cancel], trunc) is None


def test_timeout_error_says_how_the_env_is_replaced() -> None:
    assert "re-made on a restarted worker (w0.1 was stuck)" in str(
        timeout_error("step", 3, cancels=False, worker="w0.1")
    )
    err = timeout_error("reset", 2, cancels=True, worker="w0.1")
    assert err.env_id == 2
    assert "reset of env 2 overran its deadline; the env is re-made:" in str(err)


async def test_timer_fires_once_at_the_earliest_deadline() -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    timer = DeadlineTimer(loop, lambda: fired.append(loop.time()))
    now = loop.time()
    timer.arm(now + 0.2)
    timer.arm(now + 0.05)  # earlier: replaces the first
    timer.arm(now + 0.1)  # later than the one set: ignored
    timer.arm(None)
    await asyncio.sleep(0.3)
    assert len(fired) == 1
    assert now + 0.05 <= fired[0] < now + 0.2
    timer.arm(loop.time() + 0.05)
    timer.cancel()
    await asyncio.sleep(0.1)
    assert len(fired) == 1

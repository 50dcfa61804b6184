"""``LockstepLog`` (a lock-step batch's trajectory ids and step counts, worked out once per batch) against the
bookkeeping it replaced, done step by step with ``Trajectories``: the same ids, counts and state after, for any
sequence of steps (rows left out, episodes ended, steps failed), over several batches in a row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv.collect.chunk import LockstepLog, Trajectories


def step_by_step(
    trajs: Trajectories, steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The per-step bookkeeping: each row's id and count as it stood before its step (-1 unless it is a transition; a
    failed row shows its id), then the ended rows restarted, then the failed ones; and each env's count before each
    step."""
    ids, counts, before = [], [], []
    for valid, ended, failed in steps:
        before.append(trajs.steps.copy())
        ids.append(np.where(valid | failed, trajs.traj, -1))
        counts.append(np.where(valid, trajs.steps, -1))
        trajs.steps += valid
        trajs.restart(np.flatnonzero(ended))
        trajs.restart(np.flatnonzero(failed))
    return np.array(ids), np.array(counts), before


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]]:
    n = draw(st.integers(1, 6))
    out = []
    for _ in range(draw(st.integers(1, 3))):
        steps = []
        for _ in range(draw(st.integers(1, 7))):
            kind = np.array(draw(st.lists(st.sampled_from("vvvxef"), min_size=n, max_size=n)))
            # v: a transition; x: left out (a reset step); e: a transition whose episode ended; f: a failed step
            steps.append((np.isin(kind, ["v", "e"]), kind == "e", kind == "f"))
        out.append(steps)
    return n, out


@settings(max_examples=300, deadline=None)
@given(batches(), st.booleans())
def test_the_batch_gives_what_the_steps_gave_one_by_one(drawn: tuple[int, list], running: bool) -> None:
    n, all_batches = drawn
    ref, got = Trajectories(n), Trajectories(n)
    for steps in all_batches:
        want_ids, want_counts, want_before = step_by_step(ref, steps)
        log = LockstepLog(got, len(steps) + 2, running=running)  # room for more steps than it takes
        for t, (valid, ended, failed) in enumerate(steps):
            if running:  # what a cap reads before the step
                assert log.steps_now is not None
                np.testing.assert_array_equal(log.steps_now, want_before[t])
            assert log.note(valid, ended, bool(ended.any()), 0.25 * t, 0.5) == t
            if failed.any():
                log.cut(failed)
        frames = log.settle()
        assert frames == int(sum(valid.sum() for valid, _, _ in steps))
        np.testing.assert_array_equal(log.traj_id[: len(steps)], want_ids)
        np.testing.assert_array_equal(log.step_count[: len(steps)], want_counts)
        np.testing.assert_array_equal(
            log.env_seconds[: len(steps)], np.repeat(0.25 * np.arange(len(steps)), n).reshape(-1, n)
        )
        assert (log.policy_seconds[: len(steps)] == 0.5).all()
        np.testing.assert_array_equal(got.traj, ref.traj)
        np.testing.assert_array_equal(got.steps, ref.steps)
        assert got.next_id == ref.next_id
        assert log.settle() == 0  # once
        np.testing.assert_array_equal(got.traj, ref.traj)


def test_steps_kept_step_by_step_for_a_cap() -> None:
    trajs = Trajectories(3)
    trajs.steps[:] = [4, 0, 2]
    log = LockstepLog(trajs, 4, running=True)
    yes, no = np.ones(3, dtype=bool), np.zeros(3, dtype=bool)
    log.note(yes, np.array([True, False, False]), True, 0.0, 0.0)
    assert log.steps_now is not None
    assert log.steps_now.tolist() == [0, 1, 3]
    log.note(np.array([False, True, True]), no, False, 0.0, 0.0)
    log.cut(np.array([True, False, False]))
    assert log.steps_now.tolist() == [0, 2, 4]
    assert LockstepLog(trajs, 1, running=False).steps_now is None

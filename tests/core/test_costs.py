"""``executor="auto"``: the choice is pure arithmetic over a measured cost (:mod:`aioenv.core.costs`), and the
probe (:mod:`workers.probe`) measures real envs: a cheap one, one that sleeps and a coroutine one."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest

from aioenv.core import costs
from aioenv.core.coordinator import SPIN_AT_MOST
from aioenv.core.costs import (
    BUSY_MESSAGE_CPU,
    BUSY_ROUND_TRIP,
    CALL_COST,
    MESSAGE_CPU,
    MESSAGE_WORK,
    PARALLEL,
    QUEUED_MESSAGE_CPU,
    RECV_SHARE_MIN,
    ROUND_TRIP,
    SHARE_GAIN,
    SHARE_LIMIT,
    WORKER_GAIN,
    Cost,
    busy_message_cpu,
    choose,
)
from aioenv.envs.latency import AsyncSleepEnv
from workers.probe import CHUNKS, SLOW_STEPS, probe_env, robust_mean

US = 1e-6


@pytest.mark.parametrize(
    ("cost", "num_envs", "cpus", "batch_size"),
    [
        (Cost(5 * US, 5 * US), 8, 2, None),  # a batch cheaper than a round trip
        (Cost(40 * US, 40 * US), 256, 1, None),  # one usable CPU
        (Cost(5 * US, 5 * US, round_trip=150 * US, message_cpu=80 * US), 256, 4, None),  # a share would pay
        (Cost(5 * US, 5 * US), 1000, 2, 500),  # a first-finished share would pay
        (Cost(14 * US, 14 * US, round_trip=400 * US, message_cpu=250 * US), 32, 2, None),  # all here would win
    ],
    ids=["cheap-batch", "one-cpu", "lock-step-share", "recv-share", "all-here-wins"],
)
def test_by_default_no_env_runs_in_this_process(cost: Cost, num_envs: int, cpus: int, batch_size: int | None) -> None:
    """Without ``allow_in_process`` every placement that would keep envs in the caller's process goes to inline
    worker processes: as many as predict the fewest seconds per batch, one worker for a batch of a few cheap
    envs (a second would cost a message for a share no dearer than the message)."""
    here = choose(cost, num_envs, cpus, batch_size, allow_in_process=True)
    assert here.in_process > 0
    choice = choose(cost, num_envs, cpus, batch_size)
    assert (choice.executor, choice.in_process) == ("inline", 0)
    assert 1 <= choice.num_workers <= cpus
    assert "allow_in_process=True" in choice.why
    first_finished = batch_size is not None
    busy = dataclasses.replace(cost, round_trip=cost.busy_round_trip, message_cpu=cost.busy_message_cpu)
    predicted = {
        count: costs._workers_only(busy, num_envs, count, 1.0, cpus)
        if first_finished
        else costs._lockstep_seconds(cost, num_envs, count, cpus)
        for count in range(1, min(num_envs, cpus) + 1)
    }
    assert predicted[choice.num_workers] == min(predicted.values())


def test_by_default_a_few_cheap_envs_go_to_one_worker_and_many_to_every_cpu() -> None:
    cheap = Cost(10 * US, 10 * US)  # CartPole on a 2-vCPU VM, the default round trip (270 µs, 160 µs per message)
    assert (choose(cheap, 8, cpus=2).num_workers, choose(cheap, 32, cpus=2).num_workers) == (1, 2)
    assert choose(cheap, 32, cpus=2, batch_size=16).num_workers == 1  # first-finished: see below
    assert choose(cheap, 256, cpus=2).num_workers == 2
    dear = Cost(SHARE_LIMIT * 2, SHARE_LIMIT * 2)
    assert choose(dear, 32, cpus=4) == costs.Choice("inline", 4, 0, mock.ANY)  # as with allow_in_process
    assert choose(Cost(20e-3, 0.1e-3), 64, cpus=2).executor == "thread"
    assert choose(Cost(asynchronous=True), 64, cpus=2).executor == "async"


#: What the probe measured for CartPole on a 2-vCPU VM, 2026-11-30 (one probe a row, fifteen of 27 default pools
#: made one after another): step, round trip and this process's CPU per message to a waiting worker, the same to a
#: busy one, and this process's CPU per PING of a burst (µs). The two rows of 131-157 µs per busy PING are the
#: dearest two of the 27; the first of them put 128 envs with ``batch_size=64`` on one worker.
PROBED_CARTPOLE = [
    (6.2, 127.5, 99.4, 118.6, 93.3, 14.5),
    (6.2, 161.0, 128.0, 143.4, 99.6, 14.5),
    (5.9, 162.7, 114.6, 157.1, 116.7, 13.6),
    (6.1, 133.8, 99.0, 106.7, 80.5, 15.3),
    (6.1, 152.9, 107.2, 111.1, 81.7, 13.1),
    (6.0, 162.8, 118.0, 144.7, 100.8, 14.0),
    (6.2, 132.3, 97.2, 103.9, 80.4, 11.7),
    (6.2, 140.3, 105.8, 103.4, 80.8, 12.2),
    (6.1, 197.6, 124.5, 106.7, 83.9, 13.5),
    (6.0, 157.9, 110.8, 139.2, 97.3, 13.6),
    (6.6, 222.6, 170.4, 206.3, 157.1, 21.8),
    (6.0, 221.4, 160.5, 169.2, 131.6, 17.6),
    (6.1, 167.8, 115.8, 170.8, 123.3, 15.1),
    (6.1, 127.3, 97.5, 155.1, 109.4, 12.0),
    (6.0, 172.1, 117.1, 146.3, 100.3, 13.3),
]


def _probed(probed: tuple[float, ...]) -> Cost:
    """A row of :data:`PROBED_CARTPOLE` as a cost."""
    step, *rest = (value * US for value in probed)
    return Cost(step, step, False, *rest)


@pytest.mark.parametrize("probed", PROBED_CARTPOLE, ids=lambda p: f"step {p[0]} us, message {p[2]} us")
def test_on_two_cpus_cartpoles_take_the_workers_that_measured_fastest(probed: tuple[float, ...]) -> None:
    """On that VM (``benchmarks/bench_placement.py``, 2026-11-30 14:00-14:08 UTC, a pool's waits polling where a CPU
    is left to them) one worker stepped 8 lock-step CartPole envs 1.5-1.8x as fast as two, 32 with ``batch_size=16``
    1.5x and 64 with ``batch_size=32`` 1.03-1.12x; two stepped 64 and 128 lock-step 1.4x and 1.3x as fast as one,
    and 128 with ``batch_size=64`` 1.3x; 32 lock-step were even (one 0.88-1.09x of two). Priced at the busy PINGs,
    the eleventh probe here put the 128 with ``batch_size=64`` on one worker, as one make of ``make bench-goals`` did
    at 10:09 (before the pools polled)."""
    cost = _probed(probed)
    polls = SPIN_AT_MOST  # as every pool's waits poll
    assert [choose(cost, n, cpus=2, polls=polls).num_workers for n in (8, 64, 128)] == [1, 2, 2]
    first_finished = [choose(cost, n, cpus=2, batch_size=n // 2, polls=polls).num_workers for n in (8, 32, 64, 128)]
    assert first_finished == [1, 1, 1, 2]


def test_a_busy_workers_message_costs_at_most_a_queued_one_and_the_pools_work() -> None:
    """A first-finished pool's replies come while it is awake with others', as a burst's do: a busy PING's
    price, which moves from probe to probe, counts only up to a queued message's plus MESSAGE_WORK."""
    cheap = Cost(busy_message_cpu=40 * US, queued_message_cpu=14 * US)
    assert busy_message_cpu(cheap) == cheap.busy_message_cpu
    probed = [_probed(row) for row in PROBED_CARTPOLE]  # every probe of that VM: the burst's price
    assert [busy_message_cpu(cost) for cost in probed] == [cost.queued_message_cpu + MESSAGE_WORK for cost in probed]
    dear = probed[10]
    assert busy_message_cpu(Cost()) == BUSY_MESSAGE_CPU == QUEUED_MESSAGE_CPU + MESSAGE_WORK  # the estimates agree
    # What the old price decided for the dearest probe: the 128 envs on one worker.
    old = dataclasses.replace(dear, message_cpu=dear.busy_message_cpu)
    assert costs._workers_only(old, 128, 1, 1.0, 2) < costs._workers_only(old, 128, 2, 1.0, 2)
    first_finished = choose(dear, 128, cpus=2, batch_size=64)
    assert first_finished.num_workers == 2
    priced = f"{(dear.queued_message_cpu + MESSAGE_WORK) * 1e6:.0f} µs of this process per further worker's message"
    assert priced in first_finished.why  # (a user reads what decided it in describe_placement())
    assert f"{dear.queued_message_cpu * 1e6:.0f} µs of this process per further" in choose(dear, 128, cpus=2).why
    # A lock-step batch keeps pricing a waiting worker's message by its PINGs.
    assert choose(dear, 128, cpus=2).why == choose(dataclasses.replace(dear, busy_message_cpu=1.0), 128, cpus=2).why


def test_on_two_cpus_lock_step_cartpoles_take_one_worker_when_few_and_two_from_about_24() -> None:
    """Lock-step on that VM (2026-11-30, one worker and two alternated in one process, rounds of 0.25-0.3 s), two
    workers against one: 8 envs 0.77x as fast in one run and even in another, 16 0.77x, 32 0.95-1.3x, 48 and 64
    1.28-1.39x, 128 1.3-1.6x. One worker for a few envs, whose worse minute costs a second worker a quarter; two
    from 32, where one worker's worse minute costs as much."""
    workers = {n: [choose(_probed(probed), n, cpus=2).num_workers for probed in PROBED_CARTPOLE] for n in LOCK_STEP}
    assert workers[8] == [1] * 15
    assert workers[16].count(1) >= 10
    assert workers[32] == workers[48] == workers[64] == workers[128] == [2] * 15


LOCK_STEP = (8, 16, 24, 32, 48, 64, 128)


def test_a_wait_that_polls_saves_the_waiting_threads_wake_up_where_a_cpu_is_left_to_it() -> None:
    """A pool's calls poll for up to ``polls`` seconds before they sleep, where the workers leave a CPU to the
    waiting thread: half the round trip (its own wake-up) is saved then, and only then. On 2 CPUs (probes of
    2026-11-30 on that VM) 32 lock-step CartPoles stay on one worker, which polls (102k steps/s there against 80k
    on two, which do not), where they would go to two if it slept; 64 go to two either way."""
    cost = Cost(6 * US, 6 * US, False, 150 * US, 100 * US, 120 * US, 90 * US, 14 * US)
    one = costs._lockstep_seconds(cost, 32, 1, 2)
    assert costs._lockstep_seconds(cost, 32, 1, 2, polls=500 * US) == pytest.approx(one - 75 * US)
    assert costs._lockstep_seconds(cost, 32, 1, 2, polls=100 * US) == one  # a batch longer than the polling
    assert costs._lockstep_seconds(cost, 32, 2, 2, polls=500 * US) == costs._lockstep_seconds(cost, 32, 2, 2)
    assert costs._lockstep_seconds(cost, 32, 2, 4, polls=500 * US) < costs._lockstep_seconds(cost, 32, 2, 4)
    assert (choose(cost, 32, cpus=2).num_workers, choose(cost, 32, cpus=2, polls=500 * US).num_workers) == (2, 1)
    assert choose(cost, 64, cpus=2, polls=500 * US).num_workers == 2


def test_a_first_finished_recv_that_polls_saves_its_wake_up_where_a_cpu_is_left_to_it() -> None:
    """A ``recv()`` polls as a lock-step call does: one worker's pool saves half the busy round trip, each of its
    waits (a batch's share of every env's step) no longer than the polling. Measured on a 2-vCPU VM, the calls
    polling: one worker stepped 64 CartPoles with ``batch_size=32`` 1.03-1.12x as fast as two (two had been as fast
    before), 32 with ``batch_size=16`` 1.5x, 128 with ``batch_size=64`` 0.76x."""
    cost = Cost(6 * US, 6 * US, False, 150 * US, 100 * US, 120 * US, 90 * US, 14 * US)
    busy = dataclasses.replace(cost, round_trip=cost.busy_round_trip, message_cpu=costs.busy_message_cpu(cost))
    every = costs._workers_only(busy, 64, 1, 1.0, 2)
    assert costs._polled(every, busy, 1, 2, 500 * US, 0.5) == pytest.approx(every - 60 * US)
    assert costs._polled(every, busy, 1, 2, 200 * US, 0.5) == every  # its waits longer than the polling
    assert costs._polled(every, busy, 2, 2, 500 * US, 0.5) == every  # no CPU left to the waiting thread
    assert costs._polled(every, busy, 2, 4, 500 * US, 0.5) == pytest.approx(every - 60 * US)
    placed = [choose(cost, n, cpus=2, batch_size=n // 2, polls=500 * US).num_workers for n in (32, 64, 128)]
    assert placed == [1, 1, 2]
    assert choose(cost, 64, cpus=2, batch_size=32).num_workers == 2  # were the waits to sleep
    assert "64 take 444 µs on 1 worker" in choose(cost, 64, cpus=2, batch_size=32, polls=500 * US).why


def test_a_lock_step_worker_more_costs_a_queued_message_and_its_steps_overlap() -> None:
    """Each further worker of a lock-step batch costs this process one more message sent and one more reply read,
    at the price of a message among several (``queued_message_cpu``), not a wake-up of its own; with a worker on
    every usable CPU a wake-up may no longer overlap: CONTENDED of a waiting worker's message's extra. No work of
    this process counts against the workers' steps (it is done before and after them)."""
    cost = Cost(6 * US, 6 * US, False, 150 * US, 110 * US, 120 * US, 90 * US, 15 * US)
    steps = 64 * (cost.step + costs.ROW_WORK)
    assert costs._lockstep_seconds(cost, 64, 1, 4) == pytest.approx(150 * US + steps)
    assert costs._lockstep_seconds(cost, 64, 3, 4) == pytest.approx(150 * US + 2 * 15 * US + steps / (3 * PARALLEL))
    assert costs._lockstep_seconds(cost, 64, 4, 4) == pytest.approx(
        150 * US + 3 * 15 * US + costs.CONTENDED * (110 - 15) * US + steps / (4 * PARALLEL)
    )
    # 256 CartPole envs on 16 CPUs, at ~41 µs of this process per worker message (as measured there): most of the
    # CPUs, where the waiting message's price for each (the model before) kept them to a few.
    many = Cost(6 * US, 6 * US, False, 150 * US, 155 * US, 150 * US, 155 * US, 41 * US)
    assert choose(many, 256, cpus=16).num_workers >= 6
    assert choose(dataclasses.replace(many, queued_message_cpu=155 * US), 256, cpus=16).num_workers <= 4


def test_a_cpu_to_spare_leaves_the_pools_work_off_the_workers() -> None:
    """With a CPU to spare for this process, a placement's prediction is the plain one: 64 CartPoles on 4 CPUs."""
    cost = Cost(12 * US, 12 * US, False, 250 * US, 150 * US)
    for count in (1, 2, 3):
        assert costs._workers_only(cost, 64, count, PARALLEL, 4) == costs._workers_only(cost, 64, count, PARALLEL)
    assert costs._workers_only(cost, 64, 4, PARALLEL, 4) > costs._workers_only(cost, 64, 4, PARALLEL)


def test_a_batch_cheaper_than_a_round_trip_runs_in_this_process() -> None:
    choice = choose(Cost(5 * US, 5 * US), 8, cpus=2, allow_in_process=True)
    assert (choice.executor, choice.num_workers, choice.in_process) == ("in_process", 0, 8)
    assert "less than a round trip" in choice.why


def test_the_measured_round_trip_decides_not_the_estimate() -> None:
    """The same 20 µs steps: with messages as slow as on a busy VM (400 µs) 16 envs stay here; with fast
    messages (60 µs, 20 µs of this process's CPU) they are shared with a worker process."""
    slow = choose(Cost(20 * US, 20 * US, round_trip=400 * US), 16, cpus=2, allow_in_process=True)
    assert (slow.executor, slow.in_process) == ("in_process", 16)
    assert "less than a round trip (400 µs)" in slow.why
    fast = choose(Cost(20 * US, 20 * US, round_trip=60 * US, message_cpu=20 * US), 16, cpus=2, allow_in_process=True)
    assert (fast.executor, fast.num_workers) == ("inline", 1)
    assert 0 < fast.in_process < 16


def test_one_usable_cpu_keeps_every_cheap_env_here() -> None:
    choice = choose(Cost(40 * US, 40 * US), 256, cpus=1, allow_in_process=True)
    assert (choice.executor, choice.in_process) == ("in_process", 256)
    assert choice.why == "one usable CPU"


@pytest.mark.parametrize(("num_envs", "cpus"), [(256, 2), (256, 4), (1000, 8)])
def test_cheap_envs_on_several_cpus_are_shared_so_both_sides_finish_together(num_envs: int, cpus: int) -> None:
    step, trip, message = 5 * US, 150 * US, 80 * US  # messages as to a busy worker on a quiet VM
    choice = choose(Cost(step, step, round_trip=trip, message_cpu=message), num_envs, cpus, allow_in_process=True)
    assert choice.executor == "inline"
    assert choice.num_workers == cpus - 1
    assert 0 < choice.in_process < num_envs
    assert "this process shares the work" in choice.why
    # This process sends the workers' messages and steps its share; the workers step theirs after a round trip,
    # each side at PARALLEL of its speed alone; then this process reads the replies.
    half, slower = choice.num_workers * message / 2, step / PARALLEL
    here = CALL_COST + half + choice.in_process * slower
    there = trip + (num_envs - choice.in_process) * slower / choice.num_workers
    assert abs(here - there) <= slower * 2
    assert max(here, there) + half <= WORKER_GAIN * (CALL_COST + num_envs * step)


def test_a_lock_step_pool_weighs_a_waiting_worker_and_recv_a_busy_one() -> None:
    """CartPole steps of 10 µs on a 2-vCPU VM: to a worker kept busy a message costs 160 µs and 100 µs of this
    process, to one that waited for it 280 µs and 160 µs. 64 envs stepped in lock-step would pay the dearer
    message, which leaves every env here (at the busy worker's price a share would pay). With first-finished
    results a share keeps its worker busy and pays the cheaper message: 64 envs with ``batch_size=32`` share,
    where at a waiting worker's price of 300 µs of this process per message they would not. The default
    estimates are the waiting worker's above the busy one's."""
    cost = Cost(
        10 * US, 10 * US, round_trip=280 * US, message_cpu=160 * US, busy_round_trip=160 * US, busy_message_cpu=100 * US
    )
    as_if_busy = dataclasses.replace(cost, round_trip=160 * US, message_cpu=100 * US)
    lock_step = choose(cost, 64, cpus=2, allow_in_process=True)
    assert (lock_step.executor, lock_step.in_process) == ("in_process", 64)
    assert "(a round trip 280 µs, 160 µs of this process per message)" in lock_step.why
    assert 0 < choose(as_if_busy, 64, cpus=2, allow_in_process=True).in_process < 64
    first_finished = choose(
        dataclasses.replace(cost, message_cpu=300 * US), 64, cpus=2, batch_size=32, allow_in_process=True
    )
    assert (first_finished.executor, first_finished.num_workers, first_finished.in_process) == ("inline", 1, 16)
    as_if_waiting = dataclasses.replace(
        cost, busy_round_trip=280 * US, busy_message_cpu=300 * US, queued_message_cpu=250 * US
    )  # (a burst's price caps a busy PING's: busy_message_cpu)
    assert choose(as_if_waiting, 64, cpus=2, batch_size=32, allow_in_process=True).executor == "in_process"
    assert ROUND_TRIP > BUSY_ROUND_TRIP
    assert MESSAGE_CPU > BUSY_MESSAGE_CPU


def test_a_share_needs_a_smaller_predicted_gain_than_workers_alone() -> None:
    """The model underestimates what a lock-step share gains (measured: 64 CartPole envs shared with a worker
    stepped 1.16x as fast as all here, predicted 0.86x of the time), so a share must predict SHARE_GAIN of the
    all-here time, and worker processes alone still WORKER_GAIN."""
    cost = Cost(10 * US, 10 * US, round_trip=280 * US, message_cpu=160 * US)
    seconds, workers, here = costs._share(cost, 96, 2)
    all_here = CALL_COST + 96 * cost.step
    assert WORKER_GAIN * all_here < seconds <= SHARE_GAIN * all_here  # between the two bars
    choice = choose(cost, 96, cpus=2, allow_in_process=True)
    assert (choice.executor, choice.num_workers, choice.in_process) == ("inline", workers, here)
    assert "this process shares the work" in choice.why
    # first-finished results: workers alone would not clear WORKER_GAIN, a share of the other kind clears SHARE_GAIN
    busy = dataclasses.replace(cost, busy_round_trip=280 * US, busy_message_cpu=160 * US)
    assert costs._workers_only(busy, 96, 2, 1.0) > WORKER_GAIN * all_here
    recv_seconds, _, recv_here = costs._recv_share(busy, 96, 2, 48)
    assert recv_seconds <= SHARE_GAIN * all_here
    assert choose(busy, 96, cpus=2, batch_size=48, allow_in_process=True) == costs.Choice(
        "inline", 1, recv_here, mock.ANY
    )


def test_a_share_that_would_not_clearly_pay_keeps_every_env_here() -> None:
    """32 steps of 14 µs (CartPole on a slow VM), a 400 µs round trip and 250 µs of this process's CPU per
    message (as measured there): a share or two workers would save under a fifth of the batch, or nothing."""
    choice = choose(
        Cost(14 * US, 14 * US, round_trip=400 * US, message_cpu=250 * US), 32, cpus=2, allow_in_process=True
    )
    assert (choice.executor, choice.num_workers, choice.in_process) == ("in_process", 0, 32)
    assert choice.why.startswith(f"32 steps take {(CALL_COST + 32 * 14 * US) * 1e6:.0f} µs here; with worker processes")
    assert "250 µs of this process per message" in choice.why
    # The same envs with 256 of them: sharing now clearly pays.
    shared = choose(
        Cost(14 * US, 14 * US, round_trip=400 * US, message_cpu=250 * US), 256, cpus=2, allow_in_process=True
    )
    assert (shared.executor, shared.num_workers) == ("inline", 1)
    assert 0 < shared.in_process < 256


def test_first_finished_pools_share_a_quarter_of_their_envs_on_two_cpus() -> None:
    """recv() of the first 500 of 1000 rows: this process steps its share only when recv() would wait, so it
    and the worker are both kept busy, and it also does the pool's work: a quarter of the envs here on two CPUs
    (each other process takes twice this one's part), an eighth on four."""
    first_finished = choose(Cost(5 * US, 5 * US), 1000, cpus=2, batch_size=500, allow_in_process=True)
    assert (first_finished.executor, first_finished.num_workers, first_finished.in_process) == ("inline", 1, 250)
    assert first_finished.why.endswith(
        "this process shares the work; recv() returns the first 500 of 1000 rows, "
        "and steps the envs here when it would wait"
    )
    on_four = choose(Cost(5 * US, 5 * US), 1000, cpus=4, batch_size=500, allow_in_process=True)
    assert (on_four.num_workers, on_four.in_process) == (3, 125)
    # The steps and the pool's own work per batch, spread over every process (choose() hands it the busy worker's
    # message price as message_cpu).
    cost = Cost(10 * US, 10 * US, message_cpu=100 * US)
    seconds, others, here = costs._recv_share(cost, 128, 2, 64)
    assert (others, here) == (1, 32)
    assert seconds == pytest.approx((128 * 10 * US + 2 * (CALL_COST + 100 * US)) / 2)
    assert (
        choose(Cost(5 * US, 5 * US), 16, cpus=2, batch_size=4, allow_in_process=True).executor == "in_process"
    )  # no round trip pays
    # Fewer than RECV_SHARE_MIN envs are not shared: 48 steps of 17 µs in batches of 24, which the model says pay.
    small = Cost(17 * US, 17 * US, busy_message_cpu=150 * US)
    assert costs._recv_share(dataclasses.replace(small, message_cpu=150 * US), 48, 2, 24)[0] < SHARE_GAIN * (
        CALL_COST + 48 * small.step
    )
    assert choose(small, 48, cpus=2, batch_size=24, allow_in_process=True).in_process in (
        0,
        48,
    )  # workers only, or every env here
    assert (
        0
        < choose(small, RECV_SHARE_MIN, cpus=2, batch_size=RECV_SHARE_MIN // 2, allow_in_process=True).in_process
        < RECV_SHARE_MIN
    )


def test_dear_steps_run_in_worker_processes_only() -> None:
    choice = choose(Cost(SHARE_LIMIT * 2, SHARE_LIMIT * 2), 32, cpus=2)
    assert (choice.executor, choice.num_workers, choice.in_process) == ("inline", 2, 0)


def test_steps_that_mostly_wait_get_threads_and_coroutines_get_async() -> None:
    assert choose(Cost(20e-3, 0.1e-3), 64, cpus=2).executor == "thread"
    assert choose(Cost(2e-3, 1.9e-3), 64, cpus=2).executor == "inline"  # busy, not waiting
    assert choose(Cost(asynchronous=True), 1024, cpus=2).executor == "async"


class Sleepy(gym.Env[np.ndarray, int]):
    """Each step sleeps 3 ms (an env waiting on I/O)."""

    observation_space = gym.spaces.Box(-1, 1, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(0.003)
        return np.zeros(1, np.float32), 0.0, False, False, {}


def _cost(timed: dict[str, Any]) -> Cost:
    return Cost(asynchronous=True) if timed.get("async") else Cost(timed["step"], timed["cpu"])


def test_the_probe_times_real_steps() -> None:
    cheap = _cost(probe_env(lambda: gym.make("CartPole-v1"), seed=0))
    assert 0 < cheap.step < 1e-3
    assert cheap.cpu > 0
    assert not cheap.asynchronous
    sleepy = _cost(probe_env(Sleepy, seed=0))
    assert sleepy.step >= 3e-3
    assert sleepy.cpu < sleepy.step / 2
    assert choose(sleepy, 16, cpus=2).executor == "thread"
    assert probe_env(lambda: AsyncSleepEnv(mean=0.001), seed=0) == {"async": True}


def test_the_probe_env_is_closed_even_when_a_step_raises() -> None:
    closed: list[bool] = []

    class Broken(Sleepy):
        def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
            raise RuntimeError("broken step")

        def close(self) -> None:
            closed.append(True)

    with pytest.raises(RuntimeError, match="broken step"):
        probe_env(Broken, seed=0)
    assert closed == [True]


class SlowSampling(gym.spaces.Discrete):
    """Sampling an action sleeps 2 ms: the probe must not count it as the env's step."""

    def sample(self, *args: Any, **kwargs: Any) -> np.int64:  # (gymnasium 1.0's takes no probability)
        time.sleep(0.002)
        return super().sample(*args, **kwargs)


class Instant(Sleepy):
    action_space = SlowSampling(2)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_the_probe_times_the_step_not_the_sampling_of_its_action() -> None:
    timed = _cost(probe_env(Instant, seed=0))
    assert timed.step < 1e-3  # 2 ms per sample: counted, it would be over


class EveryFourth(Sleepy):
    """Every fourth step computes for 200 µs, the others return at once: a reset after a short episode."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps % 4 == 0:
            end = time.perf_counter() + 200 * US
            while time.perf_counter() < end:
                pass
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_the_probe_times_cheap_steps_in_runs_that_keep_a_dear_step_every_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cheap env's steps are timed in runs back to back, after a warm-up: the dear fourth steps count
    (a mean of at least ~50 µs, not the ~1 µs of the others), and the CPU clock (a system call, ~1 µs on a VM)
    is read around each run, not around each step."""
    made: list[EveryFourth] = []

    def factory() -> EveryFourth:
        made.append(EveryFourth())
        return made[-1]

    reads = _count_cpu_clock_reads(monkeypatch)
    timed = _cost(probe_env(factory, seed=0))
    # 200 µs every 4th step: 50 µs a step in long runs. A loaded machine makes the runs short (the warm-up's steps,
    # preempted, look dear): a run of s consecutive steps holds at least s // 4 dear ones, a mean of at least
    # 200 µs * (s // 4) / s, 28.6 µs at the least (s = 7) for any s >= 4; the cheap steps alone would be ~1 µs.
    assert timed.step >= 28 * US
    assert timed.cpu > 0
    assert made[0].steps >= 4 * CHUNKS  # runs of several steps (~80 each here; a loaded machine makes fewer)
    assert len(reads) <= 2 * (SLOW_STEPS + CHUNKS)  # one to three first steps, then each run


def _count_cpu_clock_reads(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every ``time.thread_time()`` read from now on, appended to the list returned."""
    reads: list[float] = []
    thread_time = time.thread_time

    def counted() -> float:
        reads.append(thread_time())
        return reads[-1]

    monkeypatch.setattr(time, "thread_time", counted)
    return reads


class StepClock:
    """``time.perf_counter`` for the probe, moved by an env's steps alone: no pause of a loaded machine lands in
    what the probe reads, so its verdict depends on the steps' times only."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowFirstSteps(Sleepy):
    """The first ``slow`` steps take 5 ms of :class:`StepClock` (pauses of the process: a preemption, a
    collection); the rest 2 µs."""

    slow = 1
    clock = StepClock()

    def __init__(self) -> None:
        self.steps = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        self.clock.now += 0.005 if self.steps <= self.slow else 2 * US
        return np.zeros(1, np.float32), 0.0, False, False, {}


class SlowFirstTwoSteps(SlowFirstSteps):
    slow = 2


@pytest.mark.parametrize("factory", [SlowFirstSteps, SlowFirstTwoSteps])
def test_a_slow_first_step_or_two_do_not_make_a_cheap_env_slow(
    monkeypatch: pytest.MonkeyPatch, factory: type[SlowFirstSteps]
) -> None:
    """A first step over 1 ms is followed by another before the env counts as slow, and while that one is slow
    too (a busy machine pauses the probe twice in a row) by a third: this env is cheap, and is timed in runs, not
    one step at a time for 20 ms (two clock reads a step). Two slow steps used to make it slow. The probe reads
    a :class:`StepClock` (with a real one, a loaded machine's own pause of 20 ms after the first step made this
    cheap env slow now and then)."""
    clock = StepClock()
    monkeypatch.setattr(factory, "clock", clock)
    monkeypatch.setattr(time, "perf_counter", clock)
    reads = _count_cpu_clock_reads(monkeypatch)
    timed = _cost(probe_env(factory, seed=0))
    assert timed.step == pytest.approx(2 * US)
    assert len(reads) <= 2 * (SLOW_STEPS + CHUNKS)


def test_robust_mean_keeps_periodic_dear_steps_and_drops_one_preemption() -> None:
    steps = [10 * US] * 40
    steps[::4] = [50 * US] * 10  # every 4th step is dear (a reset): the mean counts it
    assert robust_mean(steps) == pytest.approx(statistics.fmean(steps))
    preempted = [*steps]
    preempted[7] = 5e-3  # one preemption of 5 ms: a plain mean would grow 6-fold
    assert statistics.fmean(preempted) > 5 * statistics.fmean(steps)
    assert robust_mean(preempted) == pytest.approx(statistics.fmean(steps))
    assert robust_mean([3 * US]) == 3 * US
    assert robust_mean([1 * US, 3 * US]) == pytest.approx(2 * US)  # two runs of one: their median

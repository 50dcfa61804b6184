"""A Pool checks its options at the edge and keeps them as the names the wire uses (no workers started)."""

from __future__ import annotations

import re

import pytest

import aioenv
from aioenv._compat import AutoresetMode


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP),
        ("Disabled", AutoresetMode.DISABLED),
        ("next_step", AutoresetMode.NEXT_STEP),
    ],
)
def test_autoreset_mode_is_taken_by_name_or_value(given: object, stored: AutoresetMode) -> None:
    pool = aioenv.Pool("CartPole-v1", 2, autoreset_mode=given)  # type: ignore[arg-type]
    assert pool.autoreset_mode is stored
    assert pool.executor == "auto"  # decided when the pool starts
    assert pool.on_timeout == "error"


def test_an_in_process_pool_has_no_worker_process() -> None:
    pool = aioenv.Pool("CartPole-v1", 3, executor="in_process")
    assert (pool.num_workers, pool.envs_in_process) == (0, 3)
    assert "in_process=3" in repr(pool)
    assert pool.describe_placement() == "3 envs in this process"


def test_a_placement_on_workers_alone_names_its_envs_too() -> None:
    assert aioenv.Pool("CartPole-v1", 4, executor="inline", num_workers=2).describe_placement() == (
        "4 envs on 2 inline worker(s)"
    )


def test_executor_and_on_timeout_are_kept_as_given() -> None:
    pool = aioenv.Pool("CartPole-v1", 2, executor="async", on_timeout="truncate")
    assert pool.executor == "async"
    assert pool.on_timeout == "truncate"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"on_timeout": "retry"}, "on_timeout must be one of ['error', 'truncate'], got 'retry'"),
        ({"on_timeout": "truncate", "autoreset_mode": "same_step"}, "needs autoreset_mode 'next_step' or 'disabled'"),
        ({"autoreset_mode": 3}, "autoreset_mode must be one of"),
        ({"curve_keys": ("a", "b")}, "curve_keys are for a remote pool"),
        ({"endpoint": "http://x"}, "endpoint must be an aioenv server address"),
        (
            {"endpoint": "tcp://127.0.0.1:99999"},
            "port 99999 of 'tcp://127.0.0.1:99999' is out of range: a tcp port is 1-65535",
        ),
        ({"endpoint": "tcp://h:1", "curve_keys": "ab"}, "curve_keys must be (your .key_secret file"),
        ({"executor": "process"}, "executor must be one of ['inline', 'thread', 'async', 'in_process', 'auto']"),
        ({"executor": "in_process", "endpoint": "tcp://h:1"}, "a remote pool's envs run on the server's workers"),
        ({"executor": "thread", "num_workers": 0, "step_timeout": 1.0}, "step_timeout is for envs in worker proc"),
        ({"executor": "async", "num_workers": 0, "reset_timeout": 1.0}, "reset_timeout is for envs in worker proc"),
        ({"max_loop_hold": 0}, "max_loop_hold must be a positive number of seconds or None, got 0"),
        ({"executor": "in_process", "max_worker_rss": 1 << 30}, "max_worker_rss is for envs in worker processes"),
        ({"executor": "in_process", "num_workers": 2}, "num_workers is for envs in worker processes"),
    ],
)
def test_refused_options_say_why(options: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        aioenv.Pool("CartPole-v1", 2, **options)  # type: ignore[arg-type]


def test_envs_stepped_one_after_another_in_this_process_take_deadlines() -> None:
    # their env code runs on a thread of this process that a late step's recovery abandons (workers.inproc)
    pool = aioenv.Pool("CartPole-v1", 2, executor="in_process", step_timeout=1.0, reset_timeout=2.0, max_loop_hold=0.5)
    assert (pool.step_timeout, pool.reset_timeout, pool.max_loop_hold) == (1.0, 2.0, 0.5)

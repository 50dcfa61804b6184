"""A Pool checks its options at the edge and keeps them as the names the wire uses (no workers started)."""

from __future__ import annotations

import re

import pytest
from gymnasium.vector import AutoresetMode

import aioenv


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
    assert pool.executor == "inline"
    assert pool.on_timeout == "error"


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
        ({"endpoint": "tcp://h:1", "curve_keys": "ab"}, "curve_keys must be (your .key_secret file"),
    ],
)
def test_refused_options_say_why(options: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        aioenv.Pool("CartPole-v1", 2, **options)  # type: ignore[arg-type]

"""``examples/llm_trajectories.py`` run as a user runs it, at small scale: a real local aiohttp service for the
model and the tool, text envs on the ``async`` executor, an ``EpisodeCollector`` whose async policy calls the
model over HTTP. Tool requests that hang are cut by the pool's ``step_timeout``; no speed is asserted, only
counts the script's logic fixes.
"""

from __future__ import annotations

import re

import pytest

from tests.support.scripts import assert_example_refuses, run_example

pytestmark = pytest.mark.timeout(90)


def numbers(out: str, row: str) -> list[int]:
    """The integers of the printed row ``row`` (thousands separators allowed)."""
    match = re.search(rf"^{re.escape(row)}\s{{2,}}(.+)$", out, re.MULTILINE)
    assert match is not None, f"no {row!r} row in:\n{out}"
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", match.group(1)) if "." not in n]


def test_llm_trajectories_keeps_every_episode_through_hangs_and_errors() -> None:
    args = ["--episodes", "300", "--envs", "48", "--hang-prob", "0.1", "--step-timeout", "0.5"]
    proc = run_example("llm_trajectories.py", *args, "--model-error-prob", "0.05", timeout=80)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    assert "pool closed, service stopped" in out
    assert "executor='async'" in out
    assert numbers(out, "episodes")[0] == 300
    terminated, truncated, errored = numbers(out, "ended")[:3]
    assert terminated + truncated + errored == 300  # every episode ended one way
    turns = numbers(out, "turns")[0]
    assert 300 <= turns <= 300 * 8
    timeouts = numbers(out, "timeouts")
    assert timeouts[0] >= 1  # hung tool calls came back as truncated turns...
    assert truncated >= timeouts[0]  # ...each ending its episode truncated, the episode kept
    policy_errors, env_errors = numbers(out, "errors")[:2]
    assert policy_errors >= 1  # the model's HTTP 503s are recorded on their turns
    assert env_errors == 0
    assert errored == policy_errors
    completions, model_errors, tool_calls, hung = numbers(out, "service")[:4]
    assert model_errors >= policy_errors  # (a call may fail after the last episode is in)
    # Hung requests overran (a loaded machine may push a slow one past the deadline too: no bound on that)
    assert hung >= 1
    assert tool_calls >= hung
    assert completions >= 300
    assert "[timeout]" in out  # the sample: an episode with a timed-out turn, its earlier turns kept


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--envs", "0"], "--envs must be at least 1, got 0"),
        (["--max-turns", "0"], "--max-turns must be at least 1, got 0"),
        (["--model-error-prob", "1.5"], "--model-error-prob must be in [0, 1], got 1.5"),
    ],
)
def test_llm_trajectories_refuses_bad_arguments_with_a_usage_error(args: list[str], said: str) -> None:
    assert_example_refuses("llm_trajectories.py", args, said)

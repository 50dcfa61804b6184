"""The latency examples (``examples/web_env.py``, ``examples/llm_agent.py``), run as a user runs them.

Each starts a real local aiohttp service and a pool on the ``async`` executor; the tests read what
the script printed. No speed is asserted: only counts and values the scripts' logic fixes.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.scripts import assert_example_refuses, run_example

pytestmark = pytest.mark.timeout(60)

#: subprocess limit, under the pytest timeout so a hang reports the script's output
RUN_TIMEOUT = 50


def value(out: str, name: str) -> str:
    """The value printed after the row label ``name`` (at the start of a line, after spaces)."""
    match = re.search(rf"^\s*{re.escape(name)}\s{{2,}}(.+)$", out, re.MULTILINE)
    assert match is not None, f"no {name!r} row in:\n{out}"
    return match.group(1)


def number(out: str, name: str) -> float:
    """The first number of row ``name`` (thousands separators allowed)."""
    match = re.match(r"-?[\d,]*\.?\d+", value(out, name))
    assert match is not None, f"row {name!r} does not start with a number:\n{out}"
    return float(match.group(0).replace(",", ""))


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """The script's stdout, after checking it exited cleanly and closed everything."""
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "pool closed, service stopped" in proc.stdout, proc.stdout
    return proc.stdout


def test_web_env_runs_a_send_recv_loop_over_http_envs() -> None:
    out = ok(run_example("web_env.py", "--num-envs", "16", "--seconds", "1.5", "--hang-prob", "0", timeout=RUN_TIMEOUT))
    assert "executor='async'" in out
    assert value(out, "envs / workers").startswith("16 / 2"), out
    steps = number(out, "steps done")
    assert steps >= 16, out  # at least the final drain of one step per env
    assert number(out, "steps/s") > 0, out
    latency = number(out, "mean server latency")  # mean of the latencies the service drew (30 ms lognormal)
    assert 10 < latency < 100, out
    assert number(out, "fraction of ideal") > 0, out
    assert number(out, "episodes ended") > 0, out  # 5-click episodes
    assert number(out, "timeouts truncated") == 0, out
    assert value(out, "server hangs").startswith("0 of"), out


def test_web_env_hung_requests_come_back_truncated() -> None:
    # every hung request sleeps 30 s, far beyond both the step timeout and this test's limit:
    # the loop must get truncated rows instead of waiting, and shut down without waiting either
    proc = run_example(
        "web_env.py",
        *("--num-envs", "8", "--seconds", "1.5", "--hang-prob", "0.2"),
        *("--step-timeout", "0.5", "--hang-seconds", "30"),
        timeout=RUN_TIMEOUT,
    )
    out = ok(proc)
    timeouts = number(out, "timeouts truncated")
    hangs = number(out, "server hangs")
    assert hangs >= 1, out
    assert timeouts >= hangs, out  # each hung request was a step that overran: one truncated row each
    assert "info['timeout'] True" in value(out, "timeouts truncated")
    assert number(out, "steps done") > timeouts, out  # the other envs went on


def test_llm_agent_acts_on_first_finished_envs_with_a_streaming_model() -> None:
    args = ("--num-envs", "8", "--episodes", "12", "--questions", "2", "--error-rate", "0")
    out = ok(run_example("llm_agent.py", *args, timeout=RUN_TIMEOUT))
    assert "executor='async'" in out
    assert number(out, "episodes") == 12, out
    assert number(out, "steps") == 24, out
    assert number(out, "mean reward") == 2.0, out  # a model that is never wrong answers every question
    in_flight = value(out, "in flight (mean)")
    env_calls, model_calls = (float(x) for x in re.findall(r"\d+\.\d+", in_flight))
    assert env_calls > 0, out
    assert model_calls > 0, out
    assert value(out, "model").startswith("24 replies, 240 tokens streamed"), out  # 10 tokens per reply
    samples = re.findall(r"^  env \d+: '(.+?)' -> model '(.+?)' -> action '(-?\d+)' => 1$", out, re.MULTILINE)
    assert len(samples) == 3, out
    for question, reply, action in samples:
        assert "What is" in question, out
        assert reply.endswith(f"= {action}."), out


def test_llm_agent_runs_its_envs_on_its_own_loop_with_no_worker_process() -> None:
    args = ("--num-envs", "8", "--episodes", "8", "--questions", "2", "--error-rate", "0", "--num-workers", "0")
    out = ok(run_example("llm_agent.py", *args, timeout=RUN_TIMEOUT))
    assert "8 QuizEnv in this process (num_workers=0)" in out, out
    assert number(out, "episodes") == 8, out
    assert number(out, "mean reward") == 2.0, out
    assert value(out, "model").startswith("16 replies, 160 tokens streamed"), out


def test_llm_agent_wrong_answers_score_zero() -> None:
    args = ("--num-envs", "4", "--episodes", "4", "--questions", "2", "--error-rate", "1")
    out = ok(run_example("llm_agent.py", *args, timeout=RUN_TIMEOUT))
    assert number(out, "episodes") == 4, out
    assert number(out, "mean reward") == 0.0, out  # off by one every time
    assert "Wrong, it was" in out, out  # the env's feedback reaches the next observation


@pytest.mark.parametrize(
    ("name", "args", "said"),
    [
        ("web_env.py", ["--num-envs", "0"], "--num-envs must be at least 1, got 0"),
        ("web_env.py", ["--num-envs", "8", "--batch-size", "9"], "--batch-size 9 exceeds --num-envs 8"),
        ("web_env.py", ["--hang-prob", "1.5"], "--hang-prob must be in [0, 1], got 1.5"),
        ("web_env.py", ["--step-timeout", "0"], "--step-timeout and --reset-timeout must be positive"),
        ("web_env.py", ["--max-concurrency", "0"], "--max-concurrency must be at least 1, got 0"),
        ("llm_agent.py", ["--num-envs", "0"], "--num-envs must be at least 1, got 0"),
        ("llm_agent.py", ["--num-workers", "-1"], "--num-workers must be 0 (the envs in this process) or more"),
        ("llm_agent.py", ["--error-rate", "2"], "--error-rate must be in [0, 1], got 2.0"),
    ],
)
def test_latency_examples_refuse_bad_arguments_with_a_usage_error(name: str, args: list[str], said: str) -> None:
    assert_example_refuses(name, args, said)

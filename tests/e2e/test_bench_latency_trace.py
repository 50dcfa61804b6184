"""``benchmarks/latency_trace.py`` times a latency-bound ``recv()`` loop from inside its envs end to end and refuses
bad arguments; its envs (``benchmarks/timed_envs.py``) say when each step began and ended. No speed is asserted."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.support.procs import proc_table
from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_both_cases_say_where_a_step_s_time_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"AIOENV_TEST_LATENCY_TRACE={uuid.uuid4().hex}"
    monkeypatch.setenv(*token.split("="))  # in the script's environment, and its workers'
    out = tmp_path / "trace.json"
    proc = run_python("benchmarks/latency_trace.py", "--quick", "--workers", "2", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert list(figures["cases"]) == ["thread64", "async1k"]
    for name, (executor, envs, batch) in {"thread64": ("thread", 8, 4), "async1k": ("async", 32, 8)}.items():
        case = figures["cases"][name]
        assert (case["executor"], case["envs"], case["batch_size"], case["workers"]) == (executor, envs, batch, 2)
        assert case["steps"] > 0
        assert case["steps_per_s"] == pytest.approx(case["steps"] / case["seconds"], rel=1e-3)
        assert case["fraction_of_ceiling"] == pytest.approx(case["fraction_of_ideal"] / case["loop_ceiling"], 1e-3)
        assert case["cpu_us_per_step"]["pool"] > 0
        assert case["cpu_us_per_step"]["workers"] > 0
        assert case["switches_per_step"]["worker_threads"] >= case["switches_per_step"]["worker_main_threads"] > 0
        # One clock for every process: no row is handed over before its step ended, nor starts before it was sent.
        for key in ("delivery_us", "dispatch_us", "first_row_us", "last_row_us"):
            assert case[key]["n"] > 0, key
            assert 0 < case[key]["min"] <= case[key]["median"] <= case[key]["p90"], key
        assert case["first_row_us"]["n"] == case["last_row_us"]["n"]
        assert case["first_row_us"]["median"] <= case["last_row_us"]["median"]  # each send's first row <= its last
    markdown = out.with_suffix(".md").read_text()
    assert markdown == proc.stdout
    assert [line.split(":")[0] for line in markdown.splitlines() if line.startswith("| thread64") or line.startswith(
        "| async1k")] == ["| thread64", "| async1k"]  # fmt: skip
    assert not proc_table(token)  # every worker of both pools has exited


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scale", "0"], "--scale must be >= 1, --seconds > 0, --warmup >= 0: got 0, 5.0, 1.0"),
        (["--seconds", "0"], "--scale must be >= 1, --seconds > 0, --warmup >= 0: got 1, 0.0, 1.0"),
        (["--warmup", "-1"], "--scale must be >= 1, --seconds > 0, --warmup >= 0: got 1, 5.0, -1.0"),
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (["--only", "thread8"], "invalid choice: 'thread8'"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], words: str) -> None:
    proc = run_python("benchmarks/latency_trace.py", *args, timeout=60)
    assert proc.returncode == 2
    assert words in proc.stderr


def test_the_timed_envs_observe_when_their_steps_began_and_ended() -> None:
    timed = bench_module("timed_envs")
    env = timed.TimedSleepEnv(mean=0.002, sigma=0.0, cap=0.01)
    assert env.observation_space == timed.TIMES
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs, [0.0, 0.0])
    before = time.perf_counter()
    obs, *_ = env.step(0)
    after = time.perf_counter()
    assert obs.dtype == np.float64
    assert before <= obs[0] < obs[1] <= after
    assert obs[1] - obs[0] >= 0.0015  # it slept

    async def step_async() -> tuple[np.ndarray, float, float]:
        aenv = timed.TimedAsyncSleepEnv(mean=0.002, sigma=0.0, cap=0.01)
        assert aenv.observation_space == timed.TIMES
        first, _ = await aenv.reset(seed=1)
        np.testing.assert_array_equal(first, [0.0, 0.0])
        t0 = time.perf_counter()
        got, *_ = await aenv.step(0)
        return got, t0, time.perf_counter()

    got, t0, t1 = asyncio.run(step_async())
    assert t0 <= got[0] < got[1] <= t1

"""The walk of one step (``benchmarks/walk.py``) still runs end to end and counts both sides: the caller's process
(its event loop's thread, and the env thread of an in-process worker) and the worker process, whose calls only a
probe in that process can see."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.scripts import run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def _walk(*args: str) -> str:
    proc = run_python("benchmarks/walk.py", "--envs", "2", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _functions(calls: list[list[Any]]) -> set[tuple[str, str]]:
    return {(file, name) for _, file, name, _, _ in calls}


def test_walk_counts_the_worker_process() -> None:
    data = json.loads(_walk("--json"))
    rows = data["rows"]
    caller, worker = _functions(data["caller"]), _functions(data["worker"])
    assert ("aioenv/pool.py", "Pool.step") in caller
    # a lock-step step of a local inline worker is a lane step, seen in the worker process, not here
    assert ("workers/runtime.py", "Worker.on_lane_step") in worker
    assert ("workers/runtime.py", "Worker.on_lane_step") not in caller
    for side in ("caller process", "worker processes", "total"):
        assert min(rows[side].values()) > 0, side
    assert rows["total"]["calls"] == rows["caller process"]["calls"] + rows["worker processes"]["calls"]
    assert rows["worker processes"]["calls"] == sum(n for *_, n in data["worker"])


def test_walk_of_an_in_process_pool_counts_its_env_thread() -> None:
    out = _walk("--executor", "in_process", "--list")
    assert "| worker processes | 0 | 0 | 0 |" in out
    path = out.split("# caller process\n", 1)[1].splitlines()
    assert path[0] == "aioenv/pool.py:Pool.step"
    on_step = [line for line in path if line.startswith("workers/runtime.py:Worker.on_step")]
    assert len(on_step) == 1
    assert "[thread aioenv-" in on_step[0]  # the env thread, not the loop's


def test_walk_refuses_a_bad_argument() -> None:
    proc = run_python("benchmarks/walk.py", "--envs", "0", timeout=60)
    assert proc.returncode == 2
    assert "--envs must be >= 1" in proc.stderr

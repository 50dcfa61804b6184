"""The startup benchmark still runs end to end (a short smoke run; its speed is never asserted here): every way
starts, resets and closes its pools, and every cell is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test

WAYS = {"aioenv fork", "aioenv exec", "AsyncVectorEnv fork", "AsyncVectorEnv spawn", "SyncVectorEnv"}


def test_startup_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    proc = run_python("benchmarks/bench_startup.py", "--quick", "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert (data["envs"], data["pools"]) == (4, 3)
    assert set(data["results"]) == WAYS
    for way, cell in data["results"].items():
        assert cell["first_start_s"] > 0, way
        assert cell["later_start_s"] > 0, way
        assert cell["close_s"] >= 0, way
        assert (
            cell["later_start/AsyncVectorEnv_fork"]
            == cell["later_start_s"] / (data["results"]["AsyncVectorEnv fork"]["later_start_s"])
        )
    assert "| aioenv fork |" in proc.stdout


def test_startup_benchmark_refuses_a_bad_argument(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_startup.py", "--pools", "1", "--out", str(tmp_path / "x.json"), timeout=60)
    assert proc.returncode == 2
    assert "--pools must be >= 2" in proc.stderr

"""The small-pool benchmark still runs end to end (a short smoke run; its speed is never asserted here): both
executors step in lock-step next to ``SyncVectorEnv``, and every cell is written with its placement."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.support.scripts import run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_small_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "small.json"
    proc = run_python("benchmarks/bench_small.py", "--quick", "--sizes", "2,5", "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert set(data["results"]) == {"2/auto", "2/in_process", "5/auto", "5/in_process"}
    for key, cell in data["results"].items():
        assert cell["sync_us"] > 0, key
        assert cell["pool_us"] > 0, key
        assert len(cell["per_round"]) == 2, key
        assert abs(cell["ratio"] - statistics.median(cell["per_round"])) < 1e-3, key
    assert data["results"]["5/in_process"]["placement"].startswith("5 envs in this process")
    table = out.with_suffix(".md").read_text()
    assert "| n = 5 | auto |" in table
    assert "bar >= 1.0x" in table
    assert "| n = 2 | in_process |" in proc.stdout


def test_small_benchmark_refuses_bad_arguments(tmp_path: Path) -> None:
    for bad, message in (
        (["--sizes", "8,x"], "--sizes must be comma-separated integers"),
        (["--rounds", "0"], "--rounds must be >= 1"),
    ):
        proc = run_python("benchmarks/bench_small.py", *bad, "--out", str(tmp_path / "x.json"), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr

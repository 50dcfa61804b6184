"""The placement benchmark still runs end to end (a short smoke run; its speed is never asserted here): a default
pool made afresh per make, alternated with the explicit ones, each make's ratio to the best of them recorded."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_placement_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "placement.json"
    only = ["--only", "cartpole-8", "--only", "cartpole-32-sr", "--only", "cartpole-32-sync"]
    args = ["--quick", "--makes", "2", *only, "--workers", "1,2"]
    proc = run_python("benchmarks/bench_placement.py", *args, "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert set(data["results"]) == {"cartpole-8", "cartpole-32-sr", "cartpole-32-sync"}
    for name, cell in data["results"].items():
        assert len(cell["makes"]) == 2, name
        for make in cell["makes"]:
            explicit = set(make["medians"]) - {"default"}
            assert {"inline x1", "inline x2"} <= explicit, name
            assert len(explicit) in (3, 4), name  # and a thread pool, and one placed as the default if none was
            assert make["placed"] in explicit  # (an explicit pool placed as the default chose, made if need be)
            assert make["best"] == max(explicit, key=lambda k: make["medians"][k])
            assert len(make["per_round"]) == 2
            assert abs(make["measured"] - statistics.median(make["per_round"])) < 1e-3
            if make["placed"] == make["best"]:
                assert make["ratio"] == 1.0
            else:
                assert 0 < make["ratio"] < 10
            assert "inline worker(s)" in make["placement"]  # the default keeps every env out of this process
        assert cell["worst"] == min(make["ratio"] for make in cell["makes"])
    loops = {name: cell["loop"] for name, cell in data["results"].items()}
    assert loops == {"cartpole-8": "step", "cartpole-32-sr": "sendrecv", "cartpole-32-sync": "sync"}
    table = out.with_suffix(".md").read_text()
    assert "| cartpole-8 | 8 | lock-step step() |" in table
    assert "send/recv, batch 16" in table
    assert "| cartpole-32-sync | 32 | lock-step SyncPool.step |" in table
    assert "Bar: the default >= 0.9x the best explicit placement" in table


def test_placement_benchmark_refuses_bad_arguments(tmp_path: Path) -> None:
    for bad, message in (
        (["--workers", "1,x"], "--workers must be comma-separated integers"),
        (["--workers", "0,2"], "--workers must be >= 1 each"),
        (["--makes", "0"], "--makes must be >= 1"),
        (["--slice", "0"], "--slice must be > 0 seconds"),
        (["--only", "pong"], "invalid choice: 'pong'"),
    ):
        proc = run_python("benchmarks/bench_placement.py", *bad, "--out", str(tmp_path / "x.json"), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr


def test_the_explicit_worker_counts_span_the_cpus_and_never_pass_the_envs() -> None:
    worker_counts = bench_module("bench_placement").worker_counts
    assert worker_counts(2, 32) == [1, 2]
    assert worker_counts(16, 256) == [1, 2, 4, 8, 12, 16]
    assert worker_counts(16, 8) == [1, 2, 4, 8]
    assert worker_counts(1, 8) == [1]
    assert worker_counts(3, 2) == [1, 2]

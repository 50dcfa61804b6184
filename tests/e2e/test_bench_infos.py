"""The infos benchmark still runs end to end (a short smoke run; its speed is never asserted here): every path
gives gymnasium's info (the script refuses to time one that does not), and every cell is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test

PATHS = {"gymnasium", "header", "arrays", "two replies"}


def test_infos_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "infos.json"
    proc = run_python("benchmarks/bench_infos.py", "--quick", "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"ant", "atari", "llm"}
    for kind, cells in results.items():
        assert set(cells) == {"16"}, kind
        cell = cells["16"]
        if kind == "ant" and isinstance(cell, str):  # mujoco is a bench extra, not a test one
            assert cell.startswith("skipped: Ant-v5 unavailable")
            continue
        assert set(cell) >= PATHS, kind
        assert all(cell[path] > 0 for path in PATHS), cell
        assert cell["arrays/header"] == cell["arrays"] / cell["header"]
    assert "| atari | 16 |" in proc.stdout


def test_infos_benchmark_refuses_a_bad_argument(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_infos.py", "--seconds", "0", "--out", str(tmp_path / "x.json"), timeout=60)
    assert proc.returncode == 2
    assert "--seconds must be > 0" in proc.stderr

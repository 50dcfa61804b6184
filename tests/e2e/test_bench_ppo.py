"""bench_ppo's bookkeeping (its trainings take minutes and torch; `make bench-goals` runs them): the median
wall time and its ratio, each round's ratio to the DummyVecEnv run of the same round, and a learning curve
called the same only when every repeat's is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import ROOT, bench_module

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def run(wall: float, returns: list[float], threads: int = 2, placement: str = "") -> dict[str, Any]:
    return {"wall": wall, "returns": returns, "threads": threads, "placement": placement}


def test_rows_pair_each_round_with_dummy_and_check_every_curve() -> None:
    curve = [9.0, 12.0, 30.0]
    cells = {
        "dummy|default": {"runs": [run(10.0, curve), run(8.0, curve), run(12.0, curve)]},
        "aioenv-auto|default": {"runs": [run(11.0, curve, placement="here"), run(8.0, curve), run(15.0, curve)]},
        "subproc|default": {"runs": [run(20.0, curve), run(16.0, [9.0, 12.0]), run(24.0, curve)]},
    }
    rows = {r["vecenv"]: r for r in bench_module("bench_ppo").rows_of(cells)}
    auto = rows["aioenv-auto"]
    assert auto["wall_s"] == 11.0  # the median of 11, 8, 15
    assert auto["vs_dummy"] == 1.1  # over dummy's median, 10
    assert auto["walls_s"] == [11.0, 8.0, 15.0]
    assert auto["vs_dummy_rounds"] == [1.1, 1.0, 1.25]  # each over the dummy run of its own round
    assert auto["same_curve"] is True
    assert auto["placement"] == "here"
    assert auto["episodes"] == 3
    assert rows["subproc"]["same_curve"] is False  # one repeat of three trained differently
    assert rows["dummy"]["vs_dummy_rounds"] == [1.0, 1.0, 1.0]


def test_a_training_leaves_no_directory_behind(tmp_path: Path) -> None:
    """SB3's default logger makes a directory in the temporary directory for every model trained (with nothing in
    it at verbose=0); bench_ppo's trainings log nowhere, so a goals run leaves none of them behind."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "benchmarks/bench_ppo.py", "--child", "dummy", "--timesteps", "256", "--num-envs", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["wall"] > 0
    assert not list(tmp_path.glob("SB3-*"))

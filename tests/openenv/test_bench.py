"""benchmarks/bench_openenv.py runs end to end: both servers hold every session and answer every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.procs import HANG
from tests.support.scripts import ROOT

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_the_sessions_benchmark_holds_every_session_on_both_servers() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_openenv.py",
            "--sessions",
            "8",
            "--delay",
            "0.2",
            "--seconds",
            "1",
            "--quick",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=HANG * 4,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    cells = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {c["server"] for c in cells} == {"aioenv", "openenv"}
    for cell in cells:
        assert cell["held"] == 8, cell
        assert cell["steps_failed"] == 0, cell
        assert cell["success"] == 1.0, cell
        assert cell["steps_answered"] >= 8, cell
        assert cell["added_ms"]["p50"] is not None, cell

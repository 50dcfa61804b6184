"""The benchmark scripts still run (short smoke runs; speed itself is never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_core_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_core.py",
            "--quick",
            "--only",
            "cartpole-32",
            "--only",
            "startup",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    cells = result["workloads"]["cartpole-32"]
    for impl in ("sync", "async", "aioenv_step", "aioenv_sendrecv"):
        assert cells[impl]["status"] == "ok" and cells[impl]["steps_per_s"] > 0, (impl, cells[impl])
    assert set(cells["ratios"]) == {"aioenv_step/sync", "aioenv_step/async", "aioenv_sendrecv/sync"}
    assert result["startup"]["aioenv"]["status"] == "ok" and result["startup"]["aioenv"]["seconds"] > 0
    assert (tmp_path / "core.md").read_text().startswith("`")

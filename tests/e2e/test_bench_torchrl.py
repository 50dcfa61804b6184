"""The TorchRL benchmark still runs end to end (a short smoke run of one cell; speed is never asserted here),
and its rounds, ratios and goal are computed from the cells' figures as documented."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def _bench_torchrl() -> Any:
    """``benchmarks/bench_torchrl.py`` loaded from its file (it imports torch only inside a cell)."""
    return bench_module("bench_torchrl")


def test_torchrl_benchmark_smoke(tmp_path: Path) -> None:
    proc = run_python(
        "benchmarks/bench_torchrl.py",
        *("--only", "aioenv", "--seconds", "0.2", "--repeats", "1", "--frames-per-batch", "128"),
        *("--out", str(tmp_path)),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "torchrl.json").read_text())
    assert result["errors"] == {}
    assert result["cells"] == ["aioenv"]
    assert result["frames_per_s"]["aioenv"] > 0
    assert result["samples"]["aioenv"] == [result["frames_per_s"]["aioenv"]]
    assert result["notes"]["aioenv"]  # where the pool put its envs
    assert result["versions"]["torchrl"].startswith("0.14")
    markdown = (tmp_path / "torchrl.md").read_text()
    assert markdown.startswith("`")
    assert "| env under the collector | frames/s |" in markdown


def test_rounds_ratios_and_goal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench_torchrl()
    rates = {"aioenv": [30.0, 10.0, 20.0], "aioenv inline": [6.0, 6.0, 6.0], "serial": [10.0, 10.0, 5.0]}
    order: list[str] = []

    def fake_spawn(cell: str, seconds: float, frames_per_batch: int) -> dict[str, Any]:
        if cell == "parallel":
            raise RuntimeError("cell 'parallel' exited with code 1: boom")
        order.append(cell)
        return {"frames_per_s": rates[cell][sum(c == cell for c in order) - 1], "batches": 1, "note": ""}

    monkeypatch.setattr(bench, "spawn_cell", fake_spawn)
    result = bench.run(0.1, 3, 64, list(bench.CELLS))
    capsys.readouterr()
    # rounds start at the next cell each time; a failed cell is not run again
    assert order == [
        *("aioenv", "aioenv inline", "serial"),
        *("aioenv inline", "serial", "aioenv"),
        *("serial", "aioenv", "aioenv inline"),
    ]
    assert list(result["errors"]) == ["parallel"]
    assert result["frames_per_s"] == {"aioenv": 20.0, "aioenv inline": 6.0, "serial": 10.0}
    # a ratio is the median over rounds of the ratio within a round: 3, 1, 4 -> 3 (not 20 / 10)
    assert result["ratios"] == {"aioenv / serial": 3.0, "aioenv inline / serial": 0.6}  # 0.6, 0.6, 1.2
    assert result["target"] == {
        "goal": "aioenv >= max(serial, parallel)",
        "aioenv": 20.0,
        "best_torchrl": 10.0,
        "met": True,
    }

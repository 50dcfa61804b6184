"""The benchmark scripts still run (short smoke runs; speed itself is never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_adapter_benchmark_pairs_ratios_within_rounds_and_rotates_cells(monkeypatch: Any) -> None:
    """Pure bookkeeping of bench_adapters.run (fake cells): each round starts at the next cell, and a ratio
    is the median of within-round ratios, so a machine that slows down for a while does not skew it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_adapters", ROOT / "benchmarks" / "bench_adapters.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    base = {"Pool.step (async core)": 100.0, "SyncPool.step": 90.0, "AioVectorEnv.step": 80.0}
    names = list(base)
    order: list[str] = []
    # The machine halves its speed during round 2 (before its last cell, Pool.step) and stays slow: that
    # round's ratios are skewed, the median over rounds is not (a ratio of medians would be: 90 / 50).
    speeds = [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5]

    def fake(name: str) -> Any:
        def cell(n: int, seconds: float) -> float:
            order.append(name)
            return base[name] * speeds[len(order) - 1]

        return cell

    monkeypatch.setattr(bench, "CELLS", {name: fake(name) for name in names})
    result = bench.run(32, 0.0, 3)
    assert order == names + names[1:] + names[:1] + names[2:] + names[:2]
    assert result["ratios"]["SyncPool.step / Pool.step"] == 0.9
    assert result["ratios"]["AioVectorEnv.step / Pool.step"] == 0.8
    assert "AioVecEnv.step (SB3) / Pool.step" not in result["ratios"]  # its cells did not run
    assert result["steps_per_s"]["Pool.step (async core)"] == 50.0  # median of 100, 50, 50

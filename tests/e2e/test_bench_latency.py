"""The latency benchmark still runs end to end (a short smoke run; its speed bars are never asserted here)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.scripts import run_python

SECTIONS = {"thread64", "async1k", "async10k"}


def test_latency_benchmark_smoke(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_latency.py", "--quick", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "latency.json").read_text())
    assert set(result["sections"]) == SECTIONS
    assert "AsyncVectorEnv" in result["sections"]["thread64"]["cells"]
    for name, section in result["sections"].items():
        assert section["params"]["ideal_steps_per_s"] > 0, name
        for key, cell in section["cells"].items():
            where = f"{name}/{key}"
            assert cell["status"] == "ok", (where, cell["status"])
            assert cell["steps_per_s"] > 0, where
            assert 0 < cell["fraction_of_ideal"] <= 1.2, (where, cell["fraction_of_ideal"])
            assert 0 < cell["loop_ceiling"] <= 1.2, (where, cell["loop_ceiling"])
            assert cell["leftover_processes"] == [], where  # every pool and vector env cleaned up after itself
    cell = result["sections"]["async10k"]["cells"]["any"]
    assert cell["startup_s"]["total"] > 0
    assert cell["memory"]["rss_bytes"] > 0
    assert cell["memory"]["processes"] >= 2
    assert {b["name"].rpartition(": ")[2] for b in result["bars"]} == {
        "of ideal",
        "aioenv / AsyncVectorEnv",
        "process tree RSS",
    }
    assert all(b["met"] in (True, False) for b in result["bars"])
    markdown = (tmp_path / "latency.md").read_text()
    assert markdown.startswith("`")
    assert "| bar |" in markdown

"""``benchmarks/bench_collect.py`` still runs (a short smoke run of its memory workload, and its bookkeeping on
fake cells; speed is never asserted here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import bench_module, run_python

pytestmark = [pytest.mark.bench, pytest.mark.timeout(90)]


def bench() -> Any:
    return bench_module("bench_collect")


def test_memory_workload_smoke(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_collect.py", "--quick", "--only", "memory", "--out", str(tmp_path), timeout=80)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "collect.json").read_text())
    cell = result["workloads"]["memory"]["rounds"][0]["aioenv"]
    assert cell["frames"] > 0
    assert cell["rss_after_warmup_mib"] > 0
    assert cell["growth_mib"] == pytest.approx(cell["rss_end_mib"] - cell["rss_after_warmup_mib"], abs=1e-6)
    (goal,) = result["goals"]
    assert goal["met"] is (goal["value"] < goal["threshold"])
    assert (tmp_path / "collect.md").read_text().startswith("`")


def test_rounds_rotate_and_ratios_pair_within_a_round(monkeypatch: Any) -> None:
    module = bench()
    order: list[str] = []
    base = {"aioenv": 100.0, "torchrl serial": 10.0, "torchrl parallel": 20.0, "hand loop": 125.0}
    base |= {"aioenv async": 90.0, "hand loop async": 90.0}
    cpu = {"aioenv": 30.0, "hand loop": 25.0, "aioenv async": 40.0, "hand loop async": 50.0}
    speeds = iter([1.0] * len(base) + [0.5] * 2 * len(base))  # the machine slows down during round 2

    def fake(workload: str, cell: str, seconds: float) -> dict[str, Any]:
        order.append(cell)
        speed = next(speeds)
        out = {"value": base[cell] * speed}
        if cell in cpu:
            out["cpu_us_per_frame"] = cpu[cell] / speed
        return out

    monkeypatch.setattr(module, "spawn", fake)
    out = module.run_workload("cartpole", 1.0, 3)
    cells = list(module.WORKLOADS["cartpole"])
    assert set(cells) == set(base)
    assert order == cells + cells[1:] + cells[:1] + cells[2:] + cells[:2]
    assert out["ratios"]["aioenv / torchrl serial"] == pytest.approx(10.0)
    assert out["ratios"]["aioenv / torchrl parallel"] == pytest.approx(5.0)
    assert out["ratios"]["aioenv / hand loop"] == pytest.approx(0.8)
    assert out["ratios"]["aioenv async / hand loop async"] == pytest.approx(1.0)
    assert out["cpu_ratios"]["aioenv / hand loop"] == pytest.approx(1.2)
    assert out["cpu_ratios"]["aioenv async / hand loop async"] == pytest.approx(0.8)
    assert out["cpu_us_per_frame"]["aioenv"] == 60.0  # median of 30, 60, 60
    assert "torchrl serial" not in out["cpu_us_per_frame"]
    assert out["values"]["aioenv"] == 50.0  # median of 100, 50, 50
    result = {"workloads": {"cartpole": out}}
    torchrl, hand, hand_async = module.goals(result)
    assert torchrl["value"] == pytest.approx(50.0 / 10.0)  # against the faster TorchRL setup (medians 10, 5)
    assert hand["value"] == pytest.approx(0.8)
    assert hand["threshold"] == 0.95
    assert hand["met"] is False
    assert hand_async["value"] == pytest.approx(1.0)
    assert hand_async["met"] is True
    result |= {"command": "now", "date": "d", "seconds": 1.0, "repeats": 3, "cpus": 2, "goals": [torchrl, hand]}
    result["versions"] = {"python": "3", "torch": "t", "torchrl": "r", "gymnasium": "g"}
    markdown = module.to_markdown(result)
    assert "| cell | frames/s | this process's CPU µs per frame |" in markdown
    assert "| aioenv / hand loop | 0.80x | 1.20x |" in markdown  # rate, then CPU per frame
    assert "| aioenv / torchrl serial | 10.00x | - |" in markdown  # TorchRL's cells give no CPU figure


@pytest.mark.parametrize("cell", ["hand loop", "hand loop async"])
def test_the_hand_loop_cells_step_the_pool(cell: str) -> None:
    proc = run_python("benchmarks/bench_collect.py", "--cell", f"cartpole/{cell}", "--seconds", "0.3", timeout=80)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["batches"] >= 1
    if cell == "hand loop":
        assert out["frames"] == out["batches"] * 1024
    else:  # at least 1,024 transitions a batch (the last recv may go past it)
        assert out["batches"] * 1024 <= out["frames"] < out["batches"] * (1024 + 32)
    assert out["value"] == pytest.approx(out["frames"] / out["seconds"])
    assert out["cpu_us_per_frame"] > 0
    assert out["note"] == "32 envs on 2 inline worker(s)"  # the placement every aioenv cell gets


def test_the_batch_aware_ideal() -> None:
    module = bench()
    ideal = module.LATENCY_ENVS / module.LATENCY["mean"]
    assert module.batch_aware_ideal(1.0) == pytest.approx(ideal)
    n = module.LATENCY_ENVS
    assert module.batch_aware_ideal(n) == pytest.approx(ideal / (1 + (n - 1) / (2 * n)))


def test_a_run_of_one_workload_keeps_the_others_figures_with_their_source(tmp_path: Path) -> None:
    module = bench()

    def workload(value: float) -> dict[str, Any]:
        return {"cells": ["aioenv"], "values": {"aioenv": value}, "ratios": {}, "rounds": [], "errors": {}}

    first = {"workloads": {"latency": workload(1.0), "memory": workload(0.5), "cartpole": workload(9.0)}}
    first |= {"command": "python benchmarks/bench_collect.py", "date": "2026-01-01T00:00:00Z"}
    previous = tmp_path / "collect.json"
    previous.write_text(json.dumps(first))
    result: dict[str, Any] = {"workloads": {"cartpole": workload(20.0)}}
    module.carry_over(result, previous)
    assert result["workloads"]["cartpole"]["values"] == {"aioenv": 20.0}  # this run's own
    assert result["workloads"]["latency"] == first["workloads"]["latency"]
    source = {"command": "python benchmarks/bench_collect.py", "date": "2026-01-01T00:00:00Z"}
    assert result["carried"] == {"latency": source, "memory": source}
    # carried again by a later run: still the run that measured it
    previous.write_text(json.dumps(result | {"command": "later", "date": "2026-02-01T00:00:00Z"}))
    again: dict[str, Any] = {"workloads": {"cartpole": workload(21.0)}}
    module.carry_over(again, previous)
    assert again["carried"]["latency"] == source
    again |= {"command": "now", "date": "d", "seconds": 1.0, "repeats": 1, "cpus": 2, "goals": []}
    again["versions"] = {"python": "3", "torch": "t", "torchrl": "r", "gymnasium": "g"}
    markdown = module.to_markdown(again)
    assert "**latency** (carried over from `python benchmarks/bench_collect.py`, 2026-01-01T00:00:00Z)" in markdown
    assert "**cartpole**\n" in markdown
    module.carry_over(fresh := {"workloads": {}}, tmp_path / "absent.json")  # nothing there: nothing carried
    assert fresh == {"workloads": {}}


def test_the_alternated_workload_pairs_the_collector_with_its_hand_loop_in_one_process(tmp_path: Path) -> None:
    proc = run_python(
        "benchmarks/bench_collect.py", "--quick", "--only", "alternated", "--out", str(tmp_path), timeout=85
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "collect.json").read_text())
    w = result["workloads"]["alternated"]
    for cell in ("sync", "async"):
        (rnd,) = [r[cell] for r in w["rounds"]]
        assert rnd["slices"] == 2  # --quick: 1 s, two rounds of a slice each side
        low, high = rnd["quartiles"]
        assert 0 < low <= rnd["value"] <= high  # the median between its quartiles
        assert rnd["cpu_ratio"] > 0
        assert w["values"][cell] == rnd["value"]
    goals = {g["goal"]: g for g in result["goals"]}
    sync = goals["alternated: aioenv >= 0.95x its hand loop in one process"]
    assert sync["value"] == w["values"]["sync"]
    assert sync["met"] is (sync["value"] >= 0.95)
    assert "alternated: aioenv async >= 0.95x its hand loop in one process" in goals
    markdown = (tmp_path / "collect.md").read_text()
    assert f"| {w['values']['sync']:.3f}x (" in markdown

"""The latency benchmark still runs end to end (a short smoke run; its speed bars are never asserted here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test

SECTIONS = {"thread64", "async1k", "async10k"}


def test_latency_benchmark_smoke(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_latency.py", "--quick", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "latency.json").read_text())
    assert set(result["sections"]) == SECTIONS
    assert "AsyncVectorEnv" in result["sections"]["thread64"]["cells"]
    for name in ("thread64", "async1k"):  # the envs stepped alone, and every aioenv loop measured against them
        section = result["sections"][name]
        alone = section["cells"]["the envs alone, no pool"]
        assert alone["num_workers"] == 0
        loops = set(section["params"]["loops"])
        assert set(section["versus_alone"]) == loops
        for loop, figures in section["versus_alone"].items():
            rate = section["cells"][loop]["steps_per_s"] / alone["steps_per_s"]
            assert figures["of_alone"] == pytest.approx(rate, rel=1e-3)
            extra = section["cells"][loop]["cpu"]["us_per_step"] - alone["cpu"]["us_per_step"]
            assert figures["extra_us_per_step"] == pytest.approx(extra, rel=1e-2, abs=0.1)
    assert "versus_alone" not in result["sections"]["async10k"]
    # one batch loop of the thread and 1k-async cases again over bare pipes, with no pool: the same envs (on
    # threads, as coroutines), loop and workers
    for name, loop in (("thread64", "batch:4"), ("async1k", "batch:16")):
        section = result["sections"][name]
        bare = section["cells"]["no pool, the same loop over bare pipes"]
        assert bare["of_loop"] == loop
        assert bare["rows_per_recv"] == pytest.approx(section["cells"][loop]["rows_per_recv"])
        assert bare["num_workers"] == section["cells"][loop]["num_workers"] >= 1
        assert bare["loop_ceiling"] == section["cells"][loop]["loop_ceiling"]
        assert bare["cpu"]["workers"] > 0  # the envs ran in worker processes
        assert "no pool, the same loop over bare pipes" not in section["versus_alone"]
    assert result["sections"]["async1k"]["best_loop"] in result["sections"]["async1k"]["params"]["loops"]
    for name, section in result["sections"].items():
        params = section["params"]
        # the ideal is what the envs' mean latency allows: every env answering once per mean
        assert params["ideal_steps_per_s"] == pytest.approx(params["num_envs"] / params["mean"], rel=1e-6)
        for key, cell in section["cells"].items():
            _check_cell(f"{name}/{key}", cell, params["ideal_steps_per_s"])
    cell = result["sections"]["async10k"]["cells"]["any"]
    assert cell["startup_s"]["total"] > 0
    assert cell["memory"]["rss_bytes"] > 0
    assert cell["memory"]["processes"] >= 2
    assert {b["name"].rpartition(": ")[2] for b in result["bars"]} == {
        "of ideal",
        "of loop ceiling",
        "aioenv / AsyncVectorEnv",
        "process tree RSS",
    }
    # every loop of the thread and 1k-async cases is held to what it allows (its batch-aware ceiling)
    ceilings = [b for b in result["bars"] if b["name"].endswith("of loop ceiling")]
    loops = [*result["sections"]["thread64"]["params"]["loops"][:1], *result["sections"]["async1k"]["params"]["loops"]]
    assert len(ceilings) == len(loops)
    for bar in result["bars"]:  # "met" is the bar's own comparison, not a free flag
        compare = {">=": float.__ge__, "<": float.__lt__}[bar["op"]]
        assert bar["met"] is compare(float(bar["value"]), float(bar["threshold"])), bar
    markdown = (tmp_path / "latency.md").read_text()
    assert markdown.startswith("`")
    assert "| bar |" in markdown
    assert "steps/s of the envs alone" in markdown


def _check_cell(where: str, cell: dict[str, object], ideal: float) -> None:
    """A measured cell: its rate is its steps over its seconds, its fraction is that rate over the ideal."""
    assert cell["status"] == "ok", (where, cell["status"])
    assert cell["leftover_processes"] == [], where  # every pool and vector env cleaned up after itself
    steps, seconds, rate = cell["steps"], cell["seconds"], cell["steps_per_s"]
    assert isinstance(steps, int)
    assert isinstance(seconds, float)
    assert isinstance(rate, float)
    assert steps > 0, where
    assert rate == pytest.approx(steps / seconds, rel=1e-3), where
    fraction = cell["fraction_of_ideal"]
    assert isinstance(fraction, float)
    assert fraction == pytest.approx(rate / ideal, rel=1e-3), where
    assert 0 < fraction <= 1.2, (where, fraction)  # a short window may run a little past the ideal
    assert 0 < cell["loop_ceiling"] <= 1.2, (where, cell["loop_ceiling"])  # type: ignore[operator]


def test_latency_benchmark_sets_and_records_the_gc_threshold(tmp_path: Path) -> None:
    """``--gc-threshold``: the collector's first threshold in the benchmark's process, in its results and header."""
    args = ("--quick", "--only", "async1k", "--loops", "any@here", "--gc-threshold", "5000", "--out", str(tmp_path))
    proc = run_python("benchmarks/bench_latency.py", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "latency.json").read_text())
    assert result["settings"]["gc_threshold"] == 5000
    assert result["command"].endswith("benchmarks/bench_latency.py " + " ".join(args[:-2]))  # all but --out
    assert set(result["sections"]["async1k"]["params"]["loops"]) == {"any@here"}
    # --loops left out the loop the bare-pipe cell runs (batch:16 here): no such cell, nothing to compare it with
    assert set(result["sections"]["async1k"]["cells"]) == {"the envs alone, no pool", "any@here"}
    assert ", gc threshold 5000 in this process" in (tmp_path / "latency.md").read_text()


def test_bare_loop_worker_run_by_hand_says_what_runs_it() -> None:
    proc = run_python("benchmarks/bare_loop.py", timeout=60)
    assert proc.returncode == 1
    assert "bench_latency.py --only thread64" in proc.stderr


def test_bare_loop_names_its_executors() -> None:
    with pytest.raises(ValueError, match=r"executor must be one of \('thread', 'async'\), got 'process'"):
        bench_module("bare_loop").BareLoop(8, 4, 2, {}, "process")
    # its worker process refuses it too, before it touches the descriptor it was given
    proc = run_python("benchmarks/bare_loop.py", "--fd", "99", "--ids", "[]", "--env-kwargs", "{}", "--executor", "x")
    assert proc.returncode == 2
    assert "invalid choice: 'x' (choose from 'thread', 'async')" in proc.stderr

"""The many-core script still runs every step end to end (its smallest sizes; no speed is asserted here), gathers
what each benchmark wrote into its two files, and keeps to its budget."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_many_core_quick_runs_every_step_into_two_files(tmp_path: Path) -> None:
    proc = run_python("benchmarks/many_core.py", "--quick", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many_core.json", "many_core.md"]
    data = json.loads((tmp_path / "many_core.json").read_text())
    assert data["hot_path"] == "compiled (aioenv/_speedups.c, built already)"  # (this tree's build)
    steps = data["steps"]
    assert list(steps) == [
        *("core", "latency", "latency-x8", "remote", "placement", "adapters", "adapters-ant", "lockstep-bare"),
        *("cost-shapes", "latency-trace"),
    ]
    for name, record in steps.items():
        assert record["returncode"] == 0, name
        assert record["results"], name  # the JSON its benchmark wrote
        assert record["markdown"].strip(), name
    assert steps["core"]["results"]["workloads"]["cartpole-32"]["aioenv_sendrecv"]["steps_per_s"] > 0
    # --scale 2 doubles the quick cases' envs and their loops' batches
    sections = steps["latency-x8"]["results"]["sections"]
    assert sections["async1k"]["params"]["num_envs"] == 256
    assert sections["async1k"]["params"]["loops"] == ["batch:16"]
    assert sections["thread64"]["params"]["num_envs"] == 32
    assert sections["thread64"]["params"]["loops"][0] == "batch:8"
    assert sections["thread64"]["params"]["peer"] is False  # no process per env
    assert steps["adapters-ant"]["results"]["env_id"] == "Ant-v5"
    bare = steps["lockstep-bare"]["results"]  # the driving process's CPU per message, each way, under load
    assert (bare["workers"], bare["cartpole"]) == (4, 2)
    assert bare["shared"]["messages_per_batch"] == 4
    assert bare["shared"]["cpu_us_per_message"] > 0
    assert "| shared |" in steps["lockstep-bare"]["markdown"]
    shapes = steps["cost-shapes"]["results"]["variants"]  # the pool's CPU per message for each stand-in
    assert shapes["ant-shape+infos"]["step"]["cpu_us_per_message"] > 0
    assert shapes["CartPole-v1"]["send/recv"]["vs_cartpole"] == 1.0
    traced = steps["latency-trace"]["results"]["cases"]  # where a latency-bound step's time goes, from its envs
    assert (traced["thread64"]["envs"], traced["async1k"]["envs"]) == (8, 32)
    assert traced["thread64"]["last_row_us"]["n"] > 0
    markdown = (tmp_path / "many_core.md").read_text()
    for name in steps:
        assert f"## {name}\n" in markdown


def test_a_step_the_budget_cannot_fit_is_not_run_and_says_why(tmp_path: Path) -> None:
    proc = run_python("benchmarks/many_core.py", "--quick", "--only", "core", "--budget", "5", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "steps that did not complete: core" in proc.stderr
    record = json.loads((tmp_path / "many_core.json").read_text())["steps"]["core"]
    assert record["why"].startswith("not run: 5 s of the budget left, it takes up to 120 s")
    assert "returncode" not in record


def test_many_core_refuses_bad_arguments(tmp_path: Path) -> None:
    for bad, message in ((["--budget", "0"], "--budget must be positive"), (["--only", "gpu"], "invalid choice")):
        proc = run_python("benchmarks/many_core.py", *bad, "--out", str(tmp_path), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr


def test_scaled_latency_cases_keep_each_loop_at_its_share_of_the_envs() -> None:
    latency = bench_module("bench_latency")
    args = latency.parse_args(["--scale", "8"])
    cases = latency.build_cases(args)
    assert cases["thread64"].num_envs == 512
    assert cases["thread64"].loops == ("batch:128", "any", "batch:128@here", "any@here")
    assert cases["thread64"].bare == "batch:128"
    assert cases["async1k"].num_envs == 8192
    assert cases["async1k"].loops == ("batch:512", "batch:2048", "any")
    assert cases["async10k"].num_envs == 10_000  # not scaled
    unscaled = latency.build_cases(latency.parse_args([]))
    assert unscaled["async1k"].num_envs == 1024
    assert unscaled["thread64"].peer


def test_the_many_core_workloads_run_only_when_named() -> None:
    core = bench_module("bench_core")
    assert set(core.MANY_CORES) <= set(core.WORKLOADS)
    assert not set(core.MANY_CORES) & set(core.DEFAULT_SECTIONS)
    assert core.WORKLOADS["cartpole-256"] == ("CartPole-v1", 256)
    placement = bench_module("bench_placement")
    assert placement.parse_args([]).only == [w for w in placement.WORKLOADS if w not in placement.MANY_CORES]
    assert placement.parse_args(["--only", "ant-128"]).only == ["ant-128"]


def test_a_step_that_overruns_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    many_core = bench_module("many_core")
    script = tmp_path / "sleeper.py"
    pidfile = tmp_path / "child.pid"
    script.write_text(
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    step = many_core.Step("sleeper", many_core.Source(str(script), "x.json"), 1.0, 1.0)
    record = many_core.run_step(step, False, tmp_path, 3.0)
    assert record["returncode"] is None
    assert record["why"] == "stopped after 3 s, what was left of the budget"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10  # (a hang guard: SIGKILL takes effect at once, the kernel's part a moment on)
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # the process the step started went with it


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_the_compiled_hot_path_builds_for_this_python_from_the_source_alone(tmp_path: Path) -> None:
    """A tree carried to another machine holds no build for its Python: the script compiles aioenv/_speedups.c with
    the interpreter's own settings, and what it builds imports and works."""
    built = bench_module("many_core").build_speedups(tmp_path)
    loader = importlib.machinery.ExtensionFileLoader("aioenv._speedups", str(built))
    spec = importlib.util.spec_from_file_location("aioenv._speedups", built, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    assert module.__file__ == str(built)
    assert module.check_ids(np.array([3, 1, 3], np.int64), 4) == (True, 3)
    assert module.runs_by_owner(np.array([2, 0, 1], np.int64), np.array([0, 0, 1, 1], np.int64)) == (
        [0, 1],
        [0, 2],
        [2, 1],
    )

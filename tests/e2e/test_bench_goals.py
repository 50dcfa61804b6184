"""The goals table (benchmarks/bench_goals.py) reads every benchmark's results, runs them when asked, and says
what it could not read rather than failing or guessing. Speed is never asserted here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.scripts import ROOT, bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test

RESULTS = ROOT / "benchmarks" / "results"


def read_goals(out: Path) -> list[dict]:
    return json.loads((out / "goals.json").read_text())["rows"]


def test_every_goal_is_read_from_the_committed_results(tmp_path: Path) -> None:
    proc = run_python("benchmarks/bench_goals.py", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_goals(tmp_path)
    goals = bench_module("bench_goals").GOALS
    assert [r["goal"] for r in rows] == [g.name for g in goals]
    for row in rows:
        assert "missing" not in row, row
        assert isinstance(row["value"], float | int), row
        expect = row["value"] >= row["threshold"] if row["op"] == ">=" else row["value"] <= row["threshold"]
        assert row["met"] is expect, row
        assert row["when"].startswith("20"), row
    small = json.loads((RESULTS / "small.json").read_text())
    assert rows[0]["value"] == small["results"]["8/auto"]["ratio"]
    table = (tmp_path / "goals.md").read_text()
    assert f"{sum(r['met'] for r in rows)} of {len(rows)} goals met." in table
    assert "| Ant-v5 n=32, step() / SyncVectorEnv, alternated |" in proc.stdout
    assert "lock-step" in rows[3]["ceiling"]  # the machine's ceiling for Ant, from the same bench_core run


def test_what_cannot_be_read_is_said_per_goal(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(RESULTS / "small.json", results)
    (results / "latency.json").write_text("{not json")
    core = json.loads((RESULTS / "core.json").read_text())
    del core["workloads"]["ant-32"]
    (results / "core.json").write_text(json.dumps(core))
    proc = run_python("benchmarks/bench_goals.py", "--results", str(results), "--out", str(results), timeout=60)
    assert proc.returncode == 1, proc.stdout  # an unreadable result fails the script; a missed goal never does
    rows = {r["goal"]: r for r in read_goals(results)}
    assert rows["CartPole-v1 n=8, lock-step step() / SyncVectorEnv"]["value"] is not None
    assert rows["CartPole-v1 n=128, send/recv / SyncVectorEnv, alternated"]["value"] is not None
    ant = rows["Ant-v5 n=32, step() / SyncVectorEnv, alternated"]
    assert ant["value"] is None
    assert ant["met"] is None
    assert "core.json has no figure for it" in ant["missing"]
    ppo = rows["SB3 PPO, 8 CartPole-v1 envs: AioVecEnv / DummyVecEnv wall time"]
    assert "run benchmarks/bench_ppo.py" in ppo["missing"]
    assert "unreadable" in rows["10,000 async envs (1 s): of ideal"]["missing"]
    assert "| n/a |" in proc.stdout


def test_a_read_writes_nothing_unless_asked(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    before = sorted(p.name for p in results.iterdir())
    proc = run_python("benchmarks/bench_goals.py", "--results", str(results), timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "goals met." in proc.stdout
    assert sorted(p.name for p in results.iterdir()) == before
    assert f"The goals, as {results} holds them." in proc.stdout


def test_run_measures_into_a_directory_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(RESULTS / "core.json", out)  # an earlier run's, in the same directory: not read
    proc = run_python(
        "benchmarks/bench_goals.py", "--run", "--quick", "--only", "small", "--results", str(out), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "benchmarks/bench_small.py --quick" in proc.stdout  # each benchmark's command, as it ran
    rows = read_goals(out)
    fresh = json.loads((out / "small.json").read_text())
    assert rows[0]["value"] == fresh["results"]["8/auto"]["ratio"]
    assert rows[1]["value"] == fresh["results"]["32/auto"]["ratio"]
    for row in rows[2:]:  # the other benchmarks did not run: nothing is read from elsewhere, or from before
        assert row["missing"] == f"{row['source']} was not run (--only)", row
    table = (out / "goals.md").read_text()
    assert "measured by this run (smoke runs" in table
    assert str(out) not in table  # where the results went is no part of what was measured


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    for bad, message in (
        (["--quick"], "add --run"),
        (["--only", "small"], "add --run"),
        (["--run", "--results", str(RESULTS)], "other than benchmarks/results"),
        (["--run", "--only", "nope"], "invalid choice: 'nope'"),
        (["--results", str(tmp_path / "absent")], "no such directory"),
    ):
        proc = run_python("benchmarks/bench_goals.py", *bad, "--out", str(tmp_path), timeout=60)
        assert proc.returncode == 2, (bad, proc.stdout)
        assert message in proc.stderr, (bad, proc.stderr)


def test_measured_values_are_rounded_towards_missing() -> None:
    bars = bench_module("bars")
    fmt = bars.fmt_bar_value
    at_least, at_most = {"unit": "%", "op": ">="}, {"unit": "x", "op": "<="}
    assert fmt(at_least, 0.96999) == "96.9%"  # not shown as the 97.0% it misses
    assert fmt({"unit": "x", "op": ">="}, 1.5999) == "1.59x"
    assert fmt(at_most, 1.1001) == "1.11x"  # a wall-time ratio just over its bar shows over it
    assert fmt(at_most, 1.1) == "1.10x"  # exactly at its bar (1.1 * 100 is 110.00000000000001)
    assert fmt({"unit": "x", "op": ">="}, 0.57) == "0.57x"  # (0.57 * 100 is 56.99999999999999)
    assert fmt(at_most, 1.1, measured=False) == "1.10x"  # a bar itself is shown as it is
    assert fmt({"unit": "x", "op": ">="}, None) == "n/a"
    assert fmt({"unit": "MiB", "op": "<="}, 318.2) == "319 MiB"
    assert bars.meets(1.1, "<=", 1.1) is True
    assert bars.meets(1.1, "<", 1.1) is False
    assert bars.meets(None, ">=", 1.0) is None


def test_the_ppo_goal_shows_the_spread_of_its_rounds() -> None:
    rounds = bench_module("bench_goals").rounds
    assert rounds({"vs_dummy_rounds": [1.02, 1.3, 1.1]}) == " (rounds 1.02-1.30x)"
    assert rounds({"vs_dummy_rounds": [1.1]}) == ""  # one round: no spread to show
    assert rounds({"vs_dummy": 1.09}) == ""  # results written before the rounds were recorded


def test_the_remote_goals_say_what_a_relay_costs_with_no_pool() -> None:
    remote_speeds = bench_module("bench_goals").remote_speeds
    cells = {"embedded": {"steps_per_s": 60000.0}, "remote unix": {"steps_per_s": 39000.0}}
    section = {"cells": cells, "ratio_bare_relay_direct": 0.774}
    speeds = "embedded 60,000, remote unix 39,000 steps/s"
    said = remote_speeds({"sections": {"cartpole": section}})
    assert said == f"{speeds}; no pool, a relay process / direct over bare pipes 0.77x"
    del section["ratio_bare_relay_direct"]  # results of a run before those cells: the speeds alone
    assert remote_speeds({"sections": {"cartpole": section}}) == speeds
    section["alternated"] = {  # the pools alternated in one process: their speeds and each side's CPU a batch
        "steps_per_s": {"embedded": 90000.0, "remote unix": 55000.0},
        "cpu": {
            "embedded": {"client_us_per_batch": 201.4, "server_us_per_batch": None},
            "remote unix": {"client_us_per_batch": 290.0, "server_us_per_batch": 1322.0},
        },
    }
    said = remote_speeds({"sections": {"cartpole": section}})
    alternated = "embedded 90,000, remote unix 55,000 steps/s, CPU µs a batch embedded 201, remote unix 290"
    alternated += " + server 1,322"
    assert said == f"{speeds}; alternated in one process: {alternated}"
    section["alternated"] = {"error": "TimeoutError: no result within 180 s"}  # it failed: the windows' figures
    assert remote_speeds({"sections": {"cartpole": section}}) == speeds

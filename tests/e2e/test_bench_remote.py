"""The remote benchmark still runs end to end (a short smoke run; its speed bars are never asserted here)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path

import psutil
import pytest

import aioenv
from tests.support.scripts import ROOT, bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(240)
def test_remote_benchmark_smoke(tmp_path: Path) -> None:
    # ~25 s on a quiet 2-core machine, twice that under load: the limit is a hang guard only
    proc = run_python("benchmarks/bench_remote.py", "--quick", "--out", str(tmp_path), timeout=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "remote.json").read_text())
    assert set(result["sections"]) == {"cartpole", "async1k", "clients", "hosts"}
    assert result["endpoint"].startswith("tcp://127.0.0.1:")

    cartpole = result["sections"]["cartpole"]
    bare = {"no pool, direct", "no pool, via a relay"}  # the same loop over bare pipes (bare_relay.py)
    assert set(cartpole["cells"]) == {"embedded", "remote", "remote unix", *bare}
    for where, cell in cartpole["cells"].items():
        assert cell["status"] == "ok", (where, cell["status"])
        assert cell["steps_per_s"] > 0, where
        assert cell["num_workers"] == 2, where
        assert cell["rows_per_recv"] == 8, where  # batch_size = n / 2 in every cell
        assert cell["leftover_processes"] == [], where
        # the workers counted are the serving server's (the other server idles, its pool closed)
        local = where == "embedded" or where in bare
        assert cell["processes"]["server_workers"] == (0 if local else 2), where
        assert cell["processes"]["local_workers"] == (2 if local else 0), where
        assert cell["cpu"]["local_workers" if local else "server_workers"] > 0, where  # the envs ran there
    # the relay is the cell's "server": a process of its own, using CPU; the direct cell has none
    assert cartpole["cells"]["no pool, via a relay"]["processes"]["server"] == 1
    assert cartpole["cells"]["no pool, via a relay"]["cpu"]["server"] > 0
    assert cartpole["cells"]["no pool, direct"]["processes"]["server"] == 0
    steps = {where: cell["steps_per_s"] for where, cell in cartpole["cells"].items()}
    assert cartpole["ratio_remote_embedded"] == pytest.approx(steps["remote"] / steps["embedded"], rel=1e-3)
    assert cartpole["ratio_unix_embedded"] == pytest.approx(steps["remote unix"] / steps["embedded"], rel=1e-3)
    relay_direct = steps["no pool, via a relay"] / steps["no pool, direct"]
    assert cartpole["ratio_bare_relay_direct"] == pytest.approx(relay_direct, rel=1e-3)
    alt = cartpole["alternated"]  # the three pools at once in this process, in slices that alternate
    assert alt["rounds"] >= 2, alt
    assert set(alt["steps_per_s"]) == {"embedded", "remote", "remote unix"}
    assert all(v > 0 for v in alt["steps_per_s"].values()), alt
    for key in ("remote_embedded", "unix_embedded"):
        rounds = alt[f"rounds_ratio_{key}"]
        assert len(rounds) == alt["rounds"]
        assert alt[f"ratio_{key}"] == pytest.approx(statistics.median(rounds), rel=1e-4)
        q1, q3 = alt[f"quartiles_{key}"]
        assert min(rounds) - 1e-6 <= q1 <= alt[f"ratio_{key}"] <= q3 <= max(rounds) + 1e-6
    for where, cpu in alt["cpu"].items():
        assert cpu["batches"] > 0, where
        assert 0 < cpu["rows_per_batch"] <= 16, where  # never more than the pool's envs
        assert cpu["client_us_per_batch"] > 0, where
        if where == "embedded":
            assert cpu["server_us_per_batch"] is None
        else:  # the server's own CPU counted while its pool ran
            assert cpu["server_us_per_batch"] > 0, where
    assert cartpole["unix_server"]["exit_code"] == 0  # the unix-socket server, stopped cleanly, nothing left
    assert cartpole["unix_server"]["workers_left"] == []

    async1k = result["sections"]["async1k"]
    ideal = async1k["params"]["ideal_steps_per_s"]
    assert ideal == pytest.approx(async1k["params"]["num_envs"] / async1k["params"]["env_kwargs"]["mean"])
    assert {c["where"] for c in async1k["cells"].values()} == {"embedded", "remote"}
    for key, cell in async1k["cells"].items():
        assert cell["status"] == "ok", (key, cell["status"])
        assert 0 < cell["fraction_of_ideal"] <= 1.2, (key, cell["fraction_of_ideal"])
        assert cell["fraction_of_ideal"] == pytest.approx(cell["steps_per_s"] / ideal, rel=1e-3), key
        assert cell["leftover_processes"] == [], key
    assert async1k["best"]["remote"] in async1k["cells"]

    clients = result["sections"]["clients"]
    assert clients["status"] == "ok", clients["status"]
    per_client = clients["per_client_steps_per_s"]
    assert len(per_client) == clients["params"]["clients"] == 4
    assert all(v > 0 for v in per_client)
    assert clients["total_steps_per_s"] == pytest.approx(sum(per_client), rel=1e-4)  # one window for all
    assert clients["fraction_of_ideal"] == pytest.approx(
        clients["total_steps_per_s"] / clients["params"]["ideal_steps_per_s"], rel=1e-3
    )
    assert 0 < clients["fraction_of_ideal"] <= 1.2
    spread = clients["per_client"]
    assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert spread["max_over_min"] >= 1
    assert spread["cv"] >= 0
    assert clients["status_all_ready"]["sessions"] == 4  # `aioenv status --json` saw every client
    assert clients["status_all_ready"]["envs"] == 32
    assert "sessions" in clients["status_during_warmup"] or "error" in clients["status_during_warmup"]
    assert clients["client_exit_codes"] == ["0"]
    assert clients["leftover_processes"] == []

    hosts = result["sections"]["hosts"]  # the same pool embedded, remote, and remote with its workers on a host
    assert hosts["status"] == "ok", hosts["status"]
    assert set(hosts["cells"]) == {"embedded", "remote", "remote via host"}
    for where, cell in hosts["cells"].items():
        assert cell["status"] == "ok", (where, cell["status"])
        assert cell["steps_per_s"] > 0, where
        assert cell["num_workers"] == 2, where
        assert cell["leftover_processes"] == [], where
    host_steps = {where: cell["steps_per_s"] for where, cell in hosts["cells"].items()}
    assert hosts["ratio_host_embedded"] == pytest.approx(
        host_steps["remote via host"] / host_steps["embedded"], rel=1e-4
    )
    assert hosts["ratio_host_remote"] == pytest.approx(host_steps["remote via host"] / host_steps["remote"], rel=1e-4)
    via_host = hosts["cells"]["remote via host"]["processes"]
    assert via_host["host"] == 1
    assert via_host["server_workers"] == 2
    assert hosts["cells"]["remote"]["processes"]["host"] == 0
    assert [(h["name"], h["capacity"]) for h in hosts["status_at_start"]["hosts"]] == [("bench-host", 4096)]
    for name in ("worker_host", "host_server"):  # stopped cleanly with SIGTERM, nothing left
        assert hosts[name]["exit_code"] == 0, (name, hosts[name])
        assert hosts[name]["workers_left"] == [], name
    assert hosts["leftover_processes"] == []

    assert result["server"]["exit_code"] == 0  # stopped cleanly with SIGTERM
    assert result["server"]["workers_left"] == []
    assert result["leftover_processes_at_exit"] == []
    assert len(result["bars"]) == 5
    assert result["bars"][0]["value"] == cartpole["ratio_remote_embedded"]
    assert result["bars"][1]["value"] == cartpole["ratio_unix_embedded"]
    assert result["bars"][2]["value"] == alt["ratio_remote_embedded"]
    assert "alternated, remote (tcp)" in result["bars"][2]["name"]
    assert result["bars"][3]["value"] == alt["ratio_unix_embedded"]
    assert "alternated, remote (unix socket)" in result["bars"][3]["name"]
    for bar in result["bars"]:  # "met" is the bar's own comparison, not a free flag
        assert bar["op"] == ">="
        assert bar["met"] is (bar["value"] >= bar["threshold"]), bar
    markdown = (tmp_path / "remote.md").read_text()
    assert markdown.startswith("`")
    assert "| bar |" in markdown
    assert "remote via host / remote = " in markdown
    assert f"via a relay process / direct {cartpole['ratio_bare_relay_direct']:.2f}x" in markdown
    assert "exit codes 0 / 0" in markdown
    assert f"| remote unix | {alt['steps_per_s']['remote unix']:,.0f} | {alt['ratio_unix_embedded']:.2f}x" in markdown

    seen = result["pids_seen"]  # the servers, the host, their workers, the clients, the embedded pools' workers
    assert (
        len(seen) >= 1 + 4 + 4 + 1 + 1 + 2
    )  # the server, 4 clients, their 4 workers, a second server, a host, 2 workers
    assert {hosts["worker_host"]["pid"], hosts["host_server"]["pid"]} <= set(seen)
    deadline = time.monotonic() + 5  # nothing the benchmark started outlives it
    while (left := [pid for pid in seen if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def test_bare_relay_run_by_hand_says_what_runs_it() -> None:
    proc = run_python("benchmarks/bare_relay.py", timeout=60)
    assert proc.returncode == 1
    assert "bench_remote.py --only cartpole" in proc.stderr
    bad = run_python("benchmarks/bare_relay.py", "relay", "--fd", "99", "--workers", "5,x", timeout=60)
    assert bad.returncode == 2  # refused before it touches a descriptor
    assert "argument --workers: expected integers with commas between, got '5,x'" in bad.stderr


@pytest.mark.timeout(120)
async def test_the_benchmarks_server_takes_the_pools_of_its_full_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # the full run's async case makes one pool of 1,024 envs: above what `aioenv serve` allows on a 2-CPU machine by
    # default (256 envs per CPU), so its server is started with bounds of its own
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # (its own imports)
    benchutil = bench_module("benchutil")
    server = benchutil.Server()
    try:
        options = {"executor": "async", "num_workers": 2, "env_kwargs": {"mean": 0.02, "sigma": 0.0, "cap": 0.1}}
        pool = await asyncio.wait_for(aioenv.make(benchutil.ASYNC_ENV, 1024, endpoint=server.endpoint, **options), 60)
        try:
            obs, _ = await asyncio.wait_for(pool.reset(), 60)
            assert len(obs) == 1024
        finally:
            await pool.aclose()
    finally:
        report = server.stop()
    assert report["exit_code"] == 0


def test_a_managed_processs_problems_keep_each_traceback_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    benchutil = bench_module("benchutil")
    managed = object.__new__(benchutil.Managed)  # its log only: no process
    managed.log = [
        "INFO serving\n",
        "2026-11-30 asyncio ERROR Exception in callback <TimerHandle Server._reap>\n",
        "Traceback (most recent call last):\n",
        '  File "server.py", line 880, in _reap\n',
        "    del self.sessions[identity]\n",
        "KeyError: b'abc'\n",
        "INFO still serving\n",
        "WARNING client silent\n",
    ]
    assert managed.problems() == [
        "2026-11-30 asyncio ERROR Exception in callback <TimerHandle Server._reap>",
        "Traceback (most recent call last):",
        '  File "server.py", line 880, in _reap',
        "    del self.sessions[identity]",
        "KeyError: b'abc'",
        "WARNING client silent",
    ]


def test_alternated_figures_are_each_rounds_ratio_and_every_slices_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # as bench_remote.py puts it there
    figures = bench_module("remote_alternated")._figures
    # (rows, recv batches, wall s, this process's CPU s, the server's CPU s) of each pool's slice in each round
    slices = [
        ((100, 10, 1.0, 0.002, 0.0), (50, 5, 1.0, 0.002, 0.003), (80, 8, 1.0, 0.004, 0.004)),
        ((200, 20, 1.0, 0.004, 0.0), (50, 5, 0.5, 0.003, 0.002), (60, 6, 0.5, 0.002, 0.002)),
        ((100, 10, 2.0, 0.002, 0.0), (30, 3, 1.0, 0.001, 0.001), (40, 4, 1.0, 0.001, 0.001)),
    ]  # embedded, remote, remote unix
    rounds = [dict(zip(("embedded", "remote", "remote unix"), got, strict=True)) for got in slices]
    out = figures(rounds, 2)
    assert out["rounds"] == 3
    assert out["num_workers"] == 2
    assert out["steps_per_s"] == {"embedded": 100.0, "remote": 50.0, "remote unix": 80.0}  # medians of the rounds
    # within each round: remote 50/100, 100/200, 30/50; a slow round (the third) moves both sides alike
    assert out["rounds_ratio_remote_embedded"] == [0.5, 0.5, 0.6]
    assert out["ratio_remote_embedded"] == 0.5
    assert out["rounds_ratio_unix_embedded"] == [0.8, 0.6, 0.8]
    assert out["ratio_unix_embedded"] == 0.8
    assert out["quartiles_unix_embedded"] == [0.7, 0.8]  # within the rounds, never past them
    cpu = out["cpu"]
    assert cpu["embedded"] == {
        "batches": 40,
        "rows_per_batch": 10.0,
        "client_us_per_batch": 200.0,  # 8 ms over 40 batches
        "server_us_per_batch": None,  # no server
    }
    assert cpu["remote"]["client_us_per_batch"] == pytest.approx(1e6 * 0.006 / 13)
    assert cpu["remote"]["server_us_per_batch"] == pytest.approx(1e6 * 0.006 / 13)
    assert cpu["remote unix"]["batches"] == 18
    assert cpu["remote unix"]["server_us_per_batch"] == pytest.approx(1e6 * 0.007 / 18)


@pytest.mark.parametrize("seconds", ["0", "-2", "nan"])
def test_an_alternated_window_of_no_time_is_refused_by_name(seconds: str) -> None:
    proc = run_python("benchmarks/bench_remote.py", "--only", "cartpole", "--alternated-seconds", seconds, timeout=60)
    assert proc.returncode == 2
    assert "--alternated-seconds must be a positive number of seconds" in proc.stderr
    assert "server pid" not in proc.stdout  # refused before any server starts

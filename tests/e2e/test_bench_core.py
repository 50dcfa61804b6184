"""The benchmark scripts still run (short smoke runs; speed itself is never asserted here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.scripts import bench_module

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test

ROOT = Path(__file__).resolve().parents[2]


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
    impls = ("sync", "async", "floor", "aioenv_step", "aioenv_sendrecv", "workers_step", "workers_sendrecv", "cores")
    for impl in impls:
        assert cells[impl]["status"] == "ok", (impl, cells[impl])
        assert cells[impl]["steps_per_s"] > 0, (impl, cells[impl])
    # the ceiling reports a lock-step figure too, which waits for the slowest slice each batch: never more
    assert 0 < cells["cores"]["lockstep_per_s"] <= cells["cores"]["steps_per_s"]
    ratios = {
        "aioenv_step/sync",
        "aioenv_step/async",
        "aioenv_sendrecv/sync",
        "aioenv_step/floor",
        "aioenv_sendrecv/floor",
    }
    ratios |= {"workers_step/sync", "workers_sendrecv/sync", "cores/sync", "cores_lockstep/sync"}
    assert set(cells["ratios"]) == ratios | {"aioenv_step/sync alternated", "aioenv_sendrecv/sync alternated"}
    # the same step() (and send/recv loop) and SyncVectorEnv.step, slice by slice in one process
    for key, side, ratio_name in (
        ("alternated", "aioenv_step", "aioenv_step/sync alternated"),
        ("alternated_sendrecv", "aioenv_sendrecv", "aioenv_sendrecv/sync alternated"),
    ):
        alternated = cells[key]
        assert alternated["status"] == "ok", alternated
        assert len(alternated["per_round"]) == 3  # --quick: 3 rounds
        assert alternated["ratio"] == pytest.approx(float(np.median(alternated["per_round"])), rel=1e-5)
        q1, q3 = alternated["quartiles"]
        assert min(alternated["per_round"]) <= q1 <= alternated["ratio"] <= q3 <= max(alternated["per_round"])
        assert cells["ratios"].pop(ratio_name) == alternated["ratio"]
        assert alternated["sync"] > 0
        assert alternated[side] > 0
        # where executor="auto" placed them, in words: in this process, on workers (a slow probe), or both (a
        # probe near the line between them: "18 envs in this process, 14 on 1 inline worker(s) (...)")
        placed = alternated["placement"]
        whole = re.match(r"32 envs (in this process|on \d+ inline worker\(s\))", placed)
        shared = re.match(r"(\d+) envs in this process, (\d+) on \d+ inline worker\(s\)", placed)
        assert whole or (shared and int(shared[1]) + int(shared[2]) == 32), placed
    assert result["settings"]["slice"] == 0.1
    assert result["settings"]["rounds"] == 3
    figures = {impl: cells[impl]["steps_per_s"] for impl in impls}
    figures["cores_lockstep"] = cells["cores"]["lockstep_per_s"]
    for name, ratio in cells["ratios"].items():  # each ratio is the quotient of the figures beside it
        top, bottom = name.split("/")
        assert ratio == pytest.approx(figures[top] / figures[bottom], rel=1e-4), name
    for impl in impls:  # the median of the repeats
        repeats = [r["steps_per_s"] if isinstance(r, dict) else r for r in cells[impl]["repeats"]]
        assert cells[impl]["steps_per_s"] == pytest.approx(float(np.median(repeats)), rel=1e-5), impl
    assert result["startup"]["aioenv"]["status"] == "ok"
    assert result["startup"]["aioenv"]["seconds"] > 0
    md = (tmp_path / "core.md").read_text()
    assert md.startswith("`")
    check_cost_figures(cells, md)


def check_cost_figures(cells: dict[str, Any], md: str) -> None:
    """The CPU of the process that runs each pool, per batch, per worker message and per env row, in the JSON
    and in the Markdown's cost table, with each pool's per-message figure over the floor's and the goal."""
    costed: dict[str, str] = bench_module("bench_core").COSTED  # cell -> its label in the table
    assert set(costed) == {"floor", "aioenv_step", "aioenv_sendrecv", "workers_step", "workers_sendrecv"}
    assert cells["cost_workers"] is None  # the cells' own worker counts
    for impl in costed:
        cell = cells[impl]
        assert cell["envs_in_process"] == 0, cell  # isolation by default: every env in a worker process
        assert cell["worker_processes"] >= 1, cell
        for figure in ("cpu_us_per_batch", "cpu_us_per_message", "user_us_per_message", "cpu_us_per_row"):
            assert cell[figure] > 0, (impl, figure, cell)
        # user space's part of the CPU, from another clock of the same kernel's accounting (ticks: some slack)
        assert cell["user_us_per_message"] <= cell["cpu_us_per_message"] * 1.05, cell
        # lock-step: every worker process gets a message each batch; send/recv: those the batch's rows touch
        lockstep = impl in ("floor", "aioenv_step", "workers_step")
        msgs = cell["messages_per_batch"]
        assert (msgs == cell["worker_processes"]) if lockstep else (1 <= msgs <= cell["worker_processes"]), cell
        # a batch costs what its messages cost, and is 32 rows (lock-step) or at least one (send/recv)
        assert cell["cpu_us_per_batch"] >= cell["cpu_us_per_message"] * (msgs if lockstep else 1) * 0.99, cell
        assert cell["cpu_us_per_row"] * (31.9 if lockstep else 1) <= cell["cpu_us_per_batch"] * 1.01, cell
    per_message = {impl: cells[impl]["cpu_us_per_message"] for impl in costed}
    assert set(cells["cost_ratios"]) == {f"{impl}/floor" for impl in costed if impl != "floor"}
    for name, value in cells["cost_ratios"].items():
        assert value == pytest.approx(per_message[name.split("/")[0]] / per_message["floor"], rel=1e-4), name
    assert set(cells["cost_targets"]) == {"aioenv_step/floor", "aioenv_sendrecv/floor"}
    for name, goal in cells["cost_targets"].items():
        assert (goal["op"], goal["threshold"], goal["value"]) == ("<=", 1.5, cells["cost_ratios"][name])
        assert goal["met"] == (goal["value"] <= 1.5)
    head = "| workload | pool | worker processes | messages/batch | CPU µs/batch | CPU µs/message | of it user µs |"
    assert head + " CPU µs/row |" in md
    for impl, label in costed.items():
        row = re.search(rf"^\| CartPole-v1 n=32 \| {re.escape(label)} \| (.*) \|$", md, re.MULTILINE)
        assert row, (label, md)
        workers, msgs, batch, message, user, per_row, over_floor, goal = row[1].split(" | ")
        assert float(message.replace(",", "")) == pytest.approx(per_message[impl], abs=0.051), (label, row[0])
        assert float(user.replace(",", "")) == pytest.approx(cells[impl]["user_us_per_message"], abs=0.051), row[0]
        assert float(batch.replace(",", "")) > 0, row[0]
        assert float(per_row.replace(",", "")) > 0, row[0]
        assert int(workers) == cells[impl]["worker_processes"], row[0]
        if impl == "floor":
            assert (over_floor, goal) == ("1x", ""), row[0]
        else:
            assert over_floor == f"{cells['cost_ratios'][f'{impl}/floor']:.2f}x", row[0]
        if impl in ("aioenv_step", "aioenv_sendrecv"):
            assert re.fullmatch(rf"{impl}/floor <= 1.5x: (met|MISSED)", goal), row[0]


async def test_the_cost_cells_count_the_messages_to_worker_processes_and_no_other_process_cpu() -> None:
    """``--cost-workers``' pools: a lock-step step sends one message to each worker process, a send/recv loop
    one per worker a send's rows touch; each CPU figure is the window's CPU of this process over its count."""
    import aioenv

    core = bench_module("bench_core")
    for sendrecv in (False, True):
        figures = await core.aioenv_throughput(aioenv, "CartPole-v1", 12, sendrecv, 0.05, 0.3, "inline", 3)
        assert figures["worker_processes"] == 3, figures
        assert figures["envs_in_process"] == 0, figures
        # send/recv, batch 6 of 12 envs in blocks of 4: a batch's rows lie on 2 or 3 workers (4 + 2, 2 + 4,
        # 2 + 2 + 2...), never 1
        msgs = figures["messages_per_batch"]
        assert (2 <= msgs <= 3) if sendrecv else (msgs == 3), figures
        rows = 6 if sendrecv else 12
        assert figures["cpu_us_per_batch"] == pytest.approx(figures["cpu_us_per_message"] * msgs, rel=1e-6)
        assert figures["cpu_us_per_batch"] == pytest.approx(figures["cpu_us_per_row"] * rows, rel=1e-6)
    floor = core.floor_throughput(bench_module("floor"), "CartPole-v1", 12, 0.05, 0.3, 3)
    assert (floor["worker_processes"], floor["messages_per_batch"]) == (3, 3), floor
    assert floor["cpu_us_per_batch"] == pytest.approx(floor["cpu_us_per_row"] * 12, rel=1e-6)


async def test_the_cost_cells_place_envs_on_workers_as_the_pool_does() -> None:
    """``worker_of`` (which worker process each env is on, for counting send/recv's messages) agrees with the
    pool's own placement."""
    import aioenv

    worker_of = bench_module("bench_core").worker_of
    for n, workers in ((7, 2), (12, 5), (3, 3)):
        async with aioenv.Pool("CartPole-v1", n, num_workers=workers, executor="inline") as pool:
            assert pool.envs_in_process == 0
            placed = pool._runner.sched.worker_of  # the coordinator's table: env id -> worker
            assert worker_of(n, pool.num_workers, 0).tolist() == placed.tolist(), (n, workers)
    # envs in this process come first and reach no worker process; the others are split as above
    assert worker_of(7, 2, 3).tolist() == [-1, -1, -1, 0, 0, 1, 1]
    assert bench_module("bench_core").messages_sent(worker_of(7, 2, 3), [np.array([0, 4, 5]), np.array([1])]) == 2


def test_the_floor_steps_the_trajectories_of_sync_vector_env() -> None:
    """The floor does all the work a vector env does (same seeds and actions, same obs, rewards, terminations,
    truncations, next-step autoresets), so the time it takes is a fair lower bound; its processes and shared
    file are gone after close."""
    import gymnasium as gym
    import numpy as np
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    floor = bench_module("floor")
    n = 5
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, autoreset_mode=AutoresetMode.NEXT_STEP)
    env = floor.FloorVectorEnv("CartPole-v1", n, 2)
    shared = env._dir.name
    procs = list(env._procs)
    try:
        assert np.array_equal(env.reset(seed=7), ref.reset(seed=7)[0])
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(300):
            actions = rng.integers(0, 2, n)
            got, want = env.step(actions), ref.step(actions)[:4]
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), got, want, strict=True):
                assert a.dtype == b.dtype, (t, name, a, b)
                assert np.array_equal(a, b), (t, name, a, b)
            ended += int(got[2].sum() + got[3].sum())
        assert ended > 5  # episodes ended and were reset along the way
    finally:
        env.close()
        ref.close()
    assert all(p.poll() is not None for p in procs)
    assert not Path(shared).exists()


def test_the_ceiling_sums_free_running_slices_and_waits_for_the_slowest_in_lock_step() -> None:
    """The ceiling's arithmetic (``cores.rates``): free-running, each slice's own rate summed; lock-step, every
    batch as slow as its slowest slice, the processes' k-th batches paired up to the shortest record."""
    cores = bench_module("cores")
    steady, uneven = np.array([1.0, 1.0, 1.0, 1.0]), np.array([1.0, 3.0, 1.0, 3.0, 9.0])
    free, lockstep = cores.rates([4, 4], [steady, uneven])
    assert free == pytest.approx(4 / 1.0 + 4 / 3.4)  # each slice at its own pace
    assert lockstep == pytest.approx(8 / 2.0)  # batch k takes max(1, uneven[k]) over the first 4 batches
    assert cores.rates([3], [steady]) == pytest.approx((3.0, 3.0))  # one slice: nobody to wait for


async def test_a_send_recv_slice_leaves_no_step_in_flight() -> None:
    """An alternated send/recv slice ends with every row it sent received, so the pool's envs are idle while
    SyncVectorEnv's slice is timed, and the next slice (or a lock-step call) finds every env free."""
    import itertools

    import aioenv

    core = bench_module("bench_core")
    async with aioenv.Pool("CartPole-v1", 8, batch_size=4, seed=0, num_workers=2) as pool:
        await pool.reset(seed=0)
        acts = core.presample(pool.single_action_space, 8)
        counter = itertools.count()
        for _ in range(2):
            assert await core.sendrecv_slice(pool, acts, counter, 0.05) > 0
        assert next(counter) > 2  # each recv's rows were sent again within the slice
        *_, info = await pool.recv(min_results=0, timeout=0.2)  # nothing is owed...
        assert info["env_id"].size == 0
        obs, *_ = await pool.step(np.zeros(8, dtype=np.int64))  # ...and no env is busy
        assert obs.shape == (8, 4)


def test_options_that_must_be_positive_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parse_args = bench_module("bench_core").parse_args
    for option, value in (
        ("--slice", "-1"),
        ("--rounds", "0"),
        ("--seconds", "0"),
        ("--repeats", "-2"),
        ("--cost-workers", "0"),
    ):
        with pytest.raises(SystemExit) as exited:
            parse_args([option, value])
        assert exited.value.code == 2
        assert f"{option} must be positive, got" in capsys.readouterr().err
    args = parse_args(["--quick"])
    assert (args.slice, args.rounds) == (0.1, 3)


def test_alternated_quartiles() -> None:
    quartiles = bench_module("bench_core").quartiles
    assert quartiles([1.5]) == [1.5, 1.5]
    q1, q3 = quartiles([1.0, 1.2, 1.4, 1.6, 9.0])
    assert 1.0 <= q1 <= 1.2 < 1.4 < q3 <= 9.0  # one wild round moves the upper quartile, not the median


def test_adapter_benchmark_pairs_ratios_within_rounds_and_rotates_cells(monkeypatch: Any) -> None:
    """Pure bookkeeping of bench_adapters.run (fake cells): each round starts at the next cell, and a ratio
    is the median of within-round ratios, so a machine that slows down for a while does not skew it."""
    bench = bench_module("bench_adapters")
    base = {"Pool.step (async core)": 100.0, "SyncPool.step": 90.0, "AioVectorEnv.step": 80.0}
    names = list(base)
    order: list[str] = []
    # The machine halves its speed during round 2 (before its last cell, Pool.step) and stays slow: that
    # round's ratios are skewed, the median over rounds is not (a ratio of medians would be: 90 / 50).
    speeds = [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5]

    def fake(name: str) -> Any:
        def cell(env_id: str, n: int, seconds: float) -> float:
            assert env_id == "Ant-v5"
            order.append(name)
            return base[name] * speeds[len(order) - 1]

        return cell

    monkeypatch.setattr(bench, "CELLS", {name: fake(name) for name in names})
    result = bench.run("Ant-v5", 32, 0.0, 3)
    assert order == names + names[1:] + names[:1] + names[2:] + names[:2]
    assert result["ratios"]["SyncPool.step / Pool.step"] == 0.9
    assert result["ratios"]["AioVectorEnv.step / Pool.step"] == 0.8
    assert "AioVecEnv.step (SB3) / Pool.step" not in result["ratios"]  # its cells did not run
    assert result["steps_per_s"]["Pool.step (async core)"] == 50.0  # median of 100, 50, 50

"""``benchmarks/cost_shapes.py`` runs every stand-in in both modes end to end and refuses bad arguments; its
stand-ins (``benchmarks/shaped_envs.py``) are Ant-v5's spaces and infos without its physics. No speed is asserted."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from tests.support.procs import proc_table
from tests.support.scripts import bench_module, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def test_every_stand_in_reports_its_cpu_per_message_in_both_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"AIOENV_TEST_COST_SHAPES={uuid.uuid4().hex}"
    monkeypatch.setenv(*token.split("="))  # in the script's environment, and its workers'
    out = tmp_path / "shapes.json"
    args = ["--workers", "2", "--envs", "4", "--seconds", "0.1", "--rounds", "2", "--work", "0.0001"]
    proc = run_python("benchmarks/cost_shapes.py", *args, "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert (figures["workers"], figures["envs"], figures["rounds"], figures["work_s"]) == (2, 4, 2, 0.0001)
    names = ["CartPole-v1", "ant-shape", "ant-shape+infos", "ant-shape+infos+work", "ant-no-infos", "Ant-v5"]
    assert list(figures["variants"]) == names
    for name in names:
        for mode in ("step", "send/recv"):
            cell = figures["variants"][name][mode]
            assert len(cell["rounds"]) == 2
            assert cell["cpu_us_per_message"] == pytest.approx(float(np.median(cell["rounds"])))
            base = figures["variants"]["CartPole-v1"][mode]["cpu_us_per_message"]
            assert cell["vs_cartpole"] == pytest.approx(cell["cpu_us_per_message"] / base)
    markdown = out.with_suffix(".md").read_text()
    assert markdown == proc.stdout
    assert [line.split(" | ")[0] for line in markdown.splitlines() if line.startswith("| ") and "x |" in line] == [
        f"| {name}" for name in names
    ]
    assert not proc_table(token)  # every worker of the six pools has exited


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (
            ["--workers", "4", "--envs", "6"],
            "--envs must be a multiple of --workers and at least twice it, got 6 and 4",
        ),
        (
            ["--workers", "4", "--envs", "4"],
            "--envs must be a multiple of --workers and at least twice it, got 4 and 4",
        ),
        (["--seconds", "0"], "--seconds must be > 0, --rounds >= 1, --work >= 0: got 0.0, 3, 0.0002"),
        (["--rounds", "0"], "--seconds must be > 0, --rounds >= 1, --work >= 0: got 1.0, 0, 0.0002"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], words: str) -> None:
    proc = run_python("benchmarks/cost_shapes.py", *args, timeout=60)
    assert proc.returncode == 2
    assert words in proc.stderr


def test_the_stand_ins_have_ant_v5s_spaces_and_infos_and_no_physics() -> None:
    shaped = bench_module("shaped_envs")
    ant = gym.make("Ant-v5")
    try:
        ant.reset(seed=0)
        *_, ant_info = ant.step(ant.action_space.sample())
        plain, with_infos = shaped.ant_shape(), shaped.ant_shape_infos()
        for env in (plain, with_infos):
            assert env.observation_space == ant.observation_space
            assert env.action_space == ant.action_space
        obs, info = with_infos.reset(seed=3)
        assert info == {}
        assert obs.shape == (105,)
        assert obs.dtype == np.float64
        assert not obs.any()
        obs, reward, terminated, truncated, info = with_infos.step(np.zeros(8, np.float32))
        assert list(info) == list(ant_info)  # Ant-v5's keys, in its order, each of the type Ant's value has
        assert [type(value) for value in info.values()] == [type(value) for value in ant_info.values()]
        assert (reward, terminated, truncated) == (1.0, False, False)
        assert plain.step(np.zeros(8, np.float32))[4] == {}
        for _ in range(999):
            truncated = with_infos.step(np.zeros(8, np.float32))[3]
        assert truncated  # Ant-v5's time limit, 1,000 steps
        stripped = shaped.ant_without_infos()
        try:
            assert stripped.reset(seed=0)[1] == {}
            assert stripped.step(stripped.action_space.sample())[4] == {}
        finally:
            stripped.close()
    finally:
        ant.close()

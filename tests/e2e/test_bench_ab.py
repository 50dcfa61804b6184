"""``benchmarks/ab.py`` alternates two checkouts and reports their ratios: run here with this checkout on both
sides (each ratio then compares the code with itself), and refusing a folder that holds no aioenv."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.scripts import ROOT, run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


@pytest.mark.parametrize(
    "how", [[], ["--workers", "2", "--send-recv"], ["--executor", "thread"], ["--env", "Pendulum-v1", "--send-recv"]]
)
def test_ab_alternates_two_checkouts_and_reports_the_ratios(how: list[str]) -> None:
    proc = run_python(
        "benchmarks/ab.py", "--base", str(ROOT), "--new", str(ROOT), "--envs", "2", "--rounds", "2", "--seconds", "0.2",
        *how, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = proc.stdout.strip().splitlines()[-1]
    found = re.fullmatch(r"\| 2 \| 2 \| ([\d.]+) \(.*\) \| ([\d.]+) \(.*\) \| ([\d.]+) / ([\d.]+) \|", row)
    assert found, proc.stdout
    speed, cpu, base_us, new_us = (float(x) for x in found.groups())
    assert speed > 0
    assert cpu > 0
    assert base_us > 0
    assert new_us > 0


def test_ab_refuses_a_folder_without_aioenv(tmp_path: Path) -> None:
    proc = run_python("benchmarks/ab.py", "--base", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "holds no aioenv/ package" in proc.stderr


def test_ab_refuses_more_workers_than_envs() -> None:
    proc = run_python("benchmarks/ab.py", "--base", str(ROOT), "--envs", "4", "--workers", "5", timeout=60)
    assert proc.returncode == 2
    assert "--workers must be 0 (the default placement) or 1 to the fewest --envs, got 5" in proc.stderr


def test_ab_refuses_another_env_on_the_latency_executors() -> None:
    proc = run_python("benchmarks/ab.py", "--base", str(ROOT), "--env", "Ant-v5", "--executor", "async", timeout=60)
    assert proc.returncode == 2
    assert "--env Ant-v5 runs on the inline executor; --executor async steps its own sleeping envs" in proc.stderr

"""The bare lock-step exchange (``benchmarks/bare_lockstep.py``) runs every way end to end, leaves no worker behind
and refuses bad arguments; its figures are CPU times, never checked against a speed."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.support.procs import proc_table
from tests.support.scripts import run_python

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


@pytest.mark.parametrize("cartpole", [0, 2])
def test_every_way_reports_the_cpu_per_message_of_the_driving_process(
    cartpole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"AIOENV_TEST_BARE_LOCKSTEP={uuid.uuid4().hex}"
    monkeypatch.setenv(*token.split("="))  # in the script's environment and its workers' (other runs have others)
    args = ["--workers", "3", "--seconds", "0.2", "--cartpole", str(cartpole), "--json"]
    proc = run_python("benchmarks/bare_lockstep.py", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert (out["workers"], out["cartpole"]) == (3, cartpole)
    bell = os.uname().machine in ("x86_64", "aarch64")  # futex(2) by number: skipped elsewhere, and said so
    assert ("bell" in out) == bell
    for way in ("blocking", "loop", "shared", "first", *(["bell"] if bell else [])):
        cell = out[way]
        messages = 1 if way == "first" else 3  # first-finished batches: the first half of the workers to answer
        assert cell["messages_per_batch"] == messages
        assert cell["batches_per_s"] > 0
        assert cell["cpu_us_per_message"] > 0
        assert cell["cpu_us_per_batch"] == pytest.approx(cell["cpu_us_per_message"] * messages)
    assert not proc_table(token)  # every worker of this run has exited


def test_out_writes_the_figures_as_json_and_markdown_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "bare.json"
    proc = run_python(
        "benchmarks/bare_lockstep.py", "--workers", "2", "--seconds", "0.1", "--out", str(out), timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert (figures["workers"], figures["cartpole"]) == (2, 0)
    assert figures["command"].endswith("benchmarks/bare_lockstep.py --workers 2 --seconds 0.1")  # where it wrote: not
    markdown = out.with_suffix(".md").read_text()
    assert markdown == proc.stdout  # the table it printed
    row = next(line for line in markdown.splitlines() if line.startswith("| shared |"))
    assert (
        row
        == f"| shared | {figures['shared']['cpu_us_per_message']:.1f} | {figures['shared']['cpu_us_per_batch']:.1f} | "
        + (f"{figures['shared']['batches_per_s']:,.0f} | 2 |")
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (["--seconds", "-1"], "--seconds must be > 0, got -1"),
        (["--cartpole", "-2"], "--cartpole must be >= 0, got -2"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], words: str) -> None:
    proc = run_python("benchmarks/bare_lockstep.py", *args, timeout=60)
    assert proc.returncode == 2
    assert words in proc.stderr

"""``benchmarks/recorded.py``: the command a benchmark records beside its results runs it again from the checkout's
root, and says nothing of where that run wrote its files."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scripts import ROOT, bench_module

pytestmark = pytest.mark.bench  # a benchmark script's smoke run: make test-bench, not make test


def _recorded() -> Any:
    return bench_module("recorded")


def test_out_and_its_value_are_left_out_and_the_rest_kept_in_order() -> None:
    argv = ["benchmarks/bench_core.py", "--quick", "--out", "/tmp/x/core.json", "--only", "ant-32", "--out=/tmp/y"]
    command = _recorded().command(argv, executable=str(ROOT / ".venv" / "bin" / "python"))
    assert command == ".venv/bin/python benchmarks/bench_core.py --quick --only ant-32"


def test_paths_are_from_the_root_and_an_interpreter_elsewhere_is_python() -> None:
    script = str(ROOT / "benchmarks" / "bench_small.py")  # given as an absolute path
    assert _recorded().command([script, "--sizes", "8"], executable="/usr/bin/python3") == (
        "python benchmarks/bench_small.py --sizes 8"
    )


def test_arguments_are_quoted_for_a_shell() -> None:
    command = _recorded().command(
        ["benchmarks/bench_latency.py", "--loops", "any@here,batch:16"], executable="/opt/bin/python3"
    )
    assert command == "python benchmarks/bench_latency.py --loops any@here,batch:16"
    spaced = _recorded().command(["benchmarks/bench_ppo.py", "--note", "two words"], executable="/opt/bin/python3")
    assert spaced.endswith("--note 'two words'")


def test_settings_are_the_arguments_but_out_with_paths_as_strings() -> None:
    from argparse import Namespace
    from pathlib import Path

    args = Namespace(sizes=[8, 32], quick=False, out=Path("/tmp/x/small.json"), trusted=Path("benchmarks"))
    assert _recorded().settings(args) == {"sizes": [8, 32], "quick": False, "trusted": "benchmarks"}


def test_other_options_naming_where_files_went_can_be_left_out_too() -> None:
    argv = ["benchmarks/bench_goals.py", "--run", "--results", "/tmp/r", "--out=/tmp/o", "--only", "small"]
    command = _recorded().command(argv, executable="/opt/bin/python3", drop=("--out", "--results"))
    assert command == "python benchmarks/bench_goals.py --run --only small"
    assert "--results" in _recorded().command(argv, executable="/opt/bin/python3")  # by default only --out goes

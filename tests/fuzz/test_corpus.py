"""Every input kept for the fuzz targets, replayed: the seeds, what ``make fuzz`` found that reaches new
code, and every crash it found (once fixed, a crash's input is moved here and stays as a regression
test). Each must raise nothing but the target's documented error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

CORPUS = Path(__file__).resolve().parent / "corpus"
INPUTS = sorted((target, path) for target in TARGETS for path in (CORPUS / target).glob("*"))


def test_every_target_has_a_corpus() -> None:
    for target in TARGETS:
        assert any((CORPUS / target).glob("seed-*")), f"no seeds for {target}: python -m tests.fuzz.run --seeds"


@pytest.mark.parametrize(("target", "path"), INPUTS, ids=[f"{t}/{p.name}" for t, p in INPUTS])
def test_a_kept_input_raises_only_the_documented_error(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())

"""Every Python block of docs/collect.md runs as written (each in a fresh interpreter, from the repo root)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.scripts import ROOT, run_python

pytestmark = pytest.mark.timeout(90)

DOC = ROOT / "docs" / "collect.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_the_page_has_a_block_per_use() -> None:
    text = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 5
    for use in ('mode="async"', "SyncPool", "background=True", "update_policy", "EpisodeCollector", "tensordict"):
        assert use in text, use


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"block{index}.py"
    script.write_text(BLOCKS[index])
    proc = run_python(str(script), timeout=80)
    assert proc.returncode == 0, f"block {index}:\n{BLOCKS[index]}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.strip(), f"block {index} printed nothing"

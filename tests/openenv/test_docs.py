"""docs/openenv.md runs as written: the OpenEnv environment module of "OpenEnv environments in a pool", and the pool
over it that the section shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.scripts import ROOT, run_python

pytestmark = pytest.mark.timeout(240)

DOC = ROOT / "docs" / "openenv.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_the_pool_over_the_pages_environment_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (module,) = [b for b in BLOCKS if "app = create_app(" in b]
    (main,) = [b for b in BLOCKS if "openenv+app:counter_env:app" in b]
    (tmp_path / "counter_env.py").write_text(module)
    (tmp_path / "main.py").write_text(main)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # counter_env, for the script and the app servers it starts
    proc = run_python(str(tmp_path / "main.py"), timeout=220)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "['count', 'echoed'] ['word']"
    assert "['w0' 'w1'" in lines[1]
    assert lines[-1] == "16 episodes of {3} turns, return 3.0"  # words of 10 letters: 1.0 a turn

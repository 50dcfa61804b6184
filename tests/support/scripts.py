"""Running the project's scripts (examples, the CLI) as a user runs them: a subprocess from the repo root."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(*args: str, timeout: float = 120, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess[str]:
    """``python ARGS...`` from the repo root (on PYTHONPATH, so a source checkout works), output captured,
    no input; ``pass_fds``: descriptors the child inherits."""
    env = dict(os.environ, COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        pass_fds=pass_fds,
        check=False,
    )


def run_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``examples/NAME`` with ``args``."""
    return run_python(str(ROOT / "examples" / name), *args, timeout=timeout)

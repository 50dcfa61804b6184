"""What the benchmarks that run each cell in a fresh interpreter share (bench_collect.py, bench_torchrl.py).

Kept apart from ``benchutil.py`` on purpose: a cell's process imports only what it measures, and this
module imports nothing beyond the standard library.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: The repository's root: cells run from it, with it first on ``PYTHONPATH``.
ROOT = Path(__file__).resolve().parents[1]


def versions(packages: Sequence[str] = ("aioenv", "torch", "torchrl", "tensordict", "gymnasium")) -> dict[str, str]:
    """Python's version and those of ``packages`` ("-" for one not installed)."""
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def run_fresh(script: str, args: Sequence[str], timeout: float, what: str) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a fresh interpreter; the JSON object on its last line of output.

    Raises:
        RuntimeError: it exited with a non-zero code (``what`` names it; the end of its stderr is included).
        subprocess.TimeoutExpired: it ran over ``timeout`` seconds.
    """
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited with code {done.returncode}: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result

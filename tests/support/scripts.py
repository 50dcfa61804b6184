"""Running the project's scripts (examples, the CLI) as a user runs them: a subprocess from the repo root."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def bench_module(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` loaded from its file (``benchmarks/`` is a folder of scripts, not a package), for
    tests of a benchmark's pure bookkeeping."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def run_python(*args: str, timeout: float = 120, pass_fds: Sequence[int] = ()) -> subprocess.CompletedProcess[str]:
    """``python ARGS...`` from the repo root (on PYTHONPATH, so a source checkout works), output captured,
    no input; ``pass_fds``: descriptors the child inherits.

    The script runs in a session of its own. Past ``timeout`` (or on any interruption) its whole process group
    is killed, not the script alone: a server a benchmark started, say, would otherwise live on as an orphan;
    then :class:`subprocess.TimeoutExpired` is raised, as ``subprocess.run`` raises it."""
    env = dict(os.environ, COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, *args]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, pass_fds=pass_fds, start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            kill_group(proc.pid)
            proc.communicate()  # what it wrote; the group is gone, so its pipes close
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the process group ``pgid`` (none left: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``examples/NAME`` with ``args``."""
    return run_python(str(ROOT / "examples" / name), *args, timeout=timeout)


def assert_example_refuses(name: str, args: list[str], said: str) -> None:
    """``examples/NAME`` with ``args`` stops with argparse's usage error (exit 2) saying ``said``, before it
    starts anything."""
    proc = run_example(name, *args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr

"""The suite's script runner (``tests.support.scripts.run_python``): a script that overruns its timeout takes
the processes it started with it, so a benchmark's server never outlives its smoke test."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.procs import process_gone
from tests.support.scripts import run_python

_SCRIPT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
print("started", flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(60)
def test_a_script_past_its_timeout_is_killed_with_the_processes_it_started(tmp_path: Path) -> None:
    script, pid_file = tmp_path / "hang.py", tmp_path / "child.pid"
    script.write_text(_SCRIPT)
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(str(script), str(pid_file), timeout=10)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not process_gone(child, marker="time.sleep(600)"):
        assert time.monotonic() < deadline, "the script's own child outlived the timeout"
        time.sleep(0.05)


def test_a_script_that_ends_gives_its_output_and_exit_code() -> None:
    proc = run_python("-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")

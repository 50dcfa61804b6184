"""A worker process that was closed ends without the interpreter's teardown (``workers.ending.leave``): its
``atexit`` handlers run and files left open keep what was written to them, but ``__del__`` methods of objects
alive at exit do not run. Checked in real worker processes, started afresh and forked from the template."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aioenv
from tests.envs.ending import LeavingEnv
from tests.support.procs import HANG
from workers.ending import flush_open_files


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("start", ["exec", "fork"])
@pytest.mark.parametrize("executor", ["inline", "thread"])
async def test_a_closed_worker_runs_atexit_and_flushes_open_files_but_skips_the_teardown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str, executor: str
) -> None:
    monkeypatch.setenv("AIOENV_WORKER_START", start)
    async with aioenv.Pool(LeavingEnv, 4, num_workers=2, executor=executor, env_kwargs={"path": str(tmp_path)}) as pool:
        await pool.reset()
        for _ in range(3):
            await pool.step(np.array([0, 1, 0, 1]))
    pids = sorted(p.name[len("open-") : -len(".txt")] for p in tmp_path.glob("open-*.txt"))
    assert len(pids) == 2  # one file per worker process
    for pid in pids:
        assert (tmp_path / f"open-{pid}.txt").read_text().count("step") == 6  # 2 envs x 3 steps, flushed
        assert (tmp_path / f"atexit-{pid}.txt").read_text() == "ran"
        assert not (tmp_path / f"del-{pid}.txt").exists()  # no teardown


def test_flush_open_files_flushes_files_open_for_writing_and_skips_the_others(tmp_path: Path) -> None:
    written = (tmp_path / "w.txt").open("w", buffering=1 << 16)
    readonly = (tmp_path / "w.txt").open("r")
    closed = (tmp_path / "c.txt").open("w")
    closed.close()
    written.write("kept")
    assert (tmp_path / "w.txt").read_text() == ""  # still in the buffer
    try:
        assert flush_open_files() >= 1
        assert (tmp_path / "w.txt").read_text() == "kept"
        assert closed.closed
        assert not readonly.closed  # read-only: left alone
    finally:
        written.close()
        readonly.close()

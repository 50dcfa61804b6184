"""What a fresh worker process imports before it hosts an env: a pool's own inline worker, on its pipe, needs
neither asyncio (the pool's end of the pipe does, not the worker's) nor ZeroMQ (a worker that connects to a server
does); each was ~10-20 ms of its start. A thread worker runs an event loop and imports asyncio, which shows that
the env's report sees what its process imported."""

from __future__ import annotations

import pytest

import aioenv
from aioenv.transport.zygote import WORKER_START_ENV
from tests.envs.modules import ModulesEnv
from tests.support.procs import HANG

WATCHED = ["asyncio", "zmq", "numpy", "gymnasium"]


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize(("executor", "imported"), [("inline", ["numpy", "gymnasium"]), ("thread", ["asyncio"])])
async def test_a_fresh_worker_imports_asyncio_and_zeromq_only_where_it_uses_them(
    executor: str, imported: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORKER_START_ENV, "exec")  # (a forked worker holds what its template imported for all)
    async with aioenv.Pool(ModulesEnv, 2, num_workers=2, executor=executor) as pool:
        await pool.reset(seed=0)
        await pool.step([0, 1])
        reports = await pool.call("imported", WATCHED)
    assert len(reports) == 2
    for report in reports:
        assert "zmq" not in report
        if executor == "inline":
            assert "asyncio" not in report
        assert set(imported) <= set(report)

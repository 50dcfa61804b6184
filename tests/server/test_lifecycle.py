"""A Server closes cleanly from any state (never started, started, closed twice), its life moves NEW, STARTING,
RUNNING, CLOSING, CLOSED once each (a closed server does not start again; a pool asked for while it closes is
refused), and a server that was stopped for a while does not take its own pause for its peers' silence."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv import PoolClosed, UsageError
from aioenv._loop import run
from aioenv.core.lifecycle import SERVER, Phase
from aioenv.server.peers import Sweep
from aioenv.server.server import Server, ServerConfig, serve
from aioenv.server.status import fetch_status
from tests.envs.faulty import SLOW
from tests.support.lifecycles import record
from tests.support.procs import HANG
from tests.support.servers import ServerProcess, WorkerHostProcess

PROBE = "tests.envs.faulty:make_probe"


async def test_aclose_before_start_is_a_no_op_that_leaves_it_closed() -> None:
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0"))
    path = record(server, SERVER).path
    await server.aclose()  # raised AttributeError: the idle-client sweep is set up only by start()
    assert server.closing
    assert not server.sessions
    await server.aclose()  # and again
    assert path == [Phase.CLOSING, Phase.CLOSED]
    with pytest.raises(UsageError, match="this server is closed: a server starts once"):
        await server.start()
    assert server.life.state is Phase.CLOSED


async def test_aclose_after_start_is_idempotent() -> None:
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0"))
    path = record(server, SERVER).path
    await server.start()
    endpoint = server.endpoint
    assert endpoint.startswith("tcp://127.0.0.1:")
    assert path == [Phase.STARTING, Phase.RUNNING]
    with pytest.raises(UsageError, match="this server is running: a server starts once"):
        await server.start()  # it would bind a second socket and lose the first
    await server.aclose()
    assert server.closing
    await server.aclose()  # a second close is a no-op
    assert path == [Phase.STARTING, Phase.RUNNING, Phase.CLOSING, Phase.CLOSED]
    with pytest.raises(UsageError, match="this server is closed"):
        await server.start()  # a closed server does not start again
    assert server.life.state is Phase.CLOSED


async def test_a_start_that_raised_leaves_it_starting_and_aclose_closes_it(tmp_path: Path) -> None:
    server = Server(ServerConfig(bind=f"unix://{tmp_path}/s.sock", auth=str(tmp_path)))
    path = record(server, SERVER).path
    with pytest.raises(ValueError, match="--auth"):
        await server.start()
    assert path == [Phase.STARTING]
    await server.aclose()
    assert path == [Phase.STARTING, Phase.CLOSING, Phase.CLOSED]


async def test_a_closing_server_refuses_new_pools_until_it_is_closed(gate: Any) -> None:
    """While it closes (here: a session's worker is busy in a step and answers its CLOSE only once the step
    ends) a pool asked for is refused with PoolClosed, the step in flight is answered with PoolClosed; then it
    is closed."""
    allow = ("tests.envs.*:*",)
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0", allow=allow, allow_kwargs=("tests.envs.*:*=*",)))
    await server.start()
    path = record(server, SERVER).path
    closing: asyncio.Task[None] | None = None
    pool = await aioenv.make(PROBE, 2, endpoint=server.endpoint, num_workers=1, env_kwargs=gate.kwargs())
    try:
        await asyncio.wait_for(pool.reset(seed=[10, 11]), HANG)
        slow = pool.step_env(0, SLOW)
        await gate.started(10)
        closing = asyncio.create_task(server.aclose())
        async with asyncio.timeout(HANG):
            while server.life.state is not Phase.CLOSING:
                await asyncio.sleep(0.01)
        with pytest.raises(PoolClosed, match="the server is shutting down"):
            await asyncio.wait_for(aioenv.make(PROBE, 2, endpoint=server.endpoint, num_workers=1), HANG)
        with pytest.raises(PoolClosed):
            await asyncio.wait_for(slow, HANG)
        assert path == [Phase.CLOSING]
        gate.open()
        await asyncio.wait_for(closing, HANG)
        assert path == [Phase.CLOSING, Phase.CLOSED]
    finally:
        gate.open()
        await pool.aclose()
        if closing is not None:
            await closing
        await server.aclose()


def test_a_sweep_counts_how_late_it_runs() -> None:
    sweep = Sweep(0.05)
    assert sweep.late() == 0.0  # called at once: on time
    time.sleep(0.3)  # the process "did not run" for 0.25 s beyond the interval
    assert sweep.late() >= 0.25
    assert sweep.late() == 0.0


def test_a_paused_server_keeps_its_clients_and_hosts() -> None:
    """Stopped for 4 s, longer than its client and worker-host timeouts (2 s): when it runs again, the
    heartbeats waiting in its sockets are read before anyone is judged silent, so the client's pool (whose
    own patience is 10 s) and the worker host are kept."""
    srv = ServerProcess(
        "--allow-env", "CartPole-v1", "--client-timeout", "2", "--worker-timeout", "2", "--worker-bind",
        "tcp://127.0.0.1:0", "--local-capacity", "0",
    )  # fmt: skip
    host = WorkerHostProcess(srv.worker_endpoint, name="host-a", capacity=8)
    try:
        host.wait_joined()

        async def main() -> None:
            async with aioenv.Pool("CartPole-v1", 2, endpoint=srv.endpoint, num_workers=1) as pool:
                await pool.reset(seed=0)
                os.kill(srv.proc.pid, signal.SIGSTOP)
                await asyncio.sleep(4.0)
                os.kill(srv.proc.pid, signal.SIGCONT)
                for _ in range(20):
                    await asyncio.wait_for(pool.step(np.zeros(2, np.int64)), HANG)
                    await asyncio.sleep(0.1)  # 2 s of use after the pause: past any late sweep
                status = await fetch_status(srv.endpoint)
                assert [row["name"] for row in status["hosts"]] == ["host-a"]

        aioenv.run(main())
    finally:
        host.stop()
        srv.stop()
    assert not [line for line in srv.log if "silent for" in line], "".join(srv.log)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_serve_gives_sigint_and_sigterm_back_when_it_returns() -> None:
    # serve() runs on aioenv's loop (uvloop) in this, the main, thread; SIGTERM stops it. Afterwards Ctrl-C
    # raises KeyboardInterrupt again and SIGTERM is back to its default: a program that served for a while
    # and goes on is not left with signals that do nothing.
    stopped: list[str] = []

    def ready(server: Server) -> None:
        stopped.append(server.endpoint)
        os.kill(os.getpid(), signal.SIGTERM)  # taken by serve()'s own handler

    run(serve(ServerConfig(bind="tcp://127.0.0.1:0"), ready))
    assert stopped
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

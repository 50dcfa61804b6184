"""``aioenv serve --bind unix:///path``: what a server on a unix socket does of its own.

What a remote pool does is the same over both transports (tests/server/test_server.py runs those tests on
each, a dead client's release included); here: a connection's end is known at once (a pool whose server
died, a client gone while its pool is made), a client that breaks the framing or goes over the message
bound loses its connection alone, the command line's checks and the example.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import aioenv
from aioenv.core import remote
from aioenv.errors import ConnectionLost
from aioenv.server.status import fetch_status
from aioenv.transport.pipe import framed
from aioenv.transport.stream import StreamDealer, unix_path
from aioenv.wire.protocol import Key, Op, encode
from tests.support.procs import HANG, process_gone
from tests.support.scripts import ROOT, assert_example_refuses, run_example
from tests.support.servers import ServerProcess, unix_bind

CLI = [sys.executable, "-m", "aioenv.cli"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def test_a_client_gone_while_its_pool_is_made_leaves_nothing_behind() -> None:
    srv = ServerProcess(
        "--client-timeout", "3600", "--allow-env", "tests.envs.*:*", "--allow-env-kwargs", "tests.envs.*:*=*",
        bind="unix",
    )  # fmt: skip
    try:

        async def open_then_leave() -> None:
            dealer = StreamDealer(srv.endpoint, lambda _frames: None, lambda _reason: None)
            fields = {Key.ENV: "tests.envs.faulty:make_probe", Key.NUM_ENVS: 2, Key.KW: {"init_seconds": 1.0}}
            dealer.send(encode(Op.OPEN, {**fields, Key.OPT: {"num_workers": 1}, Key.ID: -1}))
            deadline = time.monotonic() + HANG
            while not srv.workers():  # its worker process is making the (slow) envs now
                assert time.monotonic() < deadline, "the server never started the pool's worker"
                await asyncio.sleep(0.01)
            dealer.close()

        aioenv.run(open_then_leave())
        deadline = time.monotonic() + HANG
        while srv.workers() or aioenv.run(fetch_status(srv.endpoint))["sessions"]:
            assert time.monotonic() < deadline, "a pool made for a client that had left stayed"
            time.sleep(0.05)
        # logged once the pool is closed, which its workers' exit may precede by a moment
        while not any("connection ended while its pool was being made" in line for line in srv.log):
            assert time.monotonic() < deadline, srv.log
            time.sleep(0.05)
    finally:
        srv.stop()


async def test_a_server_that_dies_fails_the_pool_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 3600.0)  # only the connection's end can tell
    srv = ServerProcess(bind="unix")
    path = unix_path(srv.endpoint)
    pool = await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint)
    try:
        await pool.reset()
        workers = srv.workers()
        os.kill(srv.proc.pid, 9)  # no "closing" event: the connection's end is all the pool hears
        srv.proc.wait()
        with pytest.raises(ConnectionLost, match="aioenv server at unix://"):
            await asyncio.wait_for(pool.step(np.zeros(2, np.int64)), HANG)
        with pytest.raises(ConnectionLost, match="the server closed the connection"):
            await pool.step(np.zeros(2, np.int64))
        deadline = time.monotonic() + HANG
        while not all(process_gone(pid) for pid in workers):  # its pipes closed: they exit by themselves
            assert time.monotonic() < deadline, "a dead server's workers stayed"
            time.sleep(0.05)
    finally:
        await pool.aclose()
        assert srv.proc.stderr is not None
        srv.proc.stderr.close()
        os.unlink(path)  # a server killed by SIGKILL leaves its socket file (the next one replaces it)
        os.rmdir(os.path.dirname(path))


async def test_garbage_and_oversized_messages_cost_only_their_connection() -> None:
    srv = ServerProcess("--max-message-bytes", "65536", bind="unix")
    try:
        async with aioenv.Pool("CartPole-v1", 2, endpoint=srv.endpoint, seed=0) as pool:
            await pool.reset()
            path = unix_path(srv.endpoint)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.connect(path)
                raw.sendall(struct.pack("<I", 1 << 30) + os.urandom(256))  # no framing at all
                assert raw.recv(1) == b""  # the server closed this connection
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.connect(path)
                prefix = framed([b"\x80" * (1 << 20)])[0][0]
                raw.sendall(prefix + b"\x80" * 4096)  # announces 1 MiB over a 64 KiB bound: cut before it comes
                assert raw.recv(1) == b""
            _, reward, *_ = await pool.step(np.array([0, 1]))  # and this pool goes on
            assert reward.tolist() == [1.0, 1.0]
            assert (await fetch_status(srv.endpoint))["protocol_errors"] == 2
        assert sum("protocol error from client" in line for line in srv.log) == 2
    finally:
        srv.stop()


def test_command_line_and_options() -> None:
    srv = ServerProcess(bind="unix")
    try:
        shown = subprocess.run([*CLI, "status", srv.endpoint], capture_output=True, text=True, env=ENV)
        assert shown.returncode == 0, shown.stderr
        assert "clients / pools" in shown.stdout
        taken = subprocess.run([*CLI, "serve", "--bind", srv.endpoint], capture_output=True, text=True, env=ENV)
        assert taken.returncode == 1
        assert f"cannot serve on {srv.endpoint}" in taken.stderr
        assert "already listens" in taken.stderr
        key = str(ROOT / "pyproject.toml")  # any file: refused before it is read
        keyed = subprocess.run(
            [*CLI, "status", srv.endpoint, "--key", key, "--server-key", key], capture_output=True, text=True, env=ENV
        )
        assert keyed.returncode == 2
        assert "a unix:// socket has no CURVE" in keyed.stderr
        with pytest.raises(ValueError, match="curve_keys are for tcp:// servers"):
            aioenv.Pool("CartPole-v1", 1, endpoint=srv.endpoint, curve_keys=("a", "b"))
    finally:
        srv.stop()
    gone = subprocess.run([*CLI, "status", srv.endpoint, "--timeout", "1"], capture_output=True, text=True, env=ENV)
    assert gone.returncode == 1
    assert f"cannot connect to the aioenv server at {srv.endpoint}" in gone.stderr
    with pytest.raises(ConnectionLost, match=r"is `aioenv serve --bind unix://.*` running"):
        aioenv.run(aioenv.make("CartPole-v1", 1, endpoint=srv.endpoint))
    address, where = unix_bind()
    keys = os.path.join(where, "keys")
    os.mkdir(keys)
    auth = subprocess.run([*CLI, "serve", "--bind", address, "--auth", keys], capture_output=True, text=True, env=ENV)
    assert auth.returncode == 1
    assert "a unix:// socket is guarded by its file's mode" in auth.stderr
    os.rmdir(keys)
    os.rmdir(where)


def test_shared_server_example_runs() -> None:
    proc = run_example("shared_server.py", "--num-envs", "8", "--seconds", "0.3", timeout=HANG * 3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"server listening on unix:///tmp/aioenv-example-\S+/aioenv.sock", out), out
    assert re.search(r"socket file mode\s+0o600", out), out
    assert re.search(r"sessions / envs\s+1 / 8", out), out  # the remote pool of the comparison
    assert re.search(r"same trajectories\s+yes", out), out
    assert float(re.search(r"steps/s, unix socket\s+([\d,]+)", out).group(1).replace(",", "")) > 0  # type: ignore[union-attr]
    assert re.search(r"server exit code\s+0", out), out
    assert re.search(r"socket file removed\s+yes", out), out
    assert_example_refuses("shared_server.py", ["--num-envs", "1"], "--num-envs must be at least 2")

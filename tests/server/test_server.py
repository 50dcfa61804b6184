"""``aioenv serve`` and remote pools, over real tcp, with the server in its own process.

The server runs as a user runs it (``python -m aioenv.cli serve``); clients are pools in this
process (``endpoint=``) or client processes of their own. Every test stops its server with SIGTERM
and checks it exits 0 and leaves none of its worker processes behind. The tests of what a remote pool
does (``any_server``) run over both transports: ZeroMQ on tcp and a unix socket (``unix://``, see
tests/server/test_unix_socket.py for what is its own).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

import aioenv
from aioenv.core import remote
from aioenv.errors import CapacityError, ConnectionLost, EnvError, PoolClosed, StepTimeout, UsageError, WorkerCrashed
from aioenv.server.status import fetch_status
from aioenv.wire.protocol import Op, decode, encode, pack
from tests.support.procs import HANG, proc_table, process_gone, templates_of, workers_of
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess

PROBE = "tests.envs.faulty:make_probe"
# the test envs with any env_kwargs, CartPole with the one these tests pass
ALLOW = ("--allow-env", "CartPole-*", "--allow-env", "tests.envs.*:*", "--allow-env-kwargs", "tests.envs.*:*=*")
ALLOW += ("--allow-env-kwargs", "CartPole-*=max_episode_steps")


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess(*ALLOW)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=["tcp", "unix"])
def any_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """The same server on ZeroMQ over tcp, then on a unix socket: a remote pool behaves the same over both."""
    bind = "tcp://127.0.0.1:0" if request.param == "tcp" else "unix"
    srv = ServerProcess(*ALLOW, bind=bind)
    try:
        yield srv
    finally:
        srv.stop()


def acts(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------- the same pool, over the network


@pytest.mark.parametrize("executor", ["inline", "thread"])
async def test_remote_pool_gives_the_embedded_trajectories(any_server: ServerProcess, executor: str) -> None:
    """(A server's thread workers record their rows on its done pipe, CartPole's having no infos: relayed from
    there as a RESULT naming them would be.)"""
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, size=6) for _ in range(80)]
    options: dict[str, Any] = {"seed": 3, "env_kwargs": {"max_episode_steps": 25}, "num_workers": 2}
    async with (
        aioenv.Pool("CartPole-v1", 6, endpoint=any_server.endpoint, executor=executor, **options) as remote_pool,
        aioenv.Pool("CartPole-v1", 6, executor="inline", **options) as local_pool,
    ):
        assert remote_pool.observation_space == local_pool.observation_space
        assert remote_pool.action_space == local_pool.action_space
        for a, b in zip(await remote_pool.reset(), await local_pool.reset(), strict=True):
            _same(a, b)
        for action in actions:
            got, expected = await remote_pool.step(action), await local_pool.step(action)
            for a, b in zip(got, expected, strict=True):
                _same(a, b)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    else:
        np.testing.assert_array_equal(a, b, strict=True)


async def test_remote_pool_api(any_server: ServerProcess) -> None:
    async with aioenv.Pool(PROBE, 4, endpoint=any_server.endpoint, batch_size=2, seed=10) as pool:
        assert pool.num_workers == 2
        assert pool.executor == "inline"
        obs, info = await pool.reset()
        assert info["env_id"].tolist() == [0, 1, 2, 3]
        assert obs[:, 0].tolist() == [10, 11, 12, 13]
        pool.send(acts(0, 1, 0, 1))
        _, _, _, _, first = await pool.recv()
        _, _, _, _, second = await pool.recv()
        assert sorted([*first["env_id"].tolist(), *second["env_id"].tolist()]) == [0, 1, 2, 3]
        result = await pool.step_env(2, 1)
        assert result.env_id == 2
        assert result.obs[1] == 2
        reset = await pool.reset_env(3, seed=99)
        assert reset.obs[0] == 99
        assert reset.info["pid"] > 0
        assert await pool.get_attr("tag") == [0, 0, 0, 0]
        await pool.set_attr("tag", [1, 2, 3, 4])
        assert await pool.get_attr("tag", env_ids=[3, 0]) == [4, 1]
        assert await pool.call("get_wrapper_attr", "tag", env_ids=[1]) == [2]
        pool.step_env(0, 0)
        with pytest.raises(UsageError, match="already has a request in flight"):
            pool.step_env(0, 0)
        await asyncio.sleep(0.2)


async def test_sync_pool_with_endpoint(any_server: ServerProcess) -> None:
    def run() -> list[float]:
        with aioenv.SyncPool("CartPole-v1", 2, endpoint=any_server.endpoint, seed=0) as pool:
            pool.reset()
            return pool.step(acts(1, 0))[1].tolist()

    assert await asyncio.to_thread(run) == [1.0, 1.0]


# ---------------------------------------------------------------- failures cross the network intact


async def test_env_errors_timeouts_and_crashes_reach_the_client(any_server: ServerProcess) -> None:
    async with aioenv.Pool(
        PROBE, 2, endpoint=any_server.endpoint, num_workers=2, step_timeout=1.0, env_kwargs={"fail_at": 2}
    ) as pool:
        _, info = await pool.reset(seed=0)
        await pool.step(acts(0, 0))
        with pytest.raises(EnvError) as caught:
            await pool.step(acts(0, 0))
        err = caught.value
        assert err.remote_type == "RuntimeError"
        assert "boom" in err.remote_message
        assert "explode_on_purpose" in err.remote_traceback  # the worker's traceback, through the server
        assert err.partial is None or err.errors.keys() == {0, 1}
        await pool.reset(seed=0)
        with pytest.raises(StepTimeout):
            await pool.step(acts(2, 0), env_ids=[0, 1])  # the slow action overruns the deadline
        _, info = await pool.reset()
        os.kill(int(info["pid"][1]), signal.SIGKILL)  # the server's worker hosting env 1
        with pytest.raises(WorkerCrashed):  # in flight, or re-made since (EnvRemade): a crash either way
            await asyncio.wait_for(pool.step(acts(0), env_ids=[1]), HANG)


# ---------------------------------------------------------------- sessions, admission, liveness


async def test_two_clients_are_isolated(any_server: ServerProcess) -> None:
    async with aioenv.Pool(PROBE, 2, endpoint=any_server.endpoint, seed=0) as a:
        b = await aioenv.make(PROBE, 3, endpoint=any_server.endpoint, seed=100)
        await a.reset()
        obs_b, _ = await b.reset()
        assert obs_b[:, 0].tolist() == [100, 101, 102]
        state = await fetch_status(any_server.endpoint)
        assert state["sessions"] == 2
        assert state["envs"] == 5
        await b.aclose()
        obs, *_ = await a.step(acts(1, 1))
        assert obs[:, 1].tolist() == [1, 1]
        assert (await fetch_status(any_server.endpoint))["envs"] == 2


def test_allow_env_and_names_only() -> None:
    srv = ServerProcess(*ALLOW)
    try:

        async def main() -> None:
            with pytest.raises(UsageError, match=r"'Acrobot-v1' is not allowed .*CartPole-\*"):
                await aioenv.make("Acrobot-v1", 2, endpoint=srv.endpoint)
            async with aioenv.Pool("CartPole-v1", 2, endpoint=srv.endpoint) as pool:
                await pool.reset()

        aioenv.run(main())
        with pytest.raises(TypeError, match="names only"):
            aioenv.Pool(lambda: None, 2, endpoint=srv.endpoint)
    finally:
        srv.stop()
    from aioenv.core.remote import CLIENT_ID

    refused = [line for line in srv.log if "refused a pool for client" in line]  # named as in other lines
    assert len(refused) == 1, refused
    assert f"client {CLIENT_ID}-" in refused[0], refused
    assert "b'" not in refused[0], refused


def test_capacity_limits_name_the_counts() -> None:
    """Without --auth a client is its connection, and each pool has a connection of its own: the limit per client
    bounds each pool; the total bounds them all."""
    srv = ServerProcess("--max-envs", "6", "--max-envs-per-client", "4")
    try:

        async def main() -> None:
            with pytest.raises(CapacityError, match="it has 0 active and the server allows 4 per client"):
                await aioenv.make("CartPole-v1", 5, endpoint=srv.endpoint)
            async with aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint):
                other = _client_process(srv.endpoint, 3)  # another client: the total limit applies
                out, _ = other.communicate(timeout=HANG)
                assert "CapacityError" in out
                assert "4 are active and the server allows 6" in out

        aioenv.run(main())
    finally:
        srv.stop()


def _client_process(endpoint: str, n: int, *, hold: bool = False) -> subprocess.Popen[str]:
    code = (
        "import asyncio, sys, aioenv\n"
        "async def main():\n"
        f"    pool = await aioenv.make('CartPole-v1', {n}, endpoint={endpoint!r})\n"
        "    await pool.reset()\n"
        "    print('ready', flush=True)\n"
        f"    await asyncio.sleep({3600 if hold else 0})\n"
        "try:\n"
        "    aioenv.run(main())\n"
        "except aioenv.AioEnvError as exc:\n"
        "    print(type(exc).__name__, exc, flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_client_that_dies_has_its_envs_released(transport: str) -> None:
    # Over ZeroMQ only the missing heartbeats tell (a second of silence here); on a unix socket the connection's
    # end tells at once (silence alone would take an hour).
    if transport == "tcp":
        srv = ServerProcess("--client-timeout", "1")
    else:
        srv = ServerProcess("--client-timeout", "3600", bind="unix")
    try:
        client = _client_process(srv.endpoint, 3, hold=True)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "ready"
        workers = srv.workers()
        assert len(workers) == 2
        client.kill()  # no goodbye
        client.wait()
        client.stdout.close()
        deadline = time.monotonic() + HANG
        while aioenv.run(fetch_status(srv.endpoint))["envs"] != 0:
            assert time.monotonic() < deadline, "the dead client's envs were never released"
            time.sleep(0.05)
        while not all(process_gone(pid) for pid in workers):
            assert time.monotonic() < deadline, "the dead client's workers were never stopped"
            time.sleep(0.05)
        why = "silent for" if transport == "tcp" else "connection ended: releasing its 3 envs"
        srv.wait_log(re.escape(why))  # (the status can answer before the server's log line is read here)
    finally:
        srv.stop()


async def test_a_server_that_never_answers_fails_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "HEARTBEAT", 0.1)
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionLost, match="has not answered"):
        await aioenv.make("CartPole-v1", 2, endpoint=f"tcp://127.0.0.1:{port}")


@pytest.mark.parametrize(("start", "forked"), [(None, True), ("exec", False)])
async def test_a_servers_local_workers_are_forked_from_its_template_unless_told(
    monkeypatch: pytest.MonkeyPatch, start: str | None, forked: bool
) -> None:
    # A server makes a pool for each client that asks: its workers are forks of a template that made its imports
    # once (milliseconds), not fresh interpreters (~0.3 s of CPU each), unless AIOENV_WORKER_START says exec.
    if start is None:
        monkeypatch.delenv("AIOENV_WORKER_START", raising=False)
    else:
        monkeypatch.setenv("AIOENV_WORKER_START", start)
    srv = ServerProcess(*ALLOW)
    try:
        async with aioenv.Pool("CartPole-v1", 2, num_workers=2, endpoint=srv.endpoint) as pool:
            await pool.reset(seed=0)
            templates = set(templates_of(srv.proc.pid))
            workers = workers_of(srv.proc.pid)  # forked from its templates, or its own children
            forks = [p.pid for p in proc_table() if p.pid in workers and p.ppid in templates]
            assert (len(forks), len(workers) - len(forks)) == ((2, 0) if forked else (0, 2)), (workers, templates)
    finally:
        srv.stop()


async def test_a_server_slower_to_open_than_the_clients_timeout_is_not_given_up_while_it_answers_pings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The client's timeout below its default PING interval (1 s): it must PING often enough to hear the server
    # before it gives up, while the server opens the pool (here an env whose making takes 2.5 s; a loaded machine
    # starting workers takes its time too). Before, the first beat came after 1 s of silence and gave up.
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 1.0)
    srv = ServerProcess(*ALLOW)
    try:
        slow = {"init_seconds": 2.5}
        async with aioenv.Pool(PROBE, 2, num_workers=1, endpoint=srv.endpoint, env_kwargs=slow) as pool:
            await pool.reset(seed=0)
            obs, *_ = await asyncio.wait_for(pool.step(acts(0, 0)), HANG)
            assert obs.shape[0] == 2
    finally:
        srv.stop()


@pytest.mark.parametrize("transport", ["tcp", "unix"])
async def test_a_client_whose_own_loop_stalls_does_not_take_it_for_the_servers_silence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, transport: str
) -> None:
    # The caller's code blocks this loop (a training step, a big comparison, a loaded machine) for longer than the
    # client's timeout: the server's replies wait unread in the socket meanwhile, so the pool must go on. The server
    # keeps its own timeout (10 s), which this stall stays below.
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 1.0)
    bind = ["--bind", f"unix://{tmp_path}/s.sock"] if transport == "unix" else []
    srv = ServerProcess(*ALLOW, *bind)
    try:
        async with aioenv.Pool("CartPole-v1", 2, num_workers=1, endpoint=srv.endpoint) as pool:
            await pool.reset(seed=0)
            await pool.step(acts(0, 0))
            time.sleep(2.5)  # this loop does not run: no PING goes out, no reply is read
            obs, *_ = await asyncio.wait_for(pool.step(acts(1, 1)), HANG)
            assert obs.shape == (2, 4)
            await asyncio.sleep(1.5)  # the heartbeat runs on time again, the server answering
            await asyncio.wait_for(pool.step(acts(0, 1)), HANG)
    finally:
        srv.stop()


async def test_server_shutdown_answers_requests_in_flight(tmp_path: Path) -> None:
    srv = ServerProcess(*ALLOW)
    try:
        pool = await aioenv.make(PROBE, 2, endpoint=srv.endpoint, env_kwargs={"slow_seconds": 60})
        await pool.reset()
        pending = pool.step_env(0, 2)  # slow: still running when the server is told to stop
        await asyncio.sleep(0.5)
        srv.proc.send_signal(signal.SIGTERM)
        with pytest.raises(PoolClosed):
            await asyncio.wait_for(pending, HANG)
        with pytest.raises(ConnectionLost, match="shut down"):  # told at once, not at a heartbeat timeout
            await pool.step(acts(0, 0))
        await pool.aclose()
    finally:
        srv.stop()


def test_code_names_need_an_explicit_allow() -> None:
    srv = ServerProcess()
    try:

        async def main() -> None:
            with pytest.raises(UsageError, match="gymnasium ids only"):
                await aioenv.make("os:makedirs", 1, endpoint=srv.endpoint, env_kwargs={"name": "/tmp/x"})
            async with aioenv.Pool("CartPole-v1", 1, endpoint=srv.endpoint) as pool:
                await pool.reset()

        aioenv.run(main())
    finally:
        srv.stop()


# ---------------------------------------------------------------- garbage on the port


async def test_garbage_never_stops_the_server(server: ServerProcess) -> None:
    host, port = server.endpoint.removeprefix("tcp://").split(":")
    with socket.create_connection((host, int(port))) as raw:  # not even ZeroMQ
        raw.sendall(os.urandom(4096))
    ctx = zmq.Context.instance()
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    peer.connect(server.endpoint)
    try:
        replies = []
        for frames in (
            [b"\xc1 not msgpack"],  # malformed header
            [pack({"v": 999, "op": "status", "id": 5})],  # another protocol version
            encode(Op.STEP, {"id": 7, "env": [0]}),  # a step without a pool
            encode("dance", {"id": 8}),  # an unknown op
            [pack({"v": 1, "op": "status", "id": 9}), b"stray frame"],  # a frame nobody describes
            [b"\x80" * (65 << 20)],  # a 65 MiB "header", over the 64 MiB limit
        ):
            peer.send_multipart(frames)
            header, _ = decode(peer.recv_multipart())
            replies.append(header)
        assert [r["op"] for r in replies] == [Op.ERROR] * 6
        assert "exceeds the limit" in replies[5]["error"]["message"]
        assert "version" in replies[1]["error"]["message"]
        assert "999" in replies[1]["error"]["message"]
        assert replies[2]["id"] == 7
        assert "no open pool" in replies[2]["error"]["message"]
        assert replies[3]["error"]["kind"] == "ProtocolError"
    finally:
        peer.close()
    async with aioenv.Pool("CartPole-v1", 2, endpoint=server.endpoint) as pool:  # and it still serves
        await pool.reset()
        await pool.step(acts(0, 1))
    assert (await fetch_status(server.endpoint))["protocol_errors"] >= 5


# ---------------------------------------------------------------- aioenv status


def test_status_command(server: ServerProcess) -> None:
    aioenv_cli = [sys.executable, "-m", "aioenv.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    shown = subprocess.run([*aioenv_cli, "status", server.endpoint], capture_output=True, text=True, env=env)
    assert shown.returncode == 0
    assert "clients / pools" in shown.stdout
    quiet = subprocess.run([*aioenv_cli, "status", server.endpoint, "--quiet"], capture_output=True, env=env)
    assert quiet.returncode == 0
    assert quiet.stdout == b""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    gone = subprocess.run([*aioenv_cli, "status", dead, "--quiet", "--timeout", "0.5"], capture_output=True, env=env)
    assert gone.returncode == 1
    bad = subprocess.run([*aioenv_cli, "status", "not-an-endpoint"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "got 'not-an-endpoint'" in bad.stderr


# ---------------------------------------------------------------- CURVE authentication


def test_curve_auth_admits_only_known_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "HEARTBEAT", 0.1)
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 1.5)
    keys, strangers = tmp_path / "keys", tmp_path / "strangers"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for directory, name in ((keys, "server"), (keys, "alice"), (strangers, "mallory")):
        made = subprocess.run(
            [sys.executable, "-m", "aioenv.cli", "keygen", str(directory), "--name", name],
            capture_output=True,
            text=True,
            env=env,
        )
        assert made.returncode == 0, made.stderr
    assert (keys / "alice.key").exists()
    assert oct((keys / "alice.key_secret").stat().st_mode)[-3:] == "600"
    srv = ServerProcess("--auth", str(keys))
    try:

        async def main() -> None:
            alice = (str(keys / "alice.key_secret"), str(keys / "server.key"))
            async with aioenv.Pool("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=alice) as pool:
                await pool.reset()
                await pool.step(acts(0, 1))
            mallory = (str(strangers / "mallory.key_secret"), str(keys / "server.key"))
            with pytest.raises(ConnectionLost):  # refused at the handshake: no reply of any kind
                await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=mallory)
            with pytest.raises(ConnectionLost):  # no keys at all
                await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint)
            itself = (str(keys / "server.key_secret"), str(keys / "server.key"))
            with pytest.raises(ConnectionLost):  # server.key tells clients who the server is: it admits nobody
                await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=itself)
            state = await fetch_status(srv.endpoint, curve_keys=alice)
            assert state["envs"] == 0  # nothing was made for the refused clients
            with pytest.raises(TimeoutError):
                await fetch_status(srv.endpoint, timeout=1.0)

        aioenv.run(main())
    finally:
        srv.stop()
    refused = subprocess.run(
        [sys.executable, "-m", "aioenv.cli", "keygen", str(keys), "--name", "alice"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode != 0
    assert "exists" in refused.stderr
    with pytest.raises(ValueError, match="endpoint"):
        aioenv.Pool("CartPole-v1", 2, curve_keys=("a", "b"))


# ---------------------------------------------------------------- metrics and logs


def test_metrics_and_json_logs(tmp_path: Path) -> None:
    import json
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = ServerProcess("--metrics-port", str(port), "--log-json", "--log-level", "DEBUG", *ALLOW)
    try:

        async def main() -> str:
            async with aioenv.Pool(
                PROBE, 2, endpoint=srv.endpoint, step_timeout=0.5, env_kwargs={"slow_seconds": 30}
            ) as pool:
                await pool.reset()
                for _ in range(5):
                    await pool.step(acts(0, 0))
                with pytest.raises(StepTimeout):
                    await pool.step(acts(2, 0))  # one row past its deadline: its worker is restarted
                # a thread worker's rows cross to the client as a block: counted alike, its errors by type
                async with aioenv.Pool(
                    PROBE, 3, endpoint=srv.endpoint, executor="thread", env_kwargs={"fail_at": 2}
                ) as threaded:
                    await threaded.reset()
                    await threaded.step(acts(0, 0, 0))
                    with pytest.raises(EnvError):
                        await threaded.step(acts(0, 0, 0))  # every env raises in its 2nd step
                    text = await asyncio.to_thread(
                        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=HANG).read().decode()
                    )
            return text

        text = aioenv.run(main())
    finally:
        srv.stop()

    def value(name: str) -> float:
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert found is not None, f"{name} not in the metrics:\n{text}"
        return float(found.group(1))

    assert value('aioenv_request_seconds_count{kind="step"}') == 12 + 6  # (6 steps x 2 envs) + (2 x 3), each row once
    assert value('aioenv_request_seconds_count{kind="reset"}') == 2 + 3
    assert value('aioenv_errors_total{type="StepTimeout"}') == 1
    assert value('aioenv_errors_total{type="EnvError"}') == 3
    assert value("aioenv_timeouts_total") == 1
    assert value('aioenv_envs{state="made"}') == 2 + 3
    assert value("aioenv_pools") == 2
    assert value("aioenv_clients") == 2  # without --auth, a client is a connection: each pool has its own
    assert value("aioenv_worker_restarts_total") >= 1
    lines = [json.loads(line) for line in "".join(srv.log).splitlines() if line.strip()]
    assert any("listening on" in line["message"] and line["level"] == "INFO" for line in lines)
    failed = [line for line in lines if "error" in line and "request_id" in line]
    timeouts = [line for line in failed if line["error"] == "StepTimeout"]
    assert len(timeouts) == 1, failed
    late = timeouts[0]
    assert late["level"] == "WARNING"
    assert late["kind"] == "step"
    assert late["env_ids"] == [0]
    assert isinstance(late["request_id"], int)
    assert late["client"].startswith(f"{remote.CLIENT_ID}-")  # its connection (named after the process, a suffix each)
    assert f"request {late['request_id']}: step failed for envs [0]: StepTimeout" in late["message"]
    # the thread pool's rows come back in blocks as they finish: a line per block, one request id
    raised = [line for line in failed if line["error"] == "EnvError"]
    assert sorted(e for line in raised for e in line["env_ids"]) == [0, 1, 2], failed
    assert len({line["request_id"] for line in raised}) == 1, raised
    assert all(line["level"] == "INFO" and line["kind"] == "step" for line in raised)
    # at DEBUG every request is logged as it arrives, with the same ids
    arrived = [line for line in lines if line["level"] == "DEBUG" and "request_id" in line]
    assert len(arrived) == (1 + 5 + 1) + (1 + 2)  # a reset and 6 steps, then a reset and 2 steps
    (arrival,) = [
        line
        for line in arrived
        if line["request_id"] == late["request_id"] and line["client"] == late["client"] and line["env_ids"] == [0, 1]
    ]
    assert arrival["kind"] == "step"


# ---------------------------------------------------------------- another "host": a network namespace


def test_server_on_another_host_address(other_host: tuple[str, str, str]) -> None:
    ns, address, _ = other_host
    # --insecure: the address is on this test's own veth pair, which only its namespace shares
    srv = ServerProcess("--insecure", bind=f"tcp://{address}:0", prefix=("ip", "netns", "exec", ns))
    try:
        assert srv.endpoint.startswith(f"tcp://{address}:")

        async def main() -> None:
            async with aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint, seed=0) as pool:
                obs, _ = await pool.reset()
                for _ in range(20):
                    obs, *_ = await pool.step(acts(0, 1, 0, 1))
                assert obs.shape == (4, 4)
                state = await fetch_status(srv.endpoint)
                assert state["envs"] == 4
                assert state["endpoint"] == srv.endpoint

        aioenv.run(main())
        # and it listens in that namespace only: the server's network namespace is not this process's. (A connect
        # to its port number on this host's loopback could not tell: another test's server may listen on the same
        # number here, as one did once in a parallel run.)
        assert os.readlink(f"/proc/{srv.proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    finally:
        srv.stop()

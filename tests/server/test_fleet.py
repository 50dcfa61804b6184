"""Worker hosts (``aioenv worker --connect``) joining a server (``aioenv serve --worker-bind``).

Everything runs as users run it: the server, each worker host and its worker processes are separate
processes talking over real tcp; the pools are clients in this process. Each test stops its hosts
and server with SIGTERM and checks they exit 0 and leave no worker process behind. One test runs the
server in this process, to read a worker slot's state as its host is lost and another joins.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

import aioenv
from aioenv.core.recovery import SLOT, SlotState
from aioenv.errors import CapacityError, EnvRemade, WorkerCrashed
from aioenv.server.fleet import Fleet
from aioenv.server.server import Server, ServerConfig
from aioenv.server.status import fetch_status
from aioenv.wire.protocol import Op, decode, encode
from tests.support.lifecycles import record
from tests.support.procs import HANG, proc_table, process_gone, templates_of, workers_of
from tests.support.scripts import ROOT, assert_example_refuses, run_example
from tests.support.servers import ServerProcess, WorkerHostProcess

PROBE = "tests.envs.faulty:make_probe"
SLOW = 2  # the probe's slow action: it waits ``slow_seconds``


@pytest.fixture
def hosts() -> Iterator[list[WorkerHostProcess]]:
    """Worker hosts a test started (stopped, and checked, at its end)."""
    started: list[WorkerHostProcess] = []
    try:
        yield started
    finally:
        for host in started:
            host.stop()


def _join(hosts: list[WorkerHostProcess], srv: ServerProcess, name: str, capacity: int) -> WorkerHostProcess:
    """Start a worker host for ``srv`` (stopped with the test's other hosts) and wait until it joined."""
    host = WorkerHostProcess(srv.worker_endpoint, name=name, capacity=capacity)
    hosts.append(host)
    return host.wait_joined()


def _server(*args: str, bind: str = "tcp://127.0.0.1:0", worker_bind: str = "tcp://127.0.0.1:0") -> ServerProcess:
    allow = ("--allow-env", "tests.envs.*:*", "--allow-env", "aioenv.envs.*:*", "--allow-env", "CartPole-*")
    allow += ("--allow-env-kwargs", "tests.envs.*:*=*", "--allow-env-kwargs", "aioenv.envs.*:*=*")
    return ServerProcess("--worker-bind", worker_bind, *allow, *args, bind=bind)


def _loads(state: dict[str, Any]) -> dict[str, int]:
    return {row["name"]: row["envs"] for row in state["hosts"]}


def _host_of(pid: int, hosts: list[WorkerHostProcess]) -> str:
    """The name of the host whose worker process ``pid`` is (forked from its template or started by it)."""
    return next(h.name for h in hosts if pid in workers_of(h.proc.pid))


async def _until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(HANG):
        while not await predicate():
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------- placement


def test_pools_go_to_the_least_loaded_host_with_room(hosts: list[WorkerHostProcess]) -> None:
    srv = _server("--local-capacity", "0")
    try:
        a = WorkerHostProcess(srv.worker_endpoint, name="host-a", capacity=8)
        b = WorkerHostProcess(srv.worker_endpoint, name="host-b", capacity=8)
        hosts += [a.wait_joined(), b.wait_joined()]

        async def main() -> None:
            opts: dict[str, Any] = {"endpoint": srv.endpoint, "num_workers": 1, "seed": 0}
            async with aioenv.Pool(PROBE, 4, **opts) as p1, aioenv.Pool(PROBE, 4, **opts) as p2:
                _, i1 = await p1.reset()
                _, i2 = await p2.reset()
                first, second = _host_of(int(i1["pid"][0]), hosts), _host_of(int(i2["pid"][0]), hosts)
                assert {first, second} == {"host-a", "host-b"}  # the second pool went to the idle host
                assert _loads(await fetch_status(srv.endpoint)) == {"host-a": 4, "host-b": 4}
                obs, *_ = await p1.step(np.array([1, 1, 0, 1]))
                assert obs[:, 0].tolist() == [0, 1, 2, 3]
                assert obs[:, 1].tolist() == [1, 1, 1, 1]
                with pytest.raises(CapacityError, match=r"no worker host has room for 6 .*host-a 4/8"):
                    await aioenv.make(PROBE, 6, **opts)
                with pytest.raises(CapacityError, match=r"^no worker host runs thread envs: hosts: .*host-a") as caught:
                    await aioenv.make(PROBE, 2, **opts, executor="thread")
                assert "num_workers" not in caught.value.message  # more blocks would not help
                async with aioenv.Pool(PROBE, 3, **opts) as p3:  # fits beside either pool
                    await p3.reset()
                    assert sorted(_loads(await fetch_status(srv.endpoint)).values()) == [4, 7]
            assert _loads(await fetch_status(srv.endpoint)) == {"host-a": 0, "host-b": 0}

        aioenv.run(main())
    finally:
        srv.stop()


@pytest.mark.parametrize(("start", "forked"), [(None, True), ("exec", False)])
def test_a_hosts_workers_are_forked_from_its_template_unless_told(
    hosts: list[WorkerHostProcess], monkeypatch: pytest.MonkeyPatch, start: str | None, forked: bool
) -> None:
    # A worker host starts workers for pool after pool, as a server does: forks of a template that made its imports
    # once, unless AIOENV_WORKER_START says exec. Either way they die with the host (checked as it stops).
    if start is None:
        monkeypatch.delenv("AIOENV_WORKER_START", raising=False)
    else:
        monkeypatch.setenv("AIOENV_WORKER_START", start)
    srv = _server("--local-capacity", "0")
    try:
        host = _join(hosts, srv, "host-a", 8)

        async def main() -> None:
            opts: dict[str, Any] = {"endpoint": srv.endpoint, "num_workers": 2, "seed": 0}
            for _ in range(2):  # a pool, closed, then another: each gets workers of its own
                async with aioenv.Pool(PROBE, 4, **opts) as pool:
                    _, info = await pool.reset()
                    pids = set(info["pid"].tolist())
                    assert len(pids) == 2
                    assert pids <= set(workers_of(host.proc.pid))
                    templates = set(templates_of(host.proc.pid))
                    parents = {p.ppid for p in proc_table() if p.pid in pids}
                    assert parents <= templates if forked else parents == {host.proc.pid}, (parents, templates)
                    assert bool(templates) == forked
                    obs, *_ = await pool.step(np.array([1, 1, 0, 1]))
                    assert obs[:, 0].tolist() == [0, 1, 2, 3]

        aioenv.run(main())
    finally:
        srv.stop()


def test_hosts_serve_their_executor_and_the_server_is_the_last_resort(hosts: list[WorkerHostProcess]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = _server("--metrics-port", str(port))  # the server's own machine takes what no worker host can
    try:

        async def main() -> None:
            async with aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1) as local:
                _, info = await local.reset()
                assert int(info["pid"][0]) in srv.workers()  # no host yet: on the server itself
            hosts.append(WorkerHostProcess(srv.worker_endpoint, "--executor", "async", name="llm", capacity=64))
            hosts[0].wait_joined()
            sleepy = "aioenv.envs.latency:AsyncSleepEnv"
            async with (
                aioenv.Pool(sleepy, 8, endpoint=srv.endpoint, executor="async", num_workers=1) as remote,
                aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1) as inline,
            ):
                await remote.reset()
                rows = await remote.step(np.zeros(8, dtype=np.int64))
                assert rows[0].shape == (8, 4)
                _, info = await inline.reset()
                assert int(info["pid"][0]) in srv.workers()  # the async host does not take inline pools
                state = await fetch_status(srv.endpoint)
                assert _loads(state)["llm"] == 8
                assert state["worker_endpoint"] == srv.worker_endpoint
                url = f"http://127.0.0.1:{port}/metrics"
                text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=HANG).read().decode())
                assert 'aioenv_host_envs{host="llm"} 8.0' in text
                assert "aioenv_worker_hosts 1.0" in text
                assert 'aioenv_host_capacity{host="llm"} 64.0' in text
                shown = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "aioenv.cli", "status", srv.endpoint],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160"),
                )
                assert re.search(r"llm .*async .* 8 .* 64 .* 1", shown.stdout), shown.stdout
                assert re.search(r"local .*any .* 2 .*unlimited", shown.stdout), shown.stdout

        aioenv.run(main())
    finally:
        srv.stop()


# ---------------------------------------------------------------- failures


def test_a_worker_killed_on_its_host_fails_in_flight_requests_and_comes_back(
    hosts: list[WorkerHostProcess], tmp_path: Path
) -> None:
    srv = _server("--local-capacity", "0")
    try:
        _join(hosts, srv, "host-a", 4)

        async def main() -> None:
            kw = {"slow_seconds": HANG, "marker_dir": str(tmp_path)}
            async with aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1, env_kwargs=kw) as pool:
                _, info = await pool.reset(seed=0)
                pid = int(info["pid"][0])
                assert pid in hosts[0].workers()
                slow = pool.step_env(0, SLOW)
                await _until(lambda: _started(tmp_path), "the slow step")
                os.kill(pid, signal.SIGKILL)
                killed = r"env 0: its worker [0-9a-f]{6}\.p\d+\.w0\.1 .*killed by SIGKILL on host"
                with pytest.raises(WorkerCrashed, match=killed):
                    await slow
                remade = r"env 1 was re-made on a fresh worker since its last reset, .*killed by SIGKILL on host"
                with pytest.raises(EnvRemade, match=remade):  # env 1 was idle: it hears of the crash now
                    await pool.step(np.array([1]), env_ids=[1])
                _, info = await pool.reset(seed=0)  # re-made on a fresh process of the same host
                assert int(info["pid"][0]) != pid
                assert int(info["pid"][0]) in hosts[0].workers()
                obs, *_ = await pool.step(np.array([1, 1]))
                assert obs[:, 1].tolist() == [1, 1]

        aioenv.run(main())
    finally:
        srv.stop()


async def _started(marker_dir: Path) -> bool:
    return any(p.name.startswith("started-") for p in marker_dir.iterdir())


def test_a_silent_host_is_dropped_and_its_envs_remade_on_another(
    hosts: list[WorkerHostProcess], tmp_path: Path
) -> None:
    srv = _server("--local-capacity", "0", "--worker-timeout", "1")
    try:
        a = _join(hosts, srv, "host-a", 4)

        async def main() -> None:
            kw = {"slow_seconds": 5.0, "marker_dir": str(tmp_path)}
            async with aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1, env_kwargs=kw) as pool:
                _, info = await pool.reset(seed=0)
                assert _host_of(int(info["pid"][0]), hosts) == "host-a"
                _join(hosts, srv, "host-b", 4)
                slow = pool.step_env(1, SLOW)
                await _until(lambda: _started(tmp_path), "the slow step")
                os.kill(a.proc.pid, signal.SIGSTOP)  # the host stops answering heartbeats
                with pytest.raises(WorkerCrashed, match="host-a stopped answering heartbeats"):
                    await slow
                _, info = await pool.reset(seed=0)
                assert _host_of(int(info["pid"][0]), hosts) == "host-b"
                obs, *_ = await pool.step(np.array([1, 0]))
                assert obs[:, 1].tolist() == [1, 1]
                assert _loads(await fetch_status(srv.endpoint)) == {"host-b": 2}
                os.kill(a.proc.pid, signal.SIGCONT)  # it wakes up, learns it was dropped, rejoins clean
                a.wait_for("joining again")
                a.wait_for("joined the server")
                assert _loads(await fetch_status(srv.endpoint)) == {"host-b": 2, "host-a": 0}
                assert a.workers() == []  # it stopped the worker the server wrote off

        aioenv.run(main())
    finally:
        srv.stop()


def test_envs_with_no_room_left_wait_for_a_host_and_come_back(hosts: list[WorkerHostProcess]) -> None:
    srv = _server("--local-capacity", "0", "--worker-timeout", "1")
    try:
        a = _join(hosts, srv, "host-a", 4)

        async def main() -> None:
            async with aioenv.Pool(PROBE, 3, endpoint=srv.endpoint, num_workers=1) as pool:
                _, info = await pool.reset(seed=0)
                worker = int(info["pid"][0])
                a.proc.kill()  # SIGKILL: the host says nothing; its workers die with it
                a.proc.wait()
                await _until(lambda: _no_hosts(srv), "host-a dropped")
                await _until(lambda: _gone(worker), "its worker gone")  # PR_SET_PDEATHSIG, then reaped by init
                waiting = r"could not be restarted: .*no worker host.*\(it is started as soon as a host has room\)"
                with pytest.raises(WorkerCrashed, match=waiting):
                    await pool.reset(seed=0)
                _join(hosts, srv, "host-b", 4)  # room again: the envs are re-made there
                await _until(lambda: _has(srv, "host-b", 3), "the envs on host-b")
                obs, info = await pool.reset(seed=0)
                assert _host_of(int(info["pid"][0]), hosts) == "host-b"
                assert obs[:, 0].tolist() == [0, 1, 2]
                obs, *_ = await pool.step(np.array([1, 1, 1]))
                assert obs[:, 1].tolist() == [1, 1, 1]

        aioenv.run(main())
    finally:
        srv.stop()


async def _server_here(allow: tuple[str, ...], **timeouts: float) -> tuple[Server, Fleet]:
    """A server started in this process on loopback tcp with a worker port and no envs of its own; its fleet."""
    config = ServerConfig(
        bind="tcp://127.0.0.1:0", worker_bind="tcp://127.0.0.1:0", local_capacity=0, allow=allow, **timeouts
    )
    server = Server(config)
    await server.start()
    assert server.fleet is not None
    return server, server.fleet


async def test_a_slot_without_room_waits_for_it_and_starts_when_a_host_joins(
    hosts: list[WorkerHostProcess],
) -> None:
    """The slot's path, read in the server (in this process): its host is lost (LOST), no host has room
    (WAITING_FOR_ROOM: its envs fail fast saying they wait), a host joins (STARTING), its worker says HELLO
    (READY)."""
    server, fleet = await _server_here(("tests.envs.*:*",), worker_timeout=1)
    try:
        a = WorkerHostProcess(fleet.endpoint, name="host-a", capacity=4)
        hosts.append(a)
        await asyncio.to_thread(a.wait_joined)
        async with aioenv.Pool(PROBE, 3, endpoint=server.endpoint, num_workers=1) as pool:
            await asyncio.wait_for(pool.reset(seed=0), HANG)
            (session,) = server.sessions.values()
            slot = session.coord.slots[0]
            assert slot.state is SlotState.READY
            path = record(slot, SLOT).path
            a.proc.kill()  # SIGKILL: the host says nothing; dropped after worker_timeout
            await _until_true(lambda: slot.state is SlotState.WAITING_FOR_ROOM)
            assert path == [SlotState.LOST, SlotState.WAITING_FOR_ROOM]
            assert slot.proc is None
            with pytest.raises(WorkerCrashed, match=r"\(it is started as soon as a host has room\)"):
                await asyncio.wait_for(pool.reset(seed=0), HANG)
            b = WorkerHostProcess(fleet.endpoint, name="host-b", capacity=4)
            hosts.append(b)
            await asyncio.to_thread(b.wait_joined)
            await _until_true(lambda: slot.state is SlotState.READY)
            assert path == [SlotState.LOST, SlotState.WAITING_FOR_ROOM, SlotState.STARTING, SlotState.READY]
            obs, _ = await asyncio.wait_for(pool.reset(seed=0), HANG)
            assert obs[:, 0].tolist() == [0, 1, 2]
        assert path[-1] is SlotState.CLOSED
    finally:
        await server.aclose()


async def test_peers_ping_as_often_as_a_short_timeout_needs(hosts: list[WorkerHostProcess]) -> None:
    """A server with timeouts under a second (0.6 s; the CLI allows 0.5) keeps a healthy worker host and a
    healthy client for many timeouts: each pings every quarter of the timeout, as the server's replies to
    JOIN and OPEN ask. Pinging once a second, whether they were dropped depended on the phase of the server's
    sweep (once a second too); now it sweeps every quarter of the timeout as well."""
    server, fleet = await _server_here(("CartPole-v1",), worker_timeout=0.6, client_timeout=0.6)
    try:
        host = WorkerHostProcess(fleet.endpoint, name="host-a", capacity=4)
        hosts.append(host)
        joined = await asyncio.to_thread(host.wait_for, "joined the server")
        assert "a PING every 0.15 s" in joined
        async with aioenv.Pool("CartPole-v1", 2, endpoint=server.endpoint, num_workers=1) as pool:
            await asyncio.wait_for(pool.reset(seed=0), HANG)
            for _ in range(10):  # ten timeouts, idle: only the pings keep both peers
                await asyncio.sleep(0.6)
                assert (fleet.lost, len(server.sessions)) == (0, 1)
            _, reward, *_ = await asyncio.wait_for(pool.step(np.array([0, 1])), HANG)
            assert reward.tolist() == [1.0, 1.0]
        assert fleet.lost == 0
        assert [row["name"] for row in fleet.status()] == ["host-a"]
    finally:
        await server.aclose()


async def _until_true(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(HANG):
        while not predicate():
            await asyncio.sleep(0.05)


async def _gone(pid: int) -> bool:
    return process_gone(pid)


async def _no_hosts(srv: ServerProcess) -> bool:
    return not (await fetch_status(srv.endpoint))["hosts"]


def test_a_host_that_stops_hands_its_envs_over(hosts: list[WorkerHostProcess]) -> None:
    srv = _server("--local-capacity", "0")
    try:
        a = _join(hosts, srv, "host-a", 4)

        async def main() -> None:
            async with aioenv.Pool(PROBE, 3, endpoint=srv.endpoint, num_workers=1) as pool:
                _, info = await pool.reset(seed=0)
                assert _host_of(int(info["pid"][0]), hosts) == "host-a"
                _join(hosts, srv, "host-b", 4)
                workers = a.workers()
                a.stop()  # SIGTERM: it stops its workers and leaves
                assert all(process_gone(pid) for pid in workers)
                await _until(lambda: _has(srv, "host-b", 3), "the envs on host-b")
                _, info = await pool.reset(seed=0)
                assert _host_of(int(info["pid"][0]), hosts) == "host-b"

        aioenv.run(main())
    finally:
        srv.stop()


async def _has(srv: ServerProcess, host: str, envs: int) -> bool:
    return _loads(await fetch_status(srv.endpoint)).get(host) == envs


# ---------------------------------------------------------------- the worker port's protocol


def test_the_worker_port_refuses_bad_hosts_and_garbage(hosts: list[WorkerHostProcess]) -> None:
    srv = _server("--local-capacity", "0")
    try:
        _join(hosts, srv, "twin", 4)
        lost = WorkerHostProcess(srv.endpoint, name="lost", capacity=4)  # the client port, by mistake
        told = "refused this host: this is the server's client port: worker hosts join at "
        lost.wait_for(told + re.escape(srv.worker_endpoint))
        assert lost.proc.wait(HANG) == 2
        lost.stop()  # it has exited: this only releases its log pipe
        clash = WorkerHostProcess(srv.worker_endpoint, name="twin", capacity=4)
        hosts.append(clash)
        clash.wait_for("refused this host for now: .*'twin' is already joined")
        hosts[0].stop()  # the first twin leaves: the name is free, the second one gets in
        clash.wait_joined()
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
        sock.connect(srv.worker_endpoint)
        try:

            def ask(frames: list[bytes]) -> dict[str, Any]:
                sock.send_multipart(frames)
                return decode(sock.recv_multipart())[0]

            bad = {"id": 1, "name": "x", "executor": "inline", "capacity": 0}
            assert "capacity must be a positive number" in ask(encode(Op.JOIN, bad))["error"]["message"]
            bad = {"id": 1, "name": "x", "executor": "gpu", "capacity": 2}
            assert "executor must be one of" in ask(encode(Op.JOIN, bad))["error"]["message"]
            assert ask(encode(Op.PING, {"id": 3}))["rejoin"] is True  # not joined: told to join
            assert ask([b"\x00garbage"])["error"]["kind"] == "ProtocolError"
            assert ask(encode(Op.HELLO, {"id": 0, "name": "stray"}))["op"] == Op.CLOSE  # a worker of no pool
            sock.send_multipart(encode(Op.RESULT, {"id": 9}))  # a late reply from nobody: never answered
            assert ask(encode(Op.PING, {"id": 4}))["id"] == 4
        finally:
            sock.close()

        async def main() -> None:
            # The reverse mistake: a client (or `aioenv status`) given the worker port is told where to go,
            # at once, instead of waiting forever on a port that answers its pings.
            with pytest.raises(
                aioenv.UsageError, match=f"worker port .* clients connect to its client port, {re.escape(srv.endpoint)}"
            ):
                async with asyncio.timeout(HANG):
                    await aioenv.make(PROBE, 2, endpoint=srv.worker_endpoint)
            with pytest.raises(aioenv.UsageError, match="this is an aioenv server's worker port"):
                await fetch_status(srv.worker_endpoint)
            async with aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1) as pool:
                await pool.reset()  # the server and its host are unaffected
            assert (await fetch_status(srv.endpoint))["protocol_errors"] >= 3

        aioenv.run(main())
    finally:
        srv.stop()


def test_curve_admits_only_known_worker_hosts(hosts: list[WorkerHostProcess], tmp_path: Path) -> None:
    keys, strangers = tmp_path / "keys", tmp_path / "strangers"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for directory, name in ((keys, "server"), (keys, "alice"), (keys, "gpu1"), (strangers, "mallory")):
        made = subprocess.run([sys.executable, "-m", "aioenv.cli", "keygen", str(directory), "--name", name], env=env)
        assert made.returncode == 0
    srv = _server("--auth", str(keys), "--local-capacity", "0")
    try:
        server_key = str(keys / "server.key")
        mallory = WorkerHostProcess(
            srv.worker_endpoint, "--key", str(strangers / "mallory.key_secret"), "--server-key", server_key, name="m"
        )
        hosts.append(mallory)
        good = WorkerHostProcess(
            srv.worker_endpoint, "--key", str(keys / "gpu1.key_secret"), "--server-key", server_key, name="gpu1"
        )
        hosts.append(good.wait_joined())
        alice = (str(keys / "alice.key_secret"), server_key)

        async def main() -> None:
            async with aioenv.Pool(PROBE, 2, endpoint=srv.endpoint, num_workers=1, curve_keys=alice) as pool:
                _, info = await pool.reset()  # its worker process authenticates with the host's keys
                assert int(info["pid"][0]) in good.workers()
            state = await fetch_status(srv.endpoint, curve_keys=alice)
            assert [row["name"] for row in state["hosts"]] == ["gpu1"]  # mallory never got in

        aioenv.run(main())
        assert mallory.proc.poll() is None  # still knocking
        mallory.stop()
        assert "joining tcp://" in "".join(mallory.log)
        assert "joined the server" not in "".join(mallory.log)
    finally:
        srv.stop()


def test_a_worker_host_in_another_network_namespace(
    hosts: list[WorkerHostProcess], other_host: tuple[str, str, str]
) -> None:
    ns, _, here = other_host
    # --insecure: both addresses are on this test's own veth pair, which only its namespace shares
    srv = _server("--local-capacity", "0", "--insecure", bind=f"tcp://{here}:0", worker_bind=f"tcp://{here}:0")
    try:
        # The host process runs inside the namespace: it reaches the server only over the veth pair.
        remote = WorkerHostProcess(srv.worker_endpoint, name="far", capacity=4, prefix=("ip", "netns", "exec", ns))
        hosts.append(remote.wait_joined())

        async def main() -> None:
            async with aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint, num_workers=1, seed=0) as pool:
                await pool.reset()
                for _ in range(20):
                    obs, *_ = await pool.step(np.array([0, 1, 0, 1]))
                assert obs.shape == (4, 4)
                state = await fetch_status(srv.endpoint)
                assert _loads(state) == {"far": 4}
                assert len(remote.workers()) == 1

        aioenv.run(main())
    finally:
        srv.stop()


def test_worker_hosts_example_runs() -> None:
    proc = run_example("worker_hosts.py", "--steps", "50", timeout=HANG * 3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "two pools of 6 envs placed: host-a 6/12 envs, host-b 6/12 envs" in out
    assert re.search(r"pool: WorkerCrashed: step failed for env 0: .*host-a stopped answering heartbeats", out), out
    assert "pool: stepped as usual" in out
    assert "both pools stepped 50 more times: host-b 12/12 envs" in out
    assert "host-b and the server exited with 0 and 0" in out
    assert_example_refuses("worker_hosts.py", ["--steps", "0"], "--steps must be at least 1, got 0")

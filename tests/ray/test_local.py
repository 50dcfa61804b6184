"""Worker hosts placed by Ray (``aioenv.ray``) on a real local Ray cluster, one for this module.

A real server runs in each test's event loop (its worker port on 0.0.0.0, so the actors dial this node's
address); the hosts are Ray actors, each running ``python -m aioenv.ray.host``, whose worker processes
run real envs. Every test closes what it placed and checks that no host or worker process is left.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
import zmq.auth
from gymnasium.vector import SyncVectorEnv

import aioenv
from aioenv.errors import CapacityError, EnvRemade, UsageError, WorkerCrashed
from aioenv.ray import place_hosts, place_hosts_async, reachable_endpoint
from aioenv.server.server import Server, ServerConfig
from aioenv.transport.auth import create_keys
from tests.ray.conftest import ALLOW, ALLOW_KWARGS, host_processes, loads, ray_environment, until, wait_no_hosts
from tests.ray.conftest import wait_no_ray_processes as wait_no_ray
from tests.support.procs import HANG, TEMPLATE, proc_table
from tests.support.scripts import ROOT

PROBE = "tests.envs.faulty:make_probe"
SLOW = 2  # the probe's slow action: it waits for the gate
SEED = 7


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster with 4 logical CPUs (this machine may have fewer: hosts mostly wait); yields the
    token in its processes' environment."""
    with ray_environment() as token:
        ray.init(num_cpus=4, include_dashboard=False)
        try:
            yield token
        finally:
            ray.shutdown()
            wait_no_ray(token)


# ---------------------------------------------------------------- placing, stepping, closing


async def test_hosts_join_from_the_nodes_address_and_step_cartpole_as_gymnasium_does(
    cluster: str, server: Server
) -> None:
    assert server.fleet is not None
    assert server.fleet.endpoint.startswith("tcp://0.0.0.0:")
    hosts = await place_hosts_async(server.fleet.endpoint, 2, capacity=4, strategy="PACK", name_prefix="pack")
    try:
        here = ray.util.get_node_ip_address()
        assert not here.startswith("127.")
        assert hosts.endpoint == f"tcp://{here}:{server.fleet.endpoint.rsplit(':', 1)[1]}"
        info = hosts.info()
        assert [h.name for h in info] == ["pack-0", "pack-1"]
        assert all(h.joined and h.node_ip == here and h.host_pid for h in info)
        assert {row["name"]: row["capacity"] for row in server.status()["hosts"]} == {"pack-0": 4, "pack-1": 4}

        actions = np.random.default_rng(0).integers(0, 2, size=(25, 4))
        expected = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
        async with aioenv.Pool("CartPole-v1", 4, endpoint=server.endpoint, num_workers=2) as pool:
            obs, _ = await pool.reset(seed=SEED)
            e_obs, _ = expected.reset(seed=SEED)
            np.testing.assert_array_equal(obs, e_obs)
            assert loads(server) == {"pack-0": 2, "pack-1": 2}  # one worker process on each host
            for t, action in enumerate(actions):
                obs, rew, term, trunc, _ = await pool.step(action)
                e_obs, e_rew, e_term, e_trunc, _ = expected.step(action)
                for got, want, what in ((obs, e_obs, "obs"), (rew, e_rew, "reward"), (term, e_term, "terminated")):
                    np.testing.assert_array_equal(got, want, err_msg=f"step {t} {what}")
                np.testing.assert_array_equal(trunc, e_trunc, err_msg=f"step {t} truncated")
        expected.close()
        pids = {h.host_pid for h in info}
        assert pids <= {pid for pid, _ in host_processes(cluster)}
    finally:
        await hosts.aclose()
    assert hosts.closed
    await asyncio.to_thread(wait_no_hosts, cluster)
    await until(lambda: not server.status()["hosts"], "the hosts left the server")  # they said LEAVE: no timeout
    table = ray.util.placement_group_table(hosts.placement_group)
    assert table["state"] == "REMOVED"
    await hosts.aclose()  # idempotent


async def test_curve_keys_reach_the_hosts_without_a_trace(cluster: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    create_keys(keys, "server")
    create_keys(keys, "rayhost")
    _, secret = zmq.auth.load_certificate(keys / "rayhost.key_secret")
    assert secret is not None
    config = ServerConfig(
        bind="tcp://127.0.0.1:0",
        worker_bind="tcp://0.0.0.0:0",
        local_capacity=0,
        allow=ALLOW,
        auth=str(keys),
        allow_kwargs=ALLOW_KWARGS,
    )
    client_keys = (str(keys / "rayhost.key_secret"), str(keys / "server.key"))  # a client key may be shared
    srv = Server(config)
    await srv.start()
    try:
        assert srv.fleet is not None
        hosts = await place_hosts_async(
            srv.fleet.endpoint, 1, capacity=2, keys=(str(keys / "rayhost.key_secret"), str(keys / "server.key"))
        )
        try:
            async with aioenv.Pool(
                "CartPole-v1", 2, endpoint=srv.endpoint, num_workers=1, curve_keys=client_keys
            ) as pool:
                await pool.reset(seed=SEED)
                await pool.step(np.array([0, 1]))
                assert loads(srv) == {hosts.names[0]: 2}
                procs = [p for p in proc_table(cluster) if "aioenv.ray.host" in p.cmdline or "-m workers" in p.cmdline]
                assert len(procs) == 3  # the host, its worker template and the worker process forked from it
                for proc in procs:  # neither the key nor the key files' paths on a command line or in an environment
                    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
                    for where in (proc.cmdline, environ):
                        assert secret.decode() not in where
                        assert str(keys) not in where
                # The worker read its keys from the host's memory files (/proc/HOST/fd/N, its only source): the server,
                # started with --auth, admitted it. Forked from the host's template, its arguments came over the
                # template's socket, and its title shows them as far as the template's command line left room.
                assert sum(TEMPLATE in p.cmdline for p in procs) == 1
        finally:
            await hosts.aclose()
    finally:
        await srv.aclose()
    await asyncio.to_thread(wait_no_hosts, cluster)
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    for path in session.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), f"the host's secret key is in {path}"


async def test_an_actor_killed_fails_its_requests_once_and_ray_brings_the_host_back(
    cluster: str, server: Server, gate: Any
) -> None:
    assert server.fleet is not None
    hosts = await place_hosts_async(server.fleet.endpoint, 1, capacity=2, name_prefix="kill")
    try:
        kw = gate.kwargs(slow_seconds=HANG)
        async with aioenv.Pool(PROBE, 2, endpoint=server.endpoint, num_workers=1, env_kwargs=kw) as pool:
            await pool.reset(seed=[0, 1])
            before = hosts.info()[0]
            slow = pool.step_env(0, SLOW)
            await gate.started(0)
            os.kill(before.actor_pid, signal.SIGKILL)  # the actor dies; its host and worker die with it
            with pytest.raises(WorkerCrashed, match=r"env 0: .*its host kill-0 stopped answering heartbeats"):
                await slow
            after = (await hosts.wait_joined_async(HANG))[0]  # Ray restarted the actor; its host joined again
            assert after.actor_pid != before.actor_pid
            assert after.host_pid != before.host_pid
            assert after.joins == 1
            await until(lambda: loads(server) == {"kill-0": 2}, "the envs re-made on the restarted host")
            with pytest.raises(EnvRemade):  # env 1 was idle when its worker died: told once, at its next step
                await pool.step(np.array([1]), env_ids=[1])
            obs, _ = await pool.reset(seed=[0, 1])
            obs, *_ = await pool.step(np.array([1, 1]))
            assert obs[:, :2].tolist() == [[0, 1], [1, 1]]  # ident, steps since reset: both envs work again
    finally:
        await hosts.aclose()
    await asyncio.to_thread(wait_no_hosts, cluster)


# ---------------------------------------------------------------- refusals


def test_an_unschedulable_group_fails_fast_and_leaves_no_group(cluster: str) -> None:
    before = set(ray.util.placement_group_table())
    with pytest.raises(CapacityError, match=r"could not place 2 worker hosts .*'no_such_node': 1\.0"):
        place_hosts("tcp://0.0.0.0:5556", 2, capacity=1, resources={"no_such_node": 1}, ready_timeout=1.0)
    new = {k: v for k, v in ray.util.placement_group_table().items() if k not in before}
    assert [v["state"] for v in new.values()] == ["REMOVED"]
    with pytest.raises(UsageError, match="num_cpus > 0 or a custom resource"):
        place_hosts("tcp://0.0.0.0:5556", 1, capacity=1, num_cpus=0)
    with pytest.raises(UsageError, match="strategy must be one of"):
        place_hosts("tcp://0.0.0.0:5556", 1, capacity=1, strategy="AROUND")
    with pytest.raises(UsageError, match="port not 0"):
        reachable_endpoint("tcp://0.0.0.0:0")
    assert reachable_endpoint("tcp://*:5556") == f"tcp://{ray.util.get_node_ip_address()}:5556"
    assert reachable_endpoint("tcp://127.0.0.1:5556") == "tcp://127.0.0.1:5556"  # every node is this machine


def test_a_host_that_cannot_reach_the_server_is_reported_and_removed(cluster: str) -> None:
    with pytest.raises(aioenv.ConnectionLost, match=r"did not join tcp://127\.0\.0\.1:9 within 2 s.*lost-0"):
        place_hosts("tcp://127.0.0.1:9", 1, capacity=1, join_timeout=2.0, name_prefix="lost")
    wait_no_hosts(cluster)


# ---------------------------------------------------------------- the command line, and a driver that dies


def _cli(address: str, connect: str, prefix: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "aioenv.cli", "ray-hosts", "--address", address, "--connect", connect]
    cmd += ["--count", "2", "--capacity", "2", "--num-cpus", "0.5", "--name-prefix", prefix, "--log-level", "WARNING"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


async def test_the_command_places_hosts_until_sigterm_and_a_killed_driver_leaves_nothing(
    cluster: str, server: Server
) -> None:
    assert server.fleet is not None
    address = ray.get_runtime_context().gcs_address
    port = server.fleet.endpoint.rsplit(":", 1)[1]
    names = {"cli-0", "cli-1"}
    cli = killed = _cli(address, f"tcp://0.0.0.0:{port}", "cli")
    try:
        await until(lambda: set(loads(server)) == names or cli.poll() is not None, "the command's hosts joined")
        assert cli.poll() is None, cli.communicate()[0]
        cli.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(cli.communicate, timeout=HANG)
        assert cli.returncode == 0, out
        assert re.search(r"cli-0 .*\d+\.\d+\.\d+\.\d+", out), out  # the table of where each host runs
        assert not loads(server)  # each host said LEAVE before it stopped
        await asyncio.to_thread(wait_no_hosts, cluster)

        killed = _cli(address, f"tcp://0.0.0.0:{port}", "gone")
        await until(lambda: set(loads(server)) == {"gone-0", "gone-1"}, "the second command's hosts joined")
        killed.kill()  # no chance to close anything: Ray ends a dead driver's actors, hosts die with them
        killed.communicate()
        start = time.monotonic()
        await asyncio.to_thread(wait_no_hosts, cluster)
        assert time.monotonic() - start < 15
        await until(lambda: not loads(server), "the server dropped the hosts")
        groups = ray.util.placement_group_table().values()
        assert [g["state"] for g in groups if g["name"] == "aioenv-gone"] == ["REMOVED"]
    finally:
        for proc in (cli, killed):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

"""Two Ray nodes on one machine (``ray.cluster_utils.Cluster``): hosts placed with SPREAD land on both, and a
node that dies (its raylet and every process of it killed) costs the requests in flight there one
``WorkerCrashed`` each; Ray restarts the lost actor on the surviving node, its host joins again and the envs
come back on it.

GCS is told to check the nodes' health every second (3 misses: dead), so that Ray notices the lost node in
seconds rather than the default's quarter minute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

import aioenv
from aioenv.errors import EnvRemade, WorkerCrashed
from aioenv.ray import place_hosts_async
from aioenv.server.server import Server
from tests.ray.conftest import loads, ray_environment, until, wait_no_hosts
from tests.ray.conftest import wait_no_ray_processes as wait_no_ray
from tests.support.procs import HANG, TEMPLATE, proc_table

PROBE = "tests.envs.faulty:make_probe"
SLOW = 2  # the probe's slow action: it waits for the gate
HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[Cluster, Any, str]]:
    """A head node and a second node, 2 logical CPUs each, this process their driver: ``(cluster, the second
    node, the token in their processes' environment)``."""
    with ray_environment() as token:
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False, "_system_config": HEALTH}
        )
        try:
            second = cluster.add_node(num_cpus=2)
            ray.init(address=cluster.address)
            cluster.wait_for_nodes()
            try:
                yield cluster, second, token
            finally:
                ray.shutdown()
        finally:
            cluster.shutdown()
            wait_no_ray(token)


def _host_of(worker_pid: int) -> int:
    """The pid of the worker host whose worker process ``worker_pid`` is: its parent, or its parent's where that is
    the host's worker template (a host forks its workers unless told)."""
    table = {p.pid: p for p in proc_table()}
    parent = table[worker_pid].ppid
    return table[parent].ppid if TEMPLATE in table[parent].cmdline else parent


async def test_spread_hosts_survive_losing_a_node(
    two_nodes: tuple[Cluster, Any, str], server: Server, gate: Any
) -> None:
    cluster, second, token = two_nodes
    assert server.fleet is not None
    hosts = await place_hosts_async(
        server.fleet.endpoint, 2, capacity=2, strategy="SPREAD", executor="thread", name_prefix="spread"
    )
    try:
        info = {h.name: h for h in hosts.info()}
        assert {h.node_id for h in info.values()} == {cluster.head_node.node_id, second.node_id}
        lost = next(h for h in info.values() if h.node_id == second.node_id)
        kept = next(h for h in info.values() if h.node_id != second.node_id)

        kw = gate.kwargs(slow_seconds=HANG)
        async with aioenv.Pool(
            PROBE, 4, endpoint=server.endpoint, num_workers=2, executor="thread", env_kwargs=kw
        ) as pool:
            _, first = await pool.reset(seed=[0, 1, 2, 3])
            assert loads(server) == {"spread-0": 2, "spread-1": 2}  # one worker process on each node
            on_lost = [i for i in range(4) if _host_of(int(first["pid"][i])) == lost.host_pid]
            assert len(on_lost) == 2
            slow = [pool.step_env(i, SLOW) for i in range(4)]
            for i in range(4):
                await gate.started(i)

            await asyncio.to_thread(cluster.remove_node, second, False)  # the node dies: raylet, actor, host
            crashed = on_lost
            for i in crashed:
                with pytest.raises(WorkerCrashed, match=rf"env {i}: .*its host {lost.name} stopped answering"):
                    await slow[i]
            gate.open()  # the envs on the head node were never touched: their steps finish as usual
            for i in sorted(set(range(4)) - set(crashed)):
                obs, *_ = await slow[i]
                assert obs[:2].tolist() == [i, 1]

            # Ray restarts the lost actor in its bundle, now on the head node; its host joins again and the
            # crashed worker's envs (waiting for room: the other host is full) are re-made there.
            after = {h.name: h for h in await hosts.wait_joined_async(HANG)}
            assert after[lost.name].node_id == cluster.head_node.node_id
            assert after[lost.name].actor_pid != lost.actor_pid
            assert after[kept.name].actor_pid == kept.actor_pid
            await until(lambda: loads(server) == {"spread-0": 2, "spread-1": 2}, "the envs re-made on the new host")
            with pytest.raises(EnvRemade):  # as their WorkerCrashed said: re-made, to be reset before a step
                await pool.step(np.ones(2, dtype=np.int64), env_ids=crashed)
            await pool.reset(seed=[0, 1, 2, 3])
            obs, *_ = await pool.step(np.ones(4, dtype=np.int64))
            assert obs[:, :2].tolist() == [[0, 1], [1, 1], [2, 1], [3, 1]]  # all four envs step again
    finally:
        await hosts.aclose()
    await asyncio.to_thread(wait_no_hosts, token)

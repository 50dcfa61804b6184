"""Worker processes run under SCHED_BATCH (``aioenv.transport.spawn.worker_sched_policy``), every thread of
them; a pool's own workers have no ZeroMQ threads (they use their pipe). ``AIOENV_WORKER_SCHED=default``
leaves them alone, and a bad value is refused before any worker starts. Their numeric libraries start one
thread each unless told otherwise (``AIOENV_WORKER_THREADS``, ``aioenv.transport.spawn.worker_threads``).

Real worker processes of every executor are inspected through ``/proc``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

import pytest
import zmq

import aioenv
from aioenv.errors import UsageError
from aioenv.transport.spawn import THREAD_VARS, WORKER_SCHED_ENV, WORKER_THREADS_ENV
from aioenv.wire.protocol import Op, decode, encode
from tests.envs.waiting import AsyncWaitEnv
from tests.support.procs import HANG, child_processes, worker_pid
from tests.support.scripts import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_BATCH and /proc are Linux's")


def thread_policies(pid: int) -> list[tuple[str, int]]:
    """``[(thread name, scheduling policy)]`` of process ``pid``."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as f:
            out.append((f.read().strip(), os.sched_getscheduler(int(tid))))
    return out


def _source(executor: str) -> Any:
    return "CartPole-v1" if executor != "async" else [functools.partial(AsyncWaitEnv, ident=i) for i in range(2)]


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
async def test_local_workers_run_under_sched_batch_without_zeromq_threads(executor: str) -> None:
    async with aioenv.Pool(_source(executor), 2, num_workers=2, executor=executor) as pool:
        await pool.reset()
        for index in range(2):
            threads = thread_policies(worker_pid(pool, index))
            assert not [name for name, _ in threads if name.startswith("ZMQbg")], threads
            assert {policy for _, policy in threads} == {os.SCHED_BATCH}, threads
        if executor == "thread":  # one thread per env, started after the policy was taken
            assert len(thread_policies(worker_pid(pool, 0))) >= 2
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the pool's own process is left alone


@pytest.mark.timeout(HANG)
async def test_worker_sched_default_leaves_workers_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_SCHED_ENV, "default")
    async with aioenv.Pool("CartPole-v1", 2, num_workers=1) as pool:
        await pool.reset()
        threads = thread_policies(worker_pid(pool, 0))
        assert ("python", os.SCHED_OTHER) in threads, threads


@pytest.mark.timeout(HANG)
async def test_a_bad_worker_sched_is_refused_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_SCHED_ENV, "fastest")
    # A fork server, resource tracker or worker template earlier tests left is not this pool's: such a process
    # may be running or asleep at either look, or be reaped between them, so what is asked is that no child
    # appeared, whatever the others do.
    before = {(pid, cmd) for pid, _, cmd in child_processes()}
    with pytest.raises(UsageError, match=r"AIOENV_WORKER_SCHED must be 'batch' or 'default', got 'fastest'"):
        await aioenv.make("CartPole-v1", 2)
    assert {(pid, cmd) for pid, _, cmd in child_processes()} - before == set()


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
def test_remote_worker_and_its_io_threads_run_under_sched_batch(executor: str) -> None:
    """A worker that connects over ZeroMQ (as a worker host starts them): its I/O threads inherit the policy."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    cmd = [sys.executable, "-m", "workers", "--connect", f"tcp://127.0.0.1:{port}", "--name", "w-remote"]
    proc = subprocess.Popen([*cmd, "--executor", executor], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert router.poll(HANG * 1000), "the worker never said HELLO"
        identity, raw = router.recv_multipart()
        header, _ = decode([raw])
        assert (identity, header["op"], header["pid"]) == (b"w-remote", Op.HELLO, proc.pid)
        threads = thread_policies(proc.pid)
        assert ("ZMQbg/IO/0", os.SCHED_BATCH) in threads, threads
        assert {policy for _, policy in threads} == {os.SCHED_BATCH}, threads
        router.send_multipart([identity, *encode(Op.CLOSE, {"id": 1})])
        assert proc.wait(HANG) == 0
    finally:
        proc.kill()
        proc.wait()
        router.close()
        ctx.term()


def test_a_bad_worker_sched_stops_a_worker_started_by_hand() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), AIOENV_WORKER_SCHED="fastest")
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--connect", "tcp://127.0.0.1:9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert done.returncode == 2
    assert "AIOENV_WORKER_SCHED must be 'batch' or 'default'" in done.stderr


def environ_of(pid: int) -> dict[str, str]:
    """The environment process ``pid`` was started with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


async def _worker_threads_and_environ() -> tuple[int, dict[str, str]]:
    """A CartPole pool's worker, once numpy has multiplied a matrix there (OpenBLAS starts its threads at
    import): how many threads its process runs, and its environment."""
    async with aioenv.Pool("CartPole-v1", 1, num_workers=1, executor="inline") as pool:
        await pool.reset()
        pid = worker_pid(pool, 0)
        return len(os.listdir(f"/proc/{pid}/task")), environ_of(pid)


@pytest.mark.timeout(HANG)
async def test_workers_numeric_libraries_start_one_thread_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (*THREAD_VARS, WORKER_THREADS_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the caller's own choice for a library travels as it is
    lean, environ = await _worker_threads_and_environ()
    assert {var: environ.get(var) for var in THREAD_VARS} == {var: "1" for var in THREAD_VARS} | {
        "OMP_NUM_THREADS": "2"
    }
    monkeypatch.setenv(WORKER_THREADS_ENV, "5")  # aioenv's own setting wins over every library's
    wide, environ = await _worker_threads_and_environ()
    assert {var: environ.get(var) for var in THREAD_VARS} == {var: "5" for var in THREAD_VARS}
    # numpy's BLAS started a thread per count beyond the first, as many as the machine has CPUs (OpenBLAS's cap)
    assert wide >= lean + min(4, (os.cpu_count() or 1) - 1), (lean, wide)
    assert os.environ["OMP_NUM_THREADS"] == "2"  # this process's own environment is untouched
    assert "OPENBLAS_NUM_THREADS" not in os.environ


@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("value", ["0", "many", "-2", "1.5"])
async def test_a_bad_worker_threads_is_refused_before_any_worker_starts(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(WORKER_THREADS_ENV, value)
    before = {(pid, cmd) for pid, _, cmd in child_processes()}
    with pytest.raises(UsageError, match=rf"AIOENV_WORKER_THREADS must be a positive integer .*, got '{value}'"):
        await aioenv.make("CartPole-v1", 2)
    assert {(pid, cmd) for pid, _, cmd in child_processes()} - before == set()


@pytest.mark.parametrize(
    ("name", "value", "command", "says"),
    [
        (
            WORKER_THREADS_ENV,
            "all",
            ["serve", "--bind", "tcp://127.0.0.1:0"],
            "AIOENV_WORKER_THREADS must be a positive integer (threads per worker), got 'all'",
        ),
        (  # (aioenv serve's refusal of this one: tests/e2e/test_cli.py)
            "AIOENV_WORKER_START",
            "sometimes",
            ["worker", "--connect", "tcp://127.0.0.1:9", "--capacity", "2"],
            "AIOENV_WORKER_START must be 'fork' or 'exec', got 'sometimes'",
        ),
    ],
    ids=["aioenv serve", "aioenv worker"],
)
def test_a_bad_worker_setting_stops_a_server_or_a_worker_host_before_it_starts(
    name: str, value: str, command: list[str], says: str
) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{name: value})
    done = subprocess.run(
        [sys.executable, "-m", "aioenv.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr

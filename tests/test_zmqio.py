"""Worker threads: a pool's own workers have no ZeroMQ threads (they use their pipe); a worker that
connects over ZeroMQ runs its I/O thread under SCHED_BATCH (``aioenv.zmqio.defer_io_threads``).

Real worker processes of every executor are inspected through ``/proc``; the helper itself runs
in a fresh interpreter so that this test process's own threads are left alone.
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
from aioenv.protocol import Op, decode, encode
from tests.conftest import HANG, worker_pid
from tests.envs.waiting import AsyncWaitEnv
from tests.scripts import ROOT

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_BATCH and /proc are Linux's")


def thread_policies(pid: int) -> dict[str, int]:
    """``{thread name: scheduling policy}`` of process ``pid`` (names are unique for these threads)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as f:
            name = f.read().strip()
        out[name] = os.sched_getscheduler(int(tid))
    return out


@linux_only
@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
async def test_local_workers_have_no_zeromq_threads(executor: str) -> None:
    """A pool's own workers talk over their pipe (``aioenv.pipe``): no ZeroMQ context, no I/O threads."""
    async with aioenv.Pool(_source(executor), 2, num_workers=2, executor=executor) as pool:
        await pool.reset()
        for index in range(2):
            policies = thread_policies(worker_pid(pool, index))
            assert not [name for name in policies if name.startswith("ZMQbg")], policies
            assert policies["python"] == os.SCHED_OTHER, policies


@linux_only
@pytest.mark.timeout(HANG)
@pytest.mark.parametrize("executor", ["inline", "thread", "async"])
def test_remote_worker_io_threads_are_batch_and_the_rest_is_not(executor: str) -> None:
    """A worker that connects over ZeroMQ (as a worker host starts them) defers its I/O thread."""
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
        policies = thread_policies(proc.pid)
        assert policies.get("ZMQbg/IO/0") == os.SCHED_BATCH, policies
        assert policies["python"] == os.SCHED_OTHER, policies  # the thread that runs the envs
        assert policies.get("ZMQbg/Reaper") == os.SCHED_OTHER, policies
        router.send_multipart([identity, *encode(Op.CLOSE, {"id": 1})])
        assert proc.wait(HANG) == 0
    finally:
        proc.kill()
        proc.wait()
        router.close()
        ctx.term()


def _source(executor: str) -> Any:
    return "CartPole-v1" if executor != "async" else [functools.partial(AsyncWaitEnv, ident=i) for i in range(2)]


@linux_only
@pytest.mark.timeout(HANG)
def test_defer_io_threads_changes_each_io_thread_once_it_exists() -> None:
    code = (
        "import os, zmq\n"
        "from aioenv.zmqio import defer_io_threads, _io_threads\n"
        "ctx = zmq.Context(io_threads=2)\n"
        "assert defer_io_threads(ctx) == 0, 'no socket yet: no I/O threads'\n"
        "sock = ctx.socket(zmq.DEALER)\n"
        "assert defer_io_threads(ctx) == 2\n"
        "assert [os.sched_getscheduler(t) for t in _io_threads()] == [os.SCHED_BATCH] * 2\n"
        "assert os.sched_getscheduler(0) == os.SCHED_OTHER\n"
        "sock.close(); ctx.term(); print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr

"""A steady client is served without a gap while other clients come, ask and vanish (SIGKILLed with
replies on their way): the server keeps reading whatever its sends to vanished peers do to ZeroMQ's
descriptor. (A send that failed used to leave a consumed edge unnoticed: the server then stopped
reading until some other event, and steady clients gave up with ConnectionLost.)"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import aioenv
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess

#: Rounds of vanishing clients. Each costs seconds of CPU (every client is a fresh interpreter whose two pools
#: start two worker processes on the server); the missed-edge bug this guards against is reproduced
#: deterministically in tests/transport/test_router.py, so rounds buy soak, not coverage.
ROUNDS = 6
VANISHING_PER_ROUND = 2
pytestmark = pytest.mark.timeout(300)

# A client process that opens a pool of CartPole envs and one of 64 slow async envs, sends steps to all,
# floods 5,000 PINGs and is SIGKILLed at once: the slow envs' replies then reach the server one by one
# over half a second, each a send to a peer that is gone.
VANISHING = """
import asyncio, os, signal, sys
import numpy as np, zmq
import aioenv
from aioenv.wire.protocol import Key, Op, encode

async def main(endpoint):
    fast = await aioenv.make("CartPole-v1", 4, endpoint=endpoint, num_workers=1)
    slow = await aioenv.make(
        "aioenv.envs.latency:AsyncSleepEnv", 64, endpoint=endpoint, num_workers=1, executor="async",
        env_kwargs={"mean": 0.1, "sigma": 1.0, "cap": 0.5},
    )
    for pool in (fast, slow):
        await pool.reset(seed=1)
        pool.send(np.zeros(pool.num_envs, np.int64))
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(endpoint)
    ping = encode(Op.PING, {Key.ID: 1})
    for _ in range(5000):
        sock.send_multipart(ping)
    print("asked", flush=True)
    await asyncio.sleep(0.002)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A server for CartPole and the latency envs."""
    srv = ServerProcess(
        "--allow-env", "CartPole-v1", "--allow-env", "aioenv.envs.latency:*",
        "--allow-env-kwargs", "aioenv.envs.latency:*=mean,sigma,cap",
    )  # fmt: skip
    try:
        yield srv
    finally:
        srv.stop()


async def _vanish(endpoint: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", VANISHING, endpoint, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    said = await proc.stdout.read()
    assert await proc.wait() == -signal.SIGKILL
    assert said == b"asked\n", "the vanishing client did not get as far as asking"


def test_a_steady_client_is_served_while_others_vanish_with_replies_pending(server: ServerProcess) -> None:
    async def main() -> tuple[int, list[int]]:
        async with aioenv.Pool("CartPole-v1", 4, endpoint=server.endpoint, num_workers=1, seed=0) as pool:
            await pool.reset()
            actions = np.zeros(4, np.int64)
            stop = asyncio.Event()
            steps = 0

            async def steady() -> None:  # any ConnectionLost (or other error) fails the test
                nonlocal steps
                while not stop.is_set():
                    await pool.step(actions)
                    steps += 1

            stepping = asyncio.create_task(steady())
            per_round = []
            try:
                for _ in range(ROUNDS):
                    before = steps
                    await asyncio.gather(*(_vanish(server.endpoint) for _ in range(VANISHING_PER_ROUND)))
                    while steps < before + 20:  # served again after (a hang here is caught by the timeout)
                        assert not stepping.done(), stepping.exception()
                        await asyncio.sleep(0.01)
                    per_round.append(steps - before)
            finally:
                stop.set()
                await stepping
        return steps, per_round

    steps, per_round = asyncio.run(main())
    assert len(per_round) == ROUNDS
    assert steps >= 20 * ROUNDS

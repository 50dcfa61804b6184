"""The default pool (``executor="auto"``) never runs env code in the caller's process, however cheap the env.

Each env here is :class:`tests.envs.turning.TurningEnv`: microseconds a step while the probe times it (a whole
batch cheaper than a message to a worker process, which once placed it in this process), then told to turn
bad. A crash, ``os._exit``, ``SystemExit``, a slow step or a ``close()`` that hangs must cost a worker process,
never the caller or its event loop. The faults that would end or stall a caller run in a script of their own
(:func:`tests.support.scripts.run_python`), so that the test can tell whether the caller lived.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
import time
from collections.abc import Awaitable
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.core import remote
from aioenv.core.memory import rss_bytes
from tests.support.procs import HANG
from tests.support.scripts import run_python
from tests.support.servers import ServerProcess

TURNING = "tests.envs.turning:TurningEnv"

#: A script that makes a default pool of 2 TurningEnvs, steps it, turns env 0 bad (``sys.argv[1]``), steps again
#: and says what happened; then closes the pool, timed, and says that it lived.
SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time
    import numpy as np
    import aioenv

    async def main(fault: str) -> None:
        pool = await aioenv.make("tests.envs.turning:TurningEnv", 2, seed=0)
        print("placed:", pool.envs_in_process, pool.describe_placement(), flush=True)
        print("private:", pool._private_dir, flush=True)
        await pool.reset()
        await pool.step(np.zeros(2, np.int64))
        await pool.set_attr("fault", fault, env_ids=[0])
        for _ in range(2):
            try:
                _, rew, *_ = await asyncio.wait_for(pool.step(np.zeros(2, np.int64)), 20)
                print("stepped:", rew.tolist(), flush=True)
            except aioenv.AioEnvError as exc:
                print("raised:", type(exc).__name__, getattr(exc, "env_id", None), flush=True)
        await asyncio.wait_for(pool.reset(env_ids=[1]), 20)  # after a crash, the envs were made again
        _, rew, *_ = await asyncio.wait_for(pool.step(np.zeros(1, np.int64), env_ids=[1]), 20)
        print("env 1 stepped:", rew.tolist(), flush=True)
        start = time.monotonic()
        await pool.aclose()
        print(f"closed in {time.monotonic() - start:.1f} s", flush=True)

    asyncio.run(main(sys.argv[1]))
    print("alive", flush=True)
    """
)


def run_fault(fault: str) -> str:
    """Run :data:`SCRIPT` with ``fault``; its output, once it exited 0 (the caller lived)."""
    proc = run_python("-c", SCRIPT, fault, timeout=HANG * 2)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert proc.stdout.rstrip().endswith("alive"), out
    assert "placed: 0 " in out, out  # no env in the caller's process
    return out


@pytest.mark.parametrize("fault", ["exit", "segfault"])
def test_an_env_that_ends_its_process_costs_a_worker_not_the_caller(fault: str) -> None:
    """``os._exit(7)`` or a segfault in a step: the call that stepped it raises ``WorkerCrashed``, the envs are
    made again, and the caller goes on (env 1's next step succeeds)."""
    out = run_fault(fault)
    assert "raised: WorkerCrashed" in out, out
    assert "env 1 stepped: [1.0]" in out, out
    private = out.split("private: ")[1].split()[0]
    assert private.startswith("/"), out
    assert not os.path.exists(private), out  # the pool's files went with it


def test_an_env_that_raises_system_exit_fails_its_row_only() -> None:
    """``SystemExit`` in a step is that env's failure (``EnvError`` for env 0), not the end of the caller's loop
    nor of the worker that hosts env 1."""
    out = run_fault("system_exit")
    assert "raised: EnvError 0" in out, out
    assert "WorkerCrashed" not in out, out
    assert "EnvRemade" not in out, out
    assert "env 1 stepped: [1.0]" in out, out


def test_aclose_of_a_pool_whose_env_close_hangs_returns_within_its_bound() -> None:
    """An env whose ``close()`` sleeps for an hour: ``aclose`` stops its worker (CLOSE, then signals) and
    returns within its grace periods, not after the hour."""
    out = run_fault("hang_close")
    closed = float(out.split("closed in ")[1].split(" s")[0])
    assert closed < HANG, out


async def heartbeat_lateness(during: Awaitable[Any], period: float = 0.01) -> tuple[float, Any]:
    """The worst lateness (s) of a ``period`` asyncio heartbeat while ``during`` runs, and its result."""
    worst = 0.0
    loop = asyncio.get_running_loop()

    async def beat() -> None:
        nonlocal worst
        while True:
            due = loop.time() + period
            await asyncio.sleep(period)
            worst = max(worst, loop.time() - due)

    task = asyncio.create_task(beat())
    await asyncio.sleep(period * 2)  # beating before the call starts
    try:
        result = await during
        await asyncio.sleep(period * 2)  # a beat held up by the call sees how late it is only after it
    finally:
        task.cancel()
    return worst, result


STEP_SECONDS = 1.0


async def slow_pool(n: int, **options: Any) -> aioenv.Pool:
    """A pool of ``n`` TurningEnvs (default: timed cheap, in worker processes), whose steps then take
    :data:`STEP_SECONDS` each."""
    pool = await aioenv.make(TURNING, n, seed=0, **options)
    if not options:
        assert pool.envs_in_process == 0, pool.describe_placement()
    await pool.reset()
    await pool.set_attr("seconds", STEP_SECONDS)
    await pool.set_attr("fault", "slow")
    return pool


async def assert_loop_goes_on(pool: aioenv.Pool) -> None:
    """While ``pool``'s steps take :data:`STEP_SECONDS` each: a 10 ms heartbeat stays far below one step late,
    and ``wait_for(pool.step(...), STEP_SECONDS / 2)`` returns before a step is done; then ``pool`` is closed."""
    n = pool.num_envs
    try:
        late, (_, rew, *_) = await heartbeat_lateness(pool.step(np.zeros(n, np.int64)))
        assert rew.tolist() == [1.0] * n
        assert late < STEP_SECONDS / 2, f"a 10 ms heartbeat was {late * 1e3:.0f} ms late"
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.step(np.zeros(n, np.int64)), STEP_SECONDS / 2)
        waited = time.monotonic() - start
        assert waited < STEP_SECONDS, f"wait_for({STEP_SECONDS / 2}) returned after {waited:.2f} s"
    finally:
        await asyncio.wait_for(pool.aclose(), HANG)


async def test_envs_whose_steps_turn_slow_never_hold_the_callers_event_loop() -> None:
    """4 envs whose steps become 1 s each after the probe: a 10 ms heartbeat stays far below one step late (in
    the caller's process it was 4 steps late), and ``wait_for(pool.step(...), 0.5)`` returns near 0.5 s."""
    await assert_loop_goes_on(await slow_pool(4))


async def test_an_env_that_leaks_grows_a_worker_not_the_caller() -> None:
    """An env that keeps 100 MiB a step after the probe: 3 steps grow its worker, not the caller's RSS."""
    pool = await aioenv.make(TURNING, 1, seed=0)
    try:
        assert pool.envs_in_process == 0, pool.describe_placement()
        await pool.reset()
        await pool.set_attr("fault", "leak")
        before = rss_bytes(os.getpid())
        for _ in range(3):
            await asyncio.wait_for(pool.step(np.zeros(1, np.int64)), HANG)
        after = rss_bytes(os.getpid())
        assert before is not None
        assert after is not None
        assert after - before < 100 << 20, f"the caller grew by {(after - before) >> 20} MiB"
    finally:
        await asyncio.wait_for(pool.aclose(), HANG)


# ---------------------------------------------------------------- envs in this process, asked for


async def test_a_slow_step_in_this_process_holds_the_loop_no_longer_than_max_loop_hold() -> None:
    """``executor="in_process"``: env code runs on a thread of this process, and a call waits for it on the
    loop's thread at most ``max_loop_hold`` s. 4 envs whose steps become 1 s each: a 10 ms heartbeat stays far
    below one step late, ``wait_for(pool.step(...), 0.5)`` returns near 0.5 s, and ``aclose`` returns within its
    grace though the envs are still inside a step."""
    await assert_loop_goes_on(await slow_pool(4, executor="in_process", max_loop_hold=0.02))


async def test_a_slow_local_env_never_starves_a_remote_pool_on_the_same_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote pool gives its server up after ``SERVER_TIMEOUT`` s of silence (here 2 s, a PING every 0.2 s).
    Beside it, on the same loop, a local default pool whose 4 envs' steps became 1 s each: the remote pool keeps
    hearing its server while the local step runs, and steps on after it (with the envs in this process the loop
    was held for the 4 s, and the remote pool failed with ConnectionLost while its server was healthy)."""
    monkeypatch.setattr(remote, "SERVER_TIMEOUT", 2.0)
    monkeypatch.setattr(remote, "HEARTBEAT", 0.2)
    srv = ServerProcess("--allow-env", "CartPole-v1")
    try:
        far = await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint)
        try:
            await asyncio.wait_for(far.reset(), HANG)
            near = await slow_pool(4)
            try:
                await asyncio.wait_for(near.step(np.zeros(4, np.int64)), HANG)
            finally:
                await asyncio.wait_for(near.aclose(), HANG)
            _, rew, *_ = await asyncio.wait_for(far.step(np.zeros(2, np.int64)), HANG)
            assert rew.tolist() == [1.0, 1.0]
        finally:
            await asyncio.wait_for(far.aclose(), HANG)
    finally:
        srv.stop()


@pytest.mark.parametrize("on_timeout", ["error", "truncate"])
async def test_step_timeout_applies_to_envs_in_this_process(on_timeout: str) -> None:
    """A step of an env in this process past ``step_timeout`` fails with ``StepTimeout`` (or comes back truncated)
    while the loop goes on; the env is made again on a fresh thread, and the pool steps on."""
    pool = await aioenv.make(TURNING, 2, seed=0, executor="in_process", step_timeout=0.3, on_timeout=on_timeout)
    try:
        await pool.reset()
        await pool.set_attr("seconds", 20.0, env_ids=[0])
        await pool.set_attr("fault", "slow", env_ids=[0])
        stepping = pool.step(np.zeros(2, np.int64))
        if on_timeout == "error":
            with pytest.raises(aioenv.StepTimeout):
                await heartbeat_lateness(asyncio.wait_for(stepping, HANG))
        else:
            late, (_, rew, _, truncated, info) = await heartbeat_lateness(asyncio.wait_for(stepping, HANG))
            assert late < 0.25, f"a 10 ms heartbeat was {late * 1e3:.0f} ms late"
            assert truncated.tolist() == [True, True]  # env 1 was replaced with it: its episode ends too
            assert bool(info["timeout"][0])
        if on_timeout == "error":
            with pytest.raises(aioenv.EnvRemade):
                await asyncio.wait_for(pool.step(np.zeros(2, np.int64)), HANG)
        await asyncio.wait_for(pool.reset(), HANG)
        _, rew, *_ = await asyncio.wait_for(pool.step(np.zeros(2, np.int64)), HANG)
        assert rew.tolist() == [1.0, 1.0]
    finally:
        await asyncio.wait_for(pool.aclose(), HANG)

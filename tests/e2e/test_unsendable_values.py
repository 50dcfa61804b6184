"""A request with a value the wire cannot carry is refused whole and leaves its envs free.

Each public request kind, on a local and on a remote pool: the bad call raises ``UsageError`` naming
what could not travel, nothing was sent, and a correct request on the same env then works. No
future is left with an unretrieved exception (``aclose`` would log one).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import numpy as np
import pytest

import aioenv
from aioenv import UsageError

TOO_BIG = 2**70  # msgpack carries ints up to 64 bits


@pytest.fixture(params=["local", "remote"])
async def pool(request: pytest.FixtureRequest) -> AsyncIterator[aioenv.Pool]:
    endpoint = request.getfixturevalue("cartpole_server").endpoint if request.param == "remote" else None
    async with aioenv.Pool("CartPole-v1", 3, num_workers=2, endpoint=endpoint) as made:
        await made.reset(seed=0)
        yield made


async def _still_free(pool: aioenv.Pool) -> None:
    """Every env takes a reset, a step and a call again."""
    obs, info = await pool.reset(seed=[1, 2, 3])
    assert info["env_id"].tolist() == [0, 1, 2]
    obs, *_ = await pool.step(np.ones(3, dtype=np.int64))
    assert obs.shape == (3, 4)
    assert await pool.get_attr("render_mode", env_ids=[0, 1, 2]) == [None, None, None]


async def test_a_seed_beyond_64_bits_is_refused_before_anything_is_claimed(pool: aioenv.Pool) -> None:
    with pytest.raises(UsageError, match=r"seed 1180591620717411303424 for env 0: a seed is an int in \[0, 2\*\*64\)"):
        await pool.reset(env_ids=[0], seed=TOO_BIG)
    with pytest.raises(UsageError, match="seed -1 for env 2"):
        pool.send_reset(env_ids=[2], seed=[-1])
    with pytest.raises(UsageError, match=r"seed 'abc' for env 1: a seed is an int"):
        pool.reset_env(1, seed="abc")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="seed must be None, an int, or a sequence with one int"):
        await pool.reset(seed="abc")  # type: ignore[arg-type]
    await _still_free(pool)


async def test_reset_options_that_cannot_travel_fail_the_call_and_free_the_envs(pool: aioenv.Pool) -> None:
    with pytest.raises(UsageError, match=r"cannot send the reset of envs \[0, 1, 2\].*OverflowError"):
        await pool.reset(options={"level": TOO_BIG})
    with pytest.raises(UsageError, match="cannot send the reset of env 1"):
        pool.send_reset(env_ids=[1], options={"x": object()})
    with pytest.raises(UsageError, match="cannot send the reset of env 2"):
        pool.reset_env(2, options={"x": TOO_BIG})
    await _still_free(pool)


async def test_call_and_set_attr_values_that_cannot_travel_fail_the_call_and_free_the_envs(
    pool: aioenv.Pool,
) -> None:
    with pytest.raises(UsageError, match=r"cannot send the call of envs \[0, 1, 2\]"):
        await pool.call("get_wrapper_attr", TOO_BIG)
    with pytest.raises(UsageError, match="cannot send the call of env 1"):
        await pool.set_attr("tag", [object()], env_ids=[1])
    await _still_free(pool)


async def test_nothing_is_left_unretrieved_after_refused_calls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    pool = await aioenv.make("CartPole-v1", 2, num_workers=1)
    try:
        with pytest.raises(UsageError):
            await pool.reset(options={"x": TOO_BIG})
        with pytest.raises(UsageError):
            await pool.call("get_wrapper_attr", TOO_BIG)
    finally:
        await pool.aclose()
    import gc

    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_under_a_concurrency_limit_the_rows_that_would_wait_are_freed_too() -> None:
    """With max_concurrency, part of a call goes out now and the rest waits: a value that cannot travel
    fails the call at once and frees the waiting rows as well."""
    async with aioenv.Pool("CartPole-v1", 3, num_workers=1, max_concurrency=1) as pool:
        await pool.reset(seed=0)
        with pytest.raises(UsageError, match="cannot send the reset of env 0"):
            await pool.reset(options={"x": TOO_BIG})
        await _still_free(pool)

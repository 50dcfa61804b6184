"""A worker's handler in the test's own process, over a real slab: what a pool's own inline worker answers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv.transport.slab import Slab
from aioenv.wire.protocol import Key, Op, decode, encode
from workers.runtime import Worker

#: CartPole's spaces, which every env source below must have.
CARTPOLE_SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


@contextlib.contextmanager
def worker_with_envs(
    n: int,
    slab: bool,
    done: tuple[int, int, int] | None = None,
    *,
    source: dict[str, Any] | None = None,
    autoreset: str | None = None,
    finals: bool = False,
) -> Iterator[tuple[Worker, Slab | None]]:
    """A worker (in this process: its handler is what is tested) hosting ``n`` envs of ``source`` (CartPole-v1 by
    default; CartPole's spaces), reset with seeds 0 .. n - 1, over a slab of its own (``slab``; ``finals``: with an
    area of final observations) or none; ``autoreset``: the envs' autoreset mode (the worker's default: None);
    ``done``: the write end of a done pipe, the slot and token the worker is told to write as; everything closed
    after."""
    fd = Slab.try_new_fd() if slab else None
    worker = Worker(0, "w0", slab_fd=fd, done_fd=done[0] if done else None)
    ours: Slab | None = None
    try:
        made_of = source or {"kind": "gym", "id": "CartPole-v1"}
        fields: dict[str, Any] = {Key.ID: 1, Key.ENVS: [[i, "k"] for i in range(n)], Key.SOURCES: {"k": made_of}}
        if autoreset is not None:
            fields[Key.AUTORESET] = autoreset
        made = decode(worker.handle(encode(Op.MAKE, fields))[0])[0]
        assert made[Key.OP] == Op.RESULT, made
        if fd is not None:
            layout = Slab.plan(n, *CARTPOLE_SPACES, finals)
            assert layout is not None
            ours = Slab.create(fd, layout)
            given = {Key.DONE_PIPE: list(done[1:])} if done else {}
            worker.handle(encode(Op.SLAB, {Key.ID: 2, Key.SLAB: layout, **given}))
            reset = {Key.ID: 3, Key.ENV: list(range(n)), Key.SEED: list(range(n)), Key.SHARED: 1}
            worker.handle(encode(Op.RESET, reset))
        yield worker, ours
    finally:
        worker.close_all()
        for mapped in (worker.slab, ours):
            if mapped is not None:
                mapped.close()
        if fd is not None:
            os.close(fd)

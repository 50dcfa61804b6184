"""Calls into a pool through :class:`aioenv.SyncPool` that mypy must check: ``test_sync_calls.py`` runs mypy on this
file (it is never imported).

A line mypy must refuse ends with ``# refused: <part of mypy's error>``; a ``reveal_type`` line ends with
``# revealed: <part of the type mypy reveals>``. Every other line must pass.
"""

from __future__ import annotations

from typing import reveal_type

import numpy as np

from aioenv import SyncPool


def calls(sp: SyncPool) -> None:
    actions = np.zeros(2, np.int64)
    reveal_type(sp.submit(sp.pool.step, actions))  # revealed: Future[tuple[Any, numpy.ndarray[
    reveal_type(sp.submit(sp.pool.reset, [0], seed=1))  # revealed: Future[tuple[Any, dict[str, Any]]]
    reveal_type(sp.submit(sp.pool.recv, min_results=1))  # revealed: Future[tuple[Any, numpy.ndarray[
    reveal_type(sp.submit(sp.pool.call, "describe", 2, env_ids=[0]))  # revealed: Future[list[Any]]
    reveal_type(sp.submit(sp.pool.send, actions))  # revealed: Future[None]
    reveal_type(sp.submit(sp.pool.step_env, 0, 1))  # revealed: fallback=aioenv.core.sinks.StepResult]]
    reveal_type(sp.step_checked([actions], info_list=True))  # revealed: list[dict[str, Any]]]
    reveal_type(sp.submit_step_checked([actions]))  # revealed: dict[str, Any]]]
    sp.submit(sp.pool.step, "wrong", extra=1)  # refused: Unexpected keyword argument "extra" for "submit"
    sp.submit(sp.pool.recv, 3)  # refused: matches argument types "def recv(
    sp.submit(sp.pool.reset, seed="one")  # refused: -> Coroutine[Any, Any, tuple[Any, dict[str, Any]]]", "str"
    sp.submit("step", actions)  # refused: matches argument types "str", "ndarray
    sp.submit(sp.pool.step_env, 0)  # refused: matches argument types "Callable[[int, Any], Future[StepResult]]", "int"
    sp.step_checked([actions], info_list=1)  # refused: No overload variant of "step_checked"

"""The compiled part of a pool's hot path, and whether this process uses it.

A ``send()``/``recv()`` batch costs the pool's process a dozen small steps in Python, each once per batch or
once per worker message; on a machine whose cores the workers keep busy each finds its caches cold, and
together they are most of what the pool spends per message beyond the floor (docs/performance.md, "The pool's
CPU per message"). :mod:`aioenv._speedups` (``aioenv/_speedups.c``, built by pip with the package) does those
whose work is a loop over plain integers in C: checking a batch's env ids, marking them busy, cutting them into
each worker's run, framing each worker's lane step and writing it to the worker's pipe (one call for all of a lane
call's workers), taking apart what the done pipe brought, and ticking off the rows a thread or async worker's reply
lists.

Each of its functions has a pure-Python twin beside its one caller, which defines what it does: the
scheduler's ``_check``, ``py_claim_ids``, ``_few_runs_by_owner`` and ``py_take_listed``,
:func:`aioenv.wire.lane.framed_step`, :func:`aioenv.transport.pipe.py_send_each` and
:func:`aioenv.wire.lane.read_records`. The twins run where the extension was not built (no C compiler or no
Python headers when the package was installed: the install goes on without it) and where the environment
says ``AIOENV_PURE_PYTHON=1``; the tests run the two against each other, and a pool under each
(tests/core/test_speedups.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PURE_ENV", "Speedups", "compiled", "describe", "load", "pure_chosen"]

#: The environment variable that keeps this process on the pure-Python twins (``1``; unset, empty or ``0``: the
#: compiled functions where they were built).
PURE_ENV = "AIOENV_PURE_PYTHON"


class Speedups(Protocol):
    """What :mod:`aioenv._speedups` provides; each function raises ``TypeError`` for arguments of the wrong kind."""

    def read_records(
        self, data: bytes, tokens: list[int], /
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int, int]], int, int]:
        """:func:`aioenv.wire.lane.read_records`."""
        ...

    def check_ids(self, ids: np.ndarray, num_envs: int, /) -> tuple[bool, int] | None:
        """None when every id of ``ids`` ``(n,)`` int64 is in ``0 .. num_envs - 1`` and none repeats; else
        ``(False, id)``, the first unknown id in the array's order, or ``(True, id)``, the smallest id named twice."""
        ...

    def runs_by_owner(
        self, env_ids: np.ndarray, worker_of: np.ndarray, /
    ) -> tuple[list[int], list[int], list[int]] | None:
        """``(workers, firsts, counts)``: each worker's part of the unique ``env_ids`` ``(n,)`` int64 as one run of
        envs ``firsts[k] .. firsts[k] + counts[k] - 1`` on ``workers[k]``, in id order, where ``worker_of``
        ``(num_envs,)`` int64 maps env to worker; None when some worker's part is not one run. Raises
        ``IndexError`` for an id beyond ``worker_of``."""
        ...

    def framed_steps(self, base: int, firsts: list[int], counts: list[int], flags: int, /) -> list[bytes]:
        """:func:`aioenv.wire.lane.framed_step` of request ``base + k`` for the envs ``firsts[k] ..
        firsts[k] + counts[k] - 1``, for each ``k``, ``flags`` the step's flag bits or-ed together."""
        ...

    def take_listed(self, listed: list[int], marks: bytearray, rows: list[Any], out: list[int], /) -> bool:
        """:func:`aioenv.core.scheduler.py_take_listed`: a reply's rows of one request ticked off in ``marks`` and
        their env ids appended to ``out``, or False and nothing changed. ``ValueError`` when ``marks`` is not one
        byte per listed row."""
        ...

    def send_each(self, fds: list[int], datas: list[bytes], /) -> list[tuple[int, int]]:
        """:func:`aioenv.transport.pipe.py_send_each`: ``datas[k]`` written to the non-blocking stream socket
        ``fds[k]``, one send each, the GIL released once for all; ``[(k, n)]`` for each not sent whole (``n``: bytes
        sent, or -errno). ``ValueError`` for a negative fd (nothing sent)."""
        ...

    def claim_ids(self, ids: np.ndarray, busy: np.ndarray, unread: np.ndarray | None, /) -> int:
        """:func:`aioenv.core.scheduler.py_claim_ids`: -1 and every env of ``ids`` ``(n,)`` int64 marked in ``busy``
        ``(num_envs,)`` bool, when none was busy or ``unread`` (the same, or None); else the first such env and
        nothing changed. ``IndexError`` (nothing changed) for an id beyond ``busy``."""
        ...


def pure_chosen() -> bool:
    """Whether this process's environment says to run the pure-Python twins (:data:`PURE_ENV`)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def load() -> Speedups | None:
    """The compiled functions, or None: not built here, or :data:`PURE_ENV` says not to use them."""
    if pure_chosen():
        return None
    try:
        import aioenv._speedups as _speedups
    except ImportError:
        return None
    speedups: Speedups = _speedups
    return speedups


#: What this process uses: the compiled functions, or None (the pure-Python twins), chosen once at import.
compiled = load()


def describe() -> str:
    """How this process runs the hot path, for a report (``aioenv demo``, ``aioenv bench``, the benchmarks'
    headers): ``"compiled"``, or ``"pure Python"`` and why."""
    if compiled is not None:
        return "compiled"
    if pure_chosen():
        return f"pure Python ({PURE_ENV} is set)"
    return "pure Python (aioenv._speedups is not built)"

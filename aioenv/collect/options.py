"""A collector's options, checked once, with the meanings TorchRL's collectors give them."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from aioenv.errors import UsageError

__all__ = ["Mode", "OnError", "Options", "Output"]

Mode = Literal["sync", "async"]
OnError = Literal["raise", "reset"]
Output = Literal["numpy", "tensordict"]


def _count(name: str, value: int | None, *, minimum: int, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Options:
    """What a :class:`~aioenv.collect.Collector` does (see its docstring for each field).

    ``total_frames`` is ``math.inf`` for an endless collector; ``max_frames_per_traj`` and
    ``init_random_frames`` are 0 when off.
    """

    frames_per_batch: int
    total_frames: float = math.inf
    max_frames_per_traj: int = 0
    init_random_frames: int = 0
    reset_at_each_iter: bool = False
    split_trajs: bool = False
    mode: Mode = "sync"
    min_results: int = 1
    max_results: int | None = None
    per_env: bool = False
    output: Output = "numpy"
    on_error: OnError = "raise"
    background: bool = False
    queue_size: int = 2
    seed: int | None = None

    @classmethod
    def checked(
        cls,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        mode: str = "sync",
        min_results: int = 1,
        max_results: int | None = None,
        per_env: bool = False,
        output: str = "numpy",
        on_error: str = "raise",
        background: bool = False,
        queue_size: int = 2,
        seed: int | None = None,
    ) -> Options:
        """The options, each checked; a bad one raises :class:`~aioenv.UsageError` naming it."""
        fpb = _count("frames_per_batch", frames_per_batch, minimum=1, allow_none=False)
        assert fpb is not None
        if total_frames is None or (isinstance(total_frames, int) and total_frames < 0):
            total = math.inf
        else:
            total = float(_count("total_frames", total_frames, minimum=1) or 0)
        if mode not in ("sync", "async"):
            raise UsageError(f"mode must be 'sync' (all envs each step) or 'async' (first finished), got {mode!r}")
        if output not in ("numpy", "tensordict"):
            raise UsageError(f"output must be 'numpy' or 'tensordict', got {output!r}")
        if on_error not in ("raise", "reset"):
            raise UsageError(f"on_error must be 'raise' or 'reset', got {on_error!r}")
        if per_env and mode != "async":
            raise UsageError("per_env=True calls the policy for each env as it becomes ready: it needs mode='async'")
        most = _count("max_results", max_results, minimum=1)
        least = _count("min_results", min_results, minimum=1, allow_none=False)
        assert least is not None
        if most is not None and most < least:
            raise UsageError(f"max_results ({most}) must be at least min_results ({least})")
        return cls(
            frames_per_batch=fpb,
            total_frames=total,
            max_frames_per_traj=_count("max_frames_per_traj", max_frames_per_traj, minimum=1) or 0,
            init_random_frames=_count("init_random_frames", init_random_frames, minimum=0) or 0,
            reset_at_each_iter=bool(reset_at_each_iter),
            split_trajs=bool(split_trajs),
            mode="sync" if mode == "sync" else "async",
            min_results=least,
            max_results=most,
            per_env=bool(per_env),
            output="numpy" if output == "numpy" else "tensordict",
            on_error="raise" if on_error == "raise" else "reset",
            background=bool(background),
            queue_size=_count("queue_size", queue_size, minimum=1, allow_none=False) or 1,
            seed=seed,
        )

"""An env that leaves things for its worker process's end (tests of :mod:`workers.ending`).

:class:`LeavingEnv` ``(path)``, made in a worker process, writes into the directory ``path``:

- ``open-<pid>.txt``: opened when the env is made, written to at each step and never flushed nor closed;
  what it holds once the process has ended says whether its last buffered writes were flushed;
- ``atexit-<pid>.txt``: written by an ``atexit`` handler the env registers;
- ``del-<pid>.txt``: written by the ``__del__`` of an object kept alive until exit (the interpreter's teardown
  runs it; a worker that ends with :func:`workers.ending.leave` does not).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

_kept: list[Any] = []  # alive until the process ends


class _Finalised:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __del__(self) -> None:
        self.path.write_text("ran")


def _at_exit(path: Path) -> None:
    path.write_text("ran")


class LeavingEnv(gym.Env[np.ndarray, np.int64]):
    """See the module. Observation ``Box(2,)`` float32 of zeros, action ``Discrete(2)``."""

    def __init__(self, path: str) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        where, pid = Path(path), os.getpid()
        if not _kept:  # once per process
            log = (where / f"open-{pid}.txt").open("w", buffering=1 << 16)
            _kept.extend([log, _Finalised(where / f"del-{pid}.txt")])
            atexit.register(_at_exit, where / f"atexit-{pid}.txt")
        self._log = _kept[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Zeros."""
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Write one line to the open file (buffered), return zeros."""
        self._log.write(f"step {int(action)}\n")
        return np.zeros(2, np.float32), 0.0, False, False, {}

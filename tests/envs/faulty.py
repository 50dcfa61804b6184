"""Test envs with failure modes on demand.

Workers import these through the ``"tests.envs.faulty:make_xxx"`` source form (the repo
root is on their PYTHONPATH), or receive ``functools.partial(make_xxx, ...)`` pickled by
cloudpickle (which pickles this module's functions by reference).

- :class:`ProbeEnv`: obs ``[ident, t, last_action, noise]``; action ``Discrete(3)`` where
  action 2 is *slow* (touches a marker file, then waits for a gate file or ``slow_seconds``).
  Can raise on a given step (``fail_at``), put an unsendable value in its info (``bad_info``),
  hang in ``close`` (``hang_in_close``), echo reset options into its info and render
  ``rgb_array`` frames.
- :class:`DictObsEnv`: ``Dict`` observations.
- :class:`TextEnv`: ``Text`` observations and actions.
- :class:`InfoEnv`: an info dict with values of many types.
- :class:`PipeVandalEnv`: action 1 writes bytes that are no message into its worker's pipe to the pool;
  action 2 shuts the pipe down and then hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import string
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "DictObsEnv",
    "InfoEnv",
    "PipeVandalEnv",
    "ProbeEnv",
    "TextEnv",
    "make_dict",
    "make_info",
    "make_probe",
    "make_text",
]

SLOW = 2  #: ProbeEnv's slow action


class ProbeEnv(gym.Env):
    """A deterministic env whose observation says which env it is and how far it got.

    Args:
        fail_at: raise ``RuntimeError`` in the ``fail_at``-th step of an episode.
        fail_reset_seed: raise ``RuntimeError`` in ``reset`` when given this seed.
        slow_seconds: how long the slow action (2) waits at most.
        gate: path of a file; the slow action ends as soon as it exists.
        marker_dir: directory where the slow action writes ``started-<ident>`` on entry.
        max_steps: truncate after this many steps.
        bad_info: put a value msgpack cannot carry in the step info.
        hang_in_close: ``close()`` sleeps for an hour (``ignore_sigterm``: and ignores SIGTERM).
        render_mode: ``"rgb_array"`` or None.
        tag: a plain attribute for get_attr/set_attr.
        init_seconds: ``__init__`` sleeps this long (a pool that takes its time to be made).
        quiet: its steps' infos are empty (a step then says nothing but its row).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7}  # noqa: RUF012

    def __init__(
        self,
        *,
        fail_at: int | None = None,
        fail_reset_seed: int | None = None,
        slow_seconds: float = 60.0,
        gate: str | None = None,
        marker_dir: str | None = None,
        max_steps: int | None = None,
        bad_info: bool = False,
        hang_in_close: bool = False,
        ignore_sigterm: bool = False,
        render_mode: str | None = None,
        tag: int = 0,
        init_seconds: float = 0.0,
        quiet: bool = False,
    ) -> None:
        time.sleep(init_seconds)
        self.quiet = quiet
        self.observation_space = spaces.Box(-1e9, 1e9, (4,), np.float64)
        self.action_space = spaces.Discrete(3)
        self.fail_at = fail_at
        self.fail_reset_seed = fail_reset_seed
        self.slow_seconds = slow_seconds
        self.gate = gate
        self.marker_dir = marker_dir
        self.max_steps = max_steps
        self.bad_info = bad_info
        self.hang_in_close = hang_in_close
        self.ignore_sigterm = ignore_sigterm
        self.render_mode = render_mode
        self.tag = tag
        self.ident = -1
        self.t = 0
        self.closed = False

    def _obs(self, action: int) -> np.ndarray:
        return np.array([self.ident, self.t, action, self.np_random.uniform()], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None and seed == self.fail_reset_seed:
            self.refuse_reset_on_purpose(seed)
        if seed is not None:
            self.ident = seed
        self.t = 0
        info: dict[str, Any] = {"pid": os.getpid()}
        if options:
            info["options"] = dict(options)
        return self._obs(-1), info

    def refuse_reset_on_purpose(self, seed: int) -> None:
        raise ValueError(f"reset refused for seed {seed}")

    def explode_on_purpose(self) -> None:
        raise RuntimeError(f"boom at step {self.t} of env {self.ident}")

    def _slow(self) -> None:
        if self.marker_dir is not None:
            with open(os.path.join(self.marker_dir, f"started-{self.ident}"), "w") as fh:
                fh.write(str(os.getpid()))
        end = time.monotonic() + self.slow_seconds
        while time.monotonic() < end:
            if self.gate is not None and os.path.exists(self.gate):
                return
            time.sleep(0.005)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = int(action)
        self.t += 1
        if self.fail_at is not None and self.t == self.fail_at:
            self.explode_on_purpose()
        if a == SLOW:
            self._slow()
        truncated = self.max_steps is not None and self.t >= self.max_steps
        info: dict[str, Any] = {} if self.quiet else {"t": self.t}
        if self.bad_info:
            info["unsendable"] = object()
        return self._obs(a), float(a) + 0.5, False, truncated, info

    def describe(self, x: int, scale: int = 1) -> dict[str, int]:
        return {"ident": self.ident, "value": x * scale}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((5, 6, 3), self.ident % 256, dtype=np.uint8)

    def close(self) -> None:
        self.closed = True
        if self.hang_in_close:
            if self.ignore_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(3600)


class DictObsEnv(gym.Env):
    """Dict observations ``{"pos": Box(2,) float32, "count": Discrete(100)}``; action Discrete(2)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"pos": spaces.Box(-10.0, 10.0, (2,), np.float32), "count": spaces.Discrete(100)}
        )
        self.action_space = spaces.Discrete(2)
        self.count = 0

    def _obs(self) -> dict[str, Any]:
        pos = self.np_random.uniform(-10, 10, size=2).astype(np.float32)
        return {"pos": pos, "count": self.count}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.count = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        self.count += 1 + int(action)
        return self._obs(), 1.0, self.count >= 99, False, {}


class TextEnv(gym.Env):
    """Text observations and Text actions: the observation echoes the action and the step count."""

    def __init__(self) -> None:
        self.observation_space = spaces.Text(32, charset=string.ascii_lowercase + string.digits + "-")
        self.action_space = spaces.Text(8, min_length=1, charset=string.ascii_lowercase)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.t = 0
        return f"start-{seed if seed is not None else 'x'}", {}

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
        self.t += 1
        return f"{action}-{self.t}", float(len(action)), False, False, {}


class InfoEnv(gym.Env):
    """An info dict holding values of many types (some only on some envs, via ``seed``)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.seed_seen = 0
        self.t = 0

    def _info(self) -> dict[str, Any]:
        s, t = self.seed_seen, self.t
        info: dict[str, Any] = {
            "i": s * 10 + t,
            "f": s + 0.25,
            "b": bool(s % 2),
            "f32": np.float32(s / 4),
            "i8": np.int8(s),
            "arr": np.arange(3, dtype=np.int16) + s,
            "s": f"env{s}",
            "none": None,
            "lst": [s, "x"],
            "tup": (s, t),
            "nested": {"x": s, "y": {"z": float(t)}},
        }
        if s % 2 == 0:
            info["even_only"] = s
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.seed_seen = seed if seed is not None else -1
        self.t = 0
        return np.zeros(2, np.float32), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(2, 0.5, np.float32), 0.0, False, False, self._info()


def make_probe(**kwargs: Any) -> ProbeEnv:
    """Factory for ``"tests.envs.faulty:make_probe"``."""
    return ProbeEnv(**kwargs)


def make_dict() -> DictObsEnv:
    return DictObsEnv()


def make_text() -> TextEnv:
    return TextEnv()


def make_info() -> InfoEnv:
    return InfoEnv()


class _CountingEnv(gym.Env):
    """Obs ``[t]``, the steps since the last reset; subclasses say what their actions do besides counting."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], dtype=np.float32), {}


class PipeVandalEnv(_CountingEnv):
    """Obs ``[t]``; action 1 writes garbage into the worker's pipe (``python -m workers --fd N``) first,
    action 2 shuts the pipe down and hangs (a worker alive but deaf); action 3 writes a lane message that answers
    nothing (a lane step, :mod:`aioenv.wire.lane`), action 4 a lane DONE for a request no one sent, action 7 a lane
    DONE that says its infos are in the slab's info area (:mod:`aioenv.transport.slab_infos`). Actions 1, 3 and 7
    return an info, so that the step's reply follows the vandalism on the same pipe (a reply with nothing to
    say goes on the pool's done pipe, which keeps no order with the worker's own).

    On the pool's done pipe (``--done D``): action 5 writes garbage, action 6 a record for every lane message of
    every worker that may be out (ids ``1 .. 2,000``, slots 0 to 3) with a token it made up. On the pipes of its
    quiet calls (``--quiet Q,C``, :data:`aioenv.wire.lane.QUIET`): action 8 takes every byte of the countdown, action
    9 writes garbage and then those forged records to the quiet pipe, action 10 closes the worker's countdown pipe
    (it takes no byte from then on)."""

    action_space = spaces.Discrete(11)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        import socket
        import sys

        fd = int(sys.argv[sys.argv.index("--fd") + 1])
        if int(action) == 1:
            os.write(fd, b"\xff" * 16)  # a "message" of 4,294,967,295 frames
        elif int(action) == 2:
            socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_RDWR)
            time.sleep(120)
        elif int(action) in (3, 4, 7):
            from aioenv.transport.pipe import framed
            from aioenv.wire import lane

            frame = {3: lane.step(1, 0, 1), 4: lane.done(2**62), 7: lane.done(2**62, infos=True)}[int(action)]
            os.write(fd, b"".join(framed([frame])[0]))
        elif int(action) in (5, 6):
            from aioenv.wire import lane

            done = int(sys.argv[sys.argv.index("--done") + 1])
            if int(action) == 5:
                os.write(done, b"\xc1R\x00" + b"\xee" * 37)  # a record's start, then no record
            else:
                forged = [lane.record(slot, 12345, i) for slot in range(4) for i in range(1, 2001)]
                for at in range(0, len(forged), 100):
                    os.write(done, b"".join(forged[at : at + 100]))
        elif int(action) in (8, 9, 10):
            from aioenv.wire import lane

            quiet, countdown = (int(fd) for fd in sys.argv[sys.argv.index("--quiet") + 1].split(","))
            if int(action) == 10:
                with contextlib.suppress(OSError):
                    os.close(countdown)
            elif int(action) == 8:
                with contextlib.suppress(BlockingIOError):
                    while os.read(countdown, 4096):
                        pass
            else:
                os.write(quiet, b"\xc1K\x00" + b"\xee" * 37)
                forged = [lane.record(slot, 12345, i) for slot in range(4) for i in range(1, 101)]
                os.write(quiet, b"".join(forged))
        self.t += 1
        info = {"vandal": int(action)} if int(action) in (1, 3, 7) else {}
        return np.array([self.t], dtype=np.float32), 0.0, False, False, info


class ProbeLiarEnv(_CountingEnv):
    """Obs ``[t]``; its first step lies to the process that times it for ``executor="auto"`` (:mod:`workers.probe`),
    as env code can: ``lie="nan"`` makes that process's ``statistics.median`` answer NaN (the probe's median of its
    timed runs: a NaN clock fails the probe outright instead), ``lie="reply"`` writes a forged answer on its pipe
    (``--fd N``), ``{"step": "x", "cpu": "x"}``, ahead of the true one. Only its first step lies, and only in a
    process named ``probe`` (``--name probe``)."""

    action_space = spaces.Discrete(2)

    def __init__(self, lie: str = "nan") -> None:
        super().__init__()
        self.lie = lie
        self.lied = False

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        import sys

        if not self.lied and sys.argv[sys.argv.index("--name") + 1] == "probe":
            self.lied = True
            if self.lie == "nan":
                import statistics

                statistics.median = lambda _data: float("nan")  # the probe's median of its timed runs
            else:
                from aioenv.transport.pipe import framed
                from aioenv.wire.protocol import Key, Op, encode

                fd = int(sys.argv[sys.argv.index("--fd") + 1])
                forged = encode(Op.RESULT, {Key.ID: 1, Key.VALUES: {"step": "x", "cpu": "x"}})
                os.write(fd, b"".join(framed(forged)[0]))
        self.t += 1
        return np.array([self.t], dtype=np.float32), 0.0, False, False, {}


class RowRecordEnv(_CountingEnv):
    """Obs ``[t]``, reward ``t / 2``, for a ``thread`` worker started with the pool's done pipe (``--done D``), whose
    env threads record their rows there (:mod:`aioenv.wire.lane`). Action 0 returns no info (its row goes as a row
    record), 1 an info ``{"t": t}`` (its row goes in the worker's RESULT); 2 first writes row records for every
    request a pool may have out (ids ``1 .. 2,000``, rows 0 to 3, slots 0 to 3) with a token it made up; 3 first
    closes the done pipe in its worker (so that row, and every later row of its worker, goes in a RESULT); 4 first
    waits until the file ``gate`` exists (an hour at most)."""

    action_space = spaces.Discrete(5)

    def __init__(self, gate: str = "") -> None:
        super().__init__()
        self.gate = gate

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        import sys

        from aioenv.wire import lane

        a = int(action)
        if a in (2, 3):
            done = int(sys.argv[sys.argv.index("--done") + 1])
            if a == 2:
                ids = [(slot, i, row) for slot in range(4) for i in range(1, 2001) for row in range(4)]
                forged = [lane.row_record(slot, 12345, i, row) for slot, i, row in ids]
                for at in range(0, len(forged), 100):
                    os.write(done, b"".join(forged[at : at + 100]))
            else:
                with contextlib.suppress(OSError):  # closed already, by another env of the worker
                    os.close(done)
        elif a == 4:
            end = time.monotonic() + 3600
            while not os.path.exists(self.gate) and time.monotonic() < end:
                time.sleep(0.005)
        self.t += 1
        return np.array([self.t], dtype=np.float32), self.t / 2, False, False, {"t": self.t} if a == 1 else {}


class HugeInfoEnv(_CountingEnv):
    """Obs ``[t]``; action 1 puts 65 MiB of bytes in the step's info: a reply whose header is over the limit a
    pool reads (``aioenv.wire.protocol.MAX_HEADER_BYTES``), so the worker's message is malformed to the pool."""

    action_space = spaces.Discrete(2)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        info = {"blob": b"x" * (65 << 20)} if int(action) == 1 else {}
        return np.array([self.t], dtype=np.float32), 0.0, False, False, info

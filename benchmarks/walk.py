"""The path of one ``await pool.step(actions)``: how many of the project's functions it calls, on the caller's side
and in the worker, and in how many files.

It starts ``aioenv.make("CartPole-v1", N, executor=..., num_workers=1, seed=0)``, resets it, steps it
``--warmup`` times, then records exactly one lock-step ``await pool.step(actions)`` in steady state (the
actions alternate 0 and 1, so no env's episode ends around the recorded step: the script checks that, as an
episode's end would put an autoreset on the path). Run from the repo root::

    .venv/bin/python benchmarks/walk.py                         # inline: one worker process
    .venv/bin/python benchmarks/walk.py --executor in_process   # the envs on a thread of this process
    .venv/bin/python benchmarks/walk.py --list                  # and the path, function by function

What is counted: each ``call`` event of a profile function (``sys.setprofile``) whose code object's file is
under ``aioenv/`` or ``workers/`` of this checkout; a generator's or a coroutine's resumption is not a call
(only its first start is: the event at the code's first ``RESUME 0``), and neither is a comprehension
(``<listcomp>``, ``<dictcomp>``, ``<setcomp>``, ``<genexpr>``: part of the function they are written in, and
inlined from Python 3.12 on). Functions are told apart by file, qualified name and first line; the totals count
a function or a file once even when both sides call it. Calls into gymnasium, numpy or the standard library are
not counted: the walk is the project's own.

Where it is counted:

- **The caller's process**: the profile function is installed before the pool starts, on this thread and on
  every thread started after it (``threading.setprofile``: an in-process worker's env thread), and counts only
  from just before ``await pool.step(actions)`` to its return plus :data:`TURNS` turns of the event loop (so
  that callbacks the step scheduled are counted; the script reports them apart, as "after the return"). The
  env thread of ``in_process`` makes no call of a project function once it has handed its result over (what is
  left of its turn is returns and the C call that waits for the next job), and it waits for the next job before
  the step starts, so its count does not depend on how the two threads interleave. ``max_loop_hold`` is raised
  to :data:`HOLD` s so that a loaded machine does not turn the recorded step into one answered later from the
  loop (another path).
- **The worker process**: workers start as ``sys.executable -P -m workers ...`` with ``PYTHONPATH`` set to
  aioenv's root (:func:`aioenv.transport.spawn.worker_command`). The script points ``sys.executable`` at a
  two-line shell wrapper that puts a temporary directory first on the child's ``PYTHONPATH`` and execs the
  real interpreter; that directory's ``sitecustomize.py`` runs at the child's start-up, and when
  :data:`OUT_ENV` names a directory it loads this file and calls :func:`worker_probe`: the same profile
  function, counting from the start, and a ``SIGUSR1`` handler that writes what was counted since the last
  signal to ``OUT_ENV/PID-K.json`` and starts again from zero. No line of ``aioenv/`` or ``workers/``
  changes. An inline worker answers one request at a time on one thread and waits for the next in a blocking
  read; the script sends the signal only once the worker's thread sleeps in that read (``/proc``: state
  ``S``), before the recorded step (the snapshot is thrown away) and after it, so the second snapshot holds
  exactly one turn of the worker's loop: from the read that returns the step's request to the read that waits
  for the next one. The handler itself runs inside that read (Python retries it after a signal) and calls no
  project function.

The counts are deterministic: three runs give the same figures (nothing periodic runs in a local pool:
heartbeats are a remote pool's, RSS checks need ``max_worker_rss``). Output: a table of calls, functions and
files per side (and per thread), with ``--list`` the path (each function the first time it is called,
``file:function``, in the order of those first calls, with its number of calls when it is more than one, and
its thread when it is not the side's first), with ``--json`` all of it as JSON.
"""

from __future__ import annotations

import dis
import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType

# Only the standard library's lighter modules at the top: a worker process loads this file at its start-up
# (see worker_probe), and should not import more than it would for itself.

ROOT = Path(__file__).resolve().parent.parent
#: The project's packages: calls of functions defined under these folders of ROOT are counted.
PACKAGES = ("aioenv", "workers")
#: Names of code objects that are expressions of a function rather than functions of their own.
COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
#: Environment variable naming the directory a worker process writes its counts to (unset: no probe).
OUT_ENV = "AIOENV_WALK_OUT"
#: Turns of the event loop recorded after the step returned (callbacks it scheduled run in the first).
TURNS = 3
#: ``max_loop_hold`` of the pool: longer than any step of a few CartPole envs takes, even on a loaded machine.
HOLD = 5.0
#: Seconds to wait for a worker to sleep or to write its counts before giving up (a hang guard).
PATIENCE = 30.0

#: One counted function: (thread name, file relative to ROOT, qualified name, first line).
Function = tuple[str, str, str, int]


class Calls:
    """Counts the calls of the project's functions made while :attr:`on`, by thread, in the order of their first
    call (see the module docstring for what a call is). Install :meth:`profile` with ``sys.setprofile`` and
    ``threading.setprofile``."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep
        self.prefixes = tuple(f"{root / package}{os.sep}" for package in PACKAGES)
        #: Whether calls are counted now.
        self.on = False
        self._counts: dict[tuple[str, CodeType], int] = {}
        self._starts: dict[CodeType, int] = {}  # the offset of a call's first event; -1: not counted

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        """The profile function: count ``frame``'s code on a ``call`` event that starts a call."""
        if event != "call" or not self.on:
            return
        code = frame.f_code
        start = self._starts.get(code)
        if start is None:
            start = self._starts[code] = self._start_of(code)
        if frame.f_lasti == start:
            key = (threading.current_thread().name, code)
            self._counts[key] = self._counts.get(key, 0) + 1

    def _start_of(self, code: CodeType) -> int:
        """Where ``code``'s frame is when a call starts it (its ``RESUME 0``; a resumption stops at another
        ``RESUME``); -1 for code that is not counted."""
        if not code.co_filename.startswith(self.prefixes) or code.co_name in COMPREHENSIONS:
            return -1
        for ins in dis.get_instructions(code):
            if ins.opname == "RESUME" and ins.arg == 0:
                return ins.offset
        return 0  # no RESUME before Python 3.11: every call event is a call

    def take(self) -> list[tuple[Function, int]]:
        """What was counted since the last take, in the order of first calls; counting starts again from zero."""
        counts, self._counts = self._counts, {}
        return [
            ((thread, code.co_filename.removeprefix(self.root), code.co_qualname, code.co_firstlineno), n)
            for (thread, code), n in counts.items()
        ]

    def install(self) -> None:
        """Profile this thread and every thread started from now on."""
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    @staticmethod
    def uninstall() -> None:
        """Stop profiling this thread and threads started from now on."""
        sys.setprofile(None)
        threading.setprofile(None)


def worker_probe(out: Path) -> None:
    """In a worker process, at its start-up: count every call from now on, and on ``SIGUSR1`` write what was
    counted since the last signal to ``out/PID-K.json`` (K = 0, 1, ...; written whole, then renamed) and start
    from zero. ``out/PID.pid`` says the probe is in place, in this process and in each process it forks (a
    worker template's workers: the profile function and the handler survive a fork)."""
    calls = Calls(ROOT)
    calls.on = True
    taken = [itertools.count()]

    def snapshot(_signum: int, _frame: FrameType | None) -> None:
        path = out / f"{os.getpid()}-{next(taken[0])}.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps([[*function, n] for function, n in calls.take()]))
        part.rename(path)

    def start() -> None:
        taken[0] = itertools.count()
        calls.take()
        (out / f"{os.getpid()}.pid").touch()

    signal.signal(signal.SIGUSR1, snapshot)
    calls.install()
    start()
    os.register_at_fork(after_in_child=start)  # a worker forked from a template (AIOENV_WORKER_START=fork)


SITECUSTOMIZE = """\
import os

if os.environ.get({env!r}):
    import importlib.util
    import pathlib
    import sys

    spec = importlib.util.spec_from_file_location("_aioenv_walk", {path!r})
    module = importlib.util.module_from_spec(spec)
    sys.modules["_aioenv_walk"] = module
    spec.loader.exec_module(module)
    module.worker_probe(pathlib.Path(os.environ[{env!r}]))
"""

WRAPPER = """\
#!/bin/sh
PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}} exec {python} "$@"
"""


@dataclass
class Side:
    """The calls of one side (a process, or one thread of it), in the order of their first call."""

    name: str
    calls: list[tuple[Function, int]]

    @property
    def functions(self) -> set[tuple[str, str, int]]:
        """Its distinct functions: (file, qualified name, first line)."""
        return {(file, name, line) for (_, file, name, line), _ in self.calls}

    @property
    def files(self) -> set[str]:
        """Its distinct files."""
        return {file for (_, file, _, _), _ in self.calls}

    @property
    def count(self) -> int:
        """Its calls."""
        return sum(n for _, n in self.calls)

    def threads(self) -> list[Side]:
        """The side split by thread (each named after its thread), in the order of each thread's first call."""
        names = dict.fromkeys(thread for (thread, _, _, _), _ in self.calls)
        return [Side(name, [c for c in self.calls if c[0][0] == name]) for name in names]

    def figures(self) -> dict[str, int]:
        """Calls, functions and files."""
        return {"calls": self.count, "functions": len(self.functions), "files": len(self.files)}


@dataclass
class Walk:
    """What one recorded step called: the caller's process (up to the step's return, and after it) and the
    worker processes."""

    caller: Side
    after: Side
    worker: Side

    def total(self) -> Side:
        """Both sides together (the caller's calls after the return included)."""
        return Side("total", [*self.caller.calls, *self.after.calls, *self.worker.calls])

    def rows(self) -> list[tuple[str, dict[str, int]]]:
        """The table's rows: each side, its threads when it has several, the total."""
        rows: list[tuple[str, dict[str, int]]] = []
        caller = Side("caller process", [*self.caller.calls, *self.after.calls])
        for side in (caller, Side("worker processes", self.worker.calls)):
            rows.append((side.name, side.figures()))
            threads = side.threads()
            if len(threads) > 1:
                rows.extend((f"  thread {thread.name}", thread.figures()) for thread in threads)
        if self.after.calls:
            rows.append(("  (caller, after the return)", self.after.figures()))
        rows.append(("total", self.total().figures()))
        return rows


def _probed(out: Path) -> list[int]:
    """The live processes that carry the probe (see :func:`worker_probe`), by what they wrote to ``out``."""
    return sorted(pid for pid in (int(path.stem) for path in out.glob("*.pid")) if _thread_state(pid) not in "XZ")


def _thread_state(pid: int) -> str:
    """The state letter of ``pid``'s main thread (``/proc``), ``X`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat.rsplit(")", 1)[1].split()[0]


async def _settle(pids: Sequence[int]) -> None:
    """Wait until each worker's main thread sleeps (in its blocking read of the next request)."""
    import asyncio
    import time

    deadline = time.monotonic() + PATIENCE
    for pid in pids:
        while (state := _thread_state(pid)) != "S":
            if state in "XZ" or time.monotonic() > deadline:
                raise RuntimeError(f"worker {pid} did not come to wait for a request (state {state})")
            await asyncio.sleep(0.001)


async def _snapshot(out: Path, pids: Sequence[int], k: int) -> list[tuple[Function, int]]:
    """Signal each worker (asleep in its read) to write its counts, and read them (the ``k``-th of each)."""
    import asyncio
    import time

    await _settle(pids)
    calls: list[tuple[Function, int]] = []
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
        path = out / f"{pid}-{k}.json"
        deadline = time.monotonic() + PATIENCE
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {pid} wrote no counts to {path}")
            await asyncio.sleep(0.001)
        for thread, file, name, line, n in json.loads(path.read_text()):
            calls.append(((f"{thread} (pid {pid})", file, name, line), n))
    return calls


def _actions(num_envs: int, i: int) -> object:
    import numpy as np

    return np.full(num_envs, i % 2, dtype=np.int64)


async def record(executor: str, num_envs: int, warmup: int, out: Path) -> Walk:
    """Start the pool, step it ``warmup`` times, record one step (see the module docstring); ``out``: where
    worker processes write their counts."""
    import asyncio

    import numpy as np

    import aioenv

    calls = Calls(ROOT)
    calls.install()
    try:
        workers = {} if executor == "in_process" else {"num_workers": 1}  # in_process refuses num_workers
        pool = await aioenv.make("CartPole-v1", num_envs, executor=executor, seed=0, max_loop_hold=HOLD, **workers)
        try:
            await pool.reset()
            for i in range(warmup):
                _, _, terminated, truncated, _ = await pool.step(_actions(num_envs, i))
                if np.any(terminated | truncated):
                    raise RuntimeError(f"an episode ended at warm-up step {i}: take fewer --warmup steps")
            pids = _probed(out)
            if executor != "in_process" and not pids:
                raise RuntimeError(f"no worker process carries the probe (nothing in {out}): its calls would be missed")
            await _snapshot(out, pids, 0)  # all they did until now
            calls.take()
            calls.on = True
            _, _, terminated, truncated, _ = await pool.step(_actions(num_envs, warmup))
            caller = calls.take()
            for _ in range(TURNS):
                await asyncio.sleep(0)
            calls.on = False
            after = calls.take()
            worker = await _snapshot(out, pids, 1)
            if np.any(terminated | truncated):
                raise RuntimeError("an episode ended at the recorded step: take fewer --warmup steps")
        finally:
            await pool.aclose()
    finally:
        Calls.uninstall()
    return Walk(Side("caller", caller), Side("caller, after", after), Side("worker", worker))


def run(executor: str, num_envs: int, warmup: int) -> Walk:
    """:func:`record` with workers that carry the probe (see the module docstring), on a fresh event loop."""
    import asyncio
    import tempfile

    sys.path.insert(0, str(ROOT))
    import aioenv

    if not aioenv.__file__ or not Path(aioenv.__file__).is_relative_to(ROOT):
        raise RuntimeError(f"aioenv is imported from {aioenv.__file__}, not from {ROOT}")
    real = sys.executable
    with tempfile.TemporaryDirectory(prefix="aioenv-walk-") as tmp:
        site, out = Path(tmp, "site"), Path(tmp, "out")
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=OUT_ENV, path=str(Path(__file__).resolve())))
        wrapper = Path(tmp, "python")
        wrapper.write_text(WRAPPER.format(site=_sh(str(site)), python=_sh(real)))
        wrapper.chmod(0o755)
        os.environ[OUT_ENV] = str(out)
        sys.executable = str(wrapper)
        try:
            return asyncio.run(record(executor, num_envs, warmup, out))
        finally:
            sys.executable = real
            del os.environ[OUT_ENV]


def _sh(text: str) -> str:
    """``text`` quoted for the shell."""
    import shlex

    return shlex.quote(text)


def table(walk: Walk) -> str:
    """The figures as a Markdown table."""
    lines = ["| side | calls | functions | files |", "| --- | --: | --: | --: |"]
    lines += [f"| {name} | {f['calls']} | {f['functions']} | {f['files']} |" for name, f in walk.rows()]
    return "\n".join(lines)


def path_lines(walk: Walk) -> list[str]:
    """The path: each function the first time it is called, ``file:function``, caller side then worker side,
    with its calls when more than one, and its thread when it is not the one the side started on."""
    lines: list[str] = []
    for title, side in (
        ("caller process", walk.caller),
        ("caller process, after the return", walk.after),
        ("worker processes", walk.worker),
    ):
        if not side.calls:
            continue
        lines.append(f"# {title}")
        first = side.calls[0][0][0]
        for (thread, file, name, _), n in side.calls:
            where = "" if thread == first else f"  [thread {thread}]"
            lines.append(f"{file}:{name}{'' if n == 1 else f'  x{n}'}{where}")
    return lines


def as_json(walk: Walk, args: dict[str, object]) -> dict[str, object]:
    """Everything, for a program: the arguments, the table's rows, the path."""
    return {
        "args": args,
        "rows": {name: figures for name, figures in walk.rows()},
        "caller": [[*f, n] for f, n in walk.caller.calls],
        "after": [[*f, n] for f, n in walk.after.calls],
        "worker": [[*f, n] for f, n in walk.worker.calls],
    }


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, record one step, print the figures (and the path, or JSON)."""
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--executor", choices=("inline", "in_process"), default="inline", help="default inline")
    parser.add_argument("--envs", type=int, default=4, help="number of envs (default 4)")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the recorded one (default 5)")
    parser.add_argument("--list", action="store_true", help="print the path too, function by function")
    parser.add_argument("--json", action="store_true", help="print everything as JSON instead")
    args = parser.parse_args(argv)
    if args.envs < 1:
        parser.error(f"--envs must be >= 1, got {args.envs}")
    if args.warmup < 1:
        parser.error(f"--warmup must be >= 1, got {args.warmup}")
    walk = run(args.executor, args.envs, args.warmup)
    if args.json:
        print(json.dumps(as_json(walk, vars(args)), indent=1))
        return 0
    where = "on a thread of this process" if args.executor == "in_process" else "1 worker process"
    print(f"one `await pool.step(actions)`: CartPole-v1, {args.envs} envs, executor={args.executor}, {where}\n")
    print(table(walk))
    if args.list:
        print()
        print("\n".join(path_lines(walk)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

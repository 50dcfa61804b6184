"""How a worker process is started: its command line, environment and CPU scheduling policy.

Both sides of a worker's birth use this module: the coordinator's launcher
(:mod:`aioenv.core.launcher`) and a worker host (:mod:`workers.agent`) build the command with
:func:`worker_command`, and the worker itself (``python -m workers``) applies
:func:`worker_sched_policy`. It sits below both so that the worker runtime never imports the
coordinator's side.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from aioenv.errors import UsageError

__all__ = ["WORKER_SCHED_ENV", "end_group", "start_worker", "worker_command", "worker_sched_policy"]

#: Environment variable naming the scheduling policy of worker processes: ``batch`` (the default) or ``default``.
WORKER_SCHED_ENV = "AIOENV_WORKER_SCHED"


def worker_sched_policy() -> str:
    """The scheduling policy worker processes take, from :data:`WORKER_SCHED_ENV`.

    ``"batch"`` (the default): a worker runs under Linux's ``SCHED_BATCH`` (same nice level and CPU
    share, no privilege needed), so a worker woken by a request does not preempt the process that sent
    it: a coordinator sending a batch to several workers is not stopped after the first send while the
    other workers wait (lock-step Ant-v5 lost 3-8% of its calls to multi-millisecond stalls that way).
    ``"default"``: leave workers under the normal policy. Nothing happens off Linux.

    Raises:
        UsageError: any other value.
    """
    value = os.environ.get(WORKER_SCHED_ENV, "batch").strip().lower() or "batch"
    if value not in ("batch", "default"):
        raise UsageError(f"{WORKER_SCHED_ENV} must be 'batch' or 'default', got {os.environ[WORKER_SCHED_ENV]!r}")
    return value


def worker_command(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start ``python -m workers ARGS`` in a child process.

    The child runs with ``-P``, so the working directory is not put first on its ``sys.path`` (a
    ``workers`` package of the user's own there must not stand in for aioenv's); its ``PYTHONPATH``
    names aioenv's own root first, then the directory this process's main code came from (its
    script's) and the working directory, so an env named ``"pkg.module:factory"`` that is found here,
    or in the working directory, is found in the worker too.
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main_dir = os.path.abspath(sys.path[0]) if sys.path and sys.path[0] else ""
    env = dict(os.environ)
    paths = [root, main_dir, os.getcwd(), *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return [sys.executable, "-P", "-m", "workers", *args], env


def start_worker(args: Sequence[str], pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start ``python -m workers ARGS`` (see :func:`worker_command`) as the leader of a process group of its
    own, so that whatever its envs start (a browser, a simulator) can be ended with it: :func:`end_group`."""
    cmd, env = worker_command(args)
    env.pop("AIOENV_TRUSTED_DIR", None)
    return subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, close_fds=True, pass_fds=tuple(pass_fds), start_new_session=True
    )


def end_group(pid: int) -> None:
    """SIGKILL what is left of the process group of worker ``pid`` (its envs' own processes). Call it once the
    worker has exited and before it is reaped: until then its pid, and so the group's id, cannot be reused.
    Processes that left the group (a daemon that called ``setsid``) are not reached."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

"""How a worker process is started: its command line, environment and CPU scheduling policy.

Both sides of a worker's birth use this module: the coordinator's launcher
(:mod:`aioenv.core.launcher`) and a worker host (:mod:`workers.agent`) build the command with
:func:`worker_command`, and the worker itself (``python -m workers``) applies
:func:`worker_sched_policy`. It sits below both so that the worker runtime never imports the
coordinator's side.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Protocol

from aioenv.errors import UsageError
from aioenv.transport.zygote import WORKER_START_ENV, fork_worker, start_template, wait_exit, worker_start

__all__ = [
    "PYTHONPATH_ENV",
    "SYS_PATH_ENV",
    "TEMPLATE_WAIT",
    "THREAD_VARS",
    "WORKER_SCHED_ENV",
    "WORKER_THREADS_ENV",
    "ExecProcess",
    "WorkerProcess",
    "check_worker_env",
    "end_group",
    "fork_unless_told",
    "launch_worker",
    "start_worker",
    "usable_cpus",
    "warm_up",
    "worker_command",
    "worker_sched_policy",
    "worker_threads",
]

#: Environment variable naming the scheduling policy of worker processes: ``batch`` (the default) or ``default``.
WORKER_SCHED_ENV = "AIOENV_WORKER_SCHED"
#: Environment variable: the threads each worker process's numeric libraries may start (see :func:`worker_threads`).
WORKER_THREADS_ENV = "AIOENV_WORKER_THREADS"
#: The variables through which OpenMP, OpenBLAS, MKL, BLIS, Accelerate and numexpr read how many threads to start.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: Environment variable carrying the starting process's ``sys.path`` (a JSON list) to a worker.
SYS_PATH_ENV = "AIOENV_SYS_PATH"
#: Environment variable carrying the starting process's ``PYTHONPATH`` to a worker (absent: it had none).
PYTHONPATH_ENV = "AIOENV_PYTHONPATH"


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (``taskset``, a cgroup cpuset, a container's or
    Kubernetes pod's pinned CPUs), which may be fewer than the machine has; ``os.cpu_count()`` where there is no
    mask. Default worker counts follow it, so a pool pinned to 2 of 64 CPUs does not start 64 workers."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity masks on this platform
        return os.cpu_count() or 1


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


def worker_threads() -> int | None:
    """The threads each worker's numeric libraries may start, from :data:`WORKER_THREADS_ENV`: a positive
    integer, or None where it is unset (then each of :data:`THREAD_VARS` travels as the starting process has it,
    and one it does not set is 1).

    A pool's parallelism is its worker processes, one per core: a worker whose numpy starts a BLAS thread per core
    (OpenBLAS does so when numpy is imported) oversubscribes the machine as soon as an env multiplies matrices, and
    starting them cost each worker ~0.07 s of CPU on 2 cores. So workers get 1 unless told, as Ray's tasks and
    actors do; an env that wants more (one big simulator per worker) sets ``AIOENV_WORKER_THREADS`` or the
    library's own variable.

    Raises:
        UsageError: a value that is not a positive integer.
    """
    value = os.environ.get(WORKER_THREADS_ENV)
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise UsageError(f"{WORKER_THREADS_ENV} must be a positive integer (threads per worker), got {value!r}")
    return int(value)


def check_worker_env() -> None:
    """Refuse a bad :data:`WORKER_SCHED_ENV`, :data:`WORKER_THREADS_ENV` or ``AIOENV_WORKER_START``
    (:func:`aioenv.transport.zygote.worker_start`) before any worker starts.

    Raises:
        UsageError: naming the variable, what it takes and what it holds.
    """
    worker_sched_policy()
    worker_threads()
    worker_start()


def fork_unless_told() -> None:
    """For a process that starts workers for many pools, one after another (``aioenv serve``, a worker host): fork
    them from its worker template (``AIOENV_WORKER_START=fork``, :mod:`aioenv.transport.zygote`: ~0.03 s for a pool
    of two workers, against ~0.3 s for fresh interpreters) unless its environment says
    ``AIOENV_WORKER_START=exec``. Forked workers step as fast as fresh ones (docs/performance.md, "Starting a
    pool")."""
    os.environ.setdefault(WORKER_START_ENV, "fork")


def worker_command(args: Sequence[str], module: str = "workers") -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start ``python -m workers ARGS`` (or another ``module`` of the
    worker runtime) in a child process.

    The worker searches modules where this process does: :data:`SYS_PATH_ENV` carries this process's
    ``sys.path`` as it is now (paths a script, pytest or a notebook added at run time included, ``""``
    made the working directory), in its order, then the working directory (an env named
    ``"pkg.module:factory"`` may be found there), as ``multiprocessing``'s spawn does. The worker takes it
    before it imports anything but the standard library. Its numeric libraries start the threads
    :func:`worker_threads` says (each of :data:`THREAD_VARS` set). To find the worker runtime itself, the child
    runs with ``-P`` (the working directory is not put first on its path) and ``PYTHONPATH`` naming
    aioenv's own root only, so a user's module named ``workers`` cannot stand in for aioenv's; the
    caller's ``PYTHONPATH`` travels in :data:`PYTHONPATH_ENV` and is given back to the worker's
    environment for whatever its envs start. ``AIOENV_TRUSTED_DIR`` is left out: a worker trusts the directory
    its ``--trusted-dir`` names, or none.
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cwd = os.getcwd()
    env = dict(os.environ)
    search = [os.path.join(cwd, p) if p else cwd for p in (*sys.path, cwd)]
    env[SYS_PATH_ENV] = json.dumps(list(dict.fromkeys(search)))
    env.pop(PYTHONPATH_ENV, None)
    env.pop("AIOENV_TRUSTED_DIR", None)
    threads = worker_threads()
    for var in THREAD_VARS:
        if threads is not None or not env.get(var, "").strip():
            env[var] = str(threads or 1)
    if "PYTHONPATH" in env:
        env[PYTHONPATH_ENV] = env["PYTHONPATH"]
    env["PYTHONPATH"] = root
    return [sys.executable, "-P", "-m", module, *args], env


def start_worker(args: Sequence[str], pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start ``python -m workers ARGS`` (see :func:`worker_command`) as the leader of a process group of its
    own, so that whatever its envs start (a browser, a simulator) can be ended with it: :func:`end_group`."""
    cmd, env = worker_command(args)
    return subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, close_fds=True, pass_fds=tuple(pass_fds), start_new_session=True
    )


class WorkerProcess(Protocol):
    """A worker process this process started (:func:`launch_worker`), fresh (:class:`ExecProcess`) or forked from
    a template (:class:`~aioenv.transport.zygote.ForkedProcess`): what a launcher or a worker host does with it.

    Its exit is known through :attr:`exit_fd`, never through its pid alone: a forked worker is its template's
    child, not this process's, and its pid may be another process's once it has been reaped."""

    @property
    def pid(self) -> int:
        """Its process id (for logs and reports; signals go through :meth:`send_signal`)."""
        ...

    @property
    def exit_fd(self) -> int:
        """A descriptor that becomes readable once it has exited; :meth:`finish` then returns at once."""
        ...

    @property
    def returncode(self) -> int | None:
        """Its exit code once :meth:`finish` has it (negative: the signal that killed it), else None."""
        ...

    def finish(self) -> int:
        """Its exit code, blocking until it has exited; what is left of its process group (its envs' own
        processes) is ended and the process reaped, its descriptors closed."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """:meth:`finish` once it has exited, within ``timeout`` s (``subprocess.TimeoutExpired`` after it)."""
        ...

    def send_signal(self, sig: int) -> None:
        """Send it ``sig``, unless it has been reaped (``ProcessLookupError`` when it exited meanwhile)."""
        ...

    def kill(self) -> None:
        """SIGKILL it (see :meth:`send_signal`)."""
        ...


class ExecProcess:
    """A worker started afresh with ``Popen`` (see :func:`launch_worker`), behind the interface a
    :class:`~aioenv.transport.zygote.ForkedProcess` has: :attr:`exit_fd` (a pidfd) is readable once it has
    exited, and :meth:`finish` ends its process group and reaps it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.exit_fd = os.pidfd_open(proc.pid)

    @property
    def returncode(self) -> int | None:
        """Its exit code once reaped (negative: the signal that killed it)."""
        return self._proc.returncode

    def finish(self) -> int:
        """End what is left of its process group and reap it (blocks until it has exited); returns its code."""
        if self._proc.returncode is None:
            end_group(self.pid)  # its envs' own processes go with it (it has exited, and is not reaped yet)
            self._proc.wait()
            os.close(self.exit_fd)
        return int(self._proc.returncode)

    def wait(self, timeout: float | None = None) -> int:
        """Block until it has exited (``subprocess.TimeoutExpired`` after ``timeout`` s), then :meth:`finish`."""
        if self._proc.returncode is None:
            wait_exit(self.exit_fd, self.pid, timeout)
        return self.finish()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless it has been reaped."""
        self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL it unless it has been reaped."""
        self._proc.kill()


#: Seconds a process that starts workers for pool after pool waits for its worker template before it serves
#: (``aioenv serve`` before it listens, a worker host before it joins), so that the first workers asked for are
#: forked too; a template late or failed leaves them starting afresh.
TEMPLATE_WAIT = 10.0


def warm_up(wait: float = 0.0) -> bool:
    """Start this process's worker template now (see :mod:`aioenv.transport.zygote`) and wait up to ``wait`` s
    for it to be ready, so that the first pools' workers are forked too (until it is ready, workers start
    afresh); whether it is ready. False, and nothing started, unless ``AIOENV_WORKER_START=fork``.

    Raises:
        UsageError: ``AIOENV_WORKER_START`` holds a value other than ``fork`` or ``exec``.
    """
    return worker_start() == "fork" and start_template(*worker_command([], module="workers.zygote"), wait)


def launch_worker(args: Sequence[str], pass_fds: Sequence[int] = ()) -> WorkerProcess:
    """Start ``python -m workers ARGS`` for a pool of this process (or a worker host's server), dying with it
    (``--parent-pid``): afresh in a process group of its own, or forked from this process's template
    (:mod:`aioenv.transport.zygote`) when ``AIOENV_WORKER_START=fork`` and the template can.

    Raises:
        UsageError: ``AIOENV_WORKER_START`` holds a value other than ``fork`` or ``exec``.
    """
    if worker_start() == "fork":
        cmd, env = worker_command([], module="workers.zygote")
        forked = fork_worker(cmd, env, args, pass_fds)  # the environment a fresh worker would have
        if forked is not None:
            return forked
    return ExecProcess(start_worker([*args, "--parent-pid", str(os.getpid())], pass_fds))


def end_group(pid: int) -> None:
    """SIGKILL what is left of the process group of worker ``pid`` (its envs' own processes). Call it once the
    worker has exited and before it is reaped: until then its pid, and so the group's id, cannot be reused.
    Processes that left the group (a daemon that called ``setsid``) are not reached."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)

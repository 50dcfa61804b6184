"""Workers forked from a template process (``python -m workers.zygote``) instead of started afresh
(``AIOENV_WORKER_START=fork``, the default of ``aioenv serve`` and of a worker host; elsewhere fresh interpreters
are the default).

A fresh ``python -m workers`` spends ~0.2 s of CPU (2 vCPUs), most of it on imports, before it can host an env; a
fork of a process that has made those imports starts in a few milliseconds. :func:`fork_worker` asks this process's
template (started at the first call) to fork a worker and gives back a :class:`ForkedProcess`, which behaves as
:class:`~aioenv.transport.spawn.ExecProcess` does for a worker started with ``Popen``. The template never runs user
code: a worker holds what a fresh interpreter holds after importing the worker runtime, and nothing of this process
(``multiprocessing``'s ``forkserver`` semantics); it gets this process's environment, working directory, stdout and
stderr as they are when it is forked. A change to what the template's imports may read (``sys.path``, ``PYTHON*``,
``OMP_NUM_THREADS``... see :func:`_key`) gets a template of its own. The wire between the two is described in
``workers/zygote.py``.

It is on with ``AIOENV_WORKER_START=fork`` (see :func:`worker_start` for why it is not the default) on a
platform with pidfds. A template that cannot be started or has died is replaced once per request; if that
fails too, the worker is started afresh and the reason logged.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Sequence

from aioenv.errors import UsageError

__all__ = [
    "WORKER_START_ENV",
    "ForkedProcess",
    "ZygoteError",
    "fork_worker",
    "start_template",
    "wait_exit",
    "worker_start",
]

log = logging.getLogger("aioenv.launcher")

#: Environment variable choosing how local workers start: ``exec`` (the default: fresh interpreters) or ``fork``
#: (from the template).
WORKER_START_ENV = "AIOENV_WORKER_START"
#: How a template writes an exit status (see ``workers/zygote.py``).
_STATUS = struct.Struct("=i")
#: Templates kept per process: one per distinct import-time environment (a changed ``sys.path`` or
#: ``OMP_NUM_THREADS`` needs its own, as its imports may resolve or behave otherwise, see :func:`_key`).
MAX_TEMPLATES = 4
#: Seconds a template that said it is ready has to answer a request (a fork takes milliseconds).
_ANSWER_TIMEOUT = 10.0


class ZygoteError(OSError):
    """The template could not fork a worker (it is gone, or it refused the request)."""


def worker_start() -> str:
    """How local workers start, from :data:`WORKER_START_ENV`: ``"exec"`` (the default) or ``"fork"``.

    ``exec`` is the default because a program of one pool would pay for a template's imports beside it and keep
    the process for nothing; ``fork`` is for programs that start many pools (test suites, notebooks, servers
    of short-lived pools: ``aioenv serve`` sets it unless its environment says otherwise). Forked workers step
    as fast as fresh ones (docs/performance.md, "Starting a pool": they stepped ~15% slower in 2026-11, a gap
    gone by 2026-12).

    Raises:
        UsageError: any other value.
    """
    value = os.environ.get(WORKER_START_ENV, "exec").strip().lower() or "exec"
    if value not in ("fork", "exec"):
        raise UsageError(f"{WORKER_START_ENV} must be 'fork' or 'exec', got {os.environ[WORKER_START_ENV]!r}")
    if value == "fork" and not hasattr(os, "pidfd_open"):
        return "exec"
    return value


def wait_exit(exit_fd: int, pid: int, timeout: float | None) -> None:
    """Block until the exit descriptor ``exit_fd`` of worker ``pid`` is readable (it has exited), at most ``timeout``
    s (None: for good).

    Raises:
        subprocess.TimeoutExpired: it had not exited by then.
    """
    ready, _, _ = select.select([exit_fd], [], [], timeout)
    if not ready:
        raise subprocess.TimeoutExpired(f"worker {pid}", timeout or 0.0)


class ForkedProcess:
    """A worker forked by a template: the subset of ``Popen`` a launcher uses, over a pidfd (signals reach
    this very process, never a reused pid) and a status pipe (its exit code, once the template has ended
    its process group and reaped it).

    Args:
        pid: the worker's pid.
        pidfd: a pidfd of it (owned from now on).
        status_fd: the read end of its status pipe (owned from now on).
        on_finish: called with it once :meth:`finish` has its exit code (its template's bookkeeping).
    """

    def __init__(
        self, pid: int, pidfd: int, status_fd: int, on_finish: Callable[[ForkedProcess], None] | None = None
    ) -> None:
        self.pid = pid
        self._on_finish = on_finish
        self.returncode: int | None = None
        self._pidfd = pidfd
        self.exit_fd = status_fd  # readable once the worker has exited and been reaped (or the template died)
        self.orphaned = False  # its template died before it could report this worker's exit

    def finish(self) -> int:
        """Its exit code, once :attr:`exit_fd` is readable (blocks until then); closes its descriptors. A
        template that died before reporting means the worker was killed with it (``PR_SET_PDEATHSIG``)."""
        if self.returncode is not None:
            return self.returncode
        data = b""
        with contextlib.suppress(OSError):
            data = os.read(self.exit_fd, _STATUS.size)
        if len(data) == _STATUS.size:
            self.returncode = int(_STATUS.unpack(data)[0])
        else:  # the template died: so did its workers
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            self.returncode = -signal.SIGKILL
            self.orphaned = True
        os.close(self.exit_fd)
        os.close(self._pidfd)
        if self._on_finish is not None:
            self._on_finish(self)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until it has exited (``subprocess.TimeoutExpired`` after ``timeout`` s) and return its code."""
        if self.returncode is None:
            wait_exit(self.exit_fd, self.pid, timeout)
        return self.finish()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless it has been reaped (``ProcessLookupError`` when it exited meanwhile)."""
        if self.returncode is None:
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        """SIGKILL it (see :meth:`send_signal`)."""
        self.send_signal(signal.SIGKILL)


class _Template:
    """One running ``python -m workers.zygote`` and its control socket."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        args = ["--fd", str(theirs.fileno()), "--parent-pid", str(os.getpid())]
        try:
            self.proc = subprocess.Popen(
                [*cmd, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()  # pools on several loops (SyncPools, a server) share the template
        self.live: set[ForkedProcess] = set()  # its workers not known to have exited
        self.ready = False  # it said it has made its imports

    def is_ready(self, wait: float = 0.0) -> bool:
        """Whether it has made its imports and takes requests, waiting up to ``wait`` s for it to say so.
        :class:`ZygoteError` when it died first."""
        with self.lock:
            if not self.ready and select.select([self.sock], [], [], wait)[0]:
                try:
                    data = self.sock.recv(1 << 16)
                except OSError as exc:
                    raise ZygoteError(f"the worker template (pid {self.proc.pid}) is gone: {exc}") from exc
                if not data:
                    raise ZygoteError(f"the worker template (pid {self.proc.pid}) is gone ({self._describe()})")
                self.ready = json.loads(data).get("ready") is True
            return self.ready

    def fork(self, argv: Sequence[str], env: dict[str, str], pass_fds: Sequence[int]) -> ForkedProcess:
        """Fork one worker running ``python -m workers ARGV``; :class:`ZygoteError` when the template cannot."""
        request = {"argv": list(argv), "env": env, "cwd": os.getcwd(), "fds": list(pass_fds)}
        with open(os.devnull, "rb") as devnull, self.lock:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [devnull.fileno(), 1, 2, *pass_fds])
                ready, _, _ = select.select([self.sock], [], [], _ANSWER_TIMEOUT)
                if not ready:
                    raise ZygoteError(f"the worker template (pid {self.proc.pid}) did not answer")
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 2)
            except ZygoteError:
                raise
            except OSError as exc:
                raise ZygoteError(f"the worker template (pid {self.proc.pid}) is gone: {exc}") from exc
        if not data:
            raise ZygoteError(f"the worker template (pid {self.proc.pid}) is gone ({self._describe()})")
        reply = json.loads(data)
        if "pid" not in reply or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise ZygoteError(f"the worker template refused to fork: {reply.get('error', reply)}")
        child = ForkedProcess(int(reply["pid"]), fds[0], fds[1], self._finished)
        self.live.add(child)
        return child

    def _finished(self, child: ForkedProcess) -> None:
        """``child`` has exited; when the template died with it (no status came), reap the template and forget
        it, so that the next worker comes from a new one."""
        self.live.discard(child)
        if not child.orphaned:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)  # it is exiting: its descriptors are closed as it goes
        if self.proc.returncode is not None:
            with _templates_lock:
                for key, template in list(_templates.items()):
                    if template is self:
                        del _templates[key]
            self.sock.close()

    def _describe(self) -> str:
        code = self.proc.poll()
        return "still running" if code is None else f"exit status {code}"

    def close(self) -> None:
        """Close the control socket (the template then ends its workers and exits) and reap it."""
        self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


#: Environment variables a template's imports may read (the interpreter's, the dynamic loader's, numpy's BLAS
#: threads, aioenv's own and the worker's search path): a template serves requests whose values of these equal
#: its own. Every other variable only reaches the forked worker, which gets the request's environment whole.
_IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "OPENBLAS", "GOTO", "OMP_", "MKL_", "NUMPY", "AIOENV_", "VIRTUAL_ENV")

_templates: dict[str, _Template] = {}  # by key, least recently used first
_templates_lock = threading.Lock()


def _key(cmd: list[str], env: dict[str, str]) -> str:
    """Which template may fork a worker of ``env``: the same command and the same import-time variables."""
    read_at_import = sorted((k, v) for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES))
    return json.dumps([cmd, read_at_import])


def _template(cmd: list[str], env: dict[str, str], fresh: bool) -> _Template | None:
    """This process's template for workers of ``env``, most recently used from now on (started now if needed;
    ``fresh``: replace the one there is). With :data:`MAX_TEMPLATES` running, the least recently used one that
    has no worker left makes room; None when each still has some."""
    key = _key(cmd, env)
    with _templates_lock:
        template = _templates.pop(key, None)
        if template is not None and fresh:
            template.close()
            template = None
        if template is None:
            while len(_templates) >= MAX_TEMPLATES:
                idle = next((k for k, t in _templates.items() if not t.live), None)
                if idle is None:
                    return None
                _templates.pop(idle).close()
            template = _Template(cmd, env)
        _templates[key] = template
        return template


def _forget_templates() -> None:
    """In a child forked from this process (``multiprocessing``'s fork, say): the templates are its parent's.
    Close its copies of their sockets and start its own when it needs one."""
    global _templates_lock
    _templates_lock = threading.Lock()
    for template in _templates.values():
        with contextlib.suppress(OSError):
            template.sock.close()
    _templates.clear()


def _close_templates() -> None:
    """At exit: each template ends the workers still running (as their ``PR_SET_PDEATHSIG`` would) and exits."""
    with _templates_lock:
        for template in _templates.values():
            template.close()
        _templates.clear()


os.register_at_fork(after_in_child=_forget_templates)
atexit.register(_close_templates)


def start_template(cmd: list[str], env: dict[str, str], wait: float) -> bool:
    """Start the template that ``cmd`` and ``env`` start, if it is not running, and wait up to ``wait`` s for it
    to have made its imports; whether it has."""
    try:
        template = _template(cmd, env, False)
        return template is not None and template.is_ready(wait)
    except (ZygoteError, OSError, ValueError) as exc:
        log.warning("could not start a worker template (%s)", exc)
        return False


def fork_worker(
    cmd: list[str], env: dict[str, str], argv: Sequence[str], pass_fds: Sequence[int]
) -> ForkedProcess | None:
    """Fork a worker running ``python -m workers ARGV --parent-pid TEMPLATE`` (it dies with the template) from
    the template that ``cmd`` (``python -m workers.zygote``) and ``env`` start, with ``pass_fds`` at their
    numbers and this process's stdout and stderr as its own. A template that fails is replaced once; None
    (start the worker afresh) when that fails too, when :data:`MAX_TEMPLATES` others still have workers, or
    while the template is still making its imports: the event loop that asks never waits for them (a server's
    clients would), so the first workers of a process start afresh while its template starts beside them."""
    for fresh in (False, True):
        try:
            template = _template(cmd, env, fresh)
            if template is None or not template.is_ready():
                return None  # still importing (a second or so after it started): this worker starts afresh
            return template.fork([*argv, "--parent-pid", str(template.proc.pid)], env, pass_fds)
        except (ZygoteError, OSError, ValueError) as exc:
            log.warning("could not fork a worker from its template (%s)%s", exc, "" if fresh else "; replacing it")
    return None

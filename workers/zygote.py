"""``python -m workers.zygote --fd N --parent-pid PID``: the template that worker processes are forked from.

Starting ``python -m workers`` afresh costs ~0.2 s of CPU per worker (2 vCPUs, bytecode compiled), most of it
imports (numpy, gymnasium, the worker runtime); ``AsyncVectorEnv`` forks its workers in milliseconds. A pool's
launcher, or a worker host (:mod:`aioenv.transport.zygote`), therefore starts this process once, with a worker's
command line environment: it imports the worker runtime and then waits. Each worker is a fork of it, as
``multiprocessing``'s ``forkserver`` does: the template never runs user code, so a worker holds what a fresh
interpreter would hold after those imports and nothing of the pool's process (its threads, its state).

The control socket (``--fd``, a ``SOCK_SEQPACKET`` pair with the launcher) carries one request per fork: a
JSON object ``{"argv", "env", "cwd", "fds"}`` and, as ``SCM_RIGHTS``, the child's stdin, stdout and
stderr followed by the descriptors to place at the numbers ``fds`` lists. The reply is ``{"pid": P}`` with
two descriptors: a pidfd of the child (to signal it) and the read end of a pipe on which its exit status
arrives (4 bytes, as ``Popen.returncode``) once the template has ended what is left of its process group
and reaped it; or ``{"error": why}``. Nothing here busy-waits: one ``poll`` over the control socket, the
parent's pidfd and the children's pidfds. When the launcher's process exits (its pidfd) or closes the
socket, the template SIGKILLs its children's process groups and exits, so no worker outlives its pool's
process; each child also dies with the template (``PR_SET_PDEATHSIG``, see ``workers.__main__``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["STATUS", "main"]

#: How an exit status is written on a child's status pipe (a native int, as ``Popen.returncode``).
STATUS = struct.Struct("=i")
#: The largest request (a JSON object; the environment dominates it).
MAX_REQUEST = 1 << 20
#: Descriptors a request may carry: stdin, stdout, stderr and the child's own.
MAX_FDS = 16


#: The process's name (``/proc/PID/comm``: the executable's, as ``top`` and ``ps -o comm`` show it) as it started.
_name = "python"


@dataclass
class _Child:
    pid: int
    pidfd: int
    status: int  # the write end of its status pipe


class _LauncherGone(Exception):
    """The launcher closed the control socket."""


@dataclass
class _Fork:
    """What a freshly forked child goes on with: its request and its descriptors."""

    request: dict[str, Any]
    fds: list[int]


def _preload() -> None:
    """Import what every worker imports, once, before any fork."""
    import gymnasium  # noqa: F401
    import numpy  # noqa: F401

    import workers.concurrent
    import workers.runtime  # noqa: F401


def _read_request(ctl: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One request and its descriptors; None at the end of the stream."""
    data, fds, _flags, _addr = socket.recv_fds(ctl, MAX_REQUEST, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    try:
        request = json.loads(data)
        if not isinstance(request, dict) or len(fds) != 3 + len(request.get("fds", ())):
            raise ValueError(f"expected a JSON object and 3 + len(fds) descriptors, got {len(fds)} descriptors")
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def _reply(ctl: socket.socket, fields: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    socket.send_fds(ctl, [json.dumps(fields).encode()], list(fds))


def _end(child: _Child) -> int:
    """Reap an exited child after ending its process group (its envs' own processes): before the reap its pid,
    and so the group's id, cannot be reused. Returns its exit status as ``Popen.returncode`` gives it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    _, status = os.waitpid(child.pid, 0)
    return os.waitstatus_to_exitcode(status)


def _report(child: _Child, code: int) -> None:
    with contextlib.suppress(OSError):  # the launcher closed its end: nobody waits for this status
        os.write(child.status, STATUS.pack(code))
    os.close(child.status)
    os.close(child.pidfd)


def _shut_down(children: dict[int, _Child]) -> None:
    """The launcher's process is gone: its workers go too."""
    for child in children.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
    for child in children.values():
        _report(child, _end(child))


def _serve(ctl: socket.socket, parent: int) -> _Fork | None:
    """Fork a child per request until the launcher goes; returns in a child (its :class:`_Fork`), None in
    the template when it should exit."""
    children: dict[int, _Child] = {}  # by pidfd
    poller = select.poll()
    poller.register(ctl, select.POLLIN)
    poller.register(parent, select.POLLIN)
    while True:
        for fd, events in poller.poll():
            if fd == parent:
                _shut_down(children)
                return None
            if fd == ctl.fileno():
                if not events & select.POLLIN:  # hung up
                    _shut_down(children)
                    return None
                try:
                    forked = _take_request(ctl, children, poller)
                except (_LauncherGone, OSError):  # the socket ended or broke: the launcher is gone
                    _shut_down(children)
                    return None
                if forked is not None:
                    return forked
                continue
            child = children.pop(fd)
            poller.unregister(fd)
            _report(child, _end(child))


def _take_request(ctl: socket.socket, children: dict[int, _Child], poller: select.poll) -> _Fork | None:
    """Read one request and fork its child; the child gets back its :class:`_Fork`."""
    try:
        got = _read_request(ctl)
    except ValueError as exc:
        _reply(ctl, {"error": f"malformed request: {exc}"})
        return None
    if got is None:
        raise _LauncherGone
    request, fds = got
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (*fds, read_end, write_end):
            os.close(fd)
        _reply(ctl, {"error": f"fork failed: {exc}"})
        return None
    if pid == 0:
        return _Fork(request, fds)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)  # the child cannot be reaped before this: only this process reaps it
    children[pidfd] = _Child(pid, pidfd, write_end)
    poller.register(pidfd, select.POLLIN)
    _reply(ctl, {"pid": pid}, (pidfd, read_end))
    os.close(read_end)
    return None


def _place_descriptors(fds: list[int], targets: list[int]) -> None:
    """Make the child's descriptors what ``Popen(stdin=..., pass_fds=...)`` would: stdio at 0-2, each passed
    descriptor at its number, every other descriptor of the template closed."""
    high = max([*targets, *fds, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high) for fd in fds]  # above every target: no clash
    keep = set(moved)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
                os.close(fd)
    for fd, target in zip(moved, [0, 1, 2, *targets], strict=True):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)


def _become_worker(forked: _Fork, ctl: socket.socket) -> NoReturn:
    """In a fresh child: take the request's descriptors, session, directory and environment, then run
    ``python -m workers`` with its arguments."""
    ctl.detach()  # closed below with the template's other descriptors; the object must not close it again
    request = forked.request
    argv = [str(arg) for arg in request["argv"]]
    _retitle(argv)  # before the environment is replaced: setproctitle finds its room from the original one
    _place_descriptors(forked.fds, [int(fd) for fd in request.get("fds", ())])
    os.setsid()
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})
    import numpy

    numpy.random.seed()  # a fresh interpreter seeds the global generator from the OS; so does each fork
    from workers.__main__ import main as worker_main

    sys.argv = ["python -m workers", *argv]
    code = worker_main(argv)
    from workers.ending import leave

    leave(code)  # as a fresh worker ends (see workers.ending), not through the template's stack


def _retitle(argv: list[str]) -> None:
    """Show the command line a fresh worker would have (``ps``, ``top``, ``/proc/PID/cmdline``): a fork keeps the
    template's, and a worker should be found by its name and arguments."""
    import setproctitle

    setproctitle.setproctitle(" ".join([sys.executable, "-P", "-m", "workers", *argv]))
    setproctitle.setthreadtitle(_name)  # setproctitle changed it too


def main(argv: list[str] | None = None) -> int:
    """Serve forks until the launcher's process goes."""
    global _name
    with open("/proc/self/comm", encoding="utf-8") as fh:
        _name = fh.read().strip()
    import setproctitle

    setproctitle.getproctitle()  # first: it finds its room from argv and the environment as they came
    setproctitle.setthreadtitle(_name)  # which renamed the process
    from workers.__main__ import _adopt_parent_path

    _adopt_parent_path()  # before any other import: the preloaded modules must resolve as a worker's would
    parser = argparse.ArgumentParser(prog="python -m workers.zygote", description="Fork aioenv workers.")
    parser.add_argument("--fd", type=int, required=True, help="the control socket, inherited from the launcher")
    parser.add_argument("--parent-pid", type=int, required=True, help="the launcher's process")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    try:
        parent = os.pidfd_open(args.parent_pid)
    except ProcessLookupError:
        return 1
    if os.getppid() != args.parent_pid:
        return 1
    _preload()
    ctl = socket.socket(fileno=args.fd)
    try:
        _reply(ctl, {"ready": True})  # until now, the launcher started its workers afresh
    except OSError:  # the launcher closed its end while this warmed up (its process ended, or it gave up waiting)
        return 0
    forked = _serve(ctl, parent)
    if forked is None:
        return 0
    _become_worker(forked, ctl)


if __name__ == "__main__":
    sys.exit(main())

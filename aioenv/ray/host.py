"""``python -m aioenv.ray.host --parent-pid PID``: the worker host a Ray actor runs (:mod:`aioenv.ray.actor`).

It is ``aioenv worker --connect`` (:class:`workers.agent.WorkerHost`) with two differences:

- its settings arrive as JSON on standard input (see :meth:`aioenv.ray.actor.HostConfig.stdin`), so
  CURVE keys are never on a command line (``ps`` shows every process's) nor in the environment;
- it dies with the actor: ``PR_SET_PDEATHSIG`` asks Linux for SIGKILL when the thread that started it
  ends, and it exits at once if the actor (``--parent-pid``) is already gone.

Keys live in two anonymous in-memory files (``memfd_create``, mode 0600) that the host and the worker
processes it starts read as ``/proc/<host pid>/fd/<n>``: nothing is written to disk, and the files vanish
with the host, however it ends (a node that dies leaves no key behind).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from typing import Any

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends; exit if the parent is gone already."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise SystemExit(f"aioenv.ray.host: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent_pid:  # the actor died before the line above
        raise SystemExit(1)


def _memory_file(name: str, text: str) -> str:
    """``text`` in an anonymous in-memory file (0600) held open by this process; the path that opens it."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.fchmod(fd, 0o600)
    data = text.encode()
    while data:
        data = data[os.write(fd, data) :]
    return f"/proc/{os.getpid()}/fd/{fd}"


def _settings(raw: bytes) -> dict[str, Any]:
    """The JSON settings on standard input (what is wrong with them, never their content)."""
    try:
        settings = json.loads(raw)
    except ValueError:
        raise SystemExit("aioenv.ray.host: standard input is not the JSON settings a Ray actor sends") from None
    if not isinstance(settings, dict):
        raise SystemExit("aioenv.ray.host: the settings on standard input must be a JSON object")
    return settings


def main(argv: list[str] | None = None) -> int:
    """Read the settings, then run the worker host until SIGTERM; its exit code."""
    parser = argparse.ArgumentParser(prog="python -m aioenv.ray.host", description=__doc__.split("\n")[0])
    parser.add_argument("--parent-pid", type=int, required=True, help="the Ray actor's pid")
    args = parser.parse_args(argv)
    _die_with(args.parent_pid)
    settings = _settings(sys.stdin.buffer.read())
    sys.stdin.close()

    from aioenv.errors import UsageError
    from aioenv.logs import configure_logging
    from aioenv.transport.spawn import check_worker_env, fork_unless_told
    from workers.agent import WorkerHost

    configure_logging(str(settings.get("log_level", "INFO")))
    try:
        check_worker_env()  # refuse a bad AIOENV_WORKER_SCHED, _THREADS or _START before any worker starts
    except UsageError as exc:
        print(f"aioenv.ray.host: {exc}", file=sys.stderr)
        return 2
    fork_unless_told()  # as `aioenv worker` does
    keys = settings.get("keys")
    curve = None
    if keys is not None:
        curve = (_memory_file("host.key_secret", keys["secret"]), _memory_file("server.key", keys["server"]))
    try:
        host = WorkerHost(
            settings["endpoint"],
            settings["capacity"],
            settings["executor"],
            name=settings["name"],
            server_timeout=settings["server_timeout"],
            curve=curve,
        )
        return host.run()
    except ValueError as exc:  # a bad setting, an unreadable key
        print(f"aioenv.ray.host: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

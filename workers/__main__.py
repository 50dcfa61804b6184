"""``python -m workers (--connect ENDPOINT | --fd N [--slab M [--done D]]) [--name NAME]
[--executor inline|thread|async] [--trusted-dir DIR] [--curve-secret FILE --server-key FILE]``.

``--connect``: a ZeroMQ endpoint (a server's worker port). ``--fd``: the descriptor of a pipe inherited
from the pool that started this process (see :mod:`aioenv.transport.pipe`); ``--slab``: the descriptor of its shared
rows (see :mod:`aioenv.transport.slab`), any executor's; ``--done``: the write end of the pool's done pipe (an
inline or thread worker's, see :mod:`aioenv.wire.lane`)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import zmq

#: Sets a ZeroMQ socket's options before it connects (CURVE keys).
Configure = Callable[["zmq.Socket[Any]"], None]


#: The cyclic collector's first threshold in a worker process (CPython's default is 700; the other two are kept).
#: A worker keeps every step in flight alive across many young-generation collections (with the ``async``
#: executor a coroutine, a future and a timer per env), and each collection walks them again: with 1,024 envs
#: stepping every 20 ms the collector took ~8% of a worker's CPU (``perf``), and ~0 with this threshold.
#: Cyclic garbage is still collected, after this many container allocations instead of 700.
GC_THRESHOLD = 20_000


# Where the starting process's search path arrives: the names of aioenv.transport.spawn's SYS_PATH_ENV and
# PYTHONPATH_ENV, spelled out here because they are read before anything but the standard library is imported.
_SYS_PATH_ENV = "AIOENV_SYS_PATH"
_PYTHONPATH_ENV = "AIOENV_PYTHONPATH"


def _adopt_parent_path() -> None:
    """Search modules where the process that started this worker does (see
    :func:`aioenv.transport.spawn.worker_command`), and give its ``PYTHONPATH`` back to this process's
    environment. A worker started by hand keeps the interpreter's own path."""
    raw = os.environ.pop(_SYS_PATH_ENV, None)
    if raw is None:
        return
    try:
        path = json.loads(raw)
    except ValueError:
        path = None
    if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
        raise SystemExit(f"{_SYS_PATH_ENV} must be a JSON list of paths, got {raw[:200]!r}")
    sys.path[:] = path
    parent = os.environ.pop(_PYTHONPATH_ENV, None)
    if parent is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = parent


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the process that started it dies (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _take_sched_policy() -> None:
    """Run this process under ``SCHED_BATCH`` unless told otherwise (see
    :func:`aioenv.transport.spawn.worker_sched_policy`): every thread it has now (numpy's BLAS threads start
    at import), and those started later (env threads, ZeroMQ's I/O threads) inherit it."""
    from aioenv.transport.spawn import worker_sched_policy

    if worker_sched_policy() != "batch" or not hasattr(os, "sched_setscheduler"):
        return
    try:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # refused, or the thread is gone: keep the default policy
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))


def _tune_gc() -> None:
    """Raise the collector's first threshold to :data:`GC_THRESHOLD` in this worker process (see there); an env
    that wants other thresholds may set them when it is made (the process is the worker's alone)."""
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, second, third)


def _parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    from aioenv.wire.options import EXECUTORS

    parser = argparse.ArgumentParser(prog="python -m workers", description="Host aioenv envs for a coordinator.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--connect", help="coordinator endpoint, e.g. tcp://host:5556")
    where.add_argument("--fd", type=int, help="descriptor of a pipe to the coordinator, inherited from it")
    parser.add_argument("--name", default=f"worker-{os.getpid()}", help="worker name (the identity its messages carry)")
    parser.add_argument("--executor", default="inline", choices=EXECUTORS, help="how envs are run")
    parser.add_argument(
        "--trusted-dir", default=None, help="directory of pickled factories and payloads written by a local pool"
    )
    parser.add_argument("--parent-pid", type=int, default=None, help="exit at once if this process is gone")
    parser.add_argument(
        "--slab", type=int, default=None, help="descriptor of the pool's shared rows (a worker of --fd)"
    )
    parser.add_argument(
        "--done",
        type=int,
        default=None,
        help="write end of the pool's done pipe (an inline or thread worker with --slab)",
    )
    parser.add_argument(
        "--quiet",
        type=_two_fds,
        default=None,
        metavar="Q,C",
        help="write end of the pool's quiet pipe, read end of its countdown pipe (an inline worker with --done)",
    )
    parser.add_argument("--curve-secret", default=None, help="own .key_secret file (a server with --auth)")
    parser.add_argument("--server-key", default=None, help="the server's .key file (a server with --auth)")
    parser.add_argument("--log-level", default="WARNING")
    return parser


def _check_descriptors(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--fd`` must be an open socket, ``--slab`` an open descriptor of a worker of ``--fd`` and ``--done`` a pipe of
    an inline or thread worker with ``--slab``: say which, instead of failing later on a closed or wrong descriptor."""
    if args.fd is not None and not stat.S_ISSOCK(_mode(parser, "--fd", args.fd)):
        parser.error(f"--fd {args.fd}: not a socket (expected the pipe a pool passes to its workers)")
    if args.slab is not None:
        if args.fd is None:
            parser.error("--slab is for a worker of a local pool (--fd)")
        _mode(parser, "--slab", args.slab)
    if args.done is not None:
        from aioenv.wire.lane import DONE_PIPE_EXECUTORS

        if args.slab is None or args.executor not in DONE_PIPE_EXECUTORS:
            parser.error("--done is for an inline or thread worker with shared rows (--slab)")
        if not stat.S_ISFIFO(_mode(parser, "--done", args.done)):
            parser.error(f"--done {args.done}: not a pipe (expected the done pipe a pool passes to its workers)")
    if args.quiet is not None:
        if args.done is None or args.executor != "inline":
            parser.error("--quiet is for an inline worker with a done pipe (--done)")
        for fd in args.quiet:
            if not stat.S_ISFIFO(_mode(parser, "--quiet", fd)):
                parser.error(f"--quiet {fd}: not a pipe (expected the quiet and countdown pipes a pool passes)")


def _two_fds(text: str) -> tuple[int, int]:
    """``--quiet``'s ``Q,C``: two descriptors."""
    parts = text.split(",")
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected two descriptors as Q,C, got {text!r}")
    return int(parts[0]), int(parts[1])


def _mode(parser: argparse.ArgumentParser, flag: str, fd: int) -> int:
    """The file mode of the descriptor ``fd`` given as ``flag``; a usage error when it is not open."""
    try:
        return os.fstat(fd).st_mode
    except OSError as exc:
        parser.error(f"{flag} {fd}: not an open descriptor ({exc.strerror})")


def _curve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Configure | None:
    """The socket configurer of a worker joining a server with ``--auth`` (None without keys)."""
    if not (args.curve_secret or args.server_key):
        return None
    if args.fd is not None:
        parser.error("--curve-secret and --server-key are for --connect")
    if not (args.curve_secret and args.server_key):
        parser.error("--curve-secret and --server-key go together")
    from aioenv.transport.auth import client_configurer

    return client_configurer((args.curve_secret, args.server_key))


def _trust(trusted_dir: str | None, fd: int | None) -> None:
    """In-worker code (aioenv.compat's helper) loads pickled payloads from this directory only; a worker
    started without one must not trust a directory inherited through the environment. A worker on a pipe
    inherited from its pool talks to that pool alone: a user-defined space's values (wrapped as
    ``Pickled``) travel pickled on it."""
    if fd is not None:
        from aioenv.wire.protocol import trust_parent_pipe

        trust_parent_pipe()
    if trusted_dir:
        os.environ["AIOENV_TRUSTED_DIR"] = trusted_dir
    else:
        os.environ.pop("AIOENV_TRUSTED_DIR", None)


def _run(args: argparse.Namespace, configure: Configure | None) -> None:
    """Run the worker of the executor until its coordinator closes it."""
    link: str | int = args.connect if args.fd is None else args.fd
    common: dict[str, Any] = {
        "trusted_dir": args.trusted_dir,
        "executor": args.executor,
        "configure": configure,
        "slab_fd": args.slab,
        "done_fd": args.done,
    }
    if args.executor == "inline":
        from workers.runtime import Worker

        Worker(link, args.name, quiet_fds=args.quiet, **common).run()
    else:
        from workers.concurrent import ConcurrentWorker

        ConcurrentWorker(link, args.name, **common).run()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run a worker until the coordinator closes it."""
    _adopt_parent_path()  # first: every import after it must resolve as in the starting process
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.parent_pid is not None:
        _die_with_parent()
        if os.getppid() != args.parent_pid:
            return 1  # the parent died before we could ask to follow it
    from aioenv.errors import UsageError

    try:
        _take_sched_policy()
    except UsageError as exc:  # a bad AIOENV_WORKER_SCHED
        parser.error(str(exc))
    _tune_gc()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    _trust(args.trusted_dir, args.fd)
    _check_descriptors(parser, args)
    _run(args, _curve(parser, args))
    return 0


if __name__ == "__main__":
    from workers.ending import leave

    leave(main())  # a clean end: without the interpreter's teardown (see workers.ending)

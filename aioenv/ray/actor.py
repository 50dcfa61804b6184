"""The Ray actor behind one worker host: it runs ``python -m aioenv.ray.host`` and shares its fate.

Why a subprocess and not the host inside the actor: :class:`workers.agent.WorkerHost` is a process of its
own by design (it owns SIGTERM/SIGINT, a signal wake-up descriptor, a blocking ZeroMQ poll and its
worker processes), and a Ray worker process already has Ray's threads and signal handlers. Run as a child,
the host is exactly what ``aioenv worker --connect`` is, and the actor only starts it, watches it and
stops it.

Fate sharing, both ways:

- the actor dies (``ray.kill``, its node dies, its process is killed): the host gets SIGKILL from the
  kernel (``PR_SET_PDEATHSIG``, set by the host itself against the thread that started it, a thread
  that lives as long as the host), and the host's worker processes follow it the same way;
- the host dies on its own (killed, out of memory): the actor ends its own process, so Ray restarts it
  (``max_restarts``) and the new actor starts a new host, which joins the server again. A host refused
  for good (exit code 2: a protocol version the server does not speak) is not restarted: the actor
  stays, and :meth:`HostActor.state` says why.

CURVE keys reach the host on its standard input, never on a command line or in the environment, and
live there only in memory (see :mod:`aioenv.ray.host`). Nothing here logs them: :class:`CurveKeys`
prints as ``CurveKeys(<secret>)``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

__all__ = ["REFUSED", "CurveKeys", "HostActor", "HostConfig"]

#: The exit code of a worker host refused for good by the server (see :mod:`workers.agent`).
REFUSED = 2
#: Seconds for the host process to start and say it is dialing the server.
START_TIMEOUT = 60.0
_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
_LINE_LEVEL = re.compile(r"^\S+ \S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


class CurveKeys:
    """A worker host's CURVE key pair and the server's public key, as the text of their files (what
    ``aioenv keygen`` writes). Its ``repr`` hides them, so no log line or error message shows a key."""

    __slots__ = ("secret", "server")

    def __init__(self, secret: str, server: str) -> None:
        self.secret = secret
        self.server = server

    def __repr__(self) -> str:
        return "CurveKeys(<secret>)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (CurveKeys, (self.secret, self.server))


@dataclasses.dataclass(frozen=True)
class HostConfig:
    """What one worker host is told: ``aioenv worker``'s options."""

    endpoint: str
    capacity: int
    executor: str
    name: str
    server_timeout: float = 10.0
    log_level: str = "WARNING"  # lines of the host's log at this level or above go to the actor's stderr
    keys: CurveKeys | None = None

    def stdin(self) -> bytes:
        """The host's settings as its standard input reads them (the keys included, in memory only)."""
        fields: dict[str, Any] = dataclasses.asdict(self)
        fields["keys"] = None if self.keys is None else {"secret": self.keys.secret, "server": self.keys.server}
        fields["log_level"] = "DEBUG" if self.log_level.upper() == "DEBUG" else "INFO"  # INFO says when it joined
        return json.dumps(fields).encode()


class HostActor:
    """One worker host on a Ray node (used as a Ray actor class; see :func:`aioenv.ray.place_hosts`).

    ``__init__`` starts the host and returns once it is dialing the server, so a restarted actor joins
    again by itself. Methods: :meth:`state` (where it runs, whether it joined), :meth:`wait_joined` and
    :meth:`stop`.
    """

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self._log: collections.deque[str] = collections.deque(maxlen=40)  # its last lines, for errors
        self._forward_at = _LEVELS.get(config.log_level.upper(), 30)
        self._proc: subprocess.Popen[bytes] | None = None
        self._error = ""
        self._code: int | None = None
        self._reap = threading.Lock()  # held to signal the host's group while it is not yet reaped
        self._started = threading.Event()  # the host process exists (or could not be started)
        self._dialing = threading.Event()  # the host runs and dials the server
        self._joined = threading.Event()
        self._ended = threading.Event()
        self._stopping = False
        self.joins = 0
        threading.Thread(target=self._keep, name="aioenv-host", daemon=True).start()
        self._started.wait()
        deadline = time.monotonic() + START_TIMEOUT
        while not (self._dialing.is_set() or self._ended.is_set()) and time.monotonic() < deadline:
            self._dialing.wait(0.05)
        if not self._dialing.is_set():  # a creation error is final: Ray does not restart the actor for it
            self.stop(0.0)
            why = self._error or (f"it exited with {self._code}" if self._ended.is_set() else "it did not start")
            raise RuntimeError(f"worker host {config.name} could not start ({why}): {self.last_lines()}")

    # ------------------------------------------------------------ the host process

    def _command(self) -> tuple[list[str], dict[str, str]]:
        """``python -m aioenv.ray.host`` with aioenv's own root (where ``aioenv`` and ``workers`` are) first on its
        ``PYTHONPATH``."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "aioenv.ray.host", "--parent-pid", str(os.getpid())]
        return cmd, env

    def _keep(self) -> None:
        """Start the host, pass on its log, reap it. This thread lives as long as the host (the host's
        PR_SET_PDEATHSIG fires when the thread that started it ends)."""
        cmd, env = self._command()
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                close_fds=True, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self._error = f"cannot start {cmd[0]}: {exc}"
            self._ended.set()
            self._started.set()
            return
        self._proc = proc
        self._started.set()
        assert proc.stdin is not None
        assert proc.stderr is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(self.config.stdin())
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        # Its log is read by a thread of its own: processes the host's envs start inherit the pipe and may hold
        # it open after the host is gone, so the end of the log does not tell that the host ended.
        reader = threading.Thread(target=self._read, args=(proc.stderr,), name="aioenv-host-log", daemon=True)
        reader.start()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its pid stays its own
        with self._reap:
            self._code = proc.wait()
        reader.join(1.0)  # its last lines, for the error that may follow
        self._ended.set()
        if not self._stopping and self._dialing.is_set() and self._code != REFUSED:
            # It died on its own: so does this actor, and Ray restarts it (a new host joins the server).
            sys.stderr.write(f"worker host {self.config.name} exited with {self._code}: ending its Ray actor\n")
            sys.stderr.flush()
            os._exit(1)

    def _read(self, stream: IO[bytes]) -> None:
        """Pass each line of the host's log to :meth:`_on_line` until the pipe closes."""
        with stream:
            for raw in stream:
                self._on_line(raw.decode(errors="replace").rstrip("\n"))

    def _on_line(self, line: str) -> None:
        """One line of the host's log: remembered, passed on at the configured level, and read for news."""
        self._log.append(line)
        found = _LINE_LEVEL.match(line)
        if found is None or _LEVELS[found.group(1)] >= self._forward_at:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        if found is None:
            return
        if f"worker host {self.config.name}: " in line:
            self._dialing.set()
        elif "joined the server at" in line:
            self.joins += 1
            self._joined.set()
        elif "joining again" in line:
            self._joined.clear()

    def last_lines(self) -> str:
        """The host's last log lines (for an error message)."""
        return " | ".join(self._log) or "(no log)"

    # ------------------------------------------------------------ the actor's methods

    def state(self) -> dict[str, Any]:
        """Where this host runs and how it is doing: name, Ray node, pids, joined, exit code, last log lines."""
        import socket

        import ray

        proc = self._proc
        return {
            "name": self.config.name,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "actor_pid": os.getpid(),
            "host_pid": proc.pid if proc is not None and not self._ended.is_set() else None,
            "joined": self._joined.is_set(),
            "joins": self.joins,
            "code": self._code,
            "log": self.last_lines(),
        }

    def wait_joined(self, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` seconds for the server to admit the host (or the host to end); its state."""
        deadline = time.monotonic() + timeout
        while not (self._joined.is_set() or self._ended.is_set()) and time.monotonic() < deadline:
            self._joined.wait(0.05)
        return self.state()

    def stop(self, grace: float) -> int | None:
        """Stop the host: SIGTERM (it stops its worker processes and tells the server it leaves), and after
        ``grace`` seconds SIGKILL to its process group. Returns its exit code (None: it would not die)."""
        self._stopping = True
        proc = self._proc
        if proc is None:
            return self._code
        with self._reap, contextlib.suppress(ProcessLookupError):
            if self._code is None:  # not reaped yet: its pid is still its own
                proc.send_signal(signal.SIGTERM)
        if not self._ended.wait(grace):
            with self._reap, contextlib.suppress(ProcessLookupError):
                if self._code is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            self._ended.wait(5.0)
        return self._code

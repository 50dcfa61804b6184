"""Server and worker-host processes for tests, started as users start them (``python -m aioenv.cli``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tests.support.procs import HANG, process_gone, workers_of
from tests.support.scripts import ROOT

__all__ = ["ServerProcess", "WorkerHostProcess", "keygen", "unix_bind"]


def unix_bind() -> tuple[str, str]:
    """``(unix:///.../s.sock, its directory)``: a new directory of its own under /tmp, short enough for a socket
    path (108 bytes at most, which pytest's ``tmp_path`` can pass)."""
    where = tempfile.mkdtemp(prefix="aioenv-", dir="/tmp")
    return f"unix://{where}/s.sock", where


def keygen(directory: str | os.PathLike[str], *names: str) -> None:
    """Key pairs ``NAME.key``/``NAME.key_secret`` in ``directory``, made as users make them (``aioenv keygen``)."""
    for name in names:
        made = subprocess.run(
            [sys.executable, "-m", "aioenv.cli", "keygen", str(directory), "--name", name],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            check=False,
        )
        assert made.returncode == 0, made.stderr


def terminate(
    proc: subprocess.Popen[str], workers: list[int], log: list[str], what: str, reader: threading.Thread | None = None
) -> None:
    """SIGTERM ``proc``: it must exit 0 (its remaining log goes to ``log``, read here or by ``reader``, a thread
    that reads it already) and ``workers`` must be gone."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if reader is not None:
        reader.join(HANG)
    elif proc.stderr is not None:
        log.append(proc.stderr.read())
    if proc.stderr is not None:
        proc.stderr.close()
    assert code == 0, f"{what} exited with {code}:\n{''.join(log)}"
    deadline = time.monotonic() + HANG
    while not all(process_gone(pid) for pid in workers):
        assert time.monotonic() < deadline, f"{what} left workers behind: {workers}"
        time.sleep(0.05)


class ServerProcess:
    """``aioenv serve`` on a free local port (or, ``bind="unix"``, a unix socket in a directory of its own);
    :meth:`stop` sends SIGTERM and checks a clean exit (and, on a unix socket, that the server removed its file)."""

    def __init__(self, *args: str, bind: str = "tcp://127.0.0.1:0", prefix: tuple[str, ...] = ()) -> None:
        self._dir: str | None = None
        if bind == "unix":
            bind, self._dir = unix_bind()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [*prefix, sys.executable, "-m", "aioenv.cli", "serve", "--bind", bind, *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        deadline = time.monotonic() + HANG
        assert self.proc.stderr is not None
        while True:
            line = self.proc.stderr.readline()
            self.log.append(line)
            hosts = re.search(r"worker hosts join at (tcp://\S+)", line)
            if hosts:
                self.worker_endpoint = hosts.group(1)
            found = re.search(r"listening on ((?:tcp|unix)://\S+)", line)
            if found:
                self.endpoint = found.group(1)
                break
            assert line, f"the server did not start: {''.join(self.log)}"
            assert time.monotonic() < deadline, f"the server did not start: {''.join(self.log)}"
        # From now on a thread reads the log as it comes: a server that logs a lot never blocks on a full pipe.
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def wait_log(self, pattern: str) -> re.Match[str]:
        """The first match of ``pattern`` in the server's log, waited for (within ``HANG``)."""
        deadline = time.monotonic() + HANG
        while True:
            for line in list(self.log):
                found = re.search(pattern, line)
                if found:
                    return found
            assert self.proc.poll() is None, f"the server exited: {''.join(self.log)}"
            assert time.monotonic() < deadline, f"no {pattern!r} in the server's log: {''.join(self.log)}"
            time.sleep(0.02)

    def http_url(self) -> str:
        """``http://HOST:PORT`` of its HTTP port (``--http``), once it listens."""
        return "http://" + self.wait_log(r"HTTP port listening on (\S+)").group(1)

    def workers(self) -> list[int]:
        """Pids of the server's worker processes."""
        return workers_of(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM; it must exit 0 with none of its workers left (and no socket file)."""
        try:
            terminate(self.proc, self.workers(), self.log, "the server", self._reader)
            if self._dir is not None:
                assert os.listdir(self._dir) == [], "the server left its socket file behind"
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)


class WorkerHostProcess:
    """``aioenv worker --connect ...``: a worker host; ``wait_joined`` waits for the server to admit it. A thread
    reads its log as it comes (a host that logs a lot never blocks on a full pipe); :meth:`wait_for` reads on
    from where the last call stopped."""

    def __init__(self, endpoint: str, *args: str, name: str, capacity: int = 8, prefix: tuple[str, ...] = ()) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [*prefix, sys.executable, "-m", "aioenv.cli", "worker", "--connect", endpoint, "--name", name]
        cmd += ["--capacity", str(capacity), *args]
        self.name = name
        self.args = (endpoint, *args)
        self.capacity = capacity
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self._read = 0  # lines of the log wait_for has looked at
        self._grew = threading.Condition()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._grew:
                self.log.append(line)
                self._grew.notify_all()
        with self._grew:
            self.log.append("")  # the end: it exited
            self._grew.notify_all()

    def wait_for(self, pattern: str) -> str:
        """The next line of its log (after those earlier calls looked at) that matches ``pattern``."""
        deadline = time.monotonic() + HANG
        with self._grew:
            while True:
                while self._read < len(self.log):
                    line = self.log[self._read]
                    self._read += 1
                    if re.search(pattern, line):
                        return line
                    assert line, f"{pattern!r} never came (it exited): {''.join(self.log)}"
                left = deadline - time.monotonic()
                assert left > 0, f"{pattern!r} never came: {''.join(self.log)}"
                self._grew.wait(left)

    def wait_joined(self) -> WorkerHostProcess:
        """Return once the server admitted it."""
        self.wait_for("joined the server")
        return self

    def workers(self) -> list[int]:
        """Pids of its worker processes."""
        return workers_of(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM; it must exit 0 with none of its workers left."""
        if self.proc.poll() is not None:  # it exited (or was killed) already
            self._reader.join(HANG)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            return
        os.kill(self.proc.pid, signal.SIGCONT)  # a test may have stopped it
        terminate(self.proc, self.workers(), self.log, "the worker host", self._reader)

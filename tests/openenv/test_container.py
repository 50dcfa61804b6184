"""``openenv+image:IMAGE`` without a container engine: the name, the options, the server's refusal, the reaper that
removes a dead process's containers, and a pool whose engine cannot start the image. The engine here is a script of
the test's own named ``podman`` on PATH, which logs what it is asked; ``make test-containers`` (tests/containers) runs
the real one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aioenv
from aioenv import UsageError
from aioenv.core.sources import parse_sources
from aioenv.openenv import container as containers
from aioenv.openenv.container import OpenEnvContainerError, container_spec
from aioenv.openenv.reaper import read_commands
from tests.support.procs import HANG, process_gone
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(120)

PODMAN = {"engine": "podman"}


class FakeEngine:
    """A ``podman`` on PATH that logs each command line to ``log``: ``ps`` lists two ids, ``run`` fails as an
    image that is nowhere fails, ``rm`` and ``version`` succeed."""

    def __init__(self, where: Path) -> None:
        self.log = where / "engine.log"
        self.path = where / "podman"
        self.path.write_text(
            textwrap.dedent(
                f"""\
                #!/bin/sh
                echo "$*" >> {self.log}
                case "$1" in
                  ps) echo c0ffee1; echo c0ffee2 ;;
                  run) echo "Error: docker.io/library/nothere: image not known" >&2; exit 125 ;;
                  inspect) echo "Error: no such container" >&2; exit 125 ;;
                esac
                """
            )
        )
        self.path.chmod(0o755)

    def calls(self) -> list[str]:
        """The command lines so far."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, line: str) -> None:
        """Wait until ``line`` was logged."""
        deadline = time.monotonic() + HANG
        while line not in self.calls():
            assert time.monotonic() < deadline, f"the engine was never asked {line!r}; it was asked {self.calls()}"
            time.sleep(0.02)


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(containers, "_engines", {})  # looked up again, under this PATH
    return fake


@pytest.mark.parametrize(
    "image",
    ["localhost/aioenv-openenv-test:latest", "ghcr.io/org/env:v1.2", "echo", "registry:5000/a/b@sha256:" + "a" * 64],
)
def test_an_image_name_is_a_container_source(image: str) -> None:
    sources, n = parse_sources("openenv+image:" + image, 3, {"engine": "podman"}, None)
    assert n == 3
    assert sources.sources == {"0": {"kind": "openenv", "image": image, "kwargs": {"engine": "podman"}}}
    assert sources.asynchronous


@pytest.mark.parametrize("image", ["", "--privileged", "a b", "Up", "a;b"])
def test_a_malformed_image_name_is_refused_naming_the_forms(image: str) -> None:
    name = "openenv+image:" + image
    with pytest.raises(ValueError, match=r"'openenv\+image:IMAGE'") as err:
        parse_sources(name, 2, None, None)
    assert repr(name) in str(err.value)


def test_a_servers_pool_runs_no_container_a_client_names() -> None:
    with pytest.raises(UsageError, match="run containers"):
        parse_sources("openenv+image:localhost/aioenv-openenv-test:latest", 2, None, None, strict=True)


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("echo", "a server does not open OpenEnv sessions, start OpenEnv apps or run containers a client names"),
        ("localhost/echo:latest", "is no name"),
    ],
)
async def test_a_server_refuses_an_image_over_the_network(engine: FakeEngine, image: str, says: str) -> None:
    """A real server, asked by a real client, even one whose allow list names the image: refused before any worker
    or engine is asked anything."""
    srv = ServerProcess("--allow-env", "openenv+image:*")
    try:
        with pytest.raises(UsageError, match=says) as err:
            await aioenv.make("openenv+image:" + image, 2, endpoint=srv.endpoint)
        assert repr("openenv+image:" + image) in err.value.message
    finally:
        srv.stop()
    assert engine.calls() == []


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"engine": "lxc"}, r"engine must be one of \['auto', 'docker', 'podman'\], got 'lxc'"),
        ({"port": 70000}, "port must be a TCP port"),
        ({"port": 0}, "port must be"),
        ({"start_timeout": 0}, "start_timeout must be a positive number"),
        ({"environment": {"A B": "x"}}, "environment must map variable names to strings"),
        ({"environment": {"A": 1}}, "environment must map variable names to strings"),
        ({"run_args": "--memory 2g"}, "run_args must be a list of strings"),
    ],
)
def test_a_bad_option_names_itself(engine: FakeEngine, options: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        container_spec("echo", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("image", ["", "--privileged", "a b"])
def test_an_image_that_is_no_image_name_is_refused(image: str) -> None:
    """Never an option of the engine's run (an env made in Python, without the name's own check)."""
    with pytest.raises(ValueError, match="image must name a container image"):
        container_spec(image, engine="podman")


def test_an_engine_that_is_not_installed_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(containers, "_engines", {})
    with pytest.raises(OpenEnvContainerError, match="no docker command on PATH"):
        container_spec("echo", engine="docker")
    with pytest.raises(OpenEnvContainerError, match="no container engine answers"):
        container_spec("echo")


@pytest.mark.parametrize(
    ("state", "says"),
    [
        (("exited", 137, False), "exited with code 137 (SIGKILL)"),
        (("exited", 137, True), "exited with code 137 (SIGKILL), killed for exceeding its memory"),
        (("exited", 1, False), "exited with code 1"),
        (("gone", None, False), "is gone (removed)"),
        (("paused", 0, False), "is paused"),
        (("running", 0, False), "runs"),
    ],
)
def test_how_a_container_ended_is_told(state: tuple[str, int | None, bool], says: str) -> None:
    assert containers._ended(*state) == says


def test_the_reaper_reads_the_commands_it_must_wait_for() -> None:
    running: set[int] = set()
    read_commands("+12\n+13\n-12\n+x\n-\n++4\n", running)
    assert running == {13}


#: A process that takes a reaper for ENGINE, prints its label and pid, then ``argv[2]``: ``wait`` (until killed),
#: ``release`` (lets go of it, then waits), ``command`` (tells it of a running command first: ``sleep``'s pid).
HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from aioenv.openenv.container import Reaper

    reaper = Reaper.acquire(sys.argv[1])
    if sys.argv[2] == "command":
        sleeper = subprocess.Popen(["sleep", "3"])
        reaper.tell(f"+{sleeper.pid}")
    print(reaper.label, reaper.proc.pid, flush=True)
    if sys.argv[2] == "release":
        reaper.release()
    time.sleep(3600)
    """
)


@contextlib.contextmanager
def _holder(engine: FakeEngine, mode: str) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """Run :data:`HOLDER`; ``(process, its reaper's label, the reaper's pid)``; killed and reaped at the end."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", HOLDER, str(engine.path), mode]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            label, pid = proc.stdout.readline().split()
            yield proc, label, int(pid)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + HANG
    while not process_gone(pid, "reaper.py"):
        assert time.monotonic() < deadline, f"the reaper {pid} is still there"
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["wait", "command"])
def test_a_killed_process_s_reaper_removes_its_containers(engine: FakeEngine, mode: str) -> None:
    """SIGKILL the process that holds a reaper: the reaper, in a session of its own, lists the label's containers and
    removes them, then exits; with a command of the process still running, only once that command ended."""
    with _holder(engine, mode) as (proc, label, reaper):
        assert os.getsid(reaper) == reaper  # its own session: nothing aimed at the holder's group reaches it
        time.sleep(0.3)
        assert engine.calls() == []  # it waits while its parent lives
        killed = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG)
        engine.wait_for("rm -f c0ffee1 c0ffee2")
        if mode == "command":
            assert time.monotonic() - killed > 1.0  # the sleep of 3 s it was told of had to end first
        assert engine.calls() == [f"ps -aq --filter label=aioenv.owner={label}", "rm -f c0ffee1 c0ffee2"]
        _wait_gone(reaper)


def test_a_released_reaper_sweeps_and_exits_while_its_process_lives(engine: FakeEngine) -> None:
    with _holder(engine, "release") as (proc, label, reaper):
        engine.wait_for("rm -f c0ffee1 c0ffee2")
        assert engine.calls()[0] == f"ps -aq --filter label=aioenv.owner={label}"
        _wait_gone(reaper)
        assert proc.poll() is None


async def test_an_image_the_engine_cannot_start_fails_the_make_naming_it(engine: FakeEngine) -> None:
    """The engine's own words reach the caller; each container's name is removed and its reaper has swept."""
    with pytest.raises(aioenv.EnvError, match="podman could not start a container of 'nothere'") as err:
        async with asyncio.timeout(HANG):
            await aioenv.make("openenv+image:nothere", 2, executor="async", num_workers=1, env_kwargs=PODMAN)
    assert "image not known" in str(err.value)
    engine.wait_for("rm -f c0ffee1 c0ffee2")  # the reaper's sweep: released when the container was removed
    runs = [c for c in engine.calls() if c.startswith("run ")]
    assert runs  # each env tried (no container of the image had started in the worker)
    for run in runs:
        name = run.split("--name ")[1].split()[0]
        assert f"rm -f {name}" in engine.calls()
        assert "-p 127.0.0.1::8000" in run
        assert "--label aioenv.owner=" in run
        assert run.endswith(" nothere")

"""Fixtures shared by every test directory: no test leaves a worker process behind; the gate of the probe
env's slow steps; a second network namespace. Plain helpers that tests call with arguments live in
:mod:`tests.support`. Under pytest-xdist, each test process has a temporary directory of its own."""

from __future__ import annotations

import asyncio
import multiprocessing.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import HANG, worker_processes
from tests.support.servers import ServerProcess

# The suite's pools fork their workers from a template (aioenv.transport.zygote): ~0.5 s of CPU less per
# worker, a third of the suite's time. Fresh interpreters, the default, are what tests/transport/test_zygote.py
# and the benchmarks check beside it. Scripts the tests run inherit it.
os.environ.setdefault("AIOENV_WORKER_START", "fork")

#: The engine ``make test-containers`` runs tests/containers with (``docker`` or ``podman``); without it, as in
#: ``make test``, pytest does not collect them (they need a container engine and the image that target builds).
CONTAINER_ENGINE = os.environ.get("AIOENV_TEST_CONTAINERS", "")
collect_ignore = [] if CONTAINER_ENGINE else ["containers"]

#: This test process's own temporary directory (under pytest-xdist), removed when the process ends.
_OWN_TMPDIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n``), give this test process a temporary directory of its own, for it and every
    process it starts (``TMPDIR``): the checks that nothing is left (a pool's private ``aioenv-*`` directory,
    the chaos harness's leak census of the temporary directory) then see only what this process's tests made,
    never what a test running beside it in another process holds at that moment."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    own = tempfile.mkdtemp(prefix=f"pytest-{worker}-")
    os.environ["TMPDIR"] = own
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    config.stash[_OWN_TMPDIR] = own


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_TMPDIR, None)
    if own is not None:
        # At exit, after multiprocessing removed its own temporary directory inside this one (its finalizer
        # has priority -100): removed before, that finalizer would print a FileNotFoundError.
        multiprocessing.util.Finalize(None, shutil.rmtree, args=(own, True), exitpriority=-200)


#: Tests that must run in one test process, one after the other, under pytest-xdist: a path prefix and its
#: group. The Ray modules each start a local Ray cluster; two on this machine at once must never meet.
ONE_PROCESS = {"tests/ray/": "ray"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's ``load`` distribution (what ``-n`` does), except that each group of :data:`ONE_PROCESS`
    goes to one test process as a whole, and first (the largest units first). (xdist's own ``xdist_group``
    mark does not take with pytest 9, which no longer reads the node id xdist rewrites.)"""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = _modules_sharing_a_fixture(Path(str(config.rootpath)))

    class Scheduler(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in ONE_PROCESS.items():
                if nodeid.startswith(prefix):
                    return group
            module = nodeid.split("::", 1)[0]
            if module in shared:  # its tests share a server or a cluster: one start, not one per test process
                return module
            return nodeid  # every other test on its own: as ``load`` does

    return Scheduler(config, log)


_MODULE_FIXTURE = re.compile(r'@pytest\.fixture\(scope="(?:module|session)"[^)]*\)\s*\ndef (\w+)')


def _modules_sharing_a_fixture(root: Path) -> set[str]:
    """The test modules (paths as in node ids) that define a module- or session-scoped fixture or take one a
    ``conftest.py`` defines. Such a fixture starts a server process or a cluster once for the tests that share it in
    one test process; spread test by test over two, a module's tests would start it in each, and a module fixture
    again whenever a test of another module ran between two of them (pytest ends a module's fixtures when the next
    test is another module's)."""
    tests = root / "tests"
    shared = {name for conftest in tests.rglob("conftest.py") for name in _MODULE_FIXTURE.findall(conftest.read_text())}
    takes = re.compile(r"\b(" + "|".join(sorted(shared)) + r"): ") if shared else None
    found: set[str] = set()
    for module in tests.rglob("test_*.py"):
        text = module.read_text()
        if _MODULE_FIXTURE.search(text) or (takes is not None and takes.search(text)):
            found.add(module.relative_to(root).as_posix())
    return found


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    """Every test must leave no worker process (running or zombie) behind."""
    before = {pid for pid, _, _ in worker_processes()}
    yield
    leaked = [
        (pid, state, cmd)
        for pid, state, cmd in worker_processes()
        if pid not in before and (state == "Z" or "-m workers" in cmd)
    ]
    assert not leaked, f"worker processes left behind: {leaked}"


@pytest.fixture
def gate(tmp_path: Path) -> Any:
    """Paths for ProbeEnv's slow action: ``gate.path`` (create it to let slow steps finish) and
    ``gate.markers`` (where slow steps announce they started)."""

    class Gate:
        path = str(tmp_path / "gate")
        markers = str(tmp_path / "markers")

        def open(self) -> None:
            Path(self.path).touch()

        def kwargs(self, **extra: Any) -> dict[str, Any]:
            return {"gate": self.path, "marker_dir": self.markers, **extra}

        def wait_started(self, ident: int) -> None:
            """Block until the slow step of the env with this ident is running (from a thread without a loop)."""
            marker = os.path.join(self.markers, f"started-{ident}")
            deadline = time.monotonic() + HANG
            while not os.path.exists(marker):
                assert time.monotonic() < deadline, "the slow step never started"
                time.sleep(0.005)

        async def started(self, ident: int) -> None:
            """Wait until the slow step of the env with this ident is running."""
            marker = os.path.join(self.markers, f"started-{ident}")
            async with asyncio.timeout(HANG):
                while not os.path.exists(marker):
                    await asyncio.sleep(0.005)

    os.makedirs(Gate.markers)
    return Gate()


@pytest.fixture
def other_host() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: ``(namespace, its address, this side's address)``."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")  # CI runs as root: this test runs there
    tag = os.getpid() % 10_000
    ns, host_if, ns_if = f"aioenv-t{tag}", f"aet{tag}h", f"aet{tag}n"
    subnet = f"10.213.{os.getpid() % 250}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=HANG)

    ip("netns", "add", ns)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{subnet}.1/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{subnet}.2/30", "dev", ns_if)
        ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, f"{subnet}.2", f"{subnet}.1"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=HANG)  # takes the veth pair along


@pytest.fixture(scope="module")
def cartpole_server() -> Iterator[ServerProcess]:
    """``aioenv serve`` allowing CartPole-v1, shared by the tests of a module (stopped, and checked, after)."""
    srv = ServerProcess("--allow-env", "CartPole-v1")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread for the test, as in any foreground Python program.

    A process started as a background job of a non-interactive shell (``make test &``) inherits SIGINT
    *ignored*, and Python then installs no handler for it: a Ctrl-C test would wait for a signal that never
    comes. The handler is restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back from here
            signal.signal(signal.SIGINT, previous)

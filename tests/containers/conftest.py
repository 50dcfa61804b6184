"""The container engine (``AIOENV_TEST_CONTAINERS``: ``podman`` or ``docker``, set by ``make test-containers``) and
the test image it built (:mod:`tests.containers.image`); no test may leave a container of aioenv's behind."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from aioenv.openenv.reaper import OWNER_LABEL
from tests.conftest import CONTAINER_ENGINE
from tests.containers.image import IMAGE
from tests.support.procs import HANG


@dataclass(frozen=True)
class Running:
    """One container of aioenv's as the engine shows it."""

    name: str
    status: str
    owner: str
    ports: dict[str, Any]


class Engine:
    """The engine's view of aioenv's containers (those labelled ``aioenv.owner``)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ENGINE args...``, its output."""
        return subprocess.run([self.command, *args], capture_output=True, text=True, timeout=HANG, check=False)

    def owned(self) -> list[Running]:
        """Every container labelled ``aioenv.owner``, running or not."""
        ids = self.run("ps", "-aq", "--filter", f"label={OWNER_LABEL}").stdout.split()
        if not ids:
            return []
        got = self.run("inspect", "--type", "container", *ids)
        out = []
        for c in json.loads(got.stdout or "[]"):
            labels = c["Config"].get("Labels") or {}
            ports = c["HostConfig"]["PortBindings"]
            out.append(Running(c["Name"].lstrip("/"), c["State"]["Status"], labels[OWNER_LABEL], ports))
        return out

    def wait_none(self, within: float = HANG) -> None:
        """Wait until no container of aioenv's is left."""
        deadline = time.monotonic() + within
        while left := self.owned():
            assert time.monotonic() < deadline, f"containers left behind: {left}"
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        """SIGKILL the container's processes (the container stays, exited)."""
        done = self.run("kill", name)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The engine, with the test image built."""
    eng = Engine(CONTAINER_ENGINE)
    found = eng.run("image", "inspect", IMAGE)
    assert found.returncode == 0, f"no image {IMAGE}: `make test-containers` builds it ({found.stderr.strip()})"
    return eng


@pytest.fixture(autouse=True)
def no_leaked_containers(engine: Engine) -> Iterator[None]:
    """Start with no container of aioenv's and leave none."""
    assert not engine.owned(), "containers of aioenv's run before the test: remove them (podman rm -f ...)"
    yield
    engine.wait_none()

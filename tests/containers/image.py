"""``python -m tests.containers.image --engine podman``: build :data:`IMAGE`, the OpenEnv test env
(:mod:`tests.support.openenv_app`) as a container image, for the tests of ``openenv+image:`` (``make test-containers``).

The image installs the OpenEnv and uvicorn this project's tests run against (their installed versions, pinned), from
the package registry inside the build; when the build cannot reach the registry, from a wheelhouse downloaded here
first (``pip download``) and copied into the build context. The engine's layer cache keeps a rebuild to seconds
while the pins and the app stay the same.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.scripts import ROOT

__all__ = ["BASE", "IMAGE", "build", "requirements"]

#: The tests' image.
IMAGE = "localhost/aioenv-openenv-test:latest"
#: The base image: a python:3.11-slim the engine has locally (pull or load it first where no registry is reachable).
BASE = "docker.io/library/python:3.11-slim-bookworm"
HERE = Path(__file__).resolve().parent


def requirements() -> list[str]:
    """``openenv==X`` and ``uvicorn==Y``: what this environment runs the tests with."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in ("openenv", "uvicorn")]


def _context(where: Path, wheels: bool) -> None:
    shutil.copy(HERE / "Containerfile", where / "Containerfile")
    shutil.copy(ROOT / "tests" / "support" / "openenv_app.py", where / "openenv_app.py")
    (where / "wheels").mkdir()
    (where / "wheels" / ".keep").touch()  # an empty folder must still copy
    if wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
             "-d", str(where / "wheels"), *requirements()],
            check=True,
        )  # fmt: skip


def _build(engine: str, where: Path) -> int:
    cmd = [engine, "build", "-t", IMAGE, "-f", str(where / "Containerfile"), "--build-arg", f"BASE={BASE}"]
    cmd += ["--build-arg", "REQUIREMENTS=" + " ".join(requirements()), str(where)]
    return subprocess.run(cmd, check=False).returncode


def build(engine: str) -> None:
    """Build :data:`IMAGE` with ``engine``; ``SystemExit`` saying why when neither way works."""
    with tempfile.TemporaryDirectory(prefix="aioenv-image-") as tmp:
        where = Path(tmp)
        _context(where, wheels=False)
        if _build(engine, where) == 0:
            return
        print("image: the build could not install from the registry; trying a wheelhouse from this machine", flush=True)
        shutil.rmtree(where / "wheels")
        (where / "Containerfile").unlink()
        (where / "openenv_app.py").unlink()
        _context(where, wheels=True)
        if _build(engine, where) != 0:
            raise SystemExit(f"image: {engine} build of {IMAGE} failed both from the registry and from a wheelhouse")


def main() -> None:
    """Build the image with the engine ``--engine`` names."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", choices=("podman", "docker"), required=True)
    build(parser.parse_args().engine)
    print(f"image: {IMAGE} built", flush=True)


if __name__ == "__main__":
    main()

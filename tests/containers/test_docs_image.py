"""docs/openenv.md's "Containers" section runs as written: its ``Containerfile`` of the page's ``counter_env.py`` builds
(from the local base image) and its pool of four containers steps."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.containers.conftest import Engine
from tests.containers.image import BASE
from tests.support.scripts import ROOT, run_python

pytestmark = pytest.mark.timeout(900)

DOC = (ROOT / "docs" / "openenv.md").read_text()


def _block(language: str, marker: str) -> str:
    (block,) = [b for b in re.findall(rf"^```{language}\n(.*?)^```$", DOC, re.M | re.S) if marker in b]
    return str(block)


def test_the_pages_image_builds_and_its_pool_steps(engine: Engine, tmp_path: Path) -> None:
    containerfile = _block("dockerfile", "counter_env.py")
    assert containerfile.startswith("FROM python:3.11-slim\n")
    (tmp_path / "Containerfile").write_text(containerfile.replace("python:3.11-slim", BASE, 1))
    (tmp_path / "counter_env.py").write_text(_block("python", "app = create_app("))
    (tmp_path / "main.py").write_text(_block("python", "openenv+image:localhost/counter-env"))
    assert "-t localhost/counter-env -f Containerfile ." in _block("bash", "counter-env")
    build = [engine.command, "build", "-q", "-t", "localhost/counter-env", "-f", "Containerfile", "."]
    built = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=800, check=False)
    assert built.returncode == 0, built.stderr
    proc = run_python(str(tmp_path / "main.py"), timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    names, stepped = proc.stdout.strip().splitlines()
    assert names.count("aioenv-openenv-") == 4
    assert stepped == "['a' 'bb' 'ccc' 'dddd'] [0.1 0.2 0.3 0.4]"

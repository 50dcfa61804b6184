"""How ``make test`` runs the suite: a test process that dies (a C extension's segfault, ``os._exit``) ends the
run as a failure that names its test, in seconds. Replaced instead, pytest-xdist 3.8's scope scheduler (the one
tests/conftest.py builds on) requeues the dead process's finished tests and waits for them forever."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.scripts import ROOT, run_python

CRASHING = """
import os

import pytest


@pytest.mark.parametrize("i", range(12))
def test_before(i):
    pass


def test_crash():
    os._exit(1)


@pytest.mark.parametrize("i", range(12))
def test_after(i):
    pass
"""


def make_test_flags() -> list[str]:
    """The pytest-xdist flags of ``make test`` (the Makefile's ``PYTEST_XDIST``)."""
    found = re.search(r"^PYTEST_XDIST = (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile names make test's pytest-xdist flags in PYTEST_XDIST"
    return found[1].split()


def test_a_test_process_that_dies_fails_the_run_and_names_its_test(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_xdist_make_scheduler  # noqa: F401\n")
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    proc = run_python("-m", "pytest", *make_test_flags(), "-p", "no:cacheprovider", str(tmp_path), timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert re.search(r"worker 'gw\d' crashed while running '.*test_crashing.py::test_crash'", proc.stdout)
    assert "1 failed" in proc.stdout

"""The version matrix (noxfile.py) and pyproject.toml's bounds agree: every lower bound pyproject admits is the
release the matrix installs as its oldest, and every release the matrix installs is one pyproject admits. A bound
raised or lowered in one place without the other fails here, in ``make test``."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
_TOML = tomllib.loads((ROOT / "pyproject.toml").read_text())
PYPROJECT = _TOML["project"]
#: The extras whose peers the matrix tests (the others are tools, not dependencies aioenv's code calls).
EXTRAS = ("sb3", "torchrl", "ray")


def _matrix(name: str) -> dict[str, str]:
    """A dict literal assigned to ``name`` at the top of noxfile.py (read, not imported: nox need not be here)."""
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise AssertionError(f"noxfile.py assigns no {name}")


def _requirements() -> dict[str, Requirement]:
    """Each dependency pyproject.toml admits (core and the tested extras), by name; torch (pinned) aside."""
    lines = [*PYPROJECT["dependencies"], *(r for extra in EXTRAS for r in PYPROJECT["optional-dependencies"][extra])]
    found = {}
    for line in lines:
        req = Requirement(line)
        if req.name != "torch":
            found[req.name] = req
    return found


def _lower_bound(req: Requirement) -> Version:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
    assert len(bounds) == 1, f"{req}: one lower bound (>= or ==) expected"
    return bounds[0]


LOWEST, NEWEST, REQUIREMENTS = _matrix("LOWEST"), _matrix("NEWEST"), _requirements()


@pytest.mark.parametrize("name", sorted(REQUIREMENTS))
def test_the_matrix_installs_each_lower_bound_as_its_oldest(name: str) -> None:
    req = REQUIREMENTS[name]
    assert name in LOWEST, f"pyproject.toml admits {req}, but noxfile.py's LOWEST does not test it"
    assert Version(LOWEST[name]) == _lower_bound(req), (
        f"pyproject.toml's lower bound for {name} is {_lower_bound(req)}, noxfile.py's LOWEST installs {LOWEST[name]}"
    )


@pytest.mark.parametrize(("table", "name"), [("LOWEST", n) for n in LOWEST] + [("NEWEST", n) for n in NEWEST])
def test_every_release_the_matrix_installs_is_admitted(table: str, name: str) -> None:
    version = {"LOWEST": LOWEST, "NEWEST": NEWEST}[table][name]
    assert name in REQUIREMENTS, f"noxfile.py's {table} names {name}, which pyproject.toml does not require"
    assert REQUIREMENTS[name].specifier.contains(version, prereleases=False), (
        f"noxfile.py's {table} installs {name}=={version}; pyproject.toml admits {REQUIREMENTS[name]}"
    )


def test_the_docs_table_names_each_release_the_matrix_installs() -> None:
    text = (ROOT / "docs" / "versions.md").read_text()
    for table in (LOWEST, NEWEST):
        for name, version in table.items():
            assert re.search(rf"\b{re.escape(name)}\b[^\n]*\b{re.escape(version)}\b", text), (
                f"docs/versions.md has no row naming {name} {version}"
            )


def test_the_matrix_builds_with_the_oldest_build_requirement_pyproject_admits() -> None:
    """The [build-system]'s lower bounds are what noxfile.py's ``build-oldest`` cell builds with."""
    build = {Requirement(line).name: Requirement(line) for line in _TOML["build-system"]["requires"]}
    oldest = {name: Version(version) for name, version in _matrix("BUILD_LOWEST").items()}
    assert {name: _lower_bound(req) for name, req in build.items()} == oldest

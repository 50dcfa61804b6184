"""The documentation site: ``mkdocs build --strict`` (what ``make docs`` runs) builds every page, an API page for
every public module and every figure, with nothing fetched from elsewhere; and a copy of the docs with one thing
broken (a link, a page in the menu, an API reference, a figure's name) fails the build, naming what is broken."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_exported_members import PUBLIC

ROOT = Path(__file__).resolve().parent.parent.parent
#: A hang guard: a build takes ~10 s of CPU (the figures, then ~30 pages), longer on a loaded machine.
BUILD_TIMEOUT = 300.0
FIGURES = ("throughput", "peers", "latency", "scaling", "step-path")


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the project at ``root`` into ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )


def copy_project(to: Path) -> Path:
    """What the site is built from: the config, docs/, SECURITY.md, the benchmarks' results and the package."""
    to.mkdir()
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copy(ROOT / "mkdocs.yml", to / "mkdocs.yml")
    shutil.copy(ROOT / "SECURITY.md", to / "SECURITY.md")
    shutil.copytree(ROOT / "docs", to / "docs", ignore=ignore)
    shutil.copytree(ROOT / "benchmarks" / "results", to / "benchmarks" / "results")
    shutil.copytree(ROOT / "aioenv", to / "aioenv", ignore=ignore)
    return to


def test_the_site_builds_with_every_public_module_and_figure(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = build(ROOT, site)
    assert done.returncode == 0, done.stdout + done.stderr
    for module in PUBLIC:  # each public module has its page, with the module's own docstring on it
        page = site / "reference" / f"{module}.html"
        assert page.exists(), f"no API page for {module}"
        assert f'id="{module}"' in page.read_text(), f"{page} does not document {module}"
    for name in FIGURES:
        svg = site / "img" / f"{name}.svg"
        assert svg.read_bytes().startswith(b"<?xml"), f"{svg} is no SVG"
    shown = {
        m for page in site.rglob("*.html") for m in re.findall(r'src="(?:\.\./)?img/([\w-]+)\.svg"', page.read_text())
    }
    assert shown == set(FIGURES), f"figures drawn but on no page: {set(FIGURES) - shown}"
    assert (site / "security.html").exists()
    for page in site.rglob("*.html"):  # no web fonts, no scripts or styles from elsewhere: it works offline
        text = page.read_text()
        assert "fonts.googleapis" not in text, page
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text), page


def test_every_public_module_has_a_reference_page_in_the_menu() -> None:
    pages = {p.stem for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert pages == set(PUBLIC)
    config = (ROOT / "mkdocs.yml").read_text()
    for module in PUBLIC:
        assert f"reference/{module}.md" in config, f"reference/{module}.md is not in mkdocs.yml's nav"
        assert (ROOT / "docs" / "reference" / f"{module}.md").read_text().strip() == f"::: {module}"


# What a broken copy changes: (file under the copy, text replaced, its replacement, what the output names).
Break = tuple[str, str, str, str]

#: Each is a warning, and one warning fails a strict build: all of them are made in one copy, one build, and
#: the output must name each on a warning line of its own.
WARNED: dict[str, Break] = {
    "a link to no page": ("docs/index.md", "](api.md)", "](apii.md)", "apii.md"),
    "a link to no heading": (
        "docs/api.md",
        "](performance.md#envs-in-your-process-num_workers0)",
        "](performance.md#no-such-heading)",
        "no-such-heading",
    ),
    "a page in the menu that does not exist": ("mkdocs.yml", "- Ray: ray.md", "- Ray: rays.md", "rays.md"),
}

#: Each stops the build at once: one copy and one build each.
STOPPING: dict[str, Break] = {
    "an API reference to nothing": ("docs/reference/aioenv.ray.md", "::: aioenv.ray", "::: aioenv.rays", "aioenv.rays"),
    "a figure no script draws": ("docs/architecture.md", "figure: step-path -->", "figure: steps -->", "'steps'"),
}


def broken_build(tmp_path: Path, breaks: list[Break]) -> str:
    """Build a copy of the project with ``breaks`` made; assert that it fails, and return its output."""
    root = copy_project(tmp_path / "project")
    for path, old, new, _named in breaks:
        text = (root / path).read_text()
        assert old in text, f"{path} no longer has {old!r}: choose another thing to break"
        (root / path).write_text(text.replace(old, new, 1))
    done = build(root, tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"the build passed with {breaks}:\n{output}"
    return output


def test_a_broken_link_or_menu_entry_fails_the_strict_build(tmp_path: Path) -> None:
    output = broken_build(tmp_path, list(WARNED.values()))
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    for what, (*_, named) in WARNED.items():
        assert any(named in line for line in warnings), f"no warning names {what} ({named!r}):\n{output}"
    assert f"Aborted with {len(warnings)} warnings in strict mode" in output, output


@pytest.mark.parametrize("what", sorted(STOPPING))
def test_a_broken_reference_or_figure_fails_the_build(tmp_path: Path, what: str) -> None:
    named = STOPPING[what][3]
    output = broken_build(tmp_path, [STOPPING[what]])
    assert named in output, f"the failed build does not name {named!r}:\n{output}"

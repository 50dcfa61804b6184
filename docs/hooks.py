"""The documentation site's build hooks (mkdocs.yml, ``hooks:``): pages that live outside ``docs/`` and the figures.

- ``SECURITY.md`` stays at the repository's root, where readers of the repository look for it; the site carries
  it as ``security.md``, its links to ``docs/...`` made relative to the site, and the docs' links to
  ``../SECURITY.md`` point at that page. Every other link is left as written, for the strict build to check.
- The figures (``docs/figures.py``) are drawn from ``benchmarks/results/*.json`` at every build, into the site
  only (``img/NAME.svg``): they never go stale, and no drawn file is kept in the repository. A page shows one
  where it says ``<!-- figure: NAME -->`` on a line of its own (invisible where the Markdown is read as it is),
  with the caption the figure's data gives (the command and the machine that produced it). A name that no
  figure has fails the build.
- The docstrings name code Sphinx's way (``:class:`Pool```, ``:meth:`~aioenv.Pool.step```); on the API pages the
  role goes and the name stays code (with ``~``, its last part only, as Sphinx shows it).
"""

from __future__ import annotations

import html
import pathlib
import re
from typing import Any

import figures  # docs/figures.py: mkdocs puts this file's folder on sys.path while it loads the hooks
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Files at the repository's root that the site carries as pages: root file -> page.
ROOT_PAGES = {"SECURITY.md": "security.md"}

_TO_ROOT_PAGE = re.compile(r"\]\(\.\./(" + "|".join(re.escape(name) for name in ROOT_PAGES) + r")(#[^)]*)?\)")
_ROOT_TO_DOCS = re.compile(r"\]\(docs/")
_FIGURE = re.compile(r"^<!-- figure: ([\w-]+) -->$", re.M)
_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|const):<code>(~?)([^<]*)</code>")

#: The figures of the build under way, by name.
_drawn: dict[str, figures.Drawn] = {}


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    """Add the root pages and the figures to the site's files."""
    for name, page in ROOT_PAGES.items():
        text = _ROOT_TO_DOCS.sub("](", (ROOT / name).read_text(encoding="utf-8"))
        files.append(File.generated(config, page, content=text))
    _drawn.clear()
    _drawn.update(figures.draw_all(ROOT / "benchmarks" / "results", ROOT / "docs" / "architecture.md"))
    for name, drawn in _drawn.items():
        files.append(File.generated(config, f"img/{name}.svg", content=drawn.svg))
    return files


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files, **_: Any) -> str:
    """Point the docs' links to a root file at the page the site carries it as; put each figure in its place."""
    markdown = _TO_ROOT_PAGE.sub(lambda m: f"]({ROOT_PAGES[m.group(1)]}{m.group(2) or ''})", markdown)
    depth = page.file.src_uri.count("/")
    return _FIGURE.sub(lambda m: _figure(m.group(1), "../" * depth, page.file.src_uri), markdown)


def _figure(name: str, up: str, page: str) -> str:
    drawn = _drawn.get(name)
    if drawn is None:
        raise PluginError(f"{page} asks for figure {name!r}; the figures are {', '.join(sorted(_drawn))}")
    return (
        f'<figure markdown="span">\n  ![{html.escape(drawn.alt)}]({up}img/{name}.svg)\n'
        f"  <figcaption>{drawn.caption}</figcaption>\n</figure>"
    )


def on_page_content(html_text: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """On the API pages, a Sphinx role before a name in code goes (``:class:`~a.B``` reads ``B``)."""
    if not page.file.src_uri.startswith("reference/"):
        return html_text
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html_text)

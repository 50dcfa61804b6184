"""What the deployment docs say about the server agrees with the server: the protocol version its log line
shows, and every ``aioenv serve`` command they show starts (none listens beyond loopback without ``--auth`` or
``--insecure``, which the server would refuse)."""

from __future__ import annotations

import re
import shlex

import pytest

from aioenv.errors import UsageError
from aioenv.openenv.serve import http_exposure
from aioenv.server.exposure import exposure_warnings
from aioenv.wire.version import PROTOCOL_VERSION
from tests.support.scripts import ROOT

DEPLOYMENT = ROOT / "docs" / "deployment.md"
PAGES = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]


def serve_commands() -> list[tuple[str, list[str]]]:
    """Every ``aioenv serve ...`` the pages show (continuation lines joined): ``(page, its arguments)``."""
    found = []
    for page in PAGES:
        text = page.read_text().replace("\\\n", " ")
        for match in re.finditer(r"aioenv serve\b([^`\n#]*)", text):
            words = shlex.split(match[1].replace("[", " ").replace("]", " "))
            found.append((page.name, words))
    return found


def test_the_log_line_shows_the_protocol_the_server_speaks() -> None:
    shown = re.findall(r"aioenv server listening on \S+\s+\(protocol (\d+), aioenv", DEPLOYMENT.read_text())
    assert shown, "docs/deployment.md shows no log line of a server that started"
    assert {int(v) for v in shown} == {PROTOCOL_VERSION}, (
        f"the docs show protocol {shown}, the server speaks {PROTOCOL_VERSION}"
    )


def test_the_pages_show_serve_commands() -> None:
    assert len(serve_commands()) >= 10
    assert any("--insecure" in words for _, words in serve_commands())


@pytest.mark.parametrize(("page", "words"), serve_commands())
def test_every_serve_command_shown_would_start(page: str, words: list[str]) -> None:
    def value(flag: str) -> str | None:
        """The value after ``flag``; None without one (a flag named in prose, not a command)."""
        at = words.index(flag) + 1 if flag in words else len(words)
        return words[at] if at < len(words) else None

    try:
        exposure_warnings(
            value("--bind") or "tcp://127.0.0.1:5555",
            value("--worker-bind"),
            auth=value("--auth"),
            insecure="--insecure" in words,
        )
        if (http := value("--http")) is not None and http != "HOST:PORT":  # HOST:PORT: the flag named in prose
            http_exposure(http, token=value("--http-token-file"), insecure="--insecure" in words)
    except UsageError as exc:
        pytest.fail(f"{page}: aioenv serve {shlex.join(words)}: {exc}")

"""mypy checks the calls made into a pool through :class:`aioenv.SyncPool`: their arguments are the pool method's
own, their result the method's result (``sync_calls.py`` marks which lines mypy refuses and what it reveals)."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]
CALLS = Path(__file__).with_name("sync_calls.py")
MARK = re.compile(r"\)  # (refused|revealed): (.+)$")  # at the end of a call
REPORT = re.compile(r"(.+?):(\d+): (?:error|note): (.*)$")


def test_mypy_checks_calls_into_the_pool() -> None:
    lines = CALLS.read_text().splitlines()
    marks = {number: m.groups() for number, line in enumerate(lines, 1) if (m := MARK.search(line))}
    # the project's own configuration and cache (a `make typecheck` leaves it warm: then this takes a second)
    config = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache")]
    out, err, _status = api.run([*config, "--no-error-summary", "--hide-error-context", str(CALLS)])
    assert not err, err
    reported: dict[int, list[str]] = {}
    for line in out.splitlines():
        found = REPORT.match(line)
        assert found is not None, out
        assert (ROOT / found.group(1)).resolve() == CALLS, f"mypy reported on another file:\n{out}"
        message = found.group(3)
        if not message.startswith(("Possible overload variants", "    ", '"submit" defined in')):
            reported.setdefault(int(found.group(2)), []).append(message)
    for number, (kind, part) in marks.items():
        messages = reported.pop(number, [])
        prefix = "Revealed type is" if kind == "revealed" else ""
        assert any(m.startswith(prefix) and part in m for m in messages), (lines[number - 1], messages)
    assert not reported, f"mypy refused lines that must pass: {reported}"

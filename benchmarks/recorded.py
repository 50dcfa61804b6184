"""The command line a benchmark records beside its results: how to run it again from the checkout's root.

The interpreter as a path from the root (``python`` when it lives elsewhere), the script as a path from the
root, and the arguments as given but ``--out``: where a run wrote its files is no part of what it measured,
and a scratch path in a committed result tells its reader nothing. :func:`settings` records the parsed
arguments the same way.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["command", "settings"]

ROOT = Path(__file__).resolve().parent.parent


def command(argv: list[str] | None = None, executable: str | None = None, drop: tuple[str, ...] = ("--out",)) -> str:
    """``argv`` (default ``sys.argv``: the script, then its arguments) as a shell command run from the root,
    without the options ``drop`` (each with its value): where the run wrote its files."""
    script, *args = sys.argv if argv is None else argv
    kept: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in drop:
            next(rest, None)  # and its value
        elif not arg.startswith(tuple(f"{option}=" for option in drop)):
            kept.append(arg)
    interpreter = _from_root(sys.executable if executable is None else executable, "python")
    return shlex.join([interpreter, _from_root(script, script), *kept])


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed arguments a benchmark records beside its results, as JSON values (paths as strings), all but
    ``out``: for the same reason as :func:`command`."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"}


def _from_root(path: str, otherwise: str) -> str:
    """``path`` relative to the checkout's root (symlinks kept: a venv's python is one), else ``otherwise``."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(ROOT))
    except ValueError:
        return otherwise

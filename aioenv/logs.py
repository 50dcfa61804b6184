"""Logging for ``aioenv serve``: plain lines for people, or one JSON object per line (``--log-json``)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["JsonFormatter", "LineFormatter", "configure_logging", "peer_name", "printable"]


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...}`` per record; ``extra=`` fields are kept."""

    _STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        """One JSON line."""
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("_"):
                out[key] = value if _plain(value) else repr(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


class LineFormatter(logging.Formatter):
    """Plain lines for people, one per record: the message's control characters (a newline, an escape
    sequence) are shown as escapes, so no text a peer chose (a client's name, an env's name, an error's
    message) can write a line of its own or drive the terminal. A traceback still follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line, with the message made :func:`printable`."""
        record.message = printable(record.message)
        return super().formatMessage(record)


def printable(text: str) -> str:
    """``text`` with each character that is not printable (newlines, tabs, ``ESC`` and the other control
    characters, unassigned code points) shown as its Python escape, e.g. ``\\n`` or ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _plain(value: Any) -> bool:
    """A value JSON carries as it is: a scalar, or a list of scalars (env ids)."""
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(v, scalar) for v in value))


def configure_logging(level: str = "INFO", *, json_lines: bool = False) -> None:
    """Log to stderr at ``level``, as plain lines or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(LineFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def peer_name(identity: bytes) -> str:
    """A ZeroMQ peer identity as log text, at most 40 characters: as it is when it is printable text (an
    aioenv client's names itself), else ``0x`` and its hex digits (ZeroMQ's own are 5 random bytes)."""
    text = identity[:40].decode("utf-8", errors="replace")
    return text if text.isprintable() and "\ufffd" not in text else "0x" + identity[:19].hex()

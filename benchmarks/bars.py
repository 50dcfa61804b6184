"""Bars: a measured figure against its threshold, and how both are shown. Needs nothing but the standard library,
so that a script that only reads results (``bench_goals.py``) needs no extra; ``benchutil`` re-exports it all.

Bars are informative: a missed bar never fails a run.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["GIB", "KIB", "MIB", "bar", "fmt_bar_value", "fmt_bytes", "meets"]

GIB = 2**30
MIB = 2**20
KIB = 2**10

OPS = (">=", "<", "<=")


def meets(value: float | None, op: str, threshold: float) -> bool | None:
    """Whether ``value op threshold`` holds (``op``: one of :data:`OPS`); None without a value."""
    if op not in OPS:
        raise ValueError(f"a bar's op is one of {OPS}, got {op!r}")
    if value is None:
        return None
    return value >= threshold if op == ">=" else value < threshold if op == "<" else value <= threshold


def bar(name: str, value: float | None, op: str, threshold: float, unit: str, about: str) -> dict[str, Any]:
    """A bar: ``value op threshold`` (see :func:`meets`); ``met`` is None without a value."""
    met = meets(value, op, threshold)
    return {"name": name, "value": value, "op": op, "threshold": threshold, "unit": unit, "about": about, "met": met}


def fmt_bytes(value: float | None) -> str:
    """Bytes as MiB / GiB / KiB."""
    if value is None:
        return "n/a"
    if value >= GIB:
        return f"{value / GIB:.2f} GiB"
    if value >= MIB:
        return f"{value / MIB:,.0f} MiB"
    return f"{value / KIB:,.1f} KiB"


def fmt_bar_value(b: dict[str, Any], value: float | None, measured: bool = True) -> str:
    """A bar's value (``measured``) or threshold in its unit (``%``, ``x``, ``MiB`` or ``bytes``, the last shown
    as :func:`fmt_bytes` does). A measured figure is rounded towards missing the bar (down for ``>=``, up for
    ``<`` and ``<=``), so a value shown equal to the threshold has met it."""
    if value is None:
        return "n/a"
    if b["unit"] == "bytes":
        return fmt_bytes(value)
    scale = {"%": 1000, "x": 100, "MiB": 1}[b["unit"]]  # 0.1%, 0.01x or 1 MiB
    shown = value
    if measured:
        scaled = round(value * scale, 6)  # 0.57 * 100 is 56.99999999999999: not a value below 0.57
        shown = (math.floor(scaled) if b["op"] == ">=" else math.ceil(scaled)) / scale
    return f"{shown:.1%}" if b["unit"] == "%" else f"{shown:,.0f} MiB" if b["unit"] == "MiB" else f"{shown:.2f}x"

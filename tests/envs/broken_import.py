"""A module whose import fails with an error that is no ImportError: a server that imports it to check a
client's name must answer the client, and go on."""

from __future__ import annotations

raise RuntimeError("this module cannot be imported")

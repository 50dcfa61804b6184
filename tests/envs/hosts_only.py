"""A module only worker processes can import, as on a server whose worker hosts hold packages it lacks: the
server leaves the check of what a name in it leads to to the workers, which must refuse the same escapes."""

from __future__ import annotations

import sys
from os import system  # noqa: F401 (an imported function: a client must not call it through this module)

from tests.envs.escapes import EscapeEnv

__all__ = ["make_env"]

if "aioenv.server.server" in sys.modules:
    raise ImportError("tests.envs.hosts_only is installed on the worker hosts only")


def make_env(size: int = 3) -> EscapeEnv:
    """A factory defined here."""
    return EscapeEnv(size)

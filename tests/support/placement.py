"""A stand-in for ``executor="auto"``'s choice (:func:`aioenv.core.costs.choose`), for tests of a placement that
the probe's timing would not give every time on a loaded machine (a share of the envs in this process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aioenv.core import costs


def placed(choice: costs.Choice) -> Callable[..., costs.Choice]:
    """A ``choose`` that answers ``choice``; one that keeps envs in this process only for a pool made with
    ``allow_in_process=True`` (as the real one): the test fails at once if its pool did not opt in."""

    def choose(*_: Any, allow_in_process: bool = False, **__: Any) -> costs.Choice:
        assert allow_in_process or not choice.in_process, "envs in this process need allow_in_process=True"
        return choice

    return choose

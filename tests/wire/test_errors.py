"""Errors across the wire keep the remote exception's type and the module defining it, also when a server relays
them; AioVectorEnv finds the class from them without reading the traceback."""

from __future__ import annotations

import pytest

from aioenv.compat.vector_errors import remote_class
from aioenv.errors import EnvError
from aioenv.wire.errors import from_wire, relay_wire, to_wire
from aioenv.wire.protocol import pack, unpack


class TableFlipped(Exception):
    """An env's own exception class."""

    class Nested(Exception):
        """A class whose name alone does not find it in its module."""


def _across(exc: BaseException) -> EnvError:
    err = from_wire(unpack(pack(to_wire(exc, env_id=3, traceback_text=""))), context="step")
    assert isinstance(err, EnvError)
    return err


@pytest.mark.parametrize(
    ("exc", "module", "cls"),
    [(ValueError("bad"), "builtins", ValueError), (TableFlipped("flip"), __name__, TableFlipped)],
)
def test_an_env_error_names_the_type_and_its_module(exc: Exception, module: str, cls: type) -> None:
    err = _across(exc)
    assert (err.env_id, err.remote_type, err.remote_module) == (3, type(exc).__name__, module)
    assert remote_class(err) is cls  # no traceback needed
    relayed = from_wire(unpack(pack(relay_wire(err))))
    assert isinstance(relayed, EnvError)
    assert (relayed.remote_type, relayed.remote_module, relayed.message) == (err.remote_type, module, err.message)


def test_a_nested_class_is_found_from_the_traceback_and_an_unknown_one_is_not_guessed() -> None:
    err = _across(TableFlipped.Nested("deep"))
    assert remote_class(err) is None  # module.Nested does not exist, and no traceback says more
    err.remote_traceback = f"Traceback (most recent call last):\n  ...\n{__name__}.TableFlipped.Nested: deep\n"
    assert remote_class(err) is TableFlipped.Nested
    old_peer = EnvError("x", remote_type="TableFlipped", remote_traceback=f"{__name__}.TableFlipped: x")
    assert remote_class(old_peer) is TableFlipped  # a peer that sends no module
    assert remote_class(EnvError("x", remote_type="NoSuchError", remote_module="nowhere")) is None

"""Fuzz targets: functions of one input (bytes) that must raise nothing but the documented error.

Pure Python, no fuzzer needed: ``make fuzz`` drives them with atheris (coverage-guided, see
:mod:`tests.fuzz.run`), and ``tests/fuzz/test_corpus.py`` replays every input kept in
``tests/fuzz/corpus/TARGET/`` (the seeds, what the fuzzer found interesting, and every crash it
found, once fixed) on each ``make test``.

- ``protocol``: the input is a message's frames joined by :data:`FRAME_SEP`; :func:`decode` may raise
  :class:`~aioenv.errors.ProtocolError` only, and what it returns is a header map and arrays.
- ``spaces``: the input is msgpack; :func:`space_from_description` may raise ``ValueError`` only (after
  :func:`unpack`'s ProtocolError), and a space it builds describes itself back to an equal space and
  makes an empty batch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aioenv.errors import ProtocolError
from aioenv.wire.protocol import decode, unpack
from aioenv.wire.spaces import describe_space, empty_batch, space_from_description

__all__ = ["FRAME_SEP", "TARGETS", "protocol", "spaces"]

#: Separates the frames of a ``protocol`` input.
FRAME_SEP = b"|frame|"


def protocol(data: bytes) -> None:
    """Decode ``data`` split into frames (see the module docstring)."""
    try:
        header, arrays = decode(data.split(FRAME_SEP))
    except ProtocolError:
        return
    assert isinstance(header, dict), header
    assert isinstance(header["op"], str), header
    assert all(isinstance(a, np.ndarray) for a in arrays)


def spaces(data: bytes) -> None:
    """Build a space from ``data`` as a msgpack description (see the module docstring)."""
    try:
        desc = unpack(data)
    except ProtocolError:
        return
    try:
        space = space_from_description(desc)
    except ValueError:
        return
    assert space_from_description(describe_space(space)) == space, space
    empty_batch(space, 2)


TARGETS: dict[str, Callable[[bytes], None]] = {"protocol": protocol, "spaces": spaces}

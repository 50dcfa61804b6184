"""``aioenv.wire.options``: the checks every layer's options share (pure logic)."""

from __future__ import annotations

import numpy as np
import pytest

from aioenv.wire.options import is_int, positive_int


@pytest.mark.parametrize("value", [0, -3, 2**70, np.int64(5), np.uint8(0)])
def test_python_and_numpy_integers_are_ints(value: object) -> None:
    assert is_int(value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.0, "1", None, np.array(1), [1]])
def test_bools_floats_strings_and_arrays_are_not(value: object) -> None:
    assert not is_int(value)


def test_positive_int_takes_numpy_integers_and_refuses_bools_naming_the_option() -> None:
    assert positive_int("n", np.int32(3)) == 3
    assert type(positive_int("n", np.int32(3))) is int
    with pytest.raises(ValueError, match="n must be a positive int, got True"):
        positive_int("n", True)
    with pytest.raises(ValueError, match="n must be a positive number of envs, got 0"):
        positive_int("n", 0, unit="number of envs")
    assert positive_int("n", None, allow_none=True) is None

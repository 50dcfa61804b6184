"""Exact comparison of results and infos, shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aioenv._compat import HAS_AUTORESET_MODE, AutoresetMode


def assert_same(actual: Any, expected: Any, path: str = "value") -> None:
    """Recursive exact equality: dict keys, array dtype/shape/values, object arrays element-wise,
    scalar types (numpy scalars keep their dtype, python ints stay ints, ...)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict, got {type(actual).__name__}: {actual!r}"
        assert set(actual) == set(expected), (
            f"{path}: keys differ: aioenv has {sorted(map(str, actual))}, gymnasium has {sorted(map(str, expected))}"
        )
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{path}: expected an ndarray, got {type(actual).__name__}: {actual!r}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        if expected.dtype == object:
            for index in np.ndindex(expected.shape):
                assert_same(actual[index], expected[index], f"{path}[{', '.join(map(str, index))}]")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=path, strict=True)
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != {type(expected).__name__}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{i}]")
    else:
        assert type(actual) is type(expected), (
            f"{path}: type {type(actual).__name__} ({actual!r}) != {type(expected).__name__} ({expected!r})"
        )
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


#: For a test whose reference is a gymnasium vector env's ``reset(options={"reset_mask": ...})`` or an autoreset
#: mode other than next-step: both came in gymnasium 1.1 (aioenv's pools have them on every release).
NEEDS_GYMNASIUM_1_1 = pytest.mark.skipif(
    not HAS_AUTORESET_MODE, reason="gymnasium 1.0's vector envs have no reset_mask and no autoreset_mode (1.1)"
)


def gym_autoreset(mode: AutoresetMode) -> dict[str, AutoresetMode]:
    """The keyword arguments that give gymnasium's own vector envs (the reference a test compares with) the
    autoreset ``mode``: none on gymnasium 1.0, whose vector envs take no ``autoreset_mode`` and reset on the next
    step, where a test of another mode is skipped (aioenv's pools have every mode on every release)."""
    if HAS_AUTORESET_MODE:
        return {"autoreset_mode": mode}
    if mode is not AutoresetMode.NEXT_STEP:
        pytest.skip(f"gymnasium 1.0's vector envs reset on the next step only, not {mode.value}")
    return {}

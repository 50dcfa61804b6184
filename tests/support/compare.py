"""Exact comparison of results and infos, shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np


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

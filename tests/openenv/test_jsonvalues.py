"""Spaces as JSON (aioenv.openenv.jsonvalues): every value of a space crosses JSON and back unchanged, fits its
space's JSON schema, and a value that is no element of the space is refused naming what was expected."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from aioenv.openenv.jsonvalues import JsonValueError, from_json, json_schema, jsonable, to_json

SPACES: dict[str, spaces.Space[Any]] = {
    "discrete": spaces.Discrete(5, start=-2),
    "box": spaces.Box(-1.0, 2.0, (2, 3), np.float32),
    "box_int": spaces.Box(0, 255, (4,), np.uint8),
    "box_unbounded": spaces.Box(-np.inf, np.inf, (3,), np.float64),
    "multi_discrete": spaces.MultiDiscrete([3, 4]),
    "multi_binary": spaces.MultiBinary(5),
    "text": spaces.Text(8),
    "dict": spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "n": spaces.Discrete(3)}),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.Text(4))),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
}


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.mark.parametrize("name", sorted(SPACES))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_sampled_value_crosses_json_unchanged_and_fits_its_schema(name: str, seed: int) -> None:
    space = SPACES[name]
    space.seed(seed)
    value = space.sample()
    text = json.dumps(to_json(space, value))
    jsonschema.validate(json.loads(text), json_schema(space))
    back = from_json(space, json.loads(text))
    assert space.contains(back)
    assert equal(back, value)


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("discrete", 3, "expected an integer in [-2, 2], got 3"),
        ("discrete", True, "got True"),
        ("discrete", 1.0, "got 1.0"),
        ("box", [[0, 0, 0]], "expected an array of numbers of shape (2, 3), got shape (1, 3)"),
        ("box", [[0, 0, 9], [0, 0, 0]], "outside the space"),
        ("box", [["a", 0, 0], [0, 0, 0]], "got [['a', 0, 0], [0, 0, 0]]"),
        ("box_int", [1.5, 0, 0, 0], "expected an array of integers of shape (4,), got [1.5, 0, 0, 0]"),
        ("multi_binary", [0, 1, 2, 0, 0], "outside the space"),
        ("text", 5, "expected a string of 1 to 8 characters"),
        ("text", "x" * 9, "expected a string of 1 to 8 characters"),
        ("dict", {"pos": [0, 0]}, "expected an object with keys ['n', 'pos'], got an object with keys ['pos']"),
        ("dict", {"pos": [0, 0], "n": 7}, "action['n']: expected an integer in [0, 2]"),
        ("tuple", [1], "expected an array of 2 items"),
        ("tuple", [1, 7], "action[1]: expected a string"),
        ("sequence", [1, 9], "action[1]: expected an integer in [0, 3], got 9"),
    ],
)
def test_a_value_outside_its_space_is_refused_naming_what_was_expected(name: str, data: Any, words: str) -> None:
    with pytest.raises(JsonValueError) as refused:
        from_json(SPACES[name], data)
    assert words in str(refused.value)


def test_a_space_with_no_json_form_is_named() -> None:
    graph = spaces.Graph(spaces.Box(0, 1, (2,)), None)
    with pytest.raises(TypeError, match="a Graph space has no JSON form"):
        json_schema(graph)


def test_infos_become_json_whatever_they_hold() -> None:
    info = {"a": np.float32(1.5), "b": np.arange(3), 3: {"nested": (1, "x")}, "obj": object}
    out = jsonable(info)
    assert json.loads(json.dumps(out)) == {"a": 1.5, "b": [0, 1, 2], "3": {"nested": [1, "x"]}, "obj": repr(object)}

"""Graph, Sequence, OneOf and user-defined spaces on the wire: descriptions, value leaves, action checks, and
the pickle rule (only a trusted pipe carries what msgpack cannot describe; nothing from a network is unpickled)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from aioenv.errors import InvalidAction, ProtocolError
from aioenv.wire.protocol import Key, Op, Pickled, decode, encode, leaves_from_wire, leaves_to_wire, pack, unpack
from aioenv.wire.spaces import (
    check_actions,
    describe_space,
    empty_batch,
    for_wire,
    from_leaves,
    has_object_leaves,
    is_portable,
    leaf_specs,
    not_portable,
    row_reader,
    row_writer,
    space_from_description,
    to_leaves,
)
from tests.envs.variable import Card, CardSpace
from tests.support.compare import assert_same

B = 4
BOX = gs.Box(0.0, 1.0, (3,), np.float32)

SPACES: dict[str, gym.Space[Any]] = {
    "graph": gs.Graph(BOX, gs.Discrete(4)),
    "graph_no_edges": gs.Graph(gs.Discrete(5), None),
    "sequence": gs.Sequence(gs.Discrete(5)),
    "sequence_stacked": gs.Sequence(BOX, stack=True),
    "sequence_of_dicts": gs.Sequence(gs.Dict({"a": gs.Discrete(2), "b": BOX})),
    "one_of": gs.OneOf([gs.Discrete(3), BOX]),
    "dict_nesting": gs.Dict(
        {"g": gs.Graph(BOX, gs.Box(-1, 1, (2,))), "pos": gs.Box(-1, 1, (2,)), "s": gs.Sequence(gs.MultiBinary(2))}
    ),
    "tuple_nesting": gs.Tuple((gs.OneOf([gs.Text(4), gs.Discrete(2)]), gs.Sequence(gs.Text(3), stack=True))),
    "one_of_sequences": gs.OneOf([gs.Sequence(gs.Discrete(2)), gs.Graph(BOX, None)]),
}


def _graph_takes_composite_nodes() -> bool:
    """Whether the installed gymnasium's Graph takes Dict/Tuple node and edge spaces (1.4 and newer)."""
    try:
        gs.Graph(gs.Dict({"a": BOX}), None)
    except AssertionError:
        return False
    return True


if _graph_takes_composite_nodes():
    SPACES["graph_of_dicts_and_tuples"] = gs.Graph(
        gs.Dict({"a": BOX, "b": gs.Discrete(3)}), gs.Tuple((gs.Discrete(2), BOX))
    )
IDS = list(SPACES)


def _samples(space: gym.Space[Any], n: int = B, seed: int = 0) -> list[Any]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _gymnasium_batch(space: gym.Space[Any], items: list[Any]) -> Any:
    return concatenate(space, items, create_empty_array(space, len(items)))


def _as_gymnasium(space: gym.Space[Any], batched: Any) -> Any:
    """aioenv's batched value in gymnasium's form: object leaves (B,) become tuples of B values."""
    if isinstance(space, gs.Dict):
        return {k: _as_gymnasium(sub, batched[k]) for k, sub in space.spaces.items()}
    if isinstance(space, gs.Tuple):
        return tuple(_as_gymnasium(sub, v) for sub, v in zip(space.spaces, batched, strict=True))
    if isinstance(batched, np.ndarray) and batched.dtype == object:
        return tuple(batched.tolist())
    return batched


@pytest.mark.parametrize("name", IDS)
def test_described_spaces_come_back_equal_through_msgpack(name: str) -> None:
    space = SPACES[name]
    rebuilt = space_from_description(unpack(pack(describe_space(space))))
    assert rebuilt == space
    assert type(rebuilt) is type(space)
    assert batch_space(rebuilt, B) == batch_space(space, B)
    assert is_portable(space)


@pytest.mark.parametrize("name", IDS)
def test_rows_written_read_and_sent_are_gymnasiums_values(name: str) -> None:
    space = SPACES[name]
    items = _samples(space)
    leaves = empty_batch(space, B)
    write, read = row_writer(space), row_reader(space)
    for i, item in enumerate(items):
        write(leaves, i, item)
    # across the wire: object leaves inline in the header, numeric ones as frames
    arrays: list[np.ndarray] = []
    header, received = decode(encode(Op.RESULT, {Key.OBS: leaves_to_wire(leaves, arrays)}, arrays))
    again = leaves_from_wire(header[Key.OBS], received)
    batched = from_leaves(space, again)
    expected = _gymnasium_batch(space, items)
    assert_same(_as_gymnasium(space, batched), expected)
    for i, theirs in enumerate(iterate(batch_space(space, B), expected)):
        assert_same(read(again, i), theirs, f"row {i}")
        assert space.contains(read(again, i))
    # a gymnasium-style batch (tuples of values) flattens to the same leaves
    assert_same(from_leaves(space, to_leaves(space, expected)), batched)


def test_value_leaves_are_object_rows_that_never_share_memory() -> None:
    space = SPACES["dict_nesting"]
    assert [dt for dt, _ in leaf_specs(space)] == ["value", "<f4", "value"]
    assert has_object_leaves(space)
    assert has_object_leaves(gs.Tuple((BOX, gs.Text(3))))
    assert not has_object_leaves(gs.Dict({"a": BOX, "b": gs.MultiDiscrete([2, 3])}))
    leaves = empty_batch(space, 2)
    assert leaves[0].dtype == object
    assert leaves[0].tolist() == [None, None]


@pytest.mark.parametrize("name", ["graph", "sequence", "sequence_stacked", "one_of", "one_of_sequences"])
def test_actions_in_the_space_pass_and_others_name_their_env(name: str) -> None:
    space = SPACES[name]
    env_ids = np.arange(10, 10 + B)
    items = _samples(space, seed=3)
    for given in (items, tuple(items), _gymnasium_batch(space, items)):
        (leaf,) = check_actions(space, given, env_ids)
        assert leaf.dtype == object
        assert leaf.shape == (B,)
    bad = list(items)
    bad[2] = "not a value"
    with pytest.raises(InvalidAction, match=r"env 12.*expected a value of") as info:
        check_actions(space, bad, env_ids)
    assert info.value.env_id == 12
    with pytest.raises(InvalidAction, match=rf"expected {B} {type(space).__name__} values, got {B - 1}"):
        check_actions(space, items[:-1], env_ids)
    with pytest.raises(InvalidAction, match="expected a sequence of"):
        check_actions(space, 7, env_ids)


@pytest.mark.parametrize(
    ("desc", "match"),
    [
        ({"type": "Graph"}, "missing field 'node_space'"),
        ({"type": "Graph", "node_space": {"type": "Text", "max_length": 2, "min_length": 0, "charset": "a"}}, "edge"),
        ({"type": "Graph", "node_space": describe_space(BOX), "edge_space": 3}, "not a map"),
        ({"type": "Sequence", "feature_space": describe_space(BOX)}, "missing field 'stack'"),
        ({"type": "Sequence", "feature_space": describe_space(BOX), "stack": 1}, "'stack' must be a bool"),
        ({"type": "OneOf", "subspaces": "abc"}, "'subspaces' must be a list"),
        ({"type": "OneOf", "subspaces": []}, "invalid OneOf"),
        ({"type": "Custom", "space": "a space"}, "must be a gymnasium space"),
        ({"type": "Custom"}, "missing field 'space'"),
    ],
)
def test_malformed_descriptions_of_the_new_kinds(desc: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        space_from_description(desc)


def test_graph_instances_cross_msgpack_and_malformed_ones_are_protocol_errors() -> None:
    graph = gs.GraphInstance(np.ones((2, 3), np.float32), None, np.array([[0, 1]]))
    back = unpack(pack({"g": graph, "t": (1, graph)}))
    assert_same(back, {"g": graph, "t": (1, graph)})
    for parts in ([np.ones(2)], [None, None, None], [np.ones(2), None, "links"], "abc"):
        with pytest.raises(ProtocolError, match="graph"):
            unpack(msgpack.packb(msgpack.ExtType(4, pack(parts))))


# ------------------------------------------------------------------ user-defined spaces and pickle


def test_a_user_defined_space_is_described_by_itself_and_is_not_portable() -> None:
    space = gs.Dict({"card": CardSpace(), "n": gs.Discrete(2)})
    desc = describe_space(space)
    custom = desc["subspaces"][0][1]
    assert custom["type"] == "Custom"
    assert isinstance(custom["space"], Pickled)
    assert custom["space"].value is space["card"]
    assert space_from_description(desc) == space
    assert not is_portable(space)
    assert not is_portable(gs.Sequence(CardSpace()))
    why = not_portable(space, "a server")
    assert "a server cannot carry" in why
    assert "tests.envs.variable.CardSpace" in why
    assert "never unpickles" in why
    with pytest.raises(TypeError, match="CardSpace"):
        pack(desc)  # untrusted: never pickled


def test_only_a_trusted_pipe_carries_pickled_values() -> None:
    card = Card(12, "H")
    fields = {Key.OBS: [[Pickled(card), None]], Key.SPACES: {"obs": describe_space(CardSpace())}}
    frames = encode(Op.RESULT, fields, trusted=True)
    header, _ = decode(frames, trusted=True)
    assert header[Key.OBS] == [[card, None]]  # unwrapped
    assert header[Key.SPACES]["obs"]["space"] == CardSpace()
    with pytest.raises(ProtocolError, match="not trusted with pickle"):
        decode(frames)  # the same bytes from anywhere else are refused, never unpickled
    with pytest.raises(TypeError, match=r"tests\.envs\.variable\.Card to this peer: it travels only pickled"):
        encode(Op.RESULT, {Key.OBS: [[Pickled(card)]]})
    with pytest.raises(TypeError, match=r"cannot send a value of type tests\.envs\.variable\.Card"):
        encode(Op.RESULT, {Key.OBS: [[card]]}, trusted=True)  # only what is marked Pickled is ever pickled


def test_rows_and_actions_of_user_defined_spaces_are_marked_for_pickle() -> None:
    space = gs.Tuple((CardSpace(), gs.Discrete(3)))
    leaves = empty_batch(space, 2)
    row_writer(space)(leaves, 0, (Card(1, "S"), 2))
    assert isinstance(leaves[0][0], Pickled)
    assert leaves[1][0] == 2
    cards, picks = check_actions(space, ((Card(2, "H"), Card(3, "D")), np.array([0, 1])), np.arange(2))
    assert [c.value for c in cards] == [Card(2, "H"), Card(3, "D")]
    assert picks.tolist() == [0, 1]
    final = for_wire(space, (Card(4, "C"), 1))
    assert isinstance(final[0], Pickled)
    assert final[1] == 1
    graph = gs.Graph(BOX, None)
    value = graph.sample()
    assert for_wire(graph, value) is value  # portable: untouched

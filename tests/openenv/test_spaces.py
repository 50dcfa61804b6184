"""OpenEnv's JSON schemas as gymnasium spaces (pure logic: pydantic models, no server): what each JSON type becomes,
that the spaces cross aioenv's wire, and that sampled actions are JSON the model accepts."""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import pytest
from openenv.core.env_server.types import Action, Observation
from pydantic import BaseModel, Field

from aioenv.openenv.env import observation_result
from aioenv.openenv.spaces import ACTION_EXTRAS, OBSERVATION_EXTRAS, TEXT_MAX_LENGTH, SchemaError, fields_of
from aioenv.wire.spaces import describe_space, space_from_description
from tests.support.openenv_app import CountAction, CountObservation


class Point(BaseModel):
    x: float
    y: float = Field(0.0, ge=-1.0, le=1.0)


class Wide(Action):
    text: str = Field(..., min_length=1, max_length=200)
    level: int = Field(3, ge=1, le=5)
    big: int = 0
    on: bool = False
    vec: list[float] = Field(default_factory=lambda: [0.0, 0.0, 0.0], min_length=3, max_length=3)
    tags: list[str] = Field(default_factory=list)
    where: Point = Field(default_factory=lambda: Point(x=0.0))
    maybe: float | None = None
    mode: Literal["fast", "slow"] = "fast"
    args: dict[str, Any] = Field(default_factory=dict)
    either: int | str = 0


def test_each_json_type_has_its_space() -> None:
    space = fields_of(Wide.model_json_schema(), ACTION_EXTRAS).space
    assert isinstance(space, gym.spaces.Dict)
    assert "metadata" not in space.spaces
    s = space.spaces
    assert isinstance(s["text"], gym.spaces.Text)
    assert (s["text"].min_length, s["text"].max_length) == (1, 200)
    assert s["level"] == gym.spaces.Discrete(5, start=1)
    assert isinstance(s["big"], gym.spaces.Box)
    assert s["big"].dtype == np.int64
    assert s["on"] == gym.spaces.Discrete(2)
    assert isinstance(s["vec"], gym.spaces.Box)
    assert s["vec"].shape == (3,)
    assert isinstance(s["tags"], gym.spaces.Sequence)
    assert isinstance(s["where"], gym.spaces.Dict)
    assert float(s["where"]["y"].low) == -1.0
    assert isinstance(s["maybe"], gym.spaces.Box)  # Optional[float]: the float's space
    assert isinstance(s["mode"], gym.spaces.Text)  # an enum of strings: its text
    assert isinstance(s["args"], gym.spaces.Text)  # a free-form map: JSON text
    assert s["args"].max_length == TEXT_MAX_LENGTH
    assert isinstance(s["either"], gym.spaces.Text)  # a union: JSON text


@pytest.mark.parametrize("model", [Wide, CountAction])
def test_sampled_actions_are_json_the_model_accepts(model: type[Action]) -> None:
    field = fields_of(model.model_json_schema(), ACTION_EXTRAS)
    field.space.seed(3)
    for _ in range(20):
        sample = field.space.sample()
        payload = field.encode(sample)
        if model is Wide:  # sampled text is no enum value, nor a JSON map; a sampled length may be 0
            payload["mode"], payload["args"] = "slow", {}
            payload["text"] = payload["text"] or "t"
            payload["tags"] = [t[:10] for t in payload["tags"]]
        model.model_validate(payload)


def test_actions_encode_as_the_model_dumps_them() -> None:
    field = fields_of(Wide.model_json_schema(), ACTION_EXTRAS)
    action = {
        "text": "héllo 猫",
        "level": np.int64(2),
        "big": np.array(7),
        "on": 1,
        "vec": np.array([1.0, 2.0, 3.0]),
        "tags": ("a", "b"),
        "where": {"x": np.array(0.5), "y": np.array(-0.5)},
        "maybe": np.array(1.5),
        "mode": "slow",
        "args": '{"k": [1, 2]}',
        "either": '"word"',
    }
    payload = field.encode(action)
    assert Wide.model_validate(payload).model_dump(exclude={"metadata"}) == payload
    assert payload["args"] == {"k": [1, 2]}
    assert payload["either"] == "word"
    assert field.encode({**action, "args": "not json"})["args"] == "not json"  # sent as a JSON string
    with pytest.raises(ValueError, match="missing"):
        field.encode({"text": "x"})


def test_observations_decode_into_their_space() -> None:
    field = fields_of(CountObservation.model_json_schema(), OBSERVATION_EXTRAS)
    assert list(field.space.spaces) == ["count", "echoed", "scores"]
    obs = CountObservation(count=3, echoed="hé", scores=[1.0, 2.0], done=True, reward=1.0)
    value = field.decode(obs.model_dump(exclude={"done", "reward"}))
    assert field.space.contains(value)
    assert value["echoed"] == "hé"
    assert value["scores"] == (1.0, 2.0)
    empty = field.decode(None)  # a missing observation: each field's empty value
    assert field.space.contains(empty)


def test_null_optional_values_read_as_empty() -> None:
    class Obs(Observation):
        maybe: float | None = None
        text: str | None = None
        n: int | None = Field(None, ge=0, le=3)

    field = fields_of(Obs.model_json_schema(), OBSERVATION_EXTRAS)
    value = field.decode({"maybe": None, "text": None, "n": None})
    assert np.isnan(value["maybe"])
    assert value["text"] == ""
    assert value["n"] == 0


@pytest.mark.parametrize("model", [Wide, CountAction, CountObservation])
def test_the_spaces_cross_the_wire(model: type[BaseModel]) -> None:
    space = fields_of(model.model_json_schema()).space
    rebuilt = space_from_description(describe_space(space))
    assert rebuilt == space


def test_a_schema_that_is_not_a_model_is_refused() -> None:
    with pytest.raises(SchemaError, match="object model"):
        fields_of({"type": "string"})
    with pytest.raises(SchemaError, match="does not define"):
        fields_of({"$ref": "#/$defs/Missing"})


def test_a_reply_maps_to_obs_reward_terminated_and_info() -> None:
    field = fields_of(CountObservation.model_json_schema(), OBSERVATION_EXTRAS)
    obs = CountObservation(count=2, echoed="x").model_dump(exclude={"done", "reward", "metadata"})
    got, reward, terminated, info = observation_result(
        field, {"observation": obs, "reward": None, "done": True, "metadata": {"step": 2}}
    )
    assert (got["count"], reward, terminated, info) == (2, 0.0, True, {"step": 2})
    got, reward, terminated, info = observation_result(field, {"observation": obs, "reward": 1, "done": False})
    assert (reward, terminated, info) == (1.0, False, {})  # an older server (OpenEnv 0.3): no metadata

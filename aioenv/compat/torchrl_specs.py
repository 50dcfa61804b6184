"""Gymnasium spaces as TorchRL specs, and batches moved between the two (for :mod:`aioenv.compat.torchrl`).

Each space becomes one or more *leaves*, a leaf being one entry of a TensorDict: its nested key, its
unbatched TorchRL spec, and the two conversions of a batch of B rows (numpy from the pool to a tensor, a
tensor from the policy to numpy for the pool). The mapping follows TorchRL's own ``GymEnv``:

- ``Box(low, high, shape)``: ``Bounded`` (``Unbounded`` when every bound is infinite, or an integer dtype's
  full range), tensor ``(B, *shape)`` in the space's dtype; a shape ``()`` becomes ``(1,)``.
- ``Discrete(n, start)``: ``OneHot(n)``, tensor ``(B, n)`` int64; with ``categorical_action_encoding=True``
  ``Categorical(n)``, tensor ``(B,)`` int64. Index ``i`` is the space's value ``start + i``.
- ``MultiDiscrete(nvec, start)``: ``MultiOneHot(nvec)`` for a 1-D ``nvec``, tensor ``(B, sum(nvec))`` int64
  (one-hots side by side); ``MultiCategorical(nvec)`` when categorical or for a multi-dimensional ``nvec``,
  tensor ``(B, *nvec.shape)`` int64. Index ``i`` is ``start + i``.
- ``MultiBinary(n)``: ``Binary``, tensor ``(B, *n)`` int8.
- ``Dict``: one entry per key, nested for a nested ``Dict``.

``Tuple``, ``Text``, ``Graph``, ``Sequence``, ``OneOf`` and spaces of your own have no TorchRL spec that a
batched env can carry without a loss: :func:`space_leaves` refuses them with a ``TypeError`` that names the
space and where it sits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from tensordict import TensorDictBase
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)

from aioenv.errors import InvalidAction

__all__ = ["Leaf", "NestedKey", "SpaceMap", "nested", "space_leaves"]

#: The spaces a leaf can be made of.
SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict spaces of these"

#: A TensorDict key: ``("observation",)``, or ``("obs", "position")`` for a key of a Dict space.
NestedKey = tuple[str, ...]


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    """The torch dtype of a numpy dtype (``float32`` -> ``torch.float32``)."""
    return torch.from_numpy(np.zeros((), dtype=dtype)).dtype


class Leaf:
    """One entry of a TensorDict and its gymnasium space.

    Attributes:
        key: the entry's nested key, e.g. ``("observation",)`` or ``("obs", "position")``.
        space: the gymnasium space of one env's value.
        spec: the TorchRL spec of one env's value (unbatched).
        shape: ``spec``'s shape; a batch of B rows is a tensor ``(B, *shape)``.
        space_shape: the space's shape; a batch of B rows from the pool is an array ``(B, *space_shape)``.
    """

    def __init__(self, key: NestedKey, space: spaces.Space[Any], spec: TensorSpec) -> None:
        self.key = key
        self.space = space
        self.spec = spec
        self.shape: tuple[int, ...] = tuple(spec.shape)
        self.space_shape: tuple[int, ...] = tuple(space.shape or ())

    def to_tensor(self, batch: npt.NDArray[Any]) -> torch.Tensor:
        """A pool's batch ``(B, *space.shape)`` as this leaf's tensor ``(B, *spec.shape)`` (CPU)."""
        return torch.from_numpy(np.ascontiguousarray(batch)).reshape(len(batch), *self.shape)

    def to_numpy(self, value: torch.Tensor) -> npt.NDArray[Any]:
        """A tensor ``(B, *spec.shape)`` as the pool's batch ``(B, *space.shape)``; the shape is checked."""
        return value.detach().cpu().numpy().reshape(len(value), *self.space_shape)

    def check_shape(self, value: torch.Tensor, num: int, role: str) -> None:
        """Raise ``InvalidAction`` unless ``value`` is a tensor of shape ``(num, *spec.shape)``."""
        if not isinstance(value, torch.Tensor):
            raise InvalidAction(
                f"{role} {_name(self.key)!r}: expected a tensor of shape {(num, *self.shape)} for {self.space}, "
                f"got {type(value).__name__}"
            )
        if tuple(value.shape) != (num, *self.shape):
            raise InvalidAction(
                f"{role} {_name(self.key)!r}: expected shape {(num, *self.shape)} ({num} envs, spec "
                f"{type(self.spec).__name__}{tuple(self.shape)} for {self.space}), got {tuple(value.shape)}"
            )


class _BoxLeaf(Leaf):
    """A ``Box``: the values themselves, in the space's dtype."""

    def to_tensor(self, batch: npt.NDArray[Any]) -> torch.Tensor:
        """``(B, *shape)`` as a tensor of the space's dtype (``(B, 1)`` for a scalar Box)."""
        array = np.ascontiguousarray(batch, dtype=self.space.dtype)
        return torch.from_numpy(array).reshape(len(array), *self.shape)


class _IndexLeaf(Leaf):
    """A ``Discrete`` or ``MultiDiscrete`` as indices from 0 (``Categorical``/``MultiCategorical``)."""

    def __init__(self, key: NestedKey, space: spaces.Space[Any], spec: TensorSpec, start: npt.NDArray[Any]) -> None:
        super().__init__(key, space, spec)
        self.start = start
        self.offset = bool(np.any(start != 0))

    def to_tensor(self, batch: npt.NDArray[Any]) -> torch.Tensor:
        """Values ``start + i`` as indices ``i``, int64, ``(B, *spec.shape)``."""
        index = np.asarray(batch, dtype=np.int64)
        if self.offset:
            index = index - self.start
        return torch.from_numpy(np.ascontiguousarray(index)).reshape(len(index), *self.shape)

    def to_numpy(self, value: torch.Tensor) -> npt.NDArray[Any]:
        """Indices ``i`` as the space's values ``start + i``, ``(B, *space.shape)``."""
        index = value.detach().cpu().numpy().astype(np.int64, copy=False).reshape(len(value), *self.space_shape)
        return index + self.start if self.offset else index


class _OneHotLeaf(Leaf):
    """A ``Discrete`` (``OneHot``) or a 1-D ``MultiDiscrete`` (``MultiOneHot``: one-hots side by side)."""

    def __init__(self, key: NestedKey, space: spaces.Space[Any], spec: TensorSpec, nvec: npt.NDArray[Any]) -> None:
        super().__init__(key, space, spec)
        self.nvec = [int(n) for n in nvec.reshape(-1)]
        start = np.asarray(getattr(space, "start", 0), dtype=np.int64)
        self.start = start
        self.offset = bool(np.any(start != 0))
        self.scalar = isinstance(space, spaces.Discrete)

    def to_tensor(self, batch: npt.NDArray[Any]) -> torch.Tensor:
        """Values as one-hot rows ``(B, sum(nvec))``, int64."""
        index = np.asarray(batch, dtype=np.int64)
        if self.offset:
            index = index - self.start
        index_t = torch.from_numpy(np.ascontiguousarray(index)).reshape(len(index), len(self.nvec))
        if len(self.nvec) == 1:
            return torch.nn.functional.one_hot(index_t[:, 0], self.nvec[0])
        return torch.cat(
            [torch.nn.functional.one_hot(index_t[:, i], n) for i, n in enumerate(self.nvec)],
            dim=-1,
        )

    def to_numpy(self, value: torch.Tensor) -> npt.NDArray[Any]:
        """One-hot rows ``(B, sum(nvec))`` as values; each block must hold exactly one 1 and zeros."""
        array = value.detach().cpu().numpy()
        columns: list[npt.NDArray[Any]] = []
        at = 0
        for n in self.nvec:
            block = array[:, at : at + n]
            at += n
            # one 1 and zeros: the row sums to 1, its largest value is 1 and its smallest is not negative
            bad = (block.sum(-1) != 1) | (block.max(-1) != 1) | (block.min(-1) < 0)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise InvalidAction(
                    f"action {_name(self.key)!r}: row {row} is not one-hot for {self.space} "
                    f"(spec {type(self.spec).__name__}): {array[row].tolist()}"
                )
            columns.append(block.argmax(-1))
        index = np.stack(columns, axis=-1).astype(np.int64, copy=False)
        if self.offset:
            index = index + self.start.reshape(-1)
        return index[:, 0] if self.scalar else index.reshape(len(array), *self.space_shape)


def _box(key: NestedKey, space: spaces.Box) -> Leaf:
    dtype = _torch_dtype(space.dtype)
    shape = space.shape or (1,)
    low = torch.as_tensor(np.asarray(space.low).reshape(shape), dtype=dtype)
    high = torch.as_tensor(np.asarray(space.high).reshape(shape), dtype=dtype)
    unbounded = bool(np.all(np.isinf(space.low)) and np.all(np.isinf(space.high)))
    if not unbounded and not dtype.is_floating_point:
        info = np.iinfo(str(space.dtype))
        unbounded = bool(np.all(space.low == info.min) and np.all(space.high == info.max))
    spec: TensorSpec = (
        Unbounded(shape=shape, dtype=dtype) if unbounded else Bounded(low=low, high=high, shape=shape, dtype=dtype)
    )
    return _BoxLeaf(key, space, spec)


def _discrete(key: NestedKey, space: spaces.Discrete, categorical: bool) -> Leaf:
    n = int(space.n)
    if categorical:
        return _IndexLeaf(key, space, Categorical(n, shape=(), dtype=torch.int64), np.asarray(space.start))
    return _OneHotLeaf(key, space, OneHot(n, shape=(n,), dtype=torch.int64), np.asarray([n]))


def _multi_discrete(key: NestedKey, space: spaces.MultiDiscrete, categorical: bool) -> Leaf:
    nvec = np.asarray(space.nvec, dtype=np.int64)
    if categorical or nvec.ndim != 1:
        spec = MultiCategorical(torch.as_tensor(nvec), shape=nvec.shape, dtype=torch.int64, remove_singleton=False)
        return _IndexLeaf(key, space, spec, np.asarray(space.start, dtype=np.int64))
    return _OneHotLeaf(key, space, MultiOneHot(nvec.tolist(), dtype=torch.int64), nvec)


def _multi_binary(key: NestedKey, space: spaces.MultiBinary) -> Leaf:
    return Leaf(key, space, Binary(shape=space.shape, dtype=torch.int8))


def space_leaves(
    space: spaces.Space[Any], default_key: str, *, categorical: bool = False, role: str = "observation"
) -> list[Leaf]:
    """The leaves of one env's ``space``: a ``Dict`` gives one per key (nested Dicts nest), any other space
    one leaf at ``default_key``.

    Args:
        space: one env's gymnasium space.
        default_key: the key of a non-Dict space (``"observation"``, ``"action"``).
        categorical: ``Discrete``/``MultiDiscrete`` as indices (``Categorical``) rather than one-hot.
        role: ``"observation"`` or ``"action"``, for the error message.

    Raises:
        TypeError: a space without a TorchRL spec here (Tuple, Text, Graph, Sequence, OneOf, your own).
    """
    key: NestedKey = () if isinstance(space, spaces.Dict) else (default_key,)
    return _leaves(space, key, categorical, role)


def _leaves(space: spaces.Space[Any], key: NestedKey, categorical: bool, role: str) -> list[Leaf]:
    if isinstance(space, spaces.Dict):
        return [
            leaf
            for name, child in space.spaces.items()
            for leaf in _leaves(child, (*key, str(name)), categorical, role)
        ]
    if isinstance(space, spaces.Box):
        return [_box(key, space)]
    if isinstance(space, spaces.Discrete):
        return [_discrete(key, space, categorical)]
    if isinstance(space, spaces.MultiDiscrete):
        return [_multi_discrete(key, space, categorical)]
    if isinstance(space, spaces.MultiBinary):
        return [_multi_binary(key, space)]
    raise TypeError(
        f"aioenv.compat.torchrl.AioEnv cannot map the {role} space {space} (at {_name(key)!r}) to a TorchRL spec: "
        f"it supports {SUPPORTED}. Wrap the env to expose one of these (e.g. a gymnasium ObservationWrapper), "
        f"or use aioenv.Pool/SyncPool directly, which carry every gymnasium space."
    )


def _name(key: NestedKey) -> str:
    return ".".join(key)


@dataclass(frozen=True)
class SpaceMap:
    """A gymnasium space as TensorDict entries: its leaves, its ``Composite`` spec, conversions of batches.

    Attributes:
        space: one env's gymnasium space.
        leaves: one :class:`Leaf` per TensorDict entry, in the space's order.
        is_dict: whether the space is a ``Dict`` (batches are dicts of arrays, nested as the space).
    """

    space: spaces.Space[Any]
    leaves: list[Leaf]
    is_dict: bool

    @classmethod
    def build(
        cls, space: spaces.Space[Any], default_key: str, *, categorical: bool = False, role: str = "observation"
    ) -> SpaceMap:
        """The map of ``space``: a non-Dict space sits at ``default_key`` (``"observation"``, ``"action"``)."""
        leaves = space_leaves(space, default_key, categorical=categorical, role=role)
        return cls(space, leaves, isinstance(space, spaces.Dict))

    def composite(self, batch_size: tuple[int, ...], device: torch.device | None) -> Composite:
        """The ``Composite`` spec of these entries, batched to ``batch_size`` (e.g. ``(num_envs,)``)."""
        out = Composite(shape=batch_size, device=device)
        for leaf in self.leaves:
            spec = leaf.spec.expand(*batch_size, *leaf.spec.shape)
            out[leaf.key] = spec if device is None else spec.to(device)
        return out

    def rows(self, batch: Any) -> Iterator[tuple[Leaf, npt.NDArray[Any]]]:
        """Each leaf with its part of the pool's batch (an array, or a nested dict of arrays for a Dict space)."""
        for leaf in self.leaves:
            value = batch
            if self.is_dict:
                for part in leaf.key:
                    value = value[part]
            yield leaf, value

    def to_tensors(self, batch: Any) -> dict[NestedKey, torch.Tensor]:
        """The pool's batch of B rows as ``{key: tensor (B, *spec.shape)}`` (CPU; shares the pool's arrays)."""
        return {leaf.key: leaf.to_tensor(value) for leaf, value in self.rows(batch)}

    def from_tensordict(self, data: TensorDictBase, num: int, role: str = "action") -> Any:
        """The entries of ``data`` (B = ``num`` rows) as the pool's batch: an array, or a nested dict for a Dict.

        Raises:
            InvalidAction: an entry is missing or its shape is not ``(num, *spec.shape)``.
        """
        if not self.is_dict:
            leaf = self.leaves[0]
            value = data.get(leaf.key, None)
            if value is None:
                raise InvalidAction(f"{role} {_name(leaf.key)!r} is missing from the tensordict")
            leaf.check_shape(value, num, role)
            return leaf.to_numpy(value)
        out: dict[str, Any] = {}
        for leaf in self.leaves:
            value = data.get(leaf.key, None)
            if value is None:
                raise InvalidAction(f"{role} {_name(leaf.key)!r} is missing from the tensordict")
            leaf.check_shape(value, num, role)
            node = out
            for part in leaf.key[:-1]:
                node = node.setdefault(part, {})
            node[leaf.key[-1]] = leaf.to_numpy(value)
        return out


def nested(mapping: Mapping[NestedKey, torch.Tensor]) -> dict[str, Any]:
    """``{("a", "b"): t}`` as ``{"a": {"b": t}}``, the form ``TensorDict(...)`` takes as its source."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return out

"""Batched values as trees: what a pool returns for any observation or action space.

A tree is a numpy array (one leaf: ``(N, ...)``, an object array ``(N,)`` for ``Text`` and the other
object spaces), a ``dict`` of trees (``Dict`` spaces) or a ``tuple`` of trees (``Tuple`` spaces); every
leaf has the same leading length. One env's value (a *row*) has the same structure without that axis.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "concat",
    "empty_rows",
    "leaves",
    "pack_rows",
    "put",
    "put_row",
    "stack",
    "take",
    "tmap",
]

Tree = Any


def tmap(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    """``fn`` applied to each leaf of ``tree`` (and the matching leaves of ``rest``), same structure."""
    if type(tree) is np.ndarray:  # the common tree, one leaf: no ABC check
        return fn(tree, *rest)
    if isinstance(tree, Mapping):
        return {k: tmap(fn, v, *(r[k] for r in rest)) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(tmap(fn, v, *(r[i] for r in rest)) for i, v in enumerate(tree))
    return fn(tree, *rest)


def leaves(tree: Tree) -> list[np.ndarray]:
    """The leaves of ``tree`` in order."""
    if isinstance(tree, Mapping):
        return [leaf for v in tree.values() for leaf in leaves(v)]
    if isinstance(tree, tuple):
        return [leaf for v in tree for leaf in leaves(v)]
    return [tree]


def take(tree: Tree, index: Any) -> Tree:
    """Rows ``index`` of every leaf (a copy for an index array)."""
    if type(tree) is np.ndarray:
        return tree[index]
    return tmap(lambda a: a[index], tree)


def put(tree: Tree, index: Any, value: Tree) -> None:
    """``tree[index] = value`` for every leaf (``value`` batched like ``tree``)."""
    if type(tree) is np.ndarray and tree.dtype != object:
        tree[index] = value
        return
    tmap(lambda leaf, rows: _put_leaf(leaf, index, rows), tree, value)


def _put_leaf(leaf: np.ndarray, index: Any, rows: Any) -> None:
    if leaf.dtype == object:
        for j, row in zip(np.arange(leaf.shape[0])[index].reshape(-1), list(rows), strict=True):
            leaf[j] = row  # element by element: numpy would try to broadcast a row that is itself an array
    else:
        leaf[index] = rows


def put_row(tree: Tree, row: int, value: Tree) -> None:
    """Row ``row`` of ``tree`` set to one env's unbatched ``value``."""
    tmap(lambda leaf, one: leaf.__setitem__(row, one), tree, value)


def concat(trees: Sequence[Tree]) -> Tree:
    """The trees joined along their leading axis."""
    return tmap(lambda *xs: np.concatenate(xs), *trees)


def stack(trees: Sequence[Tree]) -> Tree:
    """The trees stacked on a new leading axis: ``T`` trees of ``(B, ...)`` give ``(T, B, ...)``."""
    return tmap(lambda *xs: np.stack(xs), *trees)


def empty_rows(like: Tree, n: int) -> Tree:
    """A tree shaped like ``like`` with ``n`` rows (object leaves hold None, others are uninitialised)."""

    def make(a: np.ndarray) -> np.ndarray:
        if a.dtype == object:
            return np.full((n, *a.shape[1:]), None, dtype=object)
        return np.zeros((n, *a.shape[1:]), dtype=a.dtype)

    return tmap(make, like)


def pack_rows(space: gym.Space[Any], rows: Sequence[Any]) -> Tree:
    """One env's values (``rows``, unbatched, as ``space.sample()`` gives them) batched as a pool batches them."""
    if isinstance(space, gym.spaces.Dict):
        return {k: pack_rows(sub, [r[k] for r in rows]) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(pack_rows(sub, [r[i] for r in rows]) for i, sub in enumerate(space.spaces))
    if isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return np.stack([np.asarray(r, dtype=space.dtype) for r in rows])
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        out[i] = r
    return out

"""The constructor arguments of :class:`aioenv.vector.AioVectorEnv`, checked and given ``AsyncVectorEnv``'s meaning.

- ``max_concurrency``, ``context``: validated with ``AsyncVectorEnv``'s errors (``context="fork"`` warns: workers
  are never forked).
- ``observation_mode``: ``"same"``; ``"different"`` (every env made here once, as ``AsyncVectorEnv`` does, its
  batched space from gymnasium's ``batch_differing_spaces``); a ``(observation_space, single_observation_space)``
  tuple. In the last two, each env shows the pool one observation space (see
  :class:`aioenv.compat.vector_worker.VectorFactory`).
- ``shared_memory=True``: an observation space that gymnasium cannot put in shared memory is refused with
  ``AsyncVectorEnv``'s errors (a user-defined space: ``ValueError``; ``Graph``/``Sequence``: ``TypeError``).
- :func:`space_mismatch_error`: the pool's refusal of envs with different spaces, as ``AsyncVectorEnv``'s
  ``RuntimeError``.
- :func:`checked_env_fns`: ``env_fns`` is a sequence of callables, checked before any worker starts (also for
  :class:`aioenv.compat.sb3.AioVecEnv`).
"""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from gymnasium import Space
from gymnasium.spaces import Dict, Graph, OneOf, Tuple
from gymnasium.spaces import Sequence as SequenceSpace
from gymnasium.vector.utils import batch_differing_spaces, create_shared_memory, read_from_shared_memory

from aioenv.compat.vector_worker import VectorFactory
from aioenv.wire.options import is_int

__all__ = [
    "SpaceMismatch",
    "checked_concurrency",
    "checked_context",
    "checked_env_fns",
    "custom_spaces",
    "different_spaces",
    "factories",
    "shared_memory_error",
    "space_mismatch_error",
]

#: How an aioenv pool refuses envs whose spaces differ (``aioenv.pool.Pool._adopt``).
_POOL_MISMATCH = "all envs of a pool must share their spaces: got observation spaces "


class SpaceMismatch(RuntimeError, ValueError):
    """The envs' spaces do not fit together: ``AsyncVectorEnv``'s ``RuntimeError`` (also the ``ValueError`` an
    aioenv pool raises for it)."""


def checked_env_fns(env_fns: object, owner: str) -> list[Callable[[], Any]]:
    """``env_fns`` as a list, checked to be env factories before any worker starts: ``TypeError`` for a string (an
    env id where a list of factories goes: what to write instead), for what is no sequence, and for an element
    that is not callable (its index and type). An empty list is the callers' own ``ValueError``."""
    if isinstance(env_fns, str | bytes):
        raise TypeError(
            f"{owner} takes a list of env factories (callables that return a gymnasium.Env), got the string "
            f"{env_fns!r}: write {owner}([lambda: gymnasium.make({env_fns!r})] * n), or aioenv.Pool({env_fns!r}, n) "
            "for a pool of n envs made from an id"
        )
    if not isinstance(env_fns, Sequence):
        raise TypeError(
            f"{owner} takes a list of env factories (callables that return a gymnasium.Env), got "
            f"{type(env_fns).__name__}"
        )
    fns = list(env_fns)
    for index, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(
                f"{owner}'s env_fns[{index}] must be a callable that returns a gymnasium.Env, got "
                f"{type(fn).__name__} {fn!r:.80}"
            )
    return fns


def checked_concurrency(max_concurrency: object) -> int | None:
    """``max_concurrency`` as ``AsyncVectorEnv`` checks it (same messages)."""
    if max_concurrency is None:
        return None
    if not is_int(max_concurrency):
        raise ValueError(f"`max_concurrency` must be an integer or None, got {type(max_concurrency)}.")
    if max_concurrency < 1:
        raise ValueError(f"`max_concurrency` must be a positive or None, got {max_concurrency}.")
    return int(max_concurrency)


def checked_context(context: str | None, owner: str) -> None:
    """``context`` as ``AsyncVectorEnv`` takes it: ``multiprocessing``'s error for a start method it does not know;
    ``"fork"`` warns (workers are fresh interpreters, as with ``"spawn"``/``"forkserver"``)."""
    if context is None:
        return
    multiprocessing.get_context(context)
    if context == "fork":
        warnings.warn(
            f"{owner} ignores context='fork': aioenv never forks, its workers are fresh interpreters that receive the "
            "env factories pickled with cloudpickle (as with 'spawn' or 'forkserver'), so state this process made "
            "at run time that the factories do not carry is not in them",
            UserWarning,
            stacklevel=3,
        )


def custom_spaces(observation_mode: object) -> tuple[Space[Any], Space[Any]] | None:
    """The ``(observation_space, single_observation_space)`` an ``observation_mode`` tuple gives; None for
    ``"same"`` and ``"different"``; ``AsyncVectorEnv``'s errors for anything else."""
    if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
        if not all(isinstance(s, Space) for s in observation_mode):
            raise TypeError(
                "Expected both elements of observation_mode to be Spaces, got "
                f"{type(observation_mode[0])} and {type(observation_mode[1])}"
            )
        return observation_mode[0], observation_mode[1]
    if isinstance(observation_mode, str) and observation_mode in ("same", "different"):
        return None
    raise ValueError(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
        f"observation space, actual got {observation_mode}"
    )


def different_spaces(env_fns: Sequence[Callable[[], Any]]) -> tuple[Space[Any], Space[Any]]:
    """``observation_mode="different"`` as ``AsyncVectorEnv`` does it: make every env here (then close it) and
    batch their observation spaces with ``batch_differing_spaces`` (its errors when they do not fit).

    Returns:
        ``(observation_space, single_observation_space)``: the batched space and the first env's.
    """
    env_spaces: list[Space[Any]] = []
    for env_fn in env_fns:
        env = env_fn()
        try:
            env_spaces.append(env.observation_space)
        finally:
            env.close()
    return batch_differing_spaces(env_spaces), env_spaces[0]


def shared_memory_error(space: Space[Any]) -> Exception | None:
    """The error ``AsyncVectorEnv(..., shared_memory=True)`` raises for observation ``space``, or None: a space
    with no shared-memory layout registered with gymnasium gives its ``ValueError``, a ``Graph`` or ``Sequence``
    its ``TypeError``. Nothing is allocated."""
    if isinstance(space, (Tuple, OneOf)):
        children: list[Space[Any]] = list(space.spaces)
    elif isinstance(space, Dict):
        children = list(space.spaces.values())
    elif isinstance(space, (Graph, SequenceSpace)):
        try:
            create_shared_memory(space, n=1)
        except TypeError as exc:
            return exc
        return None
    else:
        children = []
    for function in (create_shared_memory, read_from_shared_memory):
        if function.dispatch(type(space)) is function.registry[object]:
            return ValueError(
                "Using `AsyncVector(..., shared_memory=True)` caused an error, you can disable this feature with "
                f"`shared_memory=False` however this is slower. (No shared memory layout for {space}.)"
            )
    return next((err for err in map(shared_memory_error, children) if err is not None), None)


def factories(env_fns: Sequence[Callable[[], Any]], advertise: Space[Any] | None, owner: str) -> list[VectorFactory]:
    """One :class:`~aioenv.compat.vector_worker.VectorFactory` per env; the same callable twice stays one source."""
    by_id: dict[int, VectorFactory] = {}
    return [by_id.setdefault(id(fn), VectorFactory(fn, advertise, owner)) for fn in env_fns]


def _halves_equal(text: str) -> bool:
    """``text`` is ``"X and X"``."""
    half = (len(text) - len(" and ")) // 2
    return half >= 0 and text[half : half + 5] == " and " and text[:half] == text[half + 5 :]


def space_mismatch_error(exc: ValueError, observation_mode: object, owner: str) -> SpaceMismatch | None:
    """The pool's refusal of envs whose spaces differ, as ``AsyncVectorEnv``'s ``RuntimeError`` (the pool's message
    appended); None for any other ``ValueError``."""
    message = str(exc)
    if not message.startswith(_POOL_MISMATCH):
        return None
    observation_part = message[len(_POOL_MISMATCH) :].rpartition(", action spaces ")[0]
    if observation_mode == "same" and not _halves_equal(observation_part):
        head = (
            f"{owner}(..., observation_mode='same') however some of the sub-environments observation spaces are not "
            "equivalent. If this is intentional, use `observation_mode='different'` instead."
        )
    else:
        head = (
            "Some environments have an action space different from the first env's. In order to batch actions, "
            "the action spaces from all environments must be equal."
        )
    return SpaceMismatch(f"{head} ({message})")

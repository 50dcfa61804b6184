"""The worker side of :class:`aioenv.vector.AioVectorEnv`: its env factory and what it attaches to each env.

Worker processes import this module (they unpickle :class:`VectorFactory`), so it imports only gymnasium and
:mod:`aioenv.compat.payloads`.

- :class:`VectorFactory` makes the env, attaches :mod:`aioenv.compat.payloads`' helper (``get_attr``, ``call``
  and ``set_attr`` with any picklable value) and :data:`PEER_CALL` (gymnasium ``AsyncVectorEnv``'s worker
  ``_call``: the attribute, called when callable). With ``advertise`` (``observation_mode="different"`` or a
  custom space), an env whose observation space differs from it but has the same shape and dtype is shown to
  the pool through :class:`SpaceView`, so every env of the pool has one observation space, as an aioenv pool
  requires; an env whose space has another shape or dtype fails with ``AsyncVectorEnv``'s ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from aioenv._compat import set_wrapper_attr
from aioenv.compat.payloads import CompatFactory

__all__ = ["PEER_CALL", "SpaceView", "VectorFactory", "peer_call", "space_mismatch"]

#: Name of the attribute :class:`VectorFactory` attaches: ``AsyncVectorEnv``'s ``call`` on this env.
PEER_CALL = "_aioenv_vector_call"


def peer_call(env: Any, name: str, /, *args: Any, **kwargs: Any) -> Any:
    """``AsyncVectorEnv``'s worker ``_call``: ``env.get_wrapper_attr(name)``, called when callable."""
    attr = env.get_wrapper_attr(name)
    return attr(*args, **kwargs) if callable(attr) else attr


def space_mismatch(owner: str = "AsyncVectorEnv") -> str:
    """``AsyncVectorEnv``'s message for an observation space that does not fit ``observation_mode``."""
    return (
        f"{owner}(..., observation_mode='different' or custom space) however the sub-environment's observation "
        "spaces do not share a common shape and dtype."
    )


class SpaceView(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Shows the pool ``space`` as the env's observation space (same shape and dtype as the env's own). It is
    invisible otherwise: ``get_wrapper_attr``/``set_wrapper_attr``/``has_wrapper_attr`` (what ``get_attr``,
    ``set_attr`` and ``call`` use) go to the env itself, its own ``observation_space`` included, and ``spec``
    is the env's own."""

    def __init__(self, env: gymnasium.Env[Any, Any], space: gymnasium.Space[Any]) -> None:
        super().__init__(env)
        self.observation_space = space

    def has_wrapper_attr(self, name: str) -> bool:
        """Whether the env has attribute ``name``."""
        return bool(self.env.has_wrapper_attr(name))

    def get_wrapper_attr(self, name: str) -> Any:
        """The env's attribute ``name`` (its own ``observation_space`` too)."""
        return self.env.get_wrapper_attr(name)

    def set_wrapper_attr(self, name: str, value: Any, *, force: bool = True) -> bool:
        """Set attribute ``name`` on the env, as gymnasium would without this view."""
        return set_wrapper_attr(self.env, name, value, force)

    @property
    def spec(self) -> Any:  # type: ignore[override]  # read-only, as gymnasium's Wrapper.spec
        """The env's own spec (this view adds no wrapper to it)."""
        return self.env.spec


class VectorFactory(CompatFactory):
    """An ``AioVectorEnv`` env factory: ``env_fn``'s env with the compat helper and :data:`PEER_CALL` attached,
    seen by the pool through :class:`SpaceView` when ``advertise`` is given and differs from its space.

    Args:
        env_fn: the user's factory.
        advertise: the observation space every env must show the pool (``observation_mode="different"``:
            the first env's; a custom ``observation_mode``: the single space given), or None.
        owner: the vector env's class name, for error messages.
    """

    def __init__(
        self, env_fn: Callable[..., Any], advertise: gymnasium.Space[Any] | None = None, owner: str = "AioVectorEnv"
    ) -> None:
        super().__init__(env_fn)
        self.advertise = advertise
        self.owner = owner

    def __call__(self, **kwargs: Any) -> Any:
        """Make the env (``kwargs`` from the pool's ``env_kwargs``), attach the helpers, fit the advertised space."""
        env = super().__call__(**kwargs)
        with contextlib.suppress(AttributeError, TypeError):  # __slots__ or frozen: call() then fails clearly
            setattr(env, PEER_CALL, functools.partial(peer_call, env))
        space = self.advertise
        if space is None or env.observation_space == space:
            return env
        if not is_space_dtype_shape_equiv(space, env.observation_space):
            env.close()
            raise RuntimeError(
                f"{space_mismatch(self.owner)} Expected the shape and dtype of {space}, got {env.observation_space}"
            )
        return SpaceView(env, space)

"""``aioenv.vector.AioVectorEnv``: the public name of :class:`aioenv.compat.vector.AioVectorEnv`.

A drop-in for ``gymnasium.vector.AsyncVectorEnv``; it lives with the other adapters in
:mod:`aioenv.compat`.
"""

from aioenv.compat.vector import AioVectorEnv

__all__ = ["AioVectorEnv"]

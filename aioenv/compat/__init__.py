"""Drop-in adapters for code written against other vectorized-env libraries.

- :mod:`aioenv.compat.vector`: ``AioVectorEnv``, a drop-in for gymnasium's ``AsyncVectorEnv``
  (also importable as :mod:`aioenv.vector`).
- :mod:`aioenv.compat.sb3`: ``AioVecEnv``, a drop-in for Stable-Baselines3's ``SubprocVecEnv``
  (needs the ``sb3`` extra: ``pip install "aioenv[sb3]"``).
- :mod:`aioenv.compat.envpool`: EnvPool's Python interface (``make``, ``send``/``recv``,
  ``async_reset``, ``info["env_id"]``, ``env_type`` ``"gymnasium"``/``"gym"``/``"dm"``; ``"dm"`` needs the
  ``dm`` extra) for any gymnasium env.
- :mod:`aioenv.compat.payloads`: how the adapters' arbitrary values (``get_attr``, ``env_method``,
  ``set_attr``) travel without pickle on a socket.

This package imports none of its modules: worker processes import :mod:`aioenv.compat.payloads`
(the env factories of ``AioVecEnv`` live there) and :mod:`aioenv.compat.vector_worker` (``AioVectorEnv``'s)
and must stay light.
"""

"""OpenEnv environments in aioenv pools.

``await aioenv.make("openenv+ws://HOST:PORT", 64)`` opens one OpenEnv WebSocket session (``/ws``) per env: each
env is an :class:`aioenv.AsyncEnv` (:class:`aioenv.openenv.env.OpenEnvEnv`) hosted by ``async`` workers, so the
pool's deadlines, recovery, first-finished ``recv`` and collectors apply to it. Its spaces are read from the
server's ``/schema`` (:mod:`aioenv.openenv.spaces`). ``"openenv+app:pkg.module:app"`` starts the OpenEnv app
as a local server process of each worker (:mod:`aioenv.openenv.source`). See ``docs/openenv.md``.
"""

"""OpenEnv's protocol both ways: OpenEnv environments in an aioenv pool (``aioenv.make("openenv+ws://HOST:PORT", n)``:
one WebSocket session per env, :mod:`aioenv.openenv.env`, :mod:`aioenv.openenv.source`), and aioenv's envs served to
OpenEnv's clients (:mod:`aioenv.openenv.serve`, ``aioenv serve --http``)."""

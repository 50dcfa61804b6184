"""OpenEnv's protocol both ways: OpenEnv environments in an aioenv pool, and aioenv's envs served to OpenEnv's
clients (:mod:`aioenv.openenv.serve`, ``aioenv serve --http``)."""

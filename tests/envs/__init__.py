"""Small gymnasium envs for aioenv's tests, importable by worker processes as ``tests.envs.faulty:make_xxx``."""

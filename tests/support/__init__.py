"""Helpers the tests call with arguments of their own, where a pytest fixture does not fit.

- :mod:`~tests.support.procs`: the hang guard ``HANG``, child processes, worker pids.
- :mod:`~tests.support.compare`: exact comparison of results and infos (``assert_same``).
- :mod:`~tests.support.scripts`: running examples and the CLI as a user runs them.
- :mod:`~tests.support.servers`: ``aioenv serve`` and ``aioenv worker`` processes with their logs.
- :mod:`~tests.support.lifecycles`: the path of states an object's lifecycle took (``record``).

Fixtures shared by several directories live in ``tests/conftest.py``.
"""

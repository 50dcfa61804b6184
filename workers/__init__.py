"""The aioenv worker runtime: a process that hosts envs for a coordinator.

Start one with ``python -m workers --connect ENDPOINT`` (local pools do this for
you). See :mod:`workers.runtime` for the loop and :mod:`workers.hosted` for the
per-env autoreset state machine.
"""

"""Small envs shipped with aioenv, addressable by name (``"aioenv.envs.latency:AsyncSleepEnv"``).

They exist for benchmarks, tests and examples, and to check a deployment end to end:
a remote server only accepts env sources by name.
"""

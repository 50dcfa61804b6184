"""The compiled part of a pool's hot path, ``aioenv/_speedups.c`` (see ``aioenv/_hot.py``); everything else about the
package is in pyproject.toml.

Optional: where it cannot be built (no C compiler, no Python headers) the install goes on without it, and its
pure-Python twins run.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("aioenv._speedups", sources=["aioenv/_speedups.c"], optional=True)])

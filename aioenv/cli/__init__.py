"""The ``aioenv`` command line (:mod:`~aioenv.cli.main`), its ``demo`` and its quick ``bench``."""

from aioenv.cli.main import main

__all__ = ["main"]

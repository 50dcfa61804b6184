"""The package version (the wire protocol has its own: :mod:`aioenv.wire.version`)."""

__version__ = "0.1.0"

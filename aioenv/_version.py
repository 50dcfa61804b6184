"""The package version (the wire protocol has its own: :mod:`aioenv.protocol_version`)."""

__version__ = "0.1.0"

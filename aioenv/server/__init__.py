"""``aioenv serve``: a coordinator many clients share over ``tcp://``.

- :mod:`~aioenv.server.server`: sessions (one per client), their pools and requests.
- :mod:`~aioenv.server.fleet`: worker hosts that join with ``aioenv worker --connect``.
- :mod:`~aioenv.server.metrics`: Prometheus metrics, read from a view of the server's state.
- :mod:`~aioenv.server.status`: the client side of ``aioenv status``.
"""

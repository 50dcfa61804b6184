"""The coordinator and what it needs, under the public :class:`~aioenv.Pool`.

- :mod:`~aioenv.core.scheduler` and :mod:`~aioenv.core.placement`: pure bookkeeping (which env is
  claimed, which request is open, which worker hosts which env), no I/O.
- :mod:`~aioenv.core.coordinator`: starts workers and sends them requests.
- :mod:`~aioenv.core.launcher` and :mod:`~aioenv.core.sources`: local worker processes and what
  their envs are made from.
- :mod:`~aioenv.core.replies`, :mod:`~aioenv.core.sinks`: worker replies routed to the requests
  that wait for them and assembled into results; :mod:`~aioenv.core.relay`: those replies as a
  server sends them on to its clients.
- :mod:`~aioenv.core.remote`: the client side of a pool served by ``aioenv serve``.
"""

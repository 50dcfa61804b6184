"""Byte movers between a coordinator and its workers or clients.

- :mod:`~aioenv.transport.pipe`: a local worker's socketpair (length-prefixed frames).
- :mod:`~aioenv.transport.slab`: the shared-memory rows an inline pool and its workers write.
- :mod:`~aioenv.transport.zmqio` and :mod:`~aioenv.transport.router`: ZeroMQ frames and the
  asyncio ROUTER/DEALER sockets of servers, clients and worker hosts.
- :mod:`~aioenv.transport.stream`: a server's unix socket and its clients' connections (no ZeroMQ), framed
  as the pipes are.
- :mod:`~aioenv.transport.dial`: a client's connection to a server, ZeroMQ or unix socket by its address.
- :mod:`~aioenv.transport.auth`: CURVE keys and ZAP for those sockets.
- :mod:`~aioenv.transport.spawn`: the command line and CPU policy a worker process starts with.

Transports may use :mod:`aioenv.wire`; they never import the coordinator (:mod:`aioenv.core`) or
the server (:mod:`aioenv.server`).
"""

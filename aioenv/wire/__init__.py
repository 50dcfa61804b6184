"""What crosses a process boundary: message frames and ops (:mod:`~aioenv.wire.protocol`), the
protocol version (:mod:`~aioenv.wire.version`), gymnasium spaces as msgpack descriptions
(:mod:`~aioenv.wire.spaces`) and batched info dicts (:mod:`~aioenv.wire.infos`).

The lowest layer above the ground (errors, env): it imports neither transports, nor the
coordinator, nor the server, so both ends of a connection (pool and worker) can use it.
"""

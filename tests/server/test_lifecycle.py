"""A Server closes cleanly from any state: never started, started, closed twice."""

from __future__ import annotations

from aioenv.server.server import Server, ServerConfig


async def test_aclose_before_start_is_a_no_op_that_leaves_it_closed() -> None:
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0"))
    await server.aclose()  # raised AttributeError: the idle-client sweep is set up only by start()
    assert server.closing
    assert not server.sessions
    await server.aclose()  # and again


async def test_aclose_after_start_is_idempotent() -> None:
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0"))
    await server.start()
    endpoint = server.endpoint
    assert endpoint.startswith("tcp://127.0.0.1:")
    await server.aclose()
    assert server.closing
    await server.aclose()  # a second close is a no-op

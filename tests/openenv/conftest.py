"""The OpenEnv test server, one per module (importing OpenEnv costs its process seconds of CPU); a test that kills a
server or counts sessions starts one of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.openenv_server import OpenEnvServer


@pytest.fixture(scope="module")
def server() -> Iterator[OpenEnvServer]:
    """A running :class:`OpenEnvServer`, killed after the test."""
    srv = OpenEnvServer().start()
    try:
        yield srv
    finally:
        srv.stop()

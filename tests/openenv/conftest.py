"""The OpenEnv test server, one per test process (importing OpenEnv costs its process ~6 s of CPU); a test that kills
a server or counts sessions starts one of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.openenv_server import OpenEnvServer


@pytest.fixture(scope="session")
def server() -> Iterator[OpenEnvServer]:
    """A running :class:`OpenEnvServer`, killed when the test process ends."""
    srv = OpenEnvServer().start()
    try:
        yield srv
    finally:
        srv.stop()

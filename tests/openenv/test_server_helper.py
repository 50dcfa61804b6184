"""The OpenEnv test server (:class:`tests.support.openenv_server.OpenEnvServer`) holds its port from the start."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.support.openenv_server import OpenEnvServer


def test_a_port_another_socket_listens_on_fails_the_start_at_once_and_leaves_no_server_behind() -> None:
    # another test's socket on the port, answering garbage: the start must not take it for the server (it once
    # read "@@@" as a status line) nor leave a uvicorn process running when it gives up
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(8)
        port = other.getsockname()[1]
        stop = threading.Event()

        def answer_garbage() -> None:
            other.settimeout(0.05)
            while not stop.is_set():
                try:
                    conn, _ = other.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.sendall(b"@@@\xfe?\r\n")

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        server = OpenEnvServer(port=port)
        try:
            with pytest.raises(OSError, match="Address already in use"):
                server.start()
            assert server.proc is None or server.proc.poll() is not None
        finally:
            stop.set()
            thread.join()
            server.stop()

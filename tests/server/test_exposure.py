"""Who may reach a server: ``aioenv serve`` listens on loopback by default; beyond it only with ``--auth`` or an
explicit ``--insecure`` (logged as warnings); its Prometheus port listens on ``--metrics-bind`` (loopback by
default). Run through the real command line, with real sockets."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import click
import pytest

import aioenv
from aioenv.cli.main import main as cli
from aioenv.server.server import ServerConfig
from aioenv.transport.auth import create_keys
from aioenv.transport.zmqio import is_loopback
from tests.support.procs import HANG
from tests.support.scripts import run_python
from tests.support.servers import ServerProcess


def non_loopback_address() -> str | None:
    """One of this machine's addresses that is not loopback (the one its default route leaves from), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # a datagram socket's connect sends nothing: it only picks a route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HERE = non_loopback_address()
needs_an_address = pytest.mark.skipif(HERE is None, reason="this machine has no non-loopback address")


# ---------------------------------------------------------------- what loopback means


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.3.2.1:0", True),  # all of 127.0.0.0/8
        ("tcp://localhost:5555", True),
        ("tcp://[::1]:5555", True),
        ("tcp://[::ffff:127.0.0.1]:5555", True),
        ("unix:///run/aioenv.sock", True),
        ("ipc:///tmp/aioenv.sock", True),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://[::]:5555", False),
        ("tcp://10.1.2.3:5555", False),
        ("tcp://[fe80::1%lo]:5555", False),
        ("tcp://lo:5555", False),  # an interface's name: ZeroMQ binds its address; the rule stays short
        ("tcp://no-such-host.invalid:5555", False),  # resolves to nothing
        ("tcp://ünïcode:5555", False),
        ("tcp://:5555", False),
        ("tcp://127.0.0.1", False),  # not an address
    ],
)
def test_what_counts_as_loopback(endpoint: str, loopback: bool) -> None:
    assert is_loopback(endpoint) is loopback


def test_a_name_that_resolves_beyond_loopback_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host name counts by what it resolves to, every address of it: one beyond loopback is enough."""
    answers = {
        "both.example": ["127.0.0.1", "10.0.0.1"],
        "home.example": ["127.0.0.1", "::1"],
        "far.example": ["10.0.0.1"],
    }

    def resolve(host: str, *_args: object, **_kw: object) -> list[tuple[object, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert not is_loopback("tcp://both.example:5555")
    assert is_loopback("tcp://home.example:5555")
    assert not is_loopback("tcp://far.example:5555")


# ---------------------------------------------------------------- the defaults


def test_serve_listens_on_loopback_by_default() -> None:
    assert isinstance(cli, click.Group)
    with cli.commands["serve"].make_context("aioenv serve", []) as ctx:
        assert ctx.params["bind"] == "tcp://127.0.0.1:5555"
        assert ctx.params["metrics_bind"] == "127.0.0.1"
        assert ctx.params["insecure"] is False
    assert ServerConfig().bind == "tcp://127.0.0.1:5555"
    assert ServerConfig().metrics_bind == "127.0.0.1"


# ---------------------------------------------------------------- beyond loopback: --auth or --insecure


def _refused(*args: str) -> str:
    """``aioenv serve ARGS``: it must refuse to start, in one line, and say why; its stderr."""
    proc = run_python("-m", "aioenv.cli", "serve", *args, timeout=HANG)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "listening on" not in proc.stderr
    return proc.stderr


@pytest.mark.parametrize(
    ("args", "address", "flag"),
    [
        (("--bind", "tcp://0.0.0.0:0"), "tcp://0.0.0.0:0", "--bind"),
        (("--bind", "tcp://*:0"), "tcp://*:0", "--bind"),
        (("--bind", "tcp://127.0.0.1:0", "--worker-bind", "tcp://0.0.0.0:0"), "tcp://0.0.0.0:0", "--worker-bind"),
    ],
)
def test_a_non_loopback_port_without_auth_is_refused(args: tuple[str, ...], address: str, flag: str) -> None:
    said = _refused(*args)
    assert f"Error: refusing to listen on {address} ({flag}) without --auth" in said
    for way_out in ("--auth KEYDIR", "tcp://127.0.0.1:PORT", "--insecure", "SECURITY.md"):
        assert way_out in said


@needs_an_address
def test_this_machines_own_address_is_refused_without_auth() -> None:
    said = _refused("--bind", f"tcp://{HERE}:0")
    assert f"refusing to listen on tcp://{HERE}:0 (--bind)" in said


def test_insecure_and_auth_together_are_refused(tmp_path: Path) -> None:
    create_keys(tmp_path, "server")
    said = _refused("--bind", "tcp://0.0.0.0:0", "--auth", str(tmp_path), "--insecure")
    assert "--insecure and --auth contradict each other" in said


@needs_an_address
def test_insecure_serves_beyond_loopback_and_says_so_loudly() -> None:
    srv = ServerProcess("--insecure", "--worker-bind", "tcp://0.0.0.0:0", bind="tcp://0.0.0.0:0")
    try:
        port = srv.endpoint.rpartition(":")[2]

        async def reset_over_the_network() -> tuple[int, ...]:
            async with aioenv.Pool("CartPole-v1", 1, endpoint=f"tcp://{HERE}:{port}") as pool:
                obs, _ = await pool.reset(seed=0)
            return tuple(obs.shape)

        assert aioenv.run(reset_over_the_network()) == (1, 4)
    finally:
        srv.stop()
    log = "".join(srv.log)
    warnings = [line for line in log.splitlines() if "--insecure:" in line]
    assert len(warnings) == 2, log
    assert all("WARNING" in line and "without authentication" in line for line in warnings), warnings
    assert "(--bind) admits every peer" in warnings[0]
    assert "make and step envs" in warnings[0]
    assert "(--worker-bind) admits every peer" in warnings[1]
    assert "join as a worker host" in warnings[1]


@pytest.mark.parametrize("bind", ["tcp://localhost:0", "tcp://127.0.0.2:0", "unix"])
def test_loopback_and_unix_sockets_need_neither(bind: str) -> None:
    srv = ServerProcess(bind=bind)
    srv.stop()
    assert "--insecure" not in "".join(srv.log)


def test_auth_serves_beyond_loopback_without_a_warning(tmp_path: Path) -> None:
    for name in ("server", "alice"):
        create_keys(tmp_path, name)
    srv = ServerProcess("--auth", str(tmp_path), bind="tcp://0.0.0.0:0")
    try:
        port = srv.endpoint.rpartition(":")[2]
        keys = (str(tmp_path / "alice.key_secret"), str(tmp_path / "server.key"))

        async def reset() -> None:
            async with aioenv.Pool("CartPole-v1", 1, endpoint=f"tcp://127.0.0.1:{port}", curve_keys=keys) as pool:
                await pool.reset(seed=0)

        aioenv.run(reset())
    finally:
        srv.stop()
    assert "--insecure" not in "".join(srv.log)


# ---------------------------------------------------------------- the metrics port


def _scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=HANG) as reply:
        return str(reply.read().decode())


@needs_an_address
def test_metrics_listen_on_loopback_by_default() -> None:
    assert HERE is not None
    port = free_port()
    srv = ServerProcess("--metrics-port", str(port))
    try:
        assert "aioenv_pools" in _scrape("127.0.0.1", port)
        with pytest.raises(urllib.error.URLError) as refused:
            _scrape(HERE, port)
        assert isinstance(refused.value.reason, ConnectionRefusedError)
    finally:
        srv.stop()
    assert f"http://127.0.0.1:{port}/metrics" in "".join(srv.log)


@needs_an_address
def test_metrics_bind_is_honoured() -> None:
    assert HERE is not None
    port = free_port()
    srv = ServerProcess("--metrics-port", str(port), "--metrics-bind", "0.0.0.0")
    try:
        assert "aioenv_pools" in _scrape(HERE, port)
    finally:
        srv.stop()
    assert f"http://0.0.0.0:{port}/metrics" in "".join(srv.log)

"""Who a client is: with --auth its key, else its connection; the name it sends is a label, checked and shown
escaped, never trusted. Limits per client (envs, pools, worker processes) count by who it is, so a client that
takes another's name takes nothing from it. Real server processes, real pools and raw ZeroMQ peers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zmq
from rich.console import Console

import aioenv
from aioenv.cli.main import _pools_table
from aioenv.core import remote
from aioenv.errors import CapacityError
from aioenv.server.server import Server, ServerConfig
from aioenv.server.status import fetch_status
from aioenv.transport.spawn import usable_cpus
from aioenv.wire.protocol import Key, Op, decode, encode
from tests.support.procs import HANG
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess, keygen

pytestmark = pytest.mark.timeout(180)


def _open_raw(endpoint: str, label: object, envs: int = 1, env: str = "CartPole-v1") -> tuple[zmq.Socket[bytes], dict]:
    """A peer that opens a pool by hand under the name ``label``: its socket (kept open: the pool lives while it
    does) and the OPEN's answer."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(HANG * 1000))
    sock.connect(endpoint)
    fields = {Key.ID: -1, Key.ENV: env, Key.NUM_ENVS: envs, Key.CLIENT: label, Key.OPT: {"num_workers": 1}}
    sock.send_multipart(encode(Op.OPEN, fields))
    return sock, decode(sock.recv_multipart())[0]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "aioenv.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )


# ---------------------------------------------------------------- names are labels


@pytest.mark.parametrize(("timeout", "beat"), [((), 1.0), (("--client-timeout", "2"), 0.5)])
def test_the_open_reply_says_how_often_to_ping(timeout: tuple[str, ...], beat: float) -> None:
    """A quarter of --client-timeout, at most every second: a client is dropped only after three missed PINGs."""
    srv = ServerProcess(*timeout)
    sock, answer = _open_raw(srv.endpoint, "raw")
    try:
        assert (answer[Key.OP], answer[Key.BEAT]) == (Op.RESULT, beat)
    finally:
        sock.close()
        srv.stop()


def test_without_auth_a_name_taken_by_another_connection_takes_nothing_from_its_owner() -> None:
    """A peer opens a pool under this process's name (as `aioenv status` shows it); this process then opens its own
    pools as if nothing happened (it used to be refused, and the log blamed it), and the log and the status name
    the squatter by its connection."""
    srv = ServerProcess("--max-pools-per-client", "1", "--max-envs-per-client", "4")
    squatter, answer = _open_raw(srv.endpoint, remote.CLIENT_ID, 4)
    try:
        assert answer[Key.OP] == Op.RESULT

        async def main() -> None:
            async with (
                aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint, num_workers=1) as first,
                aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint, num_workers=1) as second,
            ):
                await first.reset(seed=0)
                await second.reset(seed=1)
                state = await fetch_status(srv.endpoint)
                assert state["clients"] == state["sessions"] == 3  # three connections, one name
                clients = [client for client, _, _, _ in state["pools"]]
                assert len(set(clients)) == 3
                assert all(label == remote.CLIENT_ID for *_, label in state["pools"])

        asyncio.run(main())
    finally:
        squatter.close()
        srv.stop()
    log = "".join(srv.log)
    assert "refused" not in log, log
    assert f"client {remote.CLIENT_ID} " not in log  # a name is never shown as who a client is


def test_with_auth_a_client_is_its_key_and_limits_count_per_key(tmp_path: Path) -> None:
    """alice and bob hold admitted keys and send the same name (one process: its name): each may open 2 pools of
    at most 4 envs in all, bob's pools take nothing from alice's, and refusals name the key that was refused."""
    keys = tmp_path / "keys"
    keygen(keys, "server", "alice", "bob")
    srv = ServerProcess("--auth", str(keys), "--max-pools-per-client", "2", "--max-envs-per-client", "4")
    alice = (str(keys / "alice.key_secret"), str(keys / "server.key"))
    bob = (str(keys / "bob.key_secret"), str(keys / "server.key"))
    try:

        async def main() -> None:
            mine = [await aioenv.make("CartPole-v1", 1, endpoint=srv.endpoint, curve_keys=bob) for _ in range(2)]
            try:
                with pytest.raises(CapacityError, match=r"for client bob: it has 2 open and the server allows 2"):
                    await aioenv.make("CartPole-v1", 1, endpoint=srv.endpoint, curve_keys=bob)
                theirs = [await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=alice)]
                with pytest.raises(CapacityError, match=r"for client alice: it has 2 active and the server allows 4"):
                    await aioenv.make("CartPole-v1", 3, endpoint=srv.endpoint, curve_keys=alice)
                theirs.append(await aioenv.make("CartPole-v1", 2, endpoint=srv.endpoint, curve_keys=alice))
                for pool in mine + theirs:
                    await pool.reset(seed=0)
                state = await fetch_status(srv.endpoint, curve_keys=alice)
                assert state["clients"] == 2
                assert sorted(client for client, *_ in state["pools"]) == ["alice", "alice", "bob", "bob"]
                for pool in theirs:
                    await pool.aclose()
            finally:
                for pool in mine:
                    await pool.aclose()

        asyncio.run(main())
    finally:
        srv.stop()
    refusals = [line for line in srv.log if "refused a pool" in line]
    assert len(refusals) == 2, "".join(srv.log)
    assert "refused a pool for client bob: " in refusals[0]
    assert "refused a pool for client alice: " in refusals[1]


def test_a_name_too_long_or_not_printable_is_refused_by_client_and_server(monkeypatch: pytest.MonkeyPatch) -> None:
    srv = ServerProcess()
    try:
        for label, why in (("n" * 129, "at most 128 characters, got 129"), ("a\tb", "must be printable"), (7, "text")):
            sock, answer = _open_raw(srv.endpoint, label)
            sock.close()
            assert answer[Key.OP] == Op.ERROR
            error = answer[Key.ERROR]
            assert isinstance(error, dict)
            assert error["type"] == "UsageError"
            assert why in error["message"]
        monkeypatch.setattr(remote, "CLIENT_ID", "host\n-1")
        with pytest.raises(aioenv.UsageError, match="a client name must be printable"):
            aioenv.run(aioenv.make("CartPole-v1", 1, endpoint=srv.endpoint))
    finally:
        srv.stop()


# ---------------------------------------------------------------- logs and status show names, never obey them


def test_a_newline_in_a_name_or_an_env_cannot_forge_a_log_line() -> None:
    forged = "2026-01-01 00:00:00,000 aioenv.server WARNING forged"
    srv = ServerProcess("--allow-env", "tests.envs.*")
    try:
        for label, env in ((f"x\n{forged}", "CartPole-v1"), ("x", f"tests.envs.bigenv:make_big\n{forged}")):
            sock, answer = _open_raw(srv.endpoint, label, env=env)
            sock.close()
            assert answer[Key.OP] == Op.ERROR
    finally:
        srv.stop()
    assert not [line for line in srv.log if line.startswith(forged)], "".join(srv.log)
    assert [line for line in srv.log if "refused a pool" in line and "\\n2026-01-01" in line]


def test_markup_and_escape_sequences_in_names_are_shown_as_they_are() -> None:
    """`aioenv status` shows a name of rich markup as text (it used to render it) and a server's escape sequences
    as escapes, never sent to the terminal."""
    srv = ServerProcess()
    sock, answer = _open_raw(srv.endpoint, "[bold red]evil[/]")
    try:
        assert answer[Key.OP] == Op.RESULT
        shown = _cli("status", srv.endpoint)
        assert shown.returncode == 0, shown.stderr
        assert "[bold red]evil[/]" in shown.stdout
    finally:
        sock.close()
        srv.stop()
    console = Console(record=True, width=200, force_terminal=True)
    console.print(_pools_table([["c\x1b[2J", "CartPole-v1\x1b]0;pwned\x07", 1, "[red]x\n"]], 3))
    out = console.export_text()
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "c\\x1b[2J" in out
    assert "CartPole-v1\\x1b]0;pwned\\x07" in out
    assert "[red]x\\n" in out
    assert "3 more not listed" in out


# ---------------------------------------------------------------- worker processes and envs fit the machine


def test_worker_processes_are_capped_per_client_and_in_all() -> None:
    """A pool that asks for 32 worker processes gets the client's cap (the pool works, on fewer); the next pools
    get what is left in all, and one for which nothing is left is refused, naming the flag."""
    srv = ServerProcess("--max-workers", "3", "--max-workers-per-client", "2")
    try:

        async def main() -> None:
            async with aioenv.Pool("CartPole-v1", 32, endpoint=srv.endpoint, num_workers=32) as big:
                await big.reset(seed=0)
                assert len(srv.workers()) == 2
                async with aioenv.Pool("CartPole-v1", 4, endpoint=srv.endpoint, num_workers=4) as small:
                    await small.reset(seed=0)
                    assert len(srv.workers()) == 3
                    state = await fetch_status(srv.endpoint)
                    assert (state["workers"], state["max_workers"], state["max_workers_per_client"]) == (3, 3, 2)
                    with pytest.raises(CapacityError, match=r"hold 3 and the server allows 3 \(aioenv serve --max-wo"):
                        await aioenv.make("CartPole-v1", 1, endpoint=srv.endpoint)
                obs, *_ = await big.step(np.zeros(32, np.int64))
                assert obs.shape == (32, 4)

        asyncio.run(main())
    finally:
        srv.stop()


def test_by_default_envs_and_worker_processes_fit_the_machine() -> None:
    """No flags: a pool asking for 32 worker processes gets 2 per usable core; the envs of all clients are bounded
    by 256 per usable core."""
    srv = ServerProcess()
    cores = usable_cpus()
    try:

        async def main() -> None:
            state = await fetch_status(srv.endpoint)
            assert (state["max_envs"], state["max_workers"], state["max_workers_per_client"]) == (
                256 * cores,
                4 * cores,
                2 * cores,
            )
            with pytest.raises(CapacityError, match=f"the server allows {256 * cores} in all"):
                await aioenv.make("CartPole-v1", 256 * cores + 1, endpoint=srv.endpoint)
            async with aioenv.Pool("CartPole-v1", 32, endpoint=srv.endpoint, num_workers=32) as pool:
                await pool.reset(seed=0)
                assert len(srv.workers()) == min(32, 2 * cores)

        asyncio.run(main())
    finally:
        srv.stop()


async def test_a_silent_client_whose_release_fails_stops_neither_the_others_nor_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The idle-client sweep releases every silent client's pool even when releasing one of them raises (logged),
    and the next sweep is due all the same: an error in one peer's cleanup once ended the sweep for good, so that
    no silent client was ever released again. A server in this process, two real remote pools, both made silent by
    their last heartbeat's time."""
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0", allow=("CartPole-v1",), client_timeout=3600))
    await server.start()
    try:
        async with (
            aioenv.Pool("CartPole-v1", 2, endpoint=server.endpoint, num_workers=1) as first,
            aioenv.Pool("CartPole-v1", 2, endpoint=server.endpoint, num_workers=1) as second,
        ):
            await asyncio.wait_for(first.reset(seed=0), HANG)
            await asyncio.wait_for(second.reset(seed=0), HANG)
            failing, other = server.sessions.values()

            class Refuses:  # what the first client left unread, whose release fails
                unread = 0

                def release(self) -> None:
                    raise RuntimeError("release failed")

            monkeypatch.setattr(failing, "unread", Refuses())
            for session in (failing, other):
                session.last_seen -= 7200
            before = server._reaper
            server._reap()
            assert server.sessions == {}  # both released, the second after the first's failure
            assert server._reaper is not None  # the next sweep is due
            assert server._reaper is not before
            assert "releasing what client" in caplog.text
            assert "release failed" in caplog.text
    finally:
        await server.aclose()


async def test_a_silent_connection_whose_cut_fails_still_stops_counting_what_it_left_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A connection without a pool (here a STATUS asker) is forgotten once silent for the client timeout: its
    connection is cut if it left replies unread, and what it left unread stops counting against the server's
    bounds. A cut that raises is logged, and the release happens all the same."""
    server = Server(ServerConfig(bind="tcp://127.0.0.1:0", allow=("CartPole-v1",), client_timeout=3600))
    await server.start()
    try:
        await fetch_status(server.endpoint)
        (loose,) = server._loose.values()

        class Unread:  # replies it left unread, whose release is recorded
            unread = 1
            released = False

            def release(self) -> None:
                self.released = True

        class Breaks:  # its connection, whose cut fails
            def cut(self) -> bool:
                raise RuntimeError("cut failed")

        unread = Unread()
        loose.unread, loose.socket, loose.last_seen = unread, Breaks(), loose.last_seen - 7200
        server._reap()
        assert server._loose == {}
        assert unread.released
        assert "forgetting a silent connection without a pool failed" in caplog.text
        assert "cut failed" in caplog.text
    finally:
        await server.aclose()

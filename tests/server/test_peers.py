"""The bookkeeping behind a server's bounds per client (pure logic; the bounds at work on real servers are
in test_peer_bounds.py)."""

from __future__ import annotations

import logging
import os
import sys

import pytest

from aioenv.cli.main import byte_size
from aioenv.errors import UsageError
from aioenv.logs import LineFormatter, peer_name, printable
from aioenv.server import peers
from aioenv.server.peers import NONCE_BLOCK, RECENT, DroppedPeers, Nonces, PeerLimits, Tally, Unread


def _sent(unread: Unread, nbytes: int) -> int:
    """Send a message of ``nbytes`` with a new mark, as the server does; returns the mark."""
    nonce = unread.mark()
    unread.add(nbytes, nonce)
    return nonce


def test_every_message_carries_a_mark_of_its_own() -> None:
    unread = Unread(100, Tally())
    marks = {_sent(unread, 10) for _ in range(50)}
    assert len(marks) == 50
    assert all(m > 0 for m in marks)


def test_marks_are_cut_from_the_kernels_random_bytes_a_block_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``os.urandom`` call per 512 marks, not one per mark (a server marks every message), every one of the
    block's bytes used once, every mark in range and of its kept flag's parity."""
    drawn: list[bytes] = []
    real = os.urandom

    def urandom(n: int) -> bytes:
        drawn.append(real(n))
        return drawn[-1]

    monkeypatch.setattr(peers.os, "urandom", urandom)
    nonces = Nonces()
    unread = Unread(100, Tally(), nonces)
    marks = [_sent(unread, 60) for _ in range(3 * NONCE_BLOCK // 8 + 1)]
    assert [len(block) for block in drawn] == [NONCE_BLOCK] * 4
    words = [int.from_bytes(b[i : i + 8], "little") >> 3 for b in drawn for i in range(0, NONCE_BLOCK, 8)]
    assert [m >> 1 for m in marks] == [w + 1 for w in words[: len(marks)]]
    assert all(0 < m >> 1 <= 2**61 for m in marks)
    assert [m & 1 for m in marks[:4]] == [0, 0, 1, 0]  # kept every 100 bytes: after the 2nd, the 4th, ...
    assert len(set(marks)) == len(marks)
    assert 0 <= nonces.draw() < 2**61


def test_the_newest_mark_counts_everything_sent_as_read() -> None:
    """A client in lock-step acknowledges the mark of the last message it read: nothing is left unread,
    however small the messages were (none was a kept mark)."""
    tally = Tally()
    unread = Unread(100, tally)
    _sent(unread, 30)
    last = _sent(unread, 30)
    assert unread.unread == tally.total == 60
    unread.ack(last)
    assert unread.unread == tally.total == 0


def test_kept_marks_are_odd_and_spaced_and_the_ones_between_count_for_nothing_once_superseded() -> None:
    tally = Tally()
    unread = Unread(100, tally)
    first = _sent(unread, 150)  # nothing was sent before it: not kept
    kept = _sent(unread, 30)  # 150 sent since the last kept one: kept
    between = _sent(unread, 3)  # among the newest for a while, then superseded by RECENT more
    for _ in range(RECENT):
        _sent(unread, 1)
    assert (first & 1, kept & 1, between & 1) == (0, 1, 0)
    total = 150 + 30 + 3 + RECENT
    for superseded in (first, between):
        unread.ack(superseded)  # no longer remembered: counts for nothing (never trusted, only not rewarded)
        assert unread.unread == total
    unread.ack(kept)
    assert unread.unread == tally.total == 3 + RECENT
    unread.ack(kept)  # already passed: changes nothing
    assert unread.unread == 3 + RECENT


def test_a_reply_followed_by_a_small_message_still_counts_when_acknowledged() -> None:
    """A client in lock-step reads its reply and sends its next request before it reads the PONG the server sent
    after the reply (to a heartbeat of its own): the reply's mark, no longer the newest, still counts, so the
    client is charged for the PONG alone, not for a reply it read."""
    tally = Tally()
    unread = Unread(1 << 20, tally)
    reply = _sent(unread, 226_006)
    _sent(unread, 40)  # the PONG
    unread.ack(reply)
    assert unread.unread == tally.total == 40
    unread.ack(reply)  # again: nothing changes
    assert unread.unread == 40


def test_an_acknowledgement_never_takes_back_credit_given() -> None:
    unread = Unread(1 << 20, Tally())
    older, newer = _sent(unread, 10), _sent(unread, 20)
    _sent(unread, 30)
    unread.ack(newer)
    unread.ack(older)  # read long ago: the count does not go back up
    assert unread.unread == 30


def test_a_reader_that_lags_behind_gets_credit_up_to_its_last_kept_mark() -> None:
    """A client that pipelines reads message after message while the server sends more: the last mark it read
    is rarely still the newest, but its last kept mark is never more than an eighth of the bound behind."""
    unread = Unread(100, Tally())
    marks = [(_sent(unread, 7), unread.sent) for _ in range(1000)]
    read = 900  # the client has read 900 of the 1000 messages
    last = marks[read - 1][0]
    kept, kept_at = next((m, at) for m, at in reversed(marks[:read]) if m & 1)
    unread.ack(kept)
    unread.ack(last)  # superseded by newer ones: nothing more
    assert unread.unread == unread.sent - kept_at
    assert marks[read - 1][1] - kept_at < 100 + 7


def test_marks_kept_are_bounded_by_the_bytes_unread() -> None:
    unread = Unread(100, Tally())
    for _ in range(10_000):
        _sent(unread, 7)
    assert len(unread._kept) <= unread.unread // 100 + 1


def test_a_nonce_the_server_never_sent_counts_for_nothing() -> None:
    unread = Unread(100, Tally())
    mark = _sent(unread, 500)
    for guess in (0, 1, 2, mark + 1, -mark):
        unread.ack(guess)
        assert unread.unread == 500


def test_the_tally_sums_every_peer_and_forgets_a_released_one() -> None:
    tally = Tally()
    a, b = Unread(100, tally), Unread(100, tally)
    _sent(a, 300)
    last = _sent(b, 40)
    assert tally.total == 340
    b.ack(last)
    assert tally.total == 300
    a.release()
    a.release()
    assert tally.total == 0


def test_a_dropped_peer_is_reported_once_and_the_memory_is_bounded() -> None:
    dropped = DroppedPeers(keep=2)
    assert dropped.add(b"a", "why a")
    assert not dropped.add(b"a", "again")
    assert dropped.why(b"a") == "why a"
    assert dropped.add(b"b", "why b")
    assert dropped.add(b"c", "why c")
    assert dropped.why(b"a") is None  # the oldest is forgotten
    assert (dropped.why(b"b"), dropped.why(b"c")) == ("why b", "why c")


@pytest.mark.parametrize("field", ["max_message_bytes", "max_queued", "max_unread_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_limits_must_be_positive_ints(field: str, value: object) -> None:
    with pytest.raises(UsageError, match=f"{field} must be a positive int, got {value!r}"):
        PeerLimits(**{field: value})  # type: ignore[arg-type]


def test_the_default_mark_interval_is_an_eighth_of_the_unread_bound() -> None:
    limits = PeerLimits()
    assert limits.mark_every * 8 == limits.max_unread_bytes == 512 << 20


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("268435456", 268435456),
        ("256MiB", 256 << 20),
        ("256M", 256 << 20),
        ("256mb", 256_000_000),
        ("1 GiB", 1 << 30),
        ("3K", 3072),
        ("3KB", 3000),
    ],
)
def test_sizes_on_the_command_line(text: str, size: int) -> None:
    assert byte_size(None, None, text) == size  # type: ignore[arg-type]


def test_a_peer_is_named_readably_in_logs() -> None:
    assert peer_name(b"host-42-abc") == "host-42-abc"
    assert peer_name(b"\x00k\x8bEg") == "0x006b8b4567"


def test_a_log_line_shows_control_characters_as_escapes() -> None:
    """Whatever a message carries (a peer's name, an env's, an error's text), a record is one line: a newline cannot
    start a forged line, an escape sequence never reaches the terminal; a traceback still follows on its own lines."""
    formatter = LineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord(
        "aioenv.server", logging.INFO, __file__, 1, "client %s opened", ("x\nWARNING forged",), None
    )
    assert formatter.format(record) == "INFO client x\\nWARNING forged opened"
    record = logging.LogRecord("aioenv.server", logging.INFO, __file__, 1, "env %s", ("\x1b[2J\x07\t",), None)
    assert formatter.format(record) == "INFO env \\x1b[2J\\x07\\t"
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("aioenv.server", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    first, *rest = formatter.format(record).splitlines()
    assert first == "ERROR failed"
    assert rest[0] == "Traceback (most recent call last):"
    assert printable("plain text, é and 日本") == "plain text, é and 日本"

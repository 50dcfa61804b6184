"""The bookkeeping behind a server's bounds per client (pure logic; the bounds at work on real servers are
in test_peer_bounds.py)."""

from __future__ import annotations

import pytest

from aioenv.cli.main import byte_size
from aioenv.errors import UsageError
from aioenv.logs import peer_name
from aioenv.server.peers import DroppedPeers, PeerLimits, Unread


def test_a_mark_is_due_every_mark_every_bytes() -> None:
    unread = Unread(100)
    assert unread.add(60) is None
    first = unread.add(60)  # 120 sent: past the first 100
    assert isinstance(first, int)
    assert first > 0
    assert unread.add(90) is None  # the next is due at 220
    second = unread.add(10)
    assert isinstance(second, int)
    assert second != first
    assert unread.unread == unread.sent == 220


def test_an_acknowledged_mark_counts_everything_sent_before_it_as_read() -> None:
    unread = Unread(100)
    first = unread.add(150)
    second = unread.add(100)
    unread.add(30)
    assert first is not None
    assert second is not None
    unread.ack(first)
    assert unread.unread == 130  # sent after the first mark
    unread.ack(second)
    assert unread.unread == 30
    unread.ack(first)  # an old mark, already passed: changes nothing
    assert unread.unread == 30


def test_a_nonce_the_server_never_sent_counts_for_nothing() -> None:
    unread = Unread(100)
    mark = unread.add(500)
    assert mark is not None
    for guess in (0, 1, 2, mark + 1, -mark):
        unread.ack(guess)
        assert unread.unread == 500


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

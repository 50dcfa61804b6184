"""Placement of worker processes on hosts: pure bookkeeping, no sockets (:mod:`aioenv.core.placement`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioenv.core.placement import LOCAL, Placement
from aioenv.errors import CapacityError


def test_least_loaded_host_with_room_wins() -> None:
    p = Placement()
    p.add("a", 8)
    p.add("b", 16)
    assert p.choose(4, "inline").name == "b"  # 4/16 beats 4/8
    assert p.choose(4, "inline").name == "a"  # 4/8 ties 8/16: by name
    assert p.choose(4, "inline").name == "b"  # 8/8 loses to 12/16: a 4, b 8
    assert (p.hosts["a"].load, p.hosts["b"].load) == (4, 8)
    with pytest.raises(CapacityError, match=r"room for 9 more inline envs: hosts: a 4/8 envs .*b 8/16"):
        p.choose(9, "inline")
    assert (p.hosts["a"].load, p.hosts["b"].load) == (4, 8)  # a refusal reserves nothing


def test_executors_must_match_and_unlimited_local_is_the_last_resort() -> None:
    p = Placement()
    p.add(LOCAL, None)
    p.add("llm", 100, "async")
    p.add("sim", 4, "inline")
    assert p.choose(50, "async").name == "llm"
    assert p.choose(4, "inline").name == "sim"
    assert p.choose(1, "inline").name == LOCAL  # sim is full: the server's machine takes it
    assert p.choose(60, "async").name == LOCAL
    assert p.choose(3, "thread").name == LOCAL  # no host serves thread
    p.remove(LOCAL)
    assert p.serves("async")
    assert not p.serves("thread")
    with pytest.raises(CapacityError, match="no worker host runs thread envs: hosts: llm 50/100"):
        p.choose(3, "thread")
    with pytest.raises(CapacityError, match="no worker host has room for 51 more async envs"):
        p.choose(51, "async")


def test_a_bounded_local_host_competes_like_the_others() -> None:
    p = Placement()
    p.add(LOCAL, 10)
    p.add("w", 10)
    assert p.choose(5, "inline").name == "w"  # a tie goes to the remote host
    assert p.choose(5, "inline").name == LOCAL


def test_release_and_leaving_hosts() -> None:
    p = Placement()
    p.add("a", 4)
    p.choose(4, "inline")
    p.release("a", 4)
    assert p.hosts["a"].load == 0
    p.remove("a")
    p.release("a", 4)  # a host that left is ignored
    with pytest.raises(CapacityError, match="no worker host is connected"):
        p.choose(1, "inline")
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        p.add("bad", -1)


@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=5),
    st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=60),
)
def test_loads_never_exceed_capacity_and_add_up(capacities: list[int], ops: list[tuple[bool, int]]) -> None:
    p = Placement()
    for i, cap in enumerate(capacities):
        p.add(f"h{i}", cap)
    placed: list[tuple[str, int]] = []
    for take, n in ops:
        if take or not placed:
            free = [h for h in p.hosts.values() if h.fits(n, "inline")]
            best = min(((h.load + n) / h.capacity for h in free if h.capacity), default=None)
            try:
                host = p.choose(n, "inline")
            except CapacityError:
                assert not free
                continue
            assert host.load / host.capacity == pytest.approx(best)  # type: ignore[operator]
            placed.append((host.name, n))
        else:
            name, k = placed.pop(n % len(placed))
            p.release(name, k)
        for h in p.hosts.values():
            assert 0 <= h.load <= h.capacity  # type: ignore[operator]
            assert h.load == sum(k for name, k in placed if name == h.name)

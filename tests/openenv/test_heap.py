"""The HTTP port's collector (:class:`aioenv.openenv.heap.LongLived`): what survives a tick is left out of later
collections, cyclic garbage is still freed (young at the next tick, frozen at the next whole collection), and
closing gives every frozen object back; a real port (its pool in a worker process) runs it while it serves. Real
objects and CPython's own collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from aioenv.openenv.heap import LongLived
from aioenv.openenv.serve import HttpConfig, HttpPort


class Node:
    """A cyclic-garbage-capable object (weakly referable, so that a test sees when it is freed)."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[list[Node], weakref.ref[Node]]:
    """Two nodes that refer to each other (freed only by the cyclic collector), held by the list returned."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return [a, b], weakref.ref(a)


def frozen(obj: object) -> bool:
    """Whether ``obj`` is in the permanent generation (tracked, yet in no generation the collector walks)."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


@pytest.fixture
def heap() -> Iterator[LongLived]:
    heap = LongLived(floor=10)
    heap.whole()
    try:
        yield heap
    finally:
        heap.close()
    assert gc.get_freeze_count() == 0


def test_what_survives_a_tick_is_frozen_and_young_cycles_are_still_collected(heap: LongLived) -> None:
    held, _ = cycle()
    dropped, gone = cycle()
    del dropped
    heap.tick()
    assert gone() is None  # the young cycle was collected before the freeze
    assert frozen(held[0])
    later = Node()
    assert not frozen(later)  # made after the tick: walked by the collector until the next one


def test_a_frozen_cycle_is_freed_at_the_next_whole_collection(heap: LongLived) -> None:
    held, gone = cycle()
    heap.tick()
    assert frozen(held[0])
    del held
    gc.collect()
    assert gone() is not None  # a cycle among frozen objects: no plain collection walks it
    heap.whole()
    assert gone() is None


def test_a_whole_collection_comes_once_the_frozen_objects_have_grown_enough(heap: LongLived) -> None:
    held, gone = cycle()
    heap.tick()
    del held
    wholes = heap.wholes
    heap.growth = 1.1
    grown = [[Node()] for _ in range(heap.kept // 10 + 1000)]  # frozen at the next tick
    heap.tick()
    assert heap.wholes == wholes + 1
    assert gone() is None
    assert heap.kept >= len(grown)


def test_a_tick_does_no_whole_collection_while_the_frozen_objects_have_not_grown(heap: LongLived) -> None:
    heap.floor = 10**9
    wholes = heap.wholes
    held = [[Node()] for _ in range(1000)]
    for _ in range(3):
        heap.tick()
    assert heap.wholes == wholes
    assert frozen(held[0])


def test_close_gives_every_frozen_object_back() -> None:
    heap = LongLived()
    heap.whole()
    held, gone = cycle()
    heap.tick()
    assert gc.get_freeze_count() > 0
    heap.close()
    assert gc.get_freeze_count() == 0
    assert not frozen(held[0])
    del held
    gc.collect()
    assert gone() is None


async def test_a_serving_port_keeps_what_lived_out_of_collections_and_gives_it_back_when_closed() -> None:
    port = HttpPort(HttpConfig(bind="127.0.0.1:0", envs={"CartPole-v1": 2}))
    await port.start()
    try:
        assert gc.get_freeze_count() > 0  # the pool and the app, frozen when the port started
        assert frozen(port.shelves["CartPole-v1"].pool)
    finally:
        await port.aclose()
    assert gc.get_freeze_count() == 0

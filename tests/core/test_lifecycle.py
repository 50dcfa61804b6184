"""Every lifecycle table, walked pair by pair: each allowed transition is taken, each other one refused.

The objects that hold these tables (pool, coordinators, server, worker slot) have their own tests of which
public call takes which transition; here the tables themselves are pinned, so a transition added or removed
is a visible change.
"""

from __future__ import annotations

import enum
import itertools

import pytest

from aioenv.core.lifecycle import COORDINATOR, POOL, REMOTE, SERVER, InvalidTransition, Lifecycle, Phase, Transitions
from aioenv.core.recovery import SLOT, SlotState

TABLES: dict[str, tuple[type[enum.Enum], Transitions[enum.Enum]]] = {
    "pool": (Phase, POOL),  # type: ignore[dict-item]
    "coordinator": (Phase, COORDINATOR),  # type: ignore[dict-item]
    "remote": (Phase, REMOTE),  # type: ignore[dict-item]
    "server": (Phase, SERVER),  # type: ignore[dict-item]
    "worker slot": (SlotState, SLOT),  # type: ignore[dict-item]
}


def _pairs() -> list[tuple[str, enum.Enum, enum.Enum]]:
    return [(name, a, b) for name, (states, _) in TABLES.items() for a, b in itertools.product(list(states), repeat=2)]


@pytest.mark.parametrize(("table", "start", "to"), _pairs())
def test_each_transition_is_taken_or_refused_as_the_table_says(table: str, start: enum.Enum, to: enum.Enum) -> None:
    allowed = TABLES[table][1]
    life = Lifecycle(table, start, allowed)
    if to in allowed.get(start, frozenset()):
        assert life.can(to)
        assert life.move(to) is start
        assert life.state is to
    else:
        assert not life.can(to)
        with pytest.raises(InvalidTransition, match=f"the {table} cannot go from {start.name} to {to.name}"):
            life.move(to)
        assert life.state is start  # a refused move changes nothing


def test_the_pool_lifecycles_say_what_the_docs_say() -> None:
    """The paths the docs promise: start, run, close; a close before the start or of a failed start; closed
    is final; a remote pool may lose its server and is then only closed."""
    for table in (POOL, COORDINATOR, REMOTE, SERVER):
        for path in (
            [Phase.STARTING, Phase.RUNNING, Phase.CLOSING, Phase.CLOSED],
            [Phase.CLOSING, Phase.CLOSED],
            [Phase.STARTING, Phase.CLOSING, Phase.CLOSED],
        ):
            life = Lifecycle("x", Phase.NEW, table)
            for state in path:
                life.move(state)
        assert table.get(Phase.CLOSED, frozenset()) == frozenset()
        assert Phase.NEW not in set().union(*table.values())  # nothing goes back to the start
    life = Lifecycle("remote", Phase.NEW, REMOTE)
    for state in (Phase.STARTING, Phase.RUNNING, Phase.LOST, Phase.CLOSING, Phase.CLOSED):
        life.move(state)
    assert Phase.LOST not in set().union(*POOL.values())


def test_a_worker_slot_lives_as_the_recovery_docs_say() -> None:
    """A slot's paths: started, ready, its worker lost and started again (also before its HELLO); recycled
    once idle; given up for good or until a host has room, then started again; closed from any state. Nothing
    comes back to EMPTY, nothing leaves CLOSED, and a slot given up for good is never started again."""
    s = SlotState
    for path in (
        [s.STARTING, s.READY, s.LOST, s.STARTING, s.READY, s.CLOSED],
        [s.STARTING, s.LOST, s.STARTING, s.LOST, s.GIVEN_UP, s.CLOSED],
        [s.STARTING, s.READY, s.DRAINING, s.LOST, s.STARTING, s.READY],
        [s.STARTING, s.READY, s.LOST, s.WAITING_FOR_ROOM, s.STARTING, s.READY],
        [s.READY, s.CLOSED],  # a worker taken over that said HELLO already
        [s.CLOSED],  # a pool closed while its first worker could not be launched
    ):
        life = Lifecycle("worker slot", s.EMPTY, SLOT)
        for state in path:
            life.move(state)
    assert SLOT.get(s.CLOSED, frozenset()) == frozenset()
    assert s.EMPTY not in set().union(*SLOT.values())
    assert all(s.CLOSED in SLOT[state] for state in s if state is not s.CLOSED)
    assert SLOT[s.GIVEN_UP] == {s.CLOSED}
    assert s.DRAINING not in SLOT[s.STARTING]  # only a worker that said HELLO is drained

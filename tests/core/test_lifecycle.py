"""Every lifecycle table, walked pair by pair: each allowed transition is taken, each other one refused.

The objects that hold these tables (pool, coordinators, server, worker slot) have their own tests of which
public call takes which transition; here the tables themselves are pinned, so a transition added or removed
is a visible change.
"""

from __future__ import annotations

import enum
import itertools

import pytest

from aioenv.core.lifecycle import COORDINATOR, POOL, REMOTE, InvalidTransition, Lifecycle, Phase, Transitions

TABLES: dict[str, tuple[type[enum.Enum], Transitions[enum.Enum]]] = {
    "pool": (Phase, POOL),  # type: ignore[dict-item]
    "coordinator": (Phase, COORDINATOR),  # type: ignore[dict-item]
    "remote": (Phase, REMOTE),  # type: ignore[dict-item]
}


def _pairs() -> list[tuple[str, enum.Enum, enum.Enum]]:
    return [
        (name, a, b)
        for name, (states, _) in TABLES.items()
        for a, b in itertools.product(list(states), repeat=2)
    ]


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
    for table in (POOL, COORDINATOR, REMOTE):
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

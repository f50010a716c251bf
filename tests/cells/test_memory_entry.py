"""A Cell API commit on a MemoryStore offered as a run log entry (`commit_entry`).

A commit made outside a batch that reads one place and writes one top-level field
(what `Cell.set` inside `with_tx` after a `get` makes) is handed to the store with
no request: the store accepts it at once when it surely would, answered by
`Replica.accept_entry`, and declines it, having changed nothing, when a gate holds
verdicts, an evaluation is hooked, or a check must go to the general path. These
tests pin both sides: the entry is taken when it should be, and every decline ends
exactly as the request would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from cells import (
    ConflictError,
    DocKey,
    Identity,
    MemoryStore,
    Outcome,
    Pending,
    Replica,
)
from cells._store import CommitRequest, Verdict

ME = Identity("local", "local")
X = DocKey("sp", "x")
Y = DocKey("sp", "y")


class World:
    """Replicas `a` and `b` on one MemoryStore holding X = 1 and Y = 0 (as cells:
    {"value": ...}); every `commit_entry` answer is recorded in `taken`."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store if store is not None else MemoryStore()
        self.taken: list[bool] = []
        offer = self.store.commit_entry

        def recorded(listener: Any, session_id: str, entry: tuple[Any, ...]) -> bool:
            got = offer(listener, session_id, entry)
            self.taken.append(got)
            return got

        self.store.commit_entry = recorded  # type: ignore[method-assign]
        self.a = Replica(self.store)
        self.b = Replica(self.store)
        tx = self.a.edit(ME)
        tx.write(X, (), {"value": 1})
        tx.write(Y, (), {"value": 0})
        done = tx.commit()
        self.pump()
        assert done.result().ok
        self.b.sync([X, Y]).wait()
        self.taken.clear()

    def pump(self) -> None:
        while self.a.pump() + self.b.pump():
            pass

    def usual(self, r: Replica, add: int) -> Pending[Any]:
        """Read X, write Y = X + add, commit: the Cell API's usual commit."""
        tx = r.edit(ME)
        v = tx.read(X, ("value",))
        tx.write(Y, ("value",), v + add)
        return tx.commit()


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.store._check()
    world.a._check()
    world.b._check()


def test_a_usual_commit_is_taken_as_an_entry_and_reaches_every_holder(w: World) -> None:
    pending = w.usual(w.a, 10)
    assert w.taken == [True]
    assert not pending.done()  # the verdict arrives on the mailbox, never inside commit
    w.pump()
    result = pending.result()
    assert result.ok and result.seq == w.store.seq
    assert w.store.read_durable(Y) == {"value": 11}
    assert w.a.visible(Y) == {"value": 11} and w.a.in_flight() == 0
    assert w.b.visible(Y) == {"value": 11}  # the other holder heard it
    assert w.a.stats.accepted >= 2


def test_a_held_verdict_gate_declines_the_entry_and_holds_its_request(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        pending = w.usual(w.a, 10)
        assert w.taken == [False]
        assert gate.waiting() == 1
        w.pump()
        assert not pending.done()
        assert w.store.read_durable(Y) == {"value": 0}
        assert w.a.visible(Y) == {"value": 11}  # applied locally, pending
        gate.accept(0)
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(Y) == {"value": 11}


def test_a_read_overwritten_since_its_basis_is_rejected_as_a_conflict(w: World) -> None:
    tx = w.a.edit(ME)
    v = tx.read(X, ("value",))
    other = w.b.edit(ME)
    other.write(X, ("value",), 5)
    assert other.commit().wait().ok
    tx.write(Y, ("value",), v + 10)
    pending = tx.commit()
    assert w.taken == [False]  # declined: the general path decides it
    w.pump()
    result = pending.result()
    assert result.outcome is Outcome.STALE_BASIS and isinstance(result.error, ConflictError)
    assert w.store.read_durable(Y) == {"value": 0}
    assert w.a.visible(Y) == {"value": 0}


def test_a_commit_built_on_a_rejected_commit_is_rejected(w: World) -> None:
    # First: a commit of `a` rejected by a conflict (decided at once, its verdict not
    # delivered yet). Then a commit that read its pending write of Y.
    tx = w.a.edit(ME)
    v = tx.read(X, ("value",))
    other = w.b.edit(ME)
    other.write(X, ("value",), 5)
    assert other.commit().wait().ok  # (a has not integrated it: its mailbox waits)
    tx.write(Y, ("value",), v + 10)
    first = tx.commit()
    second_tx = w.a.edit(ME)
    y = second_tx.read(Y, ("value",))
    assert y == 11  # the first commit's pending layer
    second_tx.write(X, ("value",), y + 1)
    second = second_tx.commit()
    assert w.taken == [False, False]
    w.pump()
    assert first.result().outcome is Outcome.STALE_BASIS
    assert not second.result().ok
    assert w.store.read_durable(X) == {"value": 5}
    assert w.a.visible(X) == {"value": 5} and w.a.visible(Y) == {"value": 0}


def test_a_hooked_evaluation_sees_every_entry_as_its_request() -> None:
    seen: list[CommitRequest] = []

    class Counting(MemoryStore):
        def _evaluate(self, request: CommitRequest) -> Verdict:
            seen.append(request)
            return super()._evaluate(request)

    world = World(Counting())
    seen.clear()
    pending = world.usual(world.a, 10)
    assert world.taken == [False]
    assert [(r.reads[0].key, r.writes[0].key, r.writes[0].value) for r in seen] == [(X, Y, 11)]
    world.pump()
    assert pending.result().ok
    assert world.store.read_durable(Y) == {"value": 11}


def test_an_awaited_entry_commit_wakes_its_waiter() -> None:
    world = World()

    async def main() -> Any:
        return await world.usual(world.a, 3)

    result = asyncio.run(main())
    assert world.taken == [True]
    assert result.ok and world.a.visible(Y) == {"value": 4}

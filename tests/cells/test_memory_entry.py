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
    Link,
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
    # `b`'s plain write was taken (`Replica._commit_write`); this one is declined: the
    # general path decides it.
    assert w.taken == [True, False]
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
    assert w.taken == [True, False, False]  # (`b`'s plain write taken, as above)
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


# A user's plain write (`Replica._commit_write`): one document written once at one path,
# not read, any other document only read (the links the write followed).

L = DocKey("sp", "l")
T = DocKey("sp", "t")


def _put(w: World, key: DocKey, doc: dict[str, Any]) -> None:
    """Write `doc` whole from `a` (created: the general path), integrated by both."""
    tx = w.a.edit(ME)
    tx.write(key, (), doc)
    done = tx.commit()
    w.pump()
    assert done.result().ok
    w.b.sync([key]).wait()
    w.taken.clear()


def test_a_plain_write_of_a_list_element_is_taken_and_recorded_at_its_path(w: World) -> None:
    _put(w, L, {"value": [1, 2, 3]})
    near = w.b.edit(ME)  # reads element 0: the write of element 1 is no conflict
    assert near.read(L, ("value", 0)) == 1
    far = w.b.edit(ME)  # reads element 1: it is
    assert far.read(L, ("value", 1)) == 2
    tx = w.a.edit(ME)
    tx.write(L, ("value", 1), 20)
    pending = tx.commit()
    assert w.taken == [True]
    assert not pending.done()  # the verdict arrives on the mailbox, never inside commit
    near.write(X, ("value",), 7)  # (`b` has not integrated it: its mailbox waits)
    far.write(Y, ("value",), 7)
    near_done, far_done = near.commit(), far.commit()
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(L) == {"value": [1, 20, 3]}
    assert w.a.visible(L) == {"value": [1, 20, 3]} == w.b.visible(L)
    assert near_done.result().ok
    assert isinstance(far_done.result().error, ConflictError)


def test_a_write_that_creates_a_level_goes_as_its_request(w: World) -> None:
    # The store records the created level ("meta"), so a shallow read of the document's
    # key set conflicts with it: `_commit_write` leaves that to the general path.
    tx = w.a.edit(ME)
    tx.write(X, ("meta", "a"), 1)
    pending = tx.commit()
    assert w.taken == []
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(X) == {"value": 1, "meta": {"a": 1}}


def test_a_write_that_changes_a_lists_length_goes_as_its_request(w: World) -> None:
    _put(w, L, {"value": [1, 2, 3]})
    tx = w.a.edit(ME)
    tx.write(L, ("value", 3), 4)  # an append: the layer carries the whole list
    pending = tx.commit()
    assert w.taken == []
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(L) == {"value": [1, 2, 3, 4]} == w.b.visible(L)


def test_a_write_of_an_equal_value_is_elided_as_before(w: World) -> None:
    _put(w, L, {"value": [1, 2, 3]})
    sent = w.a.stats.commits_sent
    tx = w.a.edit(ME)
    tx.write(L, ("value", 1), 2)
    assert tx.commit().result().ok
    assert w.taken == [] and w.a.stats.commits_sent == sent


def test_a_write_through_a_moved_link_is_rejected_as_a_conflict(w: World) -> None:
    # `a` follows L's link (a shallow read of its place) and writes the field it leads
    # to; `b` re-points the link meanwhile: the entry's read claim fails at the store.
    _put(w, T, {"value": {"title": "a"}})
    _put(w, L, {"value": [Link("sp", "t")]})
    tx = w.a.edit(ME)
    assert type(tx.read(L, ("value", 0), shallow=True)) is Link
    tx.write(T, ("value", "title"), "b")
    other = w.b.edit(ME)
    other.write(L, ("value", 0), Link("sp", "z"))
    assert other.commit().wait().ok  # (a has not integrated it: its mailbox waits)
    pending = tx.commit()
    assert w.taken == [True, False]  # `b`'s plain write taken; `a`'s read claim declined
    w.pump()
    result = pending.result()
    assert result.outcome is Outcome.STALE_BASIS and isinstance(result.error, ConflictError)
    assert w.store.read_durable(T) == {"value": {"title": "a"}} == w.a.visible(T)


def test_a_write_through_a_link_is_taken_with_its_read_claim(w: World) -> None:
    _put(w, T, {"value": {"title": "a"}})
    _put(w, L, {"value": [Link("sp", "t")]})
    tx = w.a.edit(ME)
    tx.read(L, ("value", 0), shallow=True)
    tx.write(T, ("value", "title"), "b")
    pending = tx.commit()
    assert w.taken == [True]
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(T) == {"value": {"title": "b"}} == w.b.visible(T)

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
    Cell,
    ConflictError,
    DocKey,
    Identity,
    InvalidValueError,
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


# `Cell.set` of a path with no transaction (`Replica.write_at`): the same commit,
# read claims, verdicts and declines as the transaction's `_commit_write`.


def _cell(w: World, key: DocKey, *path: str | int) -> Cell:
    return Cell(w.a, ME, Link(key.space, key.id, path=path))


def _no_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make opening a transaction on any replica fail: the write must not need one."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a transaction was opened")

    monkeypatch.setattr(Replica, "_open_tx", refuse)


def test_a_cell_set_through_a_link_commits_with_no_transaction_and_its_claim(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(w, T, {"value": {"title": "a", "body": "x"}})
    _put(w, L, {"value": [Link("sp", "t")]})
    _no_transaction(monkeypatch)
    pending = _cell(w, L, 0, "title").set("b")
    assert w.taken == [True]
    assert w.a.visible(T) == {"value": {"title": "b", "body": "x"}}  # applied at once
    assert not pending.done()
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(T) == {"value": {"title": "b", "body": "x"}} == w.b.visible(T)
    assert w.store.read_durable(L) == {"value": [Link("sp", "t")]}


def test_a_cell_set_through_a_moved_link_is_rejected_as_a_conflict(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `b` re-points L's link; `a` has not integrated it and writes through the old one:
    # the read claim on the link's place fails at the store, and `a` reverts.
    _put(w, T, {"value": {"title": "a"}})
    _put(w, L, {"value": [Link("sp", "t")]})
    other = w.b.edit(ME)
    other.write(L, ("value", 0), Link("sp", "z"))
    assert other.commit().wait().ok  # (a has not integrated it: its mailbox waits)
    _no_transaction(monkeypatch)
    pending = _cell(w, L, 0, "title").set("b")
    assert w.taken == [True, False]  # `b`'s plain write taken; `a`'s read claim declined
    w.pump()
    result = pending.result()
    assert result.outcome is Outcome.STALE_BASIS and isinstance(result.error, ConflictError)
    assert w.store.read_durable(T) == {"value": {"title": "a"}} == w.a.visible(T)


def test_a_cell_set_through_a_link_built_on_its_own_pending_commit_is_accepted(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `a` re-points L's link and, before that commit's verdict, writes through the new
    # link: the read claim's basis is older than `a`'s own commit of the link, which
    # the entry names as a commit it builds on (its deps), so the store accepts it.
    _put(w, T, {"value": {"title": "a"}})
    _put(w, Y, {"value": {"title": "y"}})
    _put(w, L, {"value": [Link("sp", "t")]})
    repoint = _cell(w, L, 0).set(Link("sp", "y"))  # (a link at the cell: replaced)
    assert not repoint.done()
    _no_transaction(monkeypatch)
    pending = _cell(w, L, 0, "title").set("b")
    w.pump()
    assert repoint.result().ok and pending.result().ok
    assert w.store.read_durable(Y) == {"value": {"title": "b"}} == w.b.visible(Y)
    assert w.store.read_durable(T) == {"value": {"title": "a"}}


def test_a_cell_set_at_a_link_replaces_the_link(w: World) -> None:
    _put(w, T, {"value": {"title": "a"}})
    _put(w, L, {"value": [Link("sp", "t"), 2]})
    pending = _cell(w, L, 0).set(5)
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(L) == {"value": [5, 2]}
    assert w.store.read_durable(T) == {"value": {"title": "a"}}


def test_a_cell_set_of_another_shape_goes_through_a_transaction_as_before(w: World) -> None:
    _put(w, L, {"value": [1, {"a": 1}, 3]})
    sent = w.a.stats.commits_sent
    assert _cell(w, L, 0).set(1).result().ok  # an equal value: elided
    assert w.a.stats.commits_sent == sent and w.taken == []
    created = _cell(w, L, 1, "b", "c").set(2)  # a level made ("b"): a request
    changed = _cell(w, L, 3).set(4)  # the list's length: a request
    assert w.taken == []
    w.pump()
    assert created.result().ok and changed.result().ok
    assert w.store.read_durable(L) == {"value": [1, {"a": 1, "b": {"c": 2}}, 3, 4]}
    with pytest.raises(InvalidValueError):
        _cell(w, L, 0).set(float("nan"))  # refused as before, nothing changed
    with pytest.raises(InvalidValueError):
        _cell(w, L, 0).set({1: 2})
    assert w.a.visible(L) == {"value": [1, {"a": 1, "b": {"c": 2}}, 3, 4]}
    w.pump()


def test_a_cell_set_compares_with_the_value_its_walk_reached(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `write_at` compares the new value with the one its walk to the place reached (no
    # second walk of both documents): an equal scalar or container is elided by the
    # transaction, a moved one commits with none; a new field of a dict that is there
    # is a plain write too.
    _put(w, L, {"value": [{"a": 1, "d": {"x": [1]}}, "s"]})
    sent = w.a.stats.commits_sent
    equal = [
        _cell(w, L, 0, "a").set(1),
        _cell(w, L, 0, "d").set({"x": [1]}),
        _cell(w, L, 1).set("s"),
    ]
    assert all(p.result().ok for p in equal)
    assert w.a.stats.commits_sent == sent and w.taken == []
    _no_transaction(monkeypatch)
    moved = [
        _cell(w, L, 0, "a").set(True),
        _cell(w, L, 0, "d").set({"x": [2]}),
        _cell(w, L, 1).set("t"),
    ]
    added = _cell(w, L, 0, "b").set(2)
    assert w.taken == [True, True, True, True]
    w.pump()
    assert all(p.result().ok for p in (*moved, added))
    want = {"value": [{"a": True, "d": {"x": [2]}, "b": 2}, "t"]}
    assert w.store.read_durable(L) == want == w.b.visible(L)


def test_a_cell_set_of_a_document_not_loaded_waits_for_it_as_before(w: World) -> None:
    # `b` never read L: its write opens a transaction, which loads it.
    _put(w, L, {"value": [1, 2]})
    c = Replica(w.store)
    pending = Cell(c, ME, Link("sp", "l", path=(1,))).set(20)
    while c.pump() + w.a.pump() + w.b.pump():
        pass
    assert pending.result().ok
    assert w.store.read_durable(L) == {"value": [1, 20]}


def test_a_cell_set_of_a_whole_cell_commits_with_no_transaction(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(w, L, {"value": Link("sp", "x")})
    _no_transaction(monkeypatch)
    written, replaced = _cell(w, X).set(5), _cell(w, L).set(6)  # (a link there: replaced)
    assert w.taken == [True, True]
    w.pump()
    assert written.result().ok and replaced.result().ok
    assert w.store.read_durable(X) == {"value": 5} == w.b.visible(X)
    assert w.store.read_durable(L) == {"value": 6} == w.b.visible(L)

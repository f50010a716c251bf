"""MemoryStore history: kept only while a session's conflict check can still need it.

Each session's low-water mark (`Replica.low_water`) says below which seq its future
commits need no revisions; the store prunes to the lowest mark when a session goes
quiet. These pin that the pruning is invisible to the conflict check: a commit whose
basis is older than what was pruned conflicts as before, and a session holding an old
transaction open (or commits in flight built on its own pending ones) keeps exactly the
history that decides its commit, so it is accepted or rejected as with the whole history.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cells import ConflictError, DocKey, Identity, MemoryStore, Outcome, Pending, Replica
from cells.stores.memory import PRUNE_BATCH

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
OTHER = DocKey("sp", "other")


class World:
    """One MemoryStore and the replicas on it."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.replicas: list[Replica] = []

    def replica(self) -> Replica:
        r = Replica(self.store)
        self.replicas.append(r)
        return r

    def pump(self) -> None:
        while sum(r.pump() for r in self.replicas):
            pass

    @staticmethod
    def write(r: Replica, key: DocKey, path: tuple[Any, ...], value: Any) -> Pending[Any]:
        tx = r.edit(ME)
        tx.write(key, path, value)
        return tx.commit()

    def kept(self) -> dict[DocKey, list[int]]:
        """The seqs of every revision the store keeps, per document."""
        out: dict[DocKey, list[int]] = {}
        for key, revs in self.store._revisions.items():
            out[key] = [r.seq for r in revs] if isinstance(revs, list) else [revs.seq]
        return out

    def check(self) -> None:
        self.store._check()
        for r in self.replicas:
            r._check()


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.check()


def test_one_runtime_keeps_no_history_once_its_commits_settle(w: World) -> None:
    a = w.replica()
    for i in range(PRUNE_BATCH):
        w.write(a, DOC, ("n",), i)
        w.write(a, OTHER, ("n",), i)
    assert 2 * PRUNE_BATCH == sum(len(seqs) for seqs in w.kept().values())  # in flight
    w.pump()
    assert {} == w.kept()  # the last verdict made `a` quiet: it pruned everything
    assert {} == w.store._floors
    assert a.low_water() is None  # quiet, nothing undelivered: it needs no history
    # A current basis is accepted; the pruned history reads as a floor at the head.
    head = 2 * PRUNE_BATCH - 1
    tx = a.edit(ME)
    tx.read(DOC, ("n",))
    tx.write(DOC, ("n",), 10)
    done = tx.commit()
    w.pump()
    assert done.result().ok
    # Fewer than PRUNE_BATCH revisions since the last prune: this one is still kept,
    # above the floor the pruned ones left.
    assert {DOC: [head + 2]} == w.kept()
    assert {DOC: head} == w.store._floors
    assert [(head, "", -1, ((),))] == [
        (r.seq, r.session_id, r.local_seq, r.paths) for r in w.store._revisions_since(DOC, head - 1)
    ]
    assert [head + 2] == [r.seq for r in w.store._revisions_since(DOC, head)]
    assert 1 == w.store.prune_history()
    assert {} == w.kept()
    assert [] == list(w.store._revisions_since(DOC, head + 2))


def test_a_basis_older_than_the_pruned_history_conflicts(w: World) -> None:
    a, b = w.replica(), w.replica()
    w.write(a, DOC, ("n",), 0)
    w.pump()
    late = b.edit(ME)
    late.read(DOC, ("m",))  # a place nobody writes: only the floor can make it conflict
    late.write(OTHER, ("x",), 1)
    # As if `late` had taken its basis before the document was written (an old basis
    # the marks did not protect, as after the cap pruned it): the floor is the head.
    late.documents()[DOC].basis_seq = 0
    assert 1 == w.store.prune_history()
    assert {} == w.kept()
    result = late.commit()
    w.pump()
    assert Outcome.STALE_BASIS == result.result().outcome
    assert isinstance(result.result().error, ConflictError)


def test_an_old_open_transaction_keeps_the_history_after_its_basis(w: World) -> None:
    a, b = w.replica(), w.replica()
    w.write(a, DOC, ("x",), 0)
    w.write(a, DOC, ("y",), 0)
    w.pump()
    assert 2 == w.store.prune_history()
    # `b` reads both fields and stays open while `a` writes `y` many times (pumped:
    # `a` goes quiet after each, and prunes what no session needs).
    disjoint, overlapping = b.edit(ME), b.edit(ME)
    disjoint.read(DOC, ("x",))
    overlapping.read(DOC, ("y",))
    basis = disjoint.documents()[DOC].basis_seq
    assert 2 == basis == b.low_water()
    for i in range(1, 6):
        w.write(a, DOC, ("y",), i)
        a.pump()  # (`b` is not pumped: its view stays at its basis, as a slow peer's)
    w.store.prune_history()
    assert {DOC: [3, 4, 5, 6, 7]} == w.kept()  # everything after `b`'s basis, no more
    disjoint.write(OTHER, ("x",), 1)
    overlapping.write(OTHER, ("y",), 1)
    ok, conflict = disjoint.commit(), overlapping.commit()
    w.pump()
    # As with the whole history: `y` was written after the basis, `x` was not.
    assert ok.result().ok
    assert Outcome.STALE_BASIS == conflict.result().outcome
    assert isinstance(conflict.result().error, ConflictError)
    # Both settled: nobody needs the history any more.
    assert 6 == w.store.prune_history()  # (5, and `disjoint`'s commit)
    assert {} == w.kept()


def test_commits_built_on_own_pending_commits_keep_those_revisions(w: World) -> None:
    a, b = w.replica(), w.replica()
    w.write(a, DOC, ("n",), 0)
    w.pump()
    with w.store.testing.hold_verdicts() as gate:
        first = w.write(b, DOC, ("n",), 1)
        tx = b.edit(ME)
        tx.read(DOC, ("n",))  # builds on `first`, still pending
        tx.write(OTHER, ("n",), 2)
        second = tx.commit()
        gate.accept(0)  # `first` is applied (seq 2) ...
        b.pump()  # ... and `b` hears of it while `second` is still held
        w.write(a, OTHER, ("m",), 3)
        gate.accept(1)  # (`a`'s commit, held behind `second`)
        a.pump()  # `a` goes quiet: it prunes what no session needs
        w.store.prune_history()
        assert [2] == w.kept()[DOC]  # `second` still needs `first`'s revision
        gate.accept(0)
    w.pump()
    assert first.result().ok
    assert second.result().ok
    w.store.prune_history()
    assert {} == w.kept()


def test_a_quiet_session_that_has_not_integrated_a_commit_keeps_it(w: World) -> None:
    a, b = w.replica(), w.replica()
    w.write(a, DOC, ("x",), 0)
    w.pump()
    assert {"x": 0} == b.visible(DOC)  # `b` holds DOC: it hears of its commits
    w.write(a, DOC, ("y",), 1)
    a.pump()  # `a` is quiet; `b` has not heard of seq 2
    assert 0 == b.low_water()  # what it has heard of (its load said nothing about the rest)
    w.store.prune_history()
    assert [2] == w.kept()[DOC][-1:]
    tx = b.edit(ME)
    tx.read(DOC, ("x",))  # basis 1: seq 2 wrote `y`, which this read does not see
    tx.write(OTHER, ("x",), 1)
    done = tx.commit()
    w.pump()
    assert done.result().ok
    w.store.prune_history()
    assert {} == w.kept()


def test_the_store_low_water_is_the_lowest_mark_of_its_sessions(w: World) -> None:
    a, b = w.replica(), w.replica()
    for i in range(3):
        w.write(a, DOC, ("n",), i)
    w.pump()
    assert 3 == w.store.low_water()
    held = b.edit(ME)  # a busy period begins: its mark is what `b` has integrated
    assert 3 == b.low_water()
    w.write(a, DOC, ("n",), 3)
    w.pump()
    assert 3 == w.store.low_water()
    assert 3 == w.store.prune_history()
    assert {DOC: [4]} == w.kept()  # `held` may still read DOC: what came after it stays
    held.abort()
    assert b.low_water() is None
    assert 4 == w.store.low_water()
    assert 1 == w.store.prune_history()
    assert {} == w.kept()


def test_a_dropped_open_transaction_releases_its_mark(w: World) -> None:
    a = w.replica()
    tx = a.edit(ME)
    tx.read(DOC, ())
    assert 1 == a._open_txs
    del tx
    assert 0 == a._open_txs
    assert a.low_water() is None

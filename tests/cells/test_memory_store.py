"""MemoryStore: shared by several replicas (real conflicts, foreign changes), gates, sessions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cells import (
    MISSING,
    CommitResult,
    ConflictError,
    DocKey,
    Identity,
    InternalError,
    MemoryStore,
    Notification,
    Outcome,
    Pending,
    Replica,
    Space,
    StoreError,
    TransactionError,
)
from cells._store import RUN_WIDTH

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
OTHER = DocKey("sp", "other")


class World:
    """One MemoryStore shared by replicas `a` and `b`, each with a notification log."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.replicas: list[Replica] = []
        self.logs: dict[int, list[Notification]] = {}
        self.a = self.replica()
        self.b = self.replica()

    def replica(self, session_id: str | None = None) -> Replica:
        r = Replica(self.store, session_id=session_id)
        self.replicas.append(r)
        log: list[Notification] = []
        self.logs[id(r)] = log
        r.subscribe(log.append)
        return r

    def log(self, r: Replica) -> list[Notification]:
        return self.logs[id(r)]

    def pump(self) -> None:
        while sum(r.pump() for r in self.replicas):
            pass

    def write(self, r: Replica, key: DocKey, path: tuple[Any, ...], value: Any) -> Pending[Any]:
        tx = r.edit(ME)
        tx.write(key, path, value)
        return tx.commit()

    def put(self, key: DocKey, doc: Any) -> None:
        pending = self.write(self.a, key, (), doc)
        self.pump()
        assert pending.result().ok
        for log in self.logs.values():
            log.clear()

    def check(self) -> None:
        self.store._check()
        for r in self.replicas:
            r._check()


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.check()


def _changes(nf: Notification) -> list[tuple[DocKey, Any, Any]]:
    return [(c.key, c.before, c.after) for c in nf.changes]


# --------------------------------------------------------------------------- real conflicts


def test_two_replicas_incrementing_the_same_counter_conflict(w: World) -> None:
    w.put(DOC, {"n": 1, "by": None})
    tx_a, tx_b = w.a.edit(ME), w.b.edit(ME)
    n_a, n_b = tx_a.read(DOC, ("n",)), tx_b.read(DOC, ("n",))
    assert 1 == n_a == n_b
    tx_a.write(DOC, (), {"n": n_a + 1, "by": "a"})
    tx_b.write(DOC, (), {"n": n_b + 1, "by": "b"})
    p_a, p_b = tx_a.commit(), tx_b.commit()
    w.pump()
    results: list[CommitResult] = [p_a.result(), p_b.result()]
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.STALE_BASIS]
    assert isinstance(results[1].error, ConflictError)
    assert w.store.read_durable(DOC) == {"n": 2, "by": "a"}
    assert w.a.visible(DOC) == {"n": 2, "by": "a"}
    assert w.b.visible(DOC) == {"n": 2, "by": "a"}
    assert w.log(w.b)[-1].kind == "revert"
    assert _changes(w.log(w.b)[-1]) == [(DOC, {"n": 2, "by": "b"}, {"n": 2, "by": "a"})]


def test_after_a_conflict_a_rerun_on_fresh_state_commits(w: World) -> None:
    w.put(DOC, {"n": 1})
    tx_a, tx_b = w.a.edit(ME), w.b.edit(ME)
    for tx in (tx_a, tx_b):
        tx.write(DOC, ("n",), tx.read(DOC, ("n",)) + 1)
    tx_a.commit()
    p_b = tx_b.commit()
    w.pump()
    assert p_b.result().outcome == Outcome.STALE_BASIS
    retry = w.b.edit(ME)
    retry.write(DOC, ("n",), retry.read(DOC, ("n",)) + 1)
    p_retry = retry.commit()
    w.pump()
    assert p_retry.result().ok
    assert w.store.read_durable(DOC) == {"n": 3}


def test_disjoint_paths_of_one_document_do_not_conflict(w: World) -> None:
    w.put(DOC, {"a": 0, "b": 0})
    tx_a, tx_b = w.a.edit(ME), w.b.edit(ME)
    tx_a.write(DOC, ("a",), tx_a.read(DOC, ("a",)) + 1)
    tx_b.write(DOC, ("b",), tx_b.read(DOC, ("b",)) + 1)
    p_a, p_b = tx_a.commit(), tx_b.commit()
    w.pump()
    assert p_a.result().ok
    assert p_b.result().ok
    assert w.store.read_durable(DOC) == {"a": 1, "b": 1}
    assert {"a": 1, "b": 1} == w.a.visible(DOC) == w.b.visible(DOC)


def test_a_shallow_read_conflicts_with_a_key_set_change_only(w: World) -> None:
    w.put(DOC, {"a": {"x": 0}})
    # A deeper write does not change the key set the shallow read saw.
    reader = w.a.edit(ME)
    reader.read(DOC, (), shallow=True)
    reader.write(OTHER, (), "keys seen")
    w.write(w.b, DOC, ("a", "x"), 1)
    p_reader = reader.commit()
    w.pump()
    assert p_reader.result().ok
    # Adding a key does.
    reader = w.a.edit(ME)
    reader.read(DOC, (), shallow=True)
    reader.write(OTHER, (), "keys seen again")
    w.write(w.b, DOC, ("c",), 1)
    p_reader = reader.commit()
    w.pump()
    assert p_reader.result().outcome == Outcome.STALE_BASIS


def test_foreign_commits_arrive_as_integrate_notifications(w: World) -> None:
    w.put(DOC, {"n": 1})
    assert w.b.visible(DOC) == {"n": 1}  # b has loaded the document
    p = w.write(w.a, DOC, ("n",), 2)
    assert w.log(w.b) == []  # delivered on b's mailbox, not inside a's commit
    w.pump()
    assert p.result().ok
    assert [nf.kind for nf in w.log(w.b)] == ["integrate"]
    nf = w.log(w.b)[0]
    assert nf.source is None
    assert _changes(nf) == [(DOC, {"n": 1}, {"n": 2})]
    assert w.b.visible(DOC) == {"n": 2}
    assert [nf.kind for nf in w.log(w.a)] == ["commit"]


def test_foreign_commits_to_documents_a_replica_never_loaded_are_not_announced(w: World) -> None:
    w.write(w.a, DOC, (), 1)
    w.pump()
    assert w.log(w.b) == []
    assert not w.b.is_loaded(DOC)
    assert w.b.visible(DOC) == 1


def test_a_commit_is_handed_only_to_the_replicas_holding_what_it_wrote(w: World) -> None:
    c = w.replica()
    w.put(DOC, {"n": 1})
    assert w.b.visible(DOC) == {"n": 1}  # b holds DOC; c holds nothing
    w.write(w.a, DOC, ("n",), 2)
    assert len(w.b.mailbox) == 1  # the foreign commit
    assert len(c.mailbox) == 0  # not even queued: c never loaded DOC
    w.pump()
    assert w.b.visible(DOC) == {"n": 2}
    assert w.log(c) == []


def test_a_replica_that_loads_a_document_later_catches_up_and_then_integrates(w: World) -> None:
    w.put(DOC, {"n": 1})
    w.write(w.a, DOC, ("n",), 2)
    w.pump()
    assert w.b.visible(DOC) == {"n": 2}  # loads now: the store's current state
    w.write(w.a, DOC, ("n",), 3)
    w.pump()
    assert [nf.kind for nf in w.log(w.b)] == ["integrate"]
    assert w.b.visible(DOC) == {"n": 3}


def test_a_commit_during_a_held_load_reaches_the_loading_replica(w: World) -> None:
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_loads(DOC) as gate:
        assert w.b.visible(DOC) is MISSING  # the load waits
        assert gate.waiting() == 1
        w.write(w.a, DOC, ("n",), 2)
        w.pump()
        assert not w.b.is_loaded(DOC)
    w.pump()  # the load reads the store now
    assert w.b.visible(DOC) == {"n": 2}
    w.write(w.a, DOC, ("n",), 3)
    w.pump()
    assert w.b.visible(DOC) == {"n": 3}


def test_a_closed_replica_is_dropped_from_the_holders_of_its_documents(w: World) -> None:
    c = w.replica()
    w.put(DOC, {"n": 1})
    assert w.b.visible(DOC) == c.visible(DOC) == {"n": 1}
    w.b.close()
    w.write(w.a, DOC, ("n",), 2)
    w.pump()
    assert len(w.b.mailbox) == 0
    assert c.visible(DOC) == {"n": 2}
    assert w.store._holders[DOC] == (w.a.session_id, c.session_id)


def test_a_foreign_commit_under_a_pending_layer_changes_nothing_visible(w: World) -> None:
    w.put(DOC, {"a": 0, "b": 0})
    with w.store.testing.hold_verdicts() as gate:
        w.write(w.b, DOC, ("a",), "mine")
        w.write(w.a, DOC, ("a",), "theirs")
        gate.accept(1)
        w.pump()
        assert w.b.visible(DOC) == {"a": "mine", "b": 0}
        assert [nf for nf in w.log(w.b) if nf.kind == "integrate"] == []
    w.pump()
    # b's blind write was accepted after a's, so it is the durable value.
    assert w.store.read_durable(DOC) == {"a": "mine", "b": 0}
    assert w.a.visible(DOC) == {"a": "mine", "b": 0}


# --------------------------------------------------------------------------- sequence and counters


def test_accepted_commits_get_gap_free_sequence_numbers(w: World) -> None:
    assert w.store.seq == 0
    w.put(DOC, {"n": 0})
    seqs: list[int | None] = []
    for i in range(3):
        p = w.write(w.a, DOC, ("n",), i + 1)
        w.pump()
        seqs.append(p.result().seq)
    assert seqs == [2, 3, 4]
    # A rejected commit takes no number.
    tx_a, tx_b = w.a.edit(ME), w.b.edit(ME)
    for tx in (tx_a, tx_b):
        tx.write(DOC, ("n",), tx.read(DOC, ("n",)) + 10)
    tx_a.commit()
    tx_b.commit()
    w.pump()
    assert w.store.seq == 5
    p = w.write(w.a, DOC, ("n",), 0)
    w.pump()
    assert p.result().seq == 6


def test_commits_evaluated_counts_every_evaluation(w: World) -> None:
    assert w.store.commits_evaluated == 0
    w.put(DOC, 1)
    assert w.store.commits_evaluated == 1
    with w.store.testing.hold_verdicts() as gate:
        w.write(w.a, DOC, (), 2)
        assert w.store.commits_evaluated == 1
        gate.reject(0)  # a gate's rejection is not an evaluation
        assert w.store.commits_evaluated == 1
        w.write(w.a, DOC, (), 3)
    assert w.store.commits_evaluated == 2
    w.pump()
    assert w.store.read_durable(DOC) == 3


def test_a_run_log_not_made_of_whole_entries_is_an_internal_error(w: World) -> None:
    # A run log is RUN_WIDTH items per commit (the replica makes it so): one that is not
    # is a bug, refused before any entry of it is evaluated.
    w.put(DOC, 1)
    evaluated = w.store.commits_evaluated
    with pytest.raises(InternalError, match="not entries of 12"):
        w.store.submit_runs(w.a, w.a.session_id, [None] * (RUN_WIDTH + 1))
    assert w.store.commits_evaluated == evaluated
    assert w.store.read_durable(DOC) == 1


def test_read_durable_of_an_absent_document_is_missing(w: World) -> None:
    assert MISSING is w.store.read_durable(DOC)


# --------------------------------------------------------------------------- gates


def test_held_verdicts_apply_locally_but_not_in_the_store(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        p = w.write(w.a, DOC, (), "held")
        w.pump()
        assert w.a.visible(DOC) == "held"
        assert MISSING is w.store.read_durable(DOC)
        assert len(gate.held()) == 1
        assert "<HeldCommit" in repr(gate.held()[0])
        assert not p.done()
        gate.accept(0)
        assert w.store.read_durable(DOC) == "held"
        w.pump()
        assert p.result().ok


def test_leaving_a_verdict_gate_accepts_the_rest_in_order(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        p1 = w.write(w.a, DOC, (), 1)
        p2 = w.write(w.b, DOC, (), 2)
        assert gate.waiting() == 2
    assert not gate.active
    w.pump()
    assert p1.result().ok and p2.result().ok
    assert w.store.read_durable(DOC) == 2
    assert w.a.visible(DOC) == 2


def test_only_one_verdict_gate_at_a_time(w: World) -> None:
    gate = w.store.testing.hold_verdicts()
    with pytest.raises(StoreError):
        w.store.testing.hold_verdicts()
    gate.release()
    w.store.testing.hold_verdicts().release()


def test_a_gate_index_out_of_range_is_an_index_error(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        with pytest.raises(IndexError):
            gate.accept(0)
        w.write(w.a, DOC, (), 1)
        with pytest.raises(IndexError):
            gate.reject(1)
    w.pump()


# --------------------------------------------------------------------------- sessions and closing


def test_a_session_id_connects_once(w: World) -> None:
    w.replica("fixed")
    with pytest.raises(StoreError):
        Replica(w.store, session_id="fixed")


def test_each_replica_is_its_own_session(w: World) -> None:
    assert w.a.session_id != w.b.session_id


def test_a_closed_store_refuses_work() -> None:
    store = MemoryStore()
    r = Replica(store)
    store.close()
    with pytest.raises(StoreError):
        Replica(store)
    with pytest.raises(StoreError):
        r.visible(DOC)
    store._check()


def test_a_closed_replica_refuses_transactions_and_hears_nothing(w: World) -> None:
    w.put(DOC, 0)
    extra = w.replica()
    assert extra.visible(DOC) == 0
    extra.close()
    with pytest.raises(TransactionError, match="closed"):
        extra.edit(ME)
    w.write(w.a, DOC, (), 1)
    w.pump()
    assert w.log(extra) == []


def _kept(store: MemoryStore, key: DocKey) -> int:
    """How many revisions of `key` `store` keeps (a lone one is kept bare, not in a list)."""
    revs = store._revisions[key]
    return len(revs) if isinstance(revs, list) else 1


def test_history_is_bounded_and_a_basis_older_than_it_conflicts(w: World) -> None:
    from cells.stores.memory import REVISIONS_KEPT

    w.put(DOC, {"n": 0})
    # A transaction left open pins the history (its session's low-water mark): only the
    # cap bounds it then.
    pinning = w.replica()
    pin = pinning.edit(ME)
    pin.read(DOC, ())
    for i in range(3 * REVISIONS_KEPT):  # another document's churn does not matter...
        w.write(w.a, OTHER, ("n",), i)
    w.pump()
    fresh = w.b.edit(ME)
    fresh.read(DOC, ())
    fresh.write(DOC, ("n",), 1)
    ok = fresh.commit()
    w.pump()
    assert ok.result().ok  # ...and a current basis is accepted
    assert _kept(w.store, OTHER) <= 2 * REVISIONS_KEPT
    for i in range(3 * REVISIONS_KEPT):  # churn on DOC itself prunes past the stale basis
        w.write(w.a, DOC, ("m",), i)
    w.pump()
    assert _kept(w.store, DOC) <= 2 * REVISIONS_KEPT
    other_reader = Replica(w.store)
    w.replicas.append(other_reader)
    late = other_reader.edit(ME)
    late.read(DOC, ())
    late.write(OTHER, ("x",), 1)
    # Make `late`'s basis older than the pruned window by faking an old basis.
    late.documents()[DOC].basis_seq = 1
    late.documents()[DOC].version = other_reader._docs[DOC].version
    result = late.commit()
    other_reader.pump()
    assert Outcome.STALE_BASIS == result.result().outcome
    assert isinstance(result.result().error, ConflictError)
    pin.abort()


@pytest.mark.parametrize("writes_before", [0, 1, 2, 5])
def test_a_stale_basis_conflicts_only_on_overlapping_paths_however_history_is_kept(
    w: World, writes_before: int
) -> None:
    # A document's history is its one Revision while it has one, then a list of
    # them: either way `b`'s reads taken before `a`'s newer write conflict
    # exactly when that write overlaps them, on the one-write fast path (`stale_n`)
    # and on the general one (`stale_m` writes two documents).
    for i in range(writes_before):
        w.write(w.a, DOC, ("n",), i)
    w.pump()
    stale_n, stale_m = w.b.edit(ME), w.b.edit(ME)
    stale_n.read(DOC, ("n",))
    stale_m.read(DOC, ("m",))
    stale_n.write(OTHER, ("x",), 1)
    stale_m.write(OTHER, ("y",), 1)
    stale_m.write(DocKey("sp", "third"), ("z",), 1)
    w.write(w.a, DOC, ("n",), 100)  # newer than both bases
    w.a.pump()  # (`b` has not heard of it yet: the store, not `b`, must find the conflict)
    # `b`'s open transactions pin the history after their basis (`a`'s quiet point pruned
    # what is older): the newer write is kept as written.
    newest = list(w.store._revisions_since(DOC, writes_before))  # since `b`'s basis
    assert [writes_before + 1] == [r.seq for r in newest]
    assert [(("n",),) if writes_before else ((),)] == [r.paths for r in newest]
    n_result, m_result = stale_n.commit(), stale_m.commit()
    w.pump()
    assert Outcome.STALE_BASIS == n_result.result().outcome
    # The first write to a document creates it (a write at its root): it overlaps every read.
    assert (writes_before > 0) == m_result.result().ok


def test_two_sessions_creating_different_fields_of_a_new_document_keep_both(w: World) -> None:
    # Reported by the conformance work: the replica lifted a write that created a
    # level to that level, so the later blind create replaced the whole document.
    new = DocKey("sp", "fresh")
    ta, tb = w.a.edit(ME), w.b.edit(ME)
    ta.write(new, ("value", "a"), 1)  # both see the document absent
    tb.write(new, ("value", "b"), 2)
    pa, pb = ta.commit(), tb.commit()
    w.pump()
    assert pa.result().ok and pb.result().ok
    assert {"value": {"a": 1, "b": 2}} == w.store.read_durable(new)
    for r in (w.a, w.b):
        assert {"value": {"a": 1, "b": 2}} == r.visible(new)


def test_a_shallow_reader_conflicts_with_a_leaf_write_that_created_a_key(w: World) -> None:
    # The store records the first level a write creates, so a shallow read of
    # the parent taken before it is stale.
    w.put(DOC, {"value": {}})
    reader = w.b.edit(ME)
    assert {} == reader.read(DOC, ("value",), shallow=True)
    reader.write(OTHER, ("value",), "saw no keys")
    w.write(w.a, DOC, ("value", "k", "deep"), 1)
    w.pump()
    result = reader.commit()
    w.pump()
    assert Outcome.STALE_BASIS == result.result().outcome


def test_resolutions_are_a_watermark_that_survives_out_of_order_verdicts() -> None:
    from cells.stores.memory import _Resolved

    r = _Resolved()
    r.add(1, rejected=False)
    r.add(3, rejected=True)  # released out of order by a gate
    assert (r.low, r.above) == (1, {3})
    assert r.resolved(1) and not r.resolved(2) and r.resolved(3)
    r.add(2, rejected=False)
    assert (r.low, r.above) == (3, set())
    assert r.rejected == {3}
    store = MemoryStore()
    store._resolutions["s"] = r
    assert store._resolution("s", 2) is True
    assert store._resolution("s", 3) is None  # rejected
    assert store._resolution("s", 4) is False  # no verdict yet
    assert store._resolution("other", 1) is False


def test_memory_store_keeps_no_entry_per_commit() -> None:
    store = MemoryStore()
    space = Space(store, "x")
    cell = space.cell("a")
    for i in range(200):
        cell.set(i)
    space.replica.pump()
    (resolved,) = store._resolutions.values()
    assert (resolved.low, resolved.above, resolved.rejected) == (200, set(), set())


def test_a_subclass_hooking_evaluate_sees_every_commit_of_a_batch() -> None:
    from cells._store import CommitRequest, Verdict

    class Counting(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[int] = []

        def _evaluate(self, request: CommitRequest) -> Verdict:
            self.seen.append(request.local_seq)
            return super()._evaluate(request)

    store = Counting()
    replica = Replica(store)
    replica.begin_batch()
    pendings = []
    for i in range(3):
        tx = replica.edit(ME)
        tx.write(DocKey("sp", f"d{i}"), (), i)
        pendings.append(tx.commit())
    assert store.seen == []
    replica.end_batch()
    replica.pump()
    assert store.seen == [1, 2, 3]
    assert all(p.result().ok for p in pendings)


def test_a_session_that_loaded_alone_hears_later_sessions_commits() -> None:
    # A session alone on the store records nothing per loaded document (it hears every
    # commit instead): one that connects later still reaches it.
    store = MemoryStore()
    first = Replica(store)
    assert MISSING == first.visible(DOC)
    assert {} == store._holders
    second = Replica(store)
    tx = second.edit(ME)
    tx.write(DOC, (), {"n": 1})
    done = tx.commit()
    second.pump()
    assert done.result().ok
    first.pump()
    assert {"n": 1} == first.visible(DOC)
    # The later session's loads are recorded per document as before.
    assert OTHER not in store._holders
    assert MISSING == second.visible(OTHER)
    assert second.session_id == store._holders[OTHER]
    store._check()

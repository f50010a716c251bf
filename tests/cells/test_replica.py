"""The replica: pending layers, reverts, dependent commits, held loads, sync, and retrying edits."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cells import (
    MISSING,
    RUN_DONE,
    RUN_NONE,
    CellweaveError,
    CommitResult,
    ConflictError,
    DocKey,
    Identity,
    MemoryStore,
    Notification,
    Outcome,
    PreconditionFailedError,
    Replica,
    Space,
    Transaction,
    classify,
    edit_with_retry,
)
from cells._links import VALUE
from cells.errors import DependencyRejectedError, LivenessError, TransactionError

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
OTHER = DocKey("sp", "other")


class World:
    """One store and any number of replicas, each with a notification log."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.replicas: list[Replica] = []
        self.logs: dict[int, list[Notification]] = {}
        self.a = self.replica()

    def replica(self) -> Replica:
        r = Replica(self.store)
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

    def put(self, key: DocKey, doc: Any, r: Replica | None = None) -> None:
        r = r or self.a
        tx = r.edit(ME)
        tx.write(key, (), doc)
        pending = tx.commit()
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


# --------------------------------------------------------------------------- rejection and revert


def test_a_rejection_drops_the_layer_and_emits_a_revert(w: World) -> None:
    w.put(DOC, {"n": 1})
    settled: list[Outcome] = []
    with w.store.testing.hold_verdicts() as gate:
        tx = w.a.edit(ME)
        tx.add_settle_callback(lambda tx, result: settled.append(result.outcome))
        tx.write(DOC, ("n",), 2)
        pending = tx.commit()
        assert [nf.kind for nf in w.log(w.a)] == ["commit"]
        w.pump()
        assert w.a.visible(DOC) == {"n": 2}
        assert w.a.in_flight() == 1
        gate.reject(0, Outcome.STALE_BASIS)
        assert w.a.visible(DOC) == {"n": 2}  # nothing changes until the verdict is delivered
        w.pump()
    revert = w.log(w.a)[-1]
    assert revert.kind == "revert"
    assert revert.source is tx
    assert isinstance(revert.reason, ConflictError)
    assert _changes(revert) == [(DOC, {"n": 2}, {"n": 1})]
    assert w.a.visible(DOC) == {"n": 1}
    assert settled == [Outcome.STALE_BASIS]
    assert pending.result().outcome == Outcome.STALE_BASIS
    assert w.a.in_flight() == 0
    assert w.store.read_durable(DOC) == {"n": 1}


def test_a_commit_built_on_a_rejected_one_is_rejected_too(w: World) -> None:
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        first = w.a.edit(ME)
        first.write(DOC, ("n",), 2)
        p1 = first.commit()
        second = w.a.edit(ME)
        n = second.read(DOC, ("n",))
        assert n == 2  # it sees the first commit's pending write
        second.write(DOC, ("m",), n + 1)
        p2 = second.commit()
        independent = w.a.edit(ME)
        independent.write(OTHER, (), "unrelated")
        p3 = independent.commit()
        assert w.a.visible(DOC) == {"n": 2, "m": 3}
        assert gate.waiting() == 3
        gate.reject(0, Outcome.TERMINAL)
        gate.release()
        w.pump()
    assert p1.result().outcome == Outcome.TERMINAL
    result = p2.result()
    assert result.outcome == Outcome.STALE_BASIS
    assert isinstance(result.error, DependencyRejectedError)
    assert p3.result().ok
    assert w.a.visible(DOC) == {"n": 1}
    assert w.store.read_durable(DOC) == {"n": 1}
    assert w.store.read_durable(OTHER) == "unrelated"
    assert [nf.kind for nf in w.log(w.a)] == ["commit", "commit", "commit", "revert", "revert"]


def test_a_write_equal_to_a_pending_value_survives_when_that_layer_fails(w: World) -> None:
    """A blind write equal to a value that is only pending is sent (a shadow write):
    eliding it would lose it when the pending layer is rejected."""
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        first = w.a.edit(ME)
        first.write(DOC, ("n",), 2)
        p1 = first.commit()
        second = w.a.edit(ME)
        second.write(DOC, ("n",), 2)  # equal to the visible (pending) value
        p2 = second.commit()
        assert 2 == gate.waiting()  # sent, not elided
        assert ["commit"] == [nf.kind for nf in w.log(w.a)]  # but it changed nothing now
        gate.accept(1)  # the second is durable first
        gate.reject(0, Outcome.PERMANENT)
        w.pump()
    assert p1.result().outcome is Outcome.PERMANENT
    assert p2.result().ok
    assert {"n": 2} == w.a.visible(DOC) == w.store.read_durable(DOC)
    third = w.a.edit(ME)
    third.write(DOC, ("n",), 2)  # equal to the confirmed value: elided as before
    assert third.commit().result().ok
    assert 1 == w.a.stats.commits_elided


def test_a_computation_s_write_equal_to_a_pending_value_survives_when_that_layer_fails(
    w: World,
) -> None:
    """The same for a commit that reads one document and writes one field of another
    (a scheduler node's usual run, which `Replica._commit` stages on a shorter path): a
    second node writing what a first one's still pending commit wrote (a list element's
    computation re-created while its predecessor's commit is in flight) must not be
    elided, or the value is lost when the first commit fails."""
    w.put(DOC, {"n": 1})
    w.put(OTHER, "input")
    with w.store.testing.hold_verdicts() as gate:
        first = w.a.edit(ME)
        first.read(OTHER, ("value",))
        first.write(DOC, ("n",), 2)
        p1 = first.commit()
        second = w.a.edit(ME)
        second.read(OTHER, ("value",))
        second.write(DOC, ("n",), 2)  # equal to the visible (pending) value
        p2 = second.commit()
        assert 2 == gate.waiting()  # sent, not elided
        # ... but it changed nothing now: no second notification (the shortcut once
        # notified a change whose before and after were equal).
        assert ["commit"] == [nf.kind for nf in w.log(w.a)]
        gate.accept(1)
        gate.reject(0, Outcome.PERMANENT)
        w.pump()
    assert p1.result().outcome is Outcome.PERMANENT
    assert p2.result().ok
    assert {"n": 2} == w.a.visible(DOC) == w.store.read_durable(DOC)


def test_a_write_equal_to_the_confirmed_value_still_lands_after_pending_layers(w: World) -> None:
    """Pending layers confirmed later land before a new write in the durable order: a
    write equal to the shown (and confirmed) value is sent while layers are pending."""
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        for value in (2, 1, 1):  # the last equals both the visible and confirmed value
            tx = w.a.edit(ME)
            tx.write(DOC, ("n",), value)
            tx.commit()
        assert 3 == gate.waiting()
        gate.accept(0)  # n=2 is durable
        gate.reject(0, Outcome.PERMANENT)  # the first n=1 fails
        gate.accept(0)  # the last n=1 must still land
        w.pump()
    assert {"n": 1} == w.store.read_durable(DOC) == w.a.visible(DOC)


def test_a_commit_released_before_its_dependency_is_rejected(w: World) -> None:
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        first = w.a.edit(ME)
        first.write(DOC, ("n",), 2)
        p1 = first.commit()
        second = w.a.edit(ME)
        second.write(DOC, ("m",), second.read(DOC, ("n",)))
        p2 = second.commit()
        gate.accept(1)  # out of order: its dependency has no verdict yet
        gate.accept(0)
        w.pump()
    assert p1.result().ok
    assert p2.result().outcome == Outcome.STALE_BASIS
    assert isinstance(p2.result().error, DependencyRejectedError)
    assert w.a.visible(DOC) == {"n": 2}
    assert w.store.read_durable(DOC) == {"n": 2}


def test_a_revert_never_stomps_a_newer_integrated_value(w: World) -> None:
    w.put(DOC, {"a": 0, "b": 0})
    b = w.replica()
    assert b.visible(DOC) == {"a": 0, "b": 0}
    with w.store.testing.hold_verdicts() as gate:
        mine = w.a.edit(ME)
        mine.write(DOC, ("a",), 1)
        p_mine = mine.commit()
        theirs = b.edit(ME)
        theirs.write(DOC, ("b",), 2)
        p_theirs = theirs.commit()
        gate.accept(1)
        w.pump()
        assert p_theirs.result().ok
        assert w.a.visible(DOC) == {"a": 1, "b": 2}
        gate.reject(0, Outcome.STALE_BASIS)
        w.pump()
    assert p_mine.result().outcome == Outcome.STALE_BASIS
    assert w.a.visible(DOC) == {"a": 0, "b": 2}
    revert = w.log(w.a)[-1]
    assert revert.kind == "revert"
    assert _changes(revert) == [(DOC, {"a": 1, "b": 2}, {"a": 0, "b": 2})]
    assert w.store.read_durable(DOC) == {"a": 0, "b": 2}


def test_every_subscriber_hears_a_change_even_if_one_fails(w: World) -> None:
    heard: list[str] = []

    def boom(nf: Notification) -> None:
        raise RuntimeError("subscriber failed")

    w.a.subscribe(boom)
    w.a.subscribe(lambda nf: heard.append(nf.kind))
    tx = w.a.edit(ME)
    tx.write(DOC, (), 1)
    with pytest.raises(RuntimeError, match="subscriber failed"):
        tx.commit()
    assert heard == ["commit"]
    w.pump()
    assert tx.done().result().ok  # the commit still went to the store
    assert w.store.read_durable(DOC) == 1


def test_a_lone_subscribers_commit_hook_hears_local_commits_with_no_notification() -> None:
    """`subscribe(fn, on_commit=hook)`: while `fn` is the only subscriber, each change of a
    local commit goes to `hook(change, source)` and `fn` hears no "commit" for it; with a
    second subscriber both hear the `Notification`, and the hook is used again once the
    other unsubscribes. Other kinds (a revert, an integrated commit) always go to `fn`."""
    store = MemoryStore()
    r = Replica(store)
    heard: list[str] = []
    hooked: list[tuple[DocKey, Any, Any, object]] = []
    r.subscribe(
        lambda nf: heard.append(nf.kind),
        on_commit=lambda change, by, moved: hooked.append(
            (change.key, change.before, change.after, by)
        ),
    )

    def commit(value: int) -> None:
        tx = r.edit(ME)
        tx.write(DOC, (), value)
        tx.commit()
        while r.pump():
            pass

    commit(1)
    assert heard == [] and hooked == [(DOC, MISSING, 1, None)]
    others: list[str] = []
    cancel = r.subscribe(lambda nf: others.append(nf.kind))
    commit(2)
    assert heard == ["commit"] and others == ["commit"] and len(hooked) == 1
    cancel()
    commit(3)
    assert heard == ["commit"] and hooked[-1] == (DOC, 2, 3, None)
    foreign = Replica(store)
    tx = foreign.edit(ME)
    tx.write(DOC, (), 4)
    tx.commit()
    while foreign.pump() + r.pump():
        pass
    r.sync([DOC])
    while r.pump():
        pass
    assert heard[-1] == "integrate" and len(hooked) == 2
    assert r.stats.notifications == 4
    with pytest.raises(CellweaveError, match="on_commit"):
        r.subscribe(heard.append, on_commit=1)  # type: ignore[arg-type]


def test_a_drains_usual_commit_tells_the_commit_hook_it_moved_its_one_field() -> None:
    """The hook's `moved`: True for a run log entry's change that wrote one top-level
    field and moved the value there (a drain's usual commit, and a `Cell.set` of a whole
    cell outside a drain, `_send_entry`: an equal write is elided before either), False
    for every other local commit's (a whole-document write, a deeper write), which says
    nothing about it."""
    store = MemoryStore()
    r = Replica(store)
    hooked: list[tuple[DocKey, Any, bool]] = []
    r.subscribe(
        lambda nf: None,
        on_commit=lambda change, by, moved: hooked.append((change.key, change.paths, moved)),
    )
    src, out = DocKey("sp", "src"), DocKey("sp", "out")
    for key in (src, out):
        tx = r.edit(ME)
        tx.write(key, (), {"value": 0})
        tx.commit()
    while r.pump():
        pass
    assert [moved for _key, _paths, moved in hooked] == [False, False]

    def run(value: int) -> None:
        r.begin_batch()
        tx = r.edit(ME)
        tx.write(out, ("value",), tx.read(src, ("value",)) + value)
        tx.commit()
        r.end_batch()
        while r.pump():
            pass

    run(1)
    assert hooked[-1] == (out, (("value",),), True)
    run(1)  # equal: elided, no change at all
    assert len(hooked) == 3
    tx = r.edit(ME)
    tx.write(src, ("value",), {"n": 5})
    tx.commit()
    assert hooked[-1] == (src, (("value",),), True)  # outside a drain: `_send_entry`
    while r.pump():
        pass
    tx = r.edit(ME)
    tx.write(src, ("value", "n"), 6)
    tx.commit()
    assert hooked[-1:] == [(src, (("value", "n"),), False)]  # deeper: says nothing


def test_unsubscribe_stops_notifications(w: World) -> None:
    heard: list[Notification] = []
    cancel = w.a.subscribe(heard.append)
    cancel()
    cancel()
    tx = w.a.edit(ME)
    tx.write(DOC, (), 1)
    tx.commit()
    w.pump()
    assert heard == []


# --------------------------------------------------------------------------- held loads and sync


def _fresh_space(w: World) -> tuple[Replica, Space]:
    r = w.replica()
    return r, Space(r, "sp")


def test_a_held_load_reads_missing_then_arrives_as_a_load_notification(w: World) -> None:
    writer = Space(w.a, "sp")
    writer.cell("doc").set({"x": 1})
    w.pump()
    r, sp = _fresh_space(w)
    cell = sp.cell("doc")
    with w.store.testing.hold_loads(cell) as gate:
        assert MISSING is cell.get()
        assert MISSING is cell.key("x").get()
        assert not r.is_loaded(cell.doc_key)
        assert gate.waiting() == 1
        w.pump()
        assert MISSING is cell.get()
        assert w.log(r) == []
        gate.release()
        assert gate.waiting() == 0
        assert w.log(r) == []  # delivered only when the replica is pumped
        w.pump()
    assert [nf.kind for nf in w.log(r)] == ["load"]
    assert [(cell.doc_key, MISSING, {VALUE: {"x": 1}})] == _changes(w.log(r)[0])
    assert cell.get() == {"x": 1}
    assert r.is_loaded(cell.doc_key)


def test_sync_resolves_only_after_the_held_load_is_released(w: World) -> None:
    w.put(DOC, {"v": 1})
    r = w.replica()
    gate = w.store.testing.hold_loads(DOC, OTHER)
    pending = r.sync([DOC, OTHER, DOC])
    w.pump()
    assert not pending.done()
    assert gate.waiting() == 2
    gate.release()
    assert not pending.done()
    w.pump()
    assert pending.done()
    assert None is pending.result()
    assert r.visible(DOC) == {"v": 1}
    assert MISSING is r.visible(OTHER)


def test_sync_of_a_loaded_document_still_goes_through_the_store(w: World) -> None:
    w.put(DOC, {"v": 1})
    assert w.a.is_loaded(DOC)
    with w.store.testing.hold_loads(DOC) as gate:
        pending = w.a.sync([DOC])
        w.pump()
        assert not pending.done()
        assert gate.waiting() == 1
    w.pump()
    assert pending.done()


def test_sync_of_nothing_resolves_on_pump(w: World) -> None:
    pending = w.a.sync([])
    assert not pending.done()
    w.pump()
    assert pending.done()


def test_a_failed_load_fails_sync_as_liveness(w: World) -> None:
    w.put(DOC, {"v": 1})
    r = w.replica()
    gate = w.store.testing.hold_loads(DOC)
    assert MISSING is r.visible(DOC)
    pending = r.sync([DOC])
    assert gate.waiting() == 1  # the read's load and the sync share one held load
    gate.fail()
    assert gate.waiting() == 0
    w.pump()
    assert pending.done()
    with pytest.raises(LivenessError) as info:
        pending.result()
    assert classify(info.value) == Outcome.LIVENESS
    assert MISSING is r.visible(DOC)
    assert not r.is_loaded(DOC)
    assert w.log(r) == []
    # The gate is gone: a new sync loads the document.
    again = r.sync([DOC])
    w.pump()
    assert None is again.result()
    assert r.visible(DOC) == {"v": 1}


def test_gate_waiting_counts_held_loads(w: World) -> None:
    r, sp = _fresh_space(w)
    one, two, free = sp.cell("one"), sp.cell("two"), sp.cell("free")
    gate = w.store.testing.hold_loads(one, two.doc_key)
    assert gate.waiting() == 0
    one.get()
    assert gate.waiting() == 1
    one.get()
    assert gate.waiting() == 1
    free.get()
    assert gate.waiting() == 1
    two.get()
    assert gate.waiting() == 2
    gate.release()
    w.pump()
    assert r.is_loaded(one.doc_key)
    assert r.is_loaded(two.doc_key)


def test_hold_loads_needs_cells_or_keys(w: World) -> None:
    with pytest.raises(TypeError):
        w.store.testing.hold_loads()
    with pytest.raises(TypeError):
        w.store.testing.hold_loads("not a cell")


# --------------------------------------------------------------------------- edit_with_retry


class Conflicting:
    """An edit that increments `n`, while another replica writes `n` behind its back."""

    def __init__(self, w: World, conflicts: int) -> None:
        self.w = w
        self.other = w.replica()
        self.conflicts = conflicts
        self.attempts = 0

    def __call__(self, tx: Transaction) -> None:
        self.attempts += 1
        n = tx.read(DOC, ("n",))
        if self.attempts <= self.conflicts:
            theirs = self.other.edit(ME)
            theirs.write(DOC, ("n",), 1000 + self.attempts)
            theirs.commit()
        tx.write(DOC, ("n",), n + 1)


def test_edit_with_retry_retries_conflicts_until_attempts_run_out(w: World) -> None:
    w.put(DOC, {"n": 0})
    fn = Conflicting(w, conflicts=10)
    result = asyncio.run(edit_with_retry(w.a, ME, fn, attempts=3))
    w.pump()
    assert fn.attempts == 3
    assert result.outcome == Outcome.STALE_BASIS
    assert isinstance(result.error, ConflictError)
    assert w.store.read_durable(DOC) == {"n": 1003}


def test_edit_with_retry_succeeds_on_fresh_state_after_a_conflict(w: World) -> None:
    w.put(DOC, {"n": 0})
    fn = Conflicting(w, conflicts=1)
    result = asyncio.run(edit_with_retry(w.a, ME, fn))
    w.pump()
    assert fn.attempts == 2
    assert result.ok
    assert w.store.read_durable(DOC) == {"n": 1002}


def test_edit_with_retry_retries_liveness(w: World) -> None:
    attempts: list[int] = []

    async def main() -> CommitResult:
        with w.store.testing.hold_verdicts() as gate:

            def fn(tx: Transaction) -> None:
                attempts.append(len(attempts) + 1)
                tx.write(DOC, (), len(attempts))
                # Decide the held verdict once the commit is waiting on it.
                if len(attempts) < 3:
                    decide = lambda: gate.reject(0, Outcome.LIVENESS)  # noqa: E731
                else:
                    decide = lambda: gate.accept(0)  # noqa: E731
                asyncio.get_running_loop().call_soon(decide)

            return await edit_with_retry(w.a, ME, fn)

    result = asyncio.run(main())
    assert attempts == [1, 2, 3]
    assert result.ok
    assert w.store.read_durable(DOC) == 3


@pytest.mark.parametrize("outcome", [Outcome.TERMINAL, Outcome.NON_RETRYABLE, Outcome.PERMANENT])
def test_edit_with_retry_does_not_retry_other_rejections(w: World, outcome: Outcome) -> None:
    attempts: list[int] = []

    async def main() -> CommitResult:
        with w.store.testing.hold_verdicts() as gate:

            def fn(tx: Transaction) -> None:
                attempts.append(1)
                tx.write(DOC, (), len(attempts))
                asyncio.get_running_loop().call_soon(lambda: gate.reject(0, outcome))

            return await edit_with_retry(w.a, ME, fn)

    result = asyncio.run(main())
    assert len(attempts) == 1
    assert outcome == result.outcome


def test_edit_with_retry_returns_at_once_for_permanent(w: World) -> None:
    w.put(DOC, {"made": True})
    attempts: list[int] = []

    def fn(tx: Transaction) -> None:
        attempts.append(1)
        tx.create_only(DOC)
        tx.write(DOC, (), {"made": "again"})

    result = asyncio.run(edit_with_retry(w.a, ME, fn))
    w.pump()
    assert len(attempts) == 1
    assert result.outcome == Outcome.PERMANENT
    assert isinstance(result.error, PreconditionFailedError)


def test_edit_with_retry_returns_an_abort_without_retrying(w: World) -> None:
    attempts: list[int] = []

    def fn(tx: Transaction) -> None:
        attempts.append(1)
        tx.abort("no")

    result = asyncio.run(edit_with_retry(w.a, ME, fn))
    assert len(attempts) == 1
    assert result.outcome == Outcome.ABORTED


def test_edit_with_retry_needs_at_least_one_attempt(w: World) -> None:
    with pytest.raises(ValueError):
        asyncio.run(edit_with_retry(w.a, ME, lambda tx: None, attempts=0))


def test_a_closed_replica_with_verdicts_still_queued_is_freed() -> None:
    # Keys, links, layers, claims, requests and per-document records are kept out
    # of the garbage collector (gc=False): none of them may ever close a reference
    # cycle, or a replica dropped with work in flight would never be freed.
    import gc
    import weakref

    store = MemoryStore()
    replica = Replica(store)
    space = Space(replica, "x")
    a, b = space.cell("a"), space.cell("b")
    a.set(1)
    for i in range(5):
        tx = space.edit()
        tx.write(b.doc_key, (VALUE,), i + tx.read(a.doc_key, (VALUE,)))
        tx.commit()
    assert 6 == replica.in_flight()  # verdicts queued on the mailbox, not pumped
    ref = weakref.ref(replica)
    replica.close()
    del replica, space, a, b, tx
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------- batches

THIRD = DocKey("sp", "third")
FOURTH = DocKey("sp", "fourth")


def test_a_batch_reaches_the_store_when_it_ends_and_each_commit_keeps_its_own_verdict(
    w: World,
) -> None:
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 1})
    b = w.replica()
    w.a.begin_batch()
    first = w.a.edit(ME)
    first.write(THIRD, ("n",), 10)  # reads nothing: cannot go stale
    p1 = first.commit()
    stale = w.a.edit(ME)
    stale.write(FOURTH, ("m",), stale.read(OTHER, ("n",)) + 1)
    p2 = stale.commit()
    built_on_first = w.a.edit(ME)
    built_on_first.write(DOC, ("n",), built_on_first.read(THIRD, ("n",)) + 1)
    p3 = built_on_first.commit()
    assert w.store.commits_evaluated == 2  # the two puts: the batch is still held back
    assert [nf.kind for nf in w.log(w.a)] == ["commit", "commit", "commit"]  # applied locally
    # Another session writes what `stale` read before the batch reaches the store.
    foreign = b.edit(ME)
    foreign.write(OTHER, ("n",), 5)
    foreign.commit()
    w.a.end_batch()
    assert w.store.commits_evaluated == 6
    w.pump()
    assert p1.result().ok
    assert isinstance(p2.result().error, ConflictError)
    assert p2.result().outcome is Outcome.STALE_BASIS
    # Built on `first`'s pending write, which was accepted: unaffected by `stale`.
    assert p3.result().ok
    assert w.store.read_durable(THIRD) == {"n": 10}
    assert w.store.read_durable(DOC) == {"n": 11}
    assert w.a.visible(THIRD) == {"n": 10}
    assert w.a.visible(FOURTH) is MISSING


def test_a_batch_of_accepted_commits_settles_each_in_order_with_or_without_callbacks(
    w: World,
) -> None:
    # A drain's verdicts: the replica takes a drain's accepted commits in one call
    # (`accept_runs`) and leaves the rest (a callback to run, a stale layer) to the
    # general delivery, in the same order.
    w.put(DOC, {"n": 0})
    order: list[str] = []
    w.a.begin_batch()
    txs = []

    def note(name: str) -> Callable[[Transaction, CommitResult], None]:
        return lambda tx, result: order.append(name)

    for name in ("plain", "plain-2", "callback", "plain-3", "awaited"):
        tx = w.a.edit(ME)
        tx.write(DOC, ("n",), tx.read(DOC, ("n",)) + 1)
        if name == "callback":
            tx.add_settle_callback(note(name))
        if name == "awaited":
            pending = tx.commit()
        else:
            tx.commit_detached(note(name))
        txs.append(tx)
    w.a.end_batch()
    assert all(tx.status == "committing" for tx in txs)
    w.pump()
    assert ["plain", "plain-2", "callback", "callback", "plain-3"] == order
    assert pending.result().ok
    seqs = [tx.result.seq for tx in txs if tx.result is not None and tx.result.seq is not None]
    assert 5 == len(seqs) and seqs == sorted(seqs) and len(set(seqs)) == 5
    assert all(tx.status == "committed" for tx in txs)
    assert 0 == w.a.in_flight()
    assert {"n": 5} == w.a.visible(DOC) == w.store.read_durable(DOC)

    bare = []  # no callback at all: settled by `accept_runs` alone
    calls: list[tuple[int, int]] = []
    real = w.a.accept_runs

    def spy(runs: Any, results: Any, start: int) -> None:
        calls.append((start, len(results) // 3))
        real(runs, results, start)

    w.a.accept_runs = spy  # type: ignore[method-assign]
    w.a.begin_batch()
    for _ in range(3):
        tx = w.a.edit(ME)
        tx.write(DOC, ("n",), tx.read(DOC, ("n",)) + 1)
        tx.commit_detached()
        bare.append(tx)
    w.a.end_batch()
    accepted = w.a.stats.accepted
    w.pump()
    assert [(0, 3)] == calls  # the three in one call
    assert all(tx.status == "committed" and tx.result is not None for tx in bare)
    assert 3 == w.a.stats.accepted - accepted
    assert {"n": 8} == w.a.visible(DOC) == w.store.read_durable(DOC)


def test_a_usual_commit_awaited_in_a_batch_is_settled_by_the_run_log_delivery(
    w: World,
) -> None:
    # A usual commit (one document read, one field of another written) made with
    # `commit()` in a batch: its `Pending` has no callback, so `accept_runs` resolves it
    # in place, with the verdict's seq; one with a done callback goes the general way,
    # and its callback runs once, in commit order.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"m": 0})
    calls: list[int] = []
    real = w.a.accept_runs

    def spy(runs: Any, results: Any, start: int) -> None:
        calls.append(start)
        real(runs, results, start)

    w.a.accept_runs = spy  # type: ignore[method-assign]
    general: list[int] = []
    real_accepted = w.a.on_accepted

    def spy_accepted(request: Any, seq: int, base_seq: int, value: Any) -> None:
        general.append(seq)
        real_accepted(request, seq, base_seq, value)

    w.a.on_accepted = spy_accepted  # type: ignore[method-assign]
    order: list[str] = []
    accepted = w.a.stats.accepted
    w.a.begin_batch()
    pendings = []
    for i in range(3):
        tx = w.a.edit(ME)
        tx.write(OTHER, ("m",), tx.read(DOC, ("n",)) + i + 1)
        pending = tx.commit()
        if i == 1:
            pending.add_done_callback(lambda p: order.append(f"called {p.result().seq}"))
        pendings.append((tx, pending))
    w.a.end_batch()
    assert all(not p.done() for _, p in pendings)
    w.pump()
    assert [0] == calls  # one delivery
    seqs = [p.result().seq for _, p in pendings]
    assert all(p.result().ok for _, p in pendings)
    numbered = [seq for seq in seqs if seq is not None]
    assert seqs == sorted(numbered) and len(set(seqs)) == 3
    assert [f"called {seqs[1]}"] == order
    assert [seqs[1]] == general  # only the one with a callback took the general way
    assert all(tx.status == "committed" and tx.result is p.result() for tx, p in pendings)
    assert 3 == w.a.stats.accepted - accepted
    assert 0 == w.a.in_flight()
    assert {"m": 4} == w.a.visible(OTHER) == w.store.read_durable(OTHER)
    w.a._check()


def test_a_commit_in_a_batch_built_on_a_rejected_one_is_rejected(w: World) -> None:
    w.put(DOC, {"n": 1})
    b = w.replica()
    w.a.begin_batch()
    reader = w.a.edit(ME)
    reader.write(OTHER, (), reader.read(DOC, ("n",)))
    p1 = reader.commit()
    dependent = w.a.edit(ME)
    dependent.write(THIRD, (), dependent.read(OTHER, ()))
    p2 = dependent.commit()
    foreign = b.edit(ME)
    foreign.write(DOC, ("n",), 2)
    foreign.commit()
    w.a.end_batch()
    w.pump()
    assert p1.result().outcome is Outcome.STALE_BASIS
    assert isinstance(p2.result().error, DependencyRejectedError)
    assert w.a.visible(OTHER) is MISSING
    assert w.a.visible(THIRD) is MISSING


def test_a_failing_callback_in_a_batch_delivery_leaves_the_rest_for_the_next_pump(
    w: World,
) -> None:
    settled: list[str] = []

    def boom(tx: Transaction, result: CommitResult) -> None:
        settled.append("boom")
        raise RuntimeError("callback failed")

    w.a.begin_batch()
    pendings = []
    for i, cb in enumerate([None, boom, None]):
        tx = w.a.edit(ME)
        tx.write(DocKey("sp", f"d{i}"), (), i)
        if cb is not None:
            tx.add_settle_callback(cb)

        def record(tx: Transaction, result: CommitResult, i: int = i) -> None:
            settled.append(f"tx{i}")

        tx.add_settle_callback(record)
        pendings.append(tx.done())
        tx.commit_detached()
    w.a.end_batch()
    with pytest.raises(RuntimeError, match="callback failed"):
        w.a.pump()
    assert settled == ["tx0", "boom", "tx1"]
    assert not pendings[2].done()
    assert len(w.a.mailbox) == 1
    w.a.pump()
    assert settled == ["tx0", "boom", "tx1", "tx2"]
    assert all(p.result().ok for p in pendings)


def test_waiting_on_a_verdict_inside_a_batch_sends_the_batch(w: World) -> None:
    w.a.begin_batch()
    tx = w.a.edit(ME)
    tx.write(DOC, (), 1)
    assert tx.commit().result().ok  # the mailbox drain sends the open batch first
    later = w.a.edit(ME)
    later.write(OTHER, (), 2)
    pending = later.commit()
    assert not pending.done()
    w.a.end_batch()
    w.pump()
    assert pending.result().ok
    assert w.store.read_durable(OTHER) == 2


def test_a_held_gate_holds_each_commit_of_a_batch(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        w.a.begin_batch()
        pendings = []
        for i in range(3):
            tx = w.a.edit(ME)
            tx.write(DocKey("sp", f"d{i}"), (), i)
            pendings.append(tx.commit())
        w.a.end_batch()
        assert gate.waiting() == 3
        gate.reject(1, Outcome.TERMINAL)
        gate.release()
        w.pump()
    assert [p.result().outcome for p in pendings] == [
        Outcome.OK,
        Outcome.TERMINAL,
        Outcome.OK,
    ]


def test_end_batch_without_begin_is_an_error(w: World) -> None:
    with pytest.raises(TransactionError, match="without begin_batch"):
        w.a.end_batch()


def test_a_batch_commit_applied_on_a_state_the_replica_never_saw_takes_the_stores_value(
    w: World,
) -> None:
    w.put(DOC, {"n": 1})
    c = w.replica()
    with w.store.testing.hold_loads(DOC) as loads:
        c.begin_batch()
        blind = c.edit(ME)
        blind.write(DOC, ("m",), 2)  # DOC is not loaded here: a blind write
        p1 = blind.commit()
        other = c.edit(ME)
        other.write(OTHER, (), 3)
        p2 = other.commit()
        assert c.visible(DOC) == {"m": 2}
        foreign = w.a.edit(ME)
        foreign.write(DOC, ("n",), 5)  # `c` does not hear of it: DOC is not loaded there
        foreign.commit()
        c.end_batch()
        w.pump()
        assert p1.result().seq is not None and p2.result().ok
        # The store applied the write on {"n": 5}, a state `c` never confirmed: the
        # verdict's value, not the replica's own layer, becomes the confirmed state.
        assert c.visible(DOC) == {"n": 5, "m": 2}
        loads.release()
    w.pump()
    assert c.visible(DOC) == {"n": 5, "m": 2}
    assert w.store.read_durable(DOC) == {"n": 5, "m": 2}


# --------------------------------------------------------------------------- memory


def test_an_accepted_commit_leaves_one_copy_of_the_document(w: World) -> None:
    # The replica used to keep its own copy of every written document next to the
    # store's equal one (184 bytes for {"value": n}): with no layer left it adopts the
    # store's value; while a later layer is pending it keeps its visible value.
    w.put(DOC, {"value": 0})
    with w.store.testing.hold_verdicts() as gate:
        first = w.a.edit(ME)
        first.write(DOC, (VALUE,), 1)
        first.commit()
        second = w.a.edit(ME)
        second.write(DOC, (VALUE,), 2)
        second.commit()
        gate.accept(0)
        w.pump()
        rec = w.a._docs[DOC]
        assert rec.confirmed is w.store._heads[DOC].value
        assert {"value": 1} == rec.confirmed
        assert {"value": 2} == rec.visible
        w.check()
        gate.accept(0)
        w.pump()
    assert rec.confirmed is rec.visible is w.store._heads[DOC].value
    assert {"value": 2} == rec.visible


def test_a_burst_of_commits_in_flight_leaves_no_big_table_once_answered(w: World) -> None:
    # A dict never shrinks: the table of commits in flight grown by a burst stayed
    # for the replica's life (37 bytes per commit of the largest burst).
    empty = sys.getsizeof({})
    pendings = []
    for i in range(500):
        tx = w.a.edit(ME)
        tx.write(DocKey("sp", f"d{i}"), (VALUE,), i)
        pendings.append(tx.commit())
    assert 500 == w.a.in_flight()
    w.pump()
    assert all(p.result().ok for p in pendings)
    assert 0 == w.a.in_flight()
    assert empty == sys.getsizeof(w.a._in_flight)


def _node_run(r: Replica, read: DocKey, write: DocKey, field: str) -> Transaction:
    """A node run's usual commit: one field of `write` from one field of `read`."""
    tx = r.edit(ME)
    tx.write(write, (field,), tx.read(read, ("n",)) + 1)
    tx.commit_detached()
    return tx


def test_a_batch_of_node_runs_reaches_the_store_as_one_run_log_with_the_same_verdicts(
    w: World,
) -> None:
    # The usual commits of a drain go as a run log (`submit_runs`): no request each,
    # one evaluation loop and one delivery; each is still decided as a request would be.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 1})
    w.put(THIRD, {"n": 1})
    b = w.replica()
    sent: list[int] = []
    submit_runs = w.store.submit_runs

    def spy(listener: Any, session_id: str, runs: list[Any]) -> bool:
        sent.append(len(runs))
        return submit_runs(listener, session_id, runs)

    w.store.submit_runs = spy  # type: ignore[method-assign]
    evaluated = w.store.commits_evaluated
    w.a.begin_batch()
    first = _node_run(w.a, DOC, OTHER, "m")  # accepted
    built_on = _node_run(w.a, OTHER, FOURTH, "m")  # built on `first`'s pending write
    stale = _node_run(w.a, THIRD, DOC, "m")  # THIRD is rewritten below before the store sees it
    after_stale = _node_run(w.a, DOC, FOURTH, "k")  # built on `stale`'s rejected write
    assert w.store.commits_evaluated == evaluated  # held back until the batch ends
    foreign = b.edit(ME)
    foreign.write(THIRD, ("n",), 5)
    foreign.commit()
    w.a.end_batch()
    assert sent == [4 * 12]  # one run log, four entries (RUN_WIDTH = 12)
    assert w.store.commits_evaluated == evaluated + 5
    w.pump()
    assert first.result is not None and first.result.ok
    assert built_on.result is not None and built_on.result.ok
    assert stale.result is not None and stale.result.outcome is Outcome.STALE_BASIS
    assert after_stale.result is not None
    assert isinstance(after_stale.result.error, DependencyRejectedError)
    assert (first.result.seq or 0) < (built_on.result.seq or 0)  # in commit order
    assert w.store.read_durable(OTHER) == {"n": 1, "m": 2} == w.a.visible(OTHER)
    assert w.store.read_durable(FOURTH) == {"m": 2}  # `after_stale`'s "k" is gone with it
    assert w.a.visible(FOURTH) == {"m": 2}
    assert w.a.visible(DOC) == {"n": 1} == w.store.read_durable(DOC)
    assert 0 == w.a.in_flight()


def _two_read_run(
    r: Replica, reads: tuple[DocKey, DocKey], write: DocKey, field: str
) -> Transaction:
    """A node run of two inputs: one field of `write` from one field of each of `reads`."""
    tx = r.edit(ME)
    tx.write(write, (field,), tx.read(reads[0], ("n",)) + tx.read(reads[1], ("n",)))
    tx.commit_detached()
    return tx


def test_two_read_node_runs_of_a_batch_keep_their_verdicts_in_the_run_log(w: World) -> None:
    # A node run of two inputs goes as a run log entry carrying both reads with no claim
    # objects; the store still checks each of the two against its basis, and the
    # verdicts are those of the requests.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 1})
    w.put(THIRD, {"n": 1})
    out, late = DocKey("sp", "out"), DocKey("sp", "late")
    for key in (FOURTH, out, late):
        w.put(key, {})  # (a write to an absent document goes as a request)
    b = w.replica()
    logs: list[list[Any]] = []
    submit_runs = w.store.submit_runs

    def spy(listener: Any, session_id: str, runs: list[Any]) -> bool:
        logs.append(list(runs))
        return submit_runs(listener, session_id, runs)

    w.store.submit_runs = spy  # type: ignore[method-assign]
    w.a.begin_batch()
    first = _two_read_run(w.a, (DOC, OTHER), FOURTH, "n")  # accepted
    built_on = _two_read_run(w.a, (FOURTH, DOC), OTHER, "m")  # on `first`'s pending write
    stale = _two_read_run(w.a, (DOC, THIRD), out, "n")  # its second read is overtaken
    overtaken = _two_read_run(w.a, (THIRD, OTHER), late, "m")  # its first read is
    after_stale = _two_read_run(w.a, (out, DOC), late, "k")  # on `stale`'s rejected write
    foreign = b.edit(ME)
    foreign.write(THIRD, ("n",), 5)
    foreign.commit()
    w.a.end_batch()
    (runs,) = logs
    assert [(DOC, OTHER), (FOURTH, DOC), (DOC, THIRD), (THIRD, OTHER), (out, DOC)] == [
        runs[i + 3][::2] for i in range(0, len(runs), 12)
    ]  # every entry carries its two reads, no claims (RUN_WIDTH = 12)
    w.pump()
    assert first.result is not None and first.result.ok
    assert built_on.result is not None and built_on.result.ok
    assert stale.result is not None and stale.result.outcome is Outcome.STALE_BASIS
    assert overtaken.result is not None and overtaken.result.outcome is Outcome.STALE_BASIS
    assert after_stale.result is not None
    assert isinstance(after_stale.result.error, DependencyRejectedError)
    assert w.store.read_durable(FOURTH) == {"n": 2}
    assert w.store.read_durable(OTHER) == {"n": 1, "m": 3} == w.a.visible(OTHER)
    assert w.store.read_durable(out) == {} == w.store.read_durable(late)
    assert 0 == w.a.in_flight()


def test_a_node_run_whose_written_document_moved_in_the_store_takes_the_stores_value(
    w: World,
) -> None:
    # The store keeps the replica's new value only when it was made from the store's
    # current one; here another session wrote another field of it first.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 1, "g": 0})
    b = w.replica()
    b.visible(OTHER)  # `b` holds OTHER: it hears of `a`'s commit
    w.a.begin_batch()
    run = _node_run(w.a, DOC, OTHER, "f")  # blind on OTHER: only DOC is read
    foreign = b.edit(ME)
    foreign.write(OTHER, ("g",), 7)
    foreign.commit()
    w.a.end_batch()
    w.pump()
    assert run.result is not None and run.result.ok
    assert {"n": 1, "g": 7, "f": 2} == w.store.read_durable(OTHER)
    assert {"n": 1, "g": 7, "f": 2} == w.a.visible(OTHER) == b.visible(OTHER)


def test_a_held_gate_holds_the_node_runs_of_a_batch_as_requests(w: World) -> None:
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        w.a.begin_batch()
        runs = [_node_run(w.a, DOC, DocKey("sp", f"out{i}"), "v") for i in range(3)]
        w.a.end_batch()
        assert 3 == gate.waiting()
        gate.reject(1, Outcome.TERMINAL)
        gate.release()
        w.pump()
    assert [tx.result.outcome for tx in runs if tx.result is not None] == [
        Outcome.OK,
        Outcome.TERMINAL,
        Outcome.OK,
    ]
    assert w.a.visible(DocKey("sp", "out1")) is MISSING
    assert {"v": 2} == w.store.read_durable(DocKey("sp", "out2"))


def test_a_failing_callback_in_a_run_log_delivery_leaves_the_rest_for_the_next_pump(
    w: World,
) -> None:
    w.put(DOC, {"n": 1})
    settled: list[str] = []

    def boom(tx: Transaction, result: CommitResult) -> None:
        settled.append("boom")
        raise RuntimeError("callback failed")

    w.a.begin_batch()
    txs = []
    for i, cb in enumerate([None, boom, None]):
        tx = w.a.edit(ME)
        tx.write(DocKey("sp", f"out{i}"), ("v",), tx.read(DOC, ("n",)))
        if cb is not None:
            tx.add_settle_callback(cb)
        tx.commit_detached()
        txs.append(tx)
    w.a.end_batch()
    with pytest.raises(RuntimeError, match="callback failed"):
        w.a.pump()
    assert settled == ["boom"]
    assert [tx.status for tx in txs] == ["committed", "committed", "committing"]
    assert len(w.a.mailbox) == 1
    w.a.pump()
    assert all(tx.status == "committed" for tx in txs)


def _direct_run(
    r: Replica,
    reads: tuple[DocKey, ...],
    write: DocKey,
    field: str,
    failed: list[tuple[Transaction, CommitResult]],
) -> int | CommitResult | object:
    """A direct run (`Replica.run_field`, no transaction): one field of `write` from the
    sum of field "n" of each of `reads`; its failure is appended to `failed`. Its source
    is the field's name."""

    def on_failure(tx: Transaction, result: CommitResult) -> None:
        failed.append((tx, result))

    places = tuple([(key, ("n",)) for key in reads])
    return r.run_field(
        places, write, (field,), lambda *vs: sum([v or 0 for v in vs]), ME, field, on_failure
    )  # fmt: skip


def test_direct_runs_of_a_run_log_settle_by_index_around_a_rejected_one(w: World) -> None:
    # A direct run is in flight with no transaction (a `SentRun`): an accepted one is
    # settled in place, a rejected one gets its transaction then, which settles as a
    # transaction run's would (its layer reverted, `on_failure` told, with its source).
    # The one after it, on another document, is still accepted; one built on it is not.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 1})
    w.put(THIRD, {"n": 1})
    out, late = DocKey("sp", "out"), DocKey("sp", "late")
    for key in (FOURTH, out, late):
        w.put(key, {})
    b = w.replica()
    failed: list[tuple[Transaction, CommitResult]] = []
    accepted = w.a.stats.accepted
    w.a.begin_batch()
    done = [
        _direct_run(w.a, (DOC,), FOURTH, "first", failed),  # accepted
        _direct_run(w.a, (DOC, THIRD), out, "stale", failed),  # THIRD overtaken below
        _direct_run(w.a, (OTHER, DOC, FOURTH), late, "after", failed),  # another document
        _direct_run(w.a, (out,), late, "built_on", failed),  # on `stale`'s rejected write
    ]
    assert 4 == w.a.in_flight()
    foreign = b.edit(ME)
    foreign.write(THIRD, ("n",), 5)
    foreign.commit()
    w.a.end_batch()
    w.pump()
    assert [RUN_DONE] * 4 == done
    assert ["stale", "built_on"] == [tx.source for tx, _ in failed]
    assert all(isinstance(tx, Transaction) and tx.status == "rejected" for tx, _ in failed)
    assert Outcome.STALE_BASIS is failed[0][1].outcome
    assert isinstance(failed[1][1].error, DependencyRejectedError)
    assert {"first": 1} == w.store.read_durable(FOURTH) == w.a.visible(FOURTH)
    assert {"after": 2} == w.store.read_durable(late) == w.a.visible(late)
    assert {} == w.store.read_durable(out) == w.a.visible(out)
    assert 0 == w.a.in_flight()
    assert (2, 2) == (w.a.stats.accepted - accepted, w.a.stats.rejected)


def test_direct_runs_held_at_a_verdict_gate_settle_through_their_requests(w: World) -> None:
    # A held gate keeps a drain's commits as requests: a direct run's verdict then comes
    # through `on_verdict`, which makes its transaction (accepted or rejected alike).
    w.put(DOC, {"n": 1})
    outs = [DocKey("sp", f"out{i}") for i in range(3)]
    for key in outs:
        w.put(key, {})
    failed: list[tuple[Transaction, CommitResult]] = []
    with w.store.testing.hold_verdicts() as gate:
        w.a.begin_batch()
        for i, key in enumerate(outs):
            _direct_run(w.a, (DOC,), key, f"v{i}", failed)
        w.a.end_batch()
        assert 3 == gate.waiting()
        gate.reject(1, Outcome.TERMINAL)
        gate.release()
        w.pump()
    assert [("v1", Outcome.TERMINAL)] == [(tx.source, r.outcome) for tx, r in failed]
    assert [{"v0": 1}, {}, {"v2": 1}] == [w.a.visible(key) for key in outs]
    assert [{"v0": 1}, {}, {"v2": 1}] == [w.store.read_durable(key) for key in outs]
    assert 0 == w.a.in_flight()


def test_accepted_direct_runs_adopt_their_layers_through_their_own_records(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usual verdict of a direct run adopts its layer through the record its
    # `SentRun` carries, with no lookup by key and no transaction made: two runs on one
    # document (its layers a tuple, then a deque) and one on another, all accepted.
    # The general path (`on_accepted`) gives the same values but makes the transaction.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"n": 2})
    out = DocKey("sp", "out")
    w.put(out, {})
    w.put(FOURTH, {})
    made: list[object] = []
    of_run = Transaction._of_run.__func__  # type: ignore[attr-defined]

    def spy(cls: type[Transaction], replica: Any, run: Any) -> Transaction:
        made.append(run.source)
        tx: Transaction = of_run(cls, replica, run)
        return tx

    monkeypatch.setattr(Transaction, "_of_run", classmethod(spy))
    failed: list[tuple[Transaction, CommitResult]] = []
    accepted = w.a.stats.accepted
    w.a.begin_batch()
    done = [
        _direct_run(w.a, (DOC,), out, "a", failed),
        _direct_run(w.a, (OTHER,), out, "b", failed),
        _direct_run(w.a, (DOC, OTHER), FOURTH, "c", failed),
    ]
    w.a.end_batch()
    w.pump()
    assert [RUN_DONE] * 3 == done
    assert [] == made == failed
    assert {"a": 1, "b": 2} == w.store.read_durable(out) == w.a.visible(out)
    assert {"c": 3} == w.store.read_durable(FOURTH) == w.a.visible(FOURTH)
    for key in (out, FOURTH):
        rec = w.a._docs[key]
        assert () == rec.layers and rec.confirmed is rec.visible and rec.key == key
    assert 0 == w.a.in_flight()
    assert 3 == w.a.stats.accepted - accepted
    w.check()


def test_a_direct_run_that_reads_the_document_it_writes_is_the_transactions(w: World) -> None:
    # A place in the written document is the transaction's (`run_field` declines it with
    # nothing done): alone, and among other reads, found by the document's record.
    w.put(DOC, {"n": 1})
    out = DocKey("sp", "out")
    w.put(out, {"n": 2})
    failed: list[tuple[Transaction, CommitResult]] = []
    w.a.begin_batch()
    done = [
        _direct_run(w.a, (out,), out, "one", failed),
        _direct_run(w.a, (DOC, out), out, "two", failed),
        _direct_run(w.a, (DOC, DOC, out), out, "three", failed),
    ]
    assert 0 == w.a.in_flight()
    w.a.end_batch()
    w.pump()
    assert [RUN_NONE] * 3 == done
    assert {"n": 2} == w.a.visible(out) == w.store.read_durable(out)
    assert [] == failed


def test_peek_starts_no_load_and_reads_what_visible_reads(w: World) -> None:
    w.put(DOC, {"v": 1})
    r = w.replica()
    assert None is r.peek(DOC)  # no record: nothing loaded, and peeking loads nothing
    assert not r.is_loaded(DOC)
    with w.store.testing.hold_loads(DOC) as gate:
        assert MISSING is r.visible(DOC)  # starts the load, held
        assert MISSING is r.peek(DOC)
        assert gate.waiting() == 1
        gate.release()
        w.pump()
    assert r.peek(DOC) == r.visible(DOC) == {"v": 1}
    Space(r, "sp").cell("doc").set(2)  # a local write not yet confirmed is visible
    assert r.peek(DOC) == r.visible(DOC)
    assert r.peek(DOC) != {"v": 1}

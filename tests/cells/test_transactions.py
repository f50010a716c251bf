"""Transactions: read logs, read-your-writes, the local basis check, settling, and outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from replica_support import taken_by

from cells import (
    MISSING,
    RETRYABLE,
    CommitRejected,
    CommitResult,
    ConflictError,
    DocKey,
    Identity,
    InvalidValueError,
    MemoryStore,
    Notification,
    Outcome,
    Pending,
    PreconditionFailedError,
    Replica,
    Space,
    Transaction,
    TransactionAborted,
    TransactionError,
    classify,
)
from cells.errors import (
    DependencyRejectedError,
    InconsistentBasisError,
    LivenessError,
    TerminalCommitError,
)

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
OTHER = DocKey("sp", "other")


class World:
    """A store and a replica whose notifications are recorded; invariants checked at teardown."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.replica = Replica(self.store)
        self.seen: list[Notification] = []
        self.replica.subscribe(self.seen.append)

    def edit(self) -> Transaction:
        return self.replica.edit(ME)

    def put(self, key: DocKey, doc: Any) -> None:
        tx = self.edit()
        tx.write(key, (), doc)
        pending = tx.commit()
        self.replica.pump()
        assert pending.result().ok
        self.seen.clear()

    def check(self) -> None:
        self.store._check()
        self.replica._check()
        for tx in list(self.replica._in_flight.values()):
            if isinstance(tx, Transaction):  # (a direct run's `SentRun` has no state to check)
                tx._check()


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.check()


class Recorder:
    """A settle callback that remembers each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Transaction, CommitResult]] = []

    def __call__(self, tx: Transaction, result: CommitResult) -> None:
        self.calls.append((tx, result))

    @property
    def outcomes(self) -> list[Outcome]:
        return [r.outcome for _, r in self.calls]


# --------------------------------------------------------------------------- reads


def test_read_of_an_absent_document_is_missing(w: World) -> None:
    tx = w.edit()
    assert MISSING is tx.read(DOC)
    assert MISSING is tx.read(DOC, ("a", "b"))
    tx.abort()


def test_reads_are_logged_deep_or_shallow(w: World) -> None:
    w.put(DOC, {"a": {"b": 1}})
    tx = w.edit()
    tx.read(DOC, ("a",))
    tx.read(DOC, ("a", "b"), shallow=True)
    tx.read(OTHER, (), log=False)
    assert tx.reads == [(DOC, ("a",), False), (DOC, ("a", "b"), True)]
    tx.abort()


def _claims(w: World, tx: Transaction) -> list[tuple[DocKey, tuple[Any, ...], bool]]:
    """The read claims `tx`'s commit sends to the store (its verdict held, then released)."""
    with w.store.testing.hold_verdicts() as gate:
        tx.commit()
        (held,) = gate.held()
    w.replica.pump()
    return [(c.key, c.path, c.shallow) for c in held.request.reads]


def test_a_repeated_read_is_logged_and_claimed_once(w: World) -> None:
    w.put(DOC, {"a": 1})
    tx = w.edit()
    assert [1, 1, 1] == [tx.read(DOC, ("a",)) for _ in range(3)]
    assert [(DOC, ("a",), False)] == tx.reads
    tx.write(OTHER, ("x",), 1)  # something to commit, so the claims reach the store
    assert [(DOC, ("a",), False)] == _claims(w, tx)


def test_a_read_without_log_then_with_log_is_logged(w: World) -> None:
    w.put(DOC, {"a": 1})
    tx = w.edit()
    tx.read(DOC, ("a",), log=False)
    assert [] == tx.reads
    tx.read(DOC, ("a",))
    assert [(DOC, ("a",), False)] == tx.reads
    tx.write(OTHER, ("x",), 1)
    assert [(DOC, ("a",), False)] == _claims(w, tx)


def test_a_logged_read_then_an_unlogged_one_stays_logged_once(w: World) -> None:
    w.put(DOC, {"a": 1, "b": 2})
    tx = w.edit()
    tx.read(DOC, ("a",))
    tx.read(DOC, ("a",), log=False)
    tx.read(DOC, ("b",), log=False)
    tx.read(DOC, ("a",))
    assert (DOC, ("a",), False) in tx.reads
    assert (DOC, ("b",), False) not in tx.reads
    tx.write(OTHER, ("x",), 1)
    assert [(DOC, ("a",), False), (DOC, ("b",), False)] == _claims(w, tx)


def test_a_read_after_a_write_of_the_same_place_keeps_one_claim_on_the_basis(w: World) -> None:
    w.put(DOC, {"a": 1})
    tx = w.edit()
    assert 1 == tx.read(DOC, ("a",))
    tx.write(DOC, ("a",), 2)
    assert 2 == tx.read(DOC, ("a",))  # read-your-writes, not the first read's value
    assert [(DOC, ("a",), False)] == tx.reads
    assert [(DOC, ("a",), False)] == _claims(w, tx)


def test_shallow_and_deep_reads_of_one_path_are_both_logged_once(w: World) -> None:
    w.put(DOC, {"a": [1, 2]})
    tx = w.edit()
    for shallow in (True, False, True, False):
        tx.read(DOC, ("a",), shallow=shallow)
    assert [(DOC, ("a",), True), (DOC, ("a",), False)] == tx.reads
    tx.write(OTHER, ("x",), 1)
    assert [(DOC, ("a",), False)] == _claims(w, tx)  # the deep read covers the shallow one


def test_reads_of_two_documents_interleaved_are_each_logged_once(w: World) -> None:
    w.put(DOC, {"a": 1, "b": 2})
    w.put(OTHER, {"a": 3})
    tx = w.edit()
    for key, field in [(DOC, "a"), (OTHER, "a"), (DOC, "a"), (DOC, "b"), (OTHER, "a")] * 2:
        tx.read(key, (field,))
    assert [(DOC, ("a",), False), (OTHER, ("a",), False), (DOC, ("b",), False)] == tx.reads
    tx.write(DocKey("sp", "out"), ("x",), 1)
    assert [
        (DOC, ("a",), False),
        (DOC, ("b",), False),
        (OTHER, ("a",), False),
    ] == _claims(w, tx)


def test_read_your_writes_on_sub_and_super_paths(w: World) -> None:
    w.put(DOC, {"a": {"b": 1, "c": 2}})
    tx = w.edit()
    tx.write(DOC, ("a", "b"), 10)
    assert tx.read(DOC) == {"a": {"b": 10, "c": 2}}
    assert tx.read(DOC, ("a",)) == {"b": 10, "c": 2}
    assert tx.read(DOC, ("a", "b")) == 10
    tx.write(DOC, ("a",), {"z": [1]})
    assert MISSING is tx.read(DOC, ("a", "b"))
    assert tx.read(DOC, ("a", "z")) == [1]
    tx.write(DOC, ("a", "z", 1), 2)
    assert tx.read(DOC) == {"a": {"z": [1, 2]}}
    tx.delete(DOC, ("a", "z"))
    assert tx.read(DOC) == {"a": {}}
    # Nothing is visible outside the transaction until it commits.
    assert w.replica.visible(DOC) == {"a": {"b": 1, "c": 2}}
    tx.abort()


def test_a_settled_transaction_refuses_reads_and_writes(w: World) -> None:
    tx = w.edit()
    tx.write(DOC, (), 1)
    tx.commit()
    with pytest.raises(TransactionError):
        tx.write(DOC, (), 2)
    with pytest.raises(TransactionError):
        tx.read(DOC)
    with pytest.raises(TransactionError):
        tx.commit()
    w.replica.pump()


# --------------------------------------------------------------------------- the write boundary


def _cycle() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["again"] = d
    return d


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        ({1, 2}, "set"),
        (object(), "object"),
        ({1: "x"}, "int"),
        (_cycle(), "dict"),
        (float("inf"), "float inf"),
        ({"k\udfff": 1}, "surrogate"),
        (2**64, "int"),
    ],
)
def test_an_invalid_write_raises_and_writes_nothing(w: World, bad: Any, type_name: str) -> None:
    w.put(DOC, {"a": 1})
    evaluated = w.store.commits_evaluated
    tx = w.edit()
    with pytest.raises(InvalidValueError) as info:
        tx.write(DOC, ("a",), {"ok": 1, "inner": [bad]})
    message = str(info.value)
    assert "write to sp/space/doc" in message
    assert "['inner'][0]" in message
    assert type_name in message
    assert tx.read(DOC) == {"a": 1}
    assert tx.commit().result().ok  # nothing staged: elided
    w.replica.pump()
    assert w.seen == []
    assert evaluated == w.store.commits_evaluated
    assert w.replica.visible(DOC) == {"a": 1}
    assert w.store.read_durable(DOC) == {"a": 1}


@pytest.mark.parametrize("path", [("a", True), ("a", 1.5), ("a", -1), ("a", None)])
def test_an_unusable_write_path_is_refused(w: World, path: tuple[Any, ...]) -> None:
    tx = w.edit()
    with pytest.raises(InvalidValueError):
        tx.write(DOC, path, 1)
    assert MISSING is tx.read(DOC)
    tx.abort()


def test_a_write_below_a_scalar_is_refused_and_leaves_the_working_copy(w: World) -> None:
    w.put(DOC, {"a": 1})
    tx = w.edit()
    with pytest.raises(InvalidValueError):
        tx.write(DOC, ("a", "b"), 2)
    assert tx.read(DOC) == {"a": 1}
    tx.abort()


def test_the_stored_value_is_independent_of_the_callers_object(w: World) -> None:
    original: dict[str, Any] = {"items": [1, {"x": 1}], "t": (1, 2), "f": 2.0}
    tx = w.edit()
    tx.write(DOC, (), original)
    original["items"][1]["x"] = 99
    original["items"].append("late")
    original["new"] = True
    tx.commit()
    w.replica.pump()
    expected = {"items": [1, {"x": 1}], "t": [1, 2], "f": 2}
    assert expected == w.replica.visible(DOC)
    assert expected == w.store.read_durable(DOC)
    assert type(w.store.read_durable(DOC)["f"]) is int


# --------------------------------------------------------------------------- commit, verdict


def test_commit_notifies_synchronously_then_the_verdict_arrives_on_pump(w: World) -> None:
    w.put(DOC, {"n": 1})
    tx = w.edit()
    tx.write(DOC, ("n",), 2)
    statuses: list[str] = []
    w.replica.subscribe(lambda nf: statuses.append(tx.status))
    pending = tx.commit()
    # The change was announced inside commit(), before it returned.
    assert len(w.seen) == 1
    nf = w.seen[0]
    assert nf.kind == "commit"
    assert nf.source is tx
    assert [(c.key, c.before, c.after) for c in nf.changes] == [(DOC, {"n": 1}, {"n": 2})]
    assert statuses == ["committing"]
    assert w.replica.visible(DOC) == {"n": 2}
    # The verdict waits for the mailbox.
    assert not pending.done()
    assert w.replica.in_flight() == 1
    assert w.replica.pump() == 1
    assert pending.done()
    result = pending.result()
    assert result.outcome == Outcome.OK
    assert result.ok
    assert result.seq == w.store.seq
    assert tx.status == "committed"
    assert w.store.read_durable(DOC) == {"n": 2}
    # An own acceptance that leaves the visible value as it was announces nothing more.
    assert [n.kind for n in w.seen] == ["commit"]


def test_writing_an_equal_value_is_elided(w: World) -> None:
    w.put(DOC, {"a": 1, "b": [1, 2], "c": {"x": 1, "y": 2}})
    evaluated = w.store.commits_evaluated
    tx = w.edit()
    tx.write(DOC, ("a",), 1.0)
    tx.write(DOC, ("b",), (1, 2.0))
    tx.write(DOC, ("c",), {"y": 2, "x": 1})
    pending = tx.commit()
    assert pending.done()
    assert pending.result().outcome == Outcome.OK
    assert w.seen == []
    w.replica.pump()
    assert evaluated == w.store.commits_evaluated
    assert w.replica.in_flight() == 0
    assert w.replica.stats.commits_elided == 1


def test_writing_a_value_then_back_inside_one_transaction_is_elided(w: World) -> None:
    w.put(DOC, {"a": 1})
    evaluated = w.store.commits_evaluated
    tx = w.edit()
    tx.write(DOC, ("a",), 2)
    tx.write(DOC, ("a",), 1)
    assert tx.commit().result().ok
    w.replica.pump()
    assert w.seen == []
    assert evaluated == w.store.commits_evaluated


def test_a_write_differing_only_in_bool_or_zero_sign_is_not_elided(w: World) -> None:
    w.put(DOC, {"flag": 1, "z": 0.0})
    tx = w.edit()
    tx.write(DOC, ("flag",), True)
    tx.write(DOC, ("z",), -0.0)
    tx.commit()
    assert len(w.seen) == 1
    w.replica.pump()
    assert w.store.read_durable(DOC)["flag"] is True


# --------------------------------------------------------------------------- basis


def test_local_change_to_a_read_document_makes_the_commit_stale(w: World) -> None:
    w.put(DOC, {"n": 1})
    tx = w.edit()
    assert tx.read(DOC, ("n",)) == 1
    tx.write(OTHER, (), "derived")
    other = w.edit()
    other.write(DOC, ("n",), 2)
    other.commit()
    w.replica.pump()
    w.seen.clear()
    evaluated = w.store.commits_evaluated
    pending = tx.commit()
    assert pending.done()
    result = pending.result()
    assert result.outcome == Outcome.STALE_BASIS
    assert isinstance(result.error, InconsistentBasisError)
    assert tx.status == "rejected"
    assert w.seen == []
    assert MISSING is w.replica.visible(OTHER)
    w.replica.pump()
    assert evaluated == w.store.commits_evaluated
    assert MISSING is w.store.read_durable(OTHER)


@pytest.mark.parametrize("case", ["accepted", "stale", "equal"])
def test_a_read_then_one_field_write_commit(w: World, case: str) -> None:
    # The usual computation's shape (one document read, one field of another written),
    # which `_commit` handles without its general loop: same outcomes as the general path.
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"v": 10, "keep": True})
    tx = w.edit()
    n = tx.read(DOC, ("n",))
    tx.write(OTHER, ("v",), 10 if case == "equal" else n + 100)
    if case == "stale":
        other = w.edit()
        other.write(DOC, ("n",), 2)
        other.commit()
        w.replica.pump()
    w.seen.clear()
    evaluated = w.store.commits_evaluated
    pending = tx.commit()
    w.replica.pump()
    result = pending.result()
    if case == "accepted":
        assert result.outcome == Outcome.OK and result.seq is not None
        assert [(c.key, c.before, c.after) for nf in w.seen for c in nf.changes] == [
            (OTHER, {"v": 10, "keep": True}, {"v": 101, "keep": True})
        ]
        assert w.store.read_durable(OTHER) == {"v": 101, "keep": True}
        assert w.store.commits_evaluated == evaluated + 1
    else:
        expected = Outcome.STALE_BASIS if case == "stale" else Outcome.OK
        assert result.outcome == expected
        assert w.seen == []  # nothing changed locally
        assert w.store.commits_evaluated == evaluated  # never reached the store
        assert w.store.read_durable(OTHER) == {"v": 10, "keep": True}
    assert w.replica.visible(OTHER) == w.store.read_durable(OTHER)


THIRD = DocKey("sp", "third")


def _two_input_commit(case: str) -> tuple[object, ...]:
    """Run one transaction that reads two documents and writes one field of a third
    (a node with two inputs), in the situation `case` names; return what anyone can
    observe of it: its outcome, the notifications, the request the store got, the
    durable and visible values."""
    w = World()
    w.put(DOC, {"n": 1})
    w.put(OTHER, {"m": 2})
    w.put(THIRD, {"v": 3, "keep": True})
    with w.store.testing.hold_verdicts() as gate:
        if case in ("pending-input", "equal-pending"):
            # A commit still in flight under an input (or under the output): the read
            # builds on it (deps), or the equal write shadows it.
            ahead = w.edit()
            ahead.write(
                OTHER if case == "pending-input" else THIRD,
                ("m" if case == "pending-input" else "v",),
                7,
            )
            ahead.commit()
        tx = w.edit()
        n = tx.read(DOC, ("n",))
        m = tx.read(OTHER, ("m",))
        tx.read(DOC, ("n",))  # a repeat: read at one place, however often
        equal = case in ("equal", "equal-pending")
        tx.write(THIRD, ("v",), (7 if case == "equal-pending" else 3) if equal else n + m + 100)
        if case.startswith("stale"):
            other = w.edit()
            other.write(OTHER if case == "stale-second" else DOC, ("x",), 0)
            other.commit()
        w.seen.clear()
        pending = tx.commit()
        held = [(h.request.reads, h.request.deps, h.request.writes) for h in gate.held()]
        gate.release()
    w.replica.pump()
    result = pending.result()
    changes = [
        (nf.kind, [(c.key, c.before, c.after, c.paths) for c in nf.changes]) for nf in w.seen
    ]
    observed = (
        result.outcome,
        None if result.error is None else str(result.error),
        changes,
        held,
        [w.store.read_durable(k) for k in (DOC, OTHER, THIRD)],
        [w.replica.visible(k) for k in (DOC, OTHER, THIRD)],
        w.replica.stats.commits_elided,
        w.replica.stats.local_stale,
    )
    w.store._check()
    w.replica._check()
    return observed


@pytest.mark.parametrize(
    "case", ["accepted", "stale-first", "stale-second", "equal", "equal-pending", "pending-input"]
)
def test_a_two_input_one_field_commit_does_what_the_general_path_does(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `Replica._commit_reads` shortcuts the general commit path for this shape: with it
    # and without it, everything observable must be the same.
    taken = taken_by(monkeypatch, "_commit_reads")
    shortcut = _two_input_commit(case)
    assert taken[-1] is (case != "equal-pending")  # a shadow write goes the general way
    monkeypatch.setattr(Replica, "_commit_reads", lambda self, *args: False)
    general = _two_input_commit(case)
    assert general == shortcut


def test_a_basis_that_changed_and_changed_back_is_still_stale(w: World) -> None:
    w.put(DOC, {"n": "A"})
    tx = w.edit()
    tx.read(DOC)
    tx.write(DOC, ("m",), 1)
    for value in ("B", "A"):
        other = w.edit()
        other.write(DOC, ("n",), value)
        other.commit()
    w.replica.pump()
    assert w.replica.visible(DOC) == {"n": "A"}
    w.seen.clear()
    result = tx.commit().result()
    assert result.outcome == Outcome.STALE_BASIS
    assert isinstance(result.error, InconsistentBasisError)
    assert w.seen == []
    assert w.replica.visible(DOC) == {"n": "A"}


def test_a_shallow_read_takes_a_basis_too(w: World) -> None:
    w.put(DOC, {"n": 1})
    tx = w.edit()
    tx.read(DOC, ("n",), shallow=True)
    tx.write(OTHER, (), 1)
    other = w.edit()
    other.write(DOC, ("n",), 2)
    other.commit()
    assert tx.commit().result().outcome == Outcome.STALE_BASIS
    w.replica.pump()


def test_a_blind_write_takes_no_basis(w: World) -> None:
    w.put(DOC, {"n": 1})
    tx = w.edit()
    tx.write(DOC, ("m",), 1)
    other = w.edit()
    other.write(DOC, ("n",), 2)
    other.commit()
    pending = tx.commit()
    w.replica.pump()
    assert pending.result().ok
    assert w.store.read_durable(DOC) == {"n": 2, "m": 1}


# --------------------------------------------------------------------------- abort and settling


def test_abort_settles_once_as_aborted_and_discards_writes(w: World) -> None:
    rec = Recorder()
    effects: list[str] = []
    tx = w.edit()
    tx.add_settle_callback(rec)
    tx.post_commit(lambda: effects.append("ran"))
    tx.write(DOC, (), {"a": 1})
    tx.abort("changed my mind")
    tx.abort("again")  # a second abort is a no-op
    assert rec.outcomes == [Outcome.ABORTED]
    result = rec.calls[0][1]
    assert isinstance(result.error, TransactionAborted)
    assert result.error.reason == "changed my mind"
    assert rec.calls[0][0] is tx
    assert tx.status == "aborted"
    assert tx.done().done()
    assert result is tx.done().result()
    assert effects == []
    assert w.seen == []
    with pytest.raises(TransactionError):
        tx.commit()
    w.replica.pump()
    assert MISSING is w.store.read_durable(DOC)
    assert w.store.commits_evaluated == 0


def test_settle_callback_added_after_settling_runs_at_once_exactly_once(w: World) -> None:
    tx = w.edit()
    tx.write(DOC, (), 1)
    tx.commit()
    w.replica.pump()
    rec = Recorder()
    tx.add_settle_callback(rec)
    assert rec.outcomes == [Outcome.OK]
    w.replica.pump()
    assert rec.outcomes == [Outcome.OK]


def test_post_commit_runs_once_only_after_success(w: World) -> None:
    effects: list[str] = []
    tx = w.edit()
    tx.post_commit(lambda: effects.append("first"))
    tx.write(DOC, (), 1)
    tx.commit()
    assert effects == []  # the verdict has not arrived yet
    w.replica.pump()
    assert effects == ["first"]
    tx.post_commit(lambda: effects.append("late"))  # already committed: runs now
    w.replica.pump()
    assert effects == ["first", "late"]


def test_post_commit_runs_for_an_elided_commit(w: World) -> None:
    effects: list[str] = []
    tx = w.edit()
    tx.post_commit(lambda: effects.append("ran"))
    tx.commit()
    assert effects == ["ran"]


def test_post_commit_never_runs_after_a_local_stale_basis(w: World) -> None:
    w.put(DOC, 1)
    effects: list[str] = []
    tx = w.edit()
    tx.read(DOC)
    tx.write(OTHER, (), 1)
    tx.post_commit(lambda: effects.append("ran"))
    other = w.edit()
    other.write(DOC, (), 2)
    other.commit()
    assert tx.commit().result().outcome == Outcome.STALE_BASIS
    tx.post_commit(lambda: effects.append("late"))
    w.replica.pump()
    assert effects == []


@pytest.mark.parametrize(
    ("outcome", "error_class"),
    [
        (Outcome.STALE_BASIS, ConflictError),
        (Outcome.PERMANENT, PreconditionFailedError),
        (Outcome.TERMINAL, TerminalCommitError),
        (Outcome.LIVENESS, LivenessError),
        (Outcome.NON_RETRYABLE, CommitRejected),
    ],
)
def test_each_rejection_settles_callbacks_once_with_its_outcome(
    w: World, outcome: Outcome, error_class: type[BaseException]
) -> None:
    rec = Recorder()
    effects: list[str] = []
    with w.store.testing.hold_verdicts() as gate:
        tx = w.edit()
        tx.add_settle_callback(rec)
        tx.post_commit(lambda: effects.append("ran"))
        tx.write(DOC, (), "x")
        pending = tx.commit()
        w.replica.pump()
        assert rec.calls == []
        assert gate.waiting() == 1
        gate.reject(0, outcome)
        assert gate.waiting() == 0
        w.replica.pump()
    w.replica.pump()
    assert [outcome] == rec.outcomes
    result = pending.result()
    assert outcome == result.outcome
    assert isinstance(result.error, error_class)
    assert outcome == classify(result.error)
    assert tx.status == "rejected"
    assert effects == []
    assert MISSING is w.replica.visible(DOC)
    assert MISSING is w.store.read_durable(DOC)


def test_gate_reject_needs_a_failure_outcome(w: World) -> None:
    with w.store.testing.hold_verdicts() as gate:
        tx = w.edit()
        tx.write(DOC, (), 1)
        tx.commit()
        with pytest.raises(ValueError):
            gate.reject(0, Outcome.OK)
    w.replica.pump()
    assert tx.done().result().ok


def test_one_failing_settle_callback_does_not_skip_its_siblings(w: World) -> None:
    first, last = Recorder(), Recorder()

    def boom(tx: Transaction, result: CommitResult) -> None:
        raise RuntimeError("callback failed")

    tx = w.edit()
    tx.add_settle_callback(first)
    tx.add_settle_callback(boom)
    tx.add_settle_callback(last)
    with pytest.raises(RuntimeError, match="callback failed"):
        tx.abort("stop")
    assert first.outcomes == [Outcome.ABORTED]
    assert last.outcomes == [Outcome.ABORTED]
    assert tx.done().done()


def test_failing_settle_callbacks_on_a_rejection_all_reach_the_caller(w: World) -> None:
    rec = Recorder()

    def boom(tx: Transaction, result: CommitResult) -> None:
        raise RuntimeError(f"failed on {result.outcome}")

    with w.store.testing.hold_verdicts() as gate:
        tx = w.edit()
        tx.add_settle_callback(boom)
        tx.add_settle_callback(rec)
        tx.add_settle_callback(boom)
        tx.write(DOC, (), 1)
        tx.commit()
        gate.reject(0, Outcome.TERMINAL)
        with pytest.raises(ExceptionGroup) as info:
            w.replica.pump()
    assert len(info.value.exceptions) == 2
    assert rec.outcomes == [Outcome.TERMINAL]
    assert tx.status == "rejected"
    assert MISSING is w.replica.visible(DOC)


def test_commit_detached_calls_on_failure_only_for_a_failed_commit(w: World) -> None:
    settled, failed = Recorder(), Recorder()
    with w.store.testing.hold_verdicts() as gate:
        ok = w.edit()
        ok.write(DOC, (), 1)
        ok.commit_detached(settled, on_failure=failed)
        bad = w.edit()
        bad.write(OTHER, (), 2)
        bad.commit_detached(settled, on_failure=failed)
        gate.accept(0)
        gate.reject(0, Outcome.TERMINAL)
        w.replica.pump()
    w.replica.pump()
    assert settled.outcomes == [Outcome.OK, Outcome.TERMINAL]
    assert failed.outcomes == [Outcome.TERMINAL]  # after the settle callbacks, once
    assert (ok.status, bad.status) == ("committed", "rejected")


def test_commit_detached_calls_neither_callback_for_a_commit_settled_at_once(w: World) -> None:
    w.put(DOC, 1)
    settled, failed = Recorder(), Recorder()
    elided = w.edit()
    elided.write(DOC, (), 1)  # equal to the visible value: elided
    elided.commit_detached(settled, on_failure=failed)
    assert elided.result is not None and elided.result.outcome is Outcome.OK
    stale = w.edit()
    stale.read(DOC)
    w.put(DOC, 2)  # the basis moves before the commit
    stale.write(OTHER, (), "x")
    stale.commit_detached(settled, on_failure=failed)
    assert stale.result is not None and stale.result.outcome is Outcome.STALE_BASIS
    w.replica.pump()
    assert settled.calls == [] and failed.calls == []  # the caller reads `result`


def test_a_failing_on_failure_callback_reaches_the_caller_after_the_settle_callbacks(
    w: World,
) -> None:
    rec = Recorder()

    def boom(tx: Transaction, result: CommitResult) -> None:
        raise RuntimeError(f"on_failure saw {result.outcome}")

    with w.store.testing.hold_verdicts() as gate:
        tx = w.edit()
        tx.write(DOC, (), 1)
        tx.commit_detached(rec, on_failure=boom)
        gate.reject(0, Outcome.PERMANENT)
        with pytest.raises(RuntimeError, match="on_failure saw"):
            w.replica.pump()
    assert rec.outcomes == [Outcome.PERMANENT]
    assert tx.status == "rejected"


# --------------------------------------------------------------------------- create-only


def _create(w: World, value: Any) -> CommitResult:
    tx = w.edit()
    tx.create_only(DOC)
    tx.write(DOC, (), value)
    pending = tx.commit()
    w.replica.pump()
    return pending.result()


def test_a_second_create_of_the_same_document_fails_permanent(w: World) -> None:
    assert _create(w, {"v": 1}).ok
    second = _create(w, {"v": 2})
    assert second.outcome == Outcome.PERMANENT
    assert isinstance(second.error, PreconditionFailedError)
    assert w.store.read_durable(DOC) == {"v": 1}
    assert w.replica.visible(DOC) == {"v": 1}


def test_create_only_still_fails_after_the_document_is_deleted(w: World) -> None:
    assert _create(w, {"v": 1}).ok
    tx = w.edit()
    tx.delete(DOC)
    tx.commit()
    w.replica.pump()
    assert MISSING is w.store.read_durable(DOC)
    again = _create(w, {"v": 3})
    assert again.outcome == Outcome.PERMANENT
    assert isinstance(again.error, PreconditionFailedError)
    assert MISSING is w.store.read_durable(DOC)


def test_create_only_from_another_replica_fails_permanent(w: World) -> None:
    assert _create(w, 1).ok
    other = Replica(w.store)
    tx = other.edit(ME)
    tx.create_only(DOC)
    tx.write(DOC, (), 2)
    pending = tx.commit()
    other.pump()
    w.replica.pump()
    assert pending.result().outcome == Outcome.PERMANENT
    other._check()


# --------------------------------------------------------------------------- classify


def test_classify_is_total() -> None:
    class Fresh(Exception):
        pass

    class FreshRejection(CommitRejected):
        pass

    class MyConflict(ConflictError):
        pass

    assert classify(None) == Outcome.OK
    assert classify(Fresh()) == Outcome.NON_RETRYABLE
    assert classify(FreshRejection("?")) == Outcome.NON_RETRYABLE
    assert classify(CommitRejected("?")) == Outcome.NON_RETRYABLE
    assert classify(ValueError()) == Outcome.NON_RETRYABLE
    assert classify(KeyboardInterrupt()) == Outcome.NON_RETRYABLE
    assert classify(MyConflict("?")) == Outcome.STALE_BASIS


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ConflictError("c"), Outcome.STALE_BASIS),
        (InconsistentBasisError("i"), Outcome.STALE_BASIS),
        (DependencyRejectedError("d"), Outcome.STALE_BASIS),
        (PreconditionFailedError("p"), Outcome.PERMANENT),
        (TerminalCommitError("t"), Outcome.TERMINAL),
        (LivenessError("l"), Outcome.LIVENESS),
        (TransactionAborted("a"), Outcome.ABORTED),
    ],
)
def test_classify_maps_each_rejection_class(error: BaseException, outcome: Outcome) -> None:
    assert outcome == classify(error)


def test_only_stale_basis_and_liveness_are_retryable() -> None:
    assert frozenset({Outcome.STALE_BASIS, Outcome.LIVENESS}) == RETRYABLE


# --------------------------------------------------------------------------- Pending


def test_commit_is_awaitable_inside_asyncio_run(w: World) -> None:
    async def main() -> CommitResult:
        tx = w.edit()
        tx.write(DOC, (), {"async": True})
        return await tx.commit()

    result = asyncio.run(main())
    assert isinstance(result, CommitResult)
    assert result.ok
    assert w.store.read_durable(DOC) == {"async": True}


def test_a_held_verdict_resolves_an_await_when_released(w: World) -> None:
    async def main() -> CommitResult:
        gate = w.store.testing.hold_verdicts()
        tx = w.edit()
        tx.write(DOC, (), 1)
        pending = tx.commit()
        asyncio.get_running_loop().call_soon(gate.release)
        return await pending

    assert asyncio.run(main()).ok


def test_wait_blocks_a_plain_script_until_the_verdict(w: World) -> None:
    tx = w.edit()
    tx.write(DOC, (), 1)
    pending: Pending[CommitResult] = tx.commit()
    result = pending.wait(timeout=5)
    assert result.ok
    assert pending.done()


def test_wait_times_out_while_a_gate_holds_the_verdict(w: World) -> None:
    with w.store.testing.hold_verdicts():
        tx = w.edit()
        tx.write(DOC, (), 1)
        pending = tx.commit()
        with pytest.raises(TimeoutError):
            pending.wait(timeout=0.01)
        with pytest.raises(TransactionError):
            pending.result()
    assert pending.wait(timeout=5).ok


def test_write_then_delete_in_one_transaction_leaves_the_created_document() -> None:
    # Found by the store conformance machine (nightly): the write created the
    # document, the delete emptied it; the replica showed MISSING, not {}.
    store = MemoryStore()
    sp = Space(store, "x")
    key = sp.cell("fresh").doc_key
    tx = sp.edit()
    tx.write(key, ("b",), 0)
    tx.write(key, ("b",), MISSING)
    assert {} == tx.read(key, ())
    tx.commit()
    assert {} == sp.replica.visible(key)
    sp.replica.pump()
    assert {} == store.read_durable(key)
    sp.replica._check()
    store._check()


def test_a_commit_in_flight_keeps_no_working_copies_or_read_log(w: World) -> None:
    # A drain keeps every commit it made in flight until the verdicts arrive: what
    # the request and layers already carry is dropped when the commit is sent.
    w.put(DOC, {"n": 1})
    with w.store.testing.hold_verdicts() as gate:
        tx = w.edit()
        n = tx.read(DOC, ("n",))
        tx.write(OTHER, (), {"m": n + 1})
        assert tx.reads == [(DOC, ("n",), False)]
        pending = tx.commit()
        assert tx.status == "committing"
        assert tx.reads == [] and tx.documents() == {}
        assert w.replica.visible(OTHER) == {"m": 2}  # the layer holds the write
        gate.accept(0)
        w.replica.pump()
    assert pending.result().ok
    assert w.store.read_durable(OTHER) == {"m": 2}

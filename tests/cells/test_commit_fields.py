"""A transaction that only wrote, one top-level field per document (`Replica._commit_fields`):
the shortcut must be observably the general commit path."""

from __future__ import annotations

from typing import Any

import pytest
from replica_support import taken_by

from cells import MISSING, DocKey, Identity, MemoryStore, Notification, Outcome, Replica

ME = Identity("local", "local")
A = DocKey("sp", "a")
B = DocKey("sp", "b")
C = DocKey("sp", "c")
NEW = DocKey("sp", "new")

CASES = [
    "changed",  # three documents, each a new value
    "one-equal",  # one of them equal to what is there, nothing pending: not staged
    "all-equal",  # every write equal: the commit is elided
    "equal-pending",  # one equal to a pending layer's value: kept as a shadow write
    "pending-under",  # one written over a pending layer of another value
    "deleted",  # one field deleted (MISSING)
    "rejected",  # the store rejects it: the layers are dropped and reverted
    "one-document",  # one document, in a batch (where `_commit_write` declines)
    "two-documents",
    "other-field",  # a field other than "value", beside it
    "created",  # a document not there yet: not this shape (the general path)
    "read",  # one document also read: not this shape
    "deeper",  # a write below a field: not this shape
]
TAKEN = {"created": False, "read": False, "deeper": False}


def _write_only_commit(case: str, *, heard: bool = True) -> tuple[object, ...]:
    """One transaction of `case`'s writes on documents A, B, C (each {"value": ...}); what
    anyone can observe of it: outcome, notifications, held requests, durable and visible
    values, counted work. `heard`: a subscriber hears the replica's notifications (else
    nobody does: the replica only counts them)."""
    store = MemoryStore()
    replica = Replica(store, session_id="me")
    seen: list[Notification] = []
    if heard:
        replica.subscribe(seen.append)
    setup = replica.edit(ME)
    for key, n in ((A, 1), (B, 2), (C, 3)):
        setup.write(key, (), {"value": n, "keep": True})
    setup.commit()
    replica.pump()
    writes: dict[DocKey, Any] = {A: 10, B: 20, C: 30}
    if case == "one-equal":
        writes[B] = 2
    elif case == "all-equal":
        writes = {A: 1, B: 2, C: 3}
    elif case == "deleted":
        writes[C] = MISSING
    elif case == "one-document":
        writes = {B: 20}
    elif case == "two-documents":
        writes = {A: 10, C: 30}
    elif case == "created":
        writes[NEW] = 40
    with store.testing.hold_verdicts() as gate:
        if case in ("equal-pending", "pending-under"):
            ahead = replica.edit(ME)
            ahead.write(B, ("value",), 7)
            ahead.commit()
            if case == "equal-pending":
                writes[B] = 7
        seen.clear()
        if case == "one-document":
            replica.begin_batch()
        tx = replica.edit(ME)
        if case == "read":
            tx.read(A, ("keep",))
        for key, value in writes.items():
            field = "other" if case == "other-field" and key == C else "value"
            path: tuple[str, ...] = ("sub", "deep") if case == "deeper" and key == A else (field,)
            tx.write(key, path, value)
        pending = tx.commit()
        if case == "one-document":
            replica.end_batch()
        held = [(h.request.reads, h.request.deps, h.request.writes) for h in gate.held()]
        if case == "rejected":
            gate.reject(len(gate.held()) - 1, Outcome.STALE_BASIS)
        gate.release()
    replica.pump()
    result = pending.result()
    store._check()
    replica._check()
    return (
        result.outcome,
        None if result.error is None else str(result.error),
        [
            (nf.kind, [(c.key, c.before, c.after, c.paths) for c in nf.changes], nf.source is tx)
            for nf in seen
        ],
        held,
        [store.read_durable(k) for k in (A, B, C, NEW)],
        [replica.visible(k) for k in (A, B, C, NEW)],
        replica.stats,
    )


@pytest.mark.parametrize("heard", [True, False], ids=["heard", "alone"])
@pytest.mark.parametrize("case", CASES)
def test_a_write_only_commit_does_what_the_general_path_does(
    case: str, heard: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = taken_by(monkeypatch, "_commit_fields")
    shortcut = _write_only_commit(case, heard=heard)
    assert taken, "the commit never reached `_commit_fields`"
    assert taken[-1] is TAKEN.get(case, True)
    monkeypatch.setattr(Replica, "_commit_fields", lambda self, *args: False)
    general = _write_only_commit(case, heard=heard)
    assert general == shortcut

"""An accepted SQLite commit of several documents is answered with `on_accepted_many`
(values and base seqs in write order, no `Verdict`): the replica must end exactly as
`on_verdict` of the same verdict leaves it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest
from sqlite_support import Make, open_stores

from cells import MISSING, DocKey, Identity, Notification, Replica, SQLiteStore
from cells._store import CommitRequest, Verdict

ME = Identity("local", "local")
A, B, C, NEW = (DocKey("sp", name) for name in ("a", "b", "c", "new"))
WAIT = 20.0

CASES = [
    "plain",  # three documents, each a new value
    "pipelined",  # two commits of the same documents in flight (two layers each)
    "deleted",  # one field deleted (MISSING)
    "create-only",  # a document created by the commit (create-only)
    "twice",  # one document written twice: answered with a `Verdict`
    "rejected",  # a read that moved: rejected
    "foreign",  # another replica on the same store hears the commit
]


@pytest.fixture
def stores() -> Iterator[Make]:
    with open_stores(synchronous="OFF") as make:
        yield make


def _old_way(
    self: Replica, request: CommitRequest, seq: int, values: list[Any], base_seqs: list[int]
) -> None:
    """The answer as before: `on_verdict` of the `Verdict` with its dictionaries."""
    keys = [w.key for w in request.writes]
    docs = dict(zip(keys, values, strict=True))
    self.on_verdict(request, Verdict(seq, docs, base_seqs=dict(zip(keys, base_seqs, strict=True))))


def _state(replica: Replica, keys: tuple[DocKey, ...]) -> list[object]:
    out: list[object] = []
    for key in keys:
        rec = replica._docs.get(key)
        if rec is None:
            out.append(None)
            continue
        layers = [(lay.seq, lay.value) for lay in rec.layers] if rec.layers else []
        out.append((rec.key, rec.confirmed, rec.visible, rec.confirmed_seq, layers))
    return out


def _set_up(make: Make, path: FsPath) -> tuple[SQLiteStore, Replica, list[Notification]]:
    """A store on a fresh file, a replica that has committed A, B and C (each {"value": n,
    "keep": True}), and what its subscriber hears."""
    store = make(path)
    replica = Replica(store, session_id="me")
    seen: list[Notification] = []
    replica.subscribe(seen.append)
    setup = replica.edit(ME)
    for key, n in ((A, 1), (B, 2), (C, 3)):
        setup.write(key, (), {"value": n, "keep": True})
    setup.commit()
    assert store.flush(WAIT)
    replica.pump()
    return store, replica, seen


def _run(case: str, make: Make, path: FsPath) -> tuple[object, ...]:
    """`case`'s commits on a fresh file; everything anyone can observe of them."""
    store, replica, seen = _set_up(make, path)
    other = Replica(store, session_id="other") if case == "foreign" else None
    if other is not None:
        other.sync((A, B, C))
        assert store.flush(WAIT)
        other.pump()
    for key in (A, B, C):  # (committed once more: the writer remembers their heads)
        tx = replica.edit(ME)
        tx.write(key, ("value",), 0)
        tx.commit()
    assert store.flush(WAIT)
    replica.pump()
    seen.clear()
    results = []
    rival = None
    if case == "rejected":
        rival = Replica(store, session_id="rival")
        rival.sync((A,))
        assert store.flush(WAIT)
        rival.pump()
    for n in range(2 if case == "pipelined" else 1):
        tx = replica.edit(ME)
        if case == "rejected":
            tx.read(A, ("value",))
        if case == "create-only":
            tx.create_only(NEW)
            tx.write(NEW, (), {"value": 40})
        tx.write(C, ("value",), 30 + n)
        tx.write(A, ("value",), MISSING if case == "deleted" else 10 + n)
        tx.write(B, ("value",), 20 + n)
        if case == "twice":
            tx.write(B, ("keep",), False)
        if rival is not None:  # (A moves under the read before the commit is sent)
            moved = rival.edit(ME)
            moved.write(A, ("value",), -1)
            moved.commit()
            assert store.flush(WAIT)
        tx.commit()
        results.append(tx)
    assert store.flush(WAIT)
    mid = _state(replica, (A, B, C, NEW))
    replica.pump()
    keys = (A, B, C, NEW)
    durable = [store.read_durable(key) for key in keys]
    foreign: list[object] = []
    if other is not None:
        other.pump()
        foreign = [other._docs[key].confirmed for key in (A, B, C)]
    replica._check()
    return (
        [
            (t.status, t.result and (t.result.outcome, t.result.seq, str(t.result.error)))
            for t in results
        ],
        [(note.kind, [(c.key, c.before, c.after) for c in note.changes]) for note in seen],
        mid,
        _state(replica, keys),
        durable,
        foreign,
        replica.stats.accepted,
        replica.stats.rejected,
    )


@pytest.mark.parametrize("case", CASES)
def test_an_accepted_commit_of_several_documents_ends_as_its_verdict_would(
    case: str, stores: Make, tmp_path: FsPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = Replica.on_accepted_many
    calls: list[int] = []

    def counting(self: Replica, request: CommitRequest, *args: Any) -> None:
        calls.append(len(request.writes))
        many(self, request, *args)

    monkeypatch.setattr(Replica, "on_accepted_many", counting)
    new = _run(case, stores, tmp_path / "new.db")
    # (The setup's commit of the three documents, then the case's own, if accepted.)
    ours = [] if case in ("twice", "rejected") else [4 if case == "create-only" else 3]
    assert [3, *ours * (2 if case == "pipelined" else 1)] == calls
    monkeypatch.setattr(Replica, "on_accepted_many", _old_way)
    old = _run(case, stores, tmp_path / "old.db")
    assert old == new


def _not_on_its_base(make: Make, path: FsPath, *, old: bool) -> tuple[object, ...]:
    """A commit of C, A, B answered with A's base seq not the replica's confirmed one
    (the store applied A's write on a state the replica has not heard of): C is adopted,
    A and B are decided as `on_verdict` decides them."""
    store, replica, seen = _set_up(make, path)
    seen.clear()
    gate = store.testing.hold_verdicts()
    tx = replica.edit(ME)
    for key, n in ((C, 30), (A, 10), (B, 20)):
        tx.write(key, ("value",), n)
    tx.commit()
    (held,) = gate.held()
    docs = replica._docs
    values: list[Any] = [{"value": 30, "keep": True}, {"value": 10, "keep": 9}]
    values.append({"value": 20, "keep": True})
    bases = [docs[C].confirmed_seq, docs[A].confirmed_seq + 1, docs[B].confirmed_seq]
    if old:
        _old_way(replica, held.request, 7, values, bases)
    else:
        replica.on_accepted_many(held.request, 7, values, bases)
    gate.reject(0)  # (its second answer: the replica has settled it, and ignores it)
    replica.pump()
    replica._check()
    return (
        (tx.status, tx.result),
        [(note.kind, [(c.key, c.before, c.after) for c in note.changes]) for note in seen],
        _state(replica, (A, B, C)),
        replica.stats.accepted,
    )


def test_a_document_not_on_the_state_its_write_applied_on_is_decided_as_its_verdict_would(
    stores: Make, tmp_path: FsPath
) -> None:
    new = _not_on_its_base(stores, tmp_path / "new.db", old=False)
    assert new == _not_on_its_base(stores, tmp_path / "old.db", old=True)
    # (A's stored value, not its layer's, is what the replica now holds, and says so.)
    notes = new[1]
    assert isinstance(notes, list)
    assert ("integrate", [(A, {"value": 10, "keep": True}, {"value": 10, "keep": 9})]) in notes

"""Commit staging (`cells._staging`): what a commit claims and builds on."""

from __future__ import annotations

from cells import DocKey, Identity, MemoryStore, Outcome, Replica

ME = Identity("local", "local")


def test_a_commit_reading_documents_with_pending_writes_names_every_commit_it_built_on() -> None:
    replica = Replica(MemoryStore())
    keys = [DocKey("sp", f"d{i}") for i in range(20)]
    with replica.store.testing.hold_verdicts() as gate:
        for i, key in enumerate(reversed(keys)):  # local seqs 1..20, in reverse key order
            tx = replica.edit(ME)
            tx.write(key, ("v",), i)
            tx.commit()
        tx = replica.edit(ME)
        tx.write(keys[0], ("v",), 99)  # a second pending layer on d0: seqs 20 and 21
        tx.commit()
        reader = replica.edit(ME)
        total = sum(reader.read(key, ("v",)) for key in keys)
        reader.write(DocKey("sp", "sum"), ("v",), total)
        pending = reader.commit()
        request = gate.held()[-1].request
    assert tuple(range(1, 22)) == request.deps  # ascending, each once
    assert [(key, ("v",)) for key in keys] == [(c.key, c.path) for c in request.reads]
    replica.pump()
    assert Outcome.OK == pending.result().outcome


def test_a_read_only_commit_whose_basis_moved_is_stale() -> None:
    replica = Replica(MemoryStore())
    doc = DocKey("sp", "d")
    reader = replica.edit(ME)
    reader.read(doc, ("v",))
    writer = replica.edit(ME)
    writer.write(doc, ("v",), 1)
    writer.commit()
    pending = reader.commit()
    assert Outcome.STALE_BASIS == pending.result().outcome
    replica.pump()

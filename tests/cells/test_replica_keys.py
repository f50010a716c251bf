"""One key object per document (`Replica.held_key`, `DocRecord.key`).

A replica's record keeps the key of its document once loaded (which is also its
loaded flag); callers that keep a key for long ask for that object instead of keeping
an equal copy of their own (56 bytes per copy).
"""

from __future__ import annotations

from cells import DocKey, Identity, MemoryStore, Replica

ME = Identity("local", "local")


def _key() -> DocKey:
    # A new object each call, equal each time (as `Link.key` makes them).
    return DocKey("sp", "".join(["d", "oc"]))


def test_held_key_is_the_key_the_document_was_loaded_with() -> None:
    replica = Replica(MemoryStore())
    first, other = _key(), _key()
    assert first == other and first is not other
    replica.visible(first)  # loads it (absent: loaded all the same)
    assert replica.is_loaded(other)
    assert replica.held_key(other) is first
    assert replica.held_key(first) is first
    replica._check()


def test_held_key_is_the_given_key_without_a_record() -> None:
    replica = Replica(MemoryStore())
    key = _key()
    assert replica.held_key(key) is key
    assert not replica.is_loaded(key)


def test_held_key_is_the_given_key_while_the_load_waits_then_the_loaded_one() -> None:
    store = MemoryStore()
    writer, reader = Replica(store), Replica(store)
    tx = writer.edit(ME)
    tx.write(_key(), ("value",), 1)
    tx.commit()
    writer.pump()
    first, later = _key(), _key()
    with store.testing.hold_loads(first) as gate:
        reader.visible(first)  # the load waits: a record, not loaded
        assert gate.waiting() == 1
        assert not reader.is_loaded(first)
        assert reader.held_key(later) is later
    reader.pump()
    assert reader.is_loaded(later)
    assert reader.visible(later) == {"value": 1}
    held = reader.held_key(later)
    assert held == later and held is not later  # the object the load arrived with
    reader._check()


def test_a_verdict_marks_a_document_written_while_its_load_waited_loaded() -> None:
    store = MemoryStore()
    replica = Replica(store)
    key = _key()
    with store.testing.hold_loads(key):
        tx = replica.edit(ME)
        tx.write(key, ("value",), 7)  # a blind write: the document is not loaded yet
        tx.commit()
        replica.pump()
        assert replica.is_loaded(key)  # the verdict carried its state
        assert replica.held_key(_key()) is key
    replica.pump()
    assert replica.visible(_key()) == {"value": 7}
    replica._check()

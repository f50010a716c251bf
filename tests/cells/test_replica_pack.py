"""Packed documents (`Replica.pack`): idle documents kept as bytes, decoded on first use.

A packed document must read back equal to what the store holds, whatever changed it
while it was packed (a foreign commit, a load), and every change to it must carry
its old value decoded, so readers compare values, never bytes.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from cells import (
    DocKey,
    Identity,
    Link,
    MemoryStore,
    Notification,
    Replica,
    Space,
    SQLiteStore,
    StoreBase,
    entity_id,
    value_equal,
)
from cells._codec import pack_value, unpack_value
from scheduler import Scheduler

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
OTHER = DocKey("sp", "other")

ODD: Any = {
    "link": Link("sp", "of:target", "user", ("a", 0)),
    "entity": Link("sp", entity_id("some cause")),
    "internal": Link("sp", "cw:" + entity_id("another")[3:], "session"),
    "not base32": Link("sp", "of:" + "1" * 52),
    "upper": Link("sp", "of:" + "A" * 52),
    "unicode": Link("sp", "é" * 55),
    "neg": -0.0,
    "/": {"/": "a dict whose only key is a slash"},
    "list": [1, 2.5, None, True, "text", [], {}],
    "big": 2**53,
}


def _commit(r: Replica, key: DocKey, path: tuple[Any, ...], value: Any) -> None:
    tx = r.edit(ME)
    tx.write(key, path, value)
    tx.commit()


def _pump(*rs: Replica, store: StoreBase | None = None) -> None:
    for _ in range(20):
        flush = getattr(store, "flush", None)
        if flush is not None:
            assert flush(30.0)
        if not sum(r.pump() for r in rs):
            return


def _packed(r: Replica, key: DocKey) -> bool:
    return type(r._docs[key].visible) is bytes


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreBase]:
    s: StoreBase = (
        MemoryStore()
        if request.param == "memory"
        else SQLiteStore(tmp_path / "pack.db", poll_interval=0)
    )
    yield s
    s.close()


def test_pack_value_round_trips_every_kind_of_value() -> None:
    back = unpack_value(pack_value(ODD))
    assert value_equal(ODD, back)
    assert math.copysign(1.0, back["neg"]) == -1.0
    for name in ("link", "entity", "internal", "not base32", "upper", "unicode"):
        assert type(back[name]) is Link and back[name] == ODD[name], name
    # An entity id is packed as its 32 bytes, not its 52 characters.
    assert len(pack_value(Link("sp", entity_id("x")))) < 55


def test_a_packed_document_reads_back_equal_and_keeps_its_version() -> None:
    store = MemoryStore()
    r = Replica(store)
    _commit(r, DOC, (), ODD)
    _pump(r)
    version = r._docs[DOC].version
    assert r.pack() >= 1
    assert _packed(r, DOC)
    r._check()
    assert value_equal(ODD, r.visible(DOC))
    assert not _packed(r, DOC)  # decoded on first use, kept decoded until the next pack
    assert r._docs[DOC].version == version
    tx = r.edit(ME)
    assert value_equal(ODD["list"], tx.read(DOC, ("list",)))
    tx.abort()
    r._check()


def test_peek_decodes_a_packed_document() -> None:
    """`peek` (the scheduler's direct sink run reads through it) gives the value, never
    the packed bytes."""
    r = Replica(MemoryStore())
    _commit(r, DOC, (), {"value": [1, {"a": 2}]})
    _pump(r)
    r.pack()
    assert _packed(r, DOC)
    assert r.peek(DOC) == {"value": [1, {"a": 2}]}
    assert not _packed(r, DOC)
    assert r.peek(OTHER) is None
    r._check()


def test_a_sink_on_a_packed_document_sees_each_foreign_change(store: StoreBase) -> None:
    a, b = Space(store, "sp"), Space(store, "sp")
    b.cell("c").set({"n": 1})
    _pump(a.replica, b.replica, store=store)
    sch = Scheduler(a.replica)
    seen: list[Any] = []
    sch.sink(a.cell("c"), seen.append)
    sch.settle()
    assert seen == [{"n": 1}]
    for n in (2, 3):
        a.replica.pack()
        assert _packed(a.replica, a.cell("c").doc_key)
        b.cell("c").set({"n": n})
        _pump(a.replica, b.replica, store=store)
        sch.settle()
        assert seen[-1] == {"n": n}
    assert len(seen) == 3
    a.replica._check()
    sch.close()


def test_a_transaction_reads_and_writes_a_packed_document() -> None:
    store = MemoryStore()
    r = Replica(store)
    _commit(r, DOC, (), {"a": 1, "b": {"c": 2}})
    _pump(r)
    r.pack()
    tx = r.edit(ME)
    assert tx.read(DOC, ("b", "c")) == 2
    tx.write(DOC, ("a",), 5)
    tx.commit()
    _pump(r)
    assert store.read_durable(DOC) == {"a": 5, "b": {"c": 2}}
    r.pack()
    assert _packed(r, DOC)  # the commit decoded it; the next pack packs it again
    assert r.visible(DOC) == {"a": 5, "b": {"c": 2}}
    r._check()


def test_a_packed_document_equals_the_stored_one_after_foreign_commits(store: StoreBase) -> None:
    a, b = Replica(store), Replica(store)
    _commit(b, DOC, (), {"n": 1, "tags": ["x"]})
    _pump(a, b, store=store)
    assert a.visible(DOC) == {"n": 1, "tags": ["x"]}
    notes: list[Notification] = []
    a.subscribe(notes.append)
    for n in range(2, 5):
        assert a.pack() >= 1
        assert _packed(a, DOC)
        _commit(b, DOC, ("n",), n)
        _pump(a, b, store=store)
        # The change arrived while packed: the new value is decoded, and equal to the
        # store's; the change carries the old one decoded.
        assert not _packed(a, DOC)
        assert a.visible(DOC) == store.read_durable(DOC) == {"n": n, "tags": ["x"]}
        (change,) = notes.pop().changes
        assert (change.before, change.after) == ({"n": n - 1, "tags": ["x"]}, a.visible(DOC))
        a._check()
    # Packed again after the last change, it packs the new value, not a stale copy.
    a.pack()
    assert _packed(a, DOC)
    assert a.visible(DOC) == store.read_durable(DOC) == {"n": 4, "tags": ["x"]}


def test_a_node_reading_a_packed_document_reruns_on_a_foreign_change_only(
    store: StoreBase,
) -> None:
    a, b = Space(store, "sp"), Space(store, "sp")
    src = b.cell("src")
    src.set({"v": 1, "other": 0})
    _pump(a.replica, b.replica, store=store)
    sch = Scheduler(a.replica)
    out = a.cell("out")
    runs: list[Any] = []

    def f(doc: Any) -> Any:
        runs.append(doc["v"])
        return doc["v"] * 10

    sch.derive(out, [a.cell("src")], f)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    sch.settle()
    _pump(a.replica, b.replica, store=store)
    sch.settle()
    assert runs == [1] and seen[-1] == 10
    a.replica.pack()
    src_key = a.cell("src").doc_key
    assert _packed(a.replica, src_key)
    src.set({"v": 2, "other": 0})
    _pump(a.replica, b.replica, store=store)
    sch.settle()
    assert runs == [1, 2] and seen[-1] == 20
    # A change that leaves the value equal triggers nobody, packed or not.
    a.replica.pack()
    src.set({"v": 2, "other": 0})
    _pump(a.replica, b.replica, store=store)
    sch.settle()
    assert runs == [1, 2]
    _pump(a.replica, b.replica, store=store)
    assert a.cell("out").get() == store.read_durable(out.doc_key)["value"] == 20
    a.replica._check()
    sch.close()


def test_pack_leaves_documents_in_use_alone() -> None:
    store = MemoryStore()
    r = Replica(store)
    _commit(r, DOC, (), {"a": 1})
    _commit(r, OTHER, (), {"b": 1})
    _pump(r)
    # An open transaction: its working copies came from the decoded values.
    tx = r.edit(ME)
    tx.read(DOC, ())
    assert r.pack() == 0 and not _packed(r, DOC)
    tx.abort()
    # A kept document, and one with a commit in flight, stay decoded.
    with store.testing.hold_verdicts() as gate:
        _commit(r, DOC, ("a",), 2)
        assert r.pack(keep={OTHER}) == 0
        assert not _packed(r, DOC) and not _packed(r, OTHER)
        r._check()
        gate.accept()
    _pump(r)
    assert r.pack(keep={OTHER}) == 1
    assert _packed(r, DOC) and not _packed(r, OTHER)
    assert r.visible(DOC) == {"a": 2}
    r._check()


def test_a_replica_that_never_packs_tracks_nothing() -> None:
    r = Replica(MemoryStore())
    _commit(r, DOC, (), {"a": 1})
    _pump(r)
    assert r._loose is None
    r.pack()
    assert r._loose == set()  # every document packed: nothing left to track

"""Writes of one element of a long list: no whole copy per write, and nothing anyone holds
ever changes.

`set_path` replacing one element of a long list copies it once, then reuses the version
two back in place once nothing holds it (`cells._values._replaced`), and a store
applying the very write its replica's transaction just made shares that transaction's
new value (`set_path`'s one-slot memo). These tests hold on to older versions the ways
cellweave does (a value a transaction read, a pending layer's base, the confirmed value
under pending layers, a store's head) and check that none of them changes.
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from cells import MISSING, DocKey, Identity, MemoryStore, Outcome, Replica, set_path

ME = Identity("local", "local")
DOC = DocKey("sp", "doc")
N = 1000  # long enough to be reused (`_values._EDGE_MIN` is 256)


def _doc() -> dict[str, Any]:
    return {"items": [f"task {i}" for i in range(N)]}


def test_a_version_nothing_holds_is_reused_for_the_next_write() -> None:
    """The mechanism the tests below guard: the version two writes back, held by
    nobody, becomes the next version (so a write of one element is O(1))."""
    doc = _doc()
    first = id(doc["items"])
    doc = set_path(doc, ("items", 1), "a")
    second = id(doc["items"])
    doc = set_path(doc, ("items", 2), "b")
    assert id(doc["items"]) == first  # the first version, brought up to date in place
    doc = set_path(doc, ("items", 3), "c")
    assert id(doc["items"]) == second
    assert doc["items"][:5] == ["task 0", "a", "b", "c", "task 4"]
    assert doc["items"][5:] == [f"task {i}" for i in range(5, N)]


def test_a_version_someone_holds_never_changes() -> None:
    doc = _doc()
    held = [doc]  # a reader of the first version
    snapshot = copy.deepcopy(doc)
    for k in range(1, 6):
        doc = set_path(doc, ("items", k), f"edit {k}")
        held.append(doc)
        snapshot_k = copy.deepcopy(doc)
        doc = set_path(doc, ("items", k + 100), f"more {k}")
        assert held[-1] == snapshot_k
    assert held[0] == snapshot
    assert doc["items"][1:6] == [f"edit {k}" for k in range(1, 6)]
    assert doc["items"][101:106] == [f"more {k}" for k in range(1, 6)]


def test_only_the_held_list_inside_a_value_blocks_reuse() -> None:
    """A holder of the list alone (not of the document around it) is counted too."""
    doc = _doc()
    items = doc["items"]
    doc = set_path(doc, ("items", 0), "x")
    doc = set_path(doc, ("items", 1), "y")
    doc = set_path(doc, ("items", 2), "z")
    assert items == [f"task {i}" for i in range(N)]
    assert doc["items"][:4] == ["x", "y", "z", "task 3"]


def test_inline_dicts_one_field_of_one_element() -> None:
    doc: Any = {"items": [{"title": f"t{i}", "body": "b"} for i in range(N)]}
    first = doc
    for k in range(6):
        before = copy.deepcopy(doc)
        older = doc
        doc = set_path(doc, ("items", k, "title"), f"new {k}")
        assert older == before
    assert first["items"][0] == {"title": "t0", "body": "b"}
    assert [doc["items"][k]["title"] for k in range(7)] == [f"new {k}" for k in range(6)] + ["t6"]


def test_the_memo_answers_only_the_same_write_of_the_same_objects() -> None:
    doc = _doc()
    path = ("items", 7)
    out = set_path(doc, path, "seven")
    assert set_path(doc, path, "seven") is out  # the same objects: the same result
    other = set_path(doc, path, "SEVEN")  # another value at the same place
    assert other["items"][7] == "SEVEN"
    assert set_path(doc, ("items", 8), "eight")["items"][7:9] == ["task 7", "eight"]
    assert set_path(doc, path, MISSING)["items"][7] == "task 8"
    assert doc == _doc()


# --------------------------------------------------------------------------- through a replica


@pytest.fixture
def replica() -> Iterator[tuple[MemoryStore, Replica]]:
    store = MemoryStore()
    r = Replica(store)
    tx = r.edit(ME)
    tx.write(DOC, (), _doc())
    pending = tx.commit()
    r.pump()
    assert pending.result().ok
    yield store, r
    store._check()
    r._check()


def _edit(r: Replica, i: int, value: str) -> Any:
    tx = r.edit(ME)
    tx.write(DOC, ("items", i), value)
    return tx.commit()


def test_a_value_an_open_transaction_read_does_not_change(
    replica: tuple[MemoryStore, Replica],
) -> None:
    store, r = replica
    reader = r.edit(ME)
    seen = reader.read(DOC, ("items",))
    snapshot = copy.deepcopy(seen)
    for k in range(6):
        pending = _edit(r, k, f"edit {k}")
        r.pump()
        assert pending.result().ok
        gc.collect()
    assert seen == snapshot
    assert reader.read(DOC, ("items",)) == snapshot  # its snapshot, still
    reader.abort()
    assert r.visible(DOC)["items"][:7] == [f"edit {k}" for k in range(6)] + ["task 6"]
    assert store.read_durable(DOC) == r.visible(DOC)


def test_pending_writes_and_the_confirmed_value_under_them_do_not_change(
    replica: tuple[MemoryStore, Replica],
) -> None:
    """Several unconfirmed writes in a row (each built on the one before, each on a
    base someone holds): rejecting the first reverts exactly its element."""
    store, r = replica
    with store.testing.hold_verdicts() as gate:
        pendings = [_edit(r, k, f"edit {k}") for k in range(6)]
        r.pump()
        assert r.visible(DOC)["items"][:7] == [f"edit {k}" for k in range(6)] + ["task 6"]
        gate.reject(0, Outcome.TERMINAL)
        gate.release()
        r.pump()
    assert pendings[0].result().outcome == Outcome.TERMINAL
    assert all(p.result().ok for p in pendings[1:])
    want = ["task 0"] + [f"edit {k}" for k in range(1, 6)] + [f"task {i}" for i in range(6, N)]
    assert r.visible(DOC)["items"] == want
    assert store.read_durable(DOC)["items"] == want
    # And edits go on from there (the versions kept for reuse are consistent).
    for k in range(6, 12):
        pending = _edit(r, k, f"edit {k}")
        r.pump()
        assert pending.result().ok
    want[6:12] = [f"edit {k}" for k in range(6, 12)]
    assert r.visible(DOC)["items"] == want
    assert store.read_durable(DOC)["items"] == want


def test_the_store_shares_the_transactions_new_value(
    replica: tuple[MemoryStore, Replica],
) -> None:
    """The memory store applies the write its replica just staged without copying the
    document again: its head is the replica's new value (values are never mutated)."""
    store, r = replica
    for k in range(4):
        pending = _edit(r, k, f"edit {k}")
        staged = r.visible(DOC)  # the transaction's new value, pending
        r.pump()
        assert pending.result().ok
        assert store._heads[DOC].value is staged
        assert r.visible(DOC) is staged

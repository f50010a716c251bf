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
import random
from collections.abc import Iterator
from typing import Any

import pytest

from cells import MISSING, DocKey, Identity, MemoryStore, Outcome, Replica, set_path
from cells._values import (
    ELEMENT_IDS,
    element_position,
    element_types,
    ids_key,
    set_paths,
    splice_ends,
    spliced,
    spliced_ids,
)
from cells.errors import InvalidValueError

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


# --------------------------------------------------------------------------- splices


def test_splices_and_writes_in_any_order_never_change_a_held_version() -> None:
    """Random element writes and splices of a long list (seeded, so every run is the
    same), each step holding or letting go of earlier versions: every held version
    keeps its content, and each new version is what the operation says."""
    rng = random.Random(14)
    current = [f"e{i}" for i in range(400)]
    model = list(current)
    held: dict[int, tuple[list[Any], list[Any]]] = {}  # step -> (version, its content)
    reused = 0
    seen = {id(current)}
    for step in range(3000):
        op = rng.random()
        if op < 0.4:
            i = rng.randrange(len(model))
            current = set_path(current, (i,), f"w{step}")
            model[i] = f"w{step}"
        else:
            index = rng.randrange(len(model) + 1)
            delete = rng.randrange(min(3, len(model) - index) + 1)
            added = [f"s{step}.{k}" for k in range(rng.randrange(3))]
            if len(model) - delete + len(added) < 300:
                added += [f"p{step}"] * 3  # stay long enough to be reused
            current = spliced(current, index, delete, added)
            model[index : index + delete] = added
        reused += id(current) in seen
        seen.add(id(current))
        assert current == model
        if rng.random() < 0.3:
            held[step] = (current, list(current))
        for k in [k for k in held if rng.random() < 0.2]:
            del held[k]
        for version, content in held.values():
            assert version == content
    assert reused > 1000  # most versions were made from one nobody held any more


def test_a_splice_hint_of_a_held_version_stays_right() -> None:
    """`splice_ends(old, new)` keeps answering for versions someone holds, whatever was
    reused since (a reused list's own hints go with it)."""
    v0 = [f"e{i}" for i in range(300)]
    first = id(v0)
    v1 = spliced(v0, 10, 1, [])
    del v0
    v2 = spliced(v1, 20, 0, ["x"])
    assert id(v2) == first  # v0, held by nobody, brought up to date
    assert splice_ends(v1, v2) == (20, 279)
    v3 = spliced(v2, 5, 1, ["y", "z"])  # v1 is held here: not reused
    assert id(v3) != id(v1)
    assert splice_ends(v2, v3) == (5, 294)
    assert splice_ends(v1, v2) == (20, 279)
    assert v3[4:8] == ["e4", "y", "z", "e6"]
    assert v1 == [f"e{i}" for i in range(300) if i != 10]


def test_splices_through_a_replica_with_pending_and_rejected_layers(
    replica: tuple[MemoryStore, Replica],
) -> None:
    store, r = replica

    def splice(index: int, delete: int, added: list[Any]) -> Any:
        tx = r.edit(ME)
        tx.splice(DOC, ("items",), index, delete, added)
        return tx.commit()

    model = ["front"] + [f"task {i}" for i in range(N)]
    with store.testing.hold_verdicts() as gate:
        first = splice(0, 0, ["front"])  # to be rejected
        later = [splice(10, 1, []), splice(20, 0, ["x", "y"]), splice(N // 2, 2, ["mid"])]
        r.pump()
        gate.reject(0, Outcome.TERMINAL)
        gate.release()
        r.pump()
    assert first.result().outcome == Outcome.TERMINAL
    # The others were built on the rejected one's pending state: a splice writes the
    # whole list it made (blind, no dependency), so each accepted one holds "front".
    assert all(p.result().ok for p in later)
    model[10:11] = []
    model[20:20] = ["x", "y"]
    model[N // 2 : N // 2 + 2] = ["mid"]
    assert store.read_durable(DOC)["items"] == model
    assert r.visible(DOC)["items"] == model
    for k in range(6):
        pending = splice(k * 7, 1, [f"again {k}"])
        r.pump()
        assert pending.result().ok
        model[k * 7 : k * 7 + 1] = [f"again {k}"]
    assert r.visible(DOC)["items"] == model
    assert store.read_durable(DOC)["items"] == model


def test_a_reused_id_table_is_looked_up_afresh() -> None:
    """An element-id table someone looked elements up in (so an index of its positions
    is kept), reused later as a newer table: lookups in it see its new positions."""
    path = ("value",)
    items = [f"e{i}" for i in range(300)]
    doc: dict[str, Any] = {"value": items}
    tables: list[int] = []
    for step in range(4):
        entry = spliced_ids(doc, path, items, 0, 1, 1)  # the front element replaced
        items = spliced(items, 0, 1, [f"front {step}"])
        doc = {"value": items, ELEMENT_IDS: {ids_key(path): entry}}
        ids = entry[1]
        tables.append(id(ids))
        # Look up every element (so the table gets a position index), the last first.
        for at in reversed(range(len(ids))):
            assert element_position(doc, path, items, ids[at]) == at
        del ids, entry
    assert len(set(tables)) < len(tables)  # a table was reused
    ids = doc[ELEMENT_IDS][ids_key(path)][1]
    assert [element_position(doc, path, items, x) for x in ids] == list(range(300))
    assert element_position(doc, path, items, "~0") is None  # replaced at step 1


def test_a_reused_list_has_its_element_types_found_afresh() -> None:
    v0 = [f"e{i}" for i in range(300)]
    first = id(v0)
    assert element_types(v0) == {str}  # kept for v0
    v1 = set_path(v0, (0,), 5)
    del v0
    v2 = set_path(v1, (1,), 7)
    assert id(v2) == first  # v0 reused
    assert element_types(v2) == {str, int}
    assert element_types(v1) == {str, int}


# --------------------------------------------------------------------------- several elements


def test_several_elements_of_one_list_make_one_new_list() -> None:
    """`set_paths` of element writes of one long list: one new list (the version two
    back, once nobody holds it, brought up to date), the same result for the same call
    (the writes in any order), and nothing anyone holds changes."""
    model = [f"task {i}" for i in range(N)]
    doc = _doc()
    first = id(doc["items"])
    doc = set_paths(doc, [(("items", 3), "a"), (("items", 9), "b")])
    model[3], model[9] = "a", "b"
    assert doc["items"] == model
    ops = [(("items", 9), "c"), (("items", 4), "d"), (("items", 3), "e")]
    held = doc  # a reader of this version
    snapshot = list(held["items"])
    doc = set_paths(held, ops)
    assert set_paths(held, list(reversed(ops))) is doc  # the same writes: the same value
    assert id(doc["items"]) == first  # the first version, held by nobody: reused
    model[9], model[4], model[3] = "c", "d", "e"
    assert doc["items"] == model
    doc = set_paths(doc, [(("items", 0), "f"), (("items", N - 1), "g")])
    model[0], model[N - 1] = "f", "g"
    assert doc["items"] == model
    assert held["items"] == snapshot  # held: never changed (this one was a copy)
    del held
    doc = set_paths(doc, [(("items", 5), "h"), (("items", 6), "i")])
    model[5], model[6] = "h", "i"
    assert doc["items"] == model


def test_element_writes_other_than_in_range_elements_of_one_list_apply_in_turn() -> None:
    doc = _doc()
    appended = set_paths(doc, [(("items", 1), "x"), (("items", N), "end")])
    assert appended["items"][:2] == ["task 0", "x"] and appended["items"][-1] == "end"
    deleted = set_paths(doc, [(("items", 1), "x"), (("items", 0), MISSING)])
    assert deleted["items"][:2] == ["x", "task 2"] and len(deleted["items"]) == N - 1
    mixed = set_paths(doc, [(("items", 1), "x"), (("other",), 5)])
    assert mixed["other"] == 5 and mixed["items"][1] == "x"
    assert doc == _doc()


def test_write_items_through_a_replica_with_pending_and_rejected_layers(
    replica: tuple[MemoryStore, Replica],
) -> None:
    """`Transaction.write_items` of two elements per commit: the store's new head is the
    transaction's value; under held verdicts, rejecting the first commit reverts exactly
    its elements."""
    store, r = replica

    def edit(k: int) -> Any:
        tx = r.edit(ME)
        tx.write_items(DOC, ("items",), {2 * k: f"edit {k}", 2 * k + 1: f"also {k}"})
        return tx.commit()

    for k in range(3):
        pending = edit(k)
        staged = r.visible(DOC)
        r.pump()
        assert pending.result().ok
        assert store._heads[DOC].value is staged
    with store.testing.hold_verdicts() as gate:
        pendings = [edit(k) for k in range(3, 8)]
        r.pump()
        gate.reject(0, Outcome.TERMINAL)
        gate.release()
        r.pump()
    assert pendings[0].result().outcome == Outcome.TERMINAL
    assert all(p.result().ok for p in pendings[1:])
    want = [f"task {i}" for i in range(N)]
    for k in [0, 1, 2, 4, 5, 6, 7]:
        want[2 * k], want[2 * k + 1] = f"edit {k}", f"also {k}"
    assert r.visible(DOC)["items"] == want
    assert store.read_durable(DOC)["items"] == want


def test_write_items_checks_as_write_does(replica: tuple[MemoryStore, Replica]) -> None:
    _store, r = replica
    tx = r.edit(ME)
    with pytest.raises(InvalidValueError, match="write to"):
        tx.write_items(DOC, ("items",), {1: "x", N + 5: "y"})
    with pytest.raises(InvalidValueError):
        tx.write_items(DOC, ("items",), {1: "x", 2: float("nan")})
    tx.write_items(DOC, ("items",), {1: "x", N: "appended"})  # one write each: appends
    assert tx.read(DOC, ("items",))[-1] == "appended"
    tx.abort()

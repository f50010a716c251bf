"""P-SPLICE: a splice triggers every reader it changed, though the reader index takes the
splice's own word for where it happened (`cells.splice_ends`).

A transaction splices a list of inline dicts and may also write into its elements,
or rewrite one with a value that Python's `==` takes for the same (`1`, `True`,
`1.0`), before it is matched. The readers read
elements by id (as a list coordinator's children do), a field of one, the list's
length, or a position. The rule spelled out here uses `get_path` (which resolves ids
through the document's own tables) and compares values with `same_value`, shapes by
keys, length and type; it shares nothing with the reader index's splice shortcut.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from cells import (
    MISSING,
    Change,
    Identity,
    MemoryStore,
    Space,
    element_ids,
    get_path,
    same_value,
    splice_ends,
)
from scheduler._node import FunctionNode, Node
from scheduler._readers import ReaderIndex, compact_reads

FIELD = st.sampled_from([0, 1, True, 1.0, "x"])
"""Field values, some `==` to each other yet different values (1, True, 1.0)."""
OP = st.one_of(
    st.tuples(
        st.just("splice"),
        st.integers(0, 60),
        st.integers(0, 2),
        st.lists(FIELD.map(lambda v: {"t": v}), max_size=2),
    ),
    st.tuples(st.just("field"), st.integers(0, 60), FIELD),
    st.tuples(st.just("element"), st.integers(0, 60), FIELD),
)
READ = st.tuples(
    st.sampled_from(["id", "id field", "position", "list"]), st.integers(0, 60), st.booleans()
)


def _shape(value: Any) -> Any:
    if type(value) is dict:
        return ("dict", sorted(value))
    if type(value) is list:
        return ("list", len(value))
    return ("scalar", type(value))


def _changed(before: Any, after: Any, path: tuple[Any, ...], shallow: bool) -> bool:
    b, a = get_path(before, path), get_path(after, path)
    if b is MISSING or a is MISSING:
        return b is not a
    return _shape(b) != _shape(a) if shallow else not same_value(b, a)


# A splice, then a write into a kept element in the same transaction: the ids moved as
# the splice says, the elements did not all stay (one after the splice point, one before
# it rewritten with a value `==` to the old one but not the same value).
@example(40, True, [("splice", 0, 1, []), ("field", 3, "x")], [])
@example(40, False, [("splice", 30, 0, [{"t": 0}]), ("element", 1, True)], [])
@example(40, True, [("splice", 10, 2, []), ("splice", 0, 0, [{"t": 1}])], [])
@given(
    st.integers(20, 44),
    st.booleans(),
    st.lists(OP, min_size=1, max_size=3),
    st.lists(READ, max_size=12),
)
def test_a_splice_triggers_every_reader_it_changed(
    n: int, spliced_before: bool, ops: list[Any], reads: list[Any]
) -> None:
    space = Space(MemoryStore())
    items = space.cell("items")
    items.set([{"t": i} for i in range(n)])
    if spliced_before:
        items.remove(n // 2)  # the list now has a stored id table
    tx = space.edit()
    key = items.link().key(tx.identity)
    before = tx.peek(key)
    old_list = before["value"]
    ids = element_ids(before, ("value",), old_list)
    # Readers, as `compact_reads` files them (each its own node): more than
    # `TRIE_READERS`, so the document is matched through its path trie.
    index = ReaderIndex()
    readers: list[tuple[Node, tuple[Any, ...], bool]] = []
    # Every element's field, by id (a mapped list's children), then the drawn reads.
    everyone = [("id field", at, at % 3 == 0) for at in range(len(ids))]
    for i, (kind, at, shallow) in enumerate([*everyone, *reads]):
        eid = ids[at % len(ids)] if at < 50 else f"~{at}"  # some ids the list lacks
        path: tuple[Any, ...] = {
            "id": ("value", eid),
            "id field": ("value", eid, "t"),
            "position": ("value", at % (n + 1)),
            "list": ("value",),
        }[kind]
        node = FunctionNode(
            lambda _tx: None, "computation", i, Identity("p", "s"), (), label=f"n{i}"
        )
        index.apply(node, compact_reads([(key, path, shallow)]))
        readers.append((node, path, shallow))
    index.match(Change(key, before, before))  # builds the trie when well read
    for op in ops:
        length = len(tx.peek(key, ("value",)))
        if op[0] == "splice":
            _, at, delete, new = op
            at %= length + 1
            tx.splice(key, ("value",), at, min(delete, length - at), new)
        elif length:
            _, at, value = op
            if op[0] == "field":
                tx.write(key, ("value", at % length, "t"), value)
            else:
                tx.write(key, ("value", at % length), {"t": value})
    after = tx.peek(key)
    written = tuple(tx.documents()[key].written or ())
    tx.abort()
    if len(ops) == 1 and ops[0][0] == "splice":
        # One splice: the shortcut is taken (what this test is about).
        assert splice_ends(old_list, after["value"]) is not None
    want = {node for node, path, shallow in readers if _changed(before, after, path, shallow)}
    for paths in (written, None):
        got = index.match(Change(key, before, after, paths))
        assert len(got) == len(set(got))
        assert want == set(got), paths

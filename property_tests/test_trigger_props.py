"""P-TRIG: the fast trigger rule equals the rule spelled out, and its basic laws."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import scheduler._readers as readers_module
from cells import MISSING, Change, DocKey, Identity, set_path
from scheduler._node import Node
from scheduler._readers import ReaderIndex, changed_at, changed_at_reference, compact_reads

KEYS = st.sampled_from(["a", "b", "c"])
ELEMS = st.one_of(KEYS, st.integers(min_value=0, max_value=2))
PATHS = st.lists(ELEMS, max_size=3).map(tuple)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["x", "y"]))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
DOCS = st.one_of(st.just(MISSING), VALUES)


def _edit(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    try:
        return set_path(doc, path, value)
    except Exception:
        return doc


@given(DOCS, PATHS, VALUES, PATHS, st.booleans())
def test_fast_rule_equals_reference(
    doc: Any, wpath: Any, value: Any, rpath: Any, shallow: bool
) -> None:
    after = _edit(doc, wpath, value)  # shares untouched subtrees, like real writes
    assert changed_at_reference(doc, after, rpath, shallow=shallow) == changed_at(
        doc, after, rpath, shallow=shallow
    )


@given(DOCS, DOCS, PATHS, st.booleans())
def test_fast_rule_equals_reference_on_unrelated_documents(
    before: Any, after: Any, path: Any, shallow: bool
) -> None:
    assert changed_at_reference(before, after, path, shallow=shallow) == changed_at(
        before, after, path, shallow=shallow
    )


@given(DOCS, PATHS, st.booleans())
def test_equal_values_never_trigger(doc: Any, path: Any, shallow: bool) -> None:
    assert not changed_at(doc, doc, path, shallow=shallow)


@given(DOCS, DOCS, PATHS)
def test_shallow_trigger_implies_deep_trigger(before: Any, after: Any, path: Any) -> None:
    if changed_at(before, after, path, shallow=True):
        assert changed_at(before, after, path, shallow=False)


# ----------------------------------------------------------------------------- reader index

READ = st.tuples(PATHS.map(lambda p: ("value", *p)), st.booleans())
"""One read: a full-document path (below the "value" field) and whether it is shallow."""
READERS = st.lists(st.lists(READ, min_size=1, max_size=3), min_size=1, max_size=24)


def _index_with(readers: list[list[tuple[Any, bool]]], key: Any) -> tuple[Any, list[Any]]:
    index = ReaderIndex()
    nodes = []
    for i, reads in enumerate(readers):
        node = Node(lambda _tx: None, "computation", i, Identity("p", "s"), (), f"n{i}")
        index.apply(node, compact_reads((key, path, shallow) for path, shallow in reads))
        nodes.append(node)
    return index, nodes


@given(DOCS, PATHS, VALUES, READERS, st.integers(0, 30))
def test_the_reader_trie_matches_exactly_the_readers_the_rule_triggers(
    doc: Any, wpath: Any, value: Any, readers: Any, threshold: int
) -> None:
    """Whichever way a document's readers are matched (one by one, or by the path trie
    a well-read document gets), the hits are the nodes one of whose read paths
    `changed_at_reference` says changed; the trie stays in step as read sets change."""
    key = DocKey("sp", "doc", "space", "p", "s")
    before = None if doc is MISSING else {"value": doc}
    after = _edit(before if before is not None else MISSING, ("value", *wpath), value)
    saved = readers_module.TRIE_READERS
    readers_module.TRIE_READERS = threshold
    try:
        index, nodes = _index_with(readers, key)
        doc_before = MISSING if before is None else before
        for _round in range(2):
            want = {
                node
                for node, reads in zip(nodes, readers, strict=True)
                if any(
                    changed_at_reference(doc_before, after, p, shallow=s)
                    # a deep read below another deep read of the same node is dropped,
                    # and it could not trigger without the one above it triggering
                    for p, s in reads
                )
            }
            got = index.match(Change(key, doc_before, after))
            assert len(got) == len(set(got))
            assert want == set(got)
            # A local commit's change says where it wrote: the trie then walks only there.
            along = index.match(Change(key, doc_before, after, (("value", *wpath),)))
            assert len(along) == len(set(along))
            assert want == set(along)
            index._check(nodes)
            # Change the read sets (the trie, once made, is kept in step) and match again.
            for node, reads in zip(nodes[::2], readers[::2], strict=False):
                reads.reverse()
                del reads[1:]
                index.apply(node, compact_reads((key, p, s) for p, s in reads))
    finally:
        readers_module.TRIE_READERS = saved

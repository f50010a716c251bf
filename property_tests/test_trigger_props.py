"""P-TRIG: the fast trigger rule equals the rule spelled out, and its basic laws.

The rule spelled out (`_reference_changed`) is this test's own: it shares no
helper with the code it checks (`changed_at`, `shallow_equal`, `same_value`).
Deep reads compare values by their canonical JSON text; shallow reads compare a
value's *shape* (a dict's key set, a list's length, a scalar's type), as the
trigger rule says (docs/explanation: a shallow read sees keys, length, kind); a read
of a list's element kinds (a path ending in `ELEMENT_KINDS`) sees the list's length
and the shape of each element that is no container. A read by element id resolves the
id in the document's own id table (`ELEMENT_IDS`; without one, `#k` is position k), so a
change of the table alone, the list the same object, moves what such a read sees.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

import scheduler._readers as readers_module
from cells import ELEMENT_IDS, ELEMENT_KINDS, MISSING, Change, DocKey, Identity, ids_key, set_path
from scheduler._node import FunctionNode
from scheduler._readers import ReaderIndex, changed_at, compact_reads

KEYS = st.sampled_from(["a", "b", "c"])
ELEMS = st.one_of(KEYS, st.integers(min_value=0, max_value=2), st.sampled_from(["#0", "#2"]))
"""Path steps: dict keys, list indices, and element ids (`#k`: a list that was never
spliced, as every list here, has the ids `#0`, `#1`, ... by position)."""
PATHS = st.lists(ELEMS, max_size=3).map(tuple)
READ_PATHS = st.one_of(PATHS, PATHS.map(lambda p: (*p, ELEMENT_KINDS)))
"""Read paths: as `PATHS`, or ending in a read of a list's element kinds (read shallowly
only: `Transaction.read_kinds`)."""
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["x", "y"]))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
DOCS = st.one_of(st.just(MISSING), VALUES)


_ABSENT = ("absent",)
_UNREACHABLE_AT = "unreachable at depth"


def _seen(doc: Any, path: tuple[Any, ...]) -> Any:
    """What a read at `path` finds: the value (or `_ABSENT`), or where the walk stopped.

    A dict is entered only with a str key, a list with an int index or a str element
    id (these documents hold no id tables, so `#k` names the element at k and any
    other str no element); a missing key, an index past the end or an id the list
    does not hold is absent (still reachable); anything else (a scalar, an absent
    value, a list index into a dict) stops the walk at that depth.
    """
    if doc is MISSING:
        return _ABSENT if not path else (_UNREACHABLE_AT, 0)
    if not path:
        return doc
    head, rest = path[0], path[1:]
    if isinstance(doc, dict) and isinstance(head, str):
        inner = doc.get(head, MISSING)
    elif isinstance(doc, list) and isinstance(head, int) and not isinstance(head, bool):
        inner = doc[head] if 0 <= head < len(doc) else MISSING
    elif isinstance(doc, list) and isinstance(head, str):
        at = int(head[1:]) if head.startswith("#") and head[1:].isdigit() else len(doc)
        inner = doc[at] if at < len(doc) else MISSING
    else:
        return (_UNREACHABLE_AT, 0)
    found = _seen(inner, rest)
    if isinstance(found, tuple) and found and found[0] == _UNREACHABLE_AT:
        return (_UNREACHABLE_AT, found[1] + 1)
    return found


def _deep(value: Any) -> str:
    """A value's canonical JSON text (True is not 1; key order does not count). Equal
    text is equal value for what `VALUES` draws (no floats: 1 and 1.0 are one value)."""
    return json.dumps(value, sort_keys=True)


def _shape(value: Any) -> tuple[Any, ...]:
    """What a shallow read sees of a value: keys, length, or kind."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted(value)))
    if isinstance(value, list):
        return ("list", len(value))
    return ("scalar", type(value).__name__)


def _reference_changed(before: Any, after: Any, path: Any, *, shallow: bool) -> bool:
    """The trigger rule spelled out: did a read at `path` see something else?"""
    if path and path[-1] == ELEMENT_KINDS:  # (always shallow: `Transaction.read_kinds`)
        return _reference_kinds_changed(before, after, path[:-1])
    b, a = _seen(before, path), _seen(after, path)
    b_stopped = isinstance(b, tuple) and bool(b) and b[0] == _UNREACHABLE_AT
    a_stopped = isinstance(a, tuple) and bool(a) and a[0] == _UNREACHABLE_AT
    if b_stopped or a_stopped:
        return bool(b != a)  # reachable on one side only, or stopped at other depths
    if b is _ABSENT or a is _ABSENT:
        return b is not a
    if shallow:
        return _shape(b) != _shape(a)
    return _deep(b) != _deep(a)


def _reference_kinds_changed(before: Any, after: Any, path: Any) -> bool:
    """A read of the kinds of the elements of the list at `path`: between two lists, a
    new length or a new shape of an element that was no container; else what a shallow
    read at `path` sees."""
    b, a = _seen(before, path), _seen(after, path)
    if isinstance(b, list) and isinstance(a, list):
        if len(b) != len(a):
            return True
        return any(
            not isinstance(x, (dict, list)) and _shape(x) != _shape(y)
            for x, y in zip(b, a, strict=True)
        )
    return _reference_changed(before, after, path, shallow=True)


def test_the_reference_rule_on_examples() -> None:
    # (written out by hand, so the oracle itself is checked)
    doc = {"a": [1, 2], "b": {"c": True}}
    assert not _reference_changed(doc, {"a": [1, 2], "b": {"c": True}}, ("a",), shallow=False)
    assert _reference_changed(doc, {"a": [1, 3], "b": {"c": True}}, ("a",), shallow=False)
    assert not _reference_changed(doc, {"a": [1, 3], "b": {"c": True}}, ("a",), shallow=True)
    assert _reference_changed(doc, {"a": [1], "b": {"c": True}}, ("a",), shallow=True)
    assert _reference_changed(doc, {"a": [1, 2], "b": {"c": 1}}, ("b", "c"), shallow=False)
    assert _reference_changed(doc, {"a": [1, 2], "b": {"c": 1}}, ("b", "c"), shallow=True)
    assert not _reference_changed(doc, {"a": [1, 2], "b": {"c": False}}, ("b", "c"), shallow=True)
    assert _reference_changed(doc, {"a": [1, 2], "b": {}}, ("b", "c"), shallow=True)
    assert _reference_changed(doc, {"a": 5}, ("a", 0, "x"), shallow=False) is not False
    assert not _reference_changed(doc, doc, ("a", "x", "y"), shallow=False)
    assert _reference_changed(doc, MISSING, ("a",), shallow=False)
    assert not _reference_changed(MISSING, MISSING, ("a", "b"), shallow=True)
    assert _reference_changed({"a": 1}, {"a": {"b": 1}}, ("a", "b", "c"), shallow=False)
    kinds = ("a", ELEMENT_KINDS)
    assert not _reference_changed(doc, {"a": [1, 3], "b": {}}, kinds, shallow=True)
    assert _reference_changed(doc, {"a": [1, "x"], "b": {}}, kinds, shallow=True)
    assert _reference_changed(doc, {"a": [1, [2]], "b": {}}, kinds, shallow=True)
    assert not _reference_changed({"a": [[1]]}, {"a": [2]}, kinds, shallow=True)
    assert _reference_changed(doc, {"a": [1]}, kinds, shallow=True)
    assert _reference_changed(doc, {"a": {"x": 1, "y": 2}}, kinds, shallow=True)


def _edit(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    try:
        return set_path(doc, path, value)
    except Exception:
        return doc


# Edits where each part of the rule decides (a random draw rarely writes where it reads).
@example({"a": 1}, ("a",), 2, ("a",), True)  # a scalar's new value: not shallowly seen
@example({"a": 1}, ("a",), "x", ("a",), True)  # a scalar's new kind: seen
@example({"a": 1}, ("a",), True, ("a",), False)  # True is not 1
@example({"a": [1]}, ("a", 0), 2, ("a",), True)  # same length
@example({"a": [1]}, ("a", 1), 2, ("a",), True)  # a new length
@example({"a": {"b": 1}}, ("a", "b"), 2, ("a",), True)  # same keys
@example({"a": {"b": 1}}, ("a", "c"), 2, ("a",), True)  # new keys
@example({}, ("a", "a"), None, ("a", "b"), False)  # unreachable -> absent
@example({"a": [1, 2]}, ("a", 1), 3, ("a", ELEMENT_KINDS), True)  # a kind read: same
@example({"a": [1, 2]}, ("a", 1), "x", ("a", ELEMENT_KINDS), True)  # ... another kind
@example({"a": [{}, 2]}, ("a", 0), 2, ("a", ELEMENT_KINDS), True)  # a container's: unread
@given(DOCS, PATHS, VALUES, READ_PATHS, st.booleans())
def test_fast_rule_equals_reference(
    doc: Any, wpath: Any, value: Any, rpath: Any, shallow: bool
) -> None:
    after = _edit(doc, wpath, value)  # shares untouched subtrees, like real writes
    assert _reference_changed(doc, after, rpath, shallow=shallow) == changed_at(
        doc, after, rpath, shallow=shallow
    )


@example({"a": {"b": 1}}, {"a": {"c": 1}}, ("a",), True)  # other keys, same count
@example({"a": [1, 2]}, {"a": [2, 1]}, ("a",), False)  # order counts in a list
@example({"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}, ("a",), False)  # not in a dict
@example({"a": 1}, {"a": 2}, ("a",), False)
@example({"a": "x"}, {"a": "y"}, ("a",), False)
@example({"a": 1}, {"a": 1.0}, ("a",), True)  # (values of other kinds)
@example({"a": 5}, {"a": [5]}, ("a", 0), False)  # unreachable -> reachable
@example({"a": 5}, {"a": "x"}, ("a", 0), False)  # unreachable at the same depth
@given(DOCS, DOCS, READ_PATHS, st.booleans())
def test_fast_rule_equals_reference_on_unrelated_documents(
    before: Any, after: Any, path: Any, shallow: bool
) -> None:
    assert _reference_changed(before, after, path, shallow=shallow) == changed_at(
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

READ = st.one_of(
    st.tuples(PATHS.map(lambda p: ("value", *p)), st.booleans()),
    st.tuples(PATHS.map(lambda p: ("value", *p, ELEMENT_KINDS)), st.just(True)),
)
"""One read: a full-document path (below the "value" field) and whether it is shallow,
or a read of the element kinds of a list there."""
READERS = st.lists(st.lists(READ, min_size=1, max_size=3), min_size=1, max_size=24)


def _index_with(readers: list[list[tuple[Any, bool]]], key: Any) -> tuple[Any, list[Any]]:
    index = ReaderIndex()
    nodes = []
    for i, reads in enumerate(readers):
        node = FunctionNode(
            lambda _tx: None, "computation", i, Identity("p", "s"), (), label=f"n{i}"
        )
        index.apply(node, compact_reads((key, path, shallow) for path, shallow in reads))
        nodes.append(node)
    return index, nodes


@given(DOCS, PATHS, VALUES, READERS, st.integers(0, 30))
def test_the_reader_trie_matches_exactly_the_readers_the_rule_triggers(
    doc: Any, wpath: Any, value: Any, readers: Any, threshold: int
) -> None:
    """Whichever way a document's readers are matched (one by one, or by the path trie
    a well-read document gets), the hits are the nodes one of whose read paths
    `_reference_changed` says changed; the trie stays in step as read sets change."""
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
                    _reference_changed(doc_before, after, p, shallow=s)
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
            # Unregister some readers and register them again (the trie is made, and
            # kept, as readers come and go: no match is needed to make it).
            for node in nodes[1::3]:
                index.remove(node)
            index._check([n for n in nodes if n.reads])
            for node, reads in zip(nodes[1::3], readers[1::3], strict=False):
                index.apply(node, compact_reads((key, p, s) for p, s in reads))
    finally:
        readers_module.TRIE_READERS = saved


# ------------------------------------------------------------------- reads by element id

_ID_POOL = ("#0", "#1", "#2", "#3", "~5", "~6", "~7")
_ID_READS = st.one_of(
    st.tuples(st.sampled_from((*_ID_POOL, "#9")).map(lambda x: ("value", x)), st.booleans()),
    st.tuples(st.sampled_from(_ID_POOL).map(lambda x: ("value", x, "v")), st.booleans()),
    st.tuples(st.integers(0, 3).map(lambda i: ("value", i)), st.booleans()),
)


@st.composite
def _id_tables(draw: st.DrawFn, n: int) -> list[str] | None:
    """The stored ids of an n-element list (distinct, drawn from `_ID_POOL`), or None:
    no table (ids by position)."""
    if draw(st.booleans()):
        return None
    return draw(st.permutations(_ID_POOL).map(lambda ids: list(ids[:n])))


def _by_id(items: list[Any], ids: list[str] | None, read: tuple[Any, ...]) -> Any:
    """What a read below "value" finds in `items` under `ids` (this test's own
    resolution: the position of the id in the table, or `#k` at k without one)."""
    step, rest = read[1], read[2:]
    if type(step) is int:
        pos: int | None = step if step < len(items) else None
    elif ids is None:
        k = int(step[1:]) if step.startswith("#") else len(items)
        pos = k if k < len(items) else None
    else:
        pos = ids.index(step) if step in ids else None
    if pos is None:
        return _ABSENT
    found = items[pos]
    return found[rest[0]] if rest else found


@given(
    st.lists(st.integers(0, 2).map(lambda v: {"v": v}), min_size=1, max_size=4).flatmap(
        lambda items: st.tuples(st.just(items), _id_tables(len(items)), _id_tables(len(items)))
    ),
    st.lists(st.lists(_ID_READS, min_size=1, max_size=2), min_size=1, max_size=24),
    st.integers(0, 30),
)
def test_readers_by_element_id_see_a_change_of_the_id_table_alone(
    drawn: tuple[list[Any], list[str] | None, list[str] | None],
    readers: list[list[tuple[Any, bool]]],
    threshold: int,
) -> None:
    """The list is the same object before and after (a rejected splice reverted under a
    whole-list write built on it: only the id table moved). A reader is triggered
    exactly when what one of its reads sees changed: an id now naming an element of
    another value, or none; a field of it; never a read by position."""
    items, ids_before, ids_after = drawn
    key = DocKey("sp", "doc", "space", "p", "s")
    table = ids_key(("value",))

    def doc(ids: list[str] | None) -> dict[str, Any]:
        return {"value": items} if ids is None else {"value": items, ELEMENT_IDS: {table: [8, ids]}}

    before, after = doc(ids_before), doc(ids_after)

    def changed(read: tuple[Any, ...], shallow: bool) -> bool:
        b, a = _by_id(items, ids_before, read), _by_id(items, ids_after, read)
        if b is _ABSENT or a is _ABSENT:
            return b is not a
        return _shape(b) != _shape(a) if shallow else _deep(b) != _deep(a)

    for reads in readers:
        for read, shallow in reads:
            assert changed(read, shallow) == changed_at(before, after, read, shallow=shallow)
    saved = readers_module.TRIE_READERS
    readers_module.TRIE_READERS = threshold
    try:
        index, nodes = _index_with(readers, key)
        want = {
            node
            for node, reads in zip(nodes, readers, strict=True)
            if any(changed(p, s) for p, s in reads)
        }
        assert want == set(index.match(Change(key, before, after)))
        written = (("value",), (ELEMENT_IDS, table))
        assert want == set(index.match(Change(key, before, after, written)))
        index._check(nodes)
    finally:
        readers_module.TRIE_READERS = saved

"""Element ids: a name for a list element that survives a splice (issue 14 item 5)."""

from __future__ import annotations

from typing import Any

from cells import (
    ELEMENT_IDS,
    MISSING,
    Link,
    MemoryStore,
    Space,
    element_ids,
    element_position,
    element_types,
    first_link,
    get_path,
    ids_key,
    read_value,
    splice_ends,
)
from cells._store import write_overlaps_read

PATH = ("value",)


def doc_of(space: Space, name: str) -> Any:
    tx = space.edit()
    doc = tx.peek(space.cell(name).link().key(tx.identity))
    tx.abort()
    return doc


def test_a_list_never_spliced_has_ids_by_position() -> None:
    doc = {"value": ["a", "b", "c"]}
    assert ["#0", "#1", "#2"] == element_ids(doc, PATH, doc["value"])
    assert 2 == element_position(doc, PATH, doc["value"], "#2")
    assert element_position(doc, PATH, doc["value"], "#3") is None
    assert element_position(doc, PATH, doc["value"], "x") is None
    assert "c" == get_path(doc, ("value", "#2"))


def test_a_splice_moves_ids_with_their_elements_and_draws_new_ones() -> None:
    space = Space(MemoryStore())
    items = space.cell("items")
    items.set(["a", "b", "c"])
    items.insert(0, "new")
    items.remove(2)  # "b"
    doc = doc_of(space, "items")
    assert ["new", "a", "c"] == doc["value"]
    assert ["~3", "#0", "#2"] == element_ids(doc, PATH, doc["value"])
    assert [4, ["~3", "#0", "#2"]] == doc[ELEMENT_IDS][ids_key(PATH)]
    # Other writes keep the ids by position: a longer list draws the next ones.
    items.push("d")
    doc = doc_of(space, "items")
    assert ["~3", "#0", "#2", "#4"] == element_ids(doc, PATH, doc["value"])
    items.insert(1, "e")  # the drawn id stays drawn: the next is 5
    doc = doc_of(space, "items")
    assert ["~3", "~5", "#0", "#2", "#4"] == element_ids(doc, PATH, doc["value"])
    items.set(["x"])
    doc = doc_of(space, "items")
    assert ["~3"] == element_ids(doc, PATH, doc["value"])


def test_a_link_naming_an_element_reads_and_writes_it_wherever_it_moved() -> None:
    space = Space(MemoryStore())
    items = space.cell("items")
    more = Link(space.space, "more")
    space.cell("more").set([1, 2])
    items.set([{"title": "a"}, {"title": "b", "more": more}])
    b = items.link().child("#1")
    items.insert(0, {"title": "new"})
    tx = space.edit()
    assert {"title": "b", "more": [1, 2]} == read_value(tx, b)
    assert 2 == read_value(tx, b.child("more", 1))  # a link inside it is followed
    tx.abort()
    doc = doc_of(space, "items")
    assert (2, more) == first_link(doc["value"], ("#1", "more", 0), doc)
    assert first_link(doc["value"], ("#1", "more", 0)) is None  # the ids need the document
    # A write through the id lands at the element's position now.
    space.cell(items.link().id, path=("#1", "title")).set("B")
    assert [{"title": "new"}, {"title": "a"}, {"title": "B", "more": [1, 2]}] == items.get()
    items.remove(2)
    tx = space.edit()
    assert MISSING is read_value(tx, b)  # the element is gone; its id names nothing
    tx.abort()


def test_a_positional_write_overlaps_a_read_by_element_id_of_the_same_list() -> None:
    # Reads by id are claimed as they were made; writes are positional. A write into
    # any element of that list may have changed the element read: conservatively, it
    # overlaps. Elsewhere the rule is as before.
    assert write_overlaps_read(("value", 5, "title"), ("value", "#7"), False)
    assert write_overlaps_read(("value", 5), ("value", "#7", "title"), True)
    assert not write_overlaps_read(("value", 5, "title"), ("value", 7), False)
    assert not write_overlaps_read(("value", "a"), ("value", "b"), False)
    assert not write_overlaps_read(("other", 5), ("value", "#7"), False)


def test_a_list_of_links_only_gets_no_id_table_until_it_holds_something_else() -> None:
    space = Space(MemoryStore())
    items = space.cell("items")
    a, b = Link(space.space, "a"), Link(space.space, "b")
    items.set([a])
    items.insert(0, b)
    items.remove(1)
    assert ELEMENT_IDS not in doc_of(space, "items")  # links are their own identity
    items.insert(0, {"title": "inline"})
    doc = doc_of(space, "items")
    assert [2, ["~1", "#0"]] == doc[ELEMENT_IDS][ids_key(PATH)]
    items.remove(0)  # only links again, but the table stays in step
    doc = doc_of(space, "items")
    assert [2, ["#0"]] == doc[ELEMENT_IDS][ids_key(PATH)]


def test_a_splice_notes_its_ends_for_exactly_the_two_lists_it_joins() -> None:
    # The reader index and the list coordinators take a splice's common ends from
    # `splice_ends` instead of comparing N elements: it must answer only for the very
    # list a splice made from the very list it spliced.
    space = Space(MemoryStore())
    items = space.cell("items")
    items.set([{"t": i} for i in range(11)])
    items.remove(10)  # the list has a stored id table from now on
    tx = space.edit()
    key = items.link().key(tx.identity)
    old = tx.peek(key, PATH)
    tx.splice(key, PATH, 3, 2, [{"t": "new"}])
    new = tx.peek(key, PATH)
    assert (3, 5) == splice_ends(old, new)  # 3 kept before it, 10 - 3 - 2 = 5 after
    assert all(a is b for a, b in zip(old[:3], new[:3], strict=True))
    assert all(a is b for a, b in zip(old[5:], new[4:], strict=True))
    ids_before = element_ids(doc_of(space, "items"), PATH, old)
    ids_after = element_ids(tx.peek(key), PATH, new)
    assert (3, 5) == splice_ends(ids_before, ids_after)  # the ids moved alike
    assert splice_ends(new, old) is None  # the other way round: not a splice
    assert splice_ends(list(old), new) is None  # an equal list, another object
    tx.write(key, (*PATH, 0, "t"), "edited")  # the list is copied: no longer that splice
    assert splice_ends(old, tx.peek(key, PATH)) is None
    tx.abort()


def test_element_types_follow_a_splice_of_a_list_of_one_type() -> None:
    space = Space(MemoryStore())
    items = space.cell("items")
    items.set([{"t": i} for i in range(10)])
    tx = space.edit()
    key = items.link().key(tx.identity)
    assert frozenset({dict}) == element_types(tx.peek(key, PATH))
    tx.splice(key, PATH, 0, 1, [{"t": "new"}])
    assert frozenset({dict}) == element_types(tx.peek(key, PATH))
    tx.splice(key, PATH, 0, 0, ["a str"])
    mixed = tx.peek(key, PATH)
    assert frozenset({dict, str}) == element_types(mixed)
    tx.splice(key, PATH, 0, 1)  # the only str goes: the types are exact again
    assert frozenset({dict}) == element_types(tx.peek(key, PATH))
    tx.splice(key, PATH, 0, len(tx.peek(key, PATH)))
    assert frozenset() == element_types(tx.peek(key, PATH))
    tx.abort()

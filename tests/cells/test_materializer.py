"""Materializer: a kept materialized value, re-read only where its documents changed.

The oracle is `read_value` in a fresh transaction: every read must return what it
returns and log the same set of reads (the scheduler's read set comes from them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cells import MISSING, Cell, Link, Materializer, MemoryStore, Replica, Space, read_value
from cells import _links as links_module


class World:
    def __init__(self) -> None:
        self.replica = Replica(MemoryStore())
        self.sp = Space(self.replica, "sp")
        self.materializer = Materializer(self.replica)
        self.computed = 0
        """Links the materializer read afresh (counted through `_compute`)."""

    def cell(self, id: str, *path: str | int) -> Cell:
        return self.sp.cell(id, path=tuple(path))

    def put(self, id: str, value: Any, *path: str | int) -> None:
        pending = self.cell(id, *path).set(value)
        self.replica.pump()
        assert pending.result().ok

    def read(self, link: Link) -> Any:
        """The materializer's read, checked against `read_value` in a fresh transaction."""
        tx, fresh = self.sp.edit(), self.sp.edit()
        got = self.materializer.read(tx, link)
        want = read_value(fresh, link)
        assert want == got
        assert set(fresh.reads) == set(tx.reads)
        copy = self.materializer.thaw(got)
        assert want == copy
        if type(got) in (dict, list):
            assert copy is not got
        tx.abort()
        fresh.abort()
        return got


@pytest.fixture
def w(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    world = World()
    compute = links_module.Materializer._compute

    def counted(self: Materializer, *args: Any) -> Any:
        world.computed += 1
        return compute(self, *args)

    monkeypatch.setattr(links_module.Materializer, "_compute", counted)
    yield world
    world.materializer.close()


def _board(w: World, n: int) -> Link:
    """A mapped list: `list` holds links to `card i`, whose fields link to `label i`."""
    for i in range(n):
        w.put(f"label {i}", f"L{i}")
        w.put(f"card {i}", {"label": w.cell(f"label {i}").link(), "n": i})
    w.put("list", [w.cell(f"card {i}").link() for i in range(n)])
    w.put("board", {"out": w.cell("list").link()})
    return w.cell("board", "out").link()


def test_an_edit_of_one_element_reads_only_that_element_again(w: World) -> None:
    link = _board(w, 20)
    first = w.read(link)
    assert {"label": "L3", "n": 3} == first[3]
    w.computed = 0
    w.put("label 3", "edited")
    second = w.read(link)
    assert {"label": "edited", "n": 3} == second[3]
    assert 1 == w.computed  # the label's link; not the card, the list or the others
    assert all(second[i] is first[i] for i in range(20) if i != 3)
    w.computed = 0
    w.put("card 5", 50, "n")
    assert 50 == w.read(link)[5]["n"]
    assert 2 == w.computed  # the card and its label's link, read again
    w.computed = 0
    assert w.read(link) is w.read(link)  # nothing changed: the kept value itself
    assert 0 == w.computed


def test_a_change_that_leaves_the_value_equal_returns_the_kept_value(w: World) -> None:
    link = _board(w, 3)
    first = w.read(link)
    w.put("card 1", {"label": w.cell("label 1").link(), "n": 1})  # a new, equal document
    assert first is w.read(link)


def test_a_structural_change_reads_everything_again(w: World) -> None:
    link = _board(w, 5)
    w.read(link)
    w.computed = 0
    w.put("list", [w.cell(f"card {i}").link() for i in (4, 0, 1)])
    assert [4, 0, 1] == [card["n"] for card in w.read(link)]
    assert 1 + 3 * 2 == w.computed  # the root, three cards and their labels


def test_links_that_become_absent_or_present_read_as_read_value_reads_them(w: World) -> None:
    w.put("x", 1)
    w.put("doc", {"a": w.cell("x").link(), "b": 2, "items": [w.cell("y").link(), 3]})
    link = w.cell("doc").link()
    assert {"a": 1, "b": 2, "items": [None, 3]} == w.read(link)
    w.put("y", "here")
    assert {"a": 1, "b": 2, "items": ["here", 3]} == w.read(link)
    w.cell("x").delete()
    w.replica.pump()
    got = w.read(link)
    assert {"b": 2, "items": ["here", 3]} == got
    w.put("x", 7)
    got = w.read(link)
    assert ["a", "b", "items"] == list(got)  # in the stored order, as read_value has it
    assert MISSING is not got


def test_a_link_re_pointed_inside_an_element_is_followed(w: World) -> None:
    link = _board(w, 3)
    w.read(link)
    w.put("other", "O")
    w.put("card 2", w.cell("other").link(), "label")
    assert {"label": "O", "n": 2} == w.read(link)[2]
    w.put("other", "O2")  # the element now depends on the new target
    assert {"label": "O2", "n": 2} == w.read(link)[2]
    w.put("label 2", "old target")  # and no longer on the old one
    assert {"label": "O2", "n": 2} == w.read(link)[2]


def test_two_elements_reading_one_document_stay_exact(w: World) -> None:
    # The second element's target read logs nothing in the first full read (a repeat):
    # a change there must still reach both.
    w.put("shared", "S")
    w.put("list", [w.cell("shared").link(), w.cell("shared").link(), 1])
    link = w.cell("list").link()
    assert ["S", "S", 1] == w.read(link)
    w.put("shared", "T")
    assert ["T", "T", 1] == w.read(link)
    w.put("shared", "U")
    assert ["U", "U", 1] == w.read(link)


def test_a_read_in_a_used_transaction_reads_plainly(w: World) -> None:
    link = _board(w, 3)
    w.read(link)
    tx = w.sp.edit()
    tx.read(w.cell("label 0").doc_key)
    assert read_value(w.sp.edit(), link) == w.materializer.read(tx, link)
    tx.abort()


def test_materializers_on_one_replica_share_one_subscription(w: World) -> None:
    link = _board(w, 3)
    w.read(link)  # the fixture's materializer keeps the board
    before = len(w.replica._subscribers)
    others = [Materializer(w.replica) for _ in range(3)]
    for m in others:
        tx = w.sp.edit()
        m.read(tx, link)
        tx.abort()
    assert before == len(w.replica._subscribers)
    others[0].close()  # its links leave the index; the others still hear changes
    w.put("label 1", "changed")
    for m in others[1:]:
        tx = w.sp.edit()
        assert {"label": "changed", "n": 1} == m.read(tx, link)[1]
        tx.abort()
    assert {"label": "changed", "n": 1} == w.read(link)[1]


def _rows_into_one_document(w: World, n: int) -> Link:
    """A view's usual shape: `rows` links to `row i`, whose title links into element i
    of one inline `items` document (every row reads that one document)."""
    w.put("items", [{"title": f"t{i}"} for i in range(n)])
    for i in range(n):
        w.put(f"row {i}", {"title": Link("sp", "items", "space", (i, "title")), "n": i})
    w.put("rows", [w.cell(f"row {i}").link() for i in range(n)])
    return w.cell("rows").link()


def test_an_edit_inside_one_element_of_an_inline_list_reads_only_its_readers_again(
    w: World,
) -> None:
    link = _rows_into_one_document(w, 50)
    first = w.read(link)
    w.computed = 0
    w.put("items", "edited", 7, "title")
    second = w.read(link)
    assert {"title": "edited", "n": 7} == second[7]
    # The one link into element 7, not the 50 links into the items document.
    assert 1 == w.computed
    assert all(second[i] is first[i] for i in range(50) if i != 7)


def test_a_write_above_the_places_read_reads_every_link_below_it_again(w: World) -> None:
    link = _rows_into_one_document(w, 5)
    w.read(link)
    w.computed = 0
    w.put("items", {"title": "whole"}, 2)  # element 2 replaced: its title's reader reads
    assert {"title": "whole", "n": 2} == w.read(link)[2]
    assert 1 == w.computed
    w.computed = 0
    w.put("items", [{"title": f"new {i}"} for i in range(5)])  # the whole document
    assert ["new 0", "new 4"] == [w.read(link)[i]["title"] for i in (0, 4)]
    assert 5 == w.computed


def test_a_link_appearing_on_the_way_to_a_place_read_is_followed(w: World) -> None:
    link = _rows_into_one_document(w, 3)
    w.read(link)
    w.put("elsewhere", {"title": "via a link"})
    w.put("items", w.cell("elsewhere").link(), 1)  # element 1 now links elsewhere
    assert {"title": "via a link", "n": 1} == w.read(link)[1]
    w.put("elsewhere", "again", "title")  # the row now reads through the new hop
    assert {"title": "again", "n": 1} == w.read(link)[1]


def test_changes_name_the_places_read_again_since_the_value_given(w: World) -> None:
    link = _rows_into_one_document(w, 10)
    first = w.read(link)
    assert w.materializer.changes(MISSING, first) is None  # a first read: unknown
    w.put("items", "x", 3, "title")
    w.put("items", "y", 8, "title")
    second = w.read(link)
    assert [(3, "title"), (8, "title")] == sorted(w.materializer.changes(first, second) or [])
    assert [] == w.materializer.changes(second, w.read(link))
    w.put("rows", [w.cell(f"row {i}").link() for i in range(2)])  # the root read anew
    third = w.read(link)
    assert w.materializer.changes(second, third) is None
    assert w.materializer.changes(first, third) is None  # not the value last given


def test_the_path_index_holds_only_kept_links(w: World) -> None:
    link = _rows_into_one_document(w, 4)
    w.read(link)
    hub = links_module._hub(w.replica)
    assert hub.by_key
    w.materializer.close()
    assert {} == hub.by_key  # every level pruned: nothing kept, nothing indexed


def test_a_link_in_an_element_replaced_by_a_value_reads_only_that_element_again(
    w: World,
) -> None:
    # What a view's in-place edit of a shown leaf does: the row's title link becomes
    # the typed text. The row reads other places now; the other rows are kept.
    link = _rows_into_one_document(w, 30)
    first = w.read(link)
    w.computed = 0
    w.put("row 4", "typed", "title")
    second = w.read(link)
    assert {"title": "typed", "n": 4} == second[4]
    assert 1 == w.computed  # row 4 itself; no whole re-read
    assert all(second[i] is first[i] for i in range(30) if i != 4)
    w.put("items", "no longer read by row 4", 4, "title")
    assert second is w.read(link)
    w.put("items", "still read by row 5", 5, "title")
    assert {"title": "still read by row 5", "n": 5} == w.read(link)[5]


def test_idle_while_the_reads_find_no_link_to_keep(w: World) -> None:
    # Idle: nothing kept and nothing to keep on the next read (a sink may drop it).
    assert not w.materializer.idle  # a new one keeps from its first read
    w.put("plain", {"a": 1, "b": [2, 3]})
    w.read(w.cell("plain").link())
    assert w.materializer.idle
    _board(w, 3)
    board = w.cell("board").link()
    w.read(board)  # a plain read finds links: kept from the next read on
    assert not w.materializer.idle
    w.read(board)
    assert not w.materializer.idle and w.computed > 0
    w.read(w.cell("plain").link())  # another value, without links
    assert w.materializer.idle

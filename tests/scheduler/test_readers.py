"""The reader index: which readers of a document a change triggers."""

from __future__ import annotations

from typing import Any

from cells import ELEMENT_IDS, Change, DocKey, Identity, element_ids, ids_key, set_path
from scheduler._node import FunctionNode, Node, lean_reads
from scheduler._readers import (
    TRIE_READERS,
    ReaderIndex,
    _Alike,
    _entries,
    changed_at,
    compact_reads,
)

KEY = DocKey("sp", "doc", "space", "p", "s")


def _reader(index: ReaderIndex, name: str, *reads: tuple[Any, bool]) -> Node:
    node = FunctionNode(lambda _tx: None, "computation", 0, Identity("p", "s"), (), label=name)
    index.apply(node, compact_reads((KEY, path, shallow) for path, shallow in reads))
    return node


def test_a_change_with_written_paths_compares_only_the_readers_on_those_paths() -> None:
    # A well-read list document (one reader per element's title, plus readers of the
    # whole list and of its length): an edit of element 7's title, with its written
    # path known, triggers the element's reader and the deep reader of the list, and
    # compares only the readers on that path, not one per element.
    n = 4 * TRIE_READERS
    index = ReaderIndex()
    elements = [_reader(index, f"title {i}", (("value", i, "title"), False)) for i in range(n)]
    whole = _reader(index, "whole", (("value",), False))
    length = _reader(index, "length", (("value",), True))
    before = {"value": [{"title": f"t{i}"} for i in range(n)]}
    path = ("value", 7, "title")
    after = set_path(before, path, "edited")
    start = index.comparisons
    got = index.match(Change(KEY, before, after, (path,)))
    assert {elements[7], whole} == set(got)
    assert length not in got
    assert 3 == index.comparisons - start  # the two list readers and element 7's
    # Without the paths, the same readers (found by a scan of the list).
    assert set(got) == set(index.match(Change(KEY, before, after)))
    index._check([*elements, whole, length])


def test_a_write_that_makes_a_level_triggers_the_readers_below_it_off_its_path() -> None:
    # Found by the trigger property test (shrunk): a write at ["a", "a"] into a
    # document without "a" makes the level "a"; a read at ["a", "b"] was unreachable
    # (the walk stopped at the absent "a") and is now absent. The rule calls that a
    # change, and the walk along the written path must find it as the full walk does.
    index = ReaderIndex()
    readers = [
        _reader(index, f"pad {i}", (("value", "pad", i), False)) for i in range(TRIE_READERS)
    ]
    below = _reader(index, "below", (("value", "a", "b"), False))
    before: Any = {"value": {}}
    path = ("value", "a", "a")
    after = set_path(before, path, None)
    assert [below] == index.match(Change(KEY, before, after))
    assert [below] == index.match(Change(KEY, before, after, (path,)))
    assert not set(readers) & set(index.match(Change(KEY, before, after, (path,))))


def _spliced(before: Any, index: int, delete: int, added: list[Any], ids: list[Any]) -> Any:
    """`before` with the list at "value" spliced, and its element-id table as a
    splice leaves it (`ids`: [next, [id, ...]] after the splice)."""
    items = before["value"]
    return {
        "value": [*items[:index], *added, *items[index + delete :]],
        ELEMENT_IDS: {ids_key(("value",)): ids},
    }


def test_readers_by_element_id_follow_their_element_through_a_splice() -> None:
    # Issue 14: each element's child reads its element by id. An insert at the front
    # moves every element, yet triggers none of their readers (only the list's length
    # reader), and compares O(changed) readers, not one per element; an edit by
    # position triggers the reader of the element there; a removed element's reader
    # sees it gone.
    for n in (TRIE_READERS // 2, 4 * TRIE_READERS):  # changed_at and the path trie
        index = ReaderIndex()
        elements = [
            _reader(index, f"title {i}", (("value", f"#{i}", "title"), False)) for i in range(n)
        ]
        length = _reader(index, "length", (("value",), True))
        before = {"value": [{"title": f"t{i}"} for i in range(n)]}
        front = _spliced(
            before,
            0,
            0,
            [{"title": "new"}],
            [n + 1, [f"~{n}", *element_ids(before, ("value",), before["value"])]],
        )
        paths = (("value",), (ELEMENT_IDS, ids_key(("value",))))
        start = index.comparisons
        assert [length] == index.match(Change(KEY, before, front, paths))
        if n >= TRIE_READERS:  # (below that, each reader is compared: O(1) each)
            assert index.comparisons - start <= 4
        assert [length] == index.match(Change(KEY, before, front))
        # Position 8 now holds element #7.
        path = ("value", 8, "title")
        edited = set_path(front, path, "edited")
        start = index.comparisons
        assert [elements[7]] == index.match(Change(KEY, front, edited, (path,)))
        if n >= TRIE_READERS:
            # The length reader and element 7's, once (the element is the same before
            # and after: its readers are not compared twice).
            assert 2 == index.comparisons - start
        assert [elements[7]] == index.match(Change(KEY, front, edited))
        # Removing position 4 (element #3) removes what elements[3] read.
        ids = front[ELEMENT_IDS][ids_key(("value",))]
        removed = _spliced(front, 4, 1, [], [ids[0], [*ids[1][:4], *ids[1][5:]]])
        assert {elements[3], length} == set(index.match(Change(KEY, front, removed, paths)))
        assert {elements[3], length} == set(index.match(Change(KEY, front, removed)))
        index._check([*elements, length])


def test_an_edit_inside_an_element_read_by_id_goes_on_along_its_path_by_the_id() -> None:
    # Issue 14: an element's readers read it by id; an edit of one field of element 7
    # (its written path known, by position) triggers the readers on that path (the
    # element whole, the field) and those below it, and no reader of the element's
    # other field or of another element. Ids by position (never spliced) and from a
    # splice's table (element 7 at position 8).
    n = 2 * TRIE_READERS
    for spliced in (False, True):
        index = ReaderIndex()
        first = _reader(index, "first", (("value", 0), False))  # by position, another element
        title = [
            _reader(index, f"title {i}", (("value", f"#{i}", "title"), False)) for i in range(n)
        ]
        body = [_reader(index, f"body {i}", (("value", f"#{i}", "body"), False)) for i in range(n)]
        whole = [_reader(index, f"whole {i}", (("value", f"#{i}"), False)) for i in range(n)]
        deep = _reader(index, "deep", (("value", "#7", "title", "x"), False))
        keys = _reader(index, "keys", (("value", "#7"), True))
        before: Any = {"value": [{"title": {"x": i}, "body": i} for i in range(n)]}
        at = 7
        if spliced:
            ids = [n + 1, [f"~{n}", *element_ids(before, ("value",), before["value"])]]
            before = _spliced(before, 0, 0, [{"title": "new", "body": 0}], ids)
            at = 8
        for path, expected in (
            (("value", at, "title"), {title[7], whole[7], deep}),
            (("value", at, "title", "x"), {title[7], whole[7], deep}),
            (("value", at, "body"), {body[7], whole[7]}),
            (("value", at, "new"), {whole[7], keys}),
        ):
            after = set_path(before, path, "edited")
            start = index.comparisons
            got = set(index.match(Change(KEY, before, after, (path,))))
            along = index.comparisons - start
            assert expected == got, (spliced, path)
            # The same readers and the same comparisons as without the path known.
            assert set(index.match(Change(KEY, before, after))) == got
            assert index.comparisons - start - along >= along, (spliced, path)
        index._check([first, *title, *body, *whole, deep, keys])


def test_the_trie_is_made_as_readers_register_and_misses_none_after_unregistering() -> None:
    # Issue 14: the first change after a list's cards ran used to build the path trie
    # of all their readers (a third of an edit's work at 1,000 elements). The trie is
    # made by the registration that brings the document to TRIE_READERS readers, and
    # kept in step as readers leave and come back: a change then triggers exactly the
    # registered readers whose element changed.
    index = ReaderIndex()
    n = 2 * TRIE_READERS
    before = {"value": [{"title": f"t{i}"} for i in range(n)]}
    elements = []
    for i in range(n):
        elements.append(_reader(index, f"title {i}", (("value", i, "title"), False)))
        assert (KEY in index.tries) is (i + 1 >= TRIE_READERS)
    trie = index.tries[KEY]
    for node in elements[::2]:  # below the threshold again: the trie stays, in step
        index.remove(node)
    index._check(elements[1::2])
    assert trie is index.tries[KEY]
    back = _reader(index, "title 0 again", (("value", 0, "title"), False))
    for i in (0, 1, 2):
        path = ("value", i, "title")
        after = set_path(before, path, "edited")
        want = {0: [back], 1: [elements[1]], 2: []}[i]
        assert want == index.match(Change(KEY, before, after, (path,)))
        assert want == index.match(Change(KEY, before, after))
    index._check([*elements[1::2], back])
    for node in [*elements[1::2], back]:
        index.remove(node)
    assert KEY not in index.tries
    index._check([])


def test_a_trie_level_keeps_a_lone_reader_bare_and_no_empty_dicts() -> None:
    # A trie level keeps one reader as the node itself, a dict only from two on, and
    # shares one never-written empty children dict; it goes back to the lone form as
    # readers leave, and a change finds the same readers in every form.
    from scheduler import _readers as readers_module

    index = ReaderIndex()
    n = TRIE_READERS
    elements = [_reader(index, f"title {i}", (("value", i, "title"), False)) for i in range(n)]
    level = index.tries[KEY].children["value"].children[0].children["title"]
    assert level.deep is elements[0] and level.shallow is None
    assert level.children is readers_module._NO_CHILDREN
    second = _reader(index, "title 0 too", (("value", 0, "title"), False))
    shallow = _reader(index, "title 0 shallow", (("value", 0, "title"), True))
    # (mypy keeps `level.deep` narrowed to the lone reader across _reader())
    assert level.deep == {elements[0]: None, second: None}  # type: ignore[comparison-overlap]
    assert level.shallow is shallow
    before = {"value": [{"title": f"t{i}"} for i in range(n)]}
    path = ("value", 0, "title")
    after = set_path(before, path, "edited")
    assert {elements[0], second} == set(index.match(Change(KEY, before, after, (path,))))
    assert {elements[0], second} == set(index.match(Change(KEY, before, after)))
    index._check([*elements, second, shallow])
    index.remove(elements[0])
    assert level.deep is second
    index.remove(second)
    index.remove(shallow)
    assert 0 not in index.tries[KEY].children["value"].children
    index._check(elements[1:])


def test_the_trie_check_finds_a_broken_compact_form() -> None:
    # `_check` is what holds the forms: a one-entry dict, or a write to the shared
    # empty children dict, is reported.
    import pytest

    from scheduler import _readers as readers_module

    index = ReaderIndex()
    elements = [
        _reader(index, f"title {i}", (("value", i, "title"), False)) for i in range(TRIE_READERS)
    ]
    trie = index.tries[KEY]
    level = trie.children["value"].children[0].children["title"]
    level.deep = {elements[0]: None}
    with pytest.raises(AssertionError):
        index._check(elements)
    level.deep = elements[0]
    index._check(elements)
    stray = readers_module._Trie()
    stray.children = {}  # (not the shared one: a level holding itself would loop)
    readers_module._NO_CHILDREN["x"] = stray
    try:
        with pytest.raises(AssertionError):
            index._check(elements)
    finally:
        del readers_module._NO_CHILDREN["x"]


def test_a_well_read_document_keeps_its_readers_in_its_trie_alone() -> None:
    # From TRIE_READERS readers on, a document's readers are in its trie and not in the
    # tables too (each reader held twice cost about 37 bytes); every lookup still finds
    # them, readers that read the same way still share one read set, and below one
    # reader the trie goes.
    from scheduler._node import lean_reads

    def lean(name: str) -> Node:
        node = FunctionNode(lambda _tx: None, "computation", 0, Identity("p", "s"), (), label=name)
        index.apply(node, lean_reads(compact_reads([(KEY, ("value",), False)])))
        return node

    index = ReaderIndex()
    nodes = [lean(f"r{i}") for i in range(TRIE_READERS)]
    assert KEY in index.tries and KEY not in index.deep and KEY not in index.shallow
    assert set(nodes) == index.readers_of(KEY)
    assert index.a_reader(KEY) in nodes
    late = lean("late")
    assert late.reads is nodes[0].reads  # shared, found through the trie
    shallow = _reader(index, "shallow", (("value", "x"), True))
    assert shallow in index.readers_of(KEY) and KEY not in index.shallow
    index._check([*nodes, late, shallow])
    before, after = {"value": {"x": 1}}, {"value": {"x": 2}}
    assert {*nodes, late} == set(index.match(Change(KEY, before, after)))
    for node in [*nodes, late, shallow]:
        index.remove(node)
    assert KEY not in index.tries and index.a_reader(KEY) is None
    assert set() == index.readers_of(KEY)
    index._check([])


def test_the_reader_check_finds_a_table_entry_beside_a_trie() -> None:
    import pytest

    index = ReaderIndex()
    nodes = [_reader(index, f"r{i}", (("value",), False)) for i in range(TRIE_READERS)]
    index.deep[KEY] = nodes[0]
    with pytest.raises(AssertionError):
        index._check(nodes)
    del index.deep[KEY]
    index._check(nodes)


def test_a_read_of_element_kinds_sees_a_change_of_kind_only() -> None:
    # Issue 14 item 5: a list coordinator over inline scalars reads the kinds of the
    # elements once (`Transaction.read_kinds`) instead of each position shallowly. The
    # read triggers when a scalar or link element changes kind (or its link), at an
    # edited element and at an inserted one, and never for a new value of the same type;
    # an inline container's position is not read (it may change inside freely). With
    # the written path known, only the written element is compared: O(1) in the length.
    from cells import ELEMENT_KINDS, Link

    link = Link("sp", "target")
    for n in (TRIE_READERS // 2, 4 * TRIE_READERS):  # changed_at and the path trie
        index = ReaderIndex()
        elements = [_reader(index, f"element {i}", (("value", f"#{i}"), False)) for i in range(n)]
        kinds = _reader(index, "kinds", (("value", ELEMENT_KINDS), True))
        values: list[Any] = [f"t{i}" for i in range(n)]
        values[1] = {"inline": 1}
        before = {"value": values}

        def match(
            path: tuple[Any, ...], value: Any, base: Any = before, index: ReaderIndex = index
        ) -> set[Node]:
            after = set_path(base, path, value)
            with_paths = set(index.match(Change(KEY, base, after, (path,))))
            assert with_paths == set(index.match(Change(KEY, base, after)))
            return with_paths

        path = ("value", 5)
        edited = set_path(before, path, "same type, new value")
        start = index.comparisons
        assert [elements[5]] == index.match(Change(KEY, before, edited, (path,)))
        if n >= TRIE_READERS:
            assert 2 == index.comparisons - start  # element 5's reader and the kinds read
        assert kinds not in match(path, "same type, new value")
        assert kinds in match(("value", 5), link)  # a scalar becomes a link
        assert kinds in match(("value", 5), {"a": 1})  # ... or a container
        assert kinds in match(("value", 5), 5)  # ... or a scalar of another type
        assert kinds not in match(("value", 1), "a container's position is not read")
        assert kinds not in match(("value", 1, "inline"), 2)
        linked = set_path(before, ("value", 3), link)
        assert kinds in match(("value", 3), Link("sp", "other"), linked)  # re-pointed
        assert kinds not in match(("value", 4), "x", linked)
        # A whole list written anew: the same kinds, then one element of another kind.
        assert kinds not in match(("value",), [*values[:5], "new", *values[6:]])
        assert kinds in match(("value",), [*values[:5], link, *values[6:]])
        # A splice (an insert at the front, a removal from the middle) changes the length.
        ids = [n + 1, [f"~{n}", *element_ids(before, ("value",), values)]]
        front = _spliced(before, 0, 0, ["new"], ids)
        paths = (("value",), (ELEMENT_IDS, ids_key(("value",))))
        assert kinds in index.match(Change(KEY, before, front, paths))
        assert kinds in index.match(Change(KEY, before, front))
        index._check([*elements, kinds])


def test_a_reader_by_element_id_is_triggered_when_only_the_id_table_changed() -> None:
    # A rejected splice reverted under a whole-list write built on it: the list is the
    # same object before and after, but the document's id table is not, so the id
    # "#1" names another element now (found by `property_tests/test_list_element_edits_props`:
    # a filter kept an element whose value had changed). Every way of matching
    # (`changed_at`, the readers' tables, the trie with or without the written paths)
    # triggers the readers whose element moved, and only them.
    items = [{"v": 0}, {"v": 1}, {"v": 2}]
    before = {"value": items, ELEMENT_IDS: {ids_key(("value",)): [3, ["~9", "#0", "#1"]]}}
    after = {"value": items, ELEMENT_IDS: {ids_key(("value",)): [2, ["#0", "#1", "#2"]]}}
    assert element_ids(before, ("value",), items)[2] == element_ids(after, ("value",), items)[1]
    assert changed_at(before, after, ("value", "#1"), shallow=False)
    assert changed_at(before, after, ("value", "#0", "v"), shallow=False)
    assert not changed_at(before, after, ("value", 1), shallow=False)  # (by position)
    for many in (False, True):
        index = ReaderIndex()
        moved = [_reader(index, f"by id {x}", (("value", x), False)) for x in ("#0", "#1")]
        field = _reader(index, "field of #1", (("value", "#1", "v"), False))
        by_position = _reader(index, "at 1", (("value", 1), False))
        others = [
            _reader(index, f"other {i}", (("other", i), False))
            for i in range(TRIE_READERS if many else 0)
        ]
        assert (KEY in index.tries) is many
        want = {*moved, field}
        assert want == set(index.match(Change(KEY, before, after)))
        # The revert's written paths are unknown; a local commit's are known.
        written = (("value",), (ELEMENT_IDS, ids_key(("value",))))
        assert want == set(index.match(Change(KEY, before, after, written)))
        assert by_position not in index.match(Change(KEY, before, after))
        index._check([*moved, field, by_position, *others])


def test_readers_that_all_read_a_document_the_same_way_get_the_general_verdict() -> None:
    # `match`'s shortcut for a document whose few readers share one way of reading it
    # (a node's output, read whole by the nodes and the sink that read it): one
    # verdict for all of them, the one `_matching` gives each reader, with the same
    # comparison count, for every kind of change at the read place.
    big = 10**18
    cases: list[tuple[Any, Any]] = [
        ({"value": 1}, {"value": 2}),  # an int changed
        ({"value": 1}, {"value": 1}),  # the same object
        ({"value": big}, {"value": int(str(big))}),  # equal ints, two objects
        ({"value": "a"}, {"value": "b"}),
        ({"value": "a"}, {"value": "".join(["a"])}),  # equal strs, two objects
        ({"value": {"x": [1]}}, {"value": {"x": [1]}}),  # equal containers
        ({"value": {"x": [1]}}, {"value": {"x": [2]}}),
        ({"value": 1}, {"value": 1.0}),  # equal numbers of two types
        ({"value": None}, {}),  # None, then absent
        ({}, {"value": 0}),  # absent, then present
        ({"value": 1}, None),  # the document gone
    ]
    for ways, mixed in (
        ([(("value",), False)], False),
        ([(("value",), False)], True),  # held in a dict: a reader read another way first
        ([(("value", "x"), False)], False),
        ([(("value",), True)], False),
    ):
        index = ReaderIndex()
        readers = [_reader(index, f"r{i}", *ways) for i in range(3)]
        if mixed:
            index.apply(readers[1], compact_reads([(KEY, ("other",), False)]))
            index.apply(readers[1], compact_reads([(KEY, *way) for way in ways]))
        kind = 1 if ways[0][1] else 0
        held = (index.shallow if kind else index.deep)[KEY]
        # (Deep readers alike are held as one `_Alike`, unless they were not alike once.)
        assert isinstance(held, dict if kind or mixed else _Alike)
        each = list(_entries(held, KEY, kind))
        for before, after in cases:
            expected = index._matching(each, before, after, ways[0][1])
            start = index.comparisons
            got = index.match(Change(KEY, before, after, None))
            counted = index.comparisons - start
            start = index.comparisons
            index._matching(each, before, after, ways[0][1])
            assert (got, counted) == (expected, index.comparisons - start), (ways, before, after)
        # (Not vacuous: every reader is hit by some case, and none by another.)
        hit = [sorted(index.match(Change(KEY, before, after)), key=str) for before, after in cases]
        assert sorted(readers, key=str) in hit and [] in hit
        index._check(readers)
    # Readers that read it in two ways are matched one by one, as before.
    index = ReaderIndex()
    whole = _reader(index, "whole", (("value",), False))
    field = _reader(index, "field", (("value", "x"), False))
    other = _reader(index, "other", (("value",), False))
    assert [whole, other] == index.match(
        Change(KEY, {"value": {"x": 1, "y": 1}}, {"value": {"x": 1, "y": 2}})
    )
    assert [whole, field, other] == index.match(
        Change(KEY, {"value": {"x": 1}}, {"value": {"x": 2}})
    )


def test_a_moved_change_gets_the_verdicts_and_comparison_count_of_match() -> None:
    # `match_moved`: a change whose commit moved the value at its one path (a drain's
    # node commit) triggers a document's readers that all read exactly there, deep,
    # with no comparison of values; every other document goes through `match`. For
    # each way of reading a document (and after a reader's read set changed or a
    # reader left), the readers and the comparison count are `match`'s.
    place = ("value",)
    moves: list[tuple[Any, Any]] = [
        ({"value": 1, "other": 1}, {"value": 2, "other": 1}),
        ({"value": {"x": 1, "y": 1}}, {"value": {"x": 1, "y": 2}}),
        ({"value": {"x": 1}}, {"value": {"x": 2}}),
        ({"value": [1]}, {"value": [1, 2]}),
        ({"other": 1}, {"value": 0, "other": 1}),  # absent, then present
        ({"value": "a"}, {}),
    ]
    for before, after in moves:  # (each moved the value at the place: the precondition)
        assert changed_at(before, after, place, shallow=False)
    ways: list[list[list[tuple[Any, bool]]]] = [
        [],  # nobody reads it
        [[(place, False)]],  # one reader there (a chain's link)
        [[(place, False)]] * 3,  # a few, the same way (a node's output)
        [[(("other",), False)]],  # one reader elsewhere: never hit
        [[(("other",), False)]] * 2,  # a few alike, elsewhere
        [[(("value", "x"), False)]] * 3,  # a few alike, deeper
        [[(place, False)], [(("other",), False)]],
        [[(place, False)], [(("value", "x"), False)]],  # one deeper
        [[(place, False)], [(place, True)]],  # one shallow
        [[(place, True)]],
        [[(place, False), (("other",), False)]],  # one reader, two places
        [[(place, False)]] * TRIE_READERS,  # a trie
    ]
    for readers_ways in ways:
        index = ReaderIndex()
        readers = [_reader(index, f"r{i}", *w) for i, w in enumerate(readers_ways)]
        changes = [Change(KEY, before, after, (place,)) for before, after in moves]
        for step in range(3):
            if step == 1 and readers:
                # A reader's read set changes (to read elsewhere) ...
                index.apply(readers[0], compact_reads([(KEY, ("other",), False)]))
            if step == 2 and readers:
                index.remove(readers[-1])  # ... and a reader leaves.
            index._check(readers)
            for change in changes:
                start = index.comparisons
                expected = index.match(change)
                counted = index.comparisons - start
                start = index.comparisons
                got = list(index.match_moved(change))
                assert (got, index.comparisons - start) == (expected, counted), (
                    readers_ways,
                    step,
                    change,
                )
    # (Not vacuous: the shortcut compares nothing, so told that an unchanged value
    # moved it still triggers its readers; `match` would not. Once another reader reads
    # elsewhere, `match` decides; after it left and one reader reads another document,
    # the shortcut triggers only the other.)
    index = ReaderIndex()
    there = [_reader(index, f"r{i}", (place, False)) for i in range(2)]
    unmoved = Change(KEY, {"value": 1}, {"value": 1}, (place,))
    assert there == list(index.match_moved(unmoved)) and [] == index.match(unmoved)
    elsewhere = _reader(index, "elsewhere", (("other",), False))
    assert [] == index.match_moved(unmoved)
    index.remove(elsewhere)
    index.apply(there[0], compact_reads([(DocKey("sp", "another"), place, False)]))
    assert [there[1]] == list(index.match_moved(unmoved))


def test_deep_readers_alike_are_held_once_and_follow_joins_changes_and_removals() -> None:
    # Two or more deep readers of a document that read it the same way are held as one
    # `_Alike` (a node's output, read by the nodes and the sink after it), which a
    # change known to have moved the value there hands back as it is. It follows every
    # change of its readers: a reader whose read set changes leaves it (the rest go to
    # a dict, in their order), a removed reader leaves it, and one left is held alone.
    place = ("value",)
    moved = Change(KEY, {"value": 1}, {"value": 2}, (place,))
    index = ReaderIndex()
    r = [_reader(index, f"r{i}", (place, False)) for i in range(3)]
    held = index.deep[KEY]
    assert isinstance(held, _Alike) and held.nodes == tuple(r)
    assert r == list(index.match_moved(moved)) == index.match(moved)
    assert index.readers_of(KEY) == set(r) and index.a_reader(KEY) is r[0]
    index._check(r)
    # A reader's read set changes: it reads elsewhere in the document ...
    index.apply(r[1], compact_reads([(KEY, ("other",), False)]))
    mixed = index.deep[KEY]
    assert isinstance(mixed, dict) and list(mixed) == r
    assert [r[0], r[2]] == list(index.match_moved(moved)) == index.match(moved)
    index._check(r)
    # ... or another document only.
    index = ReaderIndex()
    r = [_reader(index, f"r{i}", (place, False)) for i in range(3)]
    index.apply(r[0], compact_reads([(DocKey("sp", "another"), place, False)]))
    held = index.deep[KEY]
    assert isinstance(held, _Alike) and held.nodes == (r[1], r[2])
    assert [r[1], r[2]] == list(index.match_moved(moved)) == index.match(moved)
    index._check(r)
    # A reader removed; then one reader left is held as itself.
    index.remove(r[1])
    assert index.deep[KEY] is r[2]
    assert [r[2]] == list(index.match_moved(moved)) == index.match(moved)
    index.remove(r[2])
    assert KEY not in index.deep and [] == list(index.match_moved(moved))
    index._check([r[0]])
    # Readers alike that become many get a trie like any others.
    index = ReaderIndex()
    many = [_reader(index, f"m{i}", (place, False)) for i in range(TRIE_READERS)]
    assert KEY not in index.deep and KEY in index.tries
    assert many == sorted(index.match_moved(moved), key=many.index)
    index._check(many)
    # A read set shared by readers alike (`_shared`) is found through the `_Alike`.
    index = ReaderIndex()
    r = [
        FunctionNode(lambda _tx: None, "computation", 0, Identity("p", "s"), (), label=f"r{i}")
        for i in range(3)
    ]
    for node in r:
        index.apply(node, lean_reads(compact_reads([(KEY, place, False)])))
    assert isinstance(index.deep[KEY], _Alike)
    assert r[0].reads is r[1].reads is r[2].reads
    index._check(r)

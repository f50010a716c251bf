"""`patch_ops`: RFC 6902 operations between two values, and the cells' patch streams."""

from __future__ import annotations

import pytest

from cells import MISSING, CellweaveError, MemoryStore, Space, patch_ops, patch_ops_at


def test_equal_values_give_no_operation_and_a_shared_subtree_is_skipped() -> None:
    shared = {"deep": [1, 2, {"x": 1}]}
    assert [] == patch_ops({"a": shared, "b": 1.0}, {"a": shared, "b": 1})
    assert [] == patch_ops(MISSING, None)


def test_pointers_escape_tilde_and_slash() -> None:
    assert [
        {"op": "remove", "path": "/a~1b"},
        {"op": "add", "path": "/~0", "value": [1]},
    ] == patch_ops({"a/b": 1}, {"~": [1]})


def test_a_changed_kind_is_one_replace_and_absent_counts_as_none() -> None:
    assert [{"op": "replace", "path": "/k", "value": [1]}] == patch_ops({"k": {"x": 1}}, {"k": [1]})
    assert [{"op": "replace", "path": "", "value": 3}] == patch_ops(MISSING, 3)
    assert [{"op": "replace", "path": "", "value": None}] == patch_ops([1], MISSING)
    assert [{"op": "replace", "path": "/0", "value": 1}] == patch_ops([True], [1])


def test_one_edit_in_a_long_list_is_operations_under_its_index_only() -> None:
    old = [{"n": i} for i in range(1000)]
    new = list(old)
    new[617] = {"n": -1}
    assert [{"op": "replace", "path": "/617/n", "value": -1}] == patch_ops(old, new)


def test_an_insert_at_the_front_and_a_removal_in_the_middle_are_one_operation_each() -> None:
    old = [{"n": i} for i in range(100)]
    assert [{"op": "add", "path": "/0", "value": {"n": -1}}] == patch_ops(old, [{"n": -1}, *old])
    assert [{"op": "remove", "path": "/50"}] == patch_ops(old, old[:50] + old[51:])


def test_operation_values_are_fresh_copies() -> None:
    inner = {"x": [1]}
    ops = patch_ops([], [inner])
    ops[0]["value"]["x"].append(2)
    assert {"x": [1]} == inner


def test_patch_streams_need_a_scheduler() -> None:
    cell = Space(MemoryStore(), "p").cell("c")
    with pytest.raises(CellweaveError, match="sink_patches"):
        cell.sink_patches(print)
    with pytest.raises(CellweaveError, match="observe_patches"):
        cell.observe_patches()


def test_patch_ops_at_diffs_only_the_places_named() -> None:
    rows = [{"n": i, "title": f"t{i}"} for i in range(1000)]
    old = {"rows": rows, "meta": {"count": 1000}}
    new_rows = list(rows)
    new_rows[7] = {"n": 7, "title": "edited"}
    new = {"rows": new_rows, "meta": {"count": 1000}}
    want = [{"op": "replace", "path": "/rows/7/title", "value": "edited"}]
    assert want == patch_ops_at(old, new, [("rows", 7)])
    assert want == patch_ops_at(old, new, [("rows", 7), ("rows", 7, "title")])  # covered
    assert patch_ops(old, new) == patch_ops_at(old, new, [("rows",)])


def test_patch_ops_at_adds_and_removes_a_key_present_on_one_side() -> None:
    old = {"a": {"x": 1}, "b": 2}
    new = {"a": {"x": 1, "y": 3}}
    got = patch_ops_at(old, new, [("a", "y"), ("b",), ("c",)])
    assert [{"op": "add", "path": "/a/y", "value": 3}, {"op": "remove", "path": "/b"}] == got


def test_patch_ops_at_orders_operations_as_the_value_does_not_as_the_paths_came() -> None:
    old = {"rows": [{"title": "a", "line": "[ ] a"}, {"title": "b", "line": "[ ] b"}]}
    new = {"rows": [old["rows"][0], {"title": "B", "line": "[ ] B"}]}
    want = patch_ops(old, new)
    for paths in (
        [("rows", 1, "line"), ("rows", 1, "title")],
        [("rows", 1, "title"), ("rows", 1, "line")],
    ):
        assert want == patch_ops_at(old, new, paths)

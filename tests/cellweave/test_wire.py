"""The view protocol's pure parts: the client's value mirrored, pointers typed."""

from __future__ import annotations

from typing import Any

import pytest

from cells import MemoryStore, Replica, Space
from cellweave._wire import Mirror, ProtocolError, Results, mark_patch, result_places


def test_a_pointers_digits_are_a_list_index_or_a_dict_key_by_the_container() -> None:
    mirror = Mirror({"slots": {"1": {"n": 0}}, "rows": [{"n": 0}, {"n": 1}]})
    assert ("slots", "1", "n") == mirror.typed("/slots/1/n")
    assert ("rows", 1, "n") == mirror.typed("/rows/1/n")
    assert ("rows", 2) == mirror.typed("/rows/-")


def test_the_mirror_follows_every_operation_kind() -> None:
    mirror = Mirror(None)
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "", "value": {"rows": [1, 2, 3], "d": {"7": "x"}}},
        {"op": "add", "path": "/rows/0", "value": 0},
        {"op": "remove", "path": "/rows/3"},
        {"op": "move", "from": "/rows/0", "path": "/rows/2"},
        {"op": "replace", "path": "/d/7", "value": "y"},
        {"op": "add", "path": "/d/10", "value": [5]},
    ]
    typed = [mirror.apply(op) for op in ops]
    assert {"rows": [1, 2, 0], "d": {"7": "y", "10": [5]}} == mirror.value
    assert [(), ("rows", 0), ("rows", 3), ("rows", 2), ("d", "7"), ("d", "10")] == typed


def test_a_non_index_under_a_list_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not a list index"):
        Mirror({"rows": []}).typed("/rows/first")


def test_a_stream_under_a_digit_dict_key_is_marked_at_its_own_place() -> None:
    cell = Space(Replica(MemoryStore()), "sp").cell("doc")
    mirror = Mirror({"slots": {"1": {"n": 0}}})
    asked = []

    def label_of(at: object) -> str | None:
        asked.append(at.path)  # type: ignore[attr-defined]
        return "go" if at.path == ("slots", "1", "go") else None  # type: ignore[attr-defined]

    got = mark_patch(label_of, cell, [{"op": "add", "path": "/slots/1/go", "value": None}], mirror)
    assert [{"op": "add", "path": "/slots/1/go", "value": {"$stream": "go"}}] == got
    assert [("slots", "1", "go")] == asked


def test_result_places_probes_record_fields_and_not_list_elements() -> None:
    cell = Space(Replica(MemoryStore()), "sp").cell("doc")
    value = {
        "child": {"x": 1, "inner": {"y": 2}},
        "plain": {"z": 3},
        "rows": [{"a": {"b": 1}}, {"a": {"b": 2}}],
        "n": 4,
    }
    asked = []

    def is_result(at: Any) -> bool:
        asked.append(at.path)
        return at.path in {("child",), ("child", "inner"), ("rows", 1, "a"), ("rows", 0)}

    assert [("child",), ("child", "inner"), ("rows", 1, "a")] == result_places(
        is_result, cell, value
    )
    # Every record field was asked about; the list's elements themselves were not.
    assert [("child",), ("child", "inner"), ("plain",), ("rows", 0, "a"), ("rows", 1, "a")] == (
        asked
    )


def test_results_follow_patches_adding_and_dropping_places() -> None:
    cell = Space(Replica(MemoryStore()), "sp").cell("doc")
    results_at = {("child",), ("rows", 1, "kid")}

    def is_result(at: Any) -> bool:
        return at.path in results_at

    held = Results(is_result, cell)
    value = {"child": {"x": 1}, "rows": [{"kid": {"y": 0}}, {"kid": {"y": 1}}]}
    mirror = Mirror(value)
    assert [("child",), ("rows", 1, "kid")] == held.snapshot(value)
    # The child becomes a plain record: its place is dropped. A row inserted at
    # the top shifts the others: the list is scanned again.
    results_at = {("rows", 2, "kid")}
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/child", "value": {"x": 2}},
        {"op": "add", "path": "/rows/0", "value": {"kid": {"y": -1}}},
    ]
    for op in ops:
        mirror.apply(op)
    found, dropped = held.patch(ops, mirror)
    assert [("rows", 2, "kid")] == found
    assert {("child",), ("rows", 1, "kid")} == set(dropped)
    assert {("rows", 2, "kid")} == held.held
    # A leaf edit inside a row scans nothing that holds a result: nothing changes.
    op = {"op": "replace", "path": "/rows/2/kid/y", "value": 5}
    mirror.apply(op)
    assert ([], []) == held.patch([op], mirror)

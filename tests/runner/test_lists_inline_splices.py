"""Inline elements keep their child through a splice (issue 14 item 5).

An inline element is keyed by its element id (`cells.element_ids`), which a
splice (`Cell.insert`, `Cell.remove`, `Cell.splice`) moves with the element, and
its child reads it through a link naming that id. So an insert at the front
runs the new element's child only, a remove runs nothing, and no kept
element's child is re-run or re-pointed. Counted with `pattern_defs.CALLS`.
"""

from __future__ import annotations

from typing import Any

import pytest
from pattern_defs import CALLS, Double, Titles
from support import arun, coordinator, run_list

from cells import MemoryStore, SQLiteStore
from runner import Runtime, lift, pattern


def titles(n: int, tag: str = "t") -> list[dict[str, Any]]:
    return [{"title": f"{tag}{i}"} for i in range(n)]


def upper(items: list[dict[str, Any]]) -> list[str]:
    return [x["title"].upper() for x in items]


def test_an_insert_at_the_front_of_inline_dicts_runs_only_the_new_element() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            rows = titles(30)
            items, res = await run_list(rt, Titles, rows)
            assert upper(rows) == await res.key("out").pull()
            registrations = len(rt.registrations())
            before = CALLS["upper"]
            reconciles = coordinator(rt).reconciles
            await items.insert(0, {"title": "new"})
            rows.insert(0, {"title": "new"})
            assert upper(rows) == await res.key("out").pull()  # every card demanded
            assert 1 == CALLS["upper"] - before  # the new element's; no other re-ran
            assert registrations + 1 == len(rt.registrations())
            assert 1 == coordinator(rt).reconciles - reconciles
            await items.insert(12, {"title": "mid"})
            rows.insert(12, {"title": "mid"})
            assert upper(rows) == await res.key("out").pull()
            assert 2 == CALLS["upper"] - before
            rt._check()

    arun(main)


def test_a_remove_from_the_middle_of_inline_dicts_runs_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            rows = titles(30)
            items, res = await run_list(rt, Titles, rows)
            assert upper(rows) == await res.key("out").pull()
            registrations = len(rt.registrations())
            before = CALLS["upper"]
            for i in (15, 0, 27):
                await items.remove(i)
                del rows[i]
                assert upper(rows) == await res.key("out").pull()
            assert 0 == CALLS["upper"] - before
            assert registrations - 3 == len(rt.registrations())
            rt._check()

    arun(main)


def test_an_edit_after_a_splice_runs_the_edited_elements_child_only() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            rows = titles(20)
            items, res = await run_list(rt, Titles, rows)
            assert upper(rows) == await res.key("out").pull()
            await items.insert(0, {"title": "new"})
            await items.remove(10)
            rows.insert(0, {"title": "new"})
            del rows[10]
            assert upper(rows) == await res.key("out").pull()
            before = CALLS["upper"]
            # Position 5 now holds the element first at position 4: its child follows it.
            await items.key(5, "title").set("edited")
            rows[5] = {"title": "edited"}
            assert upper(rows) == await res.key("out").pull()
            assert 1 == CALLS["upper"] - before
            # A whole-list write keeps the ids by position: only changed positions re-run.
            rows[3] = {"title": "three"}
            await items.set(rows)
            assert upper(rows) == await res.key("out").pull()
            assert 2 == CALLS["upper"] - before
            rt._check()

    arun(main)


@lift
def shout(element: Any) -> Any:
    return (element or {}).get("title", "").upper()


@pattern
def Shout(element):  # type: ignore[no-untyped-def]
    return {"text": shout(element), "element": element}


@pattern
def Shouts(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Shout)}


def test_a_child_result_holding_its_element_follows_it_through_a_splice() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            rows = titles(5)
            items, res = await run_list(rt, Shouts, rows)
            got: list[Any] = []
            cancel = res.key("out").sink(got.append)
            await rt.idle()
            assert [{"text": "T0", "element": rows[0]}] == got[-1][:1]
            await items.insert(0, {"title": "new"})
            rows.insert(0, {"title": "new"})
            await rt.idle()
            assert [{"text": r["title"].upper(), "element": r} for r in rows] == got[-1]
            # An edit by position reaches the element's child and every view through it.
            await items.key(3, "title").set("edited")
            rows[3] = {"title": "edited"}
            await rt.idle()
            assert [{"text": r["title"].upper(), "element": r} for r in rows] == got[-1]
            # A write through the link the child's result holds lands on its element.
            element = rt.get_cell("r").key("out", 2, "element")
            await element.key("title").set("through")
            rows[2] = {"title": "through"}
            await rt.idle()
            assert rows == await items.pull()
            assert [{"text": r["title"].upper(), "element": r} for r in rows] == got[-1]
            cancel()
            rt._check()

    arun(main)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_inline_children_survive_a_restart_after_splices(kind: str, tmp_path: Any) -> None:
    # The ids are stored with the list: a new runtime (on a reopened SQLite file too)
    # keys every element as before, finds the same child, and reuses its result.
    def store() -> Any:
        return held if kind == "memory" else SQLiteStore(tmp_path / "lists.db")

    held = MemoryStore()

    async def main() -> None:
        rows = titles(10)
        async with Runtime(store()) as rt:
            items, res = await run_list(rt, Titles, rows)
            assert upper(rows) == await res.key("out").pull()
            await items.insert(0, {"title": "new"})
            await items.remove(5)
            rows.insert(0, {"title": "new"})
            del rows[5]
            assert upper(rows) == await res.key("out").pull()
            children = set(rt.registrations())
        async with Runtime(store()) as again:
            res = again.get_cell("r")
            await again.start(res)
            before = CALLS["upper"]
            assert upper(rows) == await res.key("out").pull()
            assert children == set(again.registrations())  # the same child per element
            assert 0 == CALLS["upper"] - before  # each reused its stored result
            await again.get_cell("r-items").insert(0, {"title": "after"})
            rows.insert(0, {"title": "after"})
            assert upper(rows) == await res.key("out").pull()
            assert 1 == CALLS["upper"] - before
            again._check()

    arun(main)


@pattern
def Doubles(element):  # type: ignore[no-untyped-def]
    return {"out": element["rows"].map(Double)}


@pattern
def Groups(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Doubles)}


def test_a_list_inside_an_inline_element_follows_its_own_splices() -> None:
    # Each group's child maps the list inside its element, reached through the
    # element's id; that inner list's ids live under its positional path.
    async def main() -> None:
        async with Runtime() as rt:
            groups = [{"rows": [1, 2, 3]}, {"rows": [10, 20]}]
            items, res = await run_list(rt, Groups, groups)
            assert [{"out": [2, 4, 6]}, {"out": [20, 40]}] == await res.key("out").pull()
            await items.insert(0, {"rows": [5]})
            assert [{"out": [10]}, {"out": [2, 4, 6]}, {"out": [20, 40]}] == (
                await res.key("out").pull()
            )
            before = CALLS["double"]
            # A splice of the inner list that keeps its length: a new element there.
            await items.key(2, "rows").splice(0, 1, [7])
            assert [{"out": [10]}, {"out": [2, 4, 6]}, {"out": [14, 40]}] == (
                await res.key("out").pull()
            )
            assert 1 == CALLS["double"] - before
            await items.key(1, "rows").insert(0, 9)
            assert [{"out": [10]}, {"out": [18, 2, 4, 6]}, {"out": [14, 40]}] == (
                await res.key("out").pull()
            )
            assert 2 == CALLS["double"] - before
            rt._check()

    arun(main)

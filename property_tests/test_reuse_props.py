"""A restart reruns exactly the computations whose inputs changed while it was closed.

A board maps a list with one lift per element that reads the element and its
index (`reuse_defs.BoardAt`). It runs once; the runtime closes; another runtime
replaces the list (values changed, kept, set back, appended, cut); the board
restarts on a third runtime and is pulled. The law: the card at index `i` ran
exactly once if `i` is new or its element's value differs from the first list,
and not at all otherwise; the board's value is what a fresh run computes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cells import MemoryStore, value_equal
from runner import Runtime

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "runner"))
from reuse_defs import CALLS, BoardAt

ELEMENTS = st.one_of(
    st.integers(-2, 2),
    st.sampled_from([0.5, 1.0, -0.0]),
    st.sampled_from(["", "a", "é"]),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 1), max_size=2),
    st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 1), max_size=2),
)


def board_value(items: list[Any]) -> dict[str, Any]:
    return {"cards": [{"n": x, "i": i} for i, x in enumerate(items)]}


async def scenario(first: list[Any], then: list[Any]) -> tuple[Any, dict[int, int]]:
    store = MemoryStore()
    async with Runtime(store, space="p") as rt:
        items, board = rt.get_cell("items"), rt.get_cell("board")
        async with rt.edit() as tx:
            items.with_tx(tx).set(first)
            rt.run(tx, BoardAt, {"items": items}, board)
        assert value_equal(board_value(first), await board.pull())
    async with Runtime(store, space="p") as rt:
        items = rt.get_cell("items")
        await items.pull()
        async with rt.edit() as tx:
            items.with_tx(tx).set(then)
    CALLS.clear()
    async with Runtime(store, space="p") as rt:
        board = rt.get_cell("board")
        await rt.start(board)
        value = await board.pull()
    runs = {k[1]: n for k, n in CALLS.items() if k[0] == "at"}
    return value, runs


# Each example opens three runtimes: no per-example deadline (a loaded machine
# would turn the timing into a flaky failure).
@settings(deadline=None)
@given(st.lists(ELEMENTS, max_size=6), st.data())
def test_a_restart_reruns_exactly_the_changed_elements(first: list[Any], data: Any) -> None:
    then = data.draw(
        st.one_of(
            st.just(list(first)),
            st.lists(ELEMENTS, min_size=len(first), max_size=len(first)),
            st.lists(ELEMENTS, max_size=7),
        ),
        label="then",
    )
    value, runs = asyncio.run(scenario(first, then))
    assert value_equal(board_value(then), value)
    expected = {i: 1 for i, x in enumerate(then) if i >= len(first) or not value_equal(first[i], x)}
    assert expected == runs


async def scenario_after_reopening(
    first: list[Any], then: list[Any]
) -> tuple[Any, Any, dict[int, int], int]:
    """The board runs on `first`, the runtime closes, a second runtime restarts it (its
    element children dormant, `runner._list_dormant`), pulls it, sets the list to `then`
    and pulls again."""
    store = MemoryStore()
    async with Runtime(store, space="p") as rt:
        items, board = rt.get_cell("items"), rt.get_cell("board")
        async with rt.edit() as tx:
            items.with_tx(tx).set(first)
            rt.run(tx, BoardAt, {"items": items}, board)
        await board.pull()
    CALLS.clear()
    async with Runtime(store, space="p") as rt:
        items, board = rt.get_cell("items"), rt.get_cell("board")
        await rt.start(board)
        before = await board.pull()
        ran_before = sum(CALLS.values())
        async with rt.edit() as tx:
            items.with_tx(tx).set(then)
        value = await board.pull()
    runs = {k[1]: n for k, n in CALLS.items() if k[0] == "at"}
    return before, value, runs, ran_before


@settings(deadline=None)
@given(st.lists(ELEMENTS, max_size=6), st.data())
def test_a_change_after_reopening_reruns_exactly_the_changed_elements(
    first: list[Any], data: Any
) -> None:
    then = data.draw(
        st.one_of(
            st.lists(ELEMENTS, min_size=len(first), max_size=len(first)),
            st.lists(ELEMENTS, max_size=7),
        ),
        label="then",
    )
    before, value, runs, ran_before = asyncio.run(scenario_after_reopening(first, then))
    assert value_equal(board_value(first), before)
    assert 0 == ran_before
    assert value_equal(board_value(then), value)
    expected = {i: 1 for i, x in enumerate(then) if i >= len(first) or not value_equal(first[i], x)}
    assert expected == runs

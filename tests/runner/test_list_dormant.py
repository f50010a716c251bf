"""Dormant element children (`runner._list_dormant`): a restart installs no element's run
until something needs more than its stored value.

Each test sets a board up on a durable store, closes the runtime, reopens it and
counts both which functions ran (`reuse_defs.CALLS`) and which runs are installed
(the runner's registrations, read directly: `rt.registrations()` wakes them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reuse_defs import CALLS, BoardAt, BumpBoard
from support import arun
from test_reuse import card_calls, edit_items, expected_board, set_up_board

from cells import Link, MemoryStore, SQLiteStore
from runner import Runtime

N = 12


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def installed(rt: Runtime) -> int:
    """Registrations installed now (without waking anything)."""
    return len(rt.runner.registrations)


def dormant(rt: Runtime) -> int:
    return sum(len(w.sleepers()) for c in rt.runner.coordinators for w in c.watches.values())


async def reopened(rt: Runtime) -> Any:
    board = rt.get_cell("board")
    await rt.start(board)
    return await board.pull()


def test_a_restart_installs_no_element_run_and_runs_no_card(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            assert expected_board(items) == await reopened(rt)
            await rt.idle()
            assert 1 == installed(rt)  # the board's run only
            assert N == dormant(rt)

    arun(main)
    assert {} == card_calls()


def test_an_element_changed_while_closed_wakes_only_its_child(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    arun(lambda: edit_items(SQLiteStore(path), {4: 104}))
    items[4] = 104
    CALLS.clear()

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            assert expected_board(items) == await reopened(rt)
            assert 2 == installed(rt)  # the board and card 4
            assert N - 1 == dormant(rt)

    arun(main)
    assert {("card", 104): 1} == card_calls()


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_an_element_changed_after_reopening_reruns_exactly_its_card(
    store_kind: str, tmp_path: Path
) -> None:
    store: Any = MemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "b.db")
    items = list(range(N))
    arun(lambda: set_up_board(store, items))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            assert expected_board(items) == await reopened(rt)
            assert N == dormant(rt)
            rt.get_cell("items").key(6).set(66)
            items[6] = 66
            assert expected_board(items) == await rt.get_cell("board").pull()
            assert {("card", 66): 1} == card_calls()
            assert 2 == installed(rt)
            assert N - 1 == dormant(rt)
            # Its run is installed now: a second change runs it as any running card.
            rt.get_cell("items").key(6).set(67)
            items[6] = 67
            assert expected_board(items) == await rt.get_cell("board").pull()
            assert {("card", 66): 1, ("card", 67): 1} == card_calls()

    arun(main)


def test_a_change_seen_by_an_observer_wakes_the_card_without_a_pull() -> None:
    store = MemoryStore()
    items = list(range(N))
    arun(lambda: set_up_board(store, items))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            board = rt.get_cell("board")
            await reopened(rt)
            seen: list[Any] = []
            cancel = board.sink(seen.append)
            await rt.idle()
            rt.get_cell("items").key(2).set(22)
            await rt.idle()
            cancel()
            items[2] = 22
            assert expected_board(items) == seen[-1]

    arun(main)
    assert {("card", 22): 1} == card_calls()


async def set_up_link_board(store: Any, n: int) -> None:
    """A board over a list of links, one document per element (`e0`, `e1`, ...)."""
    async with Runtime(store, space="t") as rt:
        cells, board = rt.get_cell("items"), rt.get_cell("board")
        async with rt.edit() as tx:
            links = []
            for i in range(n):
                element = rt.get_cell(f"e{i}")
                element.with_tx(tx).set(i)
                links.append(element.link())
            cells.with_tx(tx).set(links)
            rt.run(tx, BoardAt, {"items": cells}, board)
        await board.pull()


def test_an_element_document_changed_after_reopening_wakes_only_its_child() -> None:
    store = MemoryStore()
    arun(lambda: set_up_link_board(store, N))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            first = await reopened(rt)
            assert [{"n": i, "i": i} for i in range(N)] == first["cards"]
            assert N == dormant(rt)
            rt.get_cell("e3").set(33)
            cards = (await rt.get_cell("board").pull())["cards"]
            assert {"n": 33, "i": 3} == cards[3]
            assert N - 1 == dormant(rt)
            assert 2 == installed(rt)

    arun(main)
    assert {("at", 3): 1} == {k: v for k, v in CALLS.items() if k[0] == "at"}


def test_moving_elements_of_an_op_that_reads_index_wakes_the_moved_ones() -> None:
    store = MemoryStore()
    arun(lambda: set_up_link_board(store, 4))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            await reopened(rt)
            assert 4 == dormant(rt)
            items = rt.get_cell("items")
            links = [rt.get_cell(f"e{i}").link() for i in range(4)]
            items.set([links[1], links[0], links[2], links[3]])
            cards = (await rt.get_cell("board").pull())["cards"]
            assert [{"n": 1, "i": 0}, {"n": 0, "i": 1}, {"n": 2, "i": 2}, {"n": 3, "i": 3}] == cards
            assert 2 == dormant(rt)

    arun(main)
    assert {("at", 0): 1, ("at", 1): 1} == {k: v for k, v in CALLS.items() if k[0] == "at"}


def test_inspection_wakes_every_dormant_child_and_shows_its_run(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            await reopened(rt)
            assert 1 == installed(rt)
            runs = rt.inspect()["registrations"]
            assert N + 1 == len(runs)
            assert N == sum(1 for r in runs if r["pattern"].endswith(":Card"))
            assert 0 == dormant(rt)
            await rt.idle()
            assert expected_board(items) == await rt.get_cell("board").pull()

    arun(main)
    assert {} == card_calls()  # woken children keep their stored outputs


def test_stopping_the_board_leaves_nothing_installed_or_watched(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    arun(lambda: set_up_board(SQLiteStore(path), list(range(N))))

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            await reopened(rt)
            await rt.stop(rt.get_cell("board"))
            await rt.idle()
            assert 0 == installed(rt)
            assert not rt.runner.coordinators
            assert 0 == rt.scheduler.statistics()["nodes"]

    arun(main)


def test_removing_and_adding_elements_after_reopening(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    items = list(range(N))
    arun(lambda: set_up_board(SQLiteStore(path), items))
    CALLS.clear()

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            await reopened(rt)
            cells = rt.get_cell("items")
            await cells.remove(0)
            await cells.insert(3, 500)
            items.pop(0)
            items.insert(3, 500)
            assert expected_board(items) == await rt.get_cell("board").pull()
            assert N - 1 == dormant(rt)
            cells.key(0).set(1000)  # a kept dormant element, after the splice
            items[0] = 1000
            assert expected_board(items) == await rt.get_cell("board").pull()

    arun(main)
    assert {("card", 500): 1, ("card", 1000): 1} == card_calls()


def test_an_op_with_a_handler_is_never_dormant(tmp_path: Path) -> None:
    path = tmp_path / "board.db"

    async def set_up() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            cells, board = rt.get_cell("items"), rt.get_cell("board")
            async with rt.edit() as tx:
                cells.with_tx(tx).set([1, 2, 3])
                rt.run(tx, BumpBoard, {"items": cells}, board)
            await board.pull()

    arun(set_up)
    CALLS.clear()

    async def main() -> None:
        async with Runtime(SQLiteStore(path), space="t") as rt:
            result = await reopened(rt)
            assert 4 == installed(rt)
            assert 0 == dormant(rt)
            bump = rt.get_cell("board").key("cards").key(1).key("bump").resolve()
            assert isinstance(bump.link(), Link)
            rt.send(bump, {})
            await rt.idle()
            cards = (await rt.get_cell("board").pull())["cards"]
            assert {"n": 3, "double": 6} == cards[1]["card"]
            assert {"n": 1, "double": 2} == result["cards"][0]["card"]

    arun(main)
    assert {("card", 3): 1} == card_calls()

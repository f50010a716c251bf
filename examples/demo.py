"""The todo board demo: reactive lists (map, filter, flat_map) on a SQLite file.

Run it with ``make demo`` (or ``python -m examples.demo``). It keeps its data
in ``.cellweave/todo.db`` under the current directory and deletes that file
first, so every run starts from nothing and prints the same thing. The
patterns are in ``examples/todo.py``; ``docs/howto/lists.md`` explains the
list builtins. The notes app that used to be the demo is
``python -m examples.notes_demo``.

What it shows, step by step: the board opened as a page; tasks added by a
handler, each becoming a card (`tasks.map(Card)`) and landing in the open or
done view (`tasks.filter(...)`), their tags collected by `tasks.flat_map(Tags)`;
a toggle re-running only its own card; a card opened as a page by a handler
(``navigate_to``) that stays open after its task leaves the board; then a
restart: a new runtime on the same file resumes both pages, and they are live.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any

from cells import Cell, SQLiteStore
from examples.todo import COMPUTED, Board
from runner import Runtime

DATA_DIR = ".cellweave"
DB_PATH = os.path.join(DATA_DIR, "todo.db")


def step(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))


def fresh_file(path: str) -> None:
    """Delete the store file and SQLite's side files, so the run starts from nothing."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def is_card(view: Any) -> bool:
    return isinstance(view, dict) and "line" in view


def title_of(page: Cell) -> str:
    """How a page is named in a list of pages (no scheduling: what is stored now)."""
    view = page.get()
    return f'card "{view["title"]}"' if is_card(view) else f'board "{view["name"]}"'


def names(titles: list[str]) -> str:
    return ", ".join(titles) or "-"


async def show(page: Cell) -> None:
    """Print a page as the user would see it. `pull` brings the page up to date first."""
    view = await page.pull()
    if is_card(view):
        print(f"  | Card: {view['line']}")
        return
    print(f"  | Board: {view['name']}  ({len(view['open'])} open, {len(view['done'])} done)")
    for number, card in enumerate(view["cards"], start=1):
        print(f"  |   {number}. {card['line']}")
    if not view["cards"]:
        print("  |   (no tasks yet)")
    print(f"  |   open: {names(view['open'])}")
    print(f"  |   done: {names(view['done'])}")
    print(f"  |   tags: {view['tags']}")


def show_pages(rt: Runtime) -> None:
    print(f"  open pages: {', '.join(title_of(page) for page in rt.pages()) or 'none'}")


def show_running(rt: Runtime) -> None:
    running = collections.Counter(
        r["pattern"].rpartition(":")[2] for r in rt.inspect()["registrations"]
    )
    print(f"  running: {', '.join(f'{name} x{n}' for name, n in sorted(running.items()))}")


class Recomputed:
    """Which cards' lines were computed since the last call (the demo shows what re-runs)."""

    def __init__(self) -> None:
        self.seen = collections.Counter(COMPUTED)

    def show(self) -> None:
        now = collections.Counter(COMPUTED)
        ran = sorted((now - self.seen).elements())
        self.seen = now
        print(f"  card lines computed: {len(ran)}{f' ({names(ran)})' if ran else ''}")


def opened(page: Cell) -> None:
    """`on_navigate`: a UI would switch to the page here; the demo says so."""
    print(f"  -> the app opens {title_of(page)}")


TASKS = [
    ("Buy milk", ["home"]),
    ("Fix bike", ["home", "outdoor"]),
    ("Write report", ["work"]),
    ("Water plants", ["home"]),
]


async def first_session() -> None:
    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="todo", principal="ada", on_navigate=opened)
    async with rt:  # leaving `rt` waits for in-flight work, then closes it
        step("1. Open a board")
        tasks = rt.get_cell("tasks")  # the list: one link per task, in board order
        store_cell = rt.get_cell("task-store")  # the tasks themselves, by id
        board = rt.get_cell("board")  # where the Board pattern's result lives
        async with rt.edit() as tx:  # committed (and accepted) when the block ends
            tasks.with_tx(tx).set([])
            store_cell.with_tx(tx).set({})
            rt.setup(tx, Board, {"name": "Home", "tasks": tasks, "store": store_cell}, board)
        await rt.open_page(board)  # recorded as a page of "ada", then started
        await show(board)
        recomputed = Recomputed()

        step("2. Add four tasks (the board's `add` handler): a card each")
        for title, tags in TASKS:
            rt.send(board.key("add"), {"title": title, "tags": tags})
        await rt.idle()
        await show(board)
        recomputed.show()

        step("3. Tick off two tasks (each card's `toggle` handler)")
        # A card's stream is reached through the board: cards -> slot -> card -> toggle.
        rt.send(board.key("cards", 1, "toggle"), {})
        rt.send(board.key("cards", 2, "toggle"), {})
        await rt.idle()
        await show(board)
        recomputed.show()

        step("4. Open the card 'Fix bike' (the `open_card` handler returns navigate_to)")
        rt.send(board.key("open_card"), {"title": "Fix bike"})
        await rt.idle()
        (card,) = [page for page in rt.pages() if is_card(page.get())]
        await show(card)

        step("5. Remove 'Fix bike' from the board; its card stays open as a page")
        rt.send(board.key("remove"), {"title": "Fix bike"})
        await rt.idle()
        await show(board)
        await show(card)
        recomputed.show()
        show_pages(rt)
        show_running(rt)  # 4 cards: the 3 on the board and the open page

        step("6. Untick it on its page: the page is live, off the board")
        rt.send(card.key("toggle"), {})
        await rt.idle()
        await show(card)
        board_view = await board.pull()
        print(f"  the board's open view: {names(board_view['open'])}")
    store.close()


async def second_session() -> None:
    step("7. Restart: a new runtime on the same file resumes the open pages")
    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="todo", principal="ada")
    async with rt:
        print(f"  running before resume: {len(rt.registrations())} patterns")
        pages = await rt.resume()
        print(f"  resumed {len(pages)} pages: {', '.join(map(title_of, pages))}")
        board, card = sorted(pages, key=lambda page: is_card(page.get()))  # the board first
        await show(board)
        await show(card)
        recomputed = Recomputed()

        step("8. The resumed pages are live")
        rt.send(board.key("add"), {"title": "Call Bob", "tags": ["work", "phone"]})
        rt.send(card.key("toggle"), {})
        await rt.idle()
        await show(board)
        await show(card)
        recomputed.show()
        show_running(rt)

        step("9. Close the card's page (stop); it is gone for good")
        await rt.stop(card)  # returns once the page's closing is on disk
        show_pages(rt)
    store.close()

    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="todo", principal="ada")
    async with rt:
        resumed = await rt.resume()
        print(f"  after another restart, resume() brings back: {', '.join(map(title_of, resumed))}")
    store.close()


async def main() -> None:
    fresh_file(DB_PATH)
    print(f"cellweave todo demo; data in {DB_PATH} (a fresh file on every run)")
    await first_session()
    await second_session()
    step("Next: the board in a browser")
    print("  .venv/bin/cellweave serve examples.todo:board")
    print("  (prints a URL to open; Ctrl-C stops it)")


if __name__ == "__main__":
    asyncio.run(main())

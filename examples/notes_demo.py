"""The notes demo: a small notes app written as patterns, on a SQLite file.

Run it with ``python -m examples.notes_demo`` (``make demo`` runs the todo
board, ``examples/demo.py``). It keeps its data in ``.cellweave/notes.db``
under the current directory and deletes that file first, so every run starts
from nothing and prints the same thing. The patterns are in
``examples/notes.py``; the tutorial (docs/tutorial.md) builds them step by
step.

What it shows, step by step: the notebook opened as a page, notes added by a
handler, a note opened as a page of its own by another handler
(``navigate_to``), an edit on that page reaching the notebook, then a restart:
the runtime is closed, a new one opens the same file and ``resume()`` brings
the open pages back. Stopping a page removes it for good.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from cells import Cell, SQLiteStore
from examples.notes import Notebook
from runner import Runtime

DATA_DIR = ".cellweave"
DB_PATH = os.path.join(DATA_DIR, "notes.db")


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


def is_note(view: Any) -> bool:
    # A note shows a title (from its argument, present at once); a notebook a name.
    return isinstance(view, dict) and "title" in view


def title_of(page: Cell) -> str:
    """How a page is named in a list of pages (no scheduling: what is stored now)."""
    view = page.get()
    if is_note(view):
        return f'note "{view["title"]}"'
    return f'notebook "{view["name"]}"'


async def show(page: Cell) -> None:
    """Print a page as the user would see it. `pull` brings the page up to date first."""
    view = await page.pull()
    if is_note(view):
        words = view["words"]
        print(f"  | {view['title']}  ({words} word{'' if words == 1 else 's'})")
        for line in view["body"].splitlines():
            print(f"  |   {line}")
        return
    index = view["index"]
    count = index["count"]
    print(f"  | Notebook: {view['name']}  ({count} note{'' if count == 1 else 's'})")
    for line in index["lines"] or ["(no notes yet)"]:
        print(f"  |   {line}")


def show_pages(rt: Runtime) -> None:
    names = ", ".join(title_of(page) for page in rt.pages()) or "none"
    print(f"  open pages: {names}")


def opened(page: Cell) -> None:
    """`on_navigate`: a UI would switch to the page here; the demo says so."""
    print(f"  -> the app opens {title_of(page)}")


async def first_session() -> None:
    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="notes", principal="ada", on_navigate=opened)
    async with rt:  # leaving `rt` waits for in-flight work, then closes it
        step("1. Open a notebook")
        notes = rt.get_cell("notes")  # the data: a list of notes
        notebook = rt.get_cell("notebook")  # where the Notebook pattern's result lives
        async with rt.edit() as tx:  # committed (and accepted) when the block ends
            notes.with_tx(tx).set([])
            rt.setup(tx, Notebook, {"name": "Ada's notes", "notes": notes}, notebook)
        await rt.open_page(notebook)  # recorded as a page of "ada", then started
        await show(notebook)

        step("2. Add three notes (the notebook's `add` handler)")
        rt.send(notebook.key("add"), {"title": "Groceries", "body": "milk, eggs, bread"})
        rt.send(notebook.key("add"), {"title": "Ideas", "body": "a reactive notes app"})
        rt.send(notebook.key("add"), {"title": "Call Bob", "body": ""})
        await rt.idle()
        await show(notebook)

        step("3. Open the note 'Ideas' (the `open` handler returns navigate_to)")
        rt.send(notebook.key("open"), {"title": "Ideas"})
        await rt.idle()
        (note,) = [page for page in rt.pages() if is_note(page.get())]
        await show(note)

        step("4. Add a line on the note's page; the notebook follows")
        rt.send(note.key("append"), {"text": "with pages that survive a restart"})
        await rt.idle()
        await show(note)
        await show(notebook)
        show_pages(rt)
        running = [r["pattern"].rpartition(":")[2] for r in rt.inspect()["registrations"]]
        print(f"  running: {', '.join(sorted(running))}")
    store.close()


async def second_session() -> None:
    step("5. Restart: a new runtime on the same file resumes the open pages")
    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="notes", principal="ada")
    async with rt:
        print(f"  running before resume: {len(rt.registrations())} patterns")
        pages = await rt.resume()
        print(f"  resumed {len(pages)} pages")
        pages.sort(key=lambda page: is_note(page.get()))  # the notebook first
        for page in pages:
            await show(page)
        notebook, note = pages

        step("6. The resumed pages are live")
        rt.send(notebook.key("add"), {"title": "Weekend", "body": "hike"})
        rt.send(note.key("append"), {"text": "(edited after the restart)"})
        await rt.idle()
        await show(notebook)
        await show(note)

        step("7. Close the note's page (stop); it is gone for good")
        await rt.stop(note)  # returns once the page's closing is on disk
        show_pages(rt)
    store.close()

    store = SQLiteStore(DB_PATH)
    rt = Runtime(store, space="notes", principal="ada")
    async with rt:
        resumed = await rt.resume()
        print(f"  after another restart, resume() brings back: {', '.join(map(title_of, resumed))}")
    store.close()


async def main() -> None:
    fresh_file(DB_PATH)
    print(f"cellweave notes demo; data in {DB_PATH} (a fresh file on every run)")
    await first_session()
    await second_session()


if __name__ == "__main__":
    asyncio.run(main())

"""The live view widget inside a real marimo app, driven in Debian's chromium.

marimo shows an anywidget wrapped in `mo.ui.anywidget`. The test writes a
marimo notebook whose cell makes a runtime on a SQLite file and shows
`cellweave.view(tasks)`, serves it with `marimo run` on loopback, edits a leaf
in the widget's DOM, and then reads the file from this process with a runtime
of its own: the edit went through the runtime behind the widget and is durable.
Waiting is always for something visible (or, across processes, for the file to
show the write, polled with a deadline).
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import free_port, served, shot
from playwright.sync_api import Browser, expect

from cellweave import Runtime, SQLiteStore

expect.set_options(timeout=60_000)

DEADLINE = 60.0


def app_source(db: Path) -> str:
    return textwrap.dedent(
        f"""\
        import marimo

        app = marimo.App()


        @app.cell
        async def _():
            import marimo as mo
            import cellweave
            from cellweave import Runtime, SQLiteStore

            rt = Runtime(store=SQLiteStore({str(db)!r}), principal="alice")
            tasks = rt.get_cell("tasks")
            tasks.set([{{"title": "Milk", "done": False}}, {{"title": "Bread", "done": True}}])
            await rt.idle()
            view = mo.ui.anywidget(cellweave.view(tasks))
            view
            return


        if __name__ == "__main__":
            app.run()
        """
    )


@pytest.fixture
def marimo_app(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "board.db"
    (tmp_path / "board.py").write_text(app_source(db))
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "marimo",
        "run",
        str(tmp_path / "board.py"),
        "--headless",
        "--host=127.0.0.1",
        f"--port={port}",
        "--no-token",
    ]
    base = f"http://127.0.0.1:{port}/"
    with served(argv, base, what="marimo", deadline=DEADLINE, cwd=tmp_path):
        yield base, db


def stored_tasks(db: Path) -> object:
    """What the file holds now, read by a runtime of this process."""
    rt = Runtime(store=SQLiteStore(str(db)), principal="alice")
    try:
        return rt.get_cell("tasks").get()
    finally:
        rt.close()


def test_the_widget_renders_and_edits_durably_in_marimo(
    browser: Browser,
    marimo_app: tuple[str, Path],
) -> None:
    url, db = marimo_app
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(url)
    table = page.locator(".cw-table")
    expect(table).to_be_visible()
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(page.locator("[data-ptr='/1/title']")).to_have_text("Bread")
    page.locator("[data-ptr='/0/title']").dblclick()
    page.locator("input.cw-edit").fill("Oat milk")
    page.locator("input.cw-edit").press("Enter")
    expect(page.locator("[data-ptr='/0/title']")).to_have_text("Oat milk")
    shot(page, "widget-marimo")
    end = time.monotonic() + DEADLINE
    while True:
        value = stored_tasks(db)
        if isinstance(value, list) and value and value[0].get("title") == "Oat milk":
            break
        assert time.monotonic() < end, f"the edit never reached the file: {value!r}"
        time.sleep(0.2)
    assert value == [{"title": "Oat milk", "done": False}, {"title": "Bread", "done": True}]

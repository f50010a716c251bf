"""The live view widget inside a real JupyterLab and a real Notebook 7, in Debian's chromium.

Each test starts the server on loopback with a token, opens a notebook that
makes `cellweave.view(cell)`, runs its cells as a person would (Shift+Enter),
then clicks in the widget's DOM and reads the kernel's side back through a
later cell's output. Waiting is always for something visible.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from browser_support import free_port, served, shot
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

# A kernel starts and a widget renders in seconds, not the 5 s expect allows.
expect.set_options(timeout=60_000)

DEADLINE = 60.0

NOTEBOOK_CELLS = [
    """import cellweave
from cellweave import Runtime
rt = Runtime(principal="alice")
tasks = rt.get_cell("tasks")
tasks.set([{"title": "Milk", "done": False}, {"title": "Bread", "done": True}])
await rt.idle()
cellweave.view(tasks)""",
    """print("now:", json.dumps(tasks.get()))""",
]


def notebook(cells: list[str]) -> dict[str, Any]:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "cells": [
            {
                "cell_type": "code",
                "id": f"c{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": ("import json\n" if i == 0 else "") + src,
            }
            for i, src in enumerate(cells)
        ],
    }


# (the server's module, the notebook's address under it, what shows the kernel
# connected and idle, the screenshot's name)
FRONTENDS = {
    "jupyterlab": (
        "jupyterlab",
        "/lab/tree/view.ipynb",
        ".jp-StatusBar-Widget:has-text('| Idle')",
        "widget-jupyterlab",
    ),
    "notebook7": (
        "notebook",
        "/notebooks/view.ipynb",
        ".jp-Notebook-ExecutionIndicator[data-status='idle']",
        "widget-notebook7",
    ),
}


@pytest.fixture(params=sorted(FRONTENDS))
def lab(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, str, str]]:
    module, address, idle, name = FRONTENDS[request.param]
    (tmp_path / "view.ipynb").write_text(json.dumps(notebook(NOTEBOOK_CELLS)))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "rt")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(tmp_path / "ws")
    argv = [
        sys.executable,
        "-m",
        module,
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp_path}",
        "--LabApp.news_url=",
        "--LabServerApp.extension_manager=readonly",
    ]
    base = f"http://127.0.0.1:{port}"
    ready = f"{base}/api/status?token={token}"
    with served(argv, ready, what=module, deadline=DEADLINE, env=env):
        yield f"{base}{address}?token={token}", idle, name


def accept_kernel_dialog(page: Page) -> None:
    """A slow kernel start (a loaded machine) can make the front end ask which kernel
    to use; a person takes the offered default (the notebook's own Python 3). Any
    other dialog is unexpected and fails the test with its text."""
    dialog = page.locator(".jp-Dialog")
    if not dialog.count():
        return
    text = dialog.first.inner_text()
    if "kernel" not in text.lower():
        raise AssertionError(f"an unexpected dialog is in the way: {text!r}")
    dialog.first.locator(".jp-mod-accept").click()
    expect(dialog).to_have_count(0)


def run_cell(page: Page, index: int) -> None:
    """Run one cell as a person does (click, Shift+Enter) and wait until the kernel
    took it. A run asked for while the notebook is still connecting its kernel is
    dropped by JupyterLab with no sign; a person would press again, and so do we."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    prompt = cell.locator(".jp-InputArea-prompt")
    for _ in range(5):
        accept_kernel_dialog(page)
        try:
            cell.locator(".cm-content").click(timeout=10_000)
        except PlaywrightTimeoutError:
            continue  # (a dialog came up meanwhile: the next round looks at it)
        page.keyboard.press("Shift+Enter")
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=10_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"JupyterLab never ran cell {index}")


def test_the_widget_renders_edits_and_stays_live_in_jupyter(
    browser: Browser,
    lab: tuple[str, str, str],
) -> None:
    url, idle, name = lab
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    page.set_default_timeout(DEADLINE * 1000)
    page.goto(url)
    expect(page.locator(".jp-Notebook .jp-CodeCell").first).to_be_visible()
    # Wait until the kernel is connected and idle (the status bar says so):
    # a cell run before that is silently not executed.
    expect(page.locator(idle)).to_have_count(1)
    run_cell(page, 0)
    table = page.locator(".cw-table")
    expect(table).to_be_visible()
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(page.locator("[data-ptr='/0/title']")).to_have_text("Milk")
    # Edit a leaf in place: the kernel's cell changes.
    page.locator("[data-ptr='/0/title']").dblclick()
    page.locator("input.cw-edit").fill("Oat milk")
    page.locator("input.cw-edit").press("Enter")
    expect(page.locator("[data-ptr='/0/title']")).to_have_text("Oat milk")
    shot(page, name)
    run_cell(page, 1)
    out = page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-OutputArea-output")
    expect(out).to_contain_text('"title": "Oat milk"')

"""`cellweave.view(cell)`: the web shell's view as a notebook widget (anywidget).

The widget runs the same ES module as the browser shell, over the widget's
comm instead of a websocket, and the Python side is the same `Connection`:
after the first snapshot only patch operations cross the comm. It acts as a
session of the viewing identity (the runtime's own unless one is given), so
edits, events, opened pages and closes go through the runtime's owner checks.
Needs the `notebook` extra (`pip install 'cellweave[notebook]'`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from importlib import resources
from typing import Any

from cells import Cell, CellweaveError
from runner import Runtime, Session

from ._shell import Connection, Shell

log = logging.getLogger("cellweave.widget")


class WidgetError(CellweaveError, RuntimeError):
    """`view()` cannot make a widget (no anywidget, a bad argument)."""


_IMPORT = re.compile(r"^import .*$", re.MULTILINE)
_EXPORT_LIST = re.compile(r"^export \{[^}]*\};?$", re.MULTILINE)
_EXPORT = re.compile(r"^export (?!default)", re.MULTILINE)


@functools.cache
def bundled_module() -> str:
    """The view module with its vendored JSON Patch library inlined: anywidget
    loads one module from a string, so relative imports cannot resolve."""
    static = resources.files("cellweave").joinpath("static")
    parts = []
    for name in ("vendor/fast-json-patch/helpers.mjs", "vendor/fast-json-patch/core.mjs"):
        text = static.joinpath(name).read_text(encoding="utf-8")
        text = _EXPORT.sub("", _EXPORT_LIST.sub("", _IMPORT.sub("", text)))
        parts.append(f"// ---- {name} (MIT, see vendor/fast-json-patch/LICENSE.txt)\n{text}")
    main = static.joinpath("cellweave.js").read_text(encoding="utf-8")
    parts.append(_IMPORT.sub("", main))
    return "\n".join(parts)


@functools.cache
def _widget_class() -> type:
    try:
        import anywidget
    except ImportError:
        raise WidgetError(
            "cellweave.view needs the notebook extra: pip install 'cellweave[notebook]'"
        ) from None
    static = resources.files("cellweave").joinpath("static")

    class CellView(anywidget.AnyWidget):
        _esm = bundled_module()
        _css = static.joinpath("cellweave.css").read_text(encoding="utf-8")

    return CellView


def view(cell: Cell, *, session: Session | None = None, runtime: Runtime | None = None) -> Any:
    """A live widget showing `cell`: a tree (lists of records as tables), handler
    streams as buttons, leaves editable in place, rows openable as pages, and an
    inspector tab with the viewer's runs.

    `cell` must come from a runtime (`rt.get_cell`, a result); pass `session`
    to view as another identity of that runtime. The widget's messages are
    handled on the event loop it was made on (a notebook kernel's), or else on
    the first loop that delivers one."""
    if not isinstance(cell, Cell):
        raise WidgetError(f"cellweave.view: expected a Cell, got {cell!r}")
    rt = runtime or Runtime.of(cell)
    if rt is None:
        raise WidgetError(
            f"cellweave.view({cell!r}): this cell was made without a runtime; use a cell from"
            " rt.get_cell, or pass session=rt.session(...)"
        )
    return _widget(rt, cell, session)


def inspector(rt: Runtime, *, session: Session | None = None) -> Any:
    """The run inspector as a widget: the viewer's running results as a tree (root
    runs, nested and list-element children, pages) with their pattern, generation,
    how each was launched and what keeps it alive; pending starts; the recent
    lifecycle; a run's pattern graph with per-node run counts; and stop / release
    buttons that show the runtime's answer. It acts as `session` (default: the
    runtime's own principal), so it shows and ends only what that principal may."""
    if not isinstance(rt, Runtime):
        raise WidgetError(f"cellweave.inspector: expected a Runtime, got {rt!r}")
    return _widget(rt, None, session)


def _widget(rt: Runtime, root: Cell | None, session: Session | None) -> Any:
    acting = session if session is not None else rt.session(rt.identity.principal, "widget")
    widget = _widget_class()()
    shell = Shell(rt, root, {})
    try:
        loops = [asyncio.get_running_loop()]
    except RuntimeError:
        loops = []  # learnt from the first message handled on a running loop

    def send(msg: dict[str, Any]) -> None:
        widget.send(json.loads(json.dumps(msg, allow_nan=False)))

    conn = Connection(shell, acting, send)
    shell.connections.add(conn)

    # The comm hands messages to a plain callback; each is handled as a task on
    # the loop the view was made on, kept referenced until it ends. Kernels may
    # deliver comm messages on another thread: then the task is handed over
    # thread-safely, which also wakes an idle loop.
    tasks: set[asyncio.Task[None]] = set()

    def handle(raw: str) -> None:
        task = loops[0].create_task(conn.handle(raw))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def on_msg(_widget: Any, content: Any, _buffers: Any) -> None:
        raw = json.dumps(content)
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if not loops and here is not None:
            loops.append(here)
        if not loops:
            log.error("cellweave.view: a message arrived with no event loop to handle it")
        elif here is loops[0]:
            handle(raw)
        else:
            loops[0].call_soon_threadsafe(handle, raw)

    widget.on_msg(on_msg)
    return widget

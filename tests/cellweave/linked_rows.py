"""A served app whose rows show fields of linked elements (for the shell tests)."""

from __future__ import annotations

from typing import Any

from cells import Cell
from runner import Ref, lift, pattern


def _line(item: Any) -> str:
    return f"#{(item or {}).get('n')} {(item or {}).get('title')}"


@pattern
def Row(element: Ref) -> Any:
    return {"title": element["title"], "line": lift(_line)(element)}


@pattern
def Rows(items: Ref) -> Any:
    return {"rows": items.map(Row)}


def _app(rt: Any, tx: Any, n: int) -> Cell:
    items = rt.get_cell("linked-items", tx=tx)
    items.set([{"n": i, "title": f"item {i}"} for i in range(n)])
    result = rt.get_cell("linked-rows", tx=tx)
    made: Cell = rt.run(tx, Rows, {"items": items}, result)
    return made


def rows_app(rt: Any, tx: Any) -> Cell:
    """Three inline items mapped to rows: a row's title is a link into its item."""
    return _app(rt, tx, 3)


def long_rows_app(rt: Any, tx: Any) -> Cell:
    """2,000 of them: a table long enough to be drawn windowed."""
    return _app(rt, tx, 2000)

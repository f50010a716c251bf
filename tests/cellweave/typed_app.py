"""A served app whose handlers take typed events (for the shell tests)."""

from __future__ import annotations

from typing import Any

import msgspec

from cells import Cell
from runner import Ref, handler, lift, pattern


class Add(msgspec.Struct):
    """The event `add` takes: how much to add, and a note."""

    by: int
    note: str = "from the form"


@handler
def bump(event: None, count: Cell) -> None:
    count.set((count.get() or 0) + 1)


@handler
def add(event: Add, count: Cell, notes: Cell) -> None:
    count.set((count.get() or 0) + event.by)
    notes.push(event.note)


@handler
def reset(event: Any, count: Cell) -> None:
    count.set(int((event or {}).get("to", 0)))


@pattern
def Counter(count: Ref, notes: Ref) -> Any:
    return {
        "count": count,
        "notes": notes,
        "bump": bump(count=count),
        "add": add(count=count, notes=notes),
        "reset": reset(count=count),
    }


def counter_app(rt: Any, tx: Any) -> Cell:
    """A counter at 0 with its three handlers: no payload, a typed one, an untyped one."""
    count = rt.get_cell("typed-count", tx=tx)
    count.set(0)
    notes = rt.get_cell("typed-notes", tx=tx)
    notes.set([])
    result = rt.get_cell("typed-counter", tx=tx)
    made: Cell = rt.run(tx, Counter, {"count": count, "notes": notes}, result)
    return made


def _double(n: Any) -> int:
    return 2 * int(n or 0)


@pattern
def Summary(count: Ref) -> Any:
    return {"title": "Summary", "double": lift(_double)(count)}


@pattern
def WithChild(count: Ref, notes: Ref) -> Any:
    return {"count": count, "summary": Summary(count=count), "bump": bump(count=count)}


def child_app(rt: Any, tx: Any) -> Cell:
    """A result with a nested child (`summary`), reached through a link."""
    count = rt.get_cell("child-count", tx=tx)
    count.set(1)
    notes = rt.get_cell("child-notes", tx=tx)
    notes.set([])
    result = rt.get_cell("with-child", tx=tx)
    made: Cell = rt.run(tx, WithChild, {"count": count, "notes": notes}, result)
    return made

"""Filter and flat_map boards over notes (``{"t", "open", "n"}`` dicts), shared by the
list tests that edit and splice such lists: each board in two forms, a plain function
(`OpenOnes`, `Copied`) and a pattern per element (`OpenChildren`, `CopiedChildren`);
`run_notes` runs one over notes held inline or linked."""

from __future__ import annotations

from typing import Any

from support import run_list

from cells import Cell
from runner import Runtime, lift, pattern


def is_open(note: Any) -> bool:
    return bool(note["open"])


def copies(note: Any) -> list[Any]:
    return [note["t"]] * note["n"]


@pattern
def OpenOnes(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(is_open)}


@pattern
def Copied(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(copies)}


@pattern
def IsOpen(element):  # type: ignore[no-untyped-def]
    return lift(is_open)(element)


@pattern
def OpenChildren(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(IsOpen)}


@pattern
def Copies(element):  # type: ignore[no-untyped-def]
    return lift(copies)(element)


@pattern
def CopiedChildren(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(Copies)}


async def run_notes(
    rt: Runtime, board: Any, notes: list[Any], linked: bool
) -> tuple[list[Cell], Cell, Cell]:
    """Run `board` over `notes`, inline or each in a cell of its own (`linked`: the list
    holds their links); (the note cells, the list cell, the result cell)."""
    cells = [rt.get_cell(("note", i)) for i in range(len(notes))]
    if linked:
        tx = rt.edit()
        for c, x in zip(cells, notes, strict=True):
            c.with_tx(tx).set(x)
        assert (await tx.commit()).ok
    held: list[Any] = [c.link() for c in cells] if linked else list(notes)
    items, res = await run_list(rt, board, held)
    return cells, items, res

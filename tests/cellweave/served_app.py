"""A pattern for the served-pages tests of the shell: an argument, a computed field
and a handler (`cellweave serve served_app:Shout --pages served`)."""

from __future__ import annotations

from typing import Any

from cells import Cell
from runner import Ref, handler, lift, pattern


def shout(text: Any) -> Any:
    return None if text is None else str(text).upper()


@handler
def clear(event: Any, text: Cell) -> None:
    text.set(None)


@pattern
def Shout(text: Ref) -> Any:
    return {"text": text, "loud": lift(shout)(text), "clear": clear(text=text)}


def page(rt: Any, tx: Any) -> Cell:
    """Set up a `Shout` on a text cell holding "hi" (a setup function: its `rt.run`
    only stages the setup when the shell's pages are served)."""
    text = rt.get_cell("shout-text", tx=tx)
    text.set("hi")
    result: Cell = rt.get_cell("shout", tx=tx)
    rt.run(tx, Shout, {"text": text}, result)
    return result

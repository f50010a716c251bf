"""The notes app's patterns: a notebook of notes, each note openable as a page.

`examples/demo.py` runs them; the tutorial (docs/tutorial.md) explains them.
They live at module level in an importable module so that a restarted
runtime can load them again by identity (`examples.notes:Notebook`).

- `Notebook(name, notes)`: the notebook page. `notes` is a cell holding a list
  of `{"title": ..., "body": ...}` dicts. It nests an `Index` child (the
  listing the user sees) and has two handlers: `add` appends a note, `open`
  opens one as a page of its own.
- `Index(notes)`: a nested child pattern computing the listing and the count.
- `Note(note)`: one note, opened as a page. `note` is a link into the
  notebook's list, so editing the page edits the notebook's data.
"""

from __future__ import annotations

from typing import Any

from cells import Cell
from runner import Ref, handler, lift, navigate_to, pattern


def count_words(text: Any) -> int:
    """Words in a note's body (an absent body has none)."""
    return len(str(text or "").split())


def listing(notes: Any) -> list[str]:
    """One line per note, as the notebook page shows it."""
    lines = []
    for number, note in enumerate(notes or [], start=1):
        words = count_words(note.get("body"))
        lines.append(f"{number}. {note['title']} ({words} word{'' if words == 1 else 's'})")
    return lines


def how_many(notes: Any) -> int:
    return len(notes or [])


@pattern
def Index(notes: Ref) -> Any:
    return {"lines": lift(listing)(notes), "count": lift(how_many)(notes)}


@handler
def add_note(event: Any, notes: Cell) -> None:
    # A bound parameter is the cell itself: this push is part of the handler's
    # own transaction, committed once the handler returns.
    notes.push({"title": event["title"], "body": event.get("body", "")})


@handler
def open_note(event: Any, notes: Cell) -> Any:
    for i, note in enumerate(notes.get()):
        if note["title"] == event["title"]:
            # The page's argument is a link to this list element, not a copy.
            return navigate_to(Note(note=notes.key(i)))
    return None  # no such note: nothing opens


@handler
def append_line(event: Any, body: Cell) -> None:
    text = body.get()
    body.set(f"{text}\n{event['text']}" if text else event["text"])


@pattern
def Note(note: Ref) -> Any:
    return {
        "title": note["title"],
        "body": note["body"],
        "words": lift(count_words)(note["body"]),
        "append": append_line(body=note["body"]),
    }


@pattern
def Notebook(name: Ref, notes: Ref) -> Any:
    index = Index(notes=notes)  # a nested child pattern, started and ended with this one
    return {
        "name": name,
        "index": index,
        "add": add_note(notes=notes),
        "open": open_note(notes=notes),
    }

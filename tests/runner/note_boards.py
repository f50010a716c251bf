"""Filter and flat_map boards over notes (``{"t", "open", "n"}`` dicts), shared by the
list tests that edit and splice such lists: each board in two forms, a plain function
(`OpenOnes`, `Copied`) and a pattern per element (`OpenChildren`, `CopiedChildren`)."""

from __future__ import annotations

from typing import Any

from runner import lift, pattern


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

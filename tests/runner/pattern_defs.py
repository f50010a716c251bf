"""Patterns the runner tests run (module level, so a restarted runtime can load them)."""

from __future__ import annotations

import collections
from typing import Any

from runner import handler, lift, navigate_to, pattern


def double(v: Any) -> Any:
    return None if v is None else v * 2


@pattern
def Child(value):  # type: ignore[no-untyped-def]
    return {"doubled": lift(double)(value)}


@handler
def increment(event, count):  # type: ignore[no-untyped-def]
    count.set((count.get() or 0) + event.get("by", 1))


@handler
def add_item(event, items):  # type: ignore[no-untyped-def]
    items.push(event["item"])


@handler
def open_child(event, child):  # type: ignore[no-untyped-def]
    return navigate_to(child)


@handler
def spawn(event, value):  # type: ignore[no-untyped-def]
    return Child(value=event["value"])


@handler
def open_new(event, value):  # type: ignore[no-untyped-def]
    return navigate_to(Child(value=event["value"]))


@handler
def open_nested(event, child):  # type: ignore[no-untyped-def]
    return {"go": [navigate_to(child)]}


@pattern
def Parent(value, items, count):  # type: ignore[no-untyped-def]
    child = Child(value=value)
    return {
        "child": child,
        "size": lift(lambda xs: len(xs or []))(items),
        "add": add_item(items=items),
        "bump": increment(count=count),
        "open": open_child(child=child),
        "open_nested": open_nested(child=child),
        "open_new": open_new(value=value),
        "spawn": spawn(value=value),
    }


def child_of(v: Any) -> Any:
    return Child(value=v)


@pattern
def Spawner(source):  # type: ignore[no-untyped-def]
    """A computation that returns a pattern: its output spot is the child's result."""
    return {"child": lift(child_of)(source)}


@pattern
def Counter(count):  # type: ignore[no-untyped-def]
    return {"count": count, "bump": increment(count=count)}


def _subtree(node: Any) -> Any:
    return Tree(node=node) if node else None


def _sum(n: Any, left: Any, right: Any) -> Any:
    return (n or 0) + (left or 0) + (right or 0)


@pattern
def Tree(node):  # type: ignore[no-untyped-def]
    """Recursion over finite data: each node launches a child per subtree it has."""
    left = lift(_subtree)(node["left"])
    right = lift(_subtree)(node["right"])
    return {
        "n": node["n"],
        "left": left,
        "right": right,
        "total": lift(_sum)(node["n"], left["total"], right["total"]),
    }


@pattern
def Forever(value):  # type: ignore[no-untyped-def]
    """Unconditional recursion: must be refused, never hang."""
    return {"next": Forever(value=value)}


@pattern
def BadBody(value):  # type: ignore[no-untyped-def]
    raise ValueError("this pattern body is broken")


@pattern
def UsesBad(value):  # type: ignore[no-untyped-def]
    return {"ok": lift(double)(value), "bad": BadBody(value=value)}


@pattern
def Opener(value):  # type: ignore[no-untyped-def]
    child = Child(value=value)
    return {"child": child, "opened": navigate_to(child)}


# --------------------------------------------------------------------------- lists

CALLS: collections.Counter[str] = collections.Counter()
"""How often each element function ran (tests count element computations)."""


def counted_double(v: Any) -> Any:
    CALLS["double"] += 1
    return None if v is None else v * 2


def is_even(v: Any) -> bool:
    CALLS["even"] += 1
    return isinstance(v, int) and not isinstance(v, bool) and v % 2 == 0


def repeat(v: Any) -> Any:
    CALLS["repeat"] += 1
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return [v] * v
    return v


def at(v: Any, i: Any) -> Any:
    CALLS["at"] += 1
    return [v, i]


@pattern
def Double(element):  # type: ignore[no-untyped-def]
    return lift(counted_double)(element)


@pattern
def IsEven(element):  # type: ignore[no-untyped-def]
    return lift(is_even)(element)


@pattern
def Repeat(element):  # type: ignore[no-untyped-def]
    return lift(repeat)(element)


@pattern
def At(element, index):  # type: ignore[no-untyped-def]
    return lift(at)(element, index)


@pattern
def Mapped(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Double)}


@pattern
def Filtered(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(IsEven)}


@pattern
def Flattened(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(Repeat)}


@pattern
def Indexed(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(At)}


@pattern
def AllThree(items):  # type: ignore[no-untyped-def]
    return {
        "doubled": items.map(Double),
        "evens": items.filter(IsEven),
        "repeated": items.flat_map(Repeat),
    }


def upper_title(element: Any) -> Any:
    CALLS["upper"] += 1
    return (element or {}).get("title", "").upper()


@pattern
def Upper(element):  # type: ignore[no-untyped-def]
    return lift(upper_title)(element)


@pattern
def Titles(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Upper)}


def window(rows: Any, start: Any) -> Any:
    return list((rows or [])[start or 0 : (start or 0) + 5])


@pattern
def Row(element):  # type: ignore[no-untyped-def]
    """A two-level child: a nested Child inside each element's run."""
    return {"inner": Child(value=element), "same": element}


@pattern
def Window(rows, start):  # type: ignore[no-untyped-def]
    return {"rows": lift(window)(rows, start).map(Row)}

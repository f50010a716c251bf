"""Patterns the runner tests run (module level, so a restarted runtime can load them)."""

from __future__ import annotations

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

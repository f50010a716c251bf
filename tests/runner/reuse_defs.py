"""Patterns the reuse tests restart (module level, so a reopened runtime loads them).

Each function counts its calls in `CALLS`, keyed by what it was called with: a
test asserts exactly which computations ran after a restart.
"""

from __future__ import annotations

import collections
from typing import Any

from runner import handler, lift, pattern

CALLS: collections.Counter[Any] = collections.Counter()


def card(x: Any) -> Any:
    CALLS[("card", x)] += 1
    if x == "boom":
        raise ValueError("boom")
    return {"n": x, "double": (x or 0) * 2}


def card_at(x: Any, i: Any) -> Any:
    CALLS[("at", i)] += 1
    return {"n": x, "i": i}


def doubled(x: Any) -> Any:
    CALLS[("doubled", x)] += 1
    return None if x is None else x * 2


def child_of(x: Any) -> Any:
    CALLS[("child_of", x)] += 1
    return Doubled(value=x)


@pattern
def Doubled(value):  # type: ignore[no-untyped-def]
    return {"doubled": lift(doubled)(value)}


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    return lift(card)(element)


@pattern
def CardAt(element, index):  # type: ignore[no-untyped-def]
    return lift(card_at)(element, index)


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}


@pattern
def BoardAt(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(CardAt)}


@pattern
def Launcher(value):  # type: ignore[no-untyped-def]
    """A lift that returns a pattern instance: it launches a computed child."""
    return {"child": lift(child_of)(value)}


@handler
def bump(event, element):  # type: ignore[no-untyped-def]
    element.set((element.get() or 0) + 1)


@pattern
def BumpCard(element):  # type: ignore[no-untyped-def]
    """A card with a handler: events can arrive, so its run is always installed."""
    return {"card": lift(card)(element), "bump": bump(element=element)}


@pattern
def BumpBoard(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(BumpCard)}


@pattern
def DoubledTwice(value):  # type: ignore[no-untyped-def]
    """A lift over a lift's output: the second may run with no transaction."""
    return {"twice": lift(doubled)(lift(doubled)(value))}


def child_unless_negative(x: Any) -> Any:
    CALLS[("child_unless_negative", x)] += 1
    if x == "boom":
        raise ValueError("boom")
    return Doubled(value=x) if x >= 0 else x


def same(x: Any) -> Any:
    return x


@pattern
def LaunchAfter(value):  # type: ignore[no-untyped-def]
    """A lift over a lift's output that launches a child for a non-negative value."""
    return {"child": lift(child_unless_negative)(lift(same)(value))}

"""A board that maps a list of numbers to cards, counting its card computations.

Used by docs/howto/durable-storage.md ("Element runs wait until something
needs them"): patterns live in a module so that a reopened runtime finds them.
"""

from __future__ import annotations

from typing import Any

from runner import lift, pattern

RUNS = [0]
"""How many times `card` was called in this process."""


def card(x: Any) -> Any:
    RUNS[0] += 1
    return {"n": x, "double": (x or 0) * 2}


def card_runs() -> int:
    """How many cards were computed so far."""
    return RUNS[0]


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    return lift(card)(element)


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}

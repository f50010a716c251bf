"""Patterns the ownership machine runs (module level, so a cold runtime can load them).

A three-level nesting chain with no computations: `OParent` launches `OChild`,
which launches `OLeaf`. Without lifts nothing demands the scheduler, so the only
transactions are the ones the machine opens and the runner's own start
transactions, and every registration change has a cause the model sees.
"""

from __future__ import annotations

from runner import pattern


@pattern
def OLeaf(value):  # type: ignore[no-untyped-def]
    return {"value": value}


@pattern
def OChild(value):  # type: ignore[no-untyped-def]
    return {"leaf": OLeaf(value=value)}


@pattern
def OParent(value):  # type: ignore[no-untyped-def]
    return {"child": OChild(value=value)}


@pattern
def OElem(element):  # type: ignore[no-untyped-def]
    return {"element": element}


@pattern
def OList(items):  # type: ignore[no-untyped-def]
    return {"els": items.map(OElem)}

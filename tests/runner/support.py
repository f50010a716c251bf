"""Helpers the runner tests share (not a test module)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pattern_defs import Parent

from runner import Runtime
from runner._lists import Coordinator


def arun(fn: Callable[[], Awaitable[Any]], *, timeout: float = 30) -> Any:
    """Run `fn()` in a fresh event loop.

    The timeout is a watchdog only (a held gate left behind by a failed assertion
    would otherwise hang the run); no test relies on time passing.
    """
    return asyncio.run(asyncio.wait_for(fn(), timeout=timeout))


async def turns(n: int = 5) -> None:
    """Let the loop run `n` steps (store answers, start stages); no time passes."""
    for _ in range(n):
        await asyncio.sleep(0)


async def run_parent(
    rt: Runtime, value: Any = 3, name: str = "res", tx: Any = None
) -> tuple[Any, Any, Any]:
    """Run `Parent` (a nested child, handlers) on fresh cells; commits unless given `tx`.
    Returns (result, items, count)."""
    items = rt.get_cell(f"{name}-items")
    count = rt.get_cell(f"{name}-count")
    res = rt.get_cell(name)
    own = tx is None
    tx = tx if tx is not None else rt.edit()
    items.with_tx(tx).set([])
    count.with_tx(tx).set(0)
    rt.run(tx, Parent, {"value": value, "items": items, "count": count}, res)
    if own:
        assert (await tx.commit()).ok
    return res, items, count


async def parent_result(rt: Runtime, value: Any = 3, name: str = "res", tx: Any = None) -> Any:
    """`run_parent`, returning only the result cell."""
    return (await run_parent(rt, value, name, tx))[0]


async def run_list(rt: Runtime, pat: Any, items: Any, name: str = "r") -> tuple[Any, Any]:
    """Run list pattern `pat` over a new list cell holding `items`; (the list, the result)."""
    cell = rt.get_cell(f"{name}-items")
    res = rt.get_cell(name)
    tx = rt.edit()
    cell.with_tx(tx).set(items)
    rt.run(tx, pat, {"items": cell}, res)
    assert (await tx.commit()).ok
    return cell, res


def coordinator(rt: Runtime) -> Coordinator:
    """The runtime's only list coordinator."""
    (only,) = rt.runner.coordinators
    return only

"""The host of a runtime's cells: `pull`, `sink` and `observe` through its scheduler.

Every cell a runtime hands out (its `get_cell`, a handler's argument, a page, a
send's stream) carries one `SchedulerHost`, so reading it reactively goes
through that runtime's scheduler. The host also remembers which runtime made it
(`owner`), which is how `Runtime.of(cell)` finds a cell's runtime.

Not here: the runtime itself (it sits above every module that makes cells, and
they get this host instead of it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells import Cell, Link, Transaction
from scheduler import Scheduler

from . import _docs as docs


class SchedulerHost:
    """Gives cells `pull` / `sink` / `observe` through a scheduler (cells' `CellHost`)."""

    __slots__ = ("owner", "scheduler")

    def __init__(self, owner: object, scheduler: Scheduler) -> None:
        self.owner = owner
        """The runtime whose cells these are (`Runtime.of`)."""
        self.scheduler = scheduler

    async def pull(self, cell: Cell) -> Any:
        return await self.scheduler.pull(cell)

    def sink(self, cell: Cell, fn: Callable[[Any], None]) -> Callable[[], None]:
        return self.scheduler.sink(cell, fn)

    def observe(self, cell: Cell) -> Any:
        return self.scheduler.observe(cell)

    def resolve(self, tx: Transaction, link: Link) -> Link:
        # A run's result is an end: `result.key("out", i).resolve()` names element i's
        # result even when its op returns one computed cell (its whole value is a link).
        return docs.resolve_to_result(tx, link)

    def sink_patches(
        self, cell: Cell, fn: Callable[[list[dict[str, Any]]], None]
    ) -> Callable[[], None]:
        return self.scheduler.sink_patches(cell, fn)

    def observe_patches(self, cell: Cell) -> Any:
        return self.scheduler.observe_patches(cell)

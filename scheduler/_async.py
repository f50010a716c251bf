"""Async work: the coroutines of async nodes and handlers, in flight on the loop.

A node function or handler that returns an awaitable (an `async def` lift or
handler) does not hold up the pass: its transaction, holding what it read
when it started, stays open while the awaitable runs in a task, and is
committed when it completes. The transaction's basis is those reads, so if an
input changed meanwhile the commit fails as STALE_BASIS, nothing it wrote
lands, and the node runs again (or the event is retried). A node's newer run
supersedes (cancels) its older one; removing a node or a handler, or closing
the scheduler, cancels its coroutine.

Each owner (a `Node`, or a `Handler` for its stream) has at most one task;
a handler's stream stays *busy* from the dispatch of an async handling until
its commit's verdict, so the events of one stream are handled in order while
other streams go on.

Invariants (checked by `_check`)
- every owner's task is in flight (`inflight` also holds cancelled tasks
  until they have finished);
- a busy stream's handler is registered, or a task is still finishing.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import attrs

from cells import CellweaveError, Transaction, running_loop

from ._events import Handler

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop runs (it is loaded then): see running_loop

handling_tx: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "cellweave_handling_tx", default=None
)
"""The transaction of the async handling whose coroutine runs now (the origin of the
events it sends)."""


@attrs.define(slots=True, eq=False, weakref_slot=False)
class AsyncWork:
    """The tasks of async nodes and handlers, by owner."""

    on_done: Callable[[], None]
    by_owner: dict[object, asyncio.Task[None]] = attrs.field(factory=dict, init=False)
    inflight: set[asyncio.Task[None]] = attrs.field(factory=set, init=False)
    busy: dict[Handler, None] = attrs.field(factory=dict, init=False)
    """Handlers whose stream has a handling in flight (until its verdict)."""

    def __bool__(self) -> bool:
        return bool(self.inflight or self.busy)

    def start(
        self,
        owner: object,
        work: Coroutine[Any, Any, None],
        name: str,
        inner: object = None,
        *,
        hint: str = "",
    ) -> asyncio.Task[None]:
        """Run `work` in a task owned by `owner`, superseding (cancelling) the owner's
        previous one. `inner` is the awaitable `work` awaits: closed when the task ends (a
        task cancelled before its first step never awaited it, and it must not warn).
        When no event loop runs, `work` and `inner` are closed and `CellweaveError`
        says that `name` is async (then `hint`): nothing could ever await it."""
        loop = running_loop()
        if loop is None:
            work.close()
            if inspect.iscoroutine(inner):
                inner.close()
            raise CellweaveError(
                f"{name} is async: it runs only while an event loop runs{hint}"
            ) from None
        old = self.by_owner.get(owner)
        if old is not None:
            old.cancel()
        task = loop.create_task(work, name=name)
        self.by_owner[owner] = task
        self.inflight.add(task)
        task.add_done_callback(self._finished)
        if inspect.iscoroutine(inner):
            task.add_done_callback(lambda _task: inner.close())
        return task

    def current(self, owner: object, task: asyncio.Task[None] | None) -> bool:
        """Whether `task` is still `owner`'s (not superseded, cancelled or removed)."""
        return task is not None and self.by_owner.get(owner) is task

    def release(self, owner: object, task: asyncio.Task[None] | None) -> None:
        """`task` of `owner` has ended its work: forget it as the owner's."""
        if task is not None and self.by_owner.get(owner) is task:
            del self.by_owner[owner]

    def cancel(self, owner: object) -> None:
        """Cancel `owner`'s coroutine, if one is in flight."""
        task = self.by_owner.pop(owner, None)
        if task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        for owner in list(self.by_owner):
            self.cancel(owner)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.inflight.discard(task)
        self.on_done()

    def _check(self) -> None:
        for owner, task in self.by_owner.items():
            assert task in self.inflight or task.done(), owner
        for handler in self.busy:
            # (a removed handler's cancelled task frees its stream when it finishes)
            assert handler.registered or handler in self.by_owner or self.inflight, handler

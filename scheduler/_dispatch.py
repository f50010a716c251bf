"""Event dispatch: handlers bound to streams, and the events sent to them.

`send` queues an event on the lane (`EventLane`, FIFO by first enqueue); a
settle dispatches the lane's head when nothing else is runnable
(`dispatch_next`): first the computations feeding what the handler declared
it reads are brought up to date (a preflight effect), then the handler runs
in its own transaction, which also creates the event's receipt (so one event
id is handled at most once on any runtime sharing the store). An event whose
origin transaction is pending waits (FIFO: later ones wait behind it); one
whose origin failed is dropped. A handling whose commit fails on a stale
basis is retried with backoff for `RETRY_WINDOW` seconds. An async handler
keeps its stream busy until its commit's verdict (`_async`).

Invariants: those of `EventLane` (checked by its `_check`).
Not here: when passes run (`_passes`), or the lane's data (`_events`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from cells import (
    Cell,
    CellweaveError,
    CommitResult,
    DocKey,
    Identity,
    Outcome,
    Path,
    Pending,
    Transaction,
    entity_id,
    normalize,
    thaw,
)

from ._async import handling_tx
from ._events import (
    RETRY_WINDOW,
    CommitConvergenceError,
    Handler,
    HandlerError,
    OriginFailedError,
    QueuedEvent,
    retry_delay,
)
from ._host import MAX_PASSES_PER_SETTLE, Host

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop runs (it is loaded then): see running_loop


@attrs.define(slots=True, eq=False, weakref_slot=False)
class Dispatch:
    """The handlers and event dispatch of one scheduler."""

    _host: Host

    def add_handler(
        self,
        stream: Cell,
        fn: Callable[[Transaction, Any], Any],
        *,
        reads: Iterable[tuple[DocKey, Path, bool]] = (),
        label: str | None = None,
        on_result: Callable[[Transaction, QueuedEvent, Any], None] | None = None,
    ) -> Handler:
        """Bind `fn(tx, payload)` to `stream`: it runs once per event sent there.

        `reads` declares what the handler will read: the computations feeding
        those places are brought up to date before it runs. `on_result(tx,
        event, returned)` sees the handler's return value inside its transaction.
        """
        key = (stream.doc_key, ("value", *stream.path))
        existing = self._host.events.handlers.get(key)
        if existing is not None:
            raise CellweaveError(
                f"stream {stream!r} already has a handler ({existing.label!r}); one per stream"
            )
        handler = Handler(
            key,
            fn,
            stream.identity,
            tuple(reads),
            label or str(getattr(fn, "__qualname__", "handler")),
            on_result,
        )
        self._host.events.handlers[key] = handler
        self._host.events.retired.pop(key, None)
        return handler

    def handler_label(self, stream: Cell) -> str | None:
        """The label of the handler bound to `stream` (the exact cell, links not
        followed), or None when no handler is bound there. O(1)."""
        handler = self._host.events.handlers.get((stream.doc_key, ("value", *stream.path)))
        return None if handler is None else handler.label

    def remove_handler(self, handler: Handler) -> None:
        """Unbind `handler`; its queued events are dropped, and so is every event sent to
        its stream later (until a handler is bound there again), as the reference does."""
        if self._host.events.handlers.get(handler.stream) is handler:
            del self._host.events.handlers[handler.stream]
            self._host.events.retire(handler)
        handler.registered = False
        self._host.work.cancel(handler)  # its handling in flight is dropped
        for ev in [e for e in self._host.events.queue if e.handler is handler]:
            self.drop(ev, "dropped", CellweaveError(f"{handler!r} was removed"))

    def report_error(
        self,
        error: CellweaveError,
        *,
        cause: BaseException | None = None,
        source: str = "send",
        cell: str | None = None,
    ) -> None:
        """Record a failure of event delivery that has no caller left to raise to (an
        event that waited for its handler to be bound) in `errors()` (kind "send"),
        logged once, as a handler's failure is."""
        if cause is not None and error.__cause__ is None:
            error.__cause__ = cause
        self._host.errors_log.add("send", source, cell, error)

    def has_handler(self, stream: Cell) -> bool:
        """Whether a handler is bound to `stream` now (links are not followed)."""
        return (stream.doc_key, ("value", *stream.path)) in self._host.events.handlers

    def had_handler(self, stream: Cell) -> bool:
        """Whether `stream`'s handler was removed and none is bound since (a send there
        is dropped). Remembered for the last `MAX_RETIRED` removed handlers."""
        return (stream.doc_key, ("value", *stream.path)) in self._host.events.retired

    def send(
        self,
        stream: Cell,
        payload: Any,
        *,
        origin: Transaction | None = None,
        event_id: str | None = None,
        retry: bool = True,
        on_settle: Callable[[QueuedEvent], None] | None = None,
        actor: Identity | None = None,
    ) -> QueuedEvent:
        """Queue `payload` for the handler bound to `stream` (FIFO).

        `origin` defaults to the transaction of the node or handler running now:
        the event then waits for that transaction to commit, and is dropped if
        it fails. `event_id` makes delivery idempotent: the same id on the same
        stream is handled at most once, on any runtime sharing the store. `actor` is
        who fired it: the handling runs as that identity (its scoped reads and writes,
        and what it launches, land in that identity's instances); by default the actor
        of the handling that sent it, else the handler's own identity.
        """
        key = (stream.doc_key, ("value", *stream.path))
        handler = self._host.events.handlers.get(key)
        if handler is None:
            handler = self._host.events.retired.get(key)
            if handler is None:
                raise CellweaveError(
                    f"no handler is bound to stream {stream!r}; cannot send {payload!r}"
                )
        value = normalize(payload, where=f"event for {stream!r}")
        if origin is None:
            origin = self._host._current_tx or handling_tx.get()
        if actor is None and origin is not None and origin.meta.get("event") is not None:
            actor = origin.identity  # a handler's follow-up keeps its actor (multi-hop)
        if event_id is None:
            ev_id = self._host.events.mint_id()
        else:
            # Scoped to the sending principal, each coordinate its own list element: one
            # principal's id never drops another's event, and no two identities' names run
            # together (("alice:x", "y") is not ("alice", "x:y")). Per principal, not per
            # session: a redelivery from the same principal's other session or runtime is
            # still the same invocation.
            who = actor or handler.identity
            doc = key[0]
            cause = {
                "ingress": event_id,
                "stream": [doc.space, doc.id, doc.scope, doc.principal, doc.session],
                "by": who.principal,
            }
            ev_id = "ev:" + entity_id(cause)
        ev = QueuedEvent(
            ev_id,
            self._host.events.next_seq(),
            handler,
            value,
            origin,
            retry,
            on_settle=on_settle,
            actor=actor,
        )
        if not handler.registered:
            # Its handler was removed: dropped now, as the events queued for it were.
            self.drop(ev, "dropped", CellweaveError(f"{handler!r} was removed"))
            return ev
        self._host.events.enqueue(ev)
        if origin is not None:
            self._host.lineage.record_event(origin, ev)
        self._host._request_pass()
        return ev

    def drop(self, ev: QueuedEvent, status: Any, error: BaseException | None) -> None:
        if ev.status == "queued":
            self._host.events.dequeue(ev)
        ev.status = status
        ev.error = error
        if ev.on_settle is not None:
            ev.on_settle(ev)

    def origin_failed(self, origin: Transaction, events: list[QueuedEvent]) -> None:
        for ev in events:
            if ev.status == "queued":
                self.drop(
                    ev, "dropped", OriginFailedError(f"the transaction that sent {ev!r} failed")
                )

    def dispatch_next(self) -> bool:
        """Dispatch the lane head if it may go now; True if something was done."""
        now = self._host.clock.now()
        queue = self._host.events.queue
        busy = self._host.work.busy
        i = 0
        while i < len(queue):
            ev = queue[i]
            if busy and ev.handler in busy:
                i += 1  # its stream is handling an earlier event: other streams go on
                continue
            if not ev.handler.registered:
                self.drop(ev, "dropped", CellweaveError(f"{ev.handler!r} was removed"))
                continue
            if ev.origin is not None:
                status = self._host.lineage.status(ev.origin)
                if status == "failed":
                    self.drop(ev, "dropped", OriginFailedError(f"the origin of {ev!r} failed"))
                    continue
                if status == "pending":
                    return False  # FIFO: later events wait behind it
            if ev.not_before > now:
                return False
            self._preflight(ev.handler)
            self._dispatch(ev)
            return True
        return False

    def _preflight(self, handler: Handler) -> None:
        if not handler.reads:
            return
        reads = handler.reads

        def read_all(tx: Transaction) -> None:
            for key, path, shallow in reads:
                tx.read(key, path, shallow=shallow)

        node = self._host.register(
            read_all, identity=handler.identity, kind="effect", label="preflight", reads=reads
        )
        try:
            for _ in range(MAX_PASSES_PER_SETTLE):
                self._host.replica.pump()
                seeds = self._host.runnable()
                if not seeds:
                    break
                self._host._pass(seeds)
        finally:
            self._host.remove(node)

    def _dispatch(self, ev: QueuedEvent) -> None:
        self._host.events.dequeue(ev)
        ev.status = "dispatched"
        handler = ev.handler
        tx = self._host.replica.edit(ev.actor or handler.identity, source=handler)
        tx.meta["event"] = ev
        receipt = ev.receipt_key()
        tx.create_only(receipt, authority=self._host._authority)
        previous_tx, self._host._current_tx = self._host._current_tx, tx
        try:
            handler.runs += 1
            returned = handler.fn(tx, thaw(ev.payload))
            if returned is not None and inspect.isawaitable(returned):
                self._handle_later(ev, tx, returned)
                return
            if tx.is_open:
                tx.write_internal(self._host._authority, receipt, ("value",), {"event": ev.id})
                if handler.on_result is not None:
                    handler.on_result(tx, ev, returned)
        except Exception as exc:
            if tx.is_open:
                tx.abort(f"{handler.label} raised {type(exc).__name__}")
            err = HandlerError(f"{handler!r} raised {type(exc).__name__}: {exc} (event {ev!r})")
            err.__cause__ = exc
            self._host.errors_log.add("handler", handler.label, _stream_name(handler), err)
            self.drop_dispatched(ev, "failed", err)
            return
        finally:
            self._host._current_tx = previous_tx
        if not tx.is_open:  # the handler aborted its own transaction
            self.drop_dispatched(ev, "dropped", tx.result.error if tx.result else None)
            return
        tx.commit().add_done_callback(functools.partial(self._on_event_commit, ev))

    def _handle_later(self, ev: QueuedEvent, tx: Transaction, awaitable: Any) -> None:
        """An async handler: its stream is busy (its next events wait) until the
        handling's coroutine has ended and its commit's verdict is in; other streams go
        on. Without a running event loop the handling fails."""
        handler = ev.handler
        task = self._host.work.start(
            handler, self._finish_event(ev, tx, awaitable), handler.label, awaitable
        )
        self._host.work.busy[handler] = None

        def ended(task: asyncio.Task[None]) -> None:
            # A cancelled handling (also one cancelled before its first step, which ran
            # none of its body) is dropped, and its stream is free again.
            if not task.cancelled():
                return
            if tx.is_open:
                tx.abort(f"{handler.label}: its coroutine was cancelled")
            self._host.work.busy.pop(handler, None)
            if ev.status == "dispatched":
                self.drop_dispatched(ev, "dropped", CellweaveError(f"{handler!r} was removed"))

        task.add_done_callback(ended)

    async def _finish_event(self, ev: QueuedEvent, tx: Transaction, awaitable: Any) -> None:
        import asyncio  # loaded: this coroutine runs on a loop

        handler = ev.handler
        task = asyncio.current_task()
        handling_tx.set(tx)  # (this task's own context) the origin of what it sends
        try:
            returned = await awaitable
            if tx.is_open:
                tx.write_internal(
                    self._host._authority, ev.receipt_key(), ("value",), {"event": ev.id}
                )
                if handler.on_result is not None:
                    handler.on_result(tx, ev, returned)
        except Exception as exc:
            self._host.work.release(handler, task)
            self._host.work.busy.pop(handler, None)
            if tx.is_open:
                tx.abort(f"{handler.label} raised {type(exc).__name__}")
            err = HandlerError(f"{handler!r} raised {type(exc).__name__}: {exc} (event {ev!r})")
            err.__cause__ = exc
            self._host.errors_log.add("handler", handler.label, _stream_name(handler), err)
            self.drop_dispatched(ev, "failed", err)
            self._host._kick()
            return
        self._host.work.release(handler, task)
        if not tx.is_open:  # the handler aborted its own transaction
            self._host.work.busy.pop(handler, None)
            self.drop_dispatched(ev, "dropped", tx.result.error if tx.result else None)
            self._host._kick()
            return

        def verdict(pending: Pending[CommitResult]) -> None:
            self._host.work.busy.pop(handler, None)  # before a stale retry is queued again
            self._on_event_commit(ev, pending)
            self._host._kick()

        tx.commit().add_done_callback(verdict)
        self._host._kick()

    def drop_dispatched(self, ev: QueuedEvent, status: Any, error: BaseException | None) -> None:
        ev.status = status
        ev.error = error
        if ev.on_settle is not None:
            ev.on_settle(ev)

    def _on_event_commit(self, ev: QueuedEvent, pending: Pending[CommitResult]) -> None:
        result = pending.result()
        ev.result = result
        if result.ok:
            self.drop_dispatched(ev, "done", None)
            return
        if result.outcome is Outcome.STALE_BASIS and ev.retry and ev.handler.registered:
            now = self._host.clock.now()
            if ev.first_failure is None:
                ev.first_failure = now
            if now - ev.first_failure < RETRY_WINDOW:
                ev.attempts += 1
                ev.not_before = now + retry_delay(ev.attempts)
                ev.status = "queued"
                self._host.events.enqueue(ev)  # keeps its first-enqueue place
                return
            err = CommitConvergenceError(
                f"{ev!r} kept failing on a stale basis for {RETRY_WINDOW} s ({ev.attempts} retries)"
            )
            err.__cause__ = result.error
            self._host.errors_log.add("handler", ev.handler.label, _stream_name(ev.handler), err)
            self.drop_dispatched(ev, "failed", err)
            return
        # PERMANENT: a duplicate delivery lost the receipt race; never retried.
        self.drop_dispatched(ev, "dropped", result.error)


def _stream_name(handler: Handler) -> str:
    key, path = handler.stream
    return f"{key}{list(path[1:])}" if len(path) > 1 else str(key)

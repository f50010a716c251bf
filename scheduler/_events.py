"""Events: FIFO handler dispatch, receipts, retries and lineage.

A handler is bound to one stream cell and runs once per event, in its own
transaction. Events wait in one FIFO lane ordered by first enqueue; a
requeued event keeps its place and never overtakes an earlier one (except
that while a stream is busy with an async handling, `scheduler._async`, later
events of other streams go ahead of its waiting ones). Before a
handler runs, the computations feeding the reads it declared are brought up
to date (an ephemeral preflight effect demands them for one settle).

Each handling marks a *receipt* document create-only; the receipt's id
derives from the durable event id, so a second delivery of the same event
(on this runtime or another sharing the store) loses with PERMANENT and is
not retried. A caller-given event id is scoped to the principal that sends
it (another principal's same id is another event), and a receipt is an
internal document: no identity's transaction can read or pre-create it. A
stale-basis rejection is retried with capped exponential backoff inside
`RETRY_WINDOW`; then the event fails with `CommitConvergenceError`. Every
other failure drops the event at once.

Lineage: an event sent from a transaction (its *origin*) waits until the
origin commits; if the origin fails, its queued descendants are dropped and
every stop recorded against it runs (`Lineage.record_stop`).

Invariants (checked by `_check`)
- the lane is sorted by enqueue seq and holds only queued events; `waiting` says
  whether it holds one;
- at most one handler per stream.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs
from sortedcontainers import SortedKeyList

from cells import (
    CellweaveError,
    CommitResult,
    DocKey,
    Identity,
    Path,
    Transaction,
    internal_id,
)

RETRY_WINDOW: Final = 30.0
RETRY_BASE: Final = 0.025
RETRY_CAP: Final = 1.0

EventStatus = Literal["queued", "dispatched", "done", "dropped", "failed"]


class CommitConvergenceError(CellweaveError, RuntimeError):
    """A handler's commit kept failing on a stale basis for the whole retry window."""


class HandlerError(CellweaveError, RuntimeError):
    """A handler function raised; the event's transaction was aborted."""


class OriginFailedError(CellweaveError, RuntimeError):
    """The transaction that sent this event never committed, so the event was dropped."""


@attrs.define(eq=False, repr=False)
class Handler:
    stream: tuple[DocKey, Path]
    fn: Callable[[Transaction, Any], Any]
    identity: Identity
    reads: tuple[tuple[DocKey, Path, bool], ...]
    label: str
    on_result: Callable[[Transaction, QueuedEvent, Any], None] | None = None
    registered: bool = True
    runs: int = 0
    """How often `fn` ran (each attempt of each event), for inspection."""

    def __repr__(self) -> str:
        return f"<Handler {self.label!r} on {self.stream[0]}{list(self.stream[1])}>"


@attrs.define(eq=False, repr=False)
class QueuedEvent:
    id: str
    seq: int
    handler: Handler
    payload: Any
    origin: Transaction | None = None
    retry: bool = True
    attempts: int = 0
    first_failure: float | None = None
    not_before: float = 0.0
    status: EventStatus = "queued"
    result: CommitResult | None = None
    error: BaseException | None = None
    on_settle: Callable[[QueuedEvent], None] | None = None
    actor: Identity | None = None
    """Who fired it: the handling runs as this identity (default: the handler's)."""

    def __repr__(self) -> str:
        return f"<Event {self.id[:12]} #{self.seq} {self.status} -> {self.handler.label!r}>"

    def receipt_key(self) -> DocKey:
        """An internal document (no identity's transaction reaches it): its id derives
        from the event id, which a caller-given `event_id` makes per sending identity,
        and from the stream's instance, each coordinate a list element of its own."""
        key, path = self.handler.stream
        stream = [key.space, key.id, key.scope, key.principal, key.session, list(path)]
        return DocKey(key.space, internal_id({"receipt": self.id, "stream": stream}))


@attrs.define(eq=False)
class _Origin:
    events: list[QueuedEvent] = attrs.field(factory=list)
    stops: list[Callable[[], None]] = attrs.field(factory=list)


class Lineage:
    """What each origin transaction launched, and what to undo if it fails."""

    def __init__(self, on_failed: Callable[[Transaction, list[QueuedEvent]], None]) -> None:
        self._records: dict[Transaction, _Origin] = {}
        self._on_failed = on_failed

    def status(self, origin: Transaction) -> Literal["pending", "confirmed", "failed"]:
        result = origin.result
        if result is None:
            return "pending"
        return "confirmed" if result.ok else "failed"

    def _record(self, origin: Transaction) -> _Origin | None:
        if origin.result is not None:
            return None
        rec = self._records.get(origin)
        if rec is None:
            rec = self._records[origin] = _Origin()
            origin.add_settle_callback(self._settled)
        return rec

    def record_event(self, origin: Transaction, ev: QueuedEvent) -> None:
        rec = self._record(origin)
        if rec is not None:
            rec.events.append(ev)

    def record_stop(self, origin: Transaction, stop: Callable[[], None]) -> None:
        """Run `stop()` if `origin` fails (at once if it already failed)."""
        if origin.result is not None:
            if not origin.result.ok:
                stop()
            return
        rec = self._record(origin)
        assert rec is not None
        rec.stops.append(stop)

    def _settled(self, origin: Transaction, result: CommitResult) -> None:
        rec = self._records.pop(origin, None)
        if rec is None or result.ok:
            return
        errors: list[Exception] = []
        for stop in rec.stops:
            try:
                stop()
            except Exception as exc:  # one failing stop must not skip the rest
                errors.append(exc)
        self._on_failed(origin, rec.events)
        if errors:
            raise ExceptionGroup("stops of a failed origin raised", errors)


def _event_seq(ev: QueuedEvent) -> int:
    return ev.seq


MAX_RETIRED: Final = 10_000
"""Streams of removed handlers remembered (so a send there is dropped, not refused)."""


class EventLane:
    """The FIFO lane plus the handler table."""

    def __init__(self) -> None:
        self.handlers: dict[tuple[DocKey, Path], Handler] = {}
        self.retired: dict[tuple[DocKey, Path], Handler] = {}
        """Streams whose handler was removed and none bound since: the removed handler
        with its function let go (newest last, at most `MAX_RETIRED`)."""
        self.queue: SortedKeyList[QueuedEvent, int] = SortedKeyList(key=_event_seq)
        """Change it only through `enqueue` and `dequeue` (they keep `waiting`)."""
        self.waiting = False
        """Whether `queue` holds an event: asked on every settle and commit, where a
        `SortedKeyList`'s truth (its `__len__`) is a Python call."""
        self._seqs = itertools.count()
        self._nonce = os.urandom(8).hex()  # (what secrets.token_hex does, without its import)
        self._minted = itertools.count()

    def mint_id(self) -> str:
        return f"ev:{self._nonce}:{next(self._minted)}"

    def next_seq(self) -> int:
        return next(self._seqs)

    def enqueue(self, ev: QueuedEvent) -> None:
        self.queue.add(ev)
        self.waiting = True

    def dequeue(self, ev: QueuedEvent) -> None:
        """Take `ev` out of the queue if it is there."""
        queue = self.queue
        queue.discard(ev)
        self.waiting = bool(queue)

    def head(self) -> QueuedEvent | None:
        return self.queue[0] if self.queue else None

    def retire(self, handler: Handler) -> None:
        """Remember that `handler`'s stream had a handler, without keeping its function
        (nor what it holds on to): a later send there is dropped like a queued event."""
        retired = self.retired
        retired.pop(handler.stream, None)
        retired[handler.stream] = Handler(
            handler.stream, _removed, handler.identity, (), handler.label, registered=False
        )
        if len(retired) > MAX_RETIRED:
            del retired[next(iter(retired))]

    def _check(self) -> None:
        assert self.waiting == bool(self.queue)
        seqs = [e.seq for e in self.queue]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert all(e.status == "queued" for e in self.queue)
        for stream, h in self.handlers.items():
            assert h.stream == stream and h.registered
            assert stream not in self.retired, stream
        assert len(self.retired) <= MAX_RETIRED
        for stream, h in self.retired.items():
            assert h.stream == stream and not h.registered


def _removed(tx: Transaction, payload: Any) -> None:  # pragma: no cover - never dispatched
    raise AssertionError("a removed handler never runs")


def retry_delay(attempts: int) -> float:
    """Capped exponential backoff for stale-basis handler retries."""
    return float(min(RETRY_BASE * (2 ** max(0, attempts - 1)), RETRY_CAP))

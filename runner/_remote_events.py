"""Events across processes: a send in a served runtime reaches the claimed page's handler.

A runtime made with `pages="served"` runs nothing: the pages run in serving
processes (`rt.serve_pages`, `cellweave worker`), under claims. A send there to
a stream of a result it does not run is recorded in the store, in the sending
principal's *inbox* (an internal document per principal, like the pages
document), and the process that holds the claim on the page delivers it:

- **Sender** (`Outbox`): the event is checked as far as the sender can (plain
  data; a typed handler's schema when the stream is a handler node the page's
  pattern names), then appended to the inbox's queue as an item
  `{"n": token, "id": event_id, "stream": place, "event": payload, "session": ...}`.
  One append is in flight per runtime at a time (the items waiting meanwhile go
  in the next one, in send order), and a stale basis (another process appended or
  recorded an outcome) re-reads and appends again: one sender's events keep their
  order. The `Sent` handle is "queued" once the append is committed.
- **Owner** (`Inbox`, driven by the `PageServer`): on each heartbeat and on every
  change of an inbox it watches, each queued item whose stream has a handler bound
  here, under a page this process holds, is sent to that handler with the item's
  event id (the sender's `event_id`, else the item's token): delivery is
  idempotent through the event's receipt, a create-only document written in the
  handler's own commit, which carries the page's fence. So the event is consumed
  together with the handler's writes; a process that lost the page cannot commit
  either, and after a takeover the new owner delivers the items still queued: an
  item handled before the crash loses its receipt race and is reported "done"
  (its own token was its id, so the receipt can only be its own; with a
  caller-given `event_id` it is reported "dropped", as a duplicate is locally).
  Items are delivered in queue order, each stream's events one after another.
- **Outcome**: once the handling settles, the owner removes the item from the
  queue and records its outcome (`{"status": "done" | "dropped" | "failed",
  "error": text}`) in one commit, fenced like the page's others; the last
  `KEEP_OUTCOMES` outcomes are kept. The sender watches its inbox and settles the
  handle: "done", "dropped", or `RemoteHandlingError` (the handler raised, or the
  commit failed; the message carries the owner's error text, not the exception).

Invariants
- an item leaves the queue only in the commit that records its outcome;
- `Inbox.inflight` holds exactly the tokens delivered here whose outcome commit
  has not settled (such an item is never delivered twice by this process).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cells import (
    RETRYABLE,
    Authority,
    Cell,
    CellweaveError,
    CommitResult,
    DocKey,
    Identity,
    Link,
    Notification,
    Pending,
    Replica,
    internal_id,
    normalize,
)
from scheduler import QueuedEvent, Scheduler

from . import _docs as docs
from ._builder import NodeSpec, Pattern, find_pattern
from ._core import MAX_NESTING
from ._types import event_converter
from .errors import PatternLoadError

if TYPE_CHECKING:
    from ._host import SchedulerHost
    from ._sent import Sent

INBOX_CAUSE: Final = {"cellweave": "events"}
KEEP_OUTCOMES: Final = 256
"""Outcomes an inbox keeps (oldest dropped first): a sender that waits longer than
that many other handlings of its principal hears nothing more."""
MAX_APPEND_RETRIES: Final = 50


class RemoteHandlingError(CellweaveError, RuntimeError):
    """An event sent from a served runtime failed in the process that runs its page
    (its handler raised, or its commit failed); the message is that process's."""


def inbox_link(space: str) -> Link:
    """One inbox per principal (an internal document: only runtimes' authority)."""
    return Link(space, internal_id(INBOX_CAUSE), "user")


def inbox_key(space: str, principal: str) -> DocKey:
    return inbox_link(space).key(Identity(principal, "serve"))


def _value(replica: Replica, key: DocKey) -> dict[str, Any]:
    doc = replica.visible(key)
    value = doc.get(docs.VALUE) if type(doc) is dict else None
    return value if type(value) is dict else {}


# --------------------------------------------------------------------------- sender


class Outbox:
    """A served runtime's side: record sends in the inbox, hear their outcomes."""

    def __init__(self, replica: Replica, authority: Authority, space: str) -> None:
        self.replica = replica
        self.authority = authority
        self.space = space
        self.waiting: dict[str, Sent] = {}
        """Token -> handle, for every appended item whose outcome is not in yet."""
        self.unsent: dict[str, list[tuple[dict[str, Any], Sent]]] = {}
        """Principal -> items waiting for the append in flight to settle."""
        self.appending: set[str] = set()
        self._inbox_id = inbox_link(space).id
        self._unsubscribe: Callable[[], None] | None = None

    def send(
        self,
        identity: Identity,
        place: Cell,
        run: tuple[Link, str | None],
        event: Any,
        event_id: str | None,
        sent: Sent,
    ) -> None:
        """Record `event` for the handler at `place` (in the result `run`, with its
        pattern's name), to be delivered by the process that holds its page."""
        event = _check_schema(run[1], run[0], place.link(), event)
        normalize(event, where=f"event for {place!r}")  # a bad payload raises here
        token = uuid.uuid4().hex
        item = {
            "n": token,
            "id": event_id,
            "stream": place.link(),
            "event": event,
            "session": identity.session,
        }
        if self._unsubscribe is None:
            self._unsubscribe = self.replica.subscribe(self._changed)
        sent._remote("parked")
        self.unsent.setdefault(identity.principal, []).append((item, sent))
        if identity.principal not in self.appending:
            self._append(identity.principal, [], 0)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _append(
        self, principal: str, batch: list[tuple[dict[str, Any], Sent]], attempt: int
    ) -> None:
        if not batch:
            batch = self.unsent.pop(principal, [])
            if not batch:
                self.appending.discard(principal)
                return
        self.appending.add(principal)
        key = inbox_key(self.space, principal)
        tx = self.replica.edit(Identity(principal, "serve"), authority=self.authority)
        raw = tx.read(key, (docs.VALUE, "queue"))
        queue = list(raw) if isinstance(raw, (list, tuple)) else []
        queue.extend(item for item, _sent in batch)
        tx.write(key, (docs.VALUE, "queue"), queue)

        def settled(p: Pending[CommitResult]) -> None:
            res = p.result()
            if res.ok:
                for item, sent in batch:
                    self.waiting[item["n"]] = sent
                    sent._remote("queued")
                self._hear(principal)  # (an outcome may be in already)
                self._append(principal, [], 0)
                return
            if res.outcome in RETRYABLE and attempt < MAX_APPEND_RETRIES:
                self._append(principal, batch, attempt + 1)
                return
            for _item, sent in batch:
                error = CellweaveError(
                    f"an event sent to a page served elsewhere could not be recorded in"
                    f" {principal!r}'s inbox ({res.outcome.name}): {res.error}"
                )
                sent._fail(error)
            self._append(principal, [], 0)

        tx.commit().add_done_callback(settled)

    def _changed(self, note: Notification) -> None:
        if not self.waiting:
            return
        for change in note.changes:
            if change.key.id == self._inbox_id:
                self._hear(change.key.principal)

    def _hear(self, principal: str) -> None:
        outcomes = _value(self.replica, inbox_key(self.space, principal)).get("outcomes")
        if type(outcomes) is not dict:
            return
        for token in [t for t in self.waiting if t in outcomes]:
            sent = self.waiting.pop(token)
            out = outcomes[token]
            status = out.get("status") if type(out) is dict else None
            if status == "failed":
                sent._fail(RemoteHandlingError(str(out.get("error"))))
            else:
                sent._remote("done" if status == "done" else "dropped", out.get("error"))


def _check_schema(pattern: str | None, run: Link, place: Link, event: Any) -> Any:
    """`event` checked against the type of the handler at `place`, when `run`'s pattern
    tree names a handler node there (else the owner checks it); else unchanged."""
    found = None if pattern is None else handler_at(pattern, run, place)
    if found is None:
        return event
    owner, spec = found
    fn = owner.function(spec.target)
    convert = event_converter(
        fn, f"{getattr(fn, '__qualname__', spec.target)} in pattern {owner.identity}"
    )
    if convert is None:
        return event
    import msgspec

    return msgspec.to_builtins(convert(event))


def handler_at(pattern: str, result: Link, place: Link) -> tuple[Pattern, NodeSpec] | None:
    """The handler node whose stream is `place`, in the tree of `result` (a run of
    `pattern`) as far as its patterns name it (a list's or lift's children are known
    only where they run); None if none is, or a pattern does not load here."""
    if place.path:
        return None
    try:
        return _handler_in(find_pattern(pattern), result, place, 0)
    except PatternLoadError:
        return None


def _handler_in(
    pattern: Pattern, result: Link, place: Link, depth: int
) -> tuple[Pattern, NodeSpec] | None:
    for node in pattern.graph.nodes:
        out = docs.internal_link(result, node.index)
        if node.kind == "handler" and out == place:
            return pattern, node
        if node.kind == "pattern" and depth < MAX_NESTING:
            found = _handler_in(find_pattern(node.target), out, place, depth + 1)
            if found is not None:
                return found
    return None


# --------------------------------------------------------------------------- owner


class Inbox:
    """A serving process's side: deliver the queued events of pages it holds."""

    def __init__(
        self,
        replica: Replica,
        authority: Authority,
        scheduler: Scheduler,
        host: SchedulerHost,
        space: str,
        holder: Callable[[DocKey], Any],
    ) -> None:
        self.replica = replica
        self.authority = authority
        self.scheduler = scheduler
        self.host = host
        self.space = space
        self.holder = holder
        """Stream document -> the claimed page (`Held`) it is under, or None."""
        self.inflight: set[str] = set()
        self.delivered = 0

    def deliver(self, principal: str) -> int:
        """Send every deliverable queued item of `principal`'s inbox; how many."""
        key = inbox_key(self.space, principal)
        queue = _value(self.replica, key).get("queue")
        if not isinstance(queue, (list, tuple)):
            return 0
        sch = self.scheduler
        sent = 0
        for item in queue:
            if type(item) is not dict:
                continue
            token, stream = item.get("n"), item.get("stream")
            if type(token) is not str or token in self.inflight or type(stream) is not Link:
                continue
            session = item.get("session")
            identity = Identity(principal, session if type(session) is str else "serve")
            cell = Cell(self.replica, identity, stream, host=self.host)
            held = self.holder(cell.doc_key)
            if held is None or not sch.has_handler(cell):
                continue  # not a page held here (or not started yet): later, or elsewhere
            given = item.get("id")
            event_id = given if type(given) is str else token
            self.inflight.add(token)
            self.delivered += 1
            sent += 1

            settle = functools.partial(self._settled, principal, token, given is None, held)
            sch.send(cell, item.get("event"), event_id=event_id, actor=identity, on_settle=settle)
        return sent

    def _settled(self, principal: str, token: str, own: bool, held: Any, ev: QueuedEvent) -> None:
        if ev.status in ("done", "dropped", "failed"):
            self._record(principal, token, ev, own, held, 0)

    def _record(
        self, principal: str, token: str, ev: QueuedEvent, own: bool, held: Any, attempt: int
    ) -> None:
        status = ev.status
        error = None if ev.error is None else f"{type(ev.error).__name__}: {ev.error}"
        if status == "dropped" and own and _lost_receipt_race(ev):
            status, error = "done", None  # its own receipt: handled before a takeover
        key = inbox_key(self.space, principal)
        tx = self.replica.edit(Identity(principal, "serve"), authority=self.authority)
        tx.meta["page"] = held  # the outcome commit carries the page's fence
        raw = tx.read(key, (docs.VALUE, "queue"))
        queue = (
            [i for i in raw if not (type(i) is dict and i.get("n") == token)]
            if isinstance(raw, (list, tuple))
            else []
        )
        outcomes = tx.read(key, (docs.VALUE, "outcomes"))
        kept = dict(outcomes) if type(outcomes) is dict else {}
        kept[token] = {"status": status, "error": error}
        while len(kept) > KEEP_OUTCOMES:
            del kept[next(iter(kept))]
        tx.write(key, (docs.VALUE, "queue"), queue)
        tx.write(key, (docs.VALUE, "outcomes"), kept)

        def settled(p: Pending[CommitResult]) -> None:
            res = p.result()
            if not res.ok and res.outcome in RETRYABLE and attempt < MAX_APPEND_RETRIES:
                self._record(principal, token, ev, own, held, attempt + 1)
                return
            # Recorded, or refused for good (fenced: the page's new owner delivers it).
            self.inflight.discard(token)

        tx.commit().add_done_callback(settled)


def _lost_receipt_race(ev: QueuedEvent) -> bool:
    """Whether `ev` was dropped because its receipt already existed (handled before)."""
    error = ev.error
    return getattr(error, "kind", None) == "receipt-exists" and str(ev.receipt_key()) in str(error)

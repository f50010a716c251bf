"""Pages: results opened in their own right, as durable intent with an owner.

A page is recorded in its principal's pages document (one user-scoped
document per principal) *before* it starts, and opening reports success only
once that record is durable and the start claimed an independent lifetime.
If the start fails or claims nothing, the record is withdrawn, so a restart
never resumes a page that was not running. Stopping a page records the stop
first (re-issued if its commit fails retryably), then cancels the local
work: a restart never resumes a stopped page. `resume()` starts every page
recorded open, each on its own, so one page that can no longer start does
not keep the others from resuming.

A record names the result the page runs. A page opened through a list slot
that holds a link to a result (a map container's slot `cards.key(i)`) is *pinned*:
the record names the result the slot leads to at that moment, so removing or
reordering elements never turns the page into another element's, before or
after a restart. `follow=True` records the slot itself instead: the page then
runs whatever the slot holds when it starts (and again at each resume). The
result a record ends at is learned when the start claims it. Pages belong to
the principal who opened them: stopping, listing or inspecting another
principal's pages raises `OwnershipError`.

An open page is demand, like a sink: while it is open (claimed, until it is
stopped or withdrawn) an effect reads its whole value, links followed, so
every field, nested child and list row of it is computed and kept current
even when nothing else reads it. The cost is that of a sink on the page: the
effect re-reads the page's value (O(its size)) after each change inside it.

Two principals may each open the same shared (space-scoped) result as a page:
each has a record; a stop closes the stopping principal's pages on it (one opened
directly and one through a link are both closed), and stops the result only when no
other principal's page still holds it.

Invariants (checked by `_check`)
- every record in `by_key` is in `by_pid`, under its own principal and key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cells import (
    RETRYABLE,
    Cell,
    CommitResult,
    Identity,
    Link,
    Pending,
    Transaction,
    describe,
    read_value,
)
from scheduler import Node

from . import _docs as docs
from ._registrations import Key
from .errors import PageError

if TYPE_CHECKING:
    from ._runtime import Runtime

MAX_RECORD_RETRIES: Final = 10


class PageRecord:
    __slots__ = ("key", "link", "opened", "opening", "pid", "principal", "stopped")

    def __init__(self, principal: str, pid: str, link: Link) -> None:
        self.principal = principal
        self.pid = pid
        self.link = link
        self.key: Key | None = None
        self.stopped = False
        """A stop came while the page was still being opened: it must not start."""
        self.opening = 0
        """Opens of this record still in flight (opening a page again reuses its record)."""
        self.opened = False
        """An open of it succeeded: a later open that fails or is superseded leaves it."""

    def __repr__(self) -> str:
        return f"<page {self.link} of {self.principal!r}>"


class Pages:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.by_pid: dict[tuple[str, str], PageRecord] = {}
        self.by_key: dict[Key, dict[str, PageRecord]] = {}
        """Pages on each result, per principal (two principals may open one shared result)."""
        self.demand: dict[PageRecord, Node] = {}
        """The effect that keeps each open page computed (a page is demand while open)."""

    # ------------------------------------------------------------------ records
    def _doc(self, identity: Identity) -> Any:
        return docs.pages_link(self.rt.space).key(identity)

    def _write(
        self,
        identity: Identity,
        pid: str,
        record: Any,
        *,
        done: Callable[[CommitResult], None] | None = None,
        attempt: int = 0,
    ) -> None:
        """Write one page record (None withdraws it). A retryable failure re-issues it;
        `done` sees only the final outcome, so a caller never acts on a first failure
        that a retry then overturns."""
        tx = self.rt.replica.edit(identity)
        tx.write(self._doc(identity), (docs.VALUE, pid), record)

        def settled(p: Pending[CommitResult]) -> None:
            res = p.result()
            if not res.ok and res.outcome in RETRYABLE and attempt < MAX_RECORD_RETRIES:
                self._write(identity, pid, record, done=done, attempt=attempt + 1)
            elif done is not None:
                done(res)

        tx.commit().add_done_callback(settled)

    def records(self, identity: Identity) -> dict[str, Any]:
        doc = self.rt.replica.visible(self._doc(identity))
        value = doc.get(docs.VALUE) if type(doc) is dict else None
        return value if type(value) is dict else {}

    def find(self, cell: Cell, identity: Identity) -> tuple[PageRecord | None, str | None]:
        """The acting principal's page that `cell` names (by the result it ends at, or
        by the link it was opened with), and another principal who holds a page there."""
        principal = identity.principal
        pid = docs.page_id(cell.link())
        own = self.by_pid.get((principal, pid))
        key = self.rt.key(cell)
        if own is None:
            # A page opened through a slot is pinned: find it by the result the slot
            # leads to now.
            pinned = self.pin(cell.link(), identity)
            if pinned is not None:
                own = self.by_pid.get((principal, docs.page_id(pinned)))
                key = pinned.key(identity)
        holders = self.by_key.get(key, {})
        if own is None:
            own = holders.get(principal)
        others = [p for p in holders if p != principal]
        if not others and cell.link().scope == "space":
            # Opened through this very link by someone else and not claimed yet; a
            # claimed record on another instance (a user-scoped result) is not theirs here,
            # and neither is an unclaimed one through a user- or session-scoped link (it
            # names that principal's own document).
            others = [
                p
                for (p, q), r in self.by_pid.items()
                if q == pid and p != principal and r.key is None
            ]
        return own, (others[0] if others else None)

    def _claim(self, rec: PageRecord, key: Key, identity: Identity) -> None:
        rec.key = key
        self.by_key.setdefault(key, {})[rec.principal] = rec
        if rec not in self.demand:
            # What a person is looking at stays computed while it is open, like a sink:
            # without this an open page showed absent or stale fields and no list rows.
            link = rec.link

            def look(tx: Transaction) -> None:
                read_value(tx, link)

            self.demand[rec] = self.rt.scheduler.register(
                look,
                identity=identity,
                kind="effect",
                label=f"page {link}",
                reads=[(link.key(identity), (docs.VALUE, *link.path), False)],
            )

    def _forget(self, rec: PageRecord) -> None:
        node = self.demand.pop(rec, None)
        if node is not None:
            self.rt.scheduler.remove(node)
        if self.by_pid.get((rec.principal, rec.pid)) is rec:
            del self.by_pid[(rec.principal, rec.pid)]
        if rec.key is not None:
            holders = self.by_key.get(rec.key)
            if holders is not None and holders.get(rec.principal) is rec:
                del holders[rec.principal]
                if not holders:
                    del self.by_key[rec.key]

    # ------------------------------------------------------------------ open
    def pin(self, link: Link, identity: Identity) -> Link | None:
        """The result a list slot `link` leads to (the element it holds), as the replica
        sees it now; None if `link` does not go through a link held in a list, or the
        way there is not loaded. O(hops)."""
        tx = self.rt.replica.edit(identity)
        try:
            target, slot = docs.run_target(tx, link)
        finally:
            tx.abort("page pin probe")
        return target if slot else None

    def open(
        self, link: Link, identity: Identity, *, via: str, follow: bool = False
    ) -> Pending[bool]:
        """Record `link` as an open page of `identity`'s principal; once that is durable,
        start it. Resolves True once it runs with a lifetime of its own. Unless
        `follow`, a link that leads to a result through a slot is pinned to that result."""
        rt = self.rt
        if not follow:
            link = self.pin(link, identity) or link
        pid = docs.page_id(link)
        rec = self.by_pid.get((identity.principal, pid))
        if rec is None or rec.stopped:
            rec = PageRecord(identity.principal, pid, link)
            # Known from now on, so a stop that comes before the record lands reaches it.
            self.by_pid[(rec.principal, pid)] = rec
        page = rec
        page.opening += 1
        result: Pending[bool] = Pending(rt.replica.mailbox)
        record = {"target": link, "open": True, "session": identity.session, "via": via}
        rt.runner.trace.record("page-open", str(link), via=via)

        def last() -> bool:
            """This open is over; whether it alone decides the record's fate (no other
            open of it is in flight, none succeeded)."""
            page.opening -= 1
            return page.opening == 0 and not page.opened

        def recorded(res: CommitResult) -> None:
            if page.stopped:
                page.opening -= 1
                result._resolve(False)  # stopped while opening: the stop's record wins
                return
            if not res.ok:
                if last():
                    self._forget(page)
                rt.runner.trace.record("page-open-failed", str(link), outcome=res.outcome.name)
                result._fail(
                    res.error
                    or PageError(f"the record of page {describe(link)} did not become durable")
                )
                return
            started = rt.runner.start(
                link,
                identity,
                label=f"page via {via}",
                on_claim=lambda key: self._claim(page, key, identity),
            )
            started.add_done_callback(after_start)

        def after_start(p: Pending[bool]) -> None:
            try:
                ok = p.result()
            except Exception as exc:
                if last():
                    self._withdraw(page, identity)
                result._fail(exc)
                return
            if not ok or page.stopped:
                # Superseded (a stop won): withdrawn, so a restart never resumes it (unless
                # another open of the same page is still going, or one succeeded).
                if last() and not page.stopped:
                    self._withdraw(page, identity)
                result._resolve(False)
                return
            page.opening -= 1
            page.opened = True
            if rt.on_navigate is not None:
                rt._callback(
                    "on_navigate", rt.on_navigate, Cell(rt.replica, identity, link, host=rt._host)
                )
            result._resolve(True)

        self._write(identity, pid, record, done=recorded)
        return result

    def _withdraw(self, rec: PageRecord, identity: Identity) -> None:
        self._forget(rec)
        self.rt.runner.trace.record("page-withdrawn", str(rec.link))
        self._write(identity, rec.pid, None)

    # ------------------------------------------------------------------ stop
    def stop(self, rec: PageRecord, identity: Identity) -> bool:
        """Record the stop (decision before cleanup), of `rec` and of every other page the
        same principal holds on the same result (opened through another link). Returns
        whether the result itself should stop: not while another principal still holds a
        page on it."""
        key = rec.key
        same = [
            r
            for (principal, _pid), r in self.by_pid.items()
            if principal == rec.principal and r is not rec and key is not None and r.key == key
        ]
        for page in (rec, *same):
            record = {
                "target": page.link,
                "open": False,
                "session": identity.session,
                "via": "stop",
            }
            page.stopped = True
            self._write(identity, page.pid, record)
            self._forget(page)
            self.rt.runner.trace.record("page-stop", str(page.link))
        return key is None or not self.by_key.get(key)

    # ------------------------------------------------------------------ listing, resume
    def open_cells(self, identity: Identity) -> list[tuple[str, Cell]]:
        rt = self.rt
        out: list[tuple[str, Cell]] = []
        for pid, record in self.records(identity).items():
            if type(record) is dict and record.get("open") is True:
                target = record.get("target")
                if type(target) is Link:
                    out.append((pid, Cell(rt.replica, identity, target, host=rt._host)))
        return out

    def resume_one(self, pid: str, cell: Cell, identity: Identity) -> Pending[bool]:
        rt = self.rt
        rec = self.by_pid.get((identity.principal, pid))
        if rec is None:
            rec = self.by_pid[(identity.principal, pid)] = PageRecord(
                identity.principal, pid, cell.link()
            )
        page = rec
        return rt.runner.start(
            cell.link(),
            identity,
            label="resume",
            on_claim=lambda key: self._claim(page, key, identity),
        )

    def _check(self) -> None:
        for rec, node in self.demand.items():
            assert self.by_pid.get((rec.principal, rec.pid)) is rec, rec
            assert node.registered, (rec, node)
        for (principal, pid), rec in self.by_pid.items():
            assert (rec.principal, rec.pid) == (principal, pid), rec
        for key, holders in self.by_key.items():
            assert holders, key
            for principal, rec in holders.items():
                assert rec.key == key and rec.principal == principal, rec
                assert self.by_pid.get((rec.principal, rec.pid)) is rec, rec

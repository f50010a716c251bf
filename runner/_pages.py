"""Pages: results opened in their own right, as durable intent with an owner.

A page is recorded in its principal's pages document (one user-scoped
document per principal) *before* it starts, and opening reports success only
once that record is durable and the start claimed an independent lifetime.
If the start fails or claims nothing, the record is withdrawn, so a restart
never resumes a page that was not running. `resume()` starts every page
recorded open, each on its own, so one page that can no longer start does
not keep the others from resuming.

Stopping a page removes its record first (decision before cleanup; the
removal is re-issued if its commit fails retryably), then cancels the local
work. The stop hands back a `Pending` that resolves once the removal is
durable: a stop whose `Pending` resolved is never resumed, by this runtime
or any later one. If the removal fails for good, the `Pending` raises that
error and the page is kept as *stop-failed*: not listed by `pages()`, not
resumed by this runtime, shown by `inspect()`; stopping it again retries.

The pages document holds only the pages that are open (closed and withdrawn
records are removed, and `resume()` drops any closed record an older version
left behind), so an open and a stop cost O(open pages of the principal),
whatever the number of pages opened before.

A record write that failed retryably is re-issued only while it is still the
page's newest intent: an open's record only while the page is not stopped, a
removal only while no open of the page came after it. Without this, an open
record whose first commit conflicted would be re-issued *after* a stop of the
same page had removed it, and a restart would resume a page whose stop was
acknowledged.

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
- every record in `by_key` is in `by_pid`, under its own principal and key;
- a stop-failed record is in neither `by_pid` nor `by_key`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from cells import (
    MISSING,
    RETRYABLE,
    Authority,
    Cell,
    CommitResult,
    Identity,
    Link,
    Pending,
    Replica,
    Transaction,
    describe,
    read_value,
)
from scheduler import Node, Scheduler

from . import _docs as docs
from ._host import SchedulerHost
from ._registrations import Key
from .errors import PageError

if TYPE_CHECKING:
    from ._runner import Runner

MAX_RECORD_RETRIES: Final = 10


def _nothing() -> None:
    pass


def _wall_clock() -> float:
    import time

    return time.time()


class PageRecord:
    __slots__ = (
        "demand",
        "key",
        "link",
        "opened",
        "opening",
        "pid",
        "principal",
        "stop_error",
        "stopped",
    )

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
        self.stop_error: BaseException | None = None
        """Why its stop's record could not be removed for good (the page is stop-failed)."""
        self.demand: Node | None = None
        """The effect that keeps it computed while it is open (a page is demand while
        open): a slot here, where an entry in a dict by record cost about 37 bytes more
        per open page."""

    def __repr__(self) -> str:
        return f"<page {self.link} of {self.principal!r}>"


class Pages:
    def __init__(
        self,
        space: str,
        replica: Replica,
        authority: Authority,
        runner: Runner,
        host: SchedulerHost,
        navigated: Callable[[Identity, Link], None],
    ) -> None:
        self.space = space
        self.replica = replica
        self.authority = authority
        """The runtime's capability for its own documents (page records are internal)."""
        self.runner = runner
        self.scheduler: Scheduler = runner.scheduler
        self.host = host
        self.navigated = navigated
        """Called with the identity and link of each page an open started (the runtime's
        `on_navigate` hears of it)."""
        self.by_pid: dict[tuple[str, str], PageRecord] = {}
        self.by_key: dict[Key, PageRecord | dict[str, PageRecord]] = {}
        """Pages on each result, per principal (two principals may open one shared result):
        the lone record bare, a dict by principal for two or more (a dict per page cost
        about 220 bytes); read through `holders`."""
        self.demands = 0
        """How many records hold a demand effect (`PageRecord.demand`; `_check` counts
        them in `by_pid`, so a record that left it with its effect still registered is
        caught)."""
        self.stop_failed: dict[tuple[str, str], PageRecord] = {}
        """Pages whose stop could not be made durable: stopped here, still recorded open."""
        self.served: Callable[[tuple[str, str]], bool] | None = None
        """None: a page runs where it is opened. Otherwise pages are served under claims
        (`Runtime(pages="served")`, or this runtime serves pages): an open only records
        the intent, for a serving process to claim and run; this says whether this
        runtime's own server holds the page (principal, pid), which is then left alone."""
        self.recorded_hint: Callable[[], None] = _nothing
        """Called after an open's record is durable (wakes this runtime's server)."""
        self.claim_clock: Callable[[], float] = _wall_clock
        """The time a stop closes a claim at (the serving clock, if this runtime serves)."""

    @property
    def demand(self) -> dict[PageRecord, Node]:
        """The effect that keeps each open page computed, by record (a fresh dict)."""
        return {rec: rec.demand for rec in self.by_pid.values() if rec.demand is not None}

    # ------------------------------------------------------------------ records
    def _doc(self, identity: Identity) -> Any:
        return docs.pages_link(self.space).key(identity)

    def _write(
        self,
        identity: Identity,
        pid: str,
        record: Any,
        *,
        done: Callable[[CommitResult], None] | None = None,
        attempt: int = 0,
        wanted: Callable[[], bool] | None = None,
    ) -> None:
        """Write one page record (`MISSING` removes it). A retryable failure re-issues
        it while `wanted()` says it is still the page's newest intent; `done` sees only
        the final outcome, so a caller never acts on a first failure that a retry then
        overturns (nor on one no retry was wanted for: it sees that failure)."""
        # The records are internal documents: only the runtime's authority reaches them.
        tx = self.replica.edit(identity, authority=self.authority)
        tx.write(self._doc(identity), (docs.VALUE, pid), record)

        def settled(p: Pending[CommitResult]) -> None:
            res = p.result()
            if (
                not res.ok
                and res.outcome in RETRYABLE
                and attempt < MAX_RECORD_RETRIES
                and (wanted is None or wanted())
            ):
                self._write(identity, pid, record, done=done, attempt=attempt + 1, wanted=wanted)
            elif done is not None:
                done(res)

        tx.commit().add_done_callback(settled)

    def _no_open_since(self, principal: str, pid: str) -> Callable[[], bool]:
        """For a removal: wanted only while no open of the page came after it (the open's
        record is written after the removal, so re-issuing the removal would undo it)."""
        return lambda: (principal, pid) not in self.by_pid

    def records(self, identity: Identity) -> dict[str, Any]:
        doc = self.replica.visible(self._doc(identity))
        value = doc.get(docs.VALUE) if type(doc) is dict else None
        return value if type(value) is dict else {}

    def find(self, cell: Cell, identity: Identity) -> tuple[PageRecord | None, str | None]:
        """The acting principal's page that `cell` names (by the result it ends at, or
        by the link it was opened with; a stop-failed page too, so stopping it again
        retries), and another principal who holds a page there."""
        principal = identity.principal
        pid = docs.page_id(cell.link())
        own = self.by_pid.get((principal, pid))
        key = docs.root(cell.link()).key(cell.identity)
        if own is None:
            # A page opened through a slot is pinned: find it by the result the slot
            # leads to now.
            pinned = self.pin(cell.link(), identity)
            if pinned is not None:
                own = self.by_pid.get((principal, docs.page_id(pinned)))
                key = pinned.key(identity)
        holders = self.holders(key)
        if own is None:
            own = holders.get(principal)
        if own is None:
            own = self.stop_failed.get((principal, pid))
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

    def holders(self, key: Key) -> dict[str, PageRecord]:
        """The open records of the result `key` by principal (a fresh dict)."""
        held = self.by_key.get(key)
        if held is None:
            return {}
        if isinstance(held, PageRecord):
            return {held.principal: held}
        return dict(held)

    def _claim(self, rec: PageRecord, key: Key, identity: Identity) -> None:
        rec.key = key
        held = self.by_key.get(key)
        if held is None or (isinstance(held, PageRecord) and held.principal == rec.principal):
            self.by_key[key] = rec
        elif isinstance(held, PageRecord):
            self.by_key[key] = {held.principal: held, rec.principal: rec}
        else:
            held[rec.principal] = rec
        if rec.demand is None:
            # What a person is looking at stays computed while it is open, like a sink:
            # without this an open page showed absent or stale fields and no list rows.
            link = rec.link
            self.demands += 1
            rec.demand = self.scheduler.register(
                _Look(link),
                identity=identity,
                kind="effect",
                # One shared label (a formatted one cost about 120 bytes per page): the
                # node's function names the page's link.
                label="page",
                reads=[(_same(link.key(identity), key), docs.value_path(link.path), False)],
            )

    def _forget(self, rec: PageRecord) -> None:
        node = rec.demand
        if node is not None:
            rec.demand = None
            self.demands -= 1
            self.scheduler.remove(node)
        if self.by_pid.get((rec.principal, rec.pid)) is rec:
            del self.by_pid[(rec.principal, rec.pid)]
        if rec.key is not None:
            held = self.by_key.get(rec.key)
            if held is rec:
                del self.by_key[rec.key]
            elif isinstance(held, dict) and held.get(rec.principal) is rec:
                del held[rec.principal]
                if len(held) == 1:
                    (self.by_key[rec.key],) = held.values()

    # ------------------------------------------------------------------ open
    def pin(self, link: Link, identity: Identity) -> Link | None:
        """The result a list slot `link` leads to (the element it holds), as the replica
        sees it now; None if `link` does not go through a link held in a list, or the
        way there is not loaded. O(hops)."""
        tx = self.replica.edit(identity)
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
        if not follow:
            link = self.pin(link, identity) or link
        pid = docs.page_id(link)
        rec = self.by_pid.get((identity.principal, pid))
        # Opening again is a newer intent than a stop that failed: it is no longer stop-failed.
        self.stop_failed.pop((identity.principal, pid), None)
        if rec is None or rec.stopped:
            rec = PageRecord(identity.principal, pid, link)
            # Known from now on, so a stop that comes before the record lands reaches it.
            self.by_pid[(rec.principal, pid)] = rec
        page = rec
        page.opening += 1
        result: Pending[bool] = Pending(self.replica.mailbox)
        record = {"target": link, "open": True, "session": identity.session, "via": via}
        self.runner.trace.record("page-open", str(link), via=via)

        def last() -> bool:
            """This open is over; whether it alone decides the record's fate (no other
            open of it is in flight, none succeeded)."""
            page.opening -= 1
            return page.opening == 0 and not page.opened

        def recorded(res: CommitResult) -> None:
            if page.stopped:
                page.opening -= 1
                result.set_result(False)  # stopped while opening: the stop's record wins
                return
            if not res.ok:
                if last():
                    self._forget(page)
                self.runner.trace.record("page-open-failed", str(link), outcome=res.outcome.name)
                result.set_exception(
                    res.error
                    or PageError(f"the record of page {describe(link)} did not become durable")
                )
                return
            self.reopen_claim(identity.principal, pid)  # served elsewhere, if stopped before
            served = self.served
            if served is not None:
                # Served under claims: the intent is recorded; a serving process (this
                # one's server too) claims the page and runs it, fenced. Running it here
                # as well would run it twice, unfenced (issue 19).
                page.opening -= 1
                page.opened = True
                if page.key is None and not served((page.principal, pid)):
                    self._forget(page)
                self.runner.trace.record("page-recorded", str(link), via=via)
                self.recorded_hint()
                self.navigated(identity, link)
                result.set_result(True)
                return
            started = self.runner.start(
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
                result.set_exception(exc)
                return
            if not ok or page.stopped:
                # Superseded (a stop won): withdrawn, so a restart never resumes it (unless
                # another open of the same page is still going, or one succeeded).
                if last() and not page.stopped:
                    self._withdraw(page, identity)
                result.set_result(False)
                return
            page.opening -= 1
            page.opened = True
            self.navigated(identity, link)
            result.set_result(True)

        # Re-issued only while the page is not stopped: a retry landing after the stop's
        # removal would record open a page whose stop was acknowledged.
        self._write(identity, pid, record, done=recorded, wanted=lambda: not page.stopped)
        return result

    def _withdraw(self, rec: PageRecord, identity: Identity) -> None:
        self._forget(rec)
        self.runner.trace.record("page-withdrawn", str(rec.link))
        self._write(identity, rec.pid, MISSING, wanted=self._no_open_since(rec.principal, rec.pid))

    # ------------------------------------------------------------------ stop
    def stop(self, rec: PageRecord, identity: Identity) -> tuple[bool, Pending[None]]:
        """Record the stop (decision before cleanup) of `rec` and of every other page the
        same principal holds on the same result (opened through another link): each
        record is removed. Returns whether the result itself should stop (not while
        another principal still holds a page on it), and a `Pending` that resolves once
        every removal is durable, or fails with the first error that kept one from it."""
        key = rec.key
        same = [
            r
            for (principal, _pid), r in self.by_pid.items()
            if principal == rec.principal and r is not rec and key is not None and r.key == key
        ]
        durable: Pending[None] = Pending(self.replica.mailbox)
        pages = (rec, *same)
        waiting = [len(pages)]
        failures: list[BaseException] = []

        def one_done(page: PageRecord, res: CommitResult) -> None:
            if res.ok:
                # A process serving the page under a claim may write for it no more.
                self.close_claim(page.principal, page.pid)
                self.runner.trace.record("page-stop-durable", str(page.link))
            else:
                error: BaseException = res.error or PageError(
                    f"the stop of page {describe(page.link)} did not become durable"
                    f" ({res.outcome.name})"
                )
                slot = (page.principal, page.pid)
                if slot not in self.by_pid:
                    # Still the newest intent for the page (no open came after): it stays
                    # recorded open, so say it is stop-failed rather than list or resume it.
                    page.stop_error = error
                    self.stop_failed[slot] = page
                self.runner.trace.record(
                    "page-stop-failed", str(page.link), outcome=res.outcome.name
                )
                import logging  # (here, not at the top: `import runner` stays cheap)

                logging.getLogger("cellweave").error(
                    "cellweave: the stop of page %s did not become durable: %r",
                    describe(page.link),
                    error,
                )
                failures.append(error)
            waiting[0] -= 1
            if waiting[0] == 0:
                if failures:
                    durable.set_exception(failures[0])
                else:
                    durable.set_result(None)

        for page in pages:
            page.stopped = True
            page.stop_error = None
            self._forget(page)
            # Stopping a stop-failed page again retries; it is stop-failed again only if
            # this attempt fails too.
            self.stop_failed.pop((page.principal, page.pid), None)
            self.runner.trace.record("page-stop", str(page.link))
            self._write(
                identity,
                page.pid,
                MISSING,
                done=functools.partial(one_done, page),
                wanted=self._no_open_since(page.principal, page.pid),
            )
        return key is None or not self.by_key.get(key), durable

    def stop_recorded(self, cell: Cell, identity: Identity) -> Pending[None] | None:
        """A stop of something this runtime holds no page for: if the principal's pages
        document records `cell`'s link open (a page another runtime opened, or one not
        resumed here), remove that record too, so an acknowledged stop never resumes.
        None if the document is loaded and records no such page; otherwise a `Pending`
        that resolves once the document was checked (loading it first if needed) and any
        such record's removal is durable."""
        replica = self.replica
        doc = self._doc(identity)
        # The link itself, or (a page opened through a list slot is pinned) the result
        # the slot leads to now.
        link = self.pin(cell.link(), identity) or cell.link()
        pid = docs.page_id(link)
        slot = (identity.principal, pid)

        def recorded_open() -> bool:
            if slot in self.by_pid:
                return False  # an open here came since: a newer intent than this stop
            record = self.records(identity).get(pid)
            return type(record) is dict and record.get("open") is True

        def close() -> Pending[None]:
            return self.stop(PageRecord(identity.principal, pid, link), identity)[1]

        if replica.is_loaded(doc):
            return close() if recorded_open() else None
        result: Pending[None] = Pending(replica.mailbox)

        def forward(p: Pending[None]) -> None:
            try:
                p.result()
            except Exception as exc:
                result.set_exception(exc)
            else:
                result.set_result(None)

        def loaded(p: Pending[None]) -> None:
            try:
                p.result()
            except Exception as exc:
                result.set_exception(exc)
                return
            if recorded_open():
                close().add_done_callback(forward)
            else:
                result.set_result(None)

        replica.sync([doc]).add_done_callback(loaded)
        return result

    # ------------------------------------------------------------------ listing, resume
    def open_cells(self, identity: Identity) -> list[tuple[str, Cell]]:
        """The pages recorded open for `identity`'s principal, less the stop-failed ones
        (stopped here, though their record could not be removed)."""
        principal = identity.principal
        out: list[tuple[str, Cell]] = []
        for pid, record in self.records(identity).items():
            if type(record) is dict and record.get("open") is True:
                target = record.get("target")
                if type(target) is Link and (principal, pid) not in self.stop_failed:
                    out.append((pid, Cell(self.replica, identity, target, host=self.host)))
        return out

    def compact(self, identity: Identity) -> int:
        """Remove the records that are not open (closed or withdrawn ones an older version
        kept) from `identity`'s pages document, in one commit; returns how many. Each is
        read first, so a record someone changes meanwhile makes the commit fail (and this
        is tried again by the next `resume()`), never removes an open one."""
        key = self._doc(identity)
        stale = [
            pid
            for pid, record in self.records(identity).items()
            if type(record) is not dict or record.get("open") is not True
        ]
        if not stale:
            return 0
        tx = self.replica.edit(identity, authority=self.authority)  # internal document
        for pid in stale:
            tx.read(key, (docs.VALUE, pid), log=False)
            tx.write(key, (docs.VALUE, pid), MISSING)
        tx.commit()
        self.runner.trace.record(
            "page-compact", str(docs.pages_link(self.space)), removed=len(stale)
        )
        return len(stale)

    def close_claim(self, principal: str, pid: str) -> None:
        """After a page's stop is durable (from any process): end its claim, so the
        process serving it has its commits for it rejected at once, not only after its
        next tick found the record gone. A failure is logged: the stop stands, and the
        owner stops the page at its next tick all the same."""
        try:
            if self.replica.store.claims.close(self.space, principal, pid, self.claim_clock()):
                self.runner.trace.record("page-claim-closed", pid, principal=principal)
        except Exception as exc:
            import logging  # (here: `import runner` stays cheap)

            logging.getLogger("cellweave").error(
                "cellweave: closing the claim of stopped page %s failed: %r", pid, exc
            )

    def reopen_claim(self, principal: str, pid: str) -> None:
        """After a page's open record is durable: a claim an earlier stop closed becomes
        claimable again (a serving process then picks the page up). A failure is logged:
        the open stands, and is served once a later open or an operator reopens it."""
        try:
            if self.replica.store.claims.reopen(self.space, principal, pid):
                self.runner.trace.record("page-claim-reopened", pid, principal=principal)
        except Exception as exc:
            import logging  # (here: `import runner` stays cheap)

            logging.getLogger("cellweave").error(
                "cellweave: reopening the claim of page %s failed: %r", pid, exc
            )

    def resume_one(
        self, pid: str, cell: Cell, identity: Identity, *, ref: tuple[str, str] | None = None
    ) -> Pending[bool]:
        """Start page `pid` (recorded open) of `identity`'s principal. `ref`, if given,
        is `(principal, pid)` as the caller keeps it (a claim), shared as the key here."""
        if ref is None:
            ref = (identity.principal, pid)
        rec = self.by_pid.get(ref)
        if rec is None:
            rec = self.by_pid[ref] = PageRecord(identity.principal, pid, cell.link())
        page = rec
        return self.runner.start(
            cell.link(),
            identity,
            label="resume",
            on_claim=lambda key: self._claim(page, key, identity),
        )

    def _check(self) -> None:
        demands = 0
        for rec in self.by_pid.values():
            if rec.demand is not None:
                demands += 1
                assert rec.demand.registered, rec
        # (Every record holding an effect is in `by_pid`: none left it with one.)
        assert demands == self.demands, (demands, self.demands)
        for (principal, pid), rec in self.by_pid.items():
            assert (rec.principal, rec.pid) == (principal, pid), rec
        for key, held in self.by_key.items():
            assert isinstance(held, PageRecord) or len(held) >= 2, key
            for principal, rec in self.holders(key).items():
                assert rec.key == key and rec.principal == principal, rec
                assert self.by_pid.get((rec.principal, rec.pid)) is rec, rec
        for slot, rec in self.stop_failed.items():
            assert (rec.principal, rec.pid) == slot and rec.stop_error is not None, rec
            assert slot not in self.by_pid, rec


def _same(key: Key, held: Key) -> Key:
    """`held` if it equals `key` (one key object kept, not two equal ones)."""
    return held if key == held else key


class _Look(msgspec.Struct, gc=False, eq=False):
    """The function of an open page's demand effect: read the page's whole value (links
    followed). A struct the collector does not track (it holds a link only, so it can be
    part of no cycle): 24 bytes, where a slotted callable cost 40 and the closure and its
    cell about 200."""

    link: Link

    def __call__(self, tx: Transaction) -> None:
        read_value(tx, self.link)

    def __repr__(self) -> str:
        return f"<page {self.link}>"

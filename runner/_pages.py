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

A record names the link it was opened with (it may be a slot holding a link
to the result, like a map container's element); the result it ends at is
learned when the start claims it. Pages belong to the principal who opened
them: stopping, listing or inspecting another principal's pages raises
`OwnershipError`.

Invariants (checked by `_check`)
- `by_key` and `by_pid` hold the same records; a record is in `by_key` iff its
  target key is known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from cells import (
    RETRYABLE,
    Cell,
    CommitResult,
    Identity,
    Link,
    Pending,
)

from . import _docs as docs
from ._registrations import Key
from .errors import OwnershipError, PageError

if TYPE_CHECKING:
    from ._runtime import Runtime

MAX_RECORD_RETRIES: Final = 10


class PageRecord:
    __slots__ = ("key", "link", "pid", "principal")

    def __init__(self, principal: str, pid: str, link: Link) -> None:
        self.principal = principal
        self.pid = pid
        self.link = link
        self.key: Key | None = None

    def __repr__(self) -> str:
        return f"<page {self.link} of {self.principal!r}>"


class Pages:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.by_pid: dict[tuple[str, str], PageRecord] = {}
        self.by_key: dict[Key, PageRecord] = {}

    # ------------------------------------------------------------------ records
    def _doc(self, identity: Identity) -> Any:
        return docs.pages_link(self.rt.space).key(identity)

    def _write(
        self, identity: Identity, pid: str, record: Any, *, attempt: int = 0
    ) -> Pending[CommitResult]:
        """Write one page record (None withdraws it); a retryable failure re-issues it."""
        tx = self.rt.replica.edit(identity)
        tx.write(self._doc(identity), (docs.VALUE, pid), record)
        pending = tx.commit()

        def settled(p: Pending[CommitResult]) -> None:
            res = p.result()
            if not res.ok and res.outcome in RETRYABLE and attempt < MAX_RECORD_RETRIES:
                self._write(identity, pid, record, attempt=attempt + 1)

        pending.add_done_callback(settled)
        return pending

    def records(self, identity: Identity) -> dict[str, Any]:
        doc = self.rt.replica.visible(self._doc(identity))
        value = doc.get(docs.VALUE) if type(doc) is dict else None
        return value if type(value) is dict else {}

    def find(self, cell: Cell) -> PageRecord | None:
        """The page `cell` names: by the result it ends at, or by the link it was opened with."""
        rec = self.by_key.get(self.rt.key(cell))
        if rec is not None:
            return rec
        pid = docs.page_id(cell.link())
        for (_principal, p), candidate in self.by_pid.items():
            if p == pid:
                return candidate
        return None

    def check_owner(self, identity: Identity, rec: PageRecord | None, what: str) -> None:
        if rec is not None and rec.principal != identity.principal:
            raise OwnershipError(
                f"cannot {what} page {rec.link}: it belongs to {rec.principal!r}, not"
                f" {identity.principal!r}"
            )

    def _forget(self, rec: PageRecord) -> None:
        self.by_pid.pop((rec.principal, rec.pid), None)
        if rec.key is not None and self.by_key.get(rec.key) is rec:
            del self.by_key[rec.key]

    # ------------------------------------------------------------------ open
    def open(self, link: Link, identity: Identity, *, via: str) -> Pending[bool]:
        """Record `link` as an open page of `identity`'s principal; once that is durable,
        start it. Resolves True once it runs with a lifetime of its own."""
        rt = self.rt
        pid = docs.page_id(link)
        existing = self.by_pid.get((identity.principal, pid))
        result: Pending[bool] = Pending(rt.replica.mailbox)
        record = {"target": link, "open": True, "session": identity.session, "via": via}
        rec = existing or PageRecord(identity.principal, pid, link)
        rt.runner.trace.record("page-open", str(link), via=via)

        def recorded(p: Pending[CommitResult]) -> None:
            res = p.result()
            if not res.ok:
                rt.runner.trace.record("page-open-failed", str(link), outcome=res.outcome.name)
                result._fail(
                    res.error or PageError(f"the record of page {link} did not become durable")
                )
                return
            self.by_pid[(rec.principal, pid)] = rec
            started = rt.runner.start(link, identity, label=f"page via {via}", on_claim=claimed)
            started.add_done_callback(after_start)

        def claimed(key: Key) -> None:
            rec.key = key
            self.by_key[key] = rec

        def after_start(p: Pending[bool]) -> None:
            try:
                ok = p.result()
            except Exception as exc:
                self._withdraw(rec, identity)
                result._fail(exc)
                return
            if not ok:
                # Superseded (a stop won): withdrawn, so a restart never resumes it.
                self._withdraw(rec, identity)
                result._resolve(False)
                return
            if rt.on_navigate is not None:
                rt.on_navigate(Cell(rt.replica, identity, link, host=rt._host))
            result._resolve(True)

        self._write(identity, pid, record).add_done_callback(recorded)
        return result

    def _withdraw(self, rec: PageRecord, identity: Identity) -> None:
        self._forget(rec)
        self.rt.runner.trace.record("page-withdrawn", str(rec.link))
        self._write(identity, rec.pid, None)

    # ------------------------------------------------------------------ stop
    def stop(self, rec: PageRecord, identity: Identity) -> None:
        """Record the stop (decision before cleanup); the caller then stops the result."""
        self.check_owner(identity, rec, "stop")
        record = {"target": rec.link, "open": False, "session": identity.session, "via": "stop"}
        self._write(identity, rec.pid, record)
        self._forget(rec)
        self.rt.runner.trace.record("page-stop", str(rec.link))

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

        def claimed(key: Key) -> None:
            assert rec is not None
            rec.key = key
            self.by_key[key] = rec

        return rt.runner.start(cell.link(), identity, label="resume", on_claim=claimed)

    def _check(self) -> None:
        for (principal, pid), rec in self.by_pid.items():
            assert (rec.principal, rec.pid) == (principal, pid), rec
        for key, rec in self.by_key.items():
            assert rec.key == key, rec
            assert self.by_pid.get((rec.principal, rec.pid)) is rec, rec

"""Serving pages under claims: several processes share the open pages, one owner each.

`await rt.serve_pages(lease=10.0, heartbeat=2.0)` makes a runtime serve the
open pages of every principal in its space, under claims in the store
(`store.claims`, see `cells._claims`). Each heartbeat (`PageServer.tick`):

1. **Renew**: one statement stamps every claim this process holds; a page
   missing from the answer was taken over (this process was too slow, or
   paused): it stops running here at once.
2. **Discover**: the pages documents of every principal (one statement lists
   the principals; a document is loaded once, then kept current by the
   store's change feed), so a page opened by any process is seen.
3. **Close**: a held page whose record is gone (stopped anywhere) stops here,
   and its claim is released as *closed* (nobody takes it over).
4. **Claim**: open pages nobody was seen to own, at most `batch` per tick, in
   the order they were first seen (oldest first).
5. **Take over**: rows the store reports stale (expired leases, released
   claims; same-host owners, for the probe), oldest lease first, at most
   `batch` per tick plus the rows deferred by backoff, so a long backlog keeps
   moving. An expired lease is taken ("lease-expired", the store re-checks
   expiry in the write); an owner on this host whose process is gone (the
   pid probe) is taken at once ("owner-gone"); a live owner is refused and
   retried after two heartbeats, doubling up to the lease (per page and
   heartbeat stamp: a moved stamp resets it). A stale row with no open page
   (the page's record vanished without a stop) is deleted once it has been
   ownerless or expired for a lease (`ClaimTable.forget`, at most `batch` per
   tick, under the fence floor), so such rows never crowd out real takeovers.

A claimed page runs as an open page does (kept computed), and every commit
its runs make carries its fence (`Replica.fence_for`): the store rejects it
with `FencedError` once a newer claim exists, so a process that lost a page
can never write for it. The fence is found from the committing node's output
document (or the written documents) through the registrations of the page's
result and of the runs it launched.

`stop()` (also `rt.aclose()`) releases every claim for another process to
take at once. The clock is injectable (`clock=`, seconds), and `tick()` can be
driven by a test: nothing here sleeps but the serving loop between ticks.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from cells import (
    Cell,
    ClaimRow,
    ClaimTable,
    CommitRequest,
    DocKey,
    Fence,
    Identity,
    InvalidArgumentError,
    Link,
    Owner,
    Pending,
    Transaction,
)

from . import _docs as docs
from ._builder import load_pattern
from ._registrations import Key
from ._remote_events import Inbox, inbox_key, inbox_link

if TYPE_CHECKING:
    # asyncio, logging, socket and uuid load on first use (inside a serving loop, an
    # error, a new owner): `import runner` stays cheap for programs that never serve.
    import asyncio

    from cells import Authority, Replica, StoreBase
    from scheduler import Scheduler

    from ._host import SchedulerHost
    from ._pages import Pages
    from ._runner import Runner


class Serving(Protocol):
    """What a `PageServer` uses of its runtime (the runtime hands it these parts)."""

    space: str
    store: StoreBase
    replica: Replica
    runner: Runner
    host: SchedulerHost
    pages: Pages
    scheduler: Scheduler
    authority: Authority

    @property
    def closed(self) -> bool: ...


def _log_error(message: str, *args: object) -> None:
    import logging

    logging.getLogger("cellweave").error(message, *args)


BATCH: Final = 64
"""Claims and takeovers per tick (a mass death drains over ticks)."""
START_CHUNK: Final = 4
"""Claimed pages started per loop step at first (then adapted to the step's time)."""
KEEP_CLOSED: Final = 6
"""Leases a closed claim row (its page was stopped) is kept before a sweep deletes
it: meanwhile a process whose view of the pages documents still shows the page
open cannot claim it afresh (the closed row refuses the claim)."""
TAKEOVERS_KEPT: Final = 100


def new_owner() -> Owner:
    """This process, in this start: host, pid and a fresh nonce."""
    import socket
    import uuid

    return Owner(socket.gethostname(), os.getpid(), uuid.uuid4().hex)


def pid_probe(me: Owner) -> Callable[[Owner], bool | None]:
    """The liveness probe: for an owner on this host, whether its process exists
    (`os.kill(pid, 0)`); None (unknown: lease only) for other hosts. A pid reused by
    another process reads as alive, which only delays a takeover to the lease."""

    def alive(owner: Owner) -> bool | None:
        if owner.host != me.host:
            return None
        if owner.pid == me.pid:
            return True  # an older start of this very pid: lease only
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        except OSError:
            return None
        return True

    return alive


class Held:
    """A page this process holds a claim on."""

    __slots__ = (
        "dead",
        "fence",
        "ids",
        "key",
        "link",
        "ref",
        "root",
        "session",
        "stamp",
    )

    def __init__(
        self, space: str, ref: tuple[str, str], session: str, link: Link, fence: int
    ) -> None:
        principal, pid = ref
        self.ref = ref
        """(principal, page id): its key in `held`, one tuple shared with the page's
        record in `Pages.by_pid` (a 10,000-page server keeps one per page, not two)."""
        self.session = session
        self.link = link
        self.fence = fence
        self.stamp = Fence(space, principal, pid, fence)
        """What its runs' commits carry (one object, shared by every document's entry)."""
        self.root: Key = docs.root(link).key(Identity(principal, session))
        """The result its link names (the registration key its start installs)."""
        self.key: Key | None = None
        """The result the page runs, once its start claimed it (a slot's target)."""
        self.ids = 0
        """Entries of the fence map pointing at it."""
        self.dead = False
        """Stopped here for good: its fence map entries are misses, purged in bulk."""

    @property
    def principal(self) -> str:
        return self.ref[0]

    @property
    def pid(self) -> str:
        return self.ref[1]


class PageServer:
    """One runtime's claim loop (made by `Runtime.serve_pages`)."""

    def __init__(
        self,
        rt: Serving,
        *,
        lease: float,
        heartbeat: float,
        clock: Callable[[], float] | None = None,
        probe: Callable[[Owner], bool | None] | None = None,
        owner: Owner | None = None,
        batch: int = BATCH,
    ) -> None:
        for name, value in (("lease", lease), ("heartbeat", heartbeat)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(
                    f"rt.serve_pages: {name} must be a number of seconds > 0, got {value!r}"
                )
        if heartbeat * 2 > lease:
            raise InvalidArgumentError(
                f"rt.serve_pages: heartbeat ({heartbeat!r} s) must be at most half the lease"
                f" ({lease!r} s), so a live owner renews before its lease runs out"
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidArgumentError(f"rt.serve_pages: batch must be an int >= 1, got {batch!r}")
        self.rt = rt
        self.space = rt.space
        self.table: ClaimTable = rt.store.claims
        self.lease = float(lease)
        self.heartbeat = float(heartbeat)
        self.clock = clock or time.time
        self.owner = owner or new_owner()
        self.probe = probe or pid_probe(self.owner)
        self.batch = batch
        self.held: dict[tuple[str, str], Held] = {}
        self.first_seen: dict[tuple[str, str], float] = {}
        """Open pages not held here, with when they were first seen (claim order)."""
        self.elsewhere: dict[tuple[str, str], float] = {}
        """Open pages a claim found owned by another process, with when: not claimed
        again until the store reports them stale (or after a few leases, in case the
        owner closed and the page was opened again between two of our ticks)."""
        self.refusals: dict[tuple[str, str], tuple[float, float, float]] = {}
        """Per page whose owner is alive: (heartbeat stamp, next try, delay)."""
        self.takeovers: collections.deque[dict[str, Any]] = collections.deque(maxlen=TAKEOVERS_KEPT)
        self.lost: collections.deque[dict[str, Any]] = collections.deque(maxlen=TAKEOVERS_KEPT)
        self.loading: set[DocKey] = set()
        self.watched: set[DocKey] = set()
        self._read_each_tick: set[DocKey] = set()
        """The pages documents and inboxes every tick reads: never packed (`Replica.pack`)."""
        self._fence_by_id: dict[str, Held] = {}
        """Document id -> the claimed page whose runs write it (its `stamp` is the fence).
        The ids are the registrations' own strings where they exist (no copies)."""
        self._dead_ids = 0
        """Entries of stopped pages still in the map (purged once they are half of it)."""
        self._root_ref: dict[Key, Held] = {}
        """The result each claimed page runs (as a registration key) -> the page."""
        self._seen_generation = 0
        """Registrations up to this generation (a global counter) have been indexed."""
        self._node_counts: dict[str, int] = {}
        self.ticks = 0
        self.stopped = False
        self.renewed_at: float | None = None
        """When the store last confirmed this process's claims (a renew, or the first
        claim since): the leases run from there."""
        self.lapsed = 0
        """Pages this process stopped running because it could not renew in time."""
        self.forgotten = 0
        """Claim rows deleted because no open page had them (`ClaimTable.forget`)."""
        self._unheld = False
        """Claims may be ours in the store though not held here (after a lapse): the
        next renew that works releases them for anyone to claim."""
        self._swept_at = self.clock()
        self._queue: collections.deque[Held] = collections.deque()
        """Claimed pages waiting to start (started a few per loop step, `_chunk`)."""
        self._chunk = START_CHUNK
        import asyncio  # a PageServer is made inside a coroutine: a loop runs

        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._emptied = asyncio.Event()
        """Set while no claimed page waits to start (`rt.idle()` waits for it)."""
        self._emptied.set()
        rt.replica.fence_for = self.fence_for
        book = rt.pages
        self._pages_before: tuple[Any, Any, Any] | None = (
            book.served,
            book.recorded_hint,
            book.claim_clock,
        )
        # This runtime's own opens are recorded for a server to claim (this one, after
        # the wake-up, or another): run here unclaimed, they would run twice.
        book.served = self.held.__contains__
        book.recorded_hint = self._wake.set
        book.claim_clock = self.clock
        self.inbox = Inbox(
            rt.replica, rt.authority, rt.scheduler, rt.host, self.space, self._holder
        )
        """Events sent from served runtimes to the pages held here (`runner._remote_events`)."""
        self._inbox_id = inbox_link(self.space).id
        self._inbox_off = rt.replica.subscribe(self._inbox_changed)

    def __repr__(self) -> str:
        return f"<PageServer {self.owner} holds {len(self.held)} pages>"

    # ------------------------------------------------------------------ fences
    def fence_for(self, tx: Transaction, request: CommitRequest) -> Fence | None:
        """The fence a commit carries: that of the page whose runs made it, if any.

        Found by document id (the committing node's output, else a written document)
        in a map of every document of the registrations under a claimed page: the
        result, its argument and every node's output, for every pattern node (so a
        node registered later, a list element's or an instance's, is already in it).
        A miss looks at the registrations installed since the last look (newest
        first, stopping at one seen before), so it costs O(new registrations)."""
        page = tx.meta.get("page")
        if type(page) is Held:  # an inbox outcome of the page's event
            return None if page.dead else page.stamp
        if not self.held:
            return None
        by_id = self._fence_by_id
        event = tx.meta.get("event")
        if event is not None:  # a handling (its receipt): the page its stream is in
            held = self._holder(event.handler.stream[0])
            if held is not None:
                return held.stamp
        for attempt in (0, 1):
            outputs = getattr(tx.source, "outputs", None)
            if outputs:
                for key, _path in outputs:
                    held = by_id.get(key.id)
                    if held is not None and not held.dead:
                        return held.stamp
            for write in request.writes:
                held = by_id.get(write.key.id)
                if held is not None and not held.dead:
                    return held.stamp
            if attempt == 0 and not self._scan_new():
                return None
        return None

    def _holder(self, key: DocKey) -> Held | None:
        """The page held here whose runs own document `key`, if any."""
        held = self._fence_by_id.get(key.id)
        if held is None and self._scan_new():
            held = self._fence_by_id.get(key.id)
        if held is None or held.dead or self.held.get((held.principal, held.pid)) is not held:
            return None
        return held

    # ------------------------------------------------------------------ events
    def deliver_events(self) -> int:
        """Deliver the queued events of every watched principal's inbox to the pages
        held here (`Inbox.deliver`); how many were sent."""
        if self.stopped:
            return 0
        return sum(self.inbox.deliver(key.principal) for key in self.watched)

    def _inbox_changed(self, note: Any) -> None:
        inbox_id = self._inbox_id
        if any(change.key.id == inbox_id for change in note.changes):
            self._deliver_soon()

    def _deliver_soon(self) -> None:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # (no loop: the next tick delivers)
        loop.call_soon(self.deliver_events)

    def _scan_new(self) -> bool:
        """Index the registrations installed since the last scan (generations grow with
        every install, and the registrations keep install order); whether there were any.
        O(new registrations)."""
        seen = self._seen_generation
        new = []
        for reg in reversed(self.rt.runner.registrations.by_key.values()):
            if reg.generation <= seen:
                break
            new.append(reg)
        for reg in new:
            self._seen_generation = max(self._seen_generation, reg.generation)
            held = self._root_ref.get(reg.chain[0] if reg.chain else reg.key)
            if held is not None and not held.dead:
                self._index_reg(held, reg)
        return bool(new)

    def _index_id(self, held: Held, doc_id: str) -> None:
        by_id = self._fence_by_id
        before = by_id.get(doc_id)
        if before is held:
            return
        if before is not None:
            before.ids -= 1
            if before.dead:
                self._dead_ids -= 1
        by_id[doc_id] = held
        held.ids += 1

    def _index_reg(self, held: Held, reg: Any) -> None:
        key = reg.key
        link = Link(key.space, key.id, key.scope)
        self._index_id(held, key.id)
        self._index_id(held, docs.argument_link(link).id)
        count = self._node_counts.get(reg.pattern)
        if count is None:
            try:
                count = len(load_pattern(reg.pattern).graph.nodes)
            except Exception:  # not loadable here: its tracked nodes below still count
                count = 0
            self._node_counts[reg.pattern] = count
        nodes = reg.nodes
        for index in range(max(count, max(nodes, default=-1) + 1)):
            # The output document's id string of a node that exists (a new string only
            # for a node not made yet): a 10,000-page server keeps no copies of ids.
            doc_id = None
            for node in nodes.get(index, ()):
                outputs = getattr(node, "outputs", None)
                if outputs:
                    doc_id = outputs[0][0].id
                    break
            self._index_id(held, doc_id or docs.internal_link(link, index).id)

    def _unindex(self, held: Held) -> None:
        """A page stopped here for good: its map entries turn into misses (`dead`), and
        once they are half the map, one pass drops them all (amortized O(1) each)."""
        held.dead = True
        self._dead_ids += held.ids
        for root in (held.root, held.key):
            if root is not None and self._root_ref.get(root) is held:
                del self._root_ref[root]
        by_id = self._fence_by_id
        if self._dead_ids > 1024 and self._dead_ids * 2 > len(by_id):
            self._fence_by_id = {k: h for k, h in by_id.items() if not h.dead}
            self._dead_ids = 0

    # ------------------------------------------------------------------ the loop
    def start(self) -> None:
        import asyncio

        self._task = asyncio.get_running_loop().create_task(self._serve(), name=repr(self))

    async def first_tick(self) -> None:
        """The first heartbeat, before the loop starts; a store error is logged and the
        loop tries again at the next heartbeat (as for every tick)."""
        try:
            await self.tick()
        except Exception as exc:
            _log_error("cellweave: serving pages: the first tick failed: %r", exc)

    async def _serve(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        try:
            while not self.stopped:
                try:
                    full = await self.tick()
                except Exception as exc:  # a store outage: log, keep the loop, retry
                    _log_error("cellweave: serving pages: a tick failed: %r", exc)
                    full = False
                self._wake.clear()
                # Start the claimed pages a few at a time, yielding to the loop after
                # each few (their start stages run then) and ticking again once a
                # heartbeat has passed: started all at once, a batch kept the loop busy
                # for seconds under load, past this process's own lease.
                due = loop.time() + self.heartbeat
                while self._queue and not self.stopped and loop.time() < due:
                    began = loop.time()
                    self._start_queued(self._chunk)
                    await asyncio.sleep(0)
                    self._adapt_chunk(loop.time() - began)
                if self._queue:
                    continue  # a heartbeat passed with pages still to start: tick first
                if full:
                    # A full batch: more is waiting (a backlog, a mass death). The next
                    # batch goes at once; each stays bounded, so the loop keeps renewing.
                    await asyncio.sleep(0)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.heartbeat)
        finally:
            self.stopped = True

    def __await__(self) -> Any:
        """Wait until serving ends (after `stop()`)."""
        task = self._task
        assert task is not None
        return task.__await__()

    async def stop(self) -> None:
        """Stop serving: the pages stop here and every claim is released (another
        process takes them at its next tick). Idempotent."""
        import asyncio

        if self.stopped and self._task is None:
            return
        self.stopped = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        self.close()

    def close(self) -> None:
        """Synchronous part of `stop` (also run by `rt.close()`)."""
        if not self.stopped or self._pages_before is not None:
            book = self.rt.pages
            if book.recorded_hint == self._wake.set and self._pages_before is not None:
                book.served, book.recorded_hint, book.claim_clock = self._pages_before
            self._pages_before = None
        self.stopped = True
        self._inbox_off()
        if self.rt.replica.fence_for == self.fence_for:
            self.rt.replica.fence_for = None
        held, self.held = self.held, {}
        self._queue.clear()
        self._emptied.set()
        if not self.rt.closed:
            for h in held.values():
                self._stop_local(h, "serving stopped")
        try:
            self.table.release_all(self.space, self.owner, self.clock())
        except Exception as exc:  # the leases expire on their own
            _log_error("cellweave: releasing page claims failed: %r", exc)

    # ------------------------------------------------------------------ one tick
    async def tick(self) -> bool:
        """One heartbeat: renew, discover, close, claim, take over. Whether a batch
        was full (more may be waiting)."""
        if self.stopped:
            return False
        self.ticks += 1
        # The documents of idle pages stay packed between changes: decoded, the
        # documents of one idle page cost about a kilobyte (five small dicts), though
        # nothing reads them until an input changes. What the last heartbeat's work
        # decoded (page starts, runs, changes) is packed again now.
        self.rt.replica.pack(keep=self._read_each_tick)
        now = self.clock()
        if self.held or self._unheld:
            try:
                self._renew(now)
            except Exception:
                self._lapse_if_due(now)
                raise
        opened = await self._open_pages()
        now = self.clock()
        self._close_stopped(opened, now)
        if now - self._swept_at >= self.lease:
            self._swept_at = now
            self.table.sweep_closed(self.space, now - KEEP_CLOSED * self.lease, self.batch)
        room = self.batch - len(self._queue)
        claimed = self._claim_new(opened, now, room) if room > 0 else 0
        room -= claimed
        taken = self._take_over(opened, now, room) if room > 0 else 0
        if self._task is None:
            self._start_queued(len(self._queue))  # driven by hand (tests): all at once
        self.deliver_events()
        return claimed + taken >= self.batch

    def _start_queued(self, n: int) -> None:
        """Start up to `n` of the claimed pages waiting to start, oldest claim first."""
        queue = self._queue
        for _ in range(min(n, len(queue))):
            held = queue.popleft()
            if self.held.get(held.ref) is held:
                self._start_page(held)
        if not queue:
            self._emptied.set()

    @property
    def waiting(self) -> int:
        """Claimed pages whose start has not begun yet."""
        return len(self._queue)

    async def starts_queued(self) -> None:
        """Wait until every page claimed so far has been started (its start is then in
        flight like any other: `rt.idle()` waits for both)."""
        while self._queue and not self.stopped:
            await self._emptied.wait()

    def _adapt_chunk(self, took: float) -> None:
        """Pages per start step: doubled while a step takes under a tenth of a heartbeat
        of loop time, halved when it takes more than a quarter (the heartbeat keeps its
        rhythm whatever the machine's load)."""
        if took > self.heartbeat / 4:
            self._chunk = max(1, self._chunk // 2)
        elif took < self.heartbeat / 10:
            self._chunk = min(self.batch, self._chunk * 2)

    def _lose(self, held: Held, now: float, why: str) -> None:
        del self.held[held.ref]
        self.lost.append(
            {
                "page": held.pid,
                "principal": held.principal,
                "fence": held.fence,
                "at": now,
                "why": why,
            }
        )
        self.rt.runner.trace.record(
            "page-claim-lost", str(held.link), fence=held.fence, owner=str(self.owner), why=why
        )
        self._stop_local(held, "claim lost")

    def _lapse_if_due(self, now: float) -> None:
        """The renewals failed (the store unreachable): once the last confirmed renewal
        is `lease - heartbeat` old, stop running every held page here (self-fence), a
        heartbeat before the leases end and another process may take them. The fence
        alone keeps a late commit out; this keeps the pages' runs from computing for
        nothing, and from acting on what is no longer theirs outside the store."""
        if self.renewed_at is None or now - self.renewed_at < self.lease - self.heartbeat:
            return
        for held in list(self.held.values()):
            self._lose(held, now, "lapsed")
            self.lapsed += 1
        self._unheld = True

    def _renew(self, now: float) -> None:
        kept = self.table.renew(self.space, self.owner, now, self.lease)
        self.renewed_at = now
        for ref, held in list(self.held.items()):
            if kept.get(ref) != held.fence:
                self._lose(held, now, "taken")
        if self._unheld or len(kept) > len(self.held):
            # Ours in the store, not running here (stopped after a lapse): released, for
            # any process (this one too) to claim and run.
            self._unheld = False
            extra = [
                (principal, pid, fence)
                for (principal, pid), fence in kept.items()
                if (principal, pid) not in self.held
            ]
            if extra:
                self.table.release(self.space, self.owner, extra, now)

    async def _open_pages(self) -> dict[tuple[str, str], tuple[str, Link]]:
        """Every open page of the space: (principal, pid) -> (session, target)."""
        rt = self.rt
        link = docs.pages_link(self.space)
        keys = [
            link.key(Identity(principal, "serve"))
            for principal in self.table.page_docs(self.space, link.id)
        ]
        new = [k for k in keys if k not in self.watched and k not in self.loading]
        if new:
            self.loading.update(new)
            inboxes = [inbox_key(self.space, k.principal) for k in new]
            try:
                await rt.replica.sync([*new, *inboxes])  # (a Pending is awaitable)
            finally:
                self.loading.difference_update(new)
            self.watched.update(new)
            self._read_each_tick.update(new)
            self._read_each_tick.update(inboxes)
        out: dict[tuple[str, str], tuple[str, Link]] = {}
        for key in self.watched:
            value = rt.replica.visible(key)
            records = value.get(docs.VALUE) if type(value) is dict else None
            if type(records) is not dict:
                continue
            for pid, record in records.items():
                if type(record) is dict and record.get("open") is True:
                    target = record.get("target")
                    session = record.get("session")
                    if type(target) is Link:
                        out[(key.principal, pid)] = (
                            session if type(session) is str else "serve",
                            target,
                        )
        return out

    def _close_stopped(self, opened: dict[tuple[str, str], tuple[str, Link]], now: float) -> None:
        gone = [h for ref, h in self.held.items() if ref not in opened]
        for h in gone:
            del self.held[(h.principal, h.pid)]
            self._stop_local(h, "page stopped")
        if gone:
            self.table.release(
                self.space,
                self.owner,
                [(h.principal, h.pid, h.fence) for h in gone],
                now,
                closed=True,
            )
        for ref in [r for r in self.first_seen if r not in opened]:
            del self.first_seen[ref]
        for ref in [r for r in self.elsewhere if r not in opened]:
            del self.elsewhere[ref]
        for ref in [r for r in self.refusals if r not in opened]:
            del self.refusals[ref]

    def _claim_new(
        self, opened: dict[tuple[str, str], tuple[str, Link]], now: float, room: int
    ) -> int:
        retry_after = 5 * self.lease
        for ref in opened:
            if ref not in self.held and ref not in self.first_seen:
                self.first_seen[ref] = now
        wanted = sorted(
            (
                (seen, ref)
                for ref, seen in self.first_seen.items()
                if ref not in self.held
                and (ref not in self.elsewhere or now - self.elsewhere[ref] > retry_after)
            ),
        )[:room]
        if not wanted:
            return 0
        refs = [ref for _seen, ref in wanted]
        got = self.table.claim(self.space, self.owner, refs, now, self.lease)
        for ref in refs:
            fence = got.get(ref)
            if fence is None:
                self.elsewhere[ref] = now
            else:
                self._serve_page(ref, opened[ref], fence, None)
        return len(refs)

    def _take_over(
        self, opened: dict[tuple[str, str], tuple[str, Link]], now: float, room: int
    ) -> int:
        """Take stale claims: released ones with one claim statement, owned ones with
        one steal statement (each row only if still exactly as read)."""
        deferred = sum(1 for _s, until, _d in self.refusals.values() if until > now)
        rows = self.table.stale(self.space, now, self.owner, 2 * room + deferred)
        # Rows with one lease end (a dead owner's pages share one) in an order of this
        # process's own: two processes taking over one dead owner's pages then mostly
        # take different ones, where in one order both raced for the same first batch
        # and the loser took nothing that heartbeat.
        salt = self.owner.nonce
        rows.sort(key=lambda r: (r.expires_at, zlib.crc32(f"{salt} {r.page}".encode())))
        free: list[tuple[str, str]] = []
        steals: list[tuple[ClaimRow, str]] = []
        vanished: list[ClaimRow] = []
        forget_before = now - self.lease
        for row in rows:
            ref = row.ref
            if len(free) + len(steals) >= room:
                break
            if ref not in opened:
                # No open page for it: its record vanished without a stop (a stop
                # closes the row). Nobody would claim or close it, and it would come
                # first here at every heartbeat: deleted once it has been ownerless (or
                # expired) for a lease, so a page opened meanwhile is in our view.
                if row.expires_at < forget_before and len(vanished) < self.batch:
                    vanished.append(row)
                continue
            if ref in self.held:
                continue
            refused = self.refusals.get(ref)
            if (
                refused is not None
                and row.owner is not None
                and row.expires_at >= now
                and refused[0] == row.heartbeat_at
                and refused[1] > now
            ):
                continue  # backing off: the owner was alive at this stamp, lease fresh
            if row.owner is None:
                free.append(ref)
            elif row.expires_at < now:
                steals.append((row, "lease-expired"))
            elif self.probe(row.owner) is False:  # fresh lease, same host: ask the probe
                steals.append((row, "owner-gone"))
            else:
                self._refuse(ref, row, now)
        if vanished:
            forgotten = self.table.forget(self.space, vanished, now)
            self.forgotten += forgotten
            if forgotten:
                self.rt.runner.trace.record("page-claims-forgotten", self.space, rows=forgotten)
        taken = 0
        if free:
            for ref, fence in self.table.claim(
                self.space, self.owner, free, now, self.lease
            ).items():
                taken += 1
                self.refusals.pop(ref, None)
                self._serve_page(ref, opened[ref], fence, None)
        if steals:
            got = self.table.steal_many(steals, self.owner, now, self.lease)
            for row, reason in steals:
                ref = row.ref
                new = got.get(ref)
                if new is None:
                    self._refuse(ref, row, now)  # the row moved (a pulse, another taker)
                    continue
                taken += 1
                self.refusals.pop(ref, None)
                self.elsewhere.pop(ref, None)
                self._serve_page(ref, opened[ref], new, (row, reason))
        return taken

    def _refuse(self, ref: tuple[str, str], row: ClaimRow, now: float) -> None:
        """Back off from a live owner: two heartbeats, doubling up to the lease, per stamp."""
        before = self.refusals.get(ref)
        if before is not None and before[0] == row.heartbeat_at:
            delay = min(before[2] * 2, self.lease)
        else:
            delay = min(2 * self.heartbeat, self.lease)
        self.refusals[ref] = (row.heartbeat_at, now + delay, delay)

    # ------------------------------------------------------------------ pages here
    def _serve_page(
        self,
        ref: tuple[str, str],
        opened: tuple[str, Link],
        fence: int,
        taken: tuple[ClaimRow, str] | None,
    ) -> None:
        principal, pid = ref
        session, target = opened
        held = Held(self.space, ref, session, target, fence)
        if not self.held or self.renewed_at is None:
            self.renewed_at = self.clock()  # its lease runs from about now
        self.held[ref] = held
        self.first_seen.pop(ref, None)
        self.elsewhere.pop(ref, None)
        trace = self.rt.runner.trace
        if taken is not None:
            row, reason = taken
            record = {
                "page": pid,
                "principal": principal,
                "from": str(row.owner),
                "reason": reason,
                "fence": fence,
                "at": self.clock(),
            }
            self.takeovers.append(record)
            trace.record("page-takeover", str(target), reason=reason, fence=fence)
        else:
            trace.record("page-claim", str(target), fence=fence)
        # The page's own documents are fenced before its start commits anything.
        root = held.root
        before = self._root_ref.get(root)
        self._root_ref[root] = held
        self._index_id(held, target.id)
        if before is not None and before is not held:
            # Claimed here before (then lost): its documents still map to the old
            # claim, whose fence would get every commit of the new claim rejected. The
            # old entries now give the new fence (commits made before carry the old).
            before.stamp = held.stamp
            for reg in self.rt.runner.registrations:
                if (reg.chain[0] if reg.chain else reg.key) in (root, before.key):
                    self._index_reg(held, reg)
        self._queue.append(held)
        self._emptied.clear()

    def _start_page(self, held: Held) -> None:
        ref = held.ref
        target = held.link
        identity = Identity(held.principal, held.session)
        cell = Cell(self.rt.replica, identity, target, host=self.rt.host)
        started = self.rt.pages.resume_one(held.pid, cell, identity, ref=ref)
        trace = self.rt.runner.trace

        def after(p: Pending[bool]) -> None:
            try:
                ok = p.result()
            except Exception as exc:
                _log_error("cellweave: claimed page %s could not start: %r", target, exc)
                ok = False
            if self.held.get(ref) is not held:
                return
            rec = self.rt.pages.by_pid.get(ref)
            held.key = rec.key if rec is not None else None
            if held.key is not None and held.key not in self._root_ref:
                # A page that follows a slot runs the result the slot led to.
                self._root_ref[held.key] = held
                reg = self.rt.runner.registrations.get(held.key)
                if reg is not None:
                    self._index_reg(held, reg)
            if not ok:
                trace.record("page-claim-start-failed", str(target), fence=held.fence)
            else:
                self._deliver_soon()  # events queued for it while it started

        started.add_done_callback(after)

    def _stop_local(self, held: Held, why: str) -> None:
        """End the page's runs here, leaving its record alone (it is not this stop's).
        A lost page's documents keep their (old) fence: whatever of it still commits
        here is rejected, never sent unfenced."""
        if why != "claim lost":
            self._unindex(held)
        book = self.rt.pages
        rec = book.by_pid.get(held.ref)
        if rec is None or self.rt.closed:
            return
        key = rec.key
        book._forget(rec)
        if key is not None:
            self.rt.runner.let_go(key, held.principal, why=why)

    # ------------------------------------------------------------------ inspection
    def inspect_self(self) -> dict[str, Any]:
        """This process's side: who it is, what it holds, takeovers and losses."""
        return {
            "owner": str(self.owner),
            "lease": self.lease,
            "heartbeat": self.heartbeat,
            "held": len(self.held),
            "takeovers": list(self.takeovers),
            "lost": list(self.lost),
            "forgotten": self.forgotten,
        }

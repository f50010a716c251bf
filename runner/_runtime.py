"""`Runtime`: the facade users hold — a store, a replica, a scheduler, a runner, an identity.

A runtime is one session against a store: its own replica (several runtimes
on one store are separate sessions and conflict for real), its own scheduler
and its own runner (registrations: which results run here). Cells it hands
out resolve scoped documents for its identity and are reactive: `pull`,
`sink` and `observe` go through its scheduler. `rt.session(principal,
session)` is a view acting for another resolution identity on the same
replica, scheduler and runner (a service serving many users).

Works in a plain script and inside an already-running event loop (Jupyter):
propagation is synchronous. With a running loop every change (a write, a
store's answer, another session's commit, a queued event) schedules one
coalesced pass on it, so sinks fire with no call; without one, `settle()` is
the pump. The loop also delivers store answers and runs `start`'s stages.

Pages are durable intent: opening one (navigation, or `open_page`) records
it, with its owner, in that principal's pages document before starting it;
stopping one removes its record before anything is cancelled, and returns a
`Pending` that resolves once that removal is durable; `resume()` starts
every page recorded open. Pages belong to the principal who opened
them: stopping, listing or inspecting another principal's pages raises
`OwnershipError`.

Errors of the application's code have homes, never a bystander: a failing
computation's value is absent and its pull raises; a handler's error goes to
its send's `Sent` handle; callbacks (`on_navigate`) are contained; all of them
are in `errors()` / `inspect()` and logged once. `settle()` and `idle()` raise
none of them, and `aclose()` closes whatever happened.

This module is the facade: it builds the pieces (replica, scheduler, runner,
pages, sends) and documents each call; the calls themselves, with their
checks, are `_operations.Operations`, which a `Session` shares.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cells import (
    Cell,
    CellweaveError,
    Identity,
    Link,
    MemoryStore,
    Owner,
    Pending,
    Replica,
    Scope,
    StoreBase,
    Transaction,
    mimebundle,
)
from scheduler import CallbackError, Clock, ErrorRecord, Scheduler

from . import _boundary as check
from ._builder import Pattern
from ._claims import PageServer
from ._host import SchedulerHost
from ._inspection import Inspection, inspect_run, inspect_runtime
from ._operations import Operations
from ._pages import Pages
from ._registrations import Key, Registration
from ._remote_events import Outbox
from ._runner import Runner
from ._send import Sends
from ._sent import Sent
from ._session import Session
from .errors import ArgumentError, PatternError

if TYPE_CHECKING:
    # At run time asyncio is imported only inside coroutines (a loop runs, so it is
    # loaded): `import runner` stays free of asyncio's 20 ms for programs that never await.
    import asyncio

__all__ = ["Inspection", "Runtime", "Session"]

_check_name = check.check_name


class Runtime:
    """One session against a store. `Runtime()` uses a fresh `MemoryStore`.

    >>> rt = Runtime()
    >>> c = rt.get_cell({"note": 1})
    >>> _ = c.set({"title": "hi"}); rt.settle()
    >>> c.key("title").get()
    'hi'

    `pages="served"` is for a process that shows pages but does not run them (a UI in
    front of serving processes, `rt.serve_pages` or `cellweave worker`, on one store):
    opening a page (`open_page`, a navigation) records the intent durably and resolves
    True, and a serving process claims the page and runs it, fenced, within a
    heartbeat; its results are durable documents, read here as any cell. The default
    `"local"` runs a page where it is opened. A runtime that serves pages itself
    records its own opens the same way, for its server (or another) to claim. A
    served runtime starts nothing for a send either: an event reaches a handler only
    in the process that runs it, so a send to a result not running here raises.

    A lift's first run on this runtime keeps the output an earlier run stored (on
    this or another runtime, before a restart) when its code and everything it read
    are unchanged, and does not call the function (`runner._reuse`); `reuse=False`
    calls every function again instead (after changing code the check cannot see,
    such as a mutable global a function reads). What each output was computed from
    is recorded when the runtime closes with `aclose()` (or `async with`).
    """

    def __init__(
        self,
        store: StoreBase | None = None,
        *,
        space: str = "default",
        principal: str = "local",
        session: str = "local",
        clock: Clock | None = None,
        on_navigate: Callable[[Cell], None] | None = None,
        pages: str = "local",
        reuse: bool = True,
    ) -> None:
        if store is not None and not isinstance(store, StoreBase):
            raise ArgumentError(
                f"Runtime: store must be a store (MemoryStore(), SQLiteStore(path)) or None,"
                f" got {type(store).__name__} {store!r}"
            )
        if not isinstance(space, str) or not space:
            raise ArgumentError(f"Runtime: space must be a non-empty str, got {space!r}")
        self.space = space
        self.identity = Identity(
            _check_name(principal, "principal"), _check_name(session, "session")
        )
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise ArgumentError(
                f"Runtime: clock must have a now() method (a scheduler Clock) or be None,"
                f" got {clock!r}"
            )
        if on_navigate is not None and not callable(on_navigate):
            raise ArgumentError(f"Runtime: on_navigate must be callable, got {on_navigate!r}")
        if pages not in ("local", "served"):
            raise ArgumentError(
                f"Runtime: pages must be 'local' (a page runs where it is opened) or 'served'"
                f" (serving processes run it: rt.serve_pages, cellweave worker), got {pages!r}"
            )
        if type(reuse) is not bool:
            raise ArgumentError(f"Runtime: reuse must be True or False, got {reuse!r}")
        self.store: StoreBase = store if store is not None else MemoryStore()
        self.replica = Replica(self.store)
        # The capability for the runtime's own bookkeeping (page records, receipts):
        # claimed before any user code can see the replica, and never handed out.
        self._authority = self.replica.claim_authority()
        self.scheduler = Scheduler(self.replica, clock=clock, authority=self._authority)
        self._host = SchedulerHost(self, self.scheduler)
        self.runner = Runner(self.replica, self.scheduler, self._host)
        self.runner.reuse = reuse
        self.on_navigate = on_navigate
        """Called with each page a navigation opened, once it is running (a UI shows it)."""
        self._pages_book = Pages(
            space, self.replica, self._authority, self.runner, self._host, self._navigated
        )
        self.runner.open_page = self._pages_book.open
        if pages == "served":
            self._pages_book.served = _not_here
        self._sends = Sends(self.replica, self.scheduler, self._host, self.runner)
        self._sends.starts = pages == "local"
        if pages == "served":
            self._sends.outbox = Outbox(self.replica, self._authority, space)
        self._ops = Operations(
            space=space,
            identity=self.identity,
            store=self.store,
            replica=self.replica,
            scheduler=self.scheduler,
            host=self._host,
            runner=self.runner,
            pages_book=self._pages_book,
            sends=self._sends,
        )
        self._server: PageServer | None = None

    def __repr__(self) -> str:
        return self._ops.runtime_repr()

    @staticmethod
    def of(cell: Cell) -> Runtime | None:
        """The runtime that made `cell` (its `get_cell`, a result it returned), or None
        for a cell made without one. Views use it to act on the cell's runtime."""
        if not isinstance(cell, Cell):
            raise PatternError(f"Runtime.of: expected a Cell, got {cell!r}")
        host = cell.host
        if isinstance(host, SchedulerHost) and isinstance(host.owner, Runtime):
            return host.owner
        return None

    @property
    def closed(self) -> bool:
        """True once `close()` or `aclose()` ran."""
        return self._ops.closed

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the runtime and its `inspect()` snapshot."""
        return mimebundle(repr(self), {} if self.closed else self.inspect())

    # -- lifecycle
    def close(self) -> None:
        """Stop reacting and disconnect from the store (idempotent). The store stays open.

        Local registrations end; durable intent (open pages) stays, so a new
        runtime's `resume()` starts them again.
        """
        if self._ops.closed:
            return
        if self._server is not None:
            self._server.close()  # claims released while the runtime still works
        if self._sends.outbox is not None:
            self._sends.outbox.close()
        self._ops.closed = True
        # Each step runs even if one before it raised (a cleanup of a run that fails):
        # a closed runtime never keeps its scheduler or replica going.
        try:
            self.runner.stop_all()
        finally:
            try:
                self.scheduler.close()
            finally:
                self.replica.close()

    async def aclose(self) -> None:
        """Wait for in-flight work (verdicts, starts) to finish, then close.

        The runtime is closed when this returns or raises, even if the wait failed
        or was cancelled (what failed is in `errors()` and the log)."""
        try:
            if self._server is not None:
                await self._server.stop()
            if not self._ops.closed:
                await self.idle()
                await self._checkpoint()
        finally:
            self.close()

    async def _checkpoint(self) -> None:
        """Write the inputs records of the lifts whose outputs stand for their inputs
        now (`runner._reuse`), so a restart keeps those outputs, and wait for them."""
        txs = self.runner.reuse_book.checkpoint(self.replica)
        if not txs:
            return
        for tx in txs:
            tx.commit_detached()  # a rejected record is only a lost shortcut
        await self.idle()

    async def __aenter__(self) -> Runtime:
        # Deliveries from the store (other sessions' commits) wake this loop from now
        # on, also for a runtime made before the loop ran.
        import asyncio  # loaded: this coroutine runs on a loop

        self.replica.mailbox.attach(asyncio.get_running_loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _require_open(self) -> None:
        self._ops.require_open()

    # -- identity views
    def session(self, principal: str, session: str) -> Session:
        """A view acting for `(principal, session)`: its cells resolve that identity's instances."""
        self._ops.require_open()
        return Session(
            self._ops,
            Identity(_check_name(principal, "principal"), _check_name(session, "session")),
        )

    # -- transactions and cells
    def edit(self, *, commit_gated: bool = False) -> Transaction:
        """Open a transaction. With `commit_gated=True`, starts launched through it
        install only after it commits (and never, if a stop comes first)."""
        return self._ops.edit(self.identity, commit_gated)

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        """The cell whose id derives from `cause` alone (dict key order does not matter).

        `scope` is a separate coordinate of the address: the same cause at two
        scopes has the same id, and a "user"/"session" scope resolves this
        runtime's own instance.
        """
        return self._ops.get_cell(self.identity, cause, scope, tx)

    # -- setting up and running patterns
    def setup(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        """Stage `pattern`'s setup on `argument` into `result` in `tx`; nothing is scheduled.

        The writes: the argument document (values inline, cells as links),
        the pattern identity and the result projection (links to the run's
        internal cells). Start it later with `rt.start(result)`.

        On a result running here with another pattern, the run switches to
        `pattern` once `tx` commits: the old nodes are torn down (the old
        pattern's children are released; one opened as a page survives) and the
        new ones instantiated, in the same registration (its lifetime, pages and
        token stay). The same pattern only updates the argument.
        """
        return self._ops.setup(self.identity, tx, pattern, argument, result, "setup")

    def run(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        """Set up `pattern` on `argument` into `result` and start it; returns `result`.

        A result already running the same pattern only has its argument
        updated. If `tx` does not become durable the run is rolled back (its
        registration released); on a stale basis it is kept and the setup
        writes are owed (run again to re-issue them). With a commit-gated `tx`
        the start installs only after the commit.
        """
        return self._ops.run(self.identity, tx, pattern, argument, result)

    def start(self, cell: Cell) -> asyncio.Future[bool]:
        """Start the result `cell` names (following links); call it inside a running loop.

        The attempt is registered (visible to `stop` and `release`) before this
        returns. It syncs every document it visits — the root, each link hop,
        the pattern, the run's documents — so a held load holds it there. The
        future resolves `True` only if this start left the result running and
        claimed an independent lifetime (decided in a later loop step).
        """
        return self._ops.start(self.identity, cell)

    def key(self, cell: Cell) -> Key:
        """The registration key of the result `cell` names (its whole document instance)."""
        return self._ops.key(cell)

    def stop(self, cell: Cell, *, generation: int | None = None) -> Pending[None]:
        """The authoritative end of the result `cell` names (see the ownership rules).

        With `generation`, only that registration is stopped (a stale one does nothing).
        Returns a `Pending` that resolves once the stop is durable: for a page, once its
        record is removed from the store (`await rt.stop(page)`; it raises if that
        failed for good, and the page is then stop-failed); for anything else, at once
        or once the principal's pages document has loaded (a page another runtime
        opened is found there, and closed too).
        The local work ends before this returns either way; ignoring the result is fine.
        """
        return self._ops.stop(self.identity, cell, generation, operator=True)

    def release(self, cell: Cell, token: Registration | None = None) -> None:
        """The launch-scoped end: ends only the registration `token` names (any, if None),
        and declines for a result with an independent lifetime or a start in flight."""
        self._ops.release(self.identity, cell, token, operator=True)

    def stop_all(self) -> None:
        """End every registration, pending start and lifetime; invalidate every start."""
        self._require_open()
        self.runner.stop_all()

    def registration(self, cell: Cell) -> Registration | None:
        """The current registration (token) of the result, or None."""
        self._require_open()
        check.check_cell(cell, "rt.registration")
        self.runner.wake_dormant()  # a dormant element child shows as running
        return self.runner.registrations.get(self.key(cell))

    def registrations(self) -> frozenset[Key]:
        self._require_open()
        self.runner.wake_dormant()  # (as `registration`)
        return self.runner.registrations.keys()

    def pending_starts(self) -> frozenset[Key]:
        self._require_open()
        return self.runner.pending.keys()

    def lifetimes(self) -> frozenset[Key]:
        self._require_open()
        return frozenset(self.runner.lifetimes)

    # -- events
    def send(self, stream: Cell, event: Any, *, event_id: str | None = None) -> Sent:
        """Queue `event` for the handler bound to `stream` (links are followed to it).

        The send first brings what resolves the stream up to date: a path through
        computed cells nobody pulled yet is computed, and a result that is set up but
        not running here is started (it holds a lifetime of its own, as with
        `rt.start`; the event is queued once it runs, and if it cannot start, the
        handle fails with why, which is also in `errors()`). A stream whose handler
        was removed (its run stopped or was released) drops the event, as it drops
        events already queued there. Raises only when no handler is there and none
        would be.

        Returns a `Sent` handle: ignore it (fire-and-forget; nothing warns), or
        `await` it for the handling's outcome — "done", "dropped" (not handled here,
        e.g. a duplicate), or the handling's error raised (`HandlerError`, the
        handler's exception its cause). `event_id` makes delivery idempotent: the
        same id from the same principal on the same stream is handled at most once,
        by any runtime sharing the store (a duplicate delivery loses its receipt and
        never undoes the winner's work); another principal's event with the same id
        is another event.
        """
        return self._ops.send(self.identity, stream, event, event_id)

    def handler_label(self, stream: Cell) -> str | None:
        """The label of the handler an event sent to `stream` would reach (links
        followed, as `send` follows them), or None when none is bound there. Views
        use it to show streams as buttons. In a runtime made with `pages="served"`,
        the handler of a result run elsewhere is found in the result's pattern (as far
        as the pattern names it: not among a list's or lift's children)."""
        self._require_open()
        if not isinstance(stream, Cell):
            raise PatternError(f"rt.handler_label: expected a Cell, got {stream!r}")
        try:
            target = stream.resolve()
        except CellweaveError:
            return None
        label = self.scheduler.handler_label(target)
        if label is None:  # pages="served": the handler is bound where the page runs
            label = self._sends.remote_label(stream, target, self.identity)
        return label

    # -- pages
    async def serve_pages(
        self,
        *,
        lease: float = 10.0,
        heartbeat: float = 2.0,
        clock: Callable[[], float] | None = None,
        probe: Callable[[Owner], bool | None] | None = None,
        batch: int = 64,
        manual: bool = False,
    ) -> PageServer:
        """Run open pages of every principal of this space under claims, with other
        processes serving the same store: each page runs in one process at a time, a
        dead process's pages move to the others within about a lease. Returns the
        server (`await server.stop()`, or `rt.aclose()`, releases its claims); its
        first tick has run. `clock` (seconds) and `probe` (is an owner's process
        alive?) are for tests; `manual=True` runs no loop (call `await server.tick()`).
        See the claims explanation in the docs."""
        self._ops.require_open()
        if self._server is not None and not self._server.stopped:
            raise CellweaveError(f"{self!r} already serves pages ({self._server!r})")
        server = PageServer(
            _Serving(self), lease=lease, heartbeat=heartbeat, clock=clock, probe=probe, batch=batch
        )
        self._server = server
        import asyncio  # loaded: this coroutine runs on a loop

        self.replica.mailbox.attach(asyncio.get_running_loop())
        if manual:
            await server.tick()
        else:
            await server.first_tick()
            server.start()
        return server

    def open_page(self, cell: Cell, *, follow: bool = False) -> asyncio.Future[bool]:
        """Open the result `cell` names as a page of the cell's principal: recorded
        durably first, then started (it gets an independent lifetime). Resolves True
        once it runs; if the record does not become durable it fails, and if the start
        fails or is superseded the record is withdrawn.

        A cell that leads to a result through a link held in a list (a map
        container's slot, `cards.key(i)`) pins the page to the result the slot holds
        now; with `follow=True` the page follows the slot instead (it runs what the
        slot holds when it starts, and again at each resume)."""
        return self._ops.open_page(cell, follow=follow)

    def pages(self, principal: str | None = None) -> list[Cell]:
        """Pages (results started in their own right) owned by `principal` (default: this
        runtime's). Another principal's pages raise `OwnershipError`."""
        return self._ops.pages(self.identity, principal)

    async def resume(self) -> list[Cell]:
        """Start again every page recorded open for this runtime's principal (after a
        restart, also after `kill -9`); returns the pages now running. Each page starts
        on its own: if some cannot, the rest still do, and `ResumeError` reports them.

        A runtime whose pages are served under claims (`pages="served"`, or one that
        serves pages) starts none here and returns `[]`: serving processes run them."""
        return await self._ops.resume(self.identity)

    # -- running
    def settle(self) -> None:
        """Run everything runnable now, synchronously (a notebook cell sees its result)."""
        self._require_open()
        self.scheduler.settle()

    async def idle(self) -> None:
        """Wait until nothing is runnable, no verdict, load or start is in flight, and no
        event is queued.

        Raises no error of a computation, handler or callback: those are not the
        waiter's (each went to its own home: the value's `pull()` and observers, the
        send's handle, `errors()` and the `cellweave` log)."""
        while True:
            await self._ops.idle()
            server = self._server
            if server is None or server.stopped or not server.waiting:
                return
            await server.starts_queued()  # pages claimed, their starts not yet begun

    # -- diagnostics
    def errors(self) -> list[ErrorRecord]:
        """The recent errors, oldest first, at most `scheduler.MAX_ERRORS` (100): each
        computation still failing when a settle ended, handler that raised or never
        converged, and callback (`on_navigate`, an observer's `on_error`) that raised.
        Each record has `time`, `kind`, `source` (node / pattern / handler / callback),
        `cell`, `message` and `error`; each was logged once on the `cellweave.scheduler`
        logger. Shared by every session of this runtime."""
        self._require_open()
        return self.scheduler.errors()

    def _navigated(self, identity: Identity, link: Link) -> None:
        """A page an open started is running: tell `on_navigate`. An error it raises is
        contained and recorded (it must not escape into whatever delivered the store's
        answer)."""
        fn = self.on_navigate
        if fn is None:
            return
        cell = Cell(self.replica, identity, link, host=self._host)
        try:
            fn(cell)
        except Exception as exc:
            err = CallbackError(f"on_navigate({cell!r}) raised {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            self.scheduler.errors_log.add("callback", "on_navigate", str(cell.link()), err)

    def inspect_run(self, key: str, *, principal: str | None = None) -> dict[str, Any]:
        """The pattern graph of the run registered under `key` (as `inspect()` names
        it): each node's index, kind, target and inputs, and how often its scheduler
        nodes (or handler) ran here. With `principal`, only a run that principal's
        `session.inspect()` shows is given; others raise `OwnershipError` as a
        missing one does."""
        return inspect_run(self._ops, key, principal)

    def inspect(self, principal: str | None = None) -> Inspection:
        """A JSON-serialisable snapshot: registrations, pending starts, lifetimes, pages,
        node counts, starts in flight and the recent lifecycle trace. Documents are named
        by id; each registration's `cause`, and `causes` (id -> cause, for every id the
        snapshot names whose cause this process knows), say what they were made from."""
        snapshot = inspect_runtime(self._ops, principal)
        snapshot["claims"] = self._claims_view(principal or self.identity.principal)
        return snapshot

    def _claims_view(self, principal: str) -> dict[str, Any]:
        """The page claims of `principal` in this space, and this process's serving."""
        server = self._server
        rows = [
            row.as_dict()
            for row in self.store.claims.rows(self.space)
            if row.principal == principal
        ]
        out: dict[str, Any] = {"claims": rows, "serving": None}
        if server is not None and not server.stopped:
            view = server.inspect_self()
            view["takeovers"] = [t for t in view["takeovers"] if t["principal"] == principal]
            view["lost"] = [t for t in view["lost"] if t["principal"] == principal]
            out["serving"] = view
        return out

    def _check(self) -> None:
        self.runner._check()
        self._pages_book._check()
        self._sends._check()
        self.scheduler._check()
        self.replica._check()


def _not_here(ref: tuple[str, str]) -> bool:
    """`Pages.served` of a runtime made with `pages="served"` that serves none itself."""
    return False


class _Serving:
    """What a `PageServer` uses of its runtime (runner/_claims.py `Serving`)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.space = rt.space
        self.store = rt.store
        self.replica = rt.replica
        self.runner = rt.runner
        self.host = rt._host
        self.pages = rt._pages_book
        self.scheduler = rt.scheduler
        self.authority = rt._authority

    @property
    def closed(self) -> bool:
        return self._rt.closed

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from cells import (
    Cell,
    CellweaveError,
    Identity,
    InvalidArgumentError,
    Link,
    MemoryStore,
    Owner,
    Pending,
    Replica,
    Scope,
    StoreBase,
    Transaction,
    check_same_store,
    check_scope,
    describe_id,
    entity_id,
    mimebundle,
    running_loop,
)
from scheduler import CallbackError, Clock, ErrorRecord, Scheduler

from . import _boundary as check
from . import _docs as docs
from ._builder import Pattern, load_pattern
from ._claims import PageServer
from ._pages import Pages
from ._registrations import Key, Registration
from ._runner import Runner
from ._send import Sends
from ._sent import Sent
from ._state import describe as describe_state
from .errors import ArgumentError, OwnershipError, PatternError, ResumeError

if TYPE_CHECKING:
    # At run time asyncio is imported only inside coroutines (a loop runs, so it is
    # loaded); "is a loop running" is `cells.running_loop()`: `import runner` stays
    # free of asyncio's 20 ms for programs that never await.
    import asyncio


class Inspection(dict[str, Any]):
    """What `rt.inspect()` returns: a plain dict (JSON-serialisable) that also
    displays itself in notebooks."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        ident = self.get("identity") or {}
        title = f"inspect() as {ident.get('principal')}/{ident.get('session')}"
        return mimebundle(title, dict(self))


class _Host:
    """Gives cells `pull` / `sink` / `observe` through a scheduler."""

    __slots__ = ("runtime", "scheduler")

    def __init__(self, runtime: Runtime, scheduler: Scheduler) -> None:
        self.runtime = runtime
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


_check_name = check.check_name


class Session:
    """A view of a runtime acting for one resolution identity (principal, session).

    Cells it returns resolve that identity's instances of user- and
    session-scoped documents; runs, starts, stops and pages act for it. It is
    what a service hands to code acting for one user: its transactions touch
    only what the identity resolves to, it ends only what the identity's
    principal launched or opened, and it does not expose the runtime.
    """

    __slots__ = ("_runtime", "identity")

    def __init__(self, runtime: Runtime, identity: Identity) -> None:
        self._runtime = runtime
        self.identity = identity

    def __repr__(self) -> str:
        return f"<Session {self.identity.principal}/{self.identity.session} of {self._runtime!r}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: who this session acts for, and its principal's pages."""
        pages = [repr(c) for c in self.pages()] if not self._runtime.closed else []
        ident = self.identity
        return mimebundle(
            repr(self), {"principal": ident.principal, "session": ident.session, "pages": pages}
        )

    def edit(self, *, commit_gated: bool = False) -> Transaction:
        return self._runtime._edit(self.identity, commit_gated)

    def cell(self, cell: Cell) -> Cell:
        """`cell`'s place as this session sees it: the same address, resolving
        user- and session-scoped documents for this session's identity."""
        if not isinstance(cell, Cell):
            raise PatternError(f"session.cell: expected a Cell, got {cell!r}")
        check_same_store(cell, self._runtime.replica, "session.cell")
        if cell.identity == self.identity and cell.tx is None:
            return cell
        return Cell(self._runtime.replica, self.identity, cell.link(), host=self._runtime._host)

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        return self._runtime._get_cell(self.identity, cause, scope, tx)

    def setup(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        return self._runtime._setup(self.identity, tx, pattern, argument, result, "setup")

    def run(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        return self._runtime._run(self.identity, tx, pattern, argument, result)

    def start(self, cell: Cell) -> asyncio.Future[bool]:
        return self._runtime._start(self.identity, cell)

    def stop(self, cell: Cell, *, generation: int | None = None) -> Pending[None]:
        return self._runtime._stop(self.identity, cell, generation, operator=False)

    def release(self, cell: Cell, token: Registration | None = None) -> None:
        self._runtime._release(self.identity, cell, token, operator=False)

    def send(self, stream: Cell, event: Any, *, event_id: str | None = None) -> Sent:
        return self._runtime._send(self.identity, stream, event, event_id)

    def pages(self) -> list[Cell]:
        return self._runtime._pages(self.identity, self.identity.principal)

    def run_cell(self, key: str) -> Cell:
        """The result cell of the run `inspect()` names by `key`, as this session sees
        it (to stop or release it from an inspector). A run with no instance of this
        session's principal is refused like a missing one, with `OwnershipError`."""
        rt = self._runtime
        rt._require_open()
        if not isinstance(key, str):
            raise PatternError(f"session.run_cell: key must be a str from inspect(), got {key!r}")
        principal = self.identity.principal
        reg = rt._visible_runs(principal).get(key)
        if reg is None or not _has_instance(reg, principal):
            raise OwnershipError(
                f"session.run_cell: no run {key!r} that {principal!r} launched or opened"
            )
        k = reg.key
        link = Link(k.space, k.id, k.scope)
        return Cell(rt.replica, self.identity, link, host=rt._host)

    def inspect(self) -> dict[str, Any]:
        """What this session's principal may see of the runtime: the runs with an
        instance of that principal, and the runs they descend from (so the tree has
        its roots; `mine` is False on those), each with its parent and what keeps it
        alive; its pages, the pending starts of its principal, the lifetimes of
        those runs and the recent lifecycle trace of them."""
        rt = self._runtime
        rt._require_open()
        principal = self.identity.principal
        visible = rt._visible_runs(principal)
        pending = rt.runner.pending.keys()
        pages = self.pages()
        entries = rt._run_entries(visible.values(), pages)
        for entry, reg in zip(entries, visible.values(), strict=True):
            entry["mine"] = _has_instance(reg, principal)
        trace = rt.runner.trace.snapshot()
        trace["entries"] = [e for e in trace["entries"] if str(e.get("key")) in visible]
        return {
            "identity": {"principal": principal, "session": self.identity.session},
            "registrations": entries,
            # (PendingStarts iterates its starts; `keys()` gives their keys.)
            "pending_starts": sorted(str(k) for k in pending if k.principal in ("", principal)),
            "lifetimes": sorted(k for k in map(str, rt.runner.lifetimes) if k in visible),
            "pages": [str(c.link()) for c in pages],
            "trace": trace,
        }

    def open_page(self, cell: Cell, *, follow: bool = False) -> asyncio.Future[bool]:
        check.check_cell(cell, "session.open_page")
        check_same_store(cell, self._runtime.replica, "session.open_page")
        check.own_cell(self.identity, cell, "session.open_page")
        return self._runtime.open_page(self.cell(cell), follow=follow)

    async def resume(self) -> list[Cell]:
        return await self._runtime._resume(self.identity)


def _has_instance(reg: Registration, principal: str) -> bool:
    return any(i.principal == principal for i in reg.identities)


class Runtime:
    """One session against a store. `Runtime()` uses a fresh `MemoryStore`.

    >>> rt = Runtime()
    >>> c = rt.get_cell({"note": 1})
    >>> _ = c.set({"title": "hi"}); rt.settle()
    >>> c.key("title").get()
    'hi'
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
        self.store: StoreBase = store if store is not None else MemoryStore()
        self.replica = Replica(self.store)
        # The capability for the runtime's own bookkeeping (page records, receipts):
        # claimed before any user code can see the replica, and never handed out.
        self._authority = self.replica.claim_authority()
        self.scheduler = Scheduler(self.replica, clock=clock, authority=self._authority)
        self._host = _Host(self, self.scheduler)
        self.runner = Runner(self)
        self.on_navigate = on_navigate
        """Called with each page a navigation opened, once it is running (a UI shows it)."""
        self._pages_book = Pages(self)
        self._sends = Sends(self)
        self._server: PageServer | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<Runtime space={self.space!r} as {self.identity.principal}/"
            f"{self.identity.session}{state}>"
        )

    @staticmethod
    def of(cell: Cell) -> Runtime | None:
        """The runtime that made `cell` (its `get_cell`, a result it returned), or None
        for a cell made without one. Views use it to act on the cell's runtime."""
        if not isinstance(cell, Cell):
            raise PatternError(f"Runtime.of: expected a Cell, got {cell!r}")
        host = cell.host
        return host.runtime if isinstance(host, _Host) else None

    @property
    def closed(self) -> bool:
        """True once `close()` or `aclose()` ran."""
        return self._closed

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the runtime and its `inspect()` snapshot."""
        return mimebundle(repr(self), {} if self._closed else self.inspect())

    # -- lifecycle
    def close(self) -> None:
        """Stop reacting and disconnect from the store (idempotent). The store stays open.

        Local registrations end; durable intent (open pages) stays, so a new
        runtime's `resume()` starts them again.
        """
        if self._closed:
            return
        if self._server is not None:
            self._server.close()  # claims released while the runtime still works
        self._closed = True
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
            if not self._closed:
                await self.idle()
        finally:
            self.close()

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
        if self._closed:
            raise CellweaveError(f"{self!r} is closed")

    # -- identity views
    def session(self, principal: str, session: str) -> Session:
        """A view acting for `(principal, session)`: its cells resolve that identity's instances."""
        self._require_open()
        return Session(
            self, Identity(_check_name(principal, "principal"), _check_name(session, "session"))
        )

    # -- transactions and cells
    def _edit(self, identity: Identity, commit_gated: bool) -> Transaction:
        self._require_open()
        check.check_bool(commit_gated, "rt.edit", "commit_gated")
        tx = self.replica.edit(identity)
        if commit_gated:
            tx.meta["commit_gated"] = True
        return tx

    def edit(self, *, commit_gated: bool = False) -> Transaction:
        """Open a transaction. With `commit_gated=True`, starts launched through it
        install only after it commits (and never, if a stop comes first)."""
        return self._edit(self.identity, commit_gated)

    def _get_cell(
        self, identity: Identity, cause: Any, scope: Scope, tx: Transaction | None
    ) -> Cell:
        self._require_open()
        check_scope(scope, where=f"get_cell({cause!r})")
        check.check_tx(tx, f"rt.get_cell({cause!r})", optional=True)
        link = Link(self.space, entity_id(cause), scope)
        cell = Cell(self.replica, identity, link, host=self._host)
        return cell.with_tx(tx) if tx is not None else cell

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        """The cell whose id derives from `cause` alone (dict key order does not matter).

        `scope` is a separate coordinate of the address: the same cause at two
        scopes has the same id, and a "user"/"session" scope resolves this
        runtime's own instance.
        """
        return self._get_cell(self.identity, cause, scope, tx)

    # -- setting up and running patterns
    def _check_run(
        self,
        identity: Identity,
        tx: Transaction,
        pattern: Pattern,
        argument: Any,
        result: Cell,
        what: str,
    ) -> Link:
        self._require_open()
        check.check_tx(tx, f"rt.{what}")
        if not isinstance(pattern, Pattern):
            raise ArgumentError(
                f"rt.{what}: pattern must be a @pattern, {pattern!r} is not a @pattern"
            )
        if not isinstance(argument, Mapping):
            raise ArgumentError(
                f"rt.{what}({pattern.identity}): the argument must be a dict of values or"
                f" cells, got {type(argument).__name__}"
            )
        pattern._argument(argument, f"rt.{what}")
        self._check_own(tx, argument, result, f"rt.{what}({pattern.identity})")
        if not isinstance(result, Cell):
            raise ArgumentError(
                f"rt.{what}({pattern.identity}): the result must be a Cell, got {result!r}"
            )
        link = result.link()
        if link.path:
            raise PatternError(
                f"rt.{what}({pattern.identity}): the result {result!r} is a path inside a"
                " document; a result is a whole cell (rt.get_cell(...))"
            )
        if tx.identity != identity or result.identity != identity:
            raise OwnershipError(
                f"rt.{what}({pattern.identity}): the transaction acts for {tx.identity!r} and"
                f" the result cell for {result.identity!r}; both must be {identity!r}"
            )
        for name, value in argument.items():
            if isinstance(value, Cell):
                # Stored as a link, it would silently name `identity`'s own instance.
                check.own_cell(identity, value, f"rt.{what}({pattern.identity}): argument {name!r}")
        return link

    def _check_own(self, tx: Transaction, argument: Any, result: Any, where: str) -> None:
        """Refuse a transaction of another runtime, and cells of another store anywhere in
        the argument or as the result (their address would name this store's document of
        the same name). A cell of another runtime on the same store is linked as itself."""
        if isinstance(tx, Transaction) and tx.replica is not self.replica:
            raise InvalidArgumentError(
                f"{where}: {tx!r} was opened by session {tx.replica.session_id} on"
                f" {tx.replica.store!r}, not by this runtime (session"
                f" {self.replica.session_id} on {self.store!r}); use this runtime's edit()"
            )
        stack: list[Any] = [result, *argument.values()]
        while stack:
            value = stack.pop()
            if isinstance(value, Cell):
                check_same_store(value, self.replica, where)
            elif isinstance(value, Mapping):
                stack.extend(value.values())
            elif isinstance(value, (list, tuple)):
                stack.extend(value)

    def _setup(
        self,
        identity: Identity,
        tx: Transaction,
        pattern: Pattern,
        argument: Any,
        result: Cell,
        what: str,
    ) -> Cell:
        link = self._check_run(identity, tx, pattern, argument, result, what)
        checked = pattern.prepare(argument, f"rt.{what}")  # raises before anything is written
        self.runner.stage_setup(tx, pattern, checked, link, f"rt.{what}")
        if what == "setup":
            self.runner.switch_on_commit(tx, pattern, link)
        return result

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
        return self._setup(self.identity, tx, pattern, argument, result, "setup")

    def _run(
        self, identity: Identity, tx: Transaction, pattern: Pattern, argument: Any, result: Cell
    ) -> Cell:
        self._setup(identity, tx, pattern, argument, result, "run")
        self.runner.launch(
            tx,
            pattern,
            result.link(),
            launch="run",
            chain=(),
            gated=bool(tx.meta.get("commit_gated")),
        )
        return result

    def run(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        """Set up `pattern` on `argument` into `result` and start it; returns `result`.

        A result already running the same pattern only has its argument
        updated. If `tx` does not become durable the run is rolled back (its
        registration released); on a stale basis it is kept and the setup
        writes are owed (run again to re-issue them). With a commit-gated `tx`
        the start installs only after the commit.
        """
        return self._run(self.identity, tx, pattern, argument, result)

    def _start(self, identity: Identity, cell: Cell) -> asyncio.Future[bool]:
        self._require_open()
        if not isinstance(cell, Cell):
            check.check_cell(cell, "rt.start")
        check_same_store(cell, self.replica, "rt.start")
        if cell.identity != identity:
            check.own_cell(identity, cell, "rt.start")
        loop = running_loop()
        if loop is None:
            raise CellweaveError(
                f"rt.start({cell!r}) needs a running event loop: call it from async code"
                " (await rt.start(cell)), e.g. inside asyncio.run(...) or a notebook"
            )
        self.replica.mailbox.attach(loop)
        return _future(loop, self.runner.start(cell.link(), identity))

    def start(self, cell: Cell) -> asyncio.Future[bool]:
        """Start the result `cell` names (following links); call it inside a running loop.

        The attempt is registered (visible to `stop` and `release`) before this
        returns. It syncs every document it visits — the root, each link hop,
        the pattern, the run's documents — so a held load holds it there. The
        future resolves `True` only if this start left the result running and
        claimed an independent lifetime (decided in a later loop step).
        """
        return self._start(self.identity, cell)

    def key(self, cell: Cell) -> Key:
        """The registration key of the result `cell` names (its whole document instance)."""
        self._require_open()
        check.check_cell(cell, "rt.key")
        check_same_store(cell, self.replica, "rt.key")
        return docs.root(cell.link()).key(cell.identity)

    def _stop(
        self, identity: Identity, cell: Cell, generation: int | None, *, operator: bool
    ) -> Pending[None]:
        """`operator`: the runtime's own call (`rt.stop`), which may end any run; a
        session's stop ends only what its principal launched or opened (`_boundary`)."""
        self._require_open()
        # Arguments and the principal boundary first, whatever `generation` says: a
        # guessed generation must not reach what is not this identity's to end.
        # (Checks inlined where they pass: stop and start are what churn costs.)
        if generation is not None and type(generation) is not int:
            check.check_generation(generation, "rt.stop")
        if not isinstance(cell, Cell):
            check.check_cell(cell, "rt.stop")
        check_same_store(cell, self.replica, "rt.stop")
        if operator or cell.identity == identity:
            key = docs.root(cell.link()).key(cell.identity)
        else:
            key = check.own_cell(identity, cell, "session.stop")
        own, other = self._pages_book.find(cell, identity)
        if own is None and other is not None:
            raise OwnershipError(
                f"cannot stop page {cell!r}: it belongs to {other!r}, not {identity.principal!r}"
            )
        durable: Pending[None] = _DONE
        if own is not None:
            key = own.key or key
            if generation is not None:
                reg = self.runner.registrations.get(key)
                if reg is None or reg.generation != generation:
                    # A stale generation does nothing: not to the result, not to its page.
                    self.runner.trace.record("decline", key, reason="stale generation", op="stop")
                    return _DONE
            # Decision before cleanup: the stop is recorded before anything is cancelled,
            # so a restart never resumes a page someone stopped.
            last_page, durable = self._pages_book.stop(own, identity)
            shared = key in self.runner.registrations and bool(
                self.runner.holders(key) - {identity.principal}
            )
            if not operator and (not last_page or shared):
                # The page was hers to close; the run it showed is also held by another
                # principal's page or launch, which is not hers to end: only her
                # instances and her claim on its lifetime go. (With nothing registered
                # yet, her stop reaches the starts in flight as a page stop always did.)
                self.runner.let_go(key, identity.principal, why="page stop")
                return durable
            if not last_page:
                return durable  # another principal's page still holds the shared result
        else:
            if not operator:
                holders = self.runner.holders(key)
                registered = key in self.runner.registrations
                check.may_end(holders, identity, key, "session.stop", registered=registered)
                if holders - {identity.principal}:
                    # Shared with other principals' launches: her stop ends her part only.
                    if generation is None or self._generation_is(key, generation):
                        self.runner.let_go(key, identity.principal, why="session.stop")
                    return _DONE
            if other is None and generation is None:
                # Not a page this runtime opened or resumed; the store may still record it
                # open (another runtime opened it): that record is removed too.
                durable = self._pages_book.stop_recorded(cell, identity) or _DONE
        self.runner.stop(
            key, generation=generation, principal=None if operator else identity.principal
        )
        return durable

    def _generation_is(self, key: Key, generation: int) -> bool:
        reg = self.runner.registrations.get(key)
        if reg is not None and reg.generation == generation:
            return True
        self.runner.trace.record("decline", key, reason="stale generation", op="stop")
        return False

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
        return self._stop(self.identity, cell, generation, operator=True)

    def _release(
        self, identity: Identity, cell: Cell, token: Registration | None, *, operator: bool
    ) -> None:
        self._require_open()
        check.check_cell(cell, "rt.release")
        check_same_store(cell, self.replica, "rt.release")
        if operator or cell.identity == identity:
            key = docs.root(cell.link()).key(cell.identity)
        else:
            key = check.own_cell(identity, cell, "session.release")
        if token is not None:
            if not isinstance(token, Registration):
                raise ArgumentError(
                    f"rt.release: token must be a Registration (rt.registration(cell)) or None,"
                    f" got {type(token).__name__} {token!r}"
                )
            if token.key != key:
                raise ArgumentError(
                    f"rt.release: token {token!r} is the registration of {token.key}, not of"
                    f" {key} (the result {cell!r} names)"
                )
        if not operator:
            holders = self.runner.holders(key)
            registered = key in self.runner.registrations
            check.may_end(holders, identity, key, "session.release", registered=registered)
            if holders - {identity.principal}:
                # Shared with other principals' launches: her release lets go of her part
                # only, and declines as a release does (a replacement, a lifetime).
                if not self.runner.declines_release(key, token, "session.release"):
                    self.runner.let_go(key, identity.principal, why="session.release")
                return
        self.runner.release(key, token, why="rt.release")

    def release(self, cell: Cell, token: Registration | None = None) -> None:
        """The launch-scoped end: ends only the registration `token` names (any, if None),
        and declines for a result with an independent lifetime or a start in flight."""
        self._release(self.identity, cell, token, operator=True)

    def stop_all(self) -> None:
        """End every registration, pending start and lifetime; invalidate every start."""
        self._require_open()
        self.runner.stop_all()

    def registration(self, cell: Cell) -> Registration | None:
        """The current registration (token) of the result, or None."""
        self._require_open()
        check.check_cell(cell, "rt.registration")
        return self.runner.registrations.get(self.key(cell))

    def registrations(self) -> frozenset[Key]:
        self._require_open()
        return self.runner.registrations.keys()

    def pending_starts(self) -> frozenset[Key]:
        self._require_open()
        return self.runner.pending.keys()

    def lifetimes(self) -> frozenset[Key]:
        self._require_open()
        return frozenset(self.runner.lifetimes)

    # -- events
    def _send(self, identity: Identity, stream: Cell, event: Any, event_id: str | None) -> Sent:
        self._require_open()
        check.check_cell(stream, "rt.send", "stream")
        check_same_store(stream, self.replica, "rt.send")
        check.own_cell(identity, stream, "rt.send")
        check.check_optional_str(event_id, "rt.send", "event_id")
        if stream.identity != identity:
            stream = Cell(self.replica, identity, stream.link(), host=self._host)
        sent = Sent(self.idle, lambda: self._closed)
        self._sends.send(identity, stream, event, event_id, sent)
        return sent

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
        return self._send(self.identity, stream, event, event_id)

    def handler_label(self, stream: Cell) -> str | None:
        """The label of the handler an event sent to `stream` would reach (links
        followed, as `send` follows them), or None when none is bound there. Views
        use it to show streams as buttons."""
        self._require_open()
        if not isinstance(stream, Cell):
            raise PatternError(f"rt.handler_label: expected a Cell, got {stream!r}")
        try:
            target = stream.resolve()
        except CellweaveError:
            return None
        return self.scheduler.handler_label(target)

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
        self._require_open()
        if self._server is not None and not self._server.stopped:
            raise CellweaveError(f"{self!r} already serves pages ({self._server!r})")
        server = PageServer(
            self, lease=lease, heartbeat=heartbeat, clock=clock, probe=probe, batch=batch
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

    def _open_page(
        self, target: Link, identity: Identity, *, via: str, follow: bool = False
    ) -> Pending[bool]:
        """Record `target` as an open page of `identity`'s principal, then start it."""
        return self._pages_book.open(target, identity, via=via, follow=follow)

    def open_page(self, cell: Cell, *, follow: bool = False) -> asyncio.Future[bool]:
        """Open the result `cell` names as a page of the cell's principal: recorded
        durably first, then started (it gets an independent lifetime). Resolves True
        once it runs; if the record does not become durable it fails, and if the start
        fails or is superseded the record is withdrawn.

        A cell that leads to a result through a link held in a list (a map
        container's slot, `cards.key(i)`) pins the page to the result the slot holds
        now; with `follow=True` the page follows the slot instead (it runs what the
        slot holds when it starts, and again at each resume)."""
        self._require_open()
        check.check_cell(cell, "rt.open_page")
        check_same_store(cell, self.replica, "rt.open_page")
        check.check_bool(follow, "rt.open_page", "follow")
        loop = running_loop()
        if loop is None:
            raise CellweaveError(
                f"rt.open_page({cell!r}) needs a running event loop: call it from async code"
            )
        self.replica.mailbox.attach(loop)
        return _future(
            loop, self._open_page(cell.link(), cell.identity, via="open_page", follow=follow)
        )

    def _pages(self, identity: Identity, principal: str | None) -> list[Cell]:
        self._require_open()
        check.check_optional_str(principal, "rt.pages", "principal")
        if principal is not None and principal != identity.principal:
            raise OwnershipError(
                f"cannot list the pages of {principal!r}: this runtime acts for"
                f" {identity.principal!r} (use rt.session({principal!r}, ...) to act for them)"
            )
        return [cell for _pid, cell in self._pages_book.open_cells(identity)]

    def pages(self, principal: str | None = None) -> list[Cell]:
        """Pages (results started in their own right) owned by `principal` (default: this
        runtime's). Another principal's pages raise `OwnershipError`."""
        return self._pages(self.identity, principal)

    async def _resume(self, identity: Identity) -> list[Cell]:
        import asyncio  # loaded: this coroutine runs on a loop

        self._require_open()
        loop = asyncio.get_running_loop()
        self.replica.mailbox.attach(loop)
        await self.replica.sync([docs.pages_link(self.space).key(identity)])
        # Closed records an older version kept would make every open and stop cost
        # O(pages ever opened); dropped here, in one commit that nothing waits on.
        self._pages_book.compact(identity)
        pages = self._pages_book.open_cells(identity)
        starts = [
            _future(loop, self._pages_book.resume_one(pid, cell, identity)) for pid, cell in pages
        ]
        outcomes = await asyncio.gather(*starts, return_exceptions=True)
        resumed: list[Cell] = []
        failures: dict[str, BaseException] = {}
        for (_pid, cell), outcome in zip(pages, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                failures[str(cell.link())] = outcome
            elif outcome:
                resumed.append(cell)
        if failures:
            names = ", ".join(failures)
            raise ResumeError(
                f"resumed {len(resumed)} pages; {len(failures)} could not start: {names}",
                resumed=list(resumed),
                failures=failures,
            )
        return resumed

    async def resume(self) -> list[Cell]:
        """Start again every page recorded open for this runtime's principal (after a
        restart, also after `kill -9`); returns the pages now running. Each page starts
        on its own: if some cannot, the rest still do, and `ResumeError` reports them."""
        return await self._resume(self.identity)

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
        import asyncio  # loaded: this coroutine runs on a loop

        self._require_open()
        loop = asyncio.get_running_loop()
        while True:
            await self.scheduler.idle()
            if not self.runner.busy():
                return
            woke: asyncio.Future[None] = loop.create_future()

            def wake(woke: asyncio.Future[None] = woke) -> None:
                if not woke.done():
                    woke.set_result(None)

            self.runner.add_idle_waiter(wake)
            await woke

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

    def _callback(self, name: str, fn: Callable[..., Any], cell: Cell) -> None:
        """Call an application callback; an error it raises is contained and recorded
        (it must not escape into whatever delivered the store's answer)."""
        try:
            fn(cell)
        except Exception as exc:
            err = CallbackError(f"{name}({cell!r}) raised {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            self.scheduler.errors_log.add("callback", name, str(cell.link()), err)

    def _run_entries(self, regs: Iterable[Registration], pages: list[Cell]) -> list[dict[str, Any]]:
        """One entry per registration: what runs, who launched it, what keeps it alive."""
        page_keys = {self.key(c) for c in pages}
        lifetimes = self.runner.lifetimes
        return [
            {
                "key": str(reg.key),
                "cause": describe_id(reg.key.id),
                "generation": reg.generation,
                "pattern": reg.pattern,
                "launch": reg.launch,
                "depth": len(reg.chain),
                "parent": str(reg.chain[-1]) if reg.chain else None,
                "state": describe_state(self.runner, reg),
                "principals": sorted({i.principal for i in reg.identities}),
                # What keeps it running: its launch (a parent's node, or a run call),
                # an independent lifetime (a start), a page (a lifetime someone opened).
                "kept_by": [
                    *(["page"] if reg.key in page_keys else []),
                    *(["lifetime"] if reg.key in lifetimes else []),
                    *(["launch"] if reg.chain or reg.key not in lifetimes else []),
                ],
            }
            for reg in regs
        ]

    def _visible_runs(self, principal: str) -> dict[str, Registration]:
        """The runs `principal` may inspect, by key: those with an instance of theirs
        and the runs each descends from. O(registrations + depth per run)."""
        regs = {r.key: r for r in self.runner.registrations}
        keep: set[Key] = set()
        for reg in regs.values():
            if _has_instance(reg, principal):
                keep.add(reg.key)
                keep.update(k for k in reg.chain if k in regs)
        return {str(r.key): r for r in regs.values() if r.key in keep}

    def inspect_run(self, key: str, *, principal: str | None = None) -> dict[str, Any]:
        """The pattern graph of the run registered under `key` (as `inspect()` names
        it): each node's index, kind, target and inputs, and how often its scheduler
        nodes (or handler) ran here. With `principal`, only a run that principal's
        `session.inspect()` shows is given; others raise `OwnershipError` as a
        missing one does."""
        self._require_open()
        if not isinstance(key, str):
            raise PatternError(f"rt.inspect_run: key must be a str from inspect(), got {key!r}")
        if principal is None:
            reg = next((r for r in self.runner.registrations if str(r.key) == key), None)
        else:
            reg = self._visible_runs(principal).get(key)
        if reg is None:
            raise OwnershipError(f"rt.inspect_run: no run {key!r} that {principal!r} may inspect")
        graph = load_pattern(reg.pattern).graph.to_json()
        for node in graph["nodes"]:
            tracked = reg.nodes.get(node["index"], [])
            node["instances"] = len(tracked)
            node["runs"] = sum(getattr(n, "runs", 0) for n in tracked)
        children = [str(r.key) for r in self.runner.registrations if r.chain[-1:] == (reg.key,)]
        return {"key": key, "pattern": reg.pattern, "graph": graph, "children": children}

    def inspect(self, principal: str | None = None) -> Inspection:
        """A JSON-serialisable snapshot: registrations, pending starts, lifetimes, pages,
        node counts, starts in flight and the recent lifecycle trace. Documents are named
        by id; each registration's `cause`, and `causes` (id -> cause, for every id the
        snapshot names whose cause this process knows), say what they were made from."""
        self._require_open()
        runner = self.runner
        pages = self._pages(self.identity, principal)
        pending = runner.pending.keys()
        named = [
            *(reg.key.id for reg in runner.registrations),
            *(k.id for k in pending),
            *(k.id for k in runner.lifetimes),
            *(c.id for c in pages),
        ]
        causes = {eid: text for eid in named if (text := describe_id(eid)) is not None}
        return Inspection(
            {
                "identity": {
                    "principal": self.identity.principal,
                    "session": self.identity.session,
                },
                "registrations": self._run_entries(runner.registrations, pages),
                "pending_starts": sorted(map(str, pending)),
                "lifetimes": sorted(str(k) for k in runner.lifetimes),
                "starts_in_flight": len(runner.attempts),
                "pages": [str(c.link()) for c in pages],
                "claims": self._claims_view(principal or self.identity.principal),
                "causes": causes,
                "pages_stop_failed": [
                    {"page": str(rec.link), "error": repr(rec.stop_error)}
                    for (owner, _pid), rec in self._pages_book.stop_failed.items()
                    if owner == (principal or self.identity.principal)
                ],
                "nodes": {
                    k: v
                    for k, v in self.scheduler.statistics().items()
                    if k
                    in ("nodes", "live", "invalid", "deferred", "events_queued", "passes", "runs")
                },
                "trace": runner.trace.snapshot(),
                "errors": [record.as_dict() for record in self.scheduler.errors()],
                "failing": [
                    {"node": n.label, "error": f"{type(n.error).__name__}: {n.error}"}
                    for n in self.scheduler.failing()
                ],
            }
        )

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


def _resolved() -> Pending[None]:
    done: Pending[None] = Pending()
    done._resolve(None)
    return done


_DONE: Final = _resolved()
"""What a stop that records nothing returns: already durable (one shared, immutable once done)."""


def _future(loop: asyncio.AbstractEventLoop, pending: Pending[bool]) -> asyncio.Future[bool]:
    fut: asyncio.Future[bool] = loop.create_future()

    def done(p: Pending[bool]) -> None:
        if fut.done():
            return
        try:
            fut.set_result(p.result())
        except Exception as exc:
            fut.set_exception(exc)

    pending.add_done_callback(done)
    return fut

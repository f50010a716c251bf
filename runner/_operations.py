"""What a runtime and its sessions do for an identity, with every check on the way in.

`Runtime` and `Session` are two faces of one set of operations: the runtime
acts for its own identity (and, as the operator, may end any run), a session
for the (principal, session) it was made for. Both call `Operations` with that
identity. Each operation checks its arguments (`ArgumentError`), that cells
and transactions belong to this runtime's store, and the principal boundary (a
session ends only what its principal launched or opened: `_boundary`), then
hands the work to the runner, the pages or the sends.

Invariants
- once `closed`, every operation raises (`require_open`).
Not here: the user-facing documentation of each call (`Runtime`, `Session`),
the ownership rules themselves (`_core`), inspection (`_inspection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from cells import (
    Cell,
    CellweaveError,
    Identity,
    InvalidArgumentError,
    Link,
    Pending,
    Replica,
    Scope,
    StoreBase,
    Transaction,
    check_same_store,
    check_scope,
    entity_id,
    running_loop,
)
from scheduler import Scheduler

from . import _boundary as check
from . import _docs as docs
from ._builder import Pattern
from ._host import SchedulerHost
from ._pages import Pages
from ._registrations import Key, Registration
from ._runner import Runner
from ._send import Sends
from ._sent import Sent
from .errors import ArgumentError, OwnershipError, PatternError, ResumeError

if TYPE_CHECKING:
    # At run time asyncio is imported only inside coroutines (a loop runs, so it is
    # loaded); "is a loop running" is `cells.running_loop()`: `import runner` stays
    # free of asyncio's 20 ms for programs that never await.
    import asyncio


class Operations:
    """The operations behind `Runtime` and `Session` (see the module docstring)."""

    def __init__(
        self,
        *,
        space: str,
        identity: Identity,
        store: StoreBase,
        replica: Replica,
        scheduler: Scheduler,
        host: SchedulerHost,
        runner: Runner,
        pages_book: Pages,
        sends: Sends,
    ) -> None:
        self.space = space
        self.identity = identity
        """The runtime's own identity (its `repr` names it)."""
        self.store = store
        self.replica = replica
        self.scheduler = scheduler
        self.host = host
        self.runner = runner
        self.pages_book = pages_book
        self.sends = sends
        self.closed = False
        """Set once by `Runtime.close`; from then on every operation raises."""

    def runtime_repr(self) -> str:
        """How the runtime these operations belong to reads (its `repr`)."""
        state = " closed" if self.closed else ""
        return (
            f"<Runtime space={self.space!r} as {self.identity.principal}/"
            f"{self.identity.session}{state}>"
        )

    def require_open(self) -> None:
        if self.closed:
            raise CellweaveError(f"{self.runtime_repr()} is closed")

    def edit(self, identity: Identity, commit_gated: bool) -> Transaction:
        self.require_open()
        check.check_bool(commit_gated, "rt.edit", "commit_gated")
        tx = self.replica.edit(identity)
        if commit_gated:
            tx.meta["commit_gated"] = True
        return tx

    def get_cell(
        self, identity: Identity, cause: Any, scope: Scope, tx: Transaction | None
    ) -> Cell:
        self.require_open()
        check_scope(scope, where=f"get_cell({cause!r})")
        check.check_tx(tx, f"rt.get_cell({cause!r})", optional=True)
        link = Link(self.space, entity_id(cause), scope)
        cell = Cell(self.replica, identity, link, host=self.host)
        return cell.with_tx(tx) if tx is not None else cell

    def _check_run(
        self,
        identity: Identity,
        tx: Transaction,
        pattern: Pattern,
        argument: Any,
        result: Cell,
        what: str,
    ) -> Link:
        self.require_open()
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
        _check_parameters(pattern, argument, f"rt.{what}")
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

    def setup(
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

    def run(
        self, identity: Identity, tx: Transaction, pattern: Pattern, argument: Any, result: Cell
    ) -> Cell:
        self.setup(identity, tx, pattern, argument, result, "run")
        self.runner.launch(
            tx,
            pattern,
            result.link(),
            launch="run",
            chain=(),
            gated=bool(tx.meta.get("commit_gated")),
        )
        return result

    def start(self, identity: Identity, cell: Cell) -> asyncio.Future[bool]:
        self.require_open()
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

    def key(self, cell: Cell) -> Key:
        """The registration key of the result `cell` names (its whole document instance)."""
        self.require_open()
        check.check_cell(cell, "rt.key")
        check_same_store(cell, self.replica, "rt.key")
        return docs.root(cell.link()).key(cell.identity)

    def stop(
        self, identity: Identity, cell: Cell, generation: int | None, *, operator: bool
    ) -> Pending[None]:
        """`operator`: the runtime's own call (`rt.stop`), which may end any run; a
        session's stop ends only what its principal launched or opened (`_boundary`)."""
        self.require_open()
        self.runner.wake_dormant()  # a dormant element child ends as a running one would
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
        own, other = self.pages_book.find(cell, identity)
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
            last_page, durable = self.pages_book.stop(own, identity)
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
                durable = self.pages_book.stop_recorded(cell, identity) or _DONE
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

    def release(
        self, identity: Identity, cell: Cell, token: Registration | None, *, operator: bool
    ) -> None:
        self.require_open()
        self.runner.wake_dormant()  # (as `stop`)
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

    def send(self, identity: Identity, stream: Cell, event: Any, event_id: str | None) -> Sent:
        self.require_open()
        check.check_cell(stream, "rt.send", "stream")
        check_same_store(stream, self.replica, "rt.send")
        check.own_cell(identity, stream, "rt.send")
        check.check_optional_str(event_id, "rt.send", "event_id")
        if stream.identity != identity:
            stream = Cell(self.replica, identity, stream.link(), host=self.host)
        sent = Sent(self.idle, lambda: self.closed)
        self.sends.send(identity, stream, event, event_id, sent)
        return sent

    def open_page(self, cell: Cell, *, follow: bool = False) -> asyncio.Future[bool]:
        """`rt.open_page`: the page is the cell's principal's (a session checks first)."""
        self.require_open()
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
            loop, self.pages_book.open(cell.link(), cell.identity, via="open_page", follow=follow)
        )

    def pages(self, identity: Identity, principal: str | None) -> list[Cell]:
        self.require_open()
        check.check_optional_str(principal, "rt.pages", "principal")
        if principal is not None and principal != identity.principal:
            raise OwnershipError(
                f"cannot list the pages of {principal!r}: this runtime acts for"
                f" {identity.principal!r} (use rt.session({principal!r}, ...) to act for them)"
            )
        return [cell for _pid, cell in self.pages_book.open_cells(identity)]

    async def resume(self, identity: Identity) -> list[Cell]:
        import asyncio  # loaded: this coroutine runs on a loop

        self.require_open()
        loop = asyncio.get_running_loop()
        self.replica.mailbox.attach(loop)
        await self.replica.sync([docs.pages_link(self.space).key(identity)])
        # Closed records an older version kept would make every open and stop cost
        # O(pages ever opened); dropped here, in one commit that nothing waits on.
        self.pages_book.compact(identity)
        if self.pages_book.served is not None:
            # Served under claims (pages="served", or this runtime serves pages): a
            # serving process runs them, fenced; started here they would run twice.
            return []
        pages = self.pages_book.open_cells(identity)
        starts = [
            _future(loop, self.pages_book.resume_one(pid, cell, identity)) for pid, cell in pages
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

    async def idle(self) -> None:
        """Wait until nothing is runnable, no verdict, load or start is in flight, and no
        event is queued.

        Raises no error of a computation, handler or callback: those are not the
        waiter's (each went to its own home: the value's `pull()` and observers, the
        send's handle, `errors()` and the `cellweave` log)."""
        import asyncio  # loaded: this coroutine runs on a loop

        self.require_open()
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


def _check_parameters(pattern: Pattern, argument: Mapping[str, Any], where: str) -> None:
    """An argument naming a parameter the pattern lacks is refused before anything else
    is looked at (the message `Pattern.prepare` gives for it, which runs later)."""
    unknown = [k for k in argument if k not in pattern.params]
    if unknown:
        raise PatternError(
            f"{where}: pattern {pattern.identity} has no parameter {unknown[0]!r}"
            f" (its parameters: {', '.join(pattern.params) or 'none'})"
        )


def _resolved() -> Pending[None]:
    done: Pending[None] = Pending()
    done.set_result(None)
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

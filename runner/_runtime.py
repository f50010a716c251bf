"""`Runtime`: the facade users hold — a store, a replica, a scheduler, an identity.

A runtime is one session against a store: its own replica (several runtimes
on one store are separate sessions and conflict for real) and its own
scheduler. Cells it hands out resolve scoped documents for its identity and
are reactive: `pull`, `sink` and `observe` go through its scheduler.
`rt.session(principal, session)` is a view acting for another resolution
identity on the same replica and scheduler (a service serving many users).

Works in a plain script and inside an already-running event loop (Jupyter):
propagation is synchronous (`settle()`), the loop only delivers verdicts.

Not here yet (issue 4/5): `setup`/`run`/`start`/`stop`/`release` and the
registrations they keep.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from cells import (
    Cell,
    Identity,
    Link,
    MemoryStore,
    Replica,
    Scope,
    StoreBase,
    Transaction,
    entity_id,
)
from cells._address import check_scope
from scheduler import Clock, Scheduler

from .errors import OwnershipError


class _Host:
    """Gives cells `pull` / `sink` / `observe` through a scheduler."""

    __slots__ = ("scheduler",)

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    async def pull(self, cell: Cell) -> Any:
        return await self.scheduler.pull(cell)

    def sink(self, cell: Cell, fn: Callable[[Any], None]) -> Callable[[], None]:
        return self.scheduler.sink(cell, fn)

    def observe(self, cell: Cell) -> Any:
        return self.scheduler.observe(cell)


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise OwnershipError(f"Runtime: {what} must be a non-empty str, got {value!r}")
    return value


class Session:
    """A view of a runtime acting for one resolution identity (principal, session)."""

    def __init__(self, runtime: Runtime, identity: Identity) -> None:
        self.runtime = runtime
        self.identity = identity

    def __repr__(self) -> str:
        return f"<Session {self.identity.principal}/{self.identity.session} of {self.runtime!r}>"

    def edit(self, *, commit_gated: bool = False) -> Transaction:
        return self.runtime._edit(self.identity, commit_gated)

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        return self.runtime._get_cell(self.identity, cause, scope, tx)


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
    ) -> None:
        self.space = _check_name(space, "space")
        self.identity = Identity(
            _check_name(principal, "principal"), _check_name(session, "session")
        )
        self.store: StoreBase = store if store is not None else MemoryStore()
        self.replica = Replica(self.store)
        self.scheduler = Scheduler(self.replica, clock=clock)
        self._host = _Host(self.scheduler)
        self._closed = False

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<Runtime space={self.space!r} as {self.identity.principal}/"
            f"{self.identity.session}{state}>"
        )

    # -- lifecycle
    def close(self) -> None:
        """Stop reacting and disconnect from the store (idempotent). The store stays open."""
        if self._closed:
            return
        self._closed = True
        self.scheduler.close()
        self.replica.close()

    async def aclose(self) -> None:
        """Wait for in-flight commits to get their verdicts, then close."""
        if not self._closed:
            await self.scheduler.idle()
        self.close()

    async def __aenter__(self) -> Runtime:
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
            from cells import CellweaveError

            raise CellweaveError(f"{self!r} is closed")

    # -- identity views
    def session(self, principal: str, session: str) -> Session:
        """A view acting for `(principal, session)`: its cells resolve that identity's instances."""
        return Session(
            self, Identity(_check_name(principal, "principal"), _check_name(session, "session"))
        )

    # -- transactions and cells
    def _edit(self, identity: Identity, commit_gated: bool) -> Transaction:
        self._require_open()
        tx = self.replica.edit(identity)
        if commit_gated:
            tx.meta["commit_gated"] = True
        return tx

    def edit(self, *, commit_gated: bool = False) -> Transaction:
        """Open a transaction. With `commit_gated=True`, starts launched through it
        install only after it commits (used by the runner's ownership rules)."""
        return self._edit(self.identity, commit_gated)

    def _get_cell(
        self, identity: Identity, cause: Any, scope: Scope, tx: Transaction | None
    ) -> Cell:
        self._require_open()
        check_scope(scope, where=f"get_cell({cause!r})")
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

    # -- running
    def settle(self) -> None:
        """Run everything runnable now, synchronously (a notebook cell sees its result)."""
        self._require_open()
        self.scheduler.settle()

    async def idle(self) -> None:
        """Wait until nothing is runnable, nothing is in flight and no event is queued."""
        self._require_open()
        await self.scheduler.idle()

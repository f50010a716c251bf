"""`Session`: a runtime's view acting for another resolution identity (principal, session).

What a service hands to code acting for one user: cells it returns resolve that
identity's instances of user- and session-scoped documents; runs, starts,
stops and pages act for it; its transactions touch only what the identity
resolves to; it ends only what the identity's principal launched or opened;
and it does not expose the runtime. Every call goes to the runtime's
`Operations` with this session's identity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import Cell, Identity, Pending, Scope, Transaction, check_same_store, mimebundle

from . import _boundary as check
from ._builder import Pattern
from ._inspection import inspect_session, run_cell
from ._operations import Operations
from ._registrations import Registration
from ._sent import Sent
from .errors import PatternError

if TYPE_CHECKING:
    import asyncio  # (annotations only: `import runner` stays free of asyncio)


class Session:
    """A view of a runtime acting for one resolution identity (principal, session).

    Cells it returns resolve that identity's instances of user- and
    session-scoped documents; runs, starts, stops and pages act for it. It is
    what a service hands to code acting for one user: its transactions touch
    only what the identity resolves to, it ends only what the identity's
    principal launched or opened, and it does not expose the runtime.
    """

    __slots__ = ("_ops", "identity")

    def __init__(self, ops: Operations, identity: Identity) -> None:
        self._ops = ops
        self.identity = identity

    def __repr__(self) -> str:
        ident = self.identity
        return f"<Session {ident.principal}/{ident.session} of {self._ops.runtime_repr()}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: who this session acts for, and its principal's pages."""
        pages = [repr(c) for c in self.pages()] if not self._ops.closed else []
        ident = self.identity
        return mimebundle(
            repr(self), {"principal": ident.principal, "session": ident.session, "pages": pages}
        )

    def edit(self, *, commit_gated: bool = False) -> Transaction:
        return self._ops.edit(self.identity, commit_gated)

    def cell(self, cell: Cell) -> Cell:
        """`cell`'s place as this session sees it: the same address, resolving
        user- and session-scoped documents for this session's identity."""
        if not isinstance(cell, Cell):
            raise PatternError(f"session.cell: expected a Cell, got {cell!r}")
        ops = self._ops
        check_same_store(cell, ops.replica, "session.cell")
        if cell.identity == self.identity and cell.tx is None:
            return cell
        return Cell(ops.replica, self.identity, cell.link(), host=ops.host)

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        return self._ops.get_cell(self.identity, cause, scope, tx)

    def setup(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        return self._ops.setup(self.identity, tx, pattern, argument, result, "setup")

    def run(self, tx: Transaction, pattern: Pattern, argument: Any, result: Cell) -> Cell:
        return self._ops.run(self.identity, tx, pattern, argument, result)

    def start(self, cell: Cell) -> asyncio.Future[bool]:
        return self._ops.start(self.identity, cell)

    def stop(self, cell: Cell, *, generation: int | None = None) -> Pending[None]:
        return self._ops.stop(self.identity, cell, generation, operator=False)

    def release(self, cell: Cell, token: Registration | None = None) -> None:
        self._ops.release(self.identity, cell, token, operator=False)

    def send(self, stream: Cell, event: Any, *, event_id: str | None = None) -> Sent:
        return self._ops.send(self.identity, stream, event, event_id)

    def pages(self) -> list[Cell]:
        return self._ops.pages(self.identity, self.identity.principal)

    def run_cell(self, key: str) -> Cell:
        """The result cell of the run `inspect()` names by `key`, as this session sees
        it (to stop or release it from an inspector). A run with no instance of this
        session's principal is refused like a missing one, with `OwnershipError`."""
        return run_cell(self._ops, self.identity, key)

    def inspect(self) -> dict[str, Any]:
        """What this session's principal may see of the runtime: the runs with an
        instance of that principal, and the runs they descend from (so the tree has
        its roots; `mine` is False on those), each with its parent and what keeps it
        alive; its pages, the pending starts of its principal, the lifetimes of
        those runs and the recent lifecycle trace of them."""
        return inspect_session(self._ops, self.identity)

    def open_page(self, cell: Cell, *, follow: bool = False) -> asyncio.Future[bool]:
        check.check_cell(cell, "session.open_page")
        check_same_store(cell, self._ops.replica, "session.open_page")
        check.own_cell(self.identity, cell, "session.open_page")
        return self._ops.open_page(self.cell(cell), follow=follow)

    async def resume(self) -> list[Cell]:
        return await self._ops.resume(self.identity)

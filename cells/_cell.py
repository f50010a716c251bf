"""`Cell`: a handle on one place (a document and a path), for one resolution identity.

Reads follow links (`get()` returns plain data: a list of links reads as the
list of values they point at). Writes follow links along the path, but
replace a link stored exactly at the cell itself. Outside a transaction each
write opens and commits its own; with `with_tx(tx)` they stage into `tx`.

`pull`, `sink` and `observe` need a scheduler; cells made by a `Runtime`
have one (their *host*). Cells made directly from a `Space` raise a clear
error for those three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._address import DocKey, Identity, Link, Path, PathElem, Place, as_link, check_path
from ._args import bad_arg, check_arg, check_callable
from ._codec import describe_id, entity_id
from ._display import mimebundle
from ._links import _VALUE_PATH, VALUE, read_value, resolve
from ._outcome import CommitResult
from ._pending import Pending
from ._replica import Replica
from ._store import StoreBase
from ._transaction import Transaction, TxReplica
from ._values import MISSING, Value, thaw
from .errors import CellweaveError, InvalidArgumentError, InvalidValueError, OwnershipError

if TYPE_CHECKING:
    from ._address import Scope


_new_cell = object.__new__


class CellHost(Protocol):
    """What a scheduler provides to cells: demand-driven reads and effects."""

    async def pull(self, cell: Cell) -> Value: ...

    def sink(self, cell: Cell, fn: Callable[[Value], None]) -> Callable[[], None]: ...

    def observe(self, cell: Cell) -> Any: ...

    def resolve(self, tx: Transaction, link: Link) -> Link:
        """Where `Cell.resolve()` ends: `resolve(tx, link)`, or a host's own end points
        (a runtime stops at a pattern run's result)."""
        ...

    def sink_patches(
        self, cell: Cell, fn: Callable[[list[dict[str, Any]]], None]
    ) -> Callable[[], None]: ...

    def observe_patches(self, cell: Cell) -> Any: ...


class Cell:
    """A place in a document, seen by one identity. Made by a `Space` or a `Runtime`."""

    __slots__ = ("_at", "_host", "_identity", "_replica")

    _tx: Transaction | None = None
    """The transaction the cell is bound to (`with_tx`): a slot of `_BoundCell` only. A
    cell bound to none, nearly every cell a program keeps, reads this None and holds no
    slot for it (64 bytes a cell instead of 72, 80 as allocated)."""

    _at: Place
    """Where the cell is: its `Link`, or for a cell of a whole shared document its
    document's `DocKey` (`Place`; `Space.cell` makes these): the key object the
    replica, the scheduler's nodes and the store then share, so the cell holds no link
    of its own (48 bytes a cell) and a write or a read of it makes no key. `link()`
    makes the link when asked."""

    def __init__(
        self,
        replica: Replica,
        identity: Identity,
        link: Place,
        *,
        host: CellHost | None = None,
    ) -> None:
        if type(link) is DocKey and link.scope != "space":
            raise InvalidArgumentError(
                f"Cell: a key names a cell's place only at scope 'space', got {link}"
            )
        self._replica = replica
        self._identity = identity
        self._at = link
        self._host = host

    # -- address
    @property
    def space(self) -> str:
        return self._at.space

    @property
    def id(self) -> str:
        return self._at.id

    @property
    def scope(self) -> Scope:
        return self._at.scope

    @property
    def path(self) -> Path:
        return self._at.path

    @property
    def identity(self) -> Identity:
        return self._identity

    @property
    def doc_key(self) -> DocKey:
        """The physical document instance this cell's identity selects (for a cell of a
        whole shared document, the key object it holds)."""
        return self._at.key(self._identity)

    @property
    def tx(self) -> Transaction | None:
        return self._tx

    @property
    def replica(self) -> Replica:
        """The replica (session) that made this cell; `replica.store` holds its documents."""
        return self._replica

    def link(self) -> Link:
        at = self._at
        return at if type(at) is Link else as_link(at)

    def place(self) -> Place:
        """Where the cell is as it holds it (`Place`): its link, or the key of the whole
        shared document it is (no link made). For a holder that keeps a cell's place
        (a `derive` node its inputs): `read_value` reads either."""
        return self._at

    def __repr__(self) -> str:
        # Named by the cause it was made from, when this process knows it (a dict
        # lookup, no store read): `Cell('notes', scope='user', space='default')`.
        bound = " (in tx)" if self._tx is not None else ""
        link = as_link(self._at)
        cause = describe_id(link.id)
        if cause is None:
            return f"Cell({link}{bound})"
        path = f", path={list(link.path)!r}" if link.path else ""
        return f"Cell({cause}, scope={link.scope!r}, space={link.space!r}{path}){bound}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Notebook display: the cell's name and its current value (`get()`, no scheduling)."""
        try:
            value = self.get()
        except CellweaveError as exc:
            value = f"<unreadable: {exc}>"
        return mimebundle(repr(self), None if value is MISSING else value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cell):
            return NotImplemented
        # (Compared and hashed as links: a cell holding a key equals one holding the
        # link to the same place.)
        return as_link(self._at) == as_link(other._at) and self._identity == other._identity

    def __hash__(self) -> int:
        return hash((as_link(self._at), self._identity))

    def _derive(self, link: Link) -> Cell:
        """The cell at `link`, for the same identity, host and transaction."""
        cell = Cell(self._replica, self._identity, link, host=self._host)
        tx = self._tx
        return cell if tx is None else cell.with_tx(tx)

    def key(self, *path: PathElem) -> Cell:
        """The cell at a nested path (`cell.key("items", 0)`)."""
        try:
            # The link checks every element of its path (`Link.__post_init__`): checked
            # once, not a second time here first (a UI makes a cell per edit and per pull).
            link = self._at.child(*path)
        except CellweaveError:
            # Only here is the message (and so the cell's repr) made: formatting it was
            # half of `key`.
            check_path(path, where=f"{self!r}.key()")
            raise
        # `Cell(...)` without `__init__`'s frame, as in `with_tx` (a bound cell's child is
        # bound too: `_BoundCell.key`).
        cell = _new_cell(Cell)
        cell._replica = self._replica
        cell._identity = self._identity
        cell._at = link
        cell._host = self._host
        return cell

    def __getitem__(self, elem: PathElem) -> Cell:
        return self.key(elem)

    def with_tx(self, tx: Transaction) -> Cell:
        """The same cell bound to `tx`: reads and writes go through it.

        `tx` may belong to another replica on the same store (the cell's address
        means the same document there); a transaction on another store raises
        `InvalidArgumentError` naming both."""
        if not isinstance(tx, Transaction):
            raise bad_arg(tx, where=f"{self!r}.with_tx()", name="tx", accepts="a Transaction")
        if tx._replica is not self._replica:  # (the usual case, same replica, is one compare)
            check_same_store(self, tx._replica, f"{self!r}.with_tx()")
        if tx.identity is not self._identity and tx.identity != self._identity:
            raise OwnershipError(
                f"{self!r} belongs to identity {self._identity!r}; the transaction acts for"
                f" {tx.identity!r}"
            )
        # `Cell(...)` without `__init__`'s frame: a batch of writes binds a cell per write.
        cell = _new_cell(_BoundCell)
        cell._replica = self._replica
        cell._identity = self._identity
        cell._at = self._at
        cell._tx = tx
        cell._host = self._host
        return cell

    # -- reads
    def _reader(self) -> Transaction:
        return self._tx if self._tx is not None else self._replica.reader(self._identity)

    def get(self) -> Value:
        """The current visible value as plain data (a fresh copy; links followed). No scheduling."""
        tx = self._tx  # (`_reader`, inlined: a UI reads per edit)
        if tx is None:
            tx = self._replica.reader(self._identity)
        return thaw(read_value(tx, self._at))

    def resolve(self) -> Cell:
        """Follow links to the cell they end at (a host may end earlier: a runtime's
        cell stops at a pattern run's result, see `CellHost.resolve`)."""
        host = self._host
        link = as_link(self._at)
        if host is not None:
            return self._derive(host.resolve(self._reader(), link))
        return self._derive(resolve(self._reader(), link))

    # -- writes
    def _write(
        self, stage: Callable[[Transaction, DocKey, Path], None], *, follow_last: bool = False
    ) -> Pending[CommitResult]:
        tx = self._tx
        own = tx is None
        if tx is None:
            tx = self._replica._open_tx(self._identity)  # committed below
        try:
            at = self._at
            staged = False
            if not at.path and at.scope == "space":
                # A whole cell of a shared document (the usual write): `resolve`, and
                # the key of its result, without their calls when no link must be
                # followed. (The probe is made either way: it refuses an internal
                # document the same way.)
                key = at if type(at) is DocKey else DocKey(at.space, at.id)
                rec = tx._replica._docs.get(key) if key not in tx._docs else None
                if (
                    rec is not None
                    and type(rec.visible) is dict
                    and tx.status == "open"
                    and not ("cw:" <= key.id < "cw;")
                ):
                    # `peek` of a loaded shared document this identity reaches (no guard
                    # to ask, nothing read yet), without the call: the usual first access.
                    probe = rec.visible.get(VALUE, MISSING)
                else:
                    probe = tx.peek(key, _VALUE_PATH)
                if type(probe) is not Link or not follow_last:
                    stage(tx, key, _VALUE_PATH)
                    staged = True
            if not staged:
                # set()/delete() replace a link stored at the cell itself; update() and
                # push() write *below* the cell, so they follow such a link to its target.
                target = resolve(tx, as_link(at), follow_last=follow_last)
                stage(tx, target.key(self._identity), (VALUE, *target.path))
        except BaseException:
            if own:
                tx.abort("write failed")
            raise
        if own:
            return tx.commit()
        return tx.done()

    def set(self, value: Any) -> Pending[CommitResult]:
        """Write `value` here. Returns the pending result of the transaction it went into."""
        if isinstance(value, Cell):  # a link to it: its documents must be in this store
            check_same_store(value, (self._tx or self).replica, f"{self!r}.set()")
        at = self._at
        if not at.path and at.scope == "space":
            # A whole cell of a shared document (the usual write): `set` replaces a link
            # stored at the cell itself, so nothing is followed and nothing needs
            # reading first; `_write`'s stage, without its calls and its probe.
            # (`Transaction.write` refuses an internal document at its first access.)
            tx = self._tx
            if tx is not None:
                tx.write(DocKey(at.space, at.id), _VALUE_PATH, value)
                pending = tx._pending  # (`done`, without its call once made: a batch's writes)
                return pending if pending is not None else tx.done()
            pending = self._replica.write_at(self._identity, at, value)
            if pending is not None:
                return pending
            tx = self._replica._open_tx(self._identity)
            try:
                # (A key held is the key written: the one the replica's record keeps when
                # this write is the document's first, as `write_at` declines then.)
                tx.write(at if type(at) is DocKey else DocKey(at.space, at.id), _VALUE_PATH, value)
            except BaseException:
                tx.abort("write failed")
                raise
            return tx.commit()
        if self._tx is None:
            # A path below a cell (a list element, a field through a link): committed
            # with no transaction when its shape allows (`Replica.write_at`).
            pending = self._replica.write_at(self._identity, at, value)
            if pending is not None:
                return pending
        return self._write(lambda tx, key, path: tx.write(key, path, value))

    def delete(self) -> Pending[CommitResult]:
        return self._write(lambda tx, key, path: tx.write(key, path, MISSING))

    def update(self, mapping: Mapping[str, Any]) -> Pending[CommitResult]:
        """Write each key of `mapping` below this cell (other keys are kept)."""
        if not isinstance(mapping, Mapping):
            raise bad_arg(
                mapping, where=f"{self!r}.update()", name="mapping", accepts="a mapping (a dict)"
            )

        def stage(tx: Transaction, key: DocKey, path: Path) -> None:
            for k, v in mapping.items():
                tx.write(key, (*path, k), v)

        return self._write(stage, follow_last=True)

    def push(self, item: Any) -> Pending[CommitResult]:
        """Append `item` to the list here (an absent value becomes `[item]`)."""

        def stage(tx: Transaction, key: DocKey, path: Path) -> None:
            current = tx.read(key, path, shallow=True)
            if current is MISSING or current is None:
                tx.write(key, path, [item])
            elif type(current) is list:
                tx.write(key, (*path, len(current)), item)
            else:
                raise InvalidValueError(
                    f"{self!r}.push(): the value here is a {type(current).__name__}, not a list",
                    value=current,
                )

        return self._write(stage, follow_last=True)

    def splice(self, index: int, delete: int, items: Iterable[Any] = ()) -> Pending[CommitResult]:
        """Replace `delete` elements of the list here, from `index` on, by `items`.

        Writes only the change: the other elements are kept as stored (no copy
        through the write boundary), so one insert into a long list is cheap. An
        absent (or `None`) value counts as `[]`. Reads the list's length (a shallow
        read, as `push` does), so a concurrent change of its length fails the commit
        rather than splicing at a shifted position.
        """

        def stage(tx: Transaction, key: DocKey, path: Path) -> None:
            current = tx.read(key, path, shallow=True)
            if current is None:
                current = MISSING
            if current is not MISSING and type(current) is not list:
                raise InvalidValueError(
                    f"{self!r}.splice(): the value here is a {type(current).__name__}, not a list",
                    value=current,
                )
            if current is MISSING:
                tx.write(key, path, [])
            tx.splice(key, path, index, delete, items)

        return self._write(stage, follow_last=True)

    def insert(self, index: int, item: Any) -> Pending[CommitResult]:
        """Insert `item` before position `index` of the list here (`splice(index, 0, [item])`)."""
        return self.splice(index, 0, (item,))

    def remove(self, index: int) -> Pending[CommitResult]:
        """Remove the element at position `index` of the list here (`splice(index, 1)`)."""
        return self.splice(index, 1)

    @property
    def host(self) -> CellHost | None:
        """What gives this cell `pull`/`sink`/`observe` (a runtime's scheduler), or
        None for a cell made from a plain `Space`."""
        return self._host

    # -- reactive (need a host)
    def _need_host(self, what: str) -> CellHost:
        if self._host is None:
            raise CellweaveError(
                f"{self!r}.{what}() needs a scheduler: use a cell from a Runtime (rt.get_cell)"
            )
        return self._host

    async def pull(self) -> Value:
        return await self._need_host("pull").pull(self)

    def sink(self, fn: Callable[[Value], None]) -> Callable[[], None]:
        check_callable(fn, where=f"{self!r}.sink()", name="fn")
        return self._need_host("sink").sink(self, fn)

    def observe(self) -> Any:
        return self._need_host("observe").observe(self)

    def sink_patches(self, fn: Callable[[list[dict[str, Any]]], None]) -> Callable[[], None]:
        """`fn(ops)` with RFC 6902 JSON Patch operations: first one `replace` at `""`
        holding the whole value, then per settled change the operations from the value
        last delivered to the new one (see `patch_ops`). Returns cancel."""
        return self._need_host("sink_patches").sink_patches(self, fn)

    def observe_patches(self) -> Any:
        """The `sink_patches` stream as a reactivex Observable."""
        return self._need_host("observe_patches").observe_patches(self)


class _BoundCell(Cell):
    """A cell bound to a transaction (`Cell.with_tx`): the one kind of cell with a `_tx`
    slot (`Cell._tx`)."""

    __slots__ = ("_tx",)

    _tx: Transaction

    def key(self, *path: PathElem) -> Cell:
        """The cell at a nested path, bound to the same transaction."""
        return super().key(*path).with_tx(self._tx)


def check_same_store(cell: Cell, replica: Replica | TxReplica, where: str) -> None:
    """Raise `InvalidArgumentError` unless `cell`'s documents live in `replica`'s store.

    A cell stands for its address (space, id, scope, path), and an address means
    something only in its own store: taken to another store it would silently
    name that store's document of the same name. A cell of another replica on
    the same store is fine (the same document). O(1).
    """
    mine = cell._replica
    if mine.store is not replica.store:
        raise InvalidArgumentError(
            f"{where}: {cell!r} belongs to session {mine.session_id} on {mine.store!r}, but"
            f" this is session {replica.session_id} on {replica.store!r}; a cell of another"
            " store cannot be used here (get it from this runtime: rt.get_cell(...))"
        )


class Space:
    """One space of a replica, seen by one identity: the plain (scheduler-free) entry point.

    >>> from cells import MemoryStore, Space
    >>> sp = Space(MemoryStore(), "notes")
    >>> c = sp.get_cell({"note": 1})
    >>> _ = c.set({"title": "hi"}); sp.replica.pump()
    1
    >>> c.key("title").get()
    'hi'
    """

    def __init__(
        self,
        store_or_replica: Any,
        space: str = "default",
        *,
        principal: str = "local",
        session: str = "local",
        host: CellHost | None = None,
    ) -> None:
        if not isinstance(space, str):
            raise bad_arg(space, where="Space()", name="space", accepts="a non-empty str")
        if not space:
            raise InvalidValueError(f"Space: space must be a non-empty str, got {space!r}")
        if not isinstance(store_or_replica, (Replica, StoreBase)):
            raise bad_arg(
                store_or_replica,
                where="Space()",
                name="store_or_replica",
                accepts="a store (MemoryStore, SQLiteStore) or a Replica",
            )
        self.replica = (
            store_or_replica if isinstance(store_or_replica, Replica) else Replica(store_or_replica)
        )
        self.space = space
        self.identity = Identity(principal, session)
        self.host = host

    def __repr__(self) -> str:
        return f"<Space {self.space!r} as {self.identity.principal}/{self.identity.session}>"

    def edit(self, *, source: object = None) -> Transaction:
        return self.replica.edit(self.identity, source=source)

    def cell(self, id: str, *, scope: Scope = "space", path: Path = ()) -> Cell:
        from ._address import check_scope

        check_arg(id, str, where="Space.cell()", name="id", accepts="a str (a document id)")
        check_arg(path, tuple, where=f"Space.cell({id!r})", name="path", accepts="a tuple")
        check_scope(scope, where=f"cell {id!r}")
        # A whole shared document's cell holds its key (`Place`): the key the replica,
        # the scheduler and the store then share, and no link.
        at: Place = (
            DocKey(self.space, id)
            if scope == "space" and not path
            else Link(self.space, id, scope, path)
        )
        return Cell(self.replica, self.identity, at, host=self.host)

    def get_cell(
        self, cause: Any, *, scope: Scope = "space", tx: Transaction | None = None
    ) -> Cell:
        """The cell whose id derives from `cause` alone (scope is a separate coordinate)."""
        if tx is not None and not isinstance(tx, Transaction):
            raise bad_arg(tx, where="Space.get_cell()", name="tx", accepts="a Transaction or None")
        c = self.cell(entity_id(cause), scope=scope)
        return c.with_tx(tx) if tx is not None else c

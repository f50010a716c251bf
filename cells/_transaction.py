"""Transactions: read (logged), write (staged, read-your-writes), commit or abort.

A transaction captures, at its first access to each document, the replica's
visible value and version: its *basis*. Reads come from a working copy that
its own writes update (read-your-writes). `commit()` applies the writes to
the replica synchronously, notifies, and returns a `Pending[CommitResult]`
whose verdict comes from the store later. If a document the transaction
read changed locally since the first access, the commit fails at once as
STALE_BASIS, even if the value changed back: divergence of the basis counts.

Every transaction settles exactly once (committed, rejected or aborted);
settle callbacks run for all three, `post_commit` effects only on success.

Invariants (checked by `_check`)
- status moves open -> committing -> (committed | rejected), or open -> aborted
  / rejected (local basis failure), and never back;
- settle callbacks and post-commit effects run at most once.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, final

import msgspec

from ._access import INTERNAL_PREFIX, Authority, refusal
from ._address import DocKey, Identity, Link, Path, check_path
from ._args import bad_arg, check_callable
from ._codec import describe
from ._outcome import CommitResult, Outcome
from ._pending import Mailbox, Pending
from ._values import (
    ELEMENT_IDS,
    ELEMENT_KINDS,
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    MISSING,
    Value,
    element_types,
    element_writes,
    get_path,
    has_ids,
    ids_key,
    normalize,
    note_types,
    positional,
    set_elements,
    set_path,
    spliced,
    spliced_ids,
)
from .errors import (
    CommitRejected,
    InvalidArgumentError,
    InvalidValueError,
    TransactionAborted,
    TransactionError,
)

# The inlined first-access checks below spell "starts with INTERNAL_PREFIX" as a
# chained comparison of constants, about half the cost of `str.startswith` (they run
# at the first access of every document of every node run, and at every `peek`).
# (`Cell` reads, link walks and `Replica.run_field` spell it the same way: this guard
# covers them too, as every one of them imports this module.)
if INTERNAL_PREFIX != "cw:":  # pragma: no cover - a guard for whoever changes it
    raise ImportError(
        "cells spells INTERNAL_PREFIX as 'cw:' in _transaction, _cell, _links and"
        " _replica; update them all"
    )

from ._records import Layer

if TYPE_CHECKING:
    from ._records import DocRecord
    from ._store import StoreBase


class TxReplica(Protocol):
    """What a transaction uses of its replica (`cells._replica.Replica` is the one
    implementation; the transaction is its friend, so this names private members).
    A protocol keeps `_transaction` below `_replica`: no import circle."""

    session_id: str
    store: StoreBase
    mailbox: Mailbox
    _docs: dict[DocKey, DocRecord]
    _in_flight: dict[int, Transaction | SentRun]
    _open_txs: int
    _busy_since: int

    def _mark(self) -> int: ...

    def _check_authority(self, authority: object) -> bool: ...

    def _record(self, key: DocKey) -> DocRecord: ...

    def _unpack(self, key: DocKey, rec: DocRecord) -> Value: ...

    def _commit(self, tx: Transaction) -> None: ...


Status = Literal["open", "committing", "committed", "rejected", "aborted"]
SettleCallback = Callable[["Transaction", CommitResult], None]


class TxDoc(msgspec.Struct, gc=False):
    """A transaction's view of one document: its basis and its working copy.

    A Struct because every transaction makes one per document it touches;
    `gc=False` because it holds only values, seqs and paths, which never refer
    back to it (the collector need not scan the ones in flight).
    """

    baseline: Value
    version: int
    basis_seq: int
    deps: tuple[int, ...]
    working: Value
    read: bool = False
    unlogged: bool = False
    """Some read of this document was made with `log=False` (so not every entry of
    `reads` is in the transaction's log)."""
    # None until the first read / write (most documents are only read or only
    # written), a 1-tuple for one (a tuple of untracked things leaves the
    # collector's view once scanned, a list never does). Reads: a dict used as an
    # ordered set from the second distinct read, so a repeat is found in O(1)
    # (a document read at n places would otherwise cost O(n^2) to dedupe).
    reads: dict[tuple[Path, bool], None] | tuple[tuple[Path, bool]] | None = None
    """(path, shallow) of every distinct read, in first-read order."""
    written: list[Path] | tuple[Path, ...] | None = None
    """Every written path, in order."""


_WHOLE_VALUE: Final[Path] = ("value",)
"""The path of a cell's whole value in its document (`_links.VALUE`): `write` knows it
is a good one."""


def _links_only(items: list[Any]) -> bool:
    """Whether every element of `items` is a link (C-level: one pass over the types)."""
    return not items or set(map(type, items)) == _LINK


_LINK = frozenset((Link,))


def _bad_key(key: object, call: str) -> InvalidArgumentError:
    return bad_arg(key, where=f"Transaction.{call}()", name="key", accepts="a DocKey")


def _bad_path(path: object, call: str) -> InvalidArgumentError:
    return bad_arg(
        path, where=f"Transaction.{call}()", name="path", accepts="a tuple of str and int"
    )


def _check_depth(path: Path, *, where: str) -> None:
    """A write path may reach a value inside the deepest container a document may hold."""
    if len(path) > MAX_DEPTH + 1:
        raise InvalidValueError(
            f"{where}: the path is {len(path)} elements long, past the maximum depth of"
            f" {MAX_DEPTH} containers in a document",
            path=path,
            value=len(path),
        )


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY_DIRS: Final = tuple(
    os.path.join(_ROOT, name) + os.sep for name in ("cells", "scheduler", "runner", "cellweave")
)
"""Directories of cellweave's packages: their frames are skipped when naming a user's call."""

Site = tuple[CodeType, int]
"""Where a user's call was: its code object and the instruction offset in it (`Replica.edit`
records it). Not the frame (it would keep the caller's locals, often the transaction, alive),
nor the line (computing `f_lineno` costs more than the rest): `site_line` finds it on demand."""


def site_line(site: Site) -> tuple[str, int]:
    """(file, line) of a `Site`."""
    code, offset = site
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return code.co_filename, line
    return code.co_filename, code.co_firstlineno


def _deps(layers: Sequence[Layer]) -> tuple[int, ...]:
    """The local seqs of a document's pending layers (the commits a read builds on)."""
    if not layers:
        return ()
    if len(layers) == 1:  # the usual case when any: one commit of it in flight
        return (layers[0].seq,)
    return tuple([lay.seq for lay in layers])


@final  # (no subclass: `type(tx) is SentRun` is its test, `_send_run`)
class SentRun(Layer, gc=True):
    """A node run the replica committed with no transaction (`Replica.run_field`), in
    flight: its commit's layer (one write: `seq`, `path`, `value`), who ran it
    (`source`, which its commit's notification names, as a transaction's `source`),
    its identity, its `on_failure` callback and the written document's `record`. One
    object per direct commit is its pending layer in `record.layers`, its entry in the
    in-flight table and in the run log, where a layer and a `Transaction` would be: the
    usual verdict (accepted, this layer its document's oldest) adopts it through
    `record` (`Replica._docs`' own, never replaced: no lookup by key) with nothing to
    call or record (`Replica.accept_runs`); any other makes its transaction first
    (`Transaction._of_run`), which settles as a transaction run's would, and reverts
    it as any layer. Built in C, positionally (the defaults below are there only
    because `Layer.rest` has one: every field is given). `gc=True`: it holds its
    record (whose layers hold it) and its source."""

    identity: Identity = None  # type: ignore[assignment]
    source: object = None
    on_failure: SettleCallback | None = None
    record: DocRecord = None  # type: ignore[assignment]


class Transaction:
    """One unit of reads and writes against a replica, for one resolution identity.

    Create with `Replica.edit(identity)` (or `rt.edit()`), never directly.

    It touches only the documents its identity resolves to (see `cells._access`):
    a first access to any other document (another principal's or session's
    instance, or the runtime's internal bookkeeping) raises `OwnershipError`
    before anything is read or staged. A transaction opened with the replica's
    `Authority` reaches every document.
    """

    __slots__ = (
        "_create_only",
        "_docs",
        "_meta",
        "_on_failure",
        "_pending",
        "_post_commit",
        "_replica",
        "_settle_callbacks",
        "_site",
        "_system",
        "_values",
        "identity",
        "reads",
        "result",
        "source",
        "status",
    )

    def __init__(
        self,
        replica: TxReplica,
        identity: Identity,
        *,
        source: object = None,
        authority: Authority | None = None,
    ) -> None:
        self._replica = replica
        self.identity = identity
        self._system = authority is not None and replica._check_authority(authority)
        """Opened with the replica's `Authority`: reaches every document."""
        self.source = source
        """Who runs this transaction (a scheduler node); its own commit never invalidates it."""
        self.status: Status = "open"
        # Counted open until it leaves "open" (commit, abort, or dropped: `__del__`), so
        # the replica knows how much store history its commits may still need; the
        # first transaction of a quiet replica starts a busy period (`low_water`).
        opened = replica._open_txs
        replica._open_txs = opened + 1
        if not opened and not replica._in_flight:
            replica._busy_since = replica._mark()
        self.result: CommitResult | None = None
        self._docs: dict[DocKey, TxDoc] = {}
        self.reads: list[tuple[DocKey, Path, bool]] = []
        """Logged reads in first-read order: (document, full-document path, shallow).
        Read it, never change it. A repeated read is not logged again (unless a read
        of its document skipped the log, see `read`), so this is the read set with few
        or no duplicates. Empty once a commit that changed something is handed to the
        store (its request carries the reads from then on): read it before committing.
        A plain attribute, not a property: the scheduler reads it on every run."""
        # Made on first use: the scheduler opens one transaction per node run, and
        # most never need annotations, create-only keys, callbacks or effects.
        self._meta: dict[str, Any] | None = None
        self._create_only: set[DocKey] | None = None
        # One callback is kept as is, a list only for more (a scheduler run adds one).
        self._settle_callbacks: SettleCallback | list[SettleCallback] | None = None
        self._on_failure: SettleCallback | None = None
        self._post_commit: list[Callable[[], None]] | None = None
        self._pending: Pending[CommitResult] | None = None  # made when someone asks
        self._values: dict[Link | DocKey, Value] | None = None
        """`read_value`'s results by link, made at the first read of a document read
        before; emptied by every write (see `read_value`) and when the transaction
        leaves "open"."""
        self._site: Site | None = None
        """(file, line) of the user's call that opened it (set by the public `edit`s)."""

    @classmethod
    def _sent_run(
        cls,
        replica: TxReplica,
        identity: Identity,
        source: object,
        on_failure: SettleCallback | None,
    ) -> Transaction:
        """A transaction already committed and in flight, for a node run the replica made
        with none (`Replica.run_field`): what `__init__` and `commit_detached(on_failure=)`
        leave, minus the open count (it never was open) and the working copies (it
        has none). It is what the in-flight table, the notification and the verdict
        handle, so a rejected direct run settles as a transaction run would."""
        tx = cls.__new__(cls)
        tx._replica = replica
        tx.identity = identity
        tx._system = False
        tx.source = source
        tx.status = "committing"
        tx.result = None
        tx._docs = {}
        tx.reads = []
        tx._meta = None
        tx._create_only = None
        tx._settle_callbacks = None
        tx._on_failure = on_failure
        tx._post_commit = None
        tx._pending = None
        tx._values = None
        tx._site = None
        return tx

    @classmethod
    def _of_run(cls, replica: TxReplica, run: SentRun) -> Transaction:
        """The in-flight transaction of direct run `run` (`_sent_run` of what it keeps):
        made only when its verdict is not the usual acceptance, which needs no object."""
        return cls._sent_run(replica, run.identity, run.source, run.on_failure)

    def __repr__(self) -> str:
        return (
            f"<Transaction {self.status} {self.identity.principal}/{self.identity.session}"
            f" docs={len(self._docs)}>"
        )

    @property
    def meta(self) -> dict[str, Any]:
        """Free-form annotations for layers above (e.g. the runner's commit-gated flag)."""
        meta = self._meta
        if meta is None:
            meta = self._meta = {}
        return meta

    @property
    def replica(self) -> TxReplica:
        return self._replica

    @property
    def is_open(self) -> bool:
        return self.status == "open"

    def _require_open(self, what: str) -> None:
        if self.status != "open":
            raise TransactionError(f"cannot {what}: the transaction is {self.status}")

    def _guard(self, key: DocKey, what: str) -> None:
        """Refuse, before anything is staged, a document this identity does not reach.

        Called at each document's first access only (later ones find it in `_docs`,
        already checked), so a transaction pays it once per document: for the usual
        space-scoped document, one attribute and three string comparisons (`reaches`,
        inlined: this sits on the first access of every document of every node run).
        `read`, `peek` and `_access` inline that usual case and call this only for a
        scoped or internal key.
        """
        if self._system:
            return
        if key.scope == "space":
            if key.id.startswith(INTERNAL_PREFIX):
                raise refusal(self.identity, key, what)
            return
        identity = self.identity
        if (
            key.principal != identity.principal
            or (key.scope == "session" and key.session != identity.session)
            or key.id.startswith(INTERNAL_PREFIX)
        ):
            raise refusal(identity, key, what)

    def _access(self, key: DocKey) -> TxDoc:
        td = self._docs.get(key)
        if td is None:
            if key.scope != "space" or "cw:" <= key.id < "cw;":
                self._guard(key, "write")  # (the usual space-scoped case, inlined)
            replica = self._replica
            rec = replica._docs.get(key)
            if rec is None:
                rec = replica._record(key)
            # The store-facing basis (confirmed seq, pending layers seen) is taken
            # at the first *read*: a written-only document needs none, and copying
            # the layer list here made many commits in flight on one document O(n^2).
            visible = rec.visible
            if type(visible) is bytes:  # packed while idle (`Replica.pack`)
                visible = replica._unpack(key, rec)
            td = TxDoc(visible, rec.version, rec.confirmed_seq, (), visible)
            self._docs[key] = td
        return td

    # -- reads
    def read(
        self, key: DocKey, path: Path = (), *, shallow: bool = False, log: bool = True
    ) -> Value:
        """The value at full-document `path` (MISSING if absent). Do not mutate it.

        `shallow` logs a read of only the key set / length / kind there. With
        `log=False` the read is not reported to the scheduler (it still counts
        for the basis). A repeat of a read this transaction already made (same
        document, path and shallowness) adds no second log entry or read claim:
        what a transaction reads is a set. O(len(path)).
        """
        working = self._logged(key, path, shallow, log).working
        if len(path) == 1 and type(working) is dict and type(path[0]) is str:
            return working.get(path[0], MISSING)  # `get_path` of one field, without the call
        return get_path(working, path)

    def read_kinds(self, key: DocKey, path: Path) -> Value:
        """The list at full-document `path`, read shallowly, and the *kinds* of its elements
        logged for the scheduler as one read (path `(*path, ELEMENT_KINDS)`): it triggers
        when an element that is no inline container (a scalar, a link) changes what a
        shallow read of its position sees, its type or its link, and never for a new
        value of a scalar of the same type. O(len(path)) however long the list: one read
        for every position, where a shallow read of each position was O(N) to log, index
        and compare. The store's read claim is the shallow read's at `path`, which every
        write at an element overlaps already (`write_overlaps_read`)."""
        value = self.read(key, path, shallow=True)
        self.reads.append((key, (*path, ELEMENT_KINDS), True))
        return value

    def _logged(self, key: DocKey, path: Path, shallow: bool, log: bool) -> TxDoc:
        """`read` without its value: the read logged and claimed (the basis taken at the
        document's first access), and the document's `TxDoc` returned. For a caller that
        has the value in hand already, walked in the document `peek` gave it (a link's
        place, the place a walk through links ended at: `cells._links`)."""
        if self.status != "open":
            raise TransactionError(f"cannot read {describe(key)}: the transaction is {self.status}")
        if type(path) is not tuple:
            raise _bad_path(path, "read")
        td = self._docs.get(key)
        if td is None:
            if type(key) is not DocKey:
                raise _bad_key(key, "read")
            # First access is this read: the state seen now is the basis (what
            # `_access` and the first-read branch below would do, in one step).
            if key.scope != "space" or "cw:" <= key.id < "cw;":
                self._guard(key, "read")  # (the usual space-scoped case, inlined)
            replica = self._replica
            rec = replica._docs.get(key)
            if rec is None:
                rec = replica._record(key)
            visible = rec.visible
            if type(visible) is bytes:  # packed while idle (`Replica.pack`)
                visible = replica._unpack(key, rec)
            layers = rec.layers
            # (`_deps` inlined for none or one pending layer, the usual cases.)
            deps = () if not layers else (layers[0].seq,) if len(layers) == 1 else _deps(layers)
            td = TxDoc(
                visible, rec.version, rec.confirmed_seq, deps, visible, True, False,
                ((path, shallow),),
            )  # fmt: skip
            self._docs[key] = td
            if log:
                self.reads.append((key, path, shallow))
            else:
                td.unlogged = True
        else:
            if not td.read:
                td.read = True
                rec = self._replica._docs[key]
                if rec.version == td.version:
                    # Same visible value as at first access: this state is its basis.
                    # (If it moved, the commit fails the local basis check anyway.)
                    td.basis_seq = rec.confirmed_seq
                    td.deps = _deps(rec.layers)
            entry = (path, shallow)
            reads = td.reads
            if reads is not None and entry in reads:
                # A repeat: claimed already, and logged already unless some read of
                # this document skipped the log (then log it again: a duplicate log
                # entry is harmless, a missing one would lose a trigger).
                if log and td.unlogged:
                    self.reads.append((key, path, shallow))
            else:
                if reads is None:
                    td.reads = (entry,)
                elif isinstance(reads, tuple):
                    td.reads = {reads[0]: None, entry: None}
                else:
                    reads[entry] = None
                if log:
                    self.reads.append((key, path, shallow))
                else:
                    td.unlogged = True
        return td

    def peek(self, key: DocKey, path: Path = ()) -> Value:
        """The value at `path` with nothing logged and no basis taken (for link walking)."""
        if self.status != "open":
            raise TransactionError(f"cannot read {describe(key)}: the transaction is {self.status}")
        if type(path) is not tuple:
            raise _bad_path(path, "peek")
        td = self._docs.get(key)
        if td is not None:
            working = td.working
            if not path:
                return working  # the whole document (`_resolve` walks it): no call
            if len(path) == 1 and type(working) is dict and type(path[0]) is str:
                return working.get(path[0], MISSING)  # one field, without the call
            return get_path(working, path)
        if type(key) is not DocKey:
            raise _bad_key(key, "peek")
        if key.scope != "space" or "cw:" <= key.id < "cw;":
            self._guard(key, "read")  # (the usual space-scoped case, inlined)
        rec = self._replica._docs.get(key)
        if rec is None:
            rec = self._replica._record(key)
        visible = rec.visible
        if type(visible) is bytes:  # packed while idle (`Replica.pack`)
            visible = self._replica._unpack(key, rec)
        if not path:
            return visible  # the whole document (`_resolve` walks it): no call
        if len(path) == 1 and type(visible) is dict and type(path[0]) is str:
            return visible.get(path[0], MISSING)  # `get_path` of one field, without the call
        return get_path(visible, path)

    def documents(self) -> dict[DocKey, TxDoc]:
        """The documents this transaction touched, with their basis and working copy
        (emptied, like `reads`, once a commit is handed to the store)."""
        return self._docs

    # -- writes
    def write(self, key: DocKey, path: Path, value: Any) -> None:
        """Stage `value` at full-document `path` (checked and copied; MISSING deletes)."""
        if self.status != "open":
            self._require_open(f"write {describe(key)}")
        if type(path) is not tuple:
            raise _bad_path(path, "write")
        t = type(value)
        # (What `normalize` returns as it is, without the call.)
        plain = (
            (t is int and MIN_INT <= value <= MAX_INT)
            or (t is str and value.isascii())
            or value is None
        )
        td = self._docs.get(key)
        if td is None:
            if type(key) is not DocKey:
                raise _bad_key(key, "write")
            # `_access`, inlined: a node run's write is its output's first access.
            if key.scope != "space" or "cw:" <= key.id < "cw;":
                self._guard(key, "write")  # (the usual space-scoped case, inlined)
            replica = self._replica
            rec = replica._docs.get(key)
            if rec is None:
                rec = replica._record(key)
            visible = rec.visible
            if type(visible) is bytes:  # packed while idle (`Replica.pack`)
                visible = replica._unpack(key, rec)
            if plain and path == _WHOLE_VALUE and type(visible) is dict:
                # A cell's whole value, a plain scalar, at the document's first access
                # (`Cell.set` in a batch: the usual write): its view made with its
                # working copy and its one written path at once.
                working = visible.copy()
                working["value"] = value
                self._docs[key] = TxDoc(
                    visible, rec.version, rec.confirmed_seq, (), working, False, False,
                    None, (path,),
                )  # fmt: skip
                self._values = None  # a value read before may have changed
                return
            td = TxDoc(visible, rec.version, rec.confirmed_seq, (), visible)
            self._docs[key] = td
        try:
            if path == _WHOLE_VALUE:
                # A cell's whole value (`Cell.set`, a node's output): a checked path of
                # one field, so no check of its elements or its depth (a C comparison).
                field: str | None = "value"
            else:
                for elem in path:
                    if type(elem) is not str and (type(elem) is not int or elem < 0):
                        check_path(path, where="write")  # anything unusual: the full check
                        break
                if len(path) > MAX_DEPTH + 1:
                    _check_depth(path, where="write")
                field = path[0] if len(path) == 1 and type(path[0]) is str else None
            if plain:
                v = value
            else:
                v = value if value is MISSING else normalize(value, where="write", depth=len(path))
            working = td.working
            if field is not None and type(working) is dict:
                # One field of a dict (the usual write): `set_path`'s own shortcut.
                working = working.copy()  # (`dict(working)` costs a third more)
                if v is MISSING:
                    working.pop(field, None)
                else:
                    working[field] = v
            else:
                working = set_path(working, path, v, where="write")
        except InvalidValueError:
            fixed = positional(td.working, path)
            if fixed is not None:
                # A path through element ids (a link to an element of a list): the
                # write lands at the element's position.
                self.write(key, fixed, value)
                return
            # Errors are rare: only now build the message naming document and path.
            where = f"write to {describe(key)} at {list(path)}"
            check_path(path, where=where)
            _check_depth(path, where=where)
            v = value if value is MISSING else normalize(value, where=where, depth=len(path))
            set_path(td.working, path, v, where=where)
            raise
        td.working = working
        # `_wrote`, inlined.
        self._values = None  # a value read before may have changed
        written = td.written
        if written is None:
            td.written = (path,)
        elif isinstance(written, tuple):
            td.written = [*written, path]
        else:
            written.append(path)

    def write_items(self, key: DocKey, path: Path, items: Mapping[int, Any]) -> None:
        """Stage `items[i]` at full-document path `(*path, i)` for each `i`: what a
        `write` per item does (each item checked and copied, each path recorded as
        written), but when they all replace elements of one long list the list is
        copied once (or an older version nobody holds is brought up to date: see
        `cells._values._reuse`), not once per item, and so are the commit's value and
        the memory store's (`set_paths`). Raises what `write` raises."""
        if self.status != "open":
            self._require_open(f"write {describe(key)}")
        if type(path) is not tuple:
            raise _bad_path(path, "write")
        if len(items) < 2 or len(path) >= MAX_DEPTH:
            for i, value in items.items():
                self.write(key, (*path, i), value)
            return
        td = self._docs.get(key)
        if td is None:
            if type(key) is not DocKey:
                raise _bad_key(key, "write")
            td = self._access(key)
        ops: list[tuple[Path, Value]] = [((*path, i), value) for i, value in items.items()]
        found = element_writes(td.working, ops)
        if found is not None:
            changes = found[2]  # (a dict of its own: normalised in place)
            depth = len(path) + 1
            try:
                for i, value in changes.items():
                    changes[i] = normalize(value, where="write", depth=depth)
            except InvalidValueError:
                found = None  # (bad input: the writes below raise it, naming the document)
        if found is None:
            # Anything else (or bad input): one write each, with its own errors.
            for i, value in items.items():
                self.write(key, (*path, i), value)
            return
        td.working = set_elements(td.working, found)
        for at, _value in ops:
            self._wrote(td, at)

    def _wrote(self, td: TxDoc, path: Path) -> None:
        """Record a staged write of `path` (in order) and forget remembered reads."""
        self._values = None  # a value read before may have changed
        written = td.written
        if written is None:
            td.written = (path,)
        elif isinstance(written, tuple):
            td.written = [*written, path]
        else:
            written.append(path)

    def splice(
        self, key: DocKey, path: Path, index: int, delete: int, items: Iterable[Any] = ()
    ) -> None:
        """Replace `delete` elements of the list at full-document `path`, from `index` on,
        by `items` (checked and copied); an absent list counts as `[]`.

        A write like `write(key, path, new_list)`, but only `items` are normalized:
        the kept elements are already stored values and are copied by reference, so
        inserting or removing one element of an N-element list costs one C-level list
        copy, not N checks. Like `write`, it logs no read (`Cell.insert` and
        `Cell.remove` read the length first). Raises `InvalidValueError` when the value
        there is not a list or the range does not fit it. O(N) C copying + O(len(items)).
        """
        if self.status != "open":
            self._require_open(f"splice {describe(key)}")
        if type(path) is not tuple:
            raise _bad_path(path, "splice")
        td = self._docs.get(key)
        if td is None:
            if type(key) is not DocKey:
                raise _bad_key(key, "splice")
            td = self._access(key)
        for elem in path:
            if type(elem) is not str and (type(elem) is not int or elem < 0):
                check_path(path, where=f"splice of {describe(key)} at {list(path)}")
        path = positional(td.working, path) or path  # through element ids: positions
        current = get_path(td.working, path)
        if current is MISSING:
            current = []
        if type(current) is not list:
            raise InvalidValueError(
                f"splice of {describe(key)} at {list(path)}: the value there is a"
                f" {type(current).__name__}, not a list",
                path=path,
                value=current,
            )
        for name, arg in (("index", index), ("delete", delete)):
            if type(arg) is not int:
                raise bad_arg(
                    arg, where=f"splice of {key} at {list(path)}", name=name, accepts="an int"
                )
        if (
            type(index) is not int
            or type(delete) is not int
            or index < 0
            or delete < 0
            or index + delete > len(current)
        ):
            raise InvalidValueError(
                f"splice of {describe(key)} at {list(path)}: cannot replace {delete!r}"
                f" elements from index {index!r} of a list of {len(current)}",
                path=path,
                value=(index, delete),
            )
        items = list(items)
        try:
            added = normalize(items, where="splice", depth=len(path))
        except InvalidValueError:
            # Errors are rare: only now build the message naming document and path.
            normalize(items, where=f"splice of {describe(key)} at {list(path)}", depth=len(path))
            raise
        # Noted, so the reader index and a list coordinator find the common ends without
        # comparing N elements, and the types of the kept elements without a pass.
        new = spliced(current, index, delete, added)
        # The list's element ids follow the splice (`element_ids`), in the same document;
        # a list that only ever held links needs none (links are their own identity).
        ids = (
            spliced_ids(td.working, path, current, index, delete, len(added))
            if has_ids(td.working, path)
            or not _links_only(added)
            or not element_types(current) <= _LINK
            else None
        )
        note_types(current, new, added)  # after `element_types(current)`, which keeps it
        try:
            td.working = set_path(td.working, path, new, where="splice")
        except InvalidValueError:
            set_path(td.working, path, new, where=f"splice of {describe(key)} at {list(path)}")
            raise
        self._wrote(td, path)
        if ids is not None:
            table = (ELEMENT_IDS, ids_key(path))
            td.working = set_path(td.working, table, ids, where="splice")
            self._wrote(td, table)

    def delete(self, key: DocKey, path: Path = ()) -> None:
        self.write(key, path, MISSING)

    def write_internal(self, authority: Authority, key: DocKey, path: Path, value: Any) -> None:
        """`write`, reaching any document: for the runtime's own bookkeeping staged in a
        transaction that otherwise acts for an identity (an event's receipt in its
        handler's transaction). `authority` must be the replica's. Stage it after the
        identity's own code is done with the transaction: like every document it
        touched, this one is not checked again at later accesses in it."""
        self._replica._check_authority(authority)
        system, self._system = self._system, True
        try:
            self.write(key, path, value)
        finally:
            self._system = system

    def create_only(self, key: DocKey, *, authority: Authority | None = None) -> None:
        """Make the commit fail PERMANENT if `key` exists or ever existed in the store.

        Marking a document this identity does not reach raises `OwnershipError` (the
        verdict would tell whether it exists), unless `authority` is the replica's.
        """
        self._require_open(f"mark {key} create-only")
        if type(key) is not DocKey:
            raise _bad_key(key, "create_only")
        if authority is not None:
            self._replica._check_authority(authority)
        elif key not in self._docs:
            self._guard(key, "mark create-only")
        if self._create_only is None:
            self._create_only = set()
        self._create_only.add(key)

    # -- settling
    def add_settle_callback(self, fn: SettleCallback) -> None:
        """`fn(tx, result)` runs exactly once, for every outcome (right away if already settled)."""
        check_callable(fn, where="Transaction.add_settle_callback()", name="fn")
        if self.result is not None:
            fn(self, self.result)
        else:
            callbacks = self._settle_callbacks
            if callbacks is None:
                self._settle_callbacks = fn
            elif isinstance(callbacks, list):
                callbacks.append(fn)
            else:
                self._settle_callbacks = [callbacks, fn]

    def post_commit(self, fn: Callable[[], None]) -> None:
        """`fn()` runs once, only after a successful commit."""
        check_callable(fn, where="Transaction.post_commit()", name="fn")
        if self.result is not None:
            if self.result.ok:
                fn()
            return
        if self._post_commit is None:
            self._post_commit = [fn]
        else:
            self._post_commit.append(fn)

    def commit(self) -> Pending[CommitResult]:
        """Apply locally (notifying at once), send to the store, return the pending verdict."""
        if self.status != "open":
            self._require_open("commit")
        self.status = "committing"
        self._replica._open_txs -= 1
        self._values = None
        pending = self._pending
        if pending is None:
            pending = self._pending = Pending(self._replica.mailbox)
        self._replica._commit(self)
        return pending

    def commit_detached(
        self, on_settle: SettleCallback | None = None, *, on_failure: SettleCallback | None = None
    ) -> None:
        """Like `commit()`, for callers that follow the outcome through callbacks.

        Makes no `Pending` (the scheduler commits one transaction per node run).
        Both callbacks are kept only if the commit is still in flight when this
        returns: a commit settled at once (elided, or failing its local basis
        check) calls neither, and the caller reads `result` instead (most effect
        runs commit nothing). `on_settle(tx, result)` then runs like a settle
        callback; `on_failure(tx, result)` runs after the settle callbacks only if
        the outcome is not OK (the scheduler's usual case: nothing to do on OK,
        so no call is made).
        """
        if self.status != "open":
            self._require_open("commit")
        if on_settle is not None and not callable(on_settle):
            check_callable(on_settle, where="Transaction.commit_detached()", name="on_settle")
        if on_failure is not None and not callable(on_failure):
            check_callable(on_failure, where="Transaction.commit_detached()", name="on_failure")
        self.status = "committing"
        self._replica._open_txs -= 1
        self._values = None
        try:
            self._replica._commit(self)
        finally:  # (a subscriber raising inside `_commit` leaves the commit in flight)
            if self.result is None:
                if on_settle is not None:
                    if self._settle_callbacks is None:
                        self._settle_callbacks = on_settle
                    else:
                        self.add_settle_callback(on_settle)
                self._on_failure = on_failure

    def abort(self, reason: object = None) -> None:
        """Discard everything and settle as ABORTED (settle callbacks run now)."""
        if self.status == "aborted":
            return
        self._require_open("abort")
        self._replica._open_txs -= 1
        err = TransactionAborted(f"transaction aborted: {reason!r}", reason=reason)
        self._settle(CommitResult(Outcome.ABORTED, err))

    def done(self) -> Pending[CommitResult]:
        """The pending result, without committing."""
        pending = self._pending
        if pending is None:
            pending = self._pending = Pending(self._replica.mailbox)
            if self.result is not None:
                pending._resolve(self.result)
        return pending

    # -- `async with rt.edit() as tx:`
    async def __aenter__(self) -> Transaction:
        self._require_open("enter `async with`")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit when the block ends normally and wait for the verdict; abort when it raises.

        A failed commit raises its rejection (a `CommitRejected`; `error.outcome`
        says which). The block's own exception is never swallowed: the
        transaction is aborted and the exception propagates. A transaction the
        block already committed is awaited; one it aborted is left as it is.
        """
        if exc is not None:
            if self.status == "open":
                self.abort(exc)
            return
        if self.status == "open":
            pending = self.commit()
        elif self.status == "aborted":
            return
        else:
            pending = self.done()
        result = await pending
        if result.ok:
            return
        error = result.error
        if isinstance(error, CommitRejected):
            raise error
        raise CommitRejected(
            f"the commit of {self!r}{self._opened()} failed: {result.outcome!r}"
        ) from error

    def _opened(self) -> str:
        site = self._site
        if site is None:
            return ""
        file, line = site_line(site)
        return f" (opened at {file}:{line})"

    def _settle(self, result: CommitResult) -> None:
        if self.result is not None:
            raise TransactionError("a transaction settled twice (this is a bug)")
        self.result = result
        self._values = None
        ok = result.outcome is Outcome.OK
        if ok:
            self.status = "committed"
        elif result.outcome is Outcome.ABORTED:
            self.status = "aborted"
        else:
            self.status = "rejected"
        errors: list[Exception] | None = None  # made on the first failure
        effects = self._post_commit
        if effects is not None:
            self._post_commit = None
            if ok:
                for fn in effects:
                    try:
                        fn()
                    except Exception as exc:
                        errors = [*(errors or ()), exc]
        callbacks = self._settle_callbacks
        if callbacks is not None:
            self._settle_callbacks = None
            if isinstance(callbacks, list):
                for cb in callbacks:
                    try:
                        cb(self, result)
                    except Exception as exc:  # one failing callback must not skip its siblings
                        errors = [*(errors or ()), exc]
            else:  # one callback: the usual
                try:
                    callbacks(self, result)
                except Exception as exc:
                    errors = [*(errors or ()), exc]
        if not ok:
            on_failure = self._on_failure
            if on_failure is not None:
                self._on_failure = None
                try:
                    on_failure(self, result)
                except Exception as exc:
                    errors = [*(errors or ()), exc]
        if self._pending is not None:
            self._pending._resolve(result)
        if errors:
            if len(errors) == 1:
                raise errors[0]
            raise ExceptionGroup(f"{len(errors)} settle callbacks of {self!r} failed", errors)

    def _check(self) -> None:
        assert (self.result is None) == (self.status in ("open", "committing")), self.status
        assert self.result is None or self._settle_callbacks is None
        assert self._pending is None or self._pending.done() == (self.result is not None)
        assert self._values is None or self.status == "open", "read memo outlived the open state"


class OpenedTransaction(Transaction):
    """A transaction a caller opened (`Replica.edit`): it warns when dropped with staged
    writes (a forgotten commit).

    A subclass, so that only these pay for the finalizer: an object with `__del__`
    costs about a quarter more to create and free, and the scheduler opens one
    transaction per node run, which it always commits or aborts itself (as does
    `Cell.set`'s), while `Cell.get`'s only reads.
    """

    __slots__ = ()

    def __del__(self) -> None:
        # A dropped transaction with staged writes is almost always a forgotten
        # commit: the writes are silently lost and reads stay MISSING. (Read-only
        # transactions are dropped open all the time: `Cell.get` makes one.)
        # (getattr: a constructor that raised leaves slots unset, and must not be reported.)
        if getattr(self, "status", None) != "open":
            return
        self._replica._open_txs -= 1  # (counted open since `status` was set)
        docs = getattr(self, "_docs", None)
        if not docs:
            return
        written = [key for key, td in docs.items() if td.written is not None]
        if not written:
            return
        named = ", ".join(map(describe, written[:3]))
        if len(written) > 3:
            named += f" and {len(written) - 3} more"
        site = getattr(self, "_site", None)
        where = None if site is None else site_line(site)
        message = (
            f"a transaction with staged writes to {named} was dropped without"
            f" commit() or abort(){self._opened()}; its writes are lost"
            " (use `async with rt.edit() as tx:` to commit on exit)"
        )
        try:
            if where is None:
                warnings.warn(message, ResourceWarning, stacklevel=1, source=self)
            else:
                warnings.warn_explicit(message, ResourceWarning, where[0], where[1], source=self)
        except ImportError:  # interpreter shutdown: the warnings machinery is gone
            pass

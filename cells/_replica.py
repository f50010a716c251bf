"""The replica: one runtime's client-side view of a store.

Per document it keeps the *confirmed* state (the store's, as last heard)
and *pending layers* (this replica's commits still waiting for a verdict);
the *visible* value is the layers folded over the confirmed state. Every
visible change is announced on the one change channel as a value-bearing
`Notification` (`commit`, `revert`, `integrate`, `load`), with the whole
document before and after.

- `commit`: synchronously inside `Transaction.commit()`, after the local apply.
- `revert`: after a rejection drops the layer; computed against the current
  confirmed state, so it never stomps newer integrated values.
- `integrate`: another session's accepted commit (or an own acceptance that
  moved the visible value).
- `load`: a document arrived from the store after it was read as not yet loaded.

Invariants (checked by `_check`)
- visible == fold(layers over confirmed) for every document;
- layers of a document are in increasing local seq order, and every layer
  belongs to a commit in flight;
- a document's version changes exactly when its visible value changes.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import Any, Literal

import attrs
import msgspec

from ._access import Authority
from ._address import DocKey, Identity, Path
from ._args import bad_arg, check_arg, check_callable
from ._outcome import CommitResult, Outcome
from ._pending import Mailbox, Pending
from ._store import CommitRequest, DocState, Fence, ReadClaim, StoreBase, Verdict, Write
from ._transaction import LIBRARY_DIRS, Transaction, TxDoc
from ._values import MISSING, Value, get_path, same_value, set_path
from .errors import (
    InconsistentBasisError,
    InvalidValueError,
    OwnershipError,
    TransactionError,
)

NotificationKind = Literal["commit", "revert", "integrate", "load"]


class Change(msgspec.Struct, frozen=True, gc=False):
    """One document's visible value before and after a change.

    `paths`, when known (a local commit), are the full-document paths written: the
    two values differ only at or below them (writes copy only along their path), so
    a reader index can look for readers there alone. None means unknown (a fold of
    layers, a foreign commit): compare everywhere.

    `gc=False`: it holds a key, two values and paths, which never refer back to it.
    """

    key: DocKey
    before: Value
    after: Value
    paths: tuple[Path, ...] | None = None


class Notification(msgspec.Struct, frozen=True):
    """One visible transition of the replica (the only change channel)."""

    kind: NotificationKind
    changes: tuple[Change, ...]
    source: Transaction | None = None
    reason: BaseException | None = None


class Layer(msgspec.Struct, gc=False):
    """One pending commit's writes to one document.

    A Struct because one is made per commit; `gc=False` because it holds only
    paths and values, which never refer back to it.
    """

    seq: int
    writes: Sequence[tuple[Path, Value]]

    def __repr__(self) -> str:
        return f"Layer({self.seq}, {self.writes!r})"


class DocRecord(msgspec.Struct, gc=False):
    """One document's state in the replica.

    A Struct with `gc=False`: one exists per document for the replica's life,
    and it holds only values, seqs and its layers, which never refer back to it,
    so the collector need not scan it (and it needs no collector header).
    """

    confirmed: Value = MISSING
    confirmed_seq: int = 0
    # A tuple while there are at most one pending layer (the shared empty tuple, or
    # a 1-tuple), a deque only for more: a deque costs 760 bytes, most documents
    # (every computation's output) have none, and a scheduler run's commit has one
    # in flight until its verdict.
    layers: collections.deque[Layer] | tuple[Layer, ...] = ()
    visible: Value = MISSING
    version: int = 0
    loaded: bool = False
    loading: bool = False

    def fold(self) -> Value:
        v = self.confirmed
        for layer in self.layers:
            for path, value in layer.writes:
                try:
                    v = set_path(v, path, value)
                except InvalidValueError:
                    # A newer value put a scalar above this blind write, so it does not
                    # apply (the store refuses it the same way); raising here would wedge
                    # every later delivery to this replica.
                    continue
        return v


@attrs.define
class ReplicaStats:
    """Counted work (for benchmarks and diagnostics; observes, never decides)."""

    commits_sent: int = 0
    commits_elided: int = 0
    local_stale: int = 0
    accepted: int = 0
    rejected: int = 0
    notifications: int = 0
    loads: int = 0


_OK = CommitResult(Outcome.OK)
_NO_KEYS: frozenset[DocKey] = frozenset()


def _created_level(working: Value, visible: Value, path: Path) -> Path | None:
    """The shortest prefix of `path` that exists in `working` but not in `visible`."""
    for i in range(len(path)):
        prefix = path[:i]
        if get_path(visible, prefix) is MISSING and get_path(working, prefix) is not MISSING:
            return prefix
    return None


def _path_order(p: Path) -> tuple[int, list[str]]:
    return (len(p), [str(e) for e in p])


def _compact(paths: Iterable[Path]) -> list[Path]:
    """Sorted unique paths with every path below another one removed."""
    unique = list(dict.fromkeys(paths))
    if len(unique) <= 1:
        return unique
    # Shortest first, so a covering path is kept before the paths below it; the set
    # makes the prefix test O(len(p)) instead of one comparison per kept path.
    out: list[Path] = []
    kept: set[Path] = set()
    for p in sorted(unique, key=_path_order):
        if not any(p[:i] in kept for i in range(len(p) + 1)):
            out.append(p)
            kept.add(p)
    return out


def _adopt_oldest_layer(
    rec: DocRecord, layers: collections.deque[Layer] | tuple[Layer, ...], value: Value, seq: int
) -> None:
    """The store applied exactly `rec`'s oldest pending layer on exactly its confirmed
    state (verdicts arrive in order), giving `value` at `seq`: that layer folded over
    confirmed, so the visible value (the rest folded on top) does not move. Adopt it
    without re-folding or comparing documents, which would cost O(document x layers)
    per verdict. With no layer left the store's value equals the visible one: keep
    only one of the two (values are never changed in place) instead of a copy of
    every written document on each side (184 bytes for a one-field document)."""
    if isinstance(layers, tuple):
        layers = rec.layers = layers[1:]
    else:
        layers.popleft()
        if not layers:
            rec.layers = ()
    rec.confirmed = value
    if not layers:
        rec.visible = value
    rec.confirmed_seq = seq
    rec.loaded = True


class Replica:
    """A runtime's replica of a store. Create one per runtime (session)."""

    def __init__(self, store: StoreBase, *, session_id: str | None = None) -> None:
        if not isinstance(store, StoreBase):
            raise bad_arg(
                store, where="Replica()", name="store", accepts="a store (MemoryStore, SQLiteStore)"
            )
        if session_id is not None:
            check_arg(
                session_id, str, where="Replica()", name="session_id", accepts="a str or None"
            )
        self.store = store
        self.mailbox = Mailbox()
        self._docs: dict[DocKey, DocRecord] = {}
        # A tuple, replaced on (un)subscribe: a notification iterates it without a copy,
        # and a subscriber that unsubscribes during one does not disturb the loop.
        self._subscribers: tuple[Callable[[Notification], None], ...] = ()
        self._next_seq = 1
        self._in_flight: dict[int, Transaction] = {}
        self._sync_waiters: dict[DocKey, list[Callable[[BaseException | None], None]]] = {}
        self.stats = ReplicaStats()
        self._batch: list[CommitRequest] | None = None
        """Requests held back while a batch is open (`begin_batch`), in commit order."""
        self._batch_depth = 0
        self.fence_for: Callable[[Transaction, CommitRequest], Fence | None] | None = None
        """Set by a runtime serving claimed pages: the fence a commit carries (or None)."""
        self.session_id = store.connect(self, session_id)
        self.closed = False
        self._authority: Authority | None = None
        """Handed out once (`claim_authority`); None until then."""

    def __repr__(self) -> str:
        return (
            f"<Replica {self.session_id} docs={len(self._docs)} in_flight={len(self._in_flight)}>"
        )

    # ------------------------------------------------------------------ public
    def edit(
        self, identity: Identity, *, source: object = None, authority: Authority | None = None
    ) -> Transaction:
        """Open a transaction acting for `identity`: it touches only the documents that
        identity resolves to (`OwnershipError` otherwise); with this replica's
        `authority` it reaches every document (the runtime's own bookkeeping). It
        remembers the user's line that opened it (named if it is dropped with staged
        writes, see `Transaction`)."""
        if type(identity) is not Identity:
            raise bad_arg(identity, where="Replica.edit()", name="identity", accepts="an Identity")
        if self.closed:
            raise TransactionError(f"replica {self.session_id} is closed")
        if authority is None:  # (the usual case: one keyword fewer to pass on)
            tx = Transaction(self, identity, source=source)
        else:
            tx = Transaction(self, identity, source=source, authority=authority)
        # The opening site: the first frame outside cellweave's packages (inlined: a
        # helper call would cost as much as the walk).
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_DIRS):
            frame = frame.f_back
        if frame is not None:
            tx._site = (frame.f_code, frame.f_lasti)
        return tx

    def _open_tx(self, identity: Identity, source: object = None) -> Transaction:
        """`edit` without recording the opening site (reads that never write)."""
        if self.closed:
            raise TransactionError(f"replica {self.session_id} is closed")
        return Transaction(self, identity, source=source)

    def claim_authority(self) -> Authority:
        """The capability to reach every document, handed out once: whoever runs this
        replica (a `Runtime`, as it starts) claims it and keeps it from user code.
        A second claim raises `OwnershipError`."""
        if self._authority is not None:
            raise OwnershipError(
                f"replica {self.session_id}: its authority was already claimed (a Runtime"
                " claims it as it starts; open transactions through the runtime)"
            )
        self._authority = Authority()
        return self._authority

    def _check_authority(self, authority: object) -> bool:
        """True if `authority` is this replica's; `OwnershipError` otherwise."""
        if authority is None or authority is not self._authority:
            raise OwnershipError(
                f"replica {self.session_id}: {authority!r} is not this replica's authority"
            )
        return True

    def subscribe(self, fn: Callable[[Notification], None]) -> Callable[[], None]:
        """Receive every notification; returns a function that unsubscribes."""
        check_callable(fn, where="Replica.subscribe()", name="fn")
        self._subscribers = (*self._subscribers, fn)

        def cancel() -> None:
            subscribers = list(self._subscribers)
            if fn in subscribers:
                subscribers.remove(fn)
                self._subscribers = tuple(subscribers)

        return cancel

    def visible(self, key: DocKey) -> Value:
        """The visible document (loading it if needed; MISSING while a held load waits)."""
        if type(key) is not DocKey:
            raise bad_arg(key, where="Replica.visible()", name="key", accepts="a DocKey")
        return self._record(key).visible

    def is_loaded(self, key: DocKey) -> bool:
        rec = self._docs.get(key)
        return rec is not None and rec.loaded

    def in_flight(self) -> int:
        """Commits applied locally and still waiting for their verdict."""
        return len(self._in_flight)

    def pump(self) -> int:
        """Deliver everything the store has answered so far (verdicts, loads, foreign changes).

        Sends an open batch first (draining the mailbox does).
        """
        delivered = self.mailbox.drain()
        if delivered and not self._in_flight:
            # A dict never shrinks: without this, a burst of N commits in flight kept
            # a table for N entries (37 bytes each at 2000) for the replica's life.
            self._in_flight = {}
        return delivered

    # ------------------------------------------------------------------ batches
    def begin_batch(self) -> None:
        """Hold back the store requests of the commits made from now until `end_batch()`.

        Each commit still applies locally, notifies and settles on its own verdict
        as always; only the hand-over to the store is grouped: `end_batch()` sends
        the requests in commit order in one `submit_batch`, so the store evaluates
        them one after the other (each sees the ones before it) and answers them
        with one mailbox delivery. Verdicts never arrive inside `commit()` anyway,
        so nothing observable moves except when the store first sees a request.
        Nests; anything that waits on the store (`pump`, a mailbox drain, a sync,
        `close`) sends the open batch first.
        """
        self._batch_depth += 1
        if self._batch is None:
            self._batch = []
            self.mailbox.before_drain = self.flush_batch  # (only while a batch is open)

    def end_batch(self) -> None:
        """Close the batch opened by the matching `begin_batch()` and send it."""
        if self._batch_depth <= 0:
            raise TransactionError(f"replica {self.session_id}: end_batch() without begin_batch()")
        self._batch_depth -= 1
        if self._batch_depth == 0:
            try:
                self.flush_batch()
            finally:
                self._batch = None
                self.mailbox.before_drain = None

    def flush_batch(self) -> None:
        """Send the requests held in the open batch now (the batch stays open)."""
        batch = self._batch
        if batch:
            self._batch = [] if self._batch_depth else None
            if len(batch) == 1:
                self.store.submit(self, batch[0])
            else:
                self.store.submit_batch(self, batch)

    def sync(self, keys: Iterable[DocKey]) -> Pending[None]:
        """Load or catch up `keys` with the store; resolves when all have answered.

        Always goes through the store (a held load holds it, even for a loaded
        document). Fails with the first load error.
        """
        check_arg(keys, Iterable, where="Replica.sync()", name="keys", accepts="DocKeys")
        keys = list(dict.fromkeys(keys))
        for key in keys:
            if type(key) is not DocKey:
                raise bad_arg(key, where="Replica.sync()", name="each key", accepts="a DocKey")
        pending: Pending[None] = Pending(self.mailbox)
        self.flush_batch()  # a sync answers after every commit made before it
        remaining = [len(keys)]
        if not keys:
            self.mailbox.post(lambda: pending._resolve(None))
            return pending

        def one_done(error: BaseException | None) -> None:
            if pending.done():
                return
            if error is not None:
                pending._fail(error)
                return
            remaining[0] -= 1
            if remaining[0] == 0:
                pending._resolve(None)

        for key in keys:
            self._sync_waiters.setdefault(key, []).append(one_done)
            rec = self._docs.get(key)
            if rec is None:
                rec = self._docs[key] = DocRecord()
            if not rec.loading:
                rec.loading = True
                self.store.load(self, key)
        return pending

    def close(self) -> None:
        try:
            self.flush_batch()
        finally:
            self.closed = True
            self.store.disconnect(self.session_id)

    # ------------------------------------------------------------------ records
    def _record(self, key: DocKey) -> DocRecord:
        rec = self._docs.get(key)
        if rec is None:
            rec = self._docs[key] = DocRecord()
            state = self.store.load_now(key)
            if state is None:
                rec.loading = True
                self.store.load(self, key)
            else:
                self.stats.loads += 1
                rec.loaded = True
                rec.confirmed = rec.visible = state.value
                rec.confirmed_seq = state.seq
        return rec

    def _notify(self, nf: Notification) -> None:
        if not nf.changes:
            return
        self.stats.notifications += 1
        errors: list[Exception] | None = None
        for fn in self._subscribers:
            try:
                fn(nf)
            except Exception as exc:  # every subscriber hears every change
                if errors is None:
                    errors = []
                errors.append(exc)
        if errors:
            if len(errors) == 1:
                raise errors[0]
            raise ExceptionGroup(f"{len(errors)} subscribers failed on a {nf.kind}", errors)

    def _refresh(self, key: DocKey, rec: DocRecord, changes: list[Change]) -> None:
        before = rec.visible
        after = rec.fold()
        rec.visible = after
        if not same_value(before, after):
            rec.version += 1
            changes.append(Change(key, before, after))

    # ------------------------------------------------------------------ commit
    def _ops_for(self, td: TxDoc, rec: DocRecord) -> tuple[Sequence[tuple[Path, Value]], bool]:
        """The writes a layer carries, and whether any of them changes the visible value.

        A write equal to the visible value is elided only when the document has no
        pending local layer. Otherwise it is kept as a *shadow* write that changes
        nothing now: a pending layer may still fail (the write must then survive
        it), and pending layers confirmed later land *before* this write, so the
        durable order must include it even when the confirmed value agrees. (Without
        this, a setup re-issued on top of an earlier pending setup commits nothing
        and is lost if the earlier fails; and a computation's fresh value, equal to
        what is shown, is overwritten when older pending writes are confirmed.)
        """
        visible = rec.visible
        written = td.written
        assert written is not None  # only called for written documents
        # (`_commit` decides one changed top-level field of a dict document itself.)
        pending = bool(rec.layers)
        changes = False
        ops: list[tuple[Path, Value]] = []
        for path in written if len(written) == 1 else _compact(written):
            target = path
            # Lift a write that changed a list's length to the list: list elements
            # are addressed by position, so a leaf write cannot say "insert" or
            # "remove". Writes that create dict levels stay leaf writes (the store
            # creates the levels, and records the first created one for conflict
            # checks), so two sessions creating different fields both keep theirs.
            for i in range(len(path)):
                prefix = path[:i]
                if i:
                    base = get_path(td.baseline, prefix)
                    work = get_path(td.working, prefix)
                else:
                    base, work = td.baseline, td.working
                if type(base) is list and (type(work) is not list or len(work) != len(base)):
                    target = prefix
                    break
            new = get_path(td.working, target)
            if same_value(new, get_path(visible, target)):
                # The leaf did not change, but a level this transaction created and
                # then emptied (`{}` left behind) must still be written.
                created = _created_level(td.working, visible, target)
                if created is not None:
                    target, new = created, get_path(td.working, created)
                    changes = True
                elif not pending:
                    continue
            else:
                changes = True
            ops.append((target, new))
        if len(ops) > 1:
            keep = set(_compact(p for p, _ in ops))
            ops = [(p, v) for p, v in ops if p in keep]
        return ops, changes

    def _commit(self, tx: Transaction) -> None:
        records = self._docs
        docs = tx._docs
        if len(docs) == 1 and not tx._create_only:
            ((key, td),) = docs.items()
            if not td.written:
                # A transaction that read one document and wrote nothing (an effect's
                # run): only its basis can fail; otherwise it is elided, no claims built.
                if td.read and records[key].version != td.version:
                    self._stale(tx, f"{key} changed locally after this transaction first read it")
                    return
                self.stats.commits_elided += 1
                tx._settle(_OK)
                return
        elif len(docs) == 2 and not tx._create_only:
            (rkey, rtd), (wkey, wtd) = docs.items()
            rpaths, written = rtd.reads, wtd.written
            if (
                rpaths is not None
                and len(rpaths) == 1
                and not rtd.written
                and written is not None
                and len(written) == 1
                and not wtd.read
            ):
                # The usual computation: one read of its input, one write of a field of
                # its output (the general path's one-field shortcut, without its loop).
                rec = records[wkey]
                path = written[0]
                working, visible = wtd.working, rec.visible
                if (
                    len(path) == 1
                    and type(path[0]) is str
                    and type(working) is dict
                    and visible is wtd.baseline
                    and type(visible) is dict
                ):
                    if records[rkey].version != rtd.version:
                        self._stale(
                            tx, f"{rkey} changed locally after this transaction first read it"
                        )
                        return
                    new = working.get(path[0], MISSING)
                    old = visible.get(path[0], MISSING)
                    t = type(new)
                    if t is type(old) and (t is int or t is str):
                        changed = new != old
                    else:
                        changed = not same_value(new, old)
                    if not changed:
                        self.stats.commits_elided += 1
                        tx._settle(_OK)
                        return
                    seq = self._next_seq
                    self._next_seq = seq + 1
                    layers = rec.layers
                    if not layers:
                        rec.layers = (Layer(seq, ((path, new),)),)
                    elif isinstance(layers, tuple):
                        rec.layers = collections.deque((*layers, Layer(seq, ((path, new),))))
                    else:
                        layers.append(Layer(seq, ((path, new),)))
                    change = Change(wkey, visible, working, (path,))
                    rec.visible = working
                    rec.version += 1
                    ((rpath, shallow),) = rpaths
                    request = CommitRequest(
                        self.session_id,
                        seq,
                        (ReadClaim(rkey, rpath, shallow, rtd.basis_seq),),
                        rtd.deps,
                        (Write(wkey, path, new),),
                        _NO_KEYS,
                    )
                    self._send(tx, seq, request, (change,))
                    return
        # One pass: check every read document's basis, stage every written one and
        # collect the read claims. Staging only computes, so a stale document found
        # later discards it safely.
        staged: list[tuple[DocKey, DocRecord, Sequence[tuple[Path, Value]], Value, bool]] = []
        reads: list[ReadClaim] = []
        deps: tuple[int, ...] = ()
        merged = False
        for key, td in tx._docs.items():
            rec = records[key]
            if td.read:
                if rec.version != td.version:
                    self._stale(tx, f"{key} changed locally after this transaction first read it")
                    return
                if td.deps:
                    if deps:
                        deps = (*deps, *td.deps)
                        merged = True
                    else:
                        deps = td.deps  # ascending: a document's layers are in seq order
                td_reads = td.reads
                assert td_reads is not None  # a read document has read paths
                if type(td_reads) is tuple:  # read at one place (however often)
                    path, shallow = td_reads[0]
                    reads.append(ReadClaim(key, path, shallow, td.basis_seq))
                else:
                    self._claims(key, td, reads)
            written = td.written
            if written:
                visible = rec.visible
                if len(written) == 1:
                    path = written[0]
                    working, baseline = td.working, td.baseline
                    if (
                        len(path) == 1
                        and type(working) is dict
                        and type(visible) is dict
                        and type(baseline) is not list
                        and type(path[0]) is str
                    ):
                        # One write to a top-level field of a dict document (the usual
                        # scheduler write): nothing to lift, and two lookups decide it.
                        new = working.get(path[0], MISSING)
                        old = visible.get(path[0], MISSING)
                        t = type(new)
                        if t is type(old) and (t is int or t is str):
                            changed = new != old  # what same_value decides for two ints or strs
                        else:
                            changed = not same_value(new, old)
                        if changed:
                            # On the state the transaction started from, the working copy
                            # is that write applied to the visible value.
                            after = working if visible is baseline else set_path(visible, path, new)
                            # `ops` a tuple: it can leave the collector's view.
                            staged.append((key, rec, ((path, new),), after, True))
                            continue
                ops, visible_change = self._ops_for(td, rec)
                if len(written) == 1 and visible is td.baseline and ops and ops[0][0] is written[0]:
                    # The one write, unlifted, on the state the transaction started
                    # from: the working copy is that write applied to the visible value.
                    staged.append((key, rec, ops, td.working, visible_change))
                elif ops:
                    after = visible
                    try:
                        for path, value in ops:
                            after = set_path(after, path, value)
                    except InvalidValueError as exc:
                        # A blind write below a place that became a scalar since this
                        # transaction first saw it: nothing applied, re-run on fresh state.
                        self._stale(tx, f"write to {key} no longer applies: {exc}")
                        return
                    staged.append((key, rec, ops, after, visible_change))
        create_only = tx._create_only
        if not staged and not create_only:
            self.stats.commits_elided += 1
            tx._settle(_OK)
            return
        seq = self._next_seq
        self._next_seq = seq + 1
        changes: list[Change] = []
        writes: list[Write] = []
        for key, rec, ops, after, visible_change in staged:
            layers = rec.layers
            if not layers:
                rec.layers = (Layer(seq, ops),)
            elif isinstance(layers, tuple):
                rec.layers = collections.deque((*layers, Layer(seq, ops)))
            else:
                layers.append(Layer(seq, ops))
            if visible_change:
                # A shadow write (equal to a still-pending value) changes nothing now.
                paths = (ops[0][0],) if len(ops) == 1 else tuple([op[0] for op in ops])
                changes.append(Change(key, rec.visible, after, paths))
                rec.visible = after
                rec.version += 1
            for path, value in ops:
                writes.append(Write(key, path, value))
        request = CommitRequest(
            self.session_id,
            seq,
            tuple(reads),
            tuple(sorted(set(deps))) if merged else deps,
            tuple(writes),
            frozenset(create_only) if create_only else _NO_KEYS,
        )
        self._send(tx, seq, request, tuple(changes))

    def _send(
        self, tx: Transaction, seq: int, request: CommitRequest, changes: tuple[Change, ...]
    ) -> None:
        """A staged commit: in flight, its visible changes notified, handed to the store."""
        fence_for = self.fence_for
        if fence_for is not None:
            fence = fence_for(tx, request)
            if fence is not None:
                request = msgspec.structs.replace(request, fence=fence)
        # The request and layers carry everything from here on: drop the working copies
        # and the read log now, so what stays in flight until the verdict is small (a
        # drain keeps every commit it made in flight, and the collector walks them).
        tx._docs = {}
        tx._log = []
        self._in_flight[seq] = tx
        self.stats.commits_sent += 1
        try:
            if changes:
                subscribers = self._subscribers
                nf = Notification("commit", changes, tx)
                if len(subscribers) == 1:  # `_notify` for one subscriber (a scheduler)
                    self.stats.notifications += 1
                    subscribers[0](nf)
                else:
                    self._notify(nf)
        finally:
            batch = self._batch
            if batch is not None:
                batch.append(request)
            else:
                self.store.submit(self, request)

    def _stale(self, tx: Transaction, message: str) -> None:
        self.stats.local_stale += 1
        tx._settle(CommitResult(Outcome.STALE_BASIS, InconsistentBasisError(message)))

    @staticmethod
    def _claims(key: DocKey, td: TxDoc, out: list[ReadClaim]) -> None:
        """The read claims of a document read at more than one place: deep paths compacted."""
        assert td.reads is not None
        deep = _compact(p for p, shallow in td.reads if not shallow)
        out.extend(ReadClaim(key, p, False, td.basis_seq) for p in deep)
        shallow_paths = {p for p, s in td.reads if s}
        out.extend(
            ReadClaim(key, p, True, td.basis_seq)
            for p in sorted(shallow_paths, key=str)
            if not any(p[: len(q)] == q for q in deep)
        )

    # ------------------------------------------------------------------ store listener
    def on_accepted(self, request: CommitRequest, seq: int, base_seq: int, value: Value) -> None:
        """`on_verdict` for an accepted one-write commit, without a `Verdict`."""
        local_seq = request.local_seq
        tx = self._in_flight.pop(local_seq, None)
        if tx is None:
            return  # replica was closed meanwhile; nothing to settle
        key = request.writes[0].key
        rec = self._docs[key]
        layers = rec.layers
        if not (layers and layers[0].seq == local_seq and base_seq == rec.confirmed_seq):
            self._apply_verdict(tx, request, Verdict(seq, {key: value}, base_seqs={key: base_seq}))
            return
        _adopt_oldest_layer(rec, layers, value, seq)
        self.stats.accepted += 1
        tx._settle(CommitResult(Outcome.OK, None, seq))

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
        tx = self._in_flight.pop(request.local_seq, None)
        if tx is None:
            return  # replica was closed meanwhile; nothing to settle
        self._apply_verdict(tx, request, verdict)

    def _apply_verdict(self, tx: Transaction, request: CommitRequest, verdict: Verdict) -> None:
        changes: list[Change] = []
        seq = verdict.seq if verdict.error is None else None
        writes = request.writes
        for key in (writes[0].key,) if len(writes) == 1 else request.keys_in_order():
            rec = self._docs[key]
            layers = rec.layers
            if (
                seq is not None
                and layers
                and layers[0].seq == request.local_seq
                and verdict.base_seqs.get(key, -1) == rec.confirmed_seq
            ):
                _adopt_oldest_layer(rec, layers, verdict.docs[key], seq)
                continue
            kept = [lay for lay in layers if lay.seq != request.local_seq]
            rec.layers = collections.deque(kept) if kept else ()
            if seq is not None and seq > rec.confirmed_seq:
                rec.confirmed = verdict.docs.get(key, rec.confirmed)
                rec.confirmed_seq = seq
                rec.loaded = True
            self._refresh(key, rec, changes)
        if verdict.error is None:
            self.stats.accepted += 1
            result = CommitResult(Outcome.OK, None, verdict.seq)
            try:
                if changes:
                    self._notify(Notification("integrate", tuple(changes), None))
            finally:
                tx._settle(result)
        else:
            self.stats.rejected += 1
            from ._outcome import classify

            result = CommitResult(classify(verdict.error), verdict.error)
            try:
                self._notify(Notification("revert", tuple(changes), tx, verdict.error))
            finally:
                tx._settle(result)

    def on_foreign(self, seq: int, docs: dict[DocKey, Value]) -> None:
        changes: list[Change] = []
        for key, value in docs.items():
            rec = self._docs.get(key)
            if rec is None or not rec.loaded or seq <= rec.confirmed_seq:
                continue
            rec.confirmed = value
            rec.confirmed_seq = seq
            self._refresh(key, rec, changes)
        if changes:
            self._notify(Notification("integrate", tuple(changes), None))

    def on_loaded(self, key: DocKey, state: DocState | None, error: BaseException | None) -> None:
        rec = self._docs.get(key)
        if rec is None:
            rec = self._docs[key] = DocRecord()
        rec.loading = False
        waiters = self._sync_waiters.pop(key, [])
        changes: list[Change] = []
        if state is not None and (not rec.loaded or state.seq > rec.confirmed_seq):
            self.stats.loads += 1
            rec.confirmed = state.value
            rec.confirmed_seq = state.seq
            rec.loaded = True
            self._refresh(key, rec, changes)
        try:
            if changes:
                self._notify(Notification("load", tuple(changes), None))
        finally:
            for fn in waiters:
                fn(error)

    # ------------------------------------------------------------------ invariants
    def _check(self) -> None:
        for key, rec in self._docs.items():
            assert same_value(rec.visible, rec.fold()), f"visible value of {key} is not the fold"
            seqs = [lay.seq for lay in rec.layers]
            assert seqs == sorted(seqs), f"layers of {key} out of order"
            for s in seqs:
                assert s in self._in_flight, f"layer {s} of {key} has no commit in flight"
        for seq, tx in self._in_flight.items():
            assert tx.status == "committing", (seq, tx)


async def edit_with_retry(
    replica: Replica,
    identity: Identity,
    fn: Callable[[Transaction], Any],
    *,
    attempts: int = 5,
) -> CommitResult:
    """Run `fn(tx)` in a fresh transaction and commit; retry only allow-listed outcomes.

    Retries happen for `RETRYABLE` outcomes (STALE_BASIS, LIVENESS) up to
    `attempts` times in all; every other outcome is returned at once.
    """
    from ._outcome import RETRYABLE

    where = "edit_with_retry()"
    check_arg(replica, Replica, where=where, name="replica", accepts="a Replica")
    check_arg(identity, Identity, where=where, name="identity", accepts="an Identity")
    check_callable(fn, where=where, name="fn")
    check_arg(attempts, int, where=where, name="attempts", accepts="an int >= 1")
    if attempts < 1:
        raise bad_arg(attempts, where=where, name="attempts", accepts="an int >= 1", kind="value")
    result: CommitResult | None = None
    for _ in range(attempts):
        tx = replica.edit(identity)
        try:
            fn(tx)
        except BaseException:
            if tx.is_open:  # every transaction settles, also when `fn` raises
                tx.abort("edit_with_retry: fn raised")
            raise
        if tx.status == "aborted":
            assert tx.result is not None
            return tx.result
        result = await tx.commit()
        if result.ok or result.outcome not in RETRYABLE:
            return result
    assert result is not None
    return result

"""The replica: one runtime's client-side view of a store.

Per document it keeps a `DocRecord` (`cells._records`): the *confirmed* state
(the store's, as last heard) and *pending layers* (this replica's commits
still waiting for a verdict); the *visible* value is the layers folded over
the confirmed state. Every visible change is announced on the one change
channel as a value-bearing `Notification` (`commit`, `revert`, `integrate`,
`load`), with the whole document before and after.

- `commit`: synchronously inside `Transaction.commit()`, after the local apply
  (`_commit`: staged by `cells._staging`, applied by `_apply_local`, sent by `_send`).
- `revert`: after a rejection drops the layer; computed against the current
  confirmed state, so it never stomps newer integrated values.
- `integrate`: another session's accepted commit (or an own acceptance that
  moved the visible value).
- `load`: a document arrived from the store after it was read as not yet loaded.

A document nothing reads may be *packed* (`pack`, which a serving runtime calls
at each heartbeat): its `confirmed` and `visible` are then one `bytes` object
(`cells._codec.pack_value`; no value is ever bytes), decoded again, in place, the
first time anything reads it (`_unpack`, `_refresh`).

Invariants (checked by `_check`)
- a packed document has no pending layer, and its confirmed value is its visible one;
- visible == fold(layers over confirmed) for every other document;
- layers of a document are in increasing local seq order, and every layer
  belongs to a commit in flight;
- a document's version changes exactly when its visible value changes.
"""

from __future__ import annotations

import collections
import operator
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from types import FrameType
from typing import Any, Final

import msgspec

from ._access import Authority, reaches
from ._address import DocKey, Identity, Link, Path
from ._args import bad_arg, check_arg, check_callable
from ._claims import Fence
from ._codec import pack_value, unpack_value
from ._links import MAX_HOPS, VALUE, _first_link
from ._outcome import CommitResult, Outcome
from ._pending import Mailbox, Pending
from ._records import (
    Change,
    CommitHook,
    DocRecord,
    Layer,
    Notification,
    NotificationKind,
    ReplicaStats,
    adopt_oldest_layer,
    push_layer,
)
from ._staging import (
    Staged,
    basis_moved,
    read_claims,
    stage_writes,
    stale_message,
)
from ._store import (
    REQUEST_PAD,
    RUN_WIDTH,
    CommitRequest,
    DocState,
    ReadClaim,
    StoreBase,
    Verdict,
    Write,
    run_request,
)
from ._transaction import (
    LIBRARY_DIRS,
    OpenedTransaction,
    SentRun,
    SettleCallback,
    Transaction,
    TxDoc,
    _deps,
)
from ._values import (
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    MISSING,
    Value,
    element_position,
    normalize,
    same_value,
    set_path,
)
from .errors import (
    CellweaveError,
    InconsistentBasisError,
    OwnershipError,
    TransactionError,
)

__all__ = [
    "Change",
    "DocRecord",
    "Layer",
    "Notification",
    "NotificationKind",
    "Replica",
    "ReplicaStats",
]

_OK = CommitResult(Outcome.OK)
_OK_OUTCOME = Outcome.OK
_SENT_LOG: list[tuple[DocKey, Path, bool]] = []
"""`Transaction.reads` of every transaction handed to the store (see `_send`): empty."""
_NO_KEYS: frozenset[DocKey] = frozenset()
_VALUE_PATH: Path = ("value",)
_MIN_INT = -MAX_INT - 1
"""The least int a document holds (int64), kept: `run_field` asks it per update."""
WRITE_AT_HOPS = 8
"""How many documents `Replica.write_at` walks through (more: a transaction does)."""


class _Declined:
    pass


_DECLINED = _Declined()


def _moved_leaf(visible: Value, working: Value, path: Path) -> Value | _Declined:
    """The value a user's plain write put at `path` of `working` (made from `visible`), or
    `_DECLINED` when `_commit_write`'s shape does not hold: `ops_for`'s lift check and
    `revision_path`'s level check in one walk (every level above the leaf is in both
    values, no list changed its length), and the value there moved (not elided, not a
    shadow write: the general path decides those)."""
    old: Value = visible
    new: Value = working
    for elem in path:
        t = type(old)
        if t is dict:
            if type(new) is not dict:
                return _DECLINED
            old = old.get(elem, MISSING)
            new = new.get(elem, MISSING)
        elif t is list:
            if (
                type(new) is not list
                or type(elem) is not int
                or len(new) != len(old)
                or elem >= len(old)
            ):
                return _DECLINED
            old = old[elem]
            new = new[elem]
        else:
            return _DECLINED  # a level this write creates (or a scalar in the way)
    t = type(new)
    if (new == old) if t is type(old) and (t is int or t is str) else same_value(new, old):
        return _DECLINED
    return new


RUN_NONE = 0
"""`Replica.run_field`: not its shape, nothing done (run a transaction)."""
RUN_DONE = 1
"""`Replica.run_field`: the run committed (sent or elided)."""


Walk = tuple[
    tuple[DocRecord, ...],
    tuple[int, ...],
    tuple[DocKey, ...],
    tuple[tuple[Path, bool], ...],
    tuple[Any, ...],
]
"""`Replica.plain_chain`'s walk of one link, as a transaction's walk makes it now: per
read, in the order a transaction logs them (each hop's place shallow, then the final
place deep), (0) its document's record, (1) that record's version then, (2) its key and
(3) its (full-document path, shallow) pair, as a run log entry carries it; (4) the plain
value at the end (None for absent), in a 1-tuple. The four are aligned: read i is in
record i. `Replica.walk_inputs`: several walks in one, each distinct read once (in
first-read order, still aligned), the values of each walk in turn. Never changed once
made (a kept walk is handed to every caller, and its pairs go into run log entries as
they are). (Tuples, concatenated: a dict of the reads per walk, lining walks up with
`zip` and `chain.from_iterable`, or keying reads by `DocKey` more often, cost more CPU
instructions than they saved, see docs/performance.md.)"""

_VERSION: Final = operator.attrgetter("version")
"""A record's version (mapped over a walk's records in C: one check of them all)."""

_KEY: Final = operator.attrgetter("key")
"""A write's document (mapped over a commit's writes in C: `on_accepted_many`)."""

_WKEY_BACK: Final = RUN_WIDTH - 7
"""Where a run log entry's `wkey` (item 7, see RUN_WIDTH) is, counted back from the
start of the next entry (`accept_runs` moves its index on before it reads the key)."""

_CHAINS_KEPT = 256
"""`Replica.plain_chain` keeps at most this many walks (then starts again): the walks of
the nodes of one drain, not of every link a replica has walked."""

_NOT_PLAIN: Any = object()
"""`_reach`, `_plain_at`: not a place reached by dicts and lists alone."""


def _reach(doc: Any, path: Path) -> Any:
    """What a transaction's walk reaches at `path` of document value `doc` when it meets
    no link on the way: the value there (a link at the end is that link), MISSING for
    an absent dict key (the walk stops there too); `_NOT_PLAIN` for a link on the way,
    a scalar in the way, or an element-id step (a str step at a list) naming no element
    (`element_position`, as `_links._first_link` resolves it). O(len(path))."""
    value = doc
    for i, step in enumerate(path):
        t = type(value)
        if t is dict:
            if type(step) is not str:
                return _NOT_PLAIN
            value = value.get(step, MISSING)
            if value is MISSING:
                return MISSING  # absent: `get_path` stops here too, nothing to follow
        elif t is list:
            if isinstance(step, int):
                if not 0 <= step < len(value):
                    return _NOT_PLAIN
                value = value[step]
            else:
                at = element_position(doc, path[:i], value, step)
                if at is None:
                    return _NOT_PLAIN  # moved out or removed: the transaction decides
                value = value[at]
        else:
            return _NOT_PLAIN
    return value


def _plain_at(doc: Any, path: Path) -> Any:
    """The plain value a function reads at `path` of document value `doc` (None for
    an absent one), when `_reach` gets there and finds a scalar, nothing, or a
    container holding no link (its copy, `_copied`); else `_NOT_PLAIN` (a link on the
    way or at the end, a container holding one, an element id naming nothing, a scalar
    in the way: a transaction's read decides)."""
    value = _reach(doc, path)
    t = type(value)
    if t is int or t is str or t is float or t is bool or value is None:
        return value
    return _plain_input(value)


def _plain_input(value: Any) -> Any:
    """`_plain_at` of a stored `value` that is not a scalar (the walk made): a
    container's copy (`_copied`, or `_NOT_PLAIN` if a link is inside), None for MISSING
    (an absent key), `_NOT_PLAIN` for anything else (a link)."""
    t = type(value)
    if t is dict or t is list:
        return _copied(value)
    return None if value is MISSING else _NOT_PLAIN  # (else a link)


_FLAT_TYPES: Final = frozenset((int, str, float, bool, type(None)))
"""The types of a stored value that hold nothing inside (no container, no link)."""
_FLAT_FROM = 8
"""From this many items a container is first asked, in C, whether it is flat (each
item's type in `_FLAT_TYPES`) and then copied in C: below, the loop is cheaper."""


def _copied(value: Any) -> Any:
    """A stored container as a function's transaction run receives it when no link sits
    anywhere inside it (`read_value` then logs its one deep read and returns it as it
    is; the function gets `thaw` of it, its own copy): that copy, made in the one walk
    that looks for links. `_NOT_PLAIN` if a link is inside (`read_value` follows it: the
    transaction's). O(size). (The dict's loop and the list's are written out: one
    loop over ``values()`` and a ``dict(zip(...))`` took `kairo mux` with `derive`
    from 0.46 to 0.54-0.56 of main's time.) A flat container of `_FLAT_FROM` items or
    more (`kairo mux`: each split reads a dict of 100 ints) is checked and copied in
    C: the same copy, about a quarter of the loop's time at 100 items."""
    if len(value) >= _FLAT_FROM and _FLAT_TYPES.issuperset(
        map(type, value.values() if type(value) is dict else value)
    ):
        return value.copy()
    if type(value) is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            t = type(v)
            if t is dict or t is list:
                v = _copied(v)
                if v is _NOT_PLAIN:
                    return v
            elif t is Link:
                return _NOT_PLAIN
            out[k] = v
        return out
    items: list[Any] = []
    for v in value:
        t = type(v)
        if t is dict or t is list:
            v = _copied(v)
            if v is _NOT_PLAIN:
                return v
        elif t is Link:
            return _NOT_PLAIN
        items.append(v)
    return items


class RunComputed:
    """`Replica.run_field`: computed, nothing changed; a transaction must write `value`
    (it needs `normalize`, or is a shadow write): the general path decides. The value
    goes with it so the function is not called twice for one run."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"RunComputed({self.value!r})"


_WHOLE_DEEP: Final = (_VALUE_PATH, False)
"""A deep read of a document's whole value, as a run log entry's (path, shallow) pair
(one shared object for the plans)."""
_WHOLE_PAIRS: Final = (_WHOLE_DEEP,)
"""The pairs of a `Walk` of one whole plain value (`Replica.plain_chain`: shared)."""


class FieldPlan:
    """`Replica.field_plan`: the places of a value function's direct run with the checks
    that depend on nothing but the keys, the written field and the identity already made
    (each document read or written reachable by `identity`, no place in the written
    document), so that a run through it (`Replica.run_field`) makes only the checks that
    depend on the documents' state. Kept by its caller for as long as its read set is the
    one `tag` names (for a node: its read set object). Immutable."""

    __slots__ = ("identity", "pairs", "paths", "places", "tag", "wkey", "wpath")

    def __init__(
        self,
        places: tuple[tuple[DocKey, Path], ...],
        wkey: DocKey,
        wpath: Path,
        identity: Identity,
        tag: object,
    ) -> None:
        self.places = places
        self.paths = tuple(
            [_WHOLE_DEEP if path == _VALUE_PATH else (path, False) for _, path in places]
        )
        """Per place its (path, shallow) pair, as the run log entry carries it."""
        keys = {key for key, _ in places}
        self.pairs: tuple[tuple[DocKey, str | int], ...] | None = (
            tuple([(key, path[0]) for key, path in places])
            if len(keys) == len(places) and all([len(path) == 1 for _, path in places])
            else None
        )
        """Per place its document and field (its path's one step) when each place is a
        top-level field of a document of its own (the usual join: each input a whole
        cell); else None. `run_field` then reads each input with no check of its path
        and no test for a document read again (two inputs: with no loop)."""
        self.wkey = wkey
        self.wpath = wpath
        self.identity = identity
        self.tag = tag

    def __repr__(self) -> str:
        return f"FieldPlan({self.places!r} -> {self.wkey!r} {self.wpath!r})"


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
        self._chains: dict[Link | DocKey, tuple[Identity, Walk]] = {}
        """`plain_chain`'s walks kept: per link, the identity of its last walk through at
        least one hop and that walk, with the records walked and their versions (at most
        `_CHAINS_KEPT`)."""
        # A tuple, replaced on (un)subscribe: a notification iterates it without a copy,
        # and a subscriber that unsubscribes during one does not disturb the loop.
        self._subscribers: tuple[Callable[[Notification], None], ...] = ()
        self._commit_hooks: tuple[CommitHook | None, ...] = ()
        """Each subscriber's `on_commit` (`subscribe`), in the same order."""
        self._commit_hook: CommitHook | None = None
        """The `on_commit` of the only subscriber, when there is one and it gave one: a
        local commit's changes go to it with no `Notification` made (`_send`,
        `_send_run`, `_send_entry`)."""
        self._next_seq = 1
        self._in_flight: dict[int, Transaction | SentRun] = {}
        """Commits in flight by local seq: a transaction, or a direct run (`run_field`)
        whose transaction is made only if its verdict needs one (`SentRun`)."""
        # Low-water mark bookkeeping (`low_water`): how much store history this replica's
        # commits may still need. Kept by `Transaction` (open count, busy start) and the
        # verdict and foreign-commit handlers (`_heard`).
        self._open_txs = 0
        """Transactions of this replica still open (counted by `Transaction`)."""
        self._heard = 0
        """The highest store seq delivered here (an own verdict or a foreign commit): every
        seq the store sent this replica up to it has been integrated (mailbox order)."""
        self._busy_since = 0
        """`_mark()` when the current busy period (a transaction open or a commit in
        flight) began: every read basis taken since covers the store up to it."""
        self._sync_waiters: dict[DocKey, list[Callable[[BaseException | None], None]]] = {}
        self._loading: set[DocKey] = set()
        """Documents with a load in flight (asked of the store, not yet answered): few and
        brief, so a set here rather than a flag in every `DocRecord`."""
        self.stats = ReplicaStats()
        self._batch: list[CommitRequest] | None = None
        """Requests held back while a batch is open (`begin_batch`), in commit order."""
        self._batch_depth = 0
        self._runs: list[Any] | None = None
        """While a batch is open on a store that takes run logs (`StoreBase.takes_runs`):
        the run log of every commit made in it, in commit order (`_send_run`; any other
        commit's request as an entry of its own, see RUN_WIDTH). `_batch` stays empty
        meanwhile."""
        self.fence_for: Callable[[Transaction, CommitRequest], Fence | None] | None = None
        """Set by a runtime serving claimed pages: the fence a commit carries (or None)."""
        self.session_id = store.connect(self, session_id)
        self.closed = False
        self._authority: Authority | None = None
        """Handed out once (`claim_authority`); None until then."""
        self._loose: set[DocKey] | None = None
        """Documents held decoded that `pack` may pack at its next call: every one made,
        loaded or unpacked since its last call, and those it had to leave. None until
        `pack` is first called: a replica that never packs tracks nothing."""

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
        writes, see `OpenedTransaction`)."""
        if type(identity) is not Identity:
            raise bad_arg(identity, where="Replica.edit()", name="identity", accepts="an Identity")
        if self.closed:
            raise TransactionError(f"replica {self.session_id} is closed")
        if authority is None:  # (the usual case: one keyword fewer to pass on)
            tx: Transaction = OpenedTransaction(self, identity, source=source)
        else:
            tx = OpenedTransaction(self, identity, source=source, authority=authority)
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

    def reader(self, identity: Identity) -> Transaction:
        """A transaction for reads only, acting for `identity`, to be dropped open when
        done (`Cell.get`, `Cell.resolve`, a scheduler's pull). Not counted open: it never
        commits, so it needs no store history and holds back no pruning (`low_water`).
        Committing it is allowed but counts nothing; use `edit` for that."""
        if self.closed:
            raise TransactionError(f"replica {self.session_id} is closed")
        tx = Transaction(self, identity)
        self._open_txs -= 1
        return tx

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

    def subscribe(
        self, fn: Callable[[Notification], None], *, on_commit: CommitHook | None = None
    ) -> Callable[[], None]:
        """Receive every notification; returns a function that unsubscribes.

        `on_commit(change, by, moved)`, when given, is the same subscriber's entry for
        each change of a local commit (a "commit" notification, its changes one by one,
        `by` being its transaction's `source`): while `fn` is the only subscriber the
        replica calls it instead of `fn`, with no `Notification` made (a node's commit in
        a drain and a `Cell.set` each made one); it must do what `fn` does for them.
        `moved` is True for a change whose one path is a top-level field of a dict
        document whose value there the commit moved (the replica compared the two: a
        drain's node commit, `_send_run`; a commit sent as a run log entry outside a
        batch, `_send_entry`: a `Cell.set` of a whole cell), so every read of exactly that
        place sees a change with no comparison; False says nothing about it."""
        check_callable(fn, where="Replica.subscribe()", name="fn")
        if on_commit is not None:
            check_callable(on_commit, where="Replica.subscribe()", name="on_commit")
        self._subscribers = (*self._subscribers, fn)
        self._commit_hooks = (*self._commit_hooks, on_commit)
        self._commit_hook = self._commit_hooks[0] if len(self._commit_hooks) == 1 else None

        def cancel() -> None:
            subscribers = list(self._subscribers)
            if fn in subscribers:
                at = subscribers.index(fn)
                del subscribers[at]
                hooks = list(self._commit_hooks)
                del hooks[at]
                self._subscribers = tuple(subscribers)
                self._commit_hooks = tuple(hooks)
                self._commit_hook = hooks[0] if len(hooks) == 1 else None

        return cancel

    def visible(self, key: DocKey) -> Value:
        """The visible document (loading it if needed; MISSING while a held load waits)."""
        if type(key) is not DocKey:
            raise bad_arg(key, where="Replica.visible()", name="key", accepts="a DocKey")
        rec = self._record(key)
        value = rec.visible
        if type(value) is bytes:  # packed while idle (`pack`)
            value = self._unpack(key, rec)
        return value

    def peek(self, key: DocKey) -> Value | None:
        """The visible document of a key this replica already holds a record for, or
        None (no record: nothing is loaded, no load starts). MISSING while a held load
        waits or for a document that does not exist. O(1), no argument check: for
        callers on a hot path (the scheduler's direct sink run). A packed document
        (`pack`) is decoded in place first."""
        rec = self._docs.get(key)
        if rec is None:
            return None
        value = rec.visible
        if type(value) is bytes:  # packed while idle (`pack`)
            value = self._unpack(key, rec)
        return value

    def held_key(self, key: DocKey) -> DocKey:
        """The key object this replica holds for `key`'s document once loaded (equal to
        `key`), else `key` itself. O(1), no argument check. For callers that keep a key
        for long (a node's outputs and read set, a registration): keeping the replica's
        object instead of an equal copy saves 56 bytes per copy."""
        rec = self._docs.get(key)
        if rec is None:
            return key
        held = rec.key
        return key if held is None else held

    def held_record(self, key: DocKey) -> DocRecord | None:
        """The record this replica holds for `key`'s document, or None (no record: nothing
        is loaded, no load starts). O(1), no argument check. Read only, for a caller that
        walks documents now and checks later that none moved (a pull's walk,
        `scheduler._sinks._ahead`): its `version` changes exactly when its visible value
        does, and a key's record is never replaced, so comparing versions needs no
        lookup; `key` is the key object to keep (`held_key`; None until loaded);
        `visible` is bytes while packed (`peek` decodes it)."""
        return self._docs.get(key)

    def is_loaded(self, key: DocKey) -> bool:
        rec = self._docs.get(key)
        return rec is not None and rec.key is not None

    def in_flight(self) -> int:
        """Commits applied locally and still waiting for their verdict."""
        return len(self._in_flight)

    def low_water(self) -> int | None:
        """The store seq at or below which this replica's commits need no revision
        history, or None if they need none at all now (for a store that prunes
        history: `MemoryStore`). O(1).

        A commit's reads are checked against what was written after their basis. While
        a transaction is open or a commit is in flight (busy), every basis taken in the
        busy period covers the store up to the mark taken when it began: the revisions
        after that mark are the ones a conflict check can still need (a commit built on
        this replica's own pending commits among them). When idle, the next
        transaction's bases will cover everything the replica has integrated: the
        revisions up to `_heard` if the store's deliveries still wait in the mailbox,
        else all of them (None).
        """
        if self._open_txs or self._in_flight:
            return self._busy_since
        return self._heard if len(self.mailbox) else None

    def _mark(self) -> int:
        """What a basis taken from now on covers: the store's newest seq if nothing it
        sent waits in the mailbox, else the newest seq integrated here (a transaction
        calls this as a busy period begins)."""
        return self._heard if self.mailbox._items else self.store._seq

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
            if self.store.takes_runs:
                self._runs = []
            self.mailbox.before_drain = self.flush_batch  # (only while a batch is open)

    def end_batch(self) -> None:
        """Close the batch opened by the matching `begin_batch()` and send it."""
        if self._batch_depth <= 0:
            raise TransactionError(f"replica {self.session_id}: end_batch() without begin_batch()")
        depth = self._batch_depth - 1
        self._batch_depth = depth
        if depth == 0:
            # `flush_batch` of the outermost batch, inlined (every drain of a scheduler
            # ends here): closed first, then what it held is sent, as that leaves it.
            batch = self._batch
            runs = self._runs
            self._batch = None
            self._runs = None
            self.mailbox.before_drain = None
            if batch:
                self._send_batch(batch)
            if runs and not self.store.submit_runs(self, self.session_id, runs):
                self._runs_as_requests(runs)  # (`_submit_runs`, inlined)

    def flush_batch(self) -> None:
        """Send the requests held in the open batch now (the batch stays open)."""
        batch = self._batch
        if batch:
            self._batch = [] if self._batch_depth else None
            self._send_batch(batch)
        runs = self._runs
        if runs:
            self._runs = [] if self._batch_depth else None
            self._submit_runs(runs)

    def _send_batch(self, batch: list[CommitRequest]) -> None:
        """Hand a batch's requests to the store (one alone as itself)."""
        if len(batch) == 1:
            self.store.submit(self, batch[0])
        else:
            self.store.submit_batch(self, batch)

    def _submit_runs(self, runs: list[Any]) -> None:
        """Hand a run log to the store; as requests if it takes none now."""
        if not self.store.submit_runs(self, self.session_id, runs):
            self._runs_as_requests(runs)

    def _runs_as_requests(self, runs: list[Any]) -> None:
        """Hand a run log the store did not take (`submit_runs`) to it as requests."""
        store = self.store
        sid = self.session_id
        requests = [run_request(sid, runs, i) for i in range(0, len(runs), RUN_WIDTH)]
        if len(requests) == 1:
            store.submit(self, requests[0])
        else:
            store.submit_batch(self, requests)

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
                if self._loose is not None:
                    self._loose.add(key)
            if key not in self._loading:
                self._loading.add(key)
                self.store.load(self, key)
        return pending

    def close(self) -> None:
        try:
            self.flush_batch()
        finally:
            self.closed = True
            self.store.disconnect(self.session_id)

    # ------------------------------------------------------------------ packing
    def pack(self, *, keep: Collection[DocKey] = ()) -> int:
        """Keep idle documents as compact bytes instead of decoded values; returns how
        many it packed. For a process that holds many documents nothing reads between
        changes (a server running thousands of idle pages): a one-field dict costs 184
        bytes decoded, a few bytes packed.

        Packs each document made, loaded or unpacked since the last call (on the first
        call, every document) that is loaded, has no pending layer, no load in flight,
        is not in `keep` (documents the caller reads all the time), and holds a dict or
        a list. A packed document is decoded again, equal to what was packed, the first
        time anything reads it (a transaction, `visible`, a store's change to it), and
        stays decoded until the next call. Its version does not move: packing changes
        no value. Does nothing while a transaction of this replica is open (its working
        copies and bases were taken from the decoded values). O(documents decoded since
        the last call x their size), no I/O.
        """
        if self.closed or self._open_txs:
            return 0
        docs = self._docs
        loose = self._loose
        left: set[DocKey] = set()
        loading = self._loading
        packed = 0
        for key in docs if loose is None else loose:
            rec = docs.get(key)
            if rec is None:
                continue
            value = rec.visible
            t = type(value)
            if t is bytes:
                continue
            if (
                (t is not dict and t is not list)
                or rec.layers
                or rec.key is None
                or rec.confirmed is not value
                or key in loading
                or key in keep
            ):
                left.add(key)  # (a scalar or missing document may become a dict later)
                continue
            rec.confirmed = rec.visible = pack_value(value)
            packed += 1
        # A new set each call: a set never shrinks, and one that once held every
        # document would keep its table for the replica's life.
        self._loose = left
        return packed

    def _unpack(self, key: DocKey, rec: DocRecord) -> Value:
        """`rec`'s document decoded again (it was packed, with no layer: see `pack`),
        kept decoded until the next `pack`."""
        value = rec.confirmed = rec.visible = unpack_value(rec.visible)
        if self._loose is not None:
            self._loose.add(key)
        return value

    # ------------------------------------------------------------------ records
    def _record(self, key: DocKey) -> DocRecord:
        rec = self._docs.get(key)
        if rec is None:
            rec = self._docs[key] = DocRecord()
            if self._loose is not None:
                self._loose.add(key)
            state = self.store.load_now(key, self)
            if state is None:
                self._loading.add(key)
                self.store.load(self, key)
            else:
                self.stats.loads += 1
                rec.key = key
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
        if type(before) is bytes:
            # Packed (`pack`; never with layers, so `confirmed`, which the caller just
            # set, was packed too): the change carries the old document decoded, and the
            # new one stays decoded until the next pack.
            before = unpack_value(before)
            if self._loose is not None:
                self._loose.add(key)
        after = rec.fold()
        rec.visible = after
        if not same_value(before, after):
            rec.version += 1
            changes.append(Change(key, before, after))

    # ------------------------------------------------------------------ commit
    def _commit(self, tx: Transaction) -> None:
        """Stage `tx`'s commit (the steps of `cells._staging`), apply it here, send it.

        `tx` settles at once when it is stale (a read document's basis moved, or a
        write no longer applies) or elided (nothing to write); otherwise it stays in
        flight until its verdict (`on_verdict`).
        """
        records = self._docs
        docs = tx._docs
        if tx._create_only is None:
            n = len(docs)
            if n == 2:
                if (
                    self._commit_usual(tx, records, docs)
                    or self._commit_write(tx, records, docs)
                    or self._commit_fields(tx, records, docs)
                ):
                    return
            elif n > 2:
                if self._commit_reads(tx, records, docs) or self._commit_fields(tx, records, docs):
                    return
            elif n == 1:
                ((key, td),) = docs.items()
                if td.written and not td.read:
                    if self._commit_write(tx, records, docs) or self._commit_fields(
                        tx, records, docs
                    ):
                        return
                elif not td.written:
                    # A run that read one document and wrote nothing (most effect runs:
                    # the cellx and kairo rows elide thousands per op): only its basis
                    # can fail; otherwise it is elided with nothing staged or built.
                    if td.read and records[key].version != td.version:
                        self._stale(tx, stale_message(key))
                        return
                    self.stats.commits_elided += 1
                    if (
                        tx._settle_callbacks is None
                        and tx._post_commit is None
                        and tx._pending is None
                        and tx.result is None
                    ):
                        # `_settle` with nothing to call (an effect's run: a sink per
                        # node in cellx and broad elides thousands per op), inlined.
                        tx.result = _OK
                        tx.status = "committed"
                        tx._values = None
                        return
                    tx._settle(_OK)
                    return
        moved = basis_moved(records, docs)
        if moved is not None:
            self._stale(tx, stale_message(moved))
            return
        staged = stage_writes(records, docs)
        if isinstance(staged, str):
            self._stale(tx, staged)
            return
        create_only = tx._create_only
        if not staged and not create_only:
            self.stats.commits_elided += 1
            tx._settle(_OK)
            return
        reads, deps = read_claims(docs)
        seq = self._next_seq
        self._next_seq = seq + 1
        changes, writes = self._apply_local(seq, staged)
        request = CommitRequest(
            self.session_id,
            seq,
            reads,
            deps,
            writes,
            frozenset(create_only) if create_only else _NO_KEYS,
        )
        self._send(tx, seq, request, changes)

    def _commit_usual(
        self, tx: Transaction, records: dict[DocKey, DocRecord], docs: dict[DocKey, TxDoc]
    ) -> bool:
        """`_commit` of the usual computation's transaction, if `tx` is one; False if not.

        The shape: one read, at one place, of its input; one write of a top-level
        field of its dict output, which it did not read, on the state the
        transaction started from. The general path decides the same, with its
        lists and loops; this shortcut is what a scheduler node run costs (the
        chain, broad and memory commit benchmarks measure it).
        """
        (rkey, rtd), (wkey, wtd) = docs.items()
        rpaths, written = rtd.reads, wtd.written
        if (
            rpaths is None
            or len(rpaths) != 1
            or rtd.written
            or written is None
            or len(written) != 1
            or wtd.read
        ):
            return False
        rec = records[wkey]
        path = written[0]
        working, visible = wtd.working, rec.visible
        if not (
            len(path) == 1
            and type(path[0]) is str
            and type(working) is dict
            and visible is wtd.baseline
            and type(visible) is dict
        ):
            return False
        if records[rkey].version != rtd.version:
            self._stale(tx, stale_message(rkey))
            return True
        # (`changed_field` and `push_layer`, inlined: this runs once per node update.)
        new = working.get(path[0], MISSING)
        old = visible.get(path[0], MISSING)
        t = type(new)
        if (new == old) if t is type(old) and (t is int or t is str) else same_value(new, old):
            if rec.layers:
                # A shadow write (`ops_for`): equal to a pending layer's value, it must
                # survive that layer's failure but changes nothing visible now. The
                # general path sends it without a notification.
                return False
            self.stats.commits_elided += 1
            tx._settle(_OK)
            return True
        seq = self._next_seq
        self._next_seq = seq + 1
        layers = rec.layers
        if not layers:
            rec.layers = (Layer(seq, path, new),)
        else:
            push_layer(rec, Layer(seq, path, new))
        change = Change(wkey, visible, working, (path,))
        rec.visible = working
        rec.version += 1
        ((rpath, shallow),) = rpaths
        if self._runs is not None and self.fence_for is None:
            # In a drain: a run log entry, no request (see `_send_run`).
            self._send_run(
                tx,
                seq,
                change,
                (tx, seq, rkey, rtd.basis_seq, rpath, shallow, rtd.deps, wkey, path, new,
                 visible, working),
            )  # fmt: skip
            return True
        if self._batch is None and self.fence_for is None and self.store.takes_entries:
            # A commit of its own (the Cell API's): the same entry, which the store may
            # accept at once with no request (`_send_entry`).
            self._send_entry(
                tx,
                seq,
                change,
                (tx, seq, rkey, rtd.basis_seq, rpath, shallow, rtd.deps, wkey, path, new,
                 visible, working),
            )  # fmt: skip
            return True
        request = CommitRequest(
            self.session_id,
            seq,
            (ReadClaim(rkey, rpath, shallow, rtd.basis_seq),),
            rtd.deps,
            (Write(wkey, path, new),),
            _NO_KEYS,
        )
        self._send(tx, seq, request, (change,))
        return True

    def _commit_fields(
        self, tx: Transaction, records: dict[DocKey, DocRecord], docs: dict[DocKey, TxDoc]
    ) -> bool:
        """`_commit` of a transaction that only wrote, if `tx` is one; False if not
        (nothing changed then: the general path decides).

        The shape: every document written once, at one top-level field of its dict
        value, and not read, on the state the transaction started from (a batch of
        `Cell.set`s of whole cells in one transaction, or one on a store that takes no
        entries). What `basis_moved` (nothing read: nothing to check), `stage_writes`,
        `read_claims` (none), `_apply_local` and the request decide for it, in one pass
        that only looks and one that applies: on the general path a 100-document
        commit's staging and local apply cost about 270 Python bytecodes per document
        (the staged tuples, `changed_field`, `Layer.of`, `push_layer`), here about 90.
        A write equal to the value there is elided, or kept as a shadow write when the
        document has a pending layer (`ops_for`), as the general path does.
        """
        # (key, record, paths written (one), value, the document after it; None for a
        # shadow write)
        staged: list[tuple[DocKey, DocRecord, tuple[Path], Value, dict[str, Value] | None]] = []
        for key, td in docs.items():
            written = td.written
            if type(written) is not tuple or td.read or len(written) != 1:
                return False  # (one write is a 1-tuple, `Transaction.write`)
            path = written[0]
            if path != _VALUE_PATH and (len(path) != 1 or type(path[0]) is not str):
                return False  # (a cell's whole value, the usual write, in one comparison)
            working = td.working
            rec = records[key]
            visible = rec.visible
            if visible is not td.baseline or type(working) is not dict or type(visible) is not dict:
                return False
            field = path[0]
            # (`changed_field`, inlined.)
            new = working.get(field, MISSING)
            old = visible.get(field, MISSING)
            t = type(new)
            if (new == old) if t is type(old) and (t is int or t is str) else same_value(new, old):
                if rec.layers:
                    # A shadow write: it changes nothing now, but must survive a pending
                    # layer's failure and land after it in the durable order.
                    staged.append((key, rec, written, new, None))
                continue  # (else: equal, nothing pending under it: nothing to stage)
            staged.append((key, rec, written, new, working))
        if not staged:
            self.stats.commits_elided += 1
            tx._settle(_OK)
            return True
        seq = self._next_seq
        self._next_seq = seq + 1
        # Each visible change is a `Change` for whoever hears the commit (`_send`); with
        # nobody to hear it (a replica alone), `_send`'s count without the objects.
        heard = self._commit_hook is not None or bool(self._subscribers)
        changes: list[Change] = []
        changed = False
        writes: list[Write] = []
        for key, rec, written, new, after in staged:
            path = written[0]
            if not rec.layers:
                rec.layers = (Layer(seq, path, new),)
            else:
                push_layer(rec, Layer(seq, path, new))
            if after is not None:
                if heard:
                    # (`written` is the paths tuple the change names: the one path.)
                    changes.append(Change(key, rec.visible, after, written))
                else:
                    changed = True
                rec.visible = after
                rec.version += 1
            writes.append(Write(key, path, new))
        if changed:
            self.stats.notifications += 1
        request = CommitRequest(self.session_id, seq, (), (), tuple(writes), _NO_KEYS)
        self._send(tx, seq, request, tuple(changes))
        return True

    def plain_chain(self, link: Link | DocKey, identity: Identity) -> Walk | None:
        """The walk a transaction of `identity` makes to read `link` in this replica as it
        is now (`_links._walk`, reading nothing), as a `Walk`: the reads it logs (a
        shallow read of each hop's place, the full-document path of the link there; a
        deep read of the final place, which a value function's direct run reads,
        `Replica.run_field`), the records walked and the value reached (None: absent,
        also past an element id that names no element now; id steps resolved by
        `element_position`, as `_first_link` does). None when a document on the way is
        absent, not a dict in hand or not one `identity` reaches (`reaches`: the
        transaction refuses it), the walk ends at a container (the transaction copies
        it) or takes more than `MAX_HOPS` hops (a cycle): the transaction decides.
        O(hops · path length).

        Kept: the walk of a link for an identity through at least one hop, with the
        versions of the documents it walked (a document's version changes exactly when
        its visible value does, and a key's record is never replaced), is the walk again
        while none moved: the lifts of one element read its fields through one link,
        each of them walked as many times as lifts read it. Its check is one C-level
        comparison of the versions."""
        chains = self._chains
        kept = chains.get(link)  # (by the link alone: no tuple made, no identity hashed)
        if kept is not None and (kept[0] is identity or kept[0] == identity):
            walked = kept[1]
            if tuple(map(_VERSION, walked[0])) == walked[1]:
                return walked  # (no document on the way moved: the same walk)
        docs = self._docs
        key = DocKey(link.space, link.id) if link.scope == "space" else link.key(identity)
        path = link.path
        recs: tuple[DocRecord, ...] = ()
        keys: tuple[DocKey, ...] = ()
        pairs: tuple[tuple[Path, bool], ...] = ()
        for _ in range(MAX_HOPS + 1):
            rec = docs.get(key)
            if rec is None or type(rec.visible) is not dict:
                return None
            if (key.scope != "space" or "cw:" <= key.id < "cw;") and not reaches(identity, key):
                return None  # (the transaction refuses it: `_guard`)
            # The key object the replica holds (the one the node's read set, the run log and
            # the store's tables hold): the walk's reads are compared with those and looked
            # up by them, and an equal copy made from a link is compared field by field
            # where the held one is found by identity (and its hash not recomputed).
            key = rec.key or key
            doc = rec.visible
            recs += (rec,)
            keys += (key,)
            if path:
                found = _first_link(doc.get(VALUE, MISSING), path, doc)
            else:
                found = doc.get(VALUE, MISSING)  # (a whole value: `_first_link` of no step)
                if type(found) is Link:
                    found = (0, found)
            if type(found) is not tuple:
                t = type(found)
                if not (t is int or t is str or t is float or t is bool or found is None):
                    if found is not MISSING:
                        return None  # a container: the transaction copies it
                    found = None
                pairs += ((_VALUE_PATH + path, False),)
                walk: Walk = (recs, tuple(map(_VERSION, recs)), keys, pairs, (found,))
                if len(recs) > 1:  # (a walk in one document is about as cheap as its check)
                    if len(chains) >= _CHAINS_KEPT:
                        chains.clear()
                    chains[link] = (identity, walk)  # (another identity's walk replaced)
                return walk
            # (A hop's read is not looked for among this walk's: a walk that passes the
            # same place twice, through links that lead back to it with another path, is
            # rare, and its read there twice is one read more than the node's read set
            # holds: `walk_matches` says no, and a transaction runs it.)
            at, target = found
            pairs += ((_VALUE_PATH + path[:at], True),)
            path = target.path + path[at:] if at < len(path) else target.path
            key = (
                DocKey(target.space, target.id) if target.scope == "space" else target.key(identity)
            )
        return None

    def walk_inputs(self, links: tuple[Link | DocKey, ...], identity: Identity) -> Walk | None:
        """The walks of `links` (`plain_chain`) in one: each distinct read once, in the
        order a transaction reading the links in turn logs them (a read it made already
        is not logged again), with its record, version, key and pair (aligned, as in
        one walk); the values of each walk in turn (in the links' order). None if one
        is. O(reads · distinct documents)."""
        recs: tuple[DocRecord, ...] = ()
        versions: tuple[int, ...] = ()
        keys: tuple[DocKey, ...] = ()
        pairs: tuple[tuple[Path, bool], ...] = ()
        values: tuple[Any, ...] = ()
        docs = self._docs
        for link in links:  # (a `DocKey` among them reads as a link: `DocKey.path`)
            if not link.path and link.scope == "space" and not "cw:" <= link.id < "cw;":
                # A whole value of a shared document (a lift's read of another lift's
                # output, which moves with every run of that lift: never kept): a plain
                # one is its walk, one deep read, taken here with no walk made; else
                # `plain_chain` decides (a link there, a container, a document not in hand).
                key = DocKey(link.space, link.id)
                rec = docs.get(key)
                if rec is not None and type(rec.visible) is dict:
                    found = rec.visible.get(VALUE, MISSING)
                    t = type(found)
                    if t is int or t is str or t is float or t is bool or found is None:
                        key = rec.key or key  # (the held key: see `plain_chain`)
                        if key not in keys:  # (else `plain_chain`: a read made already?)
                            recs += (rec,)
                            versions += (rec.version,)
                            keys += (key,)
                            pairs += _WHOLE_PAIRS
                            values += (found,)
                            continue
            walk = self.plain_chain(link, identity)
            if walk is None:
                return None
            if not keys:  # (the first walk: nothing read again)
                recs, versions, keys, pairs, values = walk
                continue
            wrecs, wversions, wkeys, wpairs, _ = walk
            for i, pair in enumerate(wpairs):
                key = wkeys[i]
                seen = False
                if pair in pairs:  # (in C, no key compared: most reads differ in their pair)
                    for j, held in enumerate(keys):
                        if pairs[j] == pair and (held is key or held == key):
                            seen = True  # (read already: `Transaction` logs it once)
                            break
                if not seen:
                    recs += (wrecs[i],)
                    versions += (wversions[i],)
                    keys += (key,)
                    pairs += (pair,)
            values += walk[4]
        return recs, versions, keys, pairs, values

    def field_plan(
        self,
        places: tuple[tuple[DocKey, Path], ...],
        wkey: DocKey,
        wpath: Path,
        identity: Identity,
        tag: object,
    ) -> FieldPlan | None:
        """A `FieldPlan` of `places` for a run of `identity` writing the top-level field
        `wpath` of `wkey` (`run_field`, without link hops), after the checks `run_field`
        makes of the keys alone: `wpath` one str step, every document read or written
        reachable by `identity` (`reaches`, as `Transaction._guard` allows a node's
        transaction), no place in `wkey`. None if one fails (a transaction run decides).
        `tag`: what its caller keeps it for (see `FieldPlan`). O(k)."""
        if len(wpath) != 1 or type(wpath[0]) is not str or not places:
            return None
        for key in (wkey, *[key for key, _ in places]):
            if (key.scope != "space" or "cw:" <= key.id < "cw;") and not reaches(identity, key):
                return None
        if any(key == wkey for key, _ in places):
            return None
        return FieldPlan(places, wkey, wpath, identity, tag)

    def run_field(
        self,
        places: tuple[tuple[DocKey, Path], ...],
        wkey: DocKey,
        wpath: Path,
        compute: Callable[..., Any],
        identity: Identity,
        source: object,
        on_failure: SettleCallback | None,
        accept: Callable[[Any], bool] | None = None,
        wrote: Callable[[Any], None] | None = None,
        walked: Walk | None = None,
        plan: FieldPlan | None = None,
    ) -> int | CommitResult | RunComputed:
        """Run a node of k plain inputs with no transaction, in a drain: read the plain
        value at each of `places` (a document and a path in it, ``("value", ...)``),
        write ``compute(*values)`` at the one top-level field `wpath` of ``wkey``'s
        dict value, and commit as `_commit_usual` would (a layer, one notification, a
        run log entry the store checks against the bases read here). Returns `RUN_NONE`
        with nothing done and `compute` not called (not this shape: run a
        transaction); `RunComputed` with `compute`'s result and nothing changed (its
        write needs the general path: a container, a value to normalise, a shadow
        write, or `accept` said no); `RUN_DONE` (sent, or elided: `wrote` is told the
        value then); or the STALE_BASIS result when a read document moved while
        `compute` ran (nothing changed: re-run, as for a stale transaction).

        The shape: each place's walk from its document meets only dicts (a str step)
        and lists (an int step inside it, or an element-id step that names an element,
        resolved as `_links._first_link` does) and ends at a scalar, at a dict's absent
        key (None), or at a container with no link anywhere inside it (`compute` gets
        its own copy, as `thaw` makes it: `_copied`): a link on the way, at the end or
        inside the container, an element id naming nothing or a scalar in the way are
        the transaction's (its read would log more than one deep read there, or walk
        what this does not). No place in the written document.

        `walked`: instead of `places` (then ignored), the walks through links of the
        inputs (`plain_chain`, `walk_inputs`) made just now, in this synchronous step
        (nothing ran since): its reads, each a shallow read of a hop's place or a deep
        read of an input's place, go in the entry with their documents' bases, as
        `_links._walk` logs them, and its plain values are `compute`'s arguments, not
        read again; its records' versions, taken by the walk, are the stale check's.
        The walk refused what the transaction decides (an unreachable document, a
        container at the end). `plan`: a `FieldPlan` of exactly these `places` (the
        same object), this output and this `identity` (`field_plan`, no walk): its
        checks of the keys are not made again; any other plan is ignored (the checks
        are made).

        The same commit as the transaction run's: one read takes the basis and deps of
        its document as `Transaction.read` does, and the entry carries them (one read:
        the one-read entry; two: the two-read entry; more: the k-read entry, see
        RUN_WIDTH), so the store rejects it for a foreign commit that overtook a read
        exactly as it would the transaction's; the in-flight transaction it makes
        (`Transaction._sent_run`) takes the verdict, the revert and `on_failure` as the
        scheduler's does. Ownership: what `Transaction._guard` allows a transaction of
        `identity` with no authority (a node's): `reaches` for every document read or
        written, asked only for a scoped or internal one (the usual space-scoped one
        needs no check). Exceptions from `compute` (and `accept`, `wrote`) propagate,
        with nothing changed. O(k + total path length).
        """
        if self._runs is None or self.fence_for is not None or self.closed:
            return RUN_NONE
        records = self._docs
        wrec = records.get(wkey)
        if (
            wrec is None
            or type(wrec.visible) is not dict
            or ((wkey.scope != "space" or "cw:" <= wkey.id < "cw;") and not reaches(identity, wkey))
        ):
            return RUN_NONE
        if walked is None and len(places) == 1:
            # One input (the usual node): the loop below without its lists.
            ((rkey, path),) = places
            rec = records.get(rkey)
            if rec is None or rec is wrec:  # (one record per key: no keys compared)
                return RUN_NONE
            if (rkey.scope != "space" or "cw:" <= rkey.id < "cw;") and not reaches(identity, rkey):
                return RUN_NONE  # (the transaction refuses it: `_guard`)
            visible = rec.visible
            if type(visible) is not dict:
                return RUN_NONE  # (packed, or not a dict: the transaction decides)
            if len(path) == 1:
                value = visible.get(path[0], MISSING)  # (the usual place: the whole value)
                t = type(value)
                if not (t is int or t is str or t is float or t is bool or value is None):
                    if t is dict or t is list:
                        value = _copied(value)  # (the function's own copy)
                        if value is _NOT_PLAIN:
                            return RUN_NONE  # a link inside: `read_value` follows it
                    elif value is not MISSING:
                        return RUN_NONE  # a link to follow
                    else:
                        value = None
            else:
                value = _plain_at(visible, path)
                if value is _NOT_PLAIN:
                    return RUN_NONE
            # The basis, as `Transaction.read` takes it.
            version = rec.version
            basis_seq = rec.confirmed_seq
            layers = rec.layers
            deps = () if not layers else (layers[0].seq,) if len(layers) == 1 else _deps(layers)
            # Counted open while `compute` runs, as the transaction would be (`low_water`:
            # the store keeps the history this basis may need).
            opened = self._open_txs
            if not opened and not self._in_flight:
                self._busy_since = self._mark()
            self._open_txs = opened + 1
            try:
                new = compute(value)
            finally:
                self._open_txs -= 1
            if rec.version != version:  # (a key's record is never replaced: see below)
                self.stats.local_stale += 1
                stale = InconsistentBasisError(stale_message(rkey))
                return CommitResult(Outcome.STALE_BASIS, stale)
            bases: Any = ()  # (none: the one-read entry)
        elif (
            walked is None
            and plan is not None
            and plan.pairs is not None
            and len(places) == 2
            and plan.places is places
            and plan.wkey is wkey
            and plan.identity is identity
        ):
            # Two whole cells (cellx's joins): the loop below written out for two
            # documents of their own, with no list per run (measured: about a third
            # of the loop's time).
            (key1, field1), (key2, field2) = plan.pairs
            rec1 = records.get(key1)
            rec2 = records.get(key2)
            if rec1 is None or rec2 is None:
                return RUN_NONE
            visible = rec1.visible
            visible2 = rec2.visible
            if type(visible) is not dict or type(visible2) is not dict:
                return RUN_NONE  # (packed, or not a dict: the transaction decides)
            value = visible.get(field1, MISSING)
            t = type(value)
            if not (t is int or t is str or t is float or t is bool or value is None):
                value = _plain_input(value)
                if value is _NOT_PLAIN:
                    return RUN_NONE
            value2 = visible2.get(field2, MISSING)
            t = type(value2)
            if not (t is int or t is str or t is float or t is bool or value2 is None):
                value2 = _plain_input(value2)
                if value2 is _NOT_PLAIN:
                    return RUN_NONE
            version = rec1.version
            version2 = rec2.version
            bases = (key1, rec1.confirmed_seq, key2, rec2.confirmed_seq)
            layers = rec1.layers
            deps = ((layers[0].seq,) if len(layers) == 1 else _deps(layers)) if layers else ()
            layers = rec2.layers
            if layers:
                deps += (layers[0].seq,) if len(layers) == 1 else _deps(layers)
            paths: Any = plan.paths
            opened = self._open_txs
            if not opened and not self._in_flight:
                self._busy_since = self._mark()
            self._open_txs = opened + 1
            try:
                new = compute(value, value2)
            finally:
                self._open_txs -= 1
            if rec1.version != version or rec2.version != version2:
                self.stats.local_stale += 1
                moved = key1 if rec1.version != version else key2
                stale = InconsistentBasisError(stale_message(moved))
                return CommitResult(Outcome.STALE_BASIS, stale)
        else:
            values: Any  # (the function's arguments)
            if walked is not None:
                # Through links (`plain_chain`): the walk's reads and values, taken just now.
                recs, versions, keys, paths, values = walked
                if wkey in keys:
                    return RUN_NONE  # (a place in the written document: the transaction's)
                deps = ()
                if len(recs) == 2:
                    # (The usual card lift: its argument's link, then the element's
                    # document. Its basis per read, with no loop.)
                    rec, rec2 = recs
                    bases = (keys[0], rec.confirmed_seq, keys[1], rec2.confirmed_seq)
                    layers = rec.layers
                    if layers:
                        deps = (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                    layers = rec2.layers
                    if layers:  # (only concatenated, as below)
                        deps += (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                else:
                    bases = []  # per read: its document and basis seq (the entry's `basis`)
                    for i, rec in enumerate(recs):
                        layers = rec.layers
                        if layers:
                            # (Only concatenated, as below: `run_request` sorts them, and a
                            # document read twice adds them twice, which changes nothing.)
                            deps += (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                        bases += (keys[i], rec.confirmed_seq)
            else:
                # A plan (`field_plan`) of these places, this output and this identity made
                # the checks of the keys alone (each read's `reaches`, not the output).
                planned = (
                    plan is not None
                    and plan.places is places
                    and plan.wkey is wkey
                    and plan.identity is identity
                )
                values = []
                bases = []  # per read: its document and basis seq (the entry's `basis`)
                held: list[Any] | None = None  # per document read: its record, version, key
                pairs = plan.pairs if planned else None  # type: ignore[union-attr]
                if pairs is not None:
                    # Each input a top-level field of a document of its own (a join of
                    # whole cells, `FieldPlan.pairs`): the loop below with no test for a
                    # document read again and no check of a path, the records and their
                    # versions in two lists (measured: about three quarters of its time).
                    read_recs: list[DocRecord] = []
                    read_versions: list[int] = []
                    deps = ()
                    for rkey, field in pairs:
                        rec = records.get(rkey)
                        if rec is None:
                            return RUN_NONE
                        visible = rec.visible
                        if type(visible) is not dict:
                            return RUN_NONE  # (packed, or not a dict: the transaction decides)
                        value = visible.get(field, MISSING)
                        t = type(value)
                        if not (t is int or t is str or t is float or t is bool or value is None):
                            value = _plain_input(value)
                            if value is _NOT_PLAIN:
                                return RUN_NONE
                        values.append(value)
                        bases += (rkey, rec.confirmed_seq)
                        read_recs.append(rec)
                        read_versions.append(rec.version)
                        layers = rec.layers
                        if layers:
                            # (Concatenated, as below.)
                            deps += (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                    paths = plan.paths  # type: ignore[union-attr]
                else:
                    held = []
                    # Per read: its path, whether shallow (a plan's are made already).
                    paths = plan.paths if planned else []  # type: ignore[union-attr]
                    deps = ()
                    last = None
                    seq = 0
                    rec = wrec  # (set by the first read: `last` is None then)
                    for each in places:
                        rkey = each[0]
                        if rkey != last:
                            # (A document read again, next to its last read: the same record,
                            # checks, basis and deps.)
                            rec = records.get(rkey)
                            if rec is None:
                                return RUN_NONE
                            if not planned and (
                                rec is wrec  # (the written document: one record per key)
                                or (
                                    (rkey.scope != "space" or "cw:" <= rkey.id < "cw;")
                                    and not reaches(identity, rkey)
                                )
                            ):
                                return RUN_NONE
                            seq = rec.confirmed_seq
                            held += (rec, rec.version, rkey)
                            layers = rec.layers
                            if layers:
                                # Only concatenated: the store asks whether a revision's commit is
                                # among them, so neither order nor a repeat matters (`run_request`
                                # sorts them for a request), as for a two-read entry.
                                deps += (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                            last = rkey
                        bases += (rkey, seq)
                        path = each[1]
                        visible = rec.visible
                        if not planned:
                            paths.append((path, False))
                        if len(path) == 1 and type(visible) is dict:
                            value = visible.get(path[0], MISSING)
                            t = type(value)
                            if not (
                                t is int or t is str or t is float or t is bool or value is None
                            ):
                                if t is dict or t is list:
                                    value = _copied(value)
                                    if value is _NOT_PLAIN:
                                        return RUN_NONE
                                elif value is not MISSING:
                                    return RUN_NONE
                                else:
                                    value = None
                        else:
                            value = _plain_at(visible, path)
                            if value is _NOT_PLAIN:
                                return RUN_NONE
                        values.append(value)
            opened = self._open_txs
            if not opened and not self._in_flight:
                self._busy_since = self._mark()
            self._open_txs = opened + 1
            try:
                new = compute(*values)
            finally:
                self._open_txs -= 1
            if walked is not None:
                if tuple(map(_VERSION, recs)) != versions:  # (in C: records are never replaced)
                    moved = next(
                        k for r, v, k in zip(recs, versions, keys, strict=True) if r.version != v
                    )
                    self.stats.local_stale += 1
                    stale = InconsistentBasisError(stale_message(moved))
                    return CommitResult(Outcome.STALE_BASIS, stale)
            elif held is None:
                # (A key's record is never replaced: `_docs` only gains records. So, as
                # `Transaction`'s `basis_moved`, a read's version alone says it moved.)
                # (`zip` of lists made together above, one item per place: no `enumerate`,
                # a C path a diamond's op used only here.)
                for read, version, place in zip(read_recs, read_versions, places):  # noqa: B905
                    if read.version != version:
                        self.stats.local_stale += 1
                        stale = InconsistentBasisError(stale_message(place[0]))
                        return CommitResult(Outcome.STALE_BASIS, stale)
            else:
                # (`held` gains whole triples only, above: `strict` would check what its
                # one writer makes, at the cost of the keyword parser per run.)
                triples = iter(held)
                for read, version, moved in zip(triples, triples, triples):  # noqa: B905
                    if read.version != version:
                        self.stats.local_stale += 1
                        stale = InconsistentBasisError(stale_message(moved))
                        return CommitResult(Outcome.STALE_BASIS, stale)
        if accept is not None and not accept(new):
            return RunComputed(new)  # its writer's general path decides
        t = type(new)
        if not ((t is int and _MIN_INT <= new <= MAX_INT) or (t is str and new.isascii())) and (
            new is not None
        ):
            return RunComputed(new)  # `normalize` decides (floats, containers, bad values)
        wvisible = wrec.visible
        if type(wvisible) is not dict:
            return RunComputed(new)
        field = wpath[0]
        old = wvisible.get(field, MISSING)
        if (new == old) if t is type(old) and (t is int or t is str) else same_value(new, old):
            if wrec.layers:
                return RunComputed(new)  # a shadow write: the general path keeps it
            self.stats.commits_elided += 1
            if wrote is not None:
                wrote(new)
            return RUN_DONE
        working = wvisible.copy()  # (an exact dict: no `dict` call, its argument parsed)
        working[field] = new
        seq = self._next_seq
        self._next_seq = seq + 1
        # Its layer, in flight and in the run log: one object (see `SentRun`).
        tx = SentRun(seq, wpath, new, (), identity, source, on_failure, wrec)
        if not wrec.layers:
            wrec.layers = (tx,)
        else:
            push_layer(wrec, tx)
        change = Change(wkey, wvisible, working, (wpath,))
        wrec.visible = working
        wrec.version += 1
        if not bases:
            entry: tuple[Any, ...] = (
                tx, seq, rkey, basis_seq, path, False, deps, wkey, wpath, new, wvisible, working,
            )  # fmt: skip
        elif len(paths) == 2:
            entry = (
                tx, seq, None, tuple(bases), paths[0], paths[1], deps, wkey, wpath, new,
                wvisible, working,
            )  # fmt: skip
        else:
            # More than two reads: the k-read entry, each read (deep at its place, shallow
            # at a hop) with its basis (see RUN_WIDTH): no claim objects.
            entry = (
                tx, seq, None, tuple(bases), tuple(paths), True, deps, wkey, wpath, new,
                wvisible, working,
            )  # fmt: skip
        # `_send_run` of a direct run, inlined (a frame per node update): in flight, the
        # hook told (the change moved its one field: compared above), the entry logged.
        self._in_flight[seq] = tx
        stats = self.stats
        stats.commits_sent += 1
        try:
            hook = self._commit_hook
            if hook is not None:  # (the one subscriber, a scheduler: no Notification)
                stats.notifications += 1
                hook(change, source, True)
            elif not self._subscribers:  # (a replica alone: counted, with nobody to hand it to)
                stats.notifications += 1
            else:
                self._notify(Notification("commit", (change,), tx))
        finally:
            runs = self._runs
            if runs is not None:
                runs += entry
            else:  # (the batch ended meanwhile)
                self._submit_runs(list(entry))
        if wrote is not None:
            wrote(new)
        return RUN_DONE

    def _commit_write(
        self, tx: Transaction, records: dict[DocKey, DocRecord], docs: dict[DocKey, TxDoc]
    ) -> bool:
        """`_commit` of a user's plain write, if `tx` is one; False if not (nothing
        changed then: the general path decides).

        The shape: one document written once, at one path whose every level exists
        (no level created, no list's length changed: nothing to lift), not read, on
        the state the transaction started from, moving the value there; any other
        document only read (the places of the links the write followed); made outside
        a batch, on a store that takes entries. What `basis_moved`, `stage_writes`,
        `ops_for`, `read_claims`, `_apply_local` and `_send` decide for it, in one
        walk, sent as a run log entry with its read claims (`_send_entry`): a
        `Cell.set` of one list element or one field of a linked document cost about
        1,600 Python bytecodes more on the general path (the `lists edit` rows make
        one per edit).
        """
        if self._batch is not None or self.fence_for is not None or not self.store.takes_entries:
            return False
        key: DocKey | None = None
        td: TxDoc | None = None
        for k, d in docs.items():
            if d.written is not None:
                if key is not None or d.read:
                    return False
                key, td = k, d
            elif d.read and records[k].version != d.version:
                self._stale(tx, stale_message(k))  # `basis_moved`: the first that moved
                return True
        if td is None or key is None:
            return False
        written = td.written
        rec = records[key]
        visible = rec.visible
        if written is None or len(written) != 1 or visible is not td.baseline:
            return False
        path = written[0]
        working = td.working
        new = _moved_leaf(visible, working, path)
        if new is _DECLINED:
            return False
        reads, deps = read_claims(docs) if len(docs) > 1 else ((), ())
        self._send_write(tx, key, rec, path, new, visible, working, reads, deps)
        return True

    def _send_write(
        self,
        tx: Transaction,
        key: DocKey,
        rec: DocRecord,
        path: Path,
        new: Value,
        visible: Value,
        working: Value,
        reads: tuple[ReadClaim, ...],
        deps: tuple[int, ...],
    ) -> None:
        """Apply a user's plain write (`_commit_write`, `write_at`) of `new` at `path` of
        `key` (`visible` becomes `working`) as a layer, and send it as a run log entry
        with its read claims."""
        seq = self._next_seq
        self._next_seq = seq + 1
        if not rec.layers:
            rec.layers = (Layer(seq, path, new),)
        else:
            push_layer(rec, Layer(seq, path, new))
        change = Change(key, visible, working, (path,))
        rec.visible = working
        rec.version += 1
        self._send_entry(
            tx,
            seq,
            change,
            (tx, seq, None, reads, None, None, deps, key, path, new, visible, working),
        )

    def write_at(
        self, identity: Identity, link: Link | DocKey, value: Any
    ) -> Pending[CommitResult] | None:
        """`Cell.set(value)` of a cell at `link` (or a shared document's key, the whole
        document: a `Place`) for `identity`, with no transaction: the
        pending result, or None with nothing done (not this shape: the caller writes
        through a transaction, which decides the rest and raises what is wrong).

        The shape: what `_commit_write` commits (one place written, every level above
        it there already, no list's length changed, the value there moved), reached
        from `link` through links that sit in shared documents ("space" scope, not
        internal) this replica holds loaded, each document met once, made outside a
        batch and a drain, on a store that takes entries. What the transaction does
        for it, in one walk: the places of the links followed are its read claims
        (shallow, on the basis taken now, as `_links._walk` logs them), the value is
        checked and staged as `Transaction.write` stages it, and it commits as
        `_commit_write` does (`_send_write`). Nothing runs between the walk and the
        commit, so no basis can have moved and none is checked. Through a transaction,
        a `Cell.set` of one list element or of one field of a linked document (each
        edit of the `lists edit` rows) cost about 600 to 900 Python bytecodes more:
        its object, the logged walk, the staged copy, and the commit re-deriving a
        shape known here.
        """
        if (
            link.scope != "space"
            or self._batch is not None
            or self._runs is not None
            or self.fence_for is not None
            or self.closed
            or not self.store.takes_entries
            or value is MISSING
        ):
            return None
        records = self._docs
        key = DocKey(link.space, link.id)  # (a key given: a copy, `rec.key` below)
        path = link.path
        hops: list[tuple[DocKey, DocRecord, Path]] | None = None
        left = WRITE_AT_HOPS  # (a counted `while`: no range object per write)
        while left:
            left -= 1
            if "cw:" <= key.id < "cw;":
                return None  # (internal: the transaction refuses it)
            rec = records.get(key)
            if rec is None or rec.key is None or type(rec.visible) is not dict:
                return None  # not loaded (a load to wait for), or packed
            # The key object the replica holds (`held_key`): the layer, the change, the
            # entry and the store's, the reader index's and the verdict's lookups find
            # it by identity, where an equal copy made from the link is compared field
            # by field at each.
            key = rec.key
            doc = rec.visible
            found = _first_link(doc.get("value", MISSING), path, doc)
            if type(found) is not tuple:
                break  # no link on the way: the place
            at, target = found
            if at == len(path):
                break  # a link at the cell itself: `set` replaces it
            if target.scope != "space":
                return None
            if hops is None:
                hops = []
            for hop_key, _, _ in hops:
                if hop_key == key:
                    return None  # a document met twice: its reads are compacted
            hops.append((key, rec, _VALUE_PATH + path[:at]))
            key = DocKey(target.space, target.id)
            path = target.path + path[at:]
        else:
            return None  # a long chain (or a cycle): the transaction follows or reports it
        full = _VALUE_PATH + path
        if len(full) > MAX_DEPTH + 1:
            return None
        if hops is not None:
            for hop_key, _, _ in hops:
                if hop_key == key:
                    return None  # written where a link was read: the general path
        t = type(value)
        try:
            if not (
                (t is int and MIN_INT <= value <= MAX_INT)
                or (t is str and value.isascii())
                or value is None
            ):
                value = normalize(value, where="write", depth=len(full))
            visible = rec.visible
            working = set_path(visible, full, value, where="write")
        except CellweaveError:
            return None  # an element-id step to resolve, or a bad value: the transaction's
        if found is MISSING or type(found) is tuple:
            new = _moved_leaf(visible, working, full)
            if new is _DECLINED:
                return None
        else:
            # The walk reached the place's value (`found`): every level above it is there
            # and `set_path` replaced it, so `_moved_leaf` is the comparison alone.
            t = type(value)
            if (
                (value == found)
                if t is type(found) and (t is int or t is str)
                else same_value(value, found)
            ):
                return None  # an equal value: the transaction elides it
            new = value
        reads: tuple[ReadClaim, ...] = ()
        deps: tuple[int, ...] = ()
        if hops is not None:
            # `read_claims` of the documents the walk read, in the order it read them.
            claims: list[ReadClaim] = []
            gathered: list[int] | None = None
            for hop_key, hop_rec, place in hops:
                layers = hop_rec.layers
                if layers:
                    hop_deps = (layers[0].seq,) if len(layers) == 1 else _deps(layers)
                    if not deps:
                        deps = hop_deps
                    elif gathered is None:
                        gathered = [*deps, *hop_deps]
                    else:
                        gathered += hop_deps
                claims.append(ReadClaim(hop_key, place, True, hop_rec.confirmed_seq))
            if gathered is not None:
                deps = tuple(sorted(set(gathered)))
            reads = tuple(claims)
        # What `Transaction.__init__` (counted open: a quiet replica's busy spell starts)
        # and `commit()` (no longer open) leave: made by its class's call, not
        # `_sent_run`'s `__new__` (a type attribute lookup and a C path used only here).
        tx = Transaction(self, identity)
        self._open_txs -= 1
        tx.status = "committing"
        pending: Pending[CommitResult] = Pending(self.mailbox)
        tx._pending = pending
        self._send_write(tx, key, rec, full, new, visible, working, reads, deps)
        return pending

    def _commit_reads(
        self, tx: Transaction, records: dict[DocKey, DocRecord], docs: dict[DocKey, TxDoc]
    ) -> bool:
        """`_commit` of a computation that read several documents, if `tx` is one; False
        if not (nothing changed then: the general path decides).

        The shape: documents only read, and one document only written, at one top-level
        field of its dict value, on the state the transaction started from. What the
        general path does (`basis_moved`, `stage_writes`, `read_claims`, `_apply_local`)
        in one loop over the documents, with no staged list: a node with two inputs
        (cellx's layers, a diamond's join) took about a third longer per update than a
        node with one, on the general path.

        In a drain, the commonest of these (two documents read, each at one place, then
        the output written: two of cellx's four nodes per layer) is recognised without
        the loop, and its run log entry carries the two reads as the transaction kept
        them, with no claim objects (see RUN_WIDTH): about a quarter of such an
        update's local commit and store check was the loop, `read_claims` and the
        claims' check.
        """
        if len(docs) == 3 and self._runs is not None and self.fence_for is None:
            (k1, t1), (k2, t2), (wkey, wtd) = docs.items()
            r1, r2 = t1.reads, t2.reads
            if (
                type(r1) is tuple
                and type(r2) is tuple
                and t1.written is None
                and t2.written is None
                and not wtd.read
            ):
                if records[k1].version != t1.version:
                    self._stale(tx, stale_message(k1))  # (the first moved, in order)
                    return True
                if records[k2].version != t2.version:
                    self._stale(tx, stale_message(k2))
                    return True
                d1, d2 = t1.deps, t2.deps
                # The deps only concatenated: the store asks each and whether a
                # revision's commit is among them, so neither order nor a repeat
                # matters (`run_request` sorts them for a request).
                return self._commit_field(
                    tx,
                    records,
                    wkey,
                    wtd,
                    None,
                    ((k1, t1.basis_seq, k2, t2.basis_seq), r1[0], r2[0],
                     d1 + d2 if d1 and d2 else d1 or d2),
                )  # fmt: skip
        out_key: DocKey | None = None
        out_td: TxDoc | None = None
        for key, td in docs.items():
            if td.written is not None:
                if out_key is not None or td.read:
                    return False
                out_key, out_td = key, td
            elif td.read and records[key].version != td.version:
                # `basis_moved`: the first read document (in order) that moved.
                self._stale(tx, stale_message(key))
                return True
        if out_td is None or out_key is None:
            return False
        return self._commit_field(tx, records, out_key, out_td, docs, None)

    def _commit_field(
        self,
        tx: Transaction,
        records: dict[DocKey, DocRecord],
        wkey: DocKey,
        wtd: TxDoc,
        docs: dict[DocKey, TxDoc] | None,
        two: tuple[Any, Any, Any, tuple[int, ...]] | None,
    ) -> bool:
        """`_commit_reads` once its reads are checked: the write of one top-level field of
        `wkey`, and the commit sent. The reads are `two` (a run log entry's reads, deps
        last: see RUN_WIDTH) or the read claims of `docs`. False if the write is not of
        that shape (nothing changed then)."""
        written = wtd.written
        if written is None or len(written) != 1:
            return False
        path = written[0]
        rec = records[wkey]
        working, visible = wtd.working, rec.visible
        if not (
            len(path) == 1
            and type(path[0]) is str
            and type(working) is dict
            and visible is wtd.baseline
            and type(visible) is dict
        ):
            return False
        new = working.get(path[0], MISSING)
        old = visible.get(path[0], MISSING)
        t = type(new)
        if (new == old) if t is type(old) and (t is int or t is str) else same_value(new, old):
            if rec.layers:
                return False  # a shadow write (`ops_for`): the general path keeps it
            self.stats.commits_elided += 1
            tx._settle(_OK)
            return True
        seq = self._next_seq
        self._next_seq = seq + 1
        layer = Layer(seq, path, new)
        if not rec.layers:
            rec.layers = (layer,)
        else:
            push_layer(rec, layer)
        change = Change(wkey, visible, working, (path,))
        rec.visible = working
        rec.version += 1
        if two is not None:  # (only in a drain)
            bases, first, second, deps = two
            self._send_run(
                tx,
                seq,
                change,
                (tx, seq, None, bases, first, second, deps, wkey, path, new, visible, working),
            )
            return True
        assert docs is not None
        reads, deps = read_claims(docs)
        if self._runs is not None and self.fence_for is None:
            self._send_run(
                tx,
                seq,
                change,
                (tx, seq, None, reads, None, None, deps, wkey, path, new, visible, working),
            )
            return True
        request = CommitRequest(
            self.session_id, seq, reads, deps, (Write(wkey, path, new),), _NO_KEYS
        )
        self._send(tx, seq, request, (change,))
        return True

    @staticmethod
    def _apply_local(
        seq: int, staged: list[Staged]
    ) -> tuple[tuple[Change, ...], tuple[Write, ...]]:
        """Put the staged writes of local commit `seq` on top of their documents: a layer
        each, the visible values moved. Returns the visible changes and the store writes."""
        changes: list[Change] = []
        writes: list[Write] = []
        for key, rec, ops, after, visible_change in staged:
            push_layer(rec, Layer.of(seq, ops))
            if visible_change:
                # A shadow write (equal to a still-pending value) changes nothing now.
                paths = (ops[0][0],) if len(ops) == 1 else tuple([op[0] for op in ops])
                changes.append(Change(key, rec.visible, after, paths))
                rec.visible = after
                rec.version += 1
            for path, value in ops:
                writes.append(Write(key, path, value))
        return tuple(changes), tuple(writes)

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
        # One shared empty log, not a new list per commit: every commit in flight kept
        # one, and lists stay tracked by the collector (a drain of N runs promoted N of
        # them through its generations). Nothing appends to it: `read` refuses once the
        # transaction is no longer open.
        tx.reads = _SENT_LOG
        self._in_flight[seq] = tx
        self.stats.commits_sent += 1
        try:
            if changes:
                hook = self._commit_hook
                if hook is not None:  # (the one subscriber, a scheduler: no Notification)
                    self.stats.notifications += 1
                    by = tx.source
                    for change in changes:
                        hook(change, by, False)
                elif not self._subscribers:  # (a replica alone: counted, nobody to hear it)
                    self.stats.notifications += 1
                else:
                    self._notify(Notification("commit", changes, tx))
        finally:
            runs = self._runs
            if runs is not None:  # a batch on a store that takes run logs: one log, in order
                runs += (request, *REQUEST_PAD)
            elif self._batch is not None:
                self._batch.append(request)
            else:
                self.store.submit(self, request)

    def _send_run(
        self, tx: Transaction | SentRun, seq: int, change: Change, entry: tuple[Any, ...]
    ) -> None:
        """`_send` of a usual commit made in a batch on a store that takes run logs: in
        flight and notified the same way, but kept as run log `entry` (see RUN_WIDTH)
        instead of a request, for the store to evaluate with the drain's other commits
        (`StoreBase.submit_runs`) and answer in one delivery (`accept_runs`). A direct
        run's (`SentRun`) has no transaction to empty. `change` moved the value at its
        one path, a top-level field of a dict document: each caller (`_commit_usual`,
        `_commit_field`, `run_field`) compared the two and elided an equal write (or
        left a shadow write to the general path), so its hook hears `moved`."""
        if type(tx) is not SentRun:  # (a `Transaction`: no subtype walk for a `SentRun`)
            tx._docs = {}  # (as in `_send`)
            tx.reads = _SENT_LOG
        self._in_flight[seq] = tx
        stats = self.stats
        stats.commits_sent += 1
        try:
            hook = self._commit_hook
            if hook is not None:  # (the one subscriber, a scheduler: no Notification)
                stats.notifications += 1
                # (Every run log entry's change moved its one field: see `subscribe`.)
                hook(change, tx.source, True)
            elif not self._subscribers:  # (a replica alone: counted, with nobody to hand it to)
                stats.notifications += 1
            else:
                self._notify(Notification("commit", (change,), tx))
        finally:
            runs = self._runs
            if runs is not None:
                runs += entry
            else:  # (the batch ended meanwhile)
                self._submit_runs(list(entry))

    def _send_entry(
        self, tx: Transaction, seq: int, change: Change, entry: tuple[Any, ...]
    ) -> None:
        """`_send` of a usual commit made outside a batch, as run log `entry` (see
        RUN_WIDTH): in flight and notified the same way, then offered to the store as it
        is (`StoreBase.commit_entry`, answered by `accept_entry`); a store that declines
        it gets its request, as `_send` would have sent it."""
        tx._docs = {}  # (as in `_send`)
        tx.reads = _SENT_LOG
        self._in_flight[seq] = tx
        stats = self.stats
        stats.commits_sent += 1
        try:
            hook = self._commit_hook
            if hook is not None:  # (the one subscriber, a scheduler: no Notification)
                stats.notifications += 1
                # Every caller compared the value at the entry's one path and sent only a
                # moved one (`_commit_usual`'s shape, `_moved_leaf`, `write_at`): a
                # `Cell.set` of a whole cell (one top-level field) moved it (`subscribe`).
                hook(change, tx.source, len(entry[8]) == 1)
            elif not self._subscribers:  # (a replica alone: counted, with nobody to hand it to)
                stats.notifications += 1
            else:
                self._notify(Notification("commit", (change,), tx))
        finally:
            runs = self._runs
            if runs is not None:  # (a batch opened meanwhile, by a subscriber: join it)
                if len(entry[8]) == 1:
                    runs += entry
                else:  # (a run log entry writes one top-level field: `_commit_write`'s
                    # deeper write goes as its request)
                    runs += (run_request(self.session_id, entry, 0), *REQUEST_PAD)
            elif self._batch is not None:
                self._batch.append(run_request(self.session_id, entry, 0))
            elif not self.store.commit_entry(self, self.session_id, entry):
                self.store.submit(self, run_request(self.session_id, entry, 0))

    def _stale(self, tx: Transaction, message: str) -> None:
        self.stats.local_stale += 1
        tx._settle(CommitResult(Outcome.STALE_BASIS, InconsistentBasisError(message)))

    # ------------------------------------------------------------------ store listener
    def on_accepted(self, request: CommitRequest, seq: int, base_seq: int, value: Value) -> None:
        """`on_verdict` for an accepted one-write commit, without a `Verdict`."""
        local_seq = request.local_seq
        sent = self._in_flight.pop(local_seq, None)
        if sent is None:
            return  # replica was closed meanwhile; nothing to settle
        tx = Transaction._of_run(self, sent) if isinstance(sent, SentRun) else sent
        if seq > self._heard:
            self._heard = seq
        key = request.writes[0].key
        rec = self._docs[key]
        layers = rec.layers
        if not (layers and layers[0].seq == local_seq and base_seq == rec.confirmed_seq):
            self._apply_verdict(tx, request, Verdict(seq, {key: value}, base_seqs={key: base_seq}))
        else:
            if type(layers) is tuple and len(layers) == 1:
                # `adopt_oldest_layer` of the document's only layer (a commit made
                # outside a batch: nothing else of it is pending), inlined.
                rec.layers = ()
                rec.confirmed = rec.visible = value
                rec.confirmed_seq = seq
                if rec.key is None:
                    rec.key = key
            else:
                adopt_oldest_layer(rec, key, layers, value, seq)
            self.stats.accepted += 1
            result = CommitResult(_OK_OUTCOME, None, seq)
            if tx._settle_callbacks is None and tx._post_commit is None and tx.result is None:
                # `_settle` of an OK result with no callback or effect to run (a
                # scheduler run's commit, once per node update; a `commit()` awaited),
                # inlined.
                tx.result = result
                tx.status = "committed"
                tx._values = None
                pending = tx._pending
                if pending is not None:
                    pending._resolve(result)
            else:
                tx._settle(result)
        if not self._in_flight and not self._open_txs and self.store._prune_in <= 0:
            self.store.quiesced(self)  # (nothing open, nothing in flight: it may prune)

    def accept_entry(self, entry: tuple[Any, ...], seq: int, base_seq: int, value: Value) -> None:
        """`on_accepted` of the commit the store took as run log `entry` (`_send_entry`):
        the usual case (its layer is its document's oldest, on the state the store applied
        it to, and nothing to call back: a Cell API commit) settled here, as `accept_runs`
        settles one; any other through `on_accepted` with its request."""
        local_seq = entry[1]
        tx: Transaction = entry[0]
        key: DocKey = entry[7]
        in_flight = self._in_flight
        if in_flight.get(local_seq) is not tx:  # (closed meanwhile: nothing to settle)
            self.on_accepted(run_request(self.session_id, entry, 0), seq, base_seq, value)
            return
        rec = self._docs[key]
        layers = rec.layers
        if (
            tx._settle_callbacks is not None
            or tx._post_commit is not None
            or tx.result is not None
            or not (layers and layers[0].seq == local_seq and base_seq == rec.confirmed_seq)
        ):
            self.on_accepted(run_request(self.session_id, entry, 0), seq, base_seq, value)
            return
        del in_flight[local_seq]
        if seq > self._heard:
            self._heard = seq
        if type(layers) is tuple and len(layers) == 1:
            # `adopt_oldest_layer` of the document's only layer (the usual case), inlined.
            rec.layers = ()
            rec.confirmed = rec.visible = value
            rec.confirmed_seq = seq
            if rec.key is None:
                rec.key = key
        else:
            adopt_oldest_layer(rec, key, layers, value, seq)
        self.stats.accepted += 1
        result = tx.result = CommitResult(_OK_OUTCOME, None, seq)
        tx.status = "committed"
        tx._values = None
        pending = tx._pending
        if pending is not None:
            pending._resolve(result)  # (its callbacks, if any, run: awaiting wakes here)
        if not in_flight and not self._open_txs and self.store._prune_in <= 0:
            self.store.quiesced(self)  # (nothing open, nothing in flight: it may prune)

    def accept_runs(self, runs: list[Any], results: list[Any], start: int) -> None:
        """The verdicts of a run log (`StoreBase.submit_runs`) from entry index `start`
        on, in order: an accepted commit of the usual case (a transaction with no
        callback or effect to run and no `Pending` with callbacks, whose layer is its
        document's oldest, on the state the store applied it to) is settled here, in
        place (nothing observable runs for it, so nothing here can raise); any other
        goes through
        `on_accepted` / `on_verdict` with its request. If one of those raises (a settle
        callback, a subscriber), the rest are posted back to the front of the mailbox
        first, so a later drain delivers them in the same order, exactly as single
        deliveries would."""
        in_flight = self._in_flight
        docs = self._docs
        stats = self.stats
        heard = self._heard
        accepted = 0  # (counted into `stats` once, at the end)
        n = len(runs)
        i = start
        # (Its verdicts' index: no division for the usual delivery, from the start.)
        j = start // RUN_WIDTH * 3 if start else 0
        try:
            while i < n:
                # (Indexed, not unpacked: `zip` over the log and its verdicts is fewer
                # bytecodes but more time, for the three items of twelve used here.)
                seq = results[j]
                base_seq = results[j + 1]
                value = results[j + 2]
                j += 3
                sent = runs[i]
                local_seq = runs[i + 1]
                i += RUN_WIDTH
                tx: Transaction | None
                if type(sent) is SentRun and seq is not None:
                    # A direct run accepted (`run_field`): nothing to call back or record,
                    # so only its layer to adopt, when it is its document's oldest and on
                    # the state the store applied it to. Its record is the run's own (a
                    # key's record is never replaced): no lookup by key; it is its layer.
                    tx = None
                    rec = sent.record
                    layers = rec.layers
                    if not (
                        layers
                        and layers[0] is sent
                        and base_seq == rec.confirmed_seq
                        and in_flight.pop(local_seq, None) is sent
                    ):
                        self._heard = max(heard, self._heard)
                        request = run_request(self.session_id, runs, i - RUN_WIDTH)
                        self.on_accepted(request, seq, base_seq, value)
                        continue
                    key = rec.key or runs[i - _WKEY_BACK]  # (loaded: its own; else the log's)
                else:
                    key = runs[i - _WKEY_BACK]
                    if seq is None:  # decided by the general path: (None, verdict, request)
                        self._heard = max(heard, self._heard)
                        self.on_verdict(value, base_seq)
                        continue
                    if local_seq is None:  # a request of its own (accepted: one document)
                        request = sent
                        local_seq = request.local_seq
                        key = request.writes[0].key
                        held = in_flight.get(local_seq)
                        tx = held if type(held) is Transaction else None
                    else:
                        request = None
                        tx = sent
                    rec = docs[key]
                    layers = rec.layers
                    pending = None if tx is None else tx._pending
                    if (
                        tx is None
                        or in_flight.get(local_seq) is not tx
                        or tx._settle_callbacks is not None
                        or tx._post_commit is not None
                        or (pending is not None and pending._callbacks is not None)
                        or tx.result is not None
                        or not (
                            layers and layers[0].seq == local_seq and base_seq == rec.confirmed_seq
                        )
                    ):
                        self._heard = max(heard, self._heard)
                        if request is None:
                            request = run_request(self.session_id, runs, i - RUN_WIDTH)
                        self.on_accepted(request, seq, base_seq, value)
                        continue
                    del in_flight[local_seq]
                if len(layers) == 1:
                    # `adopt_oldest_layer` of the document's only layer (a tuple, or a deque
                    # of one: the usual case), inlined as in `_apply_verdict`.
                    rec.layers = ()
                    rec.confirmed = rec.visible = value
                    rec.confirmed_seq = seq
                    if rec.key is None:
                        rec.key = key
                else:
                    adopt_oldest_layer(rec, key, layers, value, seq)
                accepted += 1
                if tx is None:  # (a direct run: nothing to settle)
                    heard = seq  # (a run log's seqs ascend; the largest is kept below)
                    continue
                result = tx.result = CommitResult(_OK_OUTCOME, None, seq)
                tx.status = "committed"
                tx._values = None
                if seq > heard:
                    heard = seq
                if pending is not None:
                    # A `Pending` nobody is called back by (a `commit()` to be read or
                    # awaited): resolving it runs nothing.
                    pending._resolve(result)
        finally:
            stats.accepted += accepted
            if heard > self._heard:
                self._heard = heard
            if i < n:
                self.mailbox.post_front(partial(self.accept_runs, runs, results, i))
        if not in_flight and not self._open_txs and self.store._prune_in <= 0:
            self.store.quiesced(self)  # (nothing open, nothing in flight: it may prune)

    def on_accepted_many(
        self, request: CommitRequest, seq: int, values: list[Value], base_seqs: list[int]
    ) -> None:
        """`on_verdict` for an accepted commit whose writes each name a different document,
        without a `Verdict`: each write's document, in order, adopts its layer as
        `_apply_verdict` adopts it (no lookup by `DocKey` but the record's); from the first
        that is not the usual case (its layer not the oldest, or not on the state the
        store applied it to) on, `_apply_verdict` decides the rest."""
        local_seq = request.local_seq
        sent = self._in_flight.pop(local_seq, None)
        if sent is None:
            return  # replica was closed meanwhile; nothing to settle
        tx = Transaction._of_run(self, sent) if isinstance(sent, SentRun) else sent
        if seq > self._heard:
            self._heard = seq
        records = self._docs
        writes = request.writes
        # (Zipped, not indexed: the fewest bytecodes per write; on a break, the rest of
        # the iterator is the rest of the writes.)
        them = zip(map(_KEY, writes), values, base_seqs, strict=True)
        for key, value, base_seq in them:
            rec = records[key]
            layers = rec.layers
            if not (layers and layers[0].seq == local_seq and base_seq == rec.confirmed_seq):
                keys = list(map(_KEY, writes))
                verdict = Verdict(
                    seq,
                    dict(zip(keys, values, strict=True)),
                    base_seqs=dict(zip(keys, base_seqs, strict=True)),
                )
                self._apply_verdict(tx, request, verdict, [key, *[k for k, _, _ in them]])
                break
            if type(layers) is tuple:  # (one layer: `adopt_oldest_layer` inlined)
                rec.layers = ()
                rec.confirmed = rec.visible = value
                rec.confirmed_seq = seq
                if rec.key is None:
                    rec.key = key
            else:
                adopt_oldest_layer(rec, key, layers, value, seq)
        else:
            self.stats.accepted += 1
            tx._settle(CommitResult(_OK_OUTCOME, None, seq))
        if not self._in_flight and not self._open_txs and self.store._prune_in <= 0:
            self.store.quiesced(self)  # (nothing open, nothing in flight: it may prune)

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
        sent = self._in_flight.pop(request.local_seq, None)
        if sent is None:
            return  # replica was closed meanwhile; nothing to settle
        # (A direct run's transaction is made here: rejected, or not the usual acceptance.)
        tx = Transaction._of_run(self, sent) if isinstance(sent, SentRun) else sent
        seq = verdict.seq
        if seq is not None and verdict.error is None and seq > self._heard:
            self._heard = seq
        self._apply_verdict(tx, request, verdict)
        if not self._in_flight and not self._open_txs and self.store._prune_in <= 0:
            self.store.quiesced(self)  # (nothing open, nothing in flight: it may prune)

    def _apply_verdict(
        self,
        tx: Transaction,
        request: CommitRequest,
        verdict: Verdict,
        keys: Sequence[DocKey] | None = None,
    ) -> None:
        """Apply `verdict` of `request` to the documents it wrote (`keys`: those left to
        apply it to, when `on_accepted_many` adopted the others), then settle `tx`."""
        changes: list[Change] = []
        seq = verdict.seq if verdict.error is None else None
        writes = request.writes
        local_seq = request.local_seq
        base_seq = verdict.base_seqs.get
        values = verdict.docs
        records = self._docs
        if keys is None:
            keys = (writes[0].key,) if len(writes) == 1 else request.keys_in_order()
        for key in keys:
            rec = records[key]
            layers = rec.layers
            if (
                seq is not None
                and layers
                and layers[0].seq == local_seq
                and base_seq(key, -1) == rec.confirmed_seq
            ):
                if type(layers) is tuple:  # (one layer: a tuple holds at most one)
                    # `adopt_oldest_layer` of a document's only layer (a batch's usual
                    # case: one layer per written document), inlined.
                    rec.layers = ()
                    rec.confirmed = rec.visible = values[key]
                    rec.confirmed_seq = seq
                    if rec.key is None:
                        rec.key = key
                else:
                    adopt_oldest_layer(rec, key, layers, values[key], seq)
                continue
            kept = [lay for lay in layers if lay.seq != local_seq]
            rec.layers = collections.deque(kept) if kept else ()
            if seq is not None and seq > rec.confirmed_seq:
                rec.confirmed = verdict.docs.get(key, rec.confirmed)
                rec.confirmed_seq = seq
                if rec.key is None:
                    rec.key = key
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
        if seq > self._heard:
            self._heard = seq
        changes: list[Change] = []
        for key, value in docs.items():
            rec = self._docs.get(key)
            if rec is None or rec.key is None or seq <= rec.confirmed_seq:
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
            if self._loose is not None:
                self._loose.add(key)
        self._loading.discard(key)
        waiters = self._sync_waiters.pop(key, [])
        changes: list[Change] = []
        if state is not None and (rec.key is None or state.seq > rec.confirmed_seq):
            self.stats.loads += 1
            rec.confirmed = state.value
            rec.confirmed_seq = state.seq
            if rec.key is None:
                rec.key = key
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
            assert rec.key is None or rec.key == key, f"{key} holds the key {rec.key}"
            if type(rec.visible) is bytes:
                assert rec.confirmed is rec.visible, f"{key} is packed, its confirmed value not"
                assert not rec.layers, f"{key} is packed with pending layers"
                continue
            assert same_value(rec.visible, rec.fold()), f"visible value of {key} is not the fold"
            seqs = [lay.seq for lay in rec.layers]
            assert seqs == sorted(seqs), f"layers of {key} out of order"
            for s in seqs:
                assert s in self._in_flight, f"layer {s} of {key} has no commit in flight"
        for seq, tx in self._in_flight.items():
            assert isinstance(tx, SentRun) or tx.status == "committing", (seq, tx)
        assert self._open_txs >= 0, f"open transaction count {self._open_txs}"
        assert self._busy_since <= max(self._heard, self.store._seq)

"""The store protocol: what a replica sends, what a store answers, and the test gates.

A store is the authoritative side. Each replica connects as one *session*
and submits `CommitRequest`s; the store validates them (reads against writes
since each read's basis, pending dependencies, create-only preconditions),
assigns a gap-free sequence number to accepted ones, and answers with a
`Verdict` delivered on the replica's mailbox, never inside `submit`. Other
sessions learn about accepted commits as `ForeignChange`s.

`StoreBase` holds what every backend shares: sessions, verdict and load
gates (`store.testing`), the validation rules (`validate_commit`), fan-out
of changes to other sessions. A backend supplies `_evaluate` (validate and
apply one commit atomically) and `_read` (one document's current state).

Invariants
- Per session, commits are evaluated in submission order (FIFO), unless a
  test gate releases them out of order, in which case a commit whose
  dependency is unresolved is rejected (never evaluated against a guess).
- A create-only document is accepted at most once, ever (deletion does not
  reset it).
- Conflict detection over-approximates, never under-approximates.
"""

from __future__ import annotations

import abc
import functools
import itertools
import operator
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs
import msgspec

from ._address import DocKey, Path
from ._args import bad_arg, check_arg
from ._claims import Fence
from ._outcome import Outcome, error_for
from ._pending import Mailbox
from ._values import MISSING, Value, get_path
from .errors import (
    CommitRejected,
    ConflictError,
    DependencyRejectedError,
    InvalidArgumentError,
    LivenessError,
    PreconditionFailedError,
    StoreError,
)

if TYPE_CHECKING:
    from ._claims import ClaimTable

# --------------------------------------------------------------------------- records


# Records are frozen msgspec Structs: several are built per commit, and they
# construct an order of magnitude faster than attrs' frozen classes. Those that
# hold only keys, paths, values and other such records are `gc=False`: nothing
# they reach can refer back to them, so they are never part of a reference
# cycle, and the collector need not scan the thousands a settling graph keeps
# in flight (a Verdict holds an exception, which can, so it stays tracked).


class ReadClaim(msgspec.Struct, frozen=True, gc=False):
    """A read the store must validate: nothing overlapping `path` written after `basis_seq`."""

    key: DocKey
    path: Path
    shallow: bool
    basis_seq: int


class Write(msgspec.Struct, frozen=True, gc=False):
    """One leaf write: `value` at full-document `path` (`MISSING` deletes)."""

    key: DocKey
    path: Path
    value: Value


_WRITE_KEY: Callable[[Write], DocKey] = operator.attrgetter("key")


class CommitRequest(msgspec.Struct, frozen=True, gc=False):
    session_id: str
    local_seq: int
    reads: tuple[ReadClaim, ...]
    deps: tuple[int, ...]
    """Own earlier commits (local seqs) whose pending writes this commit was built on,
    ascending. A tuple, not a frozenset: one is made per commit, and a tuple of ints
    leaves the collector's view once scanned (a frozenset never does)."""
    writes: tuple[Write, ...]
    create_only: frozenset[DocKey]
    fence: Fence | None = None
    """For a commit of a claimed page's run: the claim it was made under. The store
    rejects it (`FencedError`) unless that claim is still the page's newest, checked
    in the same transaction that applies it."""

    @property
    def keys(self) -> frozenset[DocKey]:
        """The written documents."""
        return frozenset(w.key for w in self.writes)

    def keys_in_order(self) -> list[DocKey]:
        """Written documents, each once, in write order (deterministic notifications)."""
        writes = self.writes
        if len(writes) == 1:
            return [writes[0].key]
        # (`map` with an attrgetter: no Python frame or bytecode per write, where a
        # generator cost about ten per write of a 100-document commit's verdict.)
        return list(dict.fromkeys(map(_WRITE_KEY, writes)))


class Verdict(msgspec.Struct, frozen=True):
    """A store's answer: accepted with `seq` and the written documents' new values, or `error`.

    `base_seqs` (optional) gives, per written document, the seq of the state the
    commit was applied on; a replica whose confirmed state is at that seq knows
    the new value is its own layer over it, without comparing documents.
    """

    seq: int | None
    docs: dict[DocKey, Value] = msgspec.field(default_factory=dict)
    error: CommitRejected | None = None
    base_seqs: dict[DocKey, int] = msgspec.field(default_factory=dict)


class DocState(msgspec.Struct, frozen=True, gc=False):
    seq: int
    """Sequence number of the last write to the document (0 if never written)."""
    value: Value
    """The document, or MISSING."""


@final  # (no subclass: a `MemoryStore` tells it from a list by `type(revs)`)
class Revision(msgspec.Struct, frozen=True, gc=False):
    seq: int
    session_id: str
    local_seq: int
    paths: tuple[Path, ...]


RUN_WIDTH = 12
"""Items per commit in a *run log* (`StoreBase.submit_runs`): a drain's node-run
commits, flattened into one list, each as

    tx, local_seq, rkey, basis, rpath, shallow, deps, wkey, path, new, baseline, working

One read at (`rkey`, `rpath`, `shallow`) on basis seq `basis`; or, with `rkey` None,
the read claims in `basis` (a tuple of `ReadClaim`, `rpath` and `shallow` None); or,
with `rkey` None, two reads of one place each (a node with two inputs): `basis` is
(document, basis seq, document, basis seq) and `rpath` and `shallow` are the first
and the second read's (path, shallow) pairs; or, with `rkey` None and `shallow` True,
k > 2 reads of one place each (a value function of k inputs, `Replica.run_field`,
deep at its inputs' places and shallow at the link hops on the way to them): `basis`
is (document, basis seq, ...) for each read in order (a document may repeat) and
`rpath` the tuple of their (path, shallow) pairs. Then the local commits
`deps` it builds on (of two or k reads: every document's deps, in no particular
order, maybe repeated); one
write of `new` at `path` (one top-level field) of `wkey`, made on the visible value
`baseline`, which gave `working`. An entry offered to `StoreBase.commit_entry` may
write deeper (`Replica._commit_write`: its reads are claims), but never creates a
level of `baseline` (every level above `path` exists there: the path is its own
revision path on that value) and never changes a list's length. `tx` is the
replica's and opaque to the store. Any other commit is an entry of its own: its
`CommitRequest` in place of `tx`, and None everywhere else (`local_seq` None says
which). Flat, so a drain of N commits keeps one list and no object per commit for
the store's sake (the request, its claims and writes)."""


def run_request(session_id: str, runs: Sequence[Any], i: int) -> CommitRequest:
    """The `CommitRequest` of the run log entry at index `i` (a multiple of RUN_WIDTH)."""
    if runs[i + 1] is None:
        request: CommitRequest = runs[i]  # an entry of its own
        return request
    _, local_seq, rkey, basis, rpath, shallow, deps, wkey, path, new = runs[i : i + 10]
    if rkey is None:
        if shallow is None:
            reads = basis
        elif shallow is True:  # k reads (see RUN_WIDTH)
            reads = tuple(
                [ReadClaim(basis[2 * j], p, s, basis[2 * j + 1]) for j, (p, s) in enumerate(rpath)]
            )
            deps = tuple(sorted(set(deps)))  # (a request's deps are ascending and unique)
        else:  # two reads (see RUN_WIDTH)
            (k1, b1, k2, b2), (p1, s1), (p2, s2) = basis, rpath, shallow
            reads = (ReadClaim(k1, p1, s1, b1), ReadClaim(k2, p2, s2, b2))
            deps = tuple(sorted(set(deps)))  # (a request's deps are ascending and unique)
    else:
        reads = (ReadClaim(rkey, rpath, shallow, basis),)
    return CommitRequest(session_id, local_seq, reads, deps, (Write(wkey, path, new),), _NO_KEYS)


_NO_KEYS: frozenset[DocKey] = frozenset()
REQUEST_PAD = (None,) * (RUN_WIDTH - 1)
"""What follows a request in a run log entry of its own (see RUN_WIDTH)."""


class SessionListener(Protocol):
    """What a replica gives the store when it connects."""

    mailbox: Mailbox

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None: ...

    def on_accepted(self, request: CommitRequest, seq: int, base_seq: int, value: Value) -> None:
        """The verdict accepting a one-write commit: `seq`, and the written document's
        new `value`, applied on its state at `base_seq` (`Verdict(seq, {key: value},
        base_seqs={key: base_seq})` without the dicts)."""

    def on_accepted_many(
        self, request: CommitRequest, seq: int, values: list[Value], base_seqs: list[int]
    ) -> None:
        """The verdict accepting a commit whose writes each name a different document
        (two or more): `seq`, and per write, in order, its document's new value, applied
        on its state at that base seq (`Verdict(seq, docs, base_seqs=...)` without the
        dicts)."""

    def on_foreign(self, seq: int, docs: dict[DocKey, Value]) -> None: ...
    def accept_runs(self, runs: list[Any], results: list[Any], start: int) -> None:
        """The verdicts of a run log (`StoreBase.submit_runs`), from entry index `start`
        on: `results` holds, per entry, (seq, base seq, new value) for an accepted
        commit, else (None, its `Verdict`, its `CommitRequest`)."""

    def accept_entry(self, entry: tuple[Any, ...], seq: int, base_seq: int, value: Value) -> None:
        """The verdict accepting the one commit of `StoreBase.commit_entry`: `seq`, and
        the written document's new `value`, applied on its state at `base_seq`."""

    def low_water(self) -> int | None:
        """The store seq at or below which this session's future commits need no
        revision history (None: they need none now). A store that prunes history asks
        every session and keeps what the lowest answer needs (`MemoryStore`)."""

    def on_loaded(
        self, key: DocKey, state: DocState | None, error: BaseException | None
    ) -> None: ...


# --------------------------------------------------------------------------- validation


def write_overlaps_read(write: Path, read: Path, shallow: bool) -> bool:
    """Does a leaf write at `write` possibly change what a read at `read` saw?

    Deep reads see everything at or below `read`; shallow reads see the key
    set / length / kind at `read` only. Over-approximates.  O(min(len)).

    A read through an element id (a str step where the write has a list index: writes
    are positional) may have read any element of that list, so a write into an element
    of it overlaps (conservative: it may be another element).
    """
    n = min(len(write), len(read))
    if write[:n] != read[:n]:
        i = next(i for i in range(n) if write[i] != read[i])
        if type(write[i]) is not int or type(read[i]) is not str:
            return False
        # An element id where the write has a position: see above.
    if shallow:
        return len(write) <= len(read) + 1
    return True


def revision_path(doc: Value, path: Path) -> Path:
    """The path to record, for conflict checks, for a leaf write at `path` applied to `doc`.

    Usually `path`. But a write below a level `doc` lacks creates that level, which
    changes its parent's key set (or makes the document exist), so the first created
    level is recorded: otherwise a shallow read of the parent would not conflict with
    it. The replica lifts such writes itself only when it sees the level missing; it
    cannot when it built on a pending layer the store never applied.  O(len(path)).
    """
    node = doc
    for i in range(len(path)):
        if node is MISSING:
            return path[:i]
        node = get_path(node, path[i : i + 1])
    return path


def validate_commit(
    request: CommitRequest,
    *,
    revisions_since: Callable[[DocKey, int], Iterable[Revision]],
    resolution: Callable[[str, int], int | bool | None],
    ever_written: Callable[[DocKey], bool],
) -> CommitRejected | None:
    """The store's rules, shared by every backend. Returns the rejection, or None to accept.

    `resolution(session, local_seq)` is the seq an earlier commit got, `None`
    if it was rejected, or `False` if it is unresolved.
    """
    deps = request.deps
    for dep in (deps if len(deps) == 1 else sorted(deps)) if deps else ():
        got = resolution(request.session_id, dep)
        if got is None:
            return DependencyRejectedError(
                f"commit {request.session_id}#{request.local_seq} was built on commit #{dep},"
                " which was rejected"
            )
        if got is False:
            return DependencyRejectedError(
                f"commit {request.session_id}#{request.local_seq} was built on commit #{dep},"
                " which has no verdict yet"
            )
    reads = request.reads
    # Many deps are looked up in a set (one lookup per newer revision of every read
    # document: in the tuple, a commit reading N documents with pending writes was O(N^2)).
    built_on = deps if len(deps) <= 8 else frozenset(deps)
    if len(reads) == 1:  # the common case (a scheduler run reads one place): no grouping
        only = reads[0]
        error = _check_claims(request, only.key, only.basis_seq, reads, revisions_since, built_on)
        if error is not None:
            return error
    elif reads:
        by_key: dict[tuple[DocKey, int], list[ReadClaim]] = {}
        for claim in reads:
            by_key.setdefault((claim.key, claim.basis_seq), []).append(claim)
        for (key, basis), claims in by_key.items():
            error = _check_claims(request, key, basis, claims, revisions_since, built_on)
            if error is not None:
                return error
    for key in sorted(request.create_only, key=str) if request.create_only else ():
        if ever_written(key):
            return PreconditionFailedError(
                f"create-only document {key} already exists (or existed)", kind="receipt-exists"
            )
    return None


def _check_claims(
    request: CommitRequest,
    key: DocKey,
    basis: int,
    claims: Sequence[ReadClaim],
    revisions_since: Callable[[DocKey, int], Iterable[Revision]],
    built_on: Collection[int],
) -> CommitRejected | None:
    """The first conflict between `claims` (reads of `key` at `basis`) and later writes
    (`built_on`: the request's deps)."""
    for rev in revisions_since(key, basis):
        if rev.session_id == request.session_id and rev.local_seq in built_on:
            continue  # the commit saw these writes as pending layers
        for claim in claims:
            for path in rev.paths:
                if write_overlaps_read(path, claim.path, claim.shallow):
                    return ConflictError(
                        f"commit {request.session_id}#{request.local_seq} read {key} at"
                        f" {list(claim.path)} (basis seq {basis}); seq {rev.seq} has since"
                        f" written {list(path)}"
                    )
    return None


# --------------------------------------------------------------------------- gates


@attrs.define(eq=False)
class HeldCommit:
    """A commit a `VerdictGate` is holding."""

    store: StoreBase
    listener: SessionListener
    request: CommitRequest

    def __repr__(self) -> str:
        docs = ", ".join(sorted(str(k) for k in self.request.keys))
        return f"<HeldCommit {self.request.session_id}#{self.request.local_seq} writes [{docs}]>"


class VerdictGate:
    """Holds every commit's verdict until the test decides it.

    Commits still apply locally (and notify) when made; only the store's
    evaluation waits. `accept(i)` hands held commit `i` (oldest first) to the
    store, which validates it as usual (a conflicting commit is still
    rejected); `reject(i, outcome)` rejects it with an error of that outcome
    without evaluating it; `release()` accepts the rest in order and stops holding.
    """

    def __init__(self, store: StoreBase) -> None:
        self._store = store
        self._held: list[HeldCommit] = []
        self.active = True

    def __enter__(self) -> VerdictGate:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            self.release()

    def held(self) -> list[HeldCommit]:
        return list(self._held)

    def waiting(self) -> int:
        return len(self._held)

    def _take(self, i: int) -> HeldCommit:
        check_arg(i, int, where="VerdictGate", name="i", accepts="an int index of a held commit")
        if not 0 <= i < len(self._held):
            raise IndexError(f"VerdictGate holds {len(self._held)} commits; no index {i}")
        return self._held.pop(i)

    def accept(self, i: int = 0) -> None:
        held = self._take(i)
        self._store._evaluate_and_answer(held.listener, held.request)

    def reject(self, i: int = 0, outcome: Outcome = Outcome.STALE_BASIS) -> None:
        if not isinstance(outcome, Outcome):
            raise bad_arg(
                outcome, where=f"{self!r}.reject()", name="outcome", accepts="a failure Outcome"
            )
        if outcome is Outcome.OK:
            raise InvalidArgumentError(f"{self!r}.reject() needs a failure outcome, not Outcome.OK")
        held = self._take(i)
        req = held.request
        error = error_for(outcome, f"rejected by test gate: {req.session_id}#{req.local_seq}")
        self._store._record_rejection(req)
        self._store._answer(held.listener, req, Verdict(None, error=error))

    def release(self) -> None:
        self.active = False
        if self._store._verdict_gate is self:
            self._store._verdict_gate = None
        while self._held:
            self.accept(0)


class LoadGate:
    """Holds loads and syncs of some documents until `release()` (or `fail()`)."""

    def __init__(self, store: StoreBase, keys: frozenset[DocKey]) -> None:
        self._store = store
        self.keys = keys
        self._waiting: list[tuple[SessionListener, DocKey]] = []
        self.active = True

    def __enter__(self) -> LoadGate:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            self.release()

    def waiting(self) -> int:
        return len(self._waiting)

    def _hold(self, listener: SessionListener, key: DocKey) -> None:
        self._waiting.append((listener, key))

    def _close(self) -> list[tuple[SessionListener, DocKey]]:
        self.active = False
        if self in self._store._load_gates:
            self._store._load_gates.remove(self)
        waiting, self._waiting = self._waiting, []
        return waiting

    def release(self) -> None:
        """Let the held loads through (they read the store's state now)."""
        for listener, key in self._close():
            self._store._deliver_load(listener, key)

    def fail(self) -> None:
        """Fail the held loads as LIVENESS errors and stop holding."""
        for listener, key in self._close():
            err = LivenessError(f"load of {key} failed (test gate)")
            listener.mailbox.post(functools.partial(listener.on_loaded, key, None, err))


def _doc_key_of(obj: Any) -> DocKey:
    if isinstance(obj, DocKey):
        return obj
    key = getattr(obj, "doc_key", None)
    if isinstance(key, DocKey):
        return key
    raise bad_arg(obj, where="hold_loads()", name="each argument", accepts="a cell or a DocKey")


class TestControls:
    """`store.testing`: hold verdicts and loads to reproduce races deterministically."""

    __test__ = False  # not a pytest test class

    def __init__(self, store: StoreBase) -> None:
        self._store = store

    def hold_verdicts(self) -> VerdictGate:
        if self._store._verdict_gate is not None:
            raise StoreError("verdicts are already held by another gate; release it first")
        gate = VerdictGate(self._store)
        self._store._verdict_gate = gate
        return gate

    def hold_loads(self, *cells: Any) -> LoadGate:
        if not cells:
            raise TypeError("hold_loads() needs at least one cell or DocKey")
        gate = LoadGate(self._store, frozenset(_doc_key_of(c) for c in cells))
        self._store._load_gates.append(gate)
        return gate


# --------------------------------------------------------------------------- base


class _Delivery(msgspec.Struct):
    """A verdict waiting on a mailbox: one object per commit, not a closure and its cells.

    Tracked by the collector: it refers to the replica, whose mailbox refers to it.
    """

    listener: SessionListener
    request: CommitRequest
    verdict: Verdict

    def __call__(self) -> None:
        self.listener.on_verdict(self.request, self.verdict)


class StoreBase(abc.ABC):
    """Sessions, gates and fan-out shared by every store backend."""

    claims: ClaimTable
    """The page claims (which process runs each open page); every backend has them."""

    _session_ids = itertools.count(1)

    _seq: int = 0
    """The newest seq this store has applied, as far as its sessions' low-water marks go
    (`SessionListener.low_water`; read by a replica as a busy spell begins, so a plain
    attribute). 0 in a store whose history is bounded otherwise (SQLite, Postgres: by a
    count per document), which never asks for marks; `MemoryStore` keeps it current."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._listeners: dict[str, SessionListener] = {}
        self._verdict_gate: VerdictGate | None = None
        self._load_gates: list[LoadGate] = []
        self.testing = TestControls(self)
        self.closed = False
        self.commits_evaluated = 0

    # -- backend hooks
    @abc.abstractmethod
    def _evaluate(self, request: CommitRequest) -> Verdict:
        """Validate and apply `request` atomically; record its resolution. Backend-specific."""

    @abc.abstractmethod
    def _read(self, key: DocKey) -> DocState:
        """The document's current state in the store."""

    @abc.abstractmethod
    def _record_rejection(self, request: CommitRequest) -> None:
        """Remember that `request` was rejected without evaluation (a gate's reject)."""

    _prune_in: int = 1
    """A store that prunes history by low-water marks sets this to 0 or less when a
    prune is due (`quiesced`); a replica checks it before calling (a plain attribute:
    it is read after every verdict). Never due in a store that does not prune so."""

    def quiesced(self, listener: SessionListener) -> None:
        """`listener` has no transaction open and no commit in flight (it just settled
        its last one) and `_prune_in` says a prune is due: a store that prunes history
        by low-water marks does it now. Default: nothing."""
        return

    takes_runs: bool = False
    """Whether `submit_runs` may take a run log (else a replica submits requests)."""

    def submit_runs(self, listener: SessionListener, session_id: str, runs: list[Any]) -> bool:
        """Evaluate the commits of the run log `runs` (see RUN_WIDTH) in order, exactly as
        `submit_batch` of their requests would, and answer them with one delivery
        (`listener.accept_runs`). Returns False, having done nothing, when it cannot now
        (a held gate, a hooked evaluation, a backend without it): the caller then
        submits the requests (`run_request`). Default: False."""
        return False

    takes_entries: bool = False
    """Whether a replica offers its usual commits made outside a batch to `commit_entry`
    (else it submits their requests)."""

    def commit_entry(
        self, listener: SessionListener, session_id: str, entry: tuple[Any, ...]
    ) -> bool:
        """Accept the one commit `entry` (a run log entry, see RUN_WIDTH, never a request
        of its own) now if it surely would be, and answer it with `listener.accept_entry`
        on its mailbox (never inside this call), exactly as `submit` of its request
        (`run_request`) would have; returns True. Returns False, having done nothing,
        when it cannot (a held gate, a hooked evaluation, a check that must go to the
        general path, a backend without it): the caller then submits the request.
        Default: False."""
        return False

    def _submit_evaluation(self, listener: SessionListener, request: CommitRequest) -> None:
        """Evaluate now (memory) or queue for a writer (SQLite). Default: now."""
        self._evaluate_and_answer(listener, request)

    # -- sessions
    def connect(self, listener: SessionListener, session_id: str | None = None) -> str:
        self._check_open()
        with self._lock:
            sid = session_id or f"s{next(self._session_ids)}-{id(listener):x}"
            if sid in self._listeners:
                raise StoreError(f"session id {sid!r} is already connected to this store")
            self._listeners[sid] = listener
            return sid

    def disconnect(self, session_id: str) -> None:
        with self._lock:
            self._listeners.pop(session_id, None)

    def _check_open(self) -> None:
        if self.closed:
            raise StoreError(f"{type(self).__name__} is closed")

    # -- commits
    def submit(self, listener: SessionListener, request: CommitRequest) -> None:
        """Queue `request`; its verdict arrives on `listener.mailbox`, never inside this call."""
        if self.closed:
            self._check_open()
        gate = self._verdict_gate
        if gate is not None:
            gate._held.append(HeldCommit(self, listener, request))
            return
        self._submit_evaluation(listener, request)

    def submit_batch(self, listener: SessionListener, requests: Sequence[CommitRequest]) -> None:
        """`submit` each of `requests`, in order (a replica's batch of commits).

        The store evaluates them one after the other, each seeing the ones before
        it, and decides each alone. A backend may answer them with one delivery.
        """
        if self.closed:
            self._check_open()
        gate = self._verdict_gate
        if gate is not None:
            for request in requests:
                gate._held.append(HeldCommit(self, listener, request))
            return
        self._submit_batch_evaluation(listener, requests)

    def _submit_batch_evaluation(
        self, listener: SessionListener, requests: Sequence[CommitRequest]
    ) -> None:
        """Evaluate (or queue) a batch. Default: one `_submit_evaluation` per request."""
        for request in requests:
            self._submit_evaluation(listener, request)

    def _evaluate_and_answer(self, listener: SessionListener, request: CommitRequest) -> None:
        verdict = self._evaluate(request)
        self.commits_evaluated += 1
        listener.mailbox.post(_Delivery(listener, request, verdict))  # `_answer`, inlined
        if verdict.error is None and verdict.seq is not None and len(self._listeners) > 1:
            self._broadcast(request.session_id, verdict.seq, verdict.docs)

    def _answer(self, listener: SessionListener, request: CommitRequest, verdict: Verdict) -> None:
        listener.mailbox.post(_Delivery(listener, request, verdict))

    def _broadcast(self, origin: str, seq: int, docs: dict[DocKey, Value]) -> None:
        if len(self._listeners) == 1 and origin in self._listeners:
            return  # nobody else to tell (the common single-runtime case)
        with self._lock:
            others = [(sid, lis) for sid, lis in self._listeners.items() if sid != origin]
        for _, lis in others:
            lis.mailbox.post(functools.partial(lis.on_foreign, seq, docs))

    # -- loads
    def _held_by(self, key: DocKey) -> LoadGate | None:
        for gate in self._load_gates:
            if key in gate.keys:
                return gate
        return None

    def load_now(self, key: DocKey, listener: SessionListener | None = None) -> DocState | None:
        """The document's state now, or None if a load gate holds it.

        `listener`, if given, holds the document from now on (as after `load`): a
        store may send foreign commits only to the sessions holding the documents
        they write (`MemoryStore` does), so a replica names itself here.
        """
        self._check_open()
        if self._held_by(key) is not None:
            return None
        return self._read(key)

    def load(self, listener: SessionListener, key: DocKey) -> None:
        """Load (or sync) `key`; the answer arrives as `listener.on_loaded` on its mailbox."""
        self._check_open()
        gate = self._held_by(key)
        if gate is not None:
            gate._hold(listener, key)
            return
        self._deliver_load(listener, key)

    def _deliver_load(self, listener: SessionListener, key: DocKey) -> None:
        try:
            state: DocState | None = self._read(key)
            error: BaseException | None = None
        except Exception as exc:  # a store failure reaches the waiter, never only a log
            state, error = None, exc
        listener.mailbox.post(lambda: listener.on_loaded(key, state, error))

    # -- introspection
    def read_durable(self, key: DocKey) -> Value:
        """The store's current value of `key` (MISSING if absent). For tests and tools."""
        return self._read(key).value

    def close(self) -> None:
        self.closed = True

    def _check(self) -> None:
        """Invariants of the shared part (backends extend)."""
        gate = self._verdict_gate
        assert gate is None or gate.active
        assert all(g.active for g in self._load_gates)


NO_STATE = DocState(0, MISSING)

"""Store conformance: two replicas on one store, checked against a model of durable state.

`StoreConformanceMachine` drives two `Replica`s (sessions "A" and "B") over three
documents. Rules: open a transaction (optionally reading a document at once), read
(deep or shallow), write, commit, abort; a one-step commit from either replica (blind,
after a read, or create-only); hold verdicts / release them, and while held accept one
(normally the oldest of its session) or reject one with STALE_BASIS, PERMANENT,
TERMINAL or LIVENESS; sync a document, hold its loads and release or fail them; open
or end a commit batch on a replica (`Replica.begin_batch`: its requests reach the store
together when it ends, or at a pump or sync); pump a replica; poll (two store objects
on one file); settle. Each backend runs it through a
subclass: `TestMemoryStore`, `TestSQLiteStore` (both replicas on one `SQLiteStore`),
`TestSQLiteStorePair` (one `SQLiteStore` object per replica, same file), and the same two
on `PostgresStore` against a throwaway server (`TestPostgresStore`, `TestPostgresStorePair`:
a fresh schema per example).

The model of durable state is the fold, in seq order, of the writes of every commit
whose result said OK. It is learned only from results (`CommitResult.seq`) and from the
`CommitRequest`s the replicas submitted (seen by wrapping `store.submit` and
`store.submit_batch`; a request held back in an open batch counts as sent).

Checked after every step
- `_check()` of every store object, both replicas and every transaction;
- P-TX-1 read-your-writes: a read equals the same path of a shadow copy (the visible
  value at first access plus the transaction's own writes);
- P-TX-2 local stale basis: a commit that read a document whose visible value changed
  (was notified) since the transaction first accessed it settles STALE_BASIS
  (`InconsistentBasisError`) at once, submits nothing and notifies nothing; so does a
  blind write that no longer applies (a scalar arrived above it), and nothing else;
- commit: every written path shows the transaction's value, an untouched document
  shows exactly its working copy, nothing else moves; P-TX-3 a commit that changes
  nothing and marks nothing is elided (OK at once, not sent, not notified); a sent
  commit notifies exactly the documents it writes, once, as `commit`;
- P-REV-2 replay: folding every notification's `after` (per replica, in emission order)
  onto the replica's initial snapshot gives its visible value of every document; each
  change's `before` is the previous `after`; a revert precedes its settle callbacks;
- P-TX-4 settle callbacks ran at most once; a gate rejection settles with its outcome;
- P-PRE-1 at most one accepted create-only commit per document.

Checked at quiescence (the `settle` rule, and at the end of every run that did not
fail): gates released, stores flushed and polled, mailboxes pumped until nothing moves,
- P-CLS-2 every `Pending` is done and every transaction settled exactly once;
  post-commit effects ran iff it settled OK (P-TX-5);
- P-ENG-2 accepted seqs are gap-free, `read_durable` equals the model on every store
  object, and both replicas show exactly that (P-REV-1/P-REV-3: reverts left no
  write behind and stomped nothing newer);
- P-ENG-1 read coherence: every read an accepted commit's basis vouched for (a read of
  a document before the transaction wrote it) equals the model just before its seq (for
  a shallow read: the same key set, length or scalar);
- P-PRE-1 an accepted create-only commit is the first accepted commit to touch its
  document; P-CASC-1 a commit built on a rejected layer was rejected too, and one built
  on accepted layers came after them; P-ENG-3 per session, seqs increase with local seq;
- no spurious rejection: each store rejection has a cause in the model (an accepted
  commit after the basis wrote an overlapping path, a write no longer applied, a
  dependency was rejected, a create-only document was already touched).

P-ENG-1 and P-ENG-3 assume the store sees each session's commits in submission order,
as every real store does. A gate can break that order (`accept` with `OUT_OF_ORDER`);
a run that did so skips those two checks and keeps all the others.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs
import psycopg
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from bench.pg_cluster import Cluster
from cells import (
    MISSING,
    CommitResult,
    DocKey,
    Identity,
    LoadGate,
    MemoryStore,
    Notification,
    Outcome,
    Pending,
    PostgresStore,
    Replica,
    SQLiteStore,
    StoreBase,
    Transaction,
    VerdictGate,
    get_path,
    set_path,
    value_equal,
)
from cells._codec import unpack_value
from cells._store import RUN_WIDTH, CommitRequest, HeldCommit, run_request
from cells.errors import (
    ConflictError,
    DependencyRejectedError,
    InconsistentBasisError,
    InvalidValueError,
    LivenessError,
    PreconditionFailedError,
)

Value = Any
Path = tuple[str | int, ...]
Held = tuple[VerdictGate, int, HeldCommit]
"""A held commit: its gate, its index there, and the commit."""

KEYS = tuple(DocKey("conformance", f"d{i}") for i in range(3))
PATHS: tuple[Path, ...] = ((), ("a",), ("b",), ("a", "x"))
MAX_OPEN = 3
"""Open transactions at a time: enough for interleavings, few enough to commit often."""
SETTLE_AFTER = 3
"""Commits sent since the last `settle` before another one is allowed."""

leaves = st.integers(min_value=0, max_value=2)
values = st.one_of(
    leaves,
    st.dictionaries(st.sampled_from(["a", "b", "x"]), leaves, max_size=2),
    st.just(MISSING),
)
keys = st.sampled_from(KEYS)
paths = st.sampled_from(PATHS)
replicas = st.integers(min_value=0, max_value=1)
picks = st.integers(min_value=0, max_value=7)
"""Which held commit a gate rule takes (modulo how many are eligible)."""
OUT_OF_ORDER = 7
"""The `pick` with which `accept` breaks a session's order (rarely, and never when shrunk)."""
quick_kinds = st.sampled_from(["blind", "read", "shallow", "create"])
rejections = st.sampled_from(
    [Outcome.STALE_BASIS, Outcome.PERMANENT, Outcome.TERMINAL, Outcome.LIVENESS]
)


def same(a: Value, b: Value) -> bool:
    """JSON equality that also treats MISSING as a value of its own."""
    if a is MISSING or b is MISSING:
        return a is b
    return value_equal(a, b)


def same_shape(a: Value, b: Value) -> bool:
    """What a shallow read sees alike: a dict's key set, a list's length, a scalar itself."""
    if type(a) is dict or type(b) is dict:
        return type(a) is type(b) and set(a) == set(b)
    if type(a) is list or type(b) is list:
        return type(a) is type(b) and len(a) == len(b)
    return same(a, b)


def overlaps(write: Path, read: Path, shallow: bool) -> bool:
    """The documented conflict rule (`write_overlaps_read`), restated for the checks here."""
    n = min(len(write), len(read))
    if write[:n] != read[:n]:
        return False
    return not shallow or len(write) <= len(read) + 1


def created_level(doc: Value, path: Path) -> Path:
    """What a write at `path` changes in `doc` for the conflict rule: `path`, or the first
    level of it that `doc` lacks (creating a level changes its parent's key set)."""
    for i in range(len(path)):
        if get_path(doc, path[:i]) is MISSING:
            return path[:i]
    return path


def applies(doc: Value, path: Path) -> bool:
    """Can a write at `path` apply to `doc` (no scalar above it)?"""
    try:
        set_path(doc, path, 0)
    except InvalidValueError:
        return False
    return True


# --------------------------------------------------------------------------- stores


def _run_requests(session_id: str, runs: list[Any]) -> list[CommitRequest]:
    """The requests of a replica's run log (`StoreBase.submit_runs`), in order."""
    return [run_request(session_id, runs, i) for i in range(0, len(runs), RUN_WIDTH)]


@attrs.define
class StoreSetup:
    """The store objects of one run: `stores[0]` serves replica A, `stores[-1]` replica B."""

    stores: list[StoreBase]
    poll: Callable[[], None] = lambda: None
    """Deliver commits made through another store object (a no-op for one object)."""
    cleanup: Callable[[], None] = lambda: None

    def flush(self) -> None:
        """Wait until every submitted commit has its verdict (and fan-out) posted.

        A store that evaluates on a writer thread would otherwise decide, by thread
        timing, whether a `pump` finds a verdict: runs would not replay, and shrinking
        would report the failure as flaky.
        """
        for store in self.stores:
            flush = getattr(store, "flush", None)
            if flush is not None:
                assert flush(30.0), f"{store!r} did not answer its queued commits"


def _floor(store: MemoryStore, key: DocKey) -> int:
    """The newest seq of `key` whose revision `store` pruned (0: none)."""
    if key in store._revisions:
        return store._floors.get(key, 0)
    head = store._heads.get(key)
    return 0 if head is None else head.seq


def memory_stores() -> StoreSetup:
    store = MemoryStore()
    return StoreSetup([store], cleanup=store.close)


def _sqlite_stores(objects: int) -> StoreSetup:
    directory = tempfile.mkdtemp(prefix="cellweave-conformance-")
    path = os.path.join(directory, "store.sqlite")
    stores: list[StoreBase] = []
    try:
        for _ in range(objects):
            stores.append(SQLiteStore(path, poll_interval=0))
    except BaseException:
        for store in stores:
            store.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise

    def poll() -> None:
        for store in stores:
            store.poll()  # type: ignore[attr-defined]

    def cleanup() -> None:
        try:
            for store in stores:
                store.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    return StoreSetup(stores, poll=poll if objects > 1 else lambda: None, cleanup=cleanup)


def sqlite_store() -> StoreSetup:
    """One SQLiteStore object; both replicas are in-process sessions of it."""
    return _sqlite_stores(1)


def sqlite_store_pair() -> StoreSetup:
    """Two SQLiteStore objects on one file; changes cross between them only by `poll()`."""
    return _sqlite_stores(2)


_cluster: list[Cluster] = []


def _postgres_dsn() -> str:
    """The throwaway server shared by every PostgresStore example (started on first use)."""
    if not _cluster:
        server = Cluster()
        _cluster.append(server)
        atexit.register(server.stop)
    return _cluster[0].dsn


def _postgres_stores(objects: int) -> StoreSetup:
    dsn = _postgres_dsn()
    schema = f"conformance_{uuid.uuid4().hex}"
    stores: list[PostgresStore] = []

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    try:
        for _ in range(objects):
            stores.append(PostgresStore(dsn, schema=schema, poll_interval=0))
    except BaseException:
        for store in stores:
            store.close()
        drop()
        raise

    def poll() -> None:
        for store in stores:
            store.poll()

    def cleanup() -> None:
        try:
            for store in stores:
                store.close()
        finally:
            drop()

    return StoreSetup([*stores], poll=poll if objects > 1 else lambda: None, cleanup=cleanup)


def postgres_store() -> StoreSetup:
    """One PostgresStore object; both replicas are in-process sessions of it."""
    return _postgres_stores(1)


def postgres_store_pair() -> StoreSetup:
    """Two PostgresStore objects on one schema; changes cross between them only by `poll()`."""
    return _postgres_stores(2)


# --------------------------------------------------------------------------- model records


@attrs.define(eq=False, repr=False)
class TxRecord:
    """What the test knows about one transaction (the Bundle value rules pass around)."""

    replica: int
    tx: Transaction
    shadow: dict[DocKey, Value] = attrs.Factory(dict)
    """Expected working copy per accessed document (P-TX-1)."""
    first_seen: dict[DocKey, int] = attrs.Factory(dict)
    """Length of the replica's notification log when the document was first accessed."""
    read_keys: set[DocKey] = attrs.Factory(set)
    written_keys: set[DocKey] = attrs.Factory(set)
    written_paths: list[tuple[DocKey, Path]] = attrs.Factory(list)
    coherent_reads: list[tuple[DocKey, Path, bool, Value]] = attrs.Factory(list)
    """Reads (key, path, shallow, value) of documents not yet written by this transaction."""
    create_only: set[DocKey] = attrs.Factory(set)
    settled: list[CommitResult] = attrs.Factory(list)
    effects: int = 0
    request: CommitRequest | None = None
    pending: Pending[CommitResult] | None = None
    gate_outcome: Outcome | None = None
    seq_at_settle: int = 0
    """The store's seq when the verdict arrived: the store decided against at most this."""

    def __repr__(self) -> str:
        return f"<tx on {'AB'[self.replica]} {self.tx.status}>"

    def on_settle(self, tx: Transaction, result: CommitResult) -> None:
        assert tx is self.tx
        self.settled.append(result)
        self.seq_at_settle = tx.replica.store.seq  # type: ignore[attr-defined]

    def on_effect(self) -> None:
        self.effects += 1

    @property
    def accepted_seq(self) -> int | None:
        if len(self.settled) == 1 and self.settled[0].ok:
            return self.settled[0].seq
        return None


# --------------------------------------------------------------------------- the machine


class StoreConformanceMachine(RuleBasedStateMachine):
    """Two replicas on one store (see the module docstring for what is checked)."""

    make_stores: ClassVar[Callable[[], StoreSetup]]

    txs = Bundle("txs")

    def __init__(self) -> None:
        super().__init__()
        self.setup = type(self).make_stores()
        self.submitted: list[CommitRequest] = []
        for store in self.setup.stores:
            self._spy_on_submit(store)
        self.replicas = [
            Replica(self.setup.stores[0], session_id="A"),
            Replica(self.setup.stores[-1], session_id="B"),
        ]
        self.identities = [Identity("conformance", "A"), Identity("conformance", "B")]
        self.logs: list[list[Notification]] = [[], []]
        self.replayed: list[dict[DocKey, Value]] = [{}, {}]
        self.violations: list[str] = []
        for i, replica in enumerate(self.replicas):
            for key in KEYS:
                # Loads every document now, so each one later moves only by notifications.
                self.replayed[i][key] = replica.visible(key)
                assert replica.is_loaded(key), f"{key} did not load synchronously"
            replica.subscribe(functools.partial(self._on_notification, i))
        self.records: list[TxRecord] = []
        self.by_request: dict[tuple[str, int], TxRecord] = {}
        self.by_tx: dict[int, TxRecord] = {}
        self.gates: list[VerdictGate] = []
        self.load_gates: list[LoadGate] = []
        self.syncs: list[Pending[None]] = []
        self.committing: TxRecord | None = None
        self.reordered = False
        self.sent_since_settle = 0

    def _spy_on_submit(self, store: StoreBase) -> None:
        submit = store.submit

        def recording_submit(listener: Any, request: CommitRequest) -> None:
            self.submitted.append(request)
            submit(listener, request)

        store.submit = recording_submit  # type: ignore[method-assign]
        submit_batch = store.submit_batch

        def recording_submit_batch(listener: Any, requests: Sequence[CommitRequest]) -> None:
            self.submitted.extend(requests)
            submit_batch(listener, requests)

        store.submit_batch = recording_submit_batch  # type: ignore[method-assign]
        submit_runs = store.submit_runs

        def recording_submit_runs(listener: Any, session_id: str, runs: list[Any]) -> bool:
            # A run log the store takes is sent as these requests (one it declines
            # reaches `submit` / `submit_batch` as requests, recorded there).
            taken = submit_runs(listener, session_id, runs)
            if taken:
                self.submitted.extend(_run_requests(session_id, runs))
            return taken

        store.submit_runs = recording_submit_runs  # type: ignore[method-assign]
        commit_entry = store.commit_entry

        def recording_commit_entry(listener: Any, session_id: str, entry: tuple[Any, ...]) -> bool:
            # A commit of its own the store takes as a run log entry is sent as its
            # request (one it declines reaches `submit` as a request, recorded there).
            taken = commit_entry(listener, session_id, entry)
            if taken:
                self.submitted.append(run_request(session_id, entry, 0))
            return taken

        store.commit_entry = recording_commit_entry  # type: ignore[method-assign]

    def _held_back(self, i: int) -> list[CommitRequest]:
        """Requests replica `i` made in its open batch and has not sent yet."""
        r = self.replicas[i]
        return list(r._batch or ()) + _run_requests(r.session_id, r._runs or [])

    def teardown(self) -> None:
        try:
            # Only a run that got here cleanly is driven to quiescence and checked: after a
            # failed step the state is already known bad, and a second error would only
            # hide the first one.
            if sys.exc_info()[1] is None:
                for rec in self.records:
                    if rec.tx.is_open:
                        rec.tx.abort("end of run")
                self._quiesce()
                self._check_quiescent()
        finally:
            # Every transaction settles, also after a failed step: one dropped with
            # staged writes would warn (and fail the run under warnings-as-errors).
            for rec in self.records:
                if rec.tx.is_open:
                    rec.tx.abort("end of run")
            for gate in self.gates:
                if gate.active:
                    gate.release()
            for load_gate in self.load_gates:
                if load_gate.active:
                    load_gate.release()
            for replica in self.replicas:
                replica.close()
            self.setup.cleanup()

    # ------------------------------------------------------------------ observation
    def _on_notification(self, i: int, nf: Notification) -> None:
        self.logs[i].append(nf)
        where = f"replica {'AB'[i]}, {nf.kind} notification #{len(self.logs[i])}"
        if nf.kind == "commit":
            if self.committing is None or nf.source is not self.committing.tx:
                self.violations.append(f"{where}: not emitted by the committing transaction")
        elif nf.kind == "revert":
            rec = self.by_tx.get(id(nf.source))
            if rec is None or nf.reason is None:
                self.violations.append(f"{where}: a revert names no transaction or no reason")
            elif rec.settled:
                self.violations.append(f"{where}: the revert came after its transaction settled")
        for ch in nf.changes:
            before = self.replayed[i].get(ch.key, MISSING)
            if not same(before, ch.before):
                self.violations.append(
                    f"{where}: {ch.key} before={ch.before!r}, but the replay holds {before!r}"
                )
            if same(ch.before, ch.after):
                self.violations.append(f"{where}: {ch.key} did not change ({ch.after!r})")
            self.replayed[i][ch.key] = ch.after

    def _changed_since(self, rec: TxRecord, key: DocKey) -> bool:
        log = self.logs[rec.replica]
        return any(ch.key == key for nf in log[rec.first_seen[key] :] for ch in nf.changes)

    # ------------------------------------------------------------------ transactions
    def _open(self, replica: int) -> TxRecord:
        tx = self.replicas[replica].edit(self.identities[replica])
        rec = TxRecord(replica, tx)
        tx.add_settle_callback(rec.on_settle)
        tx.post_commit(rec.on_effect)
        self.records.append(rec)
        self.by_tx[id(tx)] = rec
        return rec

    def _access(self, rec: TxRecord, key: DocKey) -> None:
        if key not in rec.shadow:
            rec.shadow[key] = self.replicas[rec.replica].visible(key)
            rec.first_seen[key] = len(self.logs[rec.replica])

    def _read(self, rec: TxRecord, key: DocKey, path: Path, shallow: bool = False) -> None:
        self._access(rec, key)
        got = rec.tx.read(key, path, shallow=shallow)
        expected = get_path(rec.shadow[key], path)
        assert same(expected, got), f"read-your-writes: read {key} at {path} -> {got!r}"
        rec.read_keys.add(key)
        if key not in rec.written_keys:
            rec.coherent_reads.append((key, path, shallow, got))

    def _write(self, rec: TxRecord, key: DocKey, path: Path, value: Value) -> None:
        self._access(rec, key)
        try:
            expected = set_path(rec.shadow[key], path, value)
        except InvalidValueError:
            # The path runs through a scalar: the transaction must refuse it too.
            with pytest.raises(InvalidValueError):
                rec.tx.write(key, path, value)
            return
        rec.tx.write(key, path, value)
        rec.shadow[key] = expected
        rec.written_keys.add(key)
        rec.written_paths.append((key, path))

    def _commit(self, rec: TxRecord) -> None:
        i = rec.replica
        replica = self.replicas[i]
        log = self.logs[i]
        stale = sorted(
            (k for k in rec.read_keys if self._changed_since(rec, k)), key=lambda k: k.id
        )
        untouched = {k for k in rec.shadow if not self._changed_since(rec, k)}
        visible_before = {k: replica.visible(k) for k in KEYS}
        # Writes equal to the visible value are still sent while the document has
        # pending local layers, as shadow writes that change nothing now: they must
        # survive if a layer fails, and come after the layers in the durable order.
        shadow_ok = {k for k in rec.written_keys if replica._docs[k].layers}
        n_log, n_sent = len(log), len(self.submitted)
        n_held = len(self._held_back(i))
        self.committing = rec
        try:
            rec.pending = pending = rec.tx.commit()
        finally:
            self.committing = None
        emitted = log[n_log:]
        # Inside a batch a request is held back until the batch ends: it counts as sent.
        sent = self.submitted[n_sent:] + self._held_back(i)[n_held:]
        if stale:
            # P-TX-2: a local basis failure is decided at once and reaches nobody else.
            self._assert_refused_locally(pending, emitted, sent, f"stale basis on {stale}")
            return
        if pending.done() and not pending.result().ok:
            # A blind write to a document that moved since this transaction first saw it
            # may no longer apply (a scalar arrived above it): refused like a stale basis.
            blocked = [
                (str(k), p)
                for k, p in rec.written_paths
                if k not in untouched and not applies(visible_before[k], p)
            ]
            assert blocked, f"refused locally without cause: {pending.result()}"
            self._assert_refused_locally(pending, emitted, sent, f"writes {blocked}")
            event("a blind write was refused locally")
            return
        for key, path in rec.written_paths:
            # Blind writes merge: every written place shows what the transaction wrote
            # there; with nothing moved underneath, the whole document is its working copy.
            shown = get_path(replica.visible(key), path)
            assert same(get_path(rec.shadow[key], path), shown), (
                f"after commit {key} at {path} is {shown!r};"
                f" wrote {get_path(rec.shadow[key], path)!r}"
            )
            if key in untouched:
                assert same(rec.shadow[key], replica.visible(key)), (
                    f"after commit {key} is {replica.visible(key)!r}, wrote {rec.shadow[key]!r}"
                )
        moved = {k for k in KEYS if not same(visible_before[k], replica.visible(k))}
        assert moved <= rec.written_keys, f"commit changed documents it did not write: {moved}"
        if not sent:
            # P-TX-3: elided. Only a commit that changes nothing and marks nothing may be.
            assert not moved and not rec.create_only, f"commit writing {moved} was not sent"
            event("commit elided")
            assert pending.done() and pending.result() == CommitResult(Outcome.OK), pending
            assert emitted == [], f"elided commit notified: {emitted}"
            return
        assert len(sent) == 1, sent
        (request,) = sent
        shadowed = request.keys - moved
        assert moved or shadowed or rec.create_only, f"a commit changing nothing went: {request}"
        assert shadowed <= shadow_ok, f"shadow writes to {shadowed}, allowed only {shadow_ok}"
        if shadowed:
            event("shadow writes sent (equal to a pending value)")
        assert not pending.done(), "a verdict arrived inside commit()"
        assert request.session_id == replica.session_id
        assert request.create_only == frozenset(rec.create_only)
        assert moved <= request.keys, f"sent writes to {request.keys}; visible moved {moved}"
        changed = [ch.key for nf in emitted for ch in nf.changes]
        assert [nf.kind for nf in emitted] == (["commit"] if moved else []), emitted
        assert sorted(changed, key=str) == sorted(moved, key=str), emitted
        rec.request = request
        self.by_request[(request.session_id, request.local_seq)] = rec
        self.sent_since_settle += 1

    @staticmethod
    def _assert_refused_locally(
        pending: Pending[CommitResult],
        emitted: list[Notification],
        sent: list[CommitRequest],
        why: str,
    ) -> None:
        assert pending.done(), f"commit refused locally ({why}) is still pending"
        result = pending.result()
        assert result.outcome is Outcome.STALE_BASIS, (why, result)
        assert isinstance(result.error, InconsistentBasisError), (why, result)
        assert emitted == [], f"commit refused locally ({why}) notified: {emitted}"
        assert sent == [], f"commit refused locally ({why}) reached the store: {sent}"

    def _open_count(self) -> int:
        return sum(1 for rec in self.records if rec.tx.is_open)

    @precondition(lambda self: self._open_count() < MAX_OPEN)
    @rule(target=txs, replica=replicas, first_read=st.none() | keys)
    def open_tx(self, replica: int, first_read: DocKey | None) -> TxRecord:
        # Reading at once makes a basis that later steps can invalidate (P-TX-2).
        rec = self._open(replica)
        if first_read is not None:
            self._read(rec, first_read, ())
        return rec

    @rule(rec=txs, key=st.none() | keys, path=paths, shallow=st.booleans())
    def read(self, rec: TxRecord, key: DocKey | None, path: Path, shallow: bool) -> None:
        """Read `key`, or (None) the document the transaction wrote last.

        P-TX-1 needs writes read back, which a random key seldom does.
        """
        if key is None:
            written = [k for k, _ in rec.written_paths] or list(rec.shadow) or [KEYS[0]]
            key = written[-1]
        self._read(rec, key, path, shallow)

    @rule(rec=txs, key=keys, path=paths, value=values)
    def write(self, rec: TxRecord, key: DocKey, path: Path, value: Value) -> None:
        self._write(rec, key, path, value)

    @rule(rec=consumes(txs))
    def commit(self, rec: TxRecord) -> None:
        self._commit(rec)

    @rule(rec=consumes(txs))
    def abort(self, rec: TxRecord) -> None:
        n_log, n_sent = len(self.logs[rec.replica]), len(self.submitted)
        n_held = len(self._held_back(rec.replica))
        rec.tx.abort("test")
        assert [r.outcome for r in rec.settled] == [Outcome.ABORTED]
        assert rec.tx.done().done()
        assert len(self.logs[rec.replica]) == n_log and len(self.submitted) == n_sent
        assert len(self._held_back(rec.replica)) == n_held

    @rule(replica=replicas, key=keys, path=paths, value=values, kind=quick_kinds)
    def quick_commit(self, replica: int, key: DocKey, path: Path, value: Value, kind: str) -> None:
        """A whole transaction in one step: what the other replica does meanwhile.

        `kind`: "blind" only writes; "read" reads the document first (so the store checks
        its basis), "shallow" reads only its key set; "create" marks the document
        create-only (P-PRE-1 races).
        """
        rec = self._open(replica)
        if kind in ("read", "shallow"):
            self._read(rec, key, (), shallow=kind == "shallow")
        elif kind == "create":
            rec.tx.create_only(key)
            rec.create_only.add(key)
        self._write(rec, key, path, value)
        self._commit(rec)

    @rule(
        replica=replicas,
        docs=st.permutations(KEYS),
        two=st.booleans(),
        field=st.sampled_from(["a", "b"]),
        value=leaves,
    )
    def node_commit(
        self, replica: int, docs: list[DocKey], two: bool, field: str, value: Value
    ) -> None:
        """A node run's commit in one step: one document (or two) read at one field, one
        field of another written. In an open batch these are a run log's one- and
        two-read entries (`submit_runs`), which the random reads and writes above
        seldom make."""
        *inputs, out = docs
        rec = self._open(replica)
        for key in inputs if two else inputs[:1]:
            self._read(rec, key, (field,))
        self._write(rec, out, (field,), value)
        self._commit(rec)

    # ------------------------------------------------------------------ verdict gate
    def _held(self) -> list[Held]:
        return [(g, i, h) for g in self.gates for i, h in enumerate(g.held())]

    def _session_heads(self) -> tuple[list[Held], list[Held]]:
        """Held commits split into the oldest of each session and the others."""
        heads: list[Held] = []
        rest: list[Held] = []
        seen: set[str] = set()
        for entry in self._held():
            sid = entry[2].request.session_id
            (rest if sid in seen else heads).append(entry)
            seen.add(sid)
        return heads, rest

    @rule()
    def toggle_verdict_hold(self) -> None:
        """Start holding every verdict (`store.testing.hold_verdicts()`), or release them all."""
        if self.gates:
            gates, self.gates = self.gates, []
            for gate in gates:
                gate.release()
        else:
            self.gates = [store.testing.hold_verdicts() for store in self.setup.stores]

    @precondition(lambda self: any(g.waiting() for g in self.gates))
    @rule(pick=picks)
    def accept(self, pick: int) -> None:
        """Let the store evaluate a held commit, normally the oldest of its session.

        `pick == OUT_OF_ORDER` takes a younger one instead, which only a test gate can do
        (a real store sees each session's commits in order).
        """
        heads, rest = self._session_heads()
        if pick == OUT_OF_ORDER and rest:
            gate, i, _held = rest[0]
            self.reordered = True
            event("a session's commits were evaluated out of order")
        else:
            gate, i, _held = heads[pick % len(heads)]
        gate.accept(i)

    @precondition(lambda self: any(g.waiting() for g in self.gates))
    @rule(pick=picks, outcome=rejections)
    def reject(self, pick: int, outcome: Outcome) -> None:
        held = self._held()
        gate, i, entry = held[pick % len(held)]
        rec = self.by_request[(entry.request.session_id, entry.request.local_seq)]
        rec.gate_outcome = outcome
        gate.reject(i, outcome)

    # ------------------------------------------------------------------ loads
    @rule(replica=replicas, key=keys)
    def sync(self, replica: int, key: DocKey) -> None:
        """Catch a document up from the store (a `load` notification if it moved)."""
        self.syncs.append(self.replicas[replica].sync([key]))

    @rule(key=keys, fail=st.booleans())
    def toggle_load_hold(self, key: DocKey, fail: bool) -> None:
        """Hold loads of `key`; or, while loads are held, let them through or fail them."""
        if not self.load_gates:
            self.load_gates = [store.testing.hold_loads(key) for store in self.setup.stores]
            return
        gates, self.load_gates = self.load_gates, []
        for gate in gates:
            if fail:
                gate.fail()  # the waiting syncs fail as LIVENESS
            else:
                gate.release()  # the waiting loads read the store now

    @rule(replica=replicas)
    def toggle_batch(self, replica: int) -> None:
        """Open a commit batch on a replica, or end it (sending what it held back)."""
        r = self.replicas[replica]
        if r._batch_depth:
            r.end_batch()
            event("a commit batch ended")
        else:
            r.begin_batch()

    @rule(replica=replicas)
    def pack(self, replica: int) -> None:
        """Pack the replica's idle documents (`Replica.pack`, as a serving runtime does at
        each heartbeat; nothing while one of its transactions is open): the steps after
        meet them packed (the invariant reads them without decoding them in place)."""
        if self.replicas[replica].pack():
            event("documents packed")

    # ------------------------------------------------------------------ delivery
    @rule()
    def idle(self) -> None:
        """Nothing happens.

        Hypothesis favours the first rule in its order (no target, fewest arguments, then
        name): this one. Without it that was `settle` or a pump, which then ran on a
        fifth of all steps and ended most races before they could matter.
        """

    @rule(replica=replicas)
    def pump(self, replica: int) -> None:
        self.replicas[replica].pump()

    # Every settle ends the races the steps before it set up: not too often.
    @precondition(lambda self: self.sent_since_settle >= SETTLE_AFTER)
    @rule()
    def settle(self) -> None:
        self._quiesce()
        self._check_quiescent()

    def _quiesce(self, timeout: float = 10.0) -> None:
        self.sent_since_settle = 0
        for replica in self.replicas:
            if replica._batch_depth:
                replica.end_batch()
        gates, self.gates = self.gates, []
        for gate in gates:
            gate.release()
        load_gates, self.load_gates = self.load_gates, []
        for load_gate in load_gates:
            load_gate.release()
        deadline = time.monotonic() + timeout
        while True:
            self.setup.flush()
            self.setup.poll()
            moved = sum(replica.pump() for replica in self.replicas)
            if moved:
                continue
            if all(rec.pending is None or rec.pending.done() for rec in self.records) and all(
                sync.done() for sync in self.syncs
            ):
                return
            assert time.monotonic() < deadline, "commits still pending after the store settled"
            # An asynchronous store answers from another thread: wait for its post.
            self.replicas[0].mailbox.wait_for_items(0.005)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def check_every_step(self) -> None:
        # One invariant, so a shrunk example prints one line between its steps.
        self.setup.flush()
        for store in self.setup.stores:
            store._check()
        for replica in self.replicas:
            replica._check()
        for rec in self.records:
            rec.tx._check()
        self._check_replay()
        self._check_settled()
        self._check_history_kept()

    def _check_history_kept(self) -> None:
        """Low-water marks (`MemoryStore`): every read basis an open transaction or a held
        commit may still send is at or above its document's floor, so pruning never
        decides a commit (a run writes a document far fewer times than the cap)."""
        for store in self.setup.stores:
            if not isinstance(store, MemoryStore):
                continue
            bases: list[tuple[DocKey, int]] = [
                (key, td.basis_seq)
                for rec in self.records
                if rec.tx.is_open
                for key, td in rec.tx.documents().items()
                if td.read
            ]
            gate = store._verdict_gate
            for held in gate.held() if gate is not None else ():
                bases += [(claim.key, claim.basis_seq) for claim in held.request.reads]
            for i in range(len(self.replicas)):
                bases += [(c.key, c.basis_seq) for r in self._held_back(i) for c in r.reads]
            for key, basis in bases:
                floor = _floor(store, key)
                assert basis >= floor, f"{key}: basis {basis} below the pruned floor {floor}"

    def _check_replay(self) -> None:
        assert self.violations == [], self.violations
        for i, replica in enumerate(self.replicas):
            for key in KEYS:
                rec = replica._docs.get(key)
                if rec is not None and type(rec.visible) is bytes:
                    # Packed (`pack`): decoded here without unpacking it in place, so
                    # the next steps still meet it packed.
                    visible = unpack_value(rec.visible)
                else:
                    visible = replica.visible(key)
                assert same(self.replayed[i][key], visible), (
                    f"replica {'AB'[i]}: notifications replay {key} to"
                    f" {self.replayed[i][key]!r}, but it shows {visible!r}"
                )

    def _check_settled(self) -> None:
        winners: dict[DocKey, int] = {}
        for rec in self.records:
            assert len(rec.settled) <= 1, f"{rec} settled {len(rec.settled)} times"
            if not rec.settled:
                assert rec.tx.status in ("open", "committing"), rec
                continue
            (result,) = rec.settled
            assert rec.tx.result is result
            if rec.gate_outcome is not None:
                assert result.outcome is rec.gate_outcome, (rec.gate_outcome, result)
            if result.ok and rec.request is not None:
                for key in rec.create_only:
                    winners[key] = winners.get(key, 0) + 1
        assert all(n <= 1 for n in winners.values()), f"create-only winners: {winners}"

    def _check_quiescent(self) -> None:
        accepted = self._check_all_settled()
        history, changed = self._fold_model(accepted)
        self._check_rejection_causes(history, changed)
        self._check_dependencies()
        self._check_converged(history[-1])
        if not any(rec.tx.is_open for rec in self.records):
            # Nothing open, nothing in flight, everything delivered: no session needs any
            # history, and a store that prunes by low-water marks keeps none.
            for store in self.setup.stores:
                if isinstance(store, MemoryStore):
                    store.prune_history()
                    assert store._revisions == {} and store._floors == {}, store._revisions

    def _check_all_settled(self) -> dict[int, TxRecord]:
        """P-CLS-2 / P-TX-4 / P-TX-5: every commit reached a verdict, exactly once."""
        accepted: dict[int, TxRecord] = {}
        for rec in self.records:
            if rec.tx.is_open:
                assert rec.settled == [] and rec.effects == 0
                continue
            assert rec.tx.done().done(), f"{rec} never settled"
            assert len(rec.settled) == 1, f"{rec} settled {len(rec.settled)} times"
            (result,) = rec.settled
            cause = type(result.error).__name__ if result.error else "-"
            where = "sent" if rec.request else "local"
            event(f"settled {result.outcome.name} ({where}, {cause})")
            assert rec.effects == (1 if result.ok else 0), (rec.effects, result)
            if rec.pending is not None:
                assert rec.pending.result() == result
            if result.ok and rec.request is not None:
                assert result.seq is not None, f"accepted without a seq: {result}"
                assert result.seq not in accepted, f"two commits got seq {result.seq}"
                accepted[result.seq] = rec
            elif result.ok:
                assert result.seq is None, result
        assert sorted(accepted) == list(range(1, len(accepted) + 1)), sorted(accepted)
        for sync in self.syncs:
            assert sync.done(), "a sync never answered"
            try:
                sync.result()
            except LivenessError:
                event("a sync failed (held load failed)")
        for i, log in enumerate(self.logs):
            if any(nf.kind == "load" and nf.changes for nf in log):
                event(f"a load moved replica {'AB'[i]}")
        return accepted

    def _fold_model(
        self, accepted: dict[int, TxRecord]
    ) -> tuple[list[dict[DocKey, Value]], dict[int, list[tuple[DocKey, Path]]]]:
        """The durable state after each seq, and the paths each seq changed.

        Checks each commit against the state before it.

        P-ENG-1: every read an accepted commit's basis check vouched for equals (or, for a
        shallow read, has the shape of) the durable value just before its seq.
        P-PRE-1: a create-only commit is the first accepted one to touch its document.
        """
        history: list[dict[DocKey, Value]] = [dict.fromkeys(KEYS, MISSING)]
        changed: dict[int, list[tuple[DocKey, Path]]] = {}
        touched: set[DocKey] = set()
        for seq in sorted(accepted):
            rec = accepted[seq]
            request = rec.request
            assert request is not None
            model = dict(history[-1])
            if not self.reordered:
                for key, path, shallow, seen in rec.coherent_reads:
                    now = get_path(model[key], path)
                    assert (same_shape if shallow else same)(now, seen), (
                        f"read coherence: seq {seq} read {key} at {path}"
                        f" ({'shallow' if shallow else 'deep'}) as {seen!r}; the durable"
                        f" value before it was {now!r}"
                    )
            for key in request.create_only:
                assert key not in touched, f"create-only {key} accepted again at seq {seq}"
                event("a create-only commit won")
            changed[seq] = []
            for w in request.writes:
                changed[seq].append((w.key, created_level(model[w.key], w.path)))
                model[w.key] = set_path(model[w.key], w.path, w.value)
            touched |= request.keys | request.create_only
            history.append(model)
        return history, changed

    def _check_rejection_causes(
        self,
        history: list[dict[DocKey, Value]],
        changed: dict[int, list[tuple[DocKey, Path]]],
    ) -> None:
        """No spurious rejection: each one the store made has a cause in the model.

        Conflict detection may over-approximate, but only along the documented rule: a
        commit accepted after the basis (and by the time the verdict arrived) changed a
        path overlapping a claimed read, or a write no longer applied. (Both stores also
        conflict on bases older than their pruned revision history: `MemoryStore`
        prunes what no session's low-water mark keeps, which `_check_history_kept`
        shows is never a basis still in use; every store caps it at `REVISIONS_KEPT`
        revisions per document, and a run here writes a document far fewer times.)
        """
        commits = [(seq, self._accepted_request(seq)) for seq in range(1, len(history))]
        for rec in self.by_request.values():
            request = rec.request
            assert request is not None
            (result,) = rec.settled
            if result.ok or rec.gate_outcome is not None:
                continue
            upto = rec.seq_at_settle
            before = [(seq, c) for seq, c in commits if seq <= upto]
            error = result.error
            if isinstance(error, ConflictError):
                if any(
                    not all(applies(state[w.key], w.path) for w in request.writes)
                    for state in history[: upto + 1]
                ):
                    event("a blind write no longer applied")
                    continue
                assert any(self._invalidates(c, seq, changed[seq], request) for seq, c in before), (
                    f"{request} was rejected ({error}) but nothing it read was overwritten"
                )
            elif isinstance(error, DependencyRejectedError):
                deps = [self.by_request[(request.session_id, d)] for d in request.deps]
                assert self.reordered or any(d.accepted_seq is None for d in deps), (
                    f"{request} was rejected ({error}) but every commit it was built on"
                    " was accepted"
                )
            elif isinstance(error, PreconditionFailedError):
                assert any(request.create_only & (c.keys | c.create_only) for _, c in before), (
                    f"{request} was rejected ({error}) but no accepted commit touched it"
                )
            else:
                raise AssertionError(f"{request}: unexpected rejection {error!r}")

    def _accepted_request(self, seq: int) -> CommitRequest:
        for rec in self.by_request.values():
            if rec.accepted_seq == seq:
                assert rec.request is not None
                return rec.request
        raise AssertionError(f"no commit was accepted with seq {seq}")

    @staticmethod
    def _invalidates(
        commit: CommitRequest,
        seq: int,
        paths: list[tuple[DocKey, Path]],
        request: CommitRequest,
    ) -> bool:
        if commit.session_id == request.session_id and commit.local_seq in request.deps:
            return False  # the request was built on it
        return any(
            key == claim.key and seq > claim.basis_seq and overlaps(path, claim.path, claim.shallow)
            for claim in request.reads
            for key, path in paths
        )

    def _check_dependencies(self) -> None:
        """P-CASC-1 (a commit built on a rejected layer is rejected) and P-ENG-3."""
        for rec in self.by_request.values():
            request = rec.request
            assert request is not None
            seq = rec.accepted_seq
            for dep in request.deps:
                dep_seq = self.by_request[(request.session_id, dep)].accepted_seq
                if seq is not None:
                    assert dep_seq is not None, f"seq {seq} was built on rejected #{dep}"
                    assert dep_seq < seq, f"seq {seq} was built on #{dep}, accepted at {dep_seq}"
        if not self.reordered:
            for replica in self.replicas:
                mine = sorted(
                    (rec.request.local_seq, rec.accepted_seq)
                    for rec in self.by_request.values()
                    if rec.request is not None
                    and rec.request.session_id == replica.session_id
                    and rec.accepted_seq is not None
                )
                seqs = [s for _, s in mine]
                assert seqs == sorted(seqs), f"{replica.session_id}: seqs out of order {mine}"

    def _check_converged(self, model: dict[DocKey, Value]) -> None:
        """P-ENG-2, P-REV-1/3: the store holds the fold, and both replicas show exactly it."""
        for store in self.setup.stores:
            for key in KEYS:
                durable = store.read_durable(key)
                assert same(model[key], durable), (
                    f"{type(store).__name__}: durable {key} is {durable!r}; the fold of"
                    f" accepted commits is {model[key]!r}"
                )
        for i, replica in enumerate(self.replicas):
            assert replica.in_flight() == 0
            for key in KEYS:
                assert same(model[key], replica.visible(key)), (
                    f"replica {'AB'[i]} shows {key} as {replica.visible(key)!r}; durable is"
                    f" {model[key]!r}"
                )


# --------------------------------------------------------------------------- one per backend


class MemoryStoreMachine(StoreConformanceMachine):
    make_stores = staticmethod(memory_stores)


class SQLiteStoreMachine(StoreConformanceMachine):
    make_stores = staticmethod(sqlite_store)


class SQLiteStorePairMachine(StoreConformanceMachine):
    make_stores = staticmethod(sqlite_store_pair)

    @rule()
    def poll(self) -> None:
        """Let each store object pick up the commits the other one wrote to the file."""
        self.setup.poll()


class PostgresStoreMachine(StoreConformanceMachine):
    make_stores = staticmethod(postgres_store)


class PostgresStorePairMachine(StoreConformanceMachine):
    make_stores = staticmethod(postgres_store_pair)

    @rule()
    def poll(self) -> None:
        """Let each store object pick up the commits the other one wrote to the schema."""
        self.setup.poll()


def _more_examples(test_case: Any, factor: int) -> None:
    """Run `factor` times the profile's examples (capped, so `nightly` stays as it is).

    The races this machine looks for take several specific steps in a row, and a step
    is cheap (about a millisecond on the memory store, a few on SQLite), so the profile's
    count, sized for the whole directory, finds them too rarely here.
    """
    base = test_case.settings.max_examples
    test_case.settings = settings(
        test_case.settings, max_examples=max(base, min(factor * base, 10_000))
    )


TestMemoryStore = MemoryStoreMachine.TestCase
TestSQLiteStore = SQLiteStoreMachine.TestCase
TestSQLiteStorePair = SQLiteStorePairMachine.TestCase
_more_examples(TestMemoryStore, 10)
_more_examples(TestSQLiteStore, 3)
_more_examples(TestSQLiteStorePair, 3)
TestPostgresStore = PostgresStoreMachine.TestCase
TestPostgresStorePair = PostgresStorePairMachine.TestCase

"""SQLiteStore's commit path (issue 20 item 4): a commit's rows are written with one
statement per table per power-of-two chunk, pruning is batched across documents, and
each verdict names the state every written document was applied on (`base_seqs`), so
the committing replica adopts its own layers instead of re-folding the documents.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Any

import msgspec
import pytest
from sqlite_support import Make, open_stores

import cells.stores.sqlite
from cells import DocKey, Replica, Space, SQLiteStore
from cells._pending import Mailbox
from cells._store import CommitRequest, DocState, ReadClaim, Verdict, Write
from cells._values import MISSING, Value
from cells.errors import ConflictError

WAIT = 20.0


@pytest.fixture
def db(tmp_path: FsPath) -> FsPath:
    return tmp_path / "cells.db"


@pytest.fixture
def stores() -> Iterator[Make]:
    with open_stores(synchronous="OFF") as make:  # the commit path, not durability
        yield make


class Verdicts:
    """A bare session listener that records the verdicts it is posted."""

    def __init__(self) -> None:
        self.mailbox = Mailbox()
        self.got: list[Verdict] = []

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
        self.got.append(verdict)

    def on_accepted(self, request: CommitRequest, seq: int, base_seq: int, value: Value) -> None:
        key = request.writes[0].key
        self.got.append(Verdict(seq, {key: value}, base_seqs={key: base_seq}))

    def on_accepted_many(
        self, request: CommitRequest, seq: int, values: list[Value], base_seqs: list[int]
    ) -> None:
        keys = [w.key for w in request.writes]
        assert len(set(keys)) == len(keys) == len(values) == len(base_seqs)
        self.got.append(
            Verdict(
                seq,
                dict(zip(keys, values, strict=True)),
                base_seqs=dict(zip(keys, base_seqs, strict=True)),
            )
        )

    def on_foreign(self, seq: int, docs: dict[DocKey, Value]) -> None:
        pass

    def low_water(self) -> int | None:
        return None

    def on_loaded(self, key: DocKey, state: DocState | None, error: BaseException | None) -> None:
        raise AssertionError("not used")

    def accept_runs(self, runs: list[Any], results: list[Any], start: int) -> None:
        raise AssertionError("not used: these tests submit no run log")

    def accept_entry(self, entry: tuple[Any, ...], seq: int, base_seq: int, value: Value) -> None:
        raise AssertionError("not used: these tests submit no run log entry")


def commit(store: SQLiteStore, listener: Verdicts, sid: str, n: int, *keys: DocKey) -> Verdict:
    writes = tuple(Write(key, ("value",), n) for key in keys)
    store.submit(listener, CommitRequest(sid, n, (), (), writes, frozenset()))
    assert store.flush(WAIT)
    listener.mailbox.drain()
    return listener.got[-1]


def key(name: str) -> DocKey:
    return DocKey("c", name)


def test_a_verdict_names_the_state_each_written_document_was_applied_on(
    stores: Make, db: FsPath
) -> None:
    store, other = stores(db), stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x, y, z = key("x"), key("y"), key("z")
    first = commit(store, listener, sid, 1, x)
    assert (1, {x: 0}) == (first.seq, first.base_seqs)  # never written: 0
    second = commit(store, listener, sid, 2, x, y)
    assert (2, {x: 1, y: 0}) == (second.seq, second.base_seqs)
    # Another writer's commit: the heads are read from the file, not remembered.
    assert Space(other, "c").cell("x").set(7).wait(WAIT).ok  # seq 3
    third = commit(store, listener, sid, 3, z, x, y)
    assert (4, {z: 0, x: 3, y: 2}) == (third.seq, third.base_seqs)
    assert {z: {"value": 3}, x: {"value": 3}, y: {"value": 3}} == third.docs


def test_an_accepted_commit_is_answered_without_a_verdict(stores: Make, db: FsPath) -> None:
    # One write as `MemoryStore` answers it: `on_accepted` (seq, base seq, value), so the
    # replica adopts its layer without `on_verdict`'s path; writes each to a different
    # document with `on_accepted_many` (values and base seqs in write order); anything
    # else (a rejection, a document written twice) gets its `Verdict`.
    store = stores(db)
    answers: list[tuple[str, int | None]] = []

    class Answers(Verdicts):
        def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
            answers.append(("verdict", verdict.seq))
            super().on_verdict(request, verdict)

        def on_accepted(
            self, request: CommitRequest, seq: int, base_seq: int, value: Value
        ) -> None:
            answers.append(("accepted", seq))
            assert (key("x"), {"value": 1}, 0) == (request.writes[0].key, value, base_seq)
            super().on_accepted(request, seq, base_seq, value)

        def on_accepted_many(
            self, request: CommitRequest, seq: int, values: list[Value], base_seqs: list[int]
        ) -> None:
            answers.append(("accepted many", seq))
            super().on_accepted_many(request, seq, values, base_seqs)

    listener = Answers()
    sid = store.connect(listener)
    commit(store, listener, sid, 1, key("x"))
    many = commit(store, listener, sid, 2, key("y"), key("x"))
    assert {key("y"): 0, key("x"): 1} == many.base_seqs
    assert {key("y"): {"value": 2}, key("x"): {"value": 2}} == many.docs
    stale = ReadClaim(key("y"), ("value",), False, 0)  # (y was written at seq 2)
    store.submit(
        listener,
        CommitRequest(sid, 3, (stale,), (), (Write(key("x"), ("value",), 3),), frozenset()),
    )
    assert store.flush(WAIT)
    listener.mailbox.drain()
    twice = (Write(key("x"), ("value",), 4), Write(key("x"), ("other",), 4))
    store.submit(listener, CommitRequest(sid, 4, (), (), twice, frozenset()))
    assert store.flush(WAIT)
    listener.mailbox.drain()
    assert {key("x"): {"value": 4, "other": 4}} == listener.got[-1].docs
    assert [
        ("accepted", 1),
        ("accepted many", 2),
        ("verdict", None),
        ("verdict", 3),  # (the rejection took no seq)
    ] == answers


def test_the_committing_replica_adopts_a_batch_verdict_without_refolding(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # With `base_seqs`, each written document's pending layer is adopted as the stored
    # value: nothing is folded or compared again (without them, every document was).
    space = Space(stores(db), "c")
    cells_ = [space.get_cell(f"doc-{i}") for i in range(5)]
    refreshed: list[DocKey] = []
    refresh = Replica._refresh

    def counting(self: Replica, key: DocKey, rec: Any, changes: list[Any]) -> None:
        refreshed.append(key)
        refresh(self, key, rec, changes)

    monkeypatch.setattr(Replica, "_refresh", counting)
    for n in range(3):
        tx = space.edit()
        for cell in cells_:
            cell.with_tx(tx).set(n)
        assert tx.commit().wait(WAIT).ok
    assert [] == refreshed
    for cell in cells_:
        rec = space.replica._docs[cell.doc_key]
        assert ((), {"value": 2}) == (rec.layers, rec.visible)
        assert rec.confirmed is rec.visible


@pytest.mark.parametrize("order", ["created", "reversed"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 128, 129, 300])
def test_a_commit_of_any_size_writes_every_document_and_its_history(
    stores: Make, db: FsPath, size: int, order: str
) -> None:
    # Sizes that are, and are not, a power of two, and larger than one statement takes
    # (128 rows): 300 = 128 + 128 + 32 + 8 + 4. Later commits write the documents in
    # the order they were created (their numbers ascending) or reversed.
    store = stores(db)
    space = Space(store, "c")
    cells_ = [space.get_cell(f"doc-{i}") for i in range(size)]
    for n in range(3):
        tx = space.edit()
        written = list(enumerate(cells_))
        for i, cell in written if n == 0 or order == "created" else written[::-1]:
            tx.write(cell.doc_key, ("value",), n * 1000 + i)
        assert tx.commit().wait(WAIT).ok
    assert [2000 + i for i in range(size)] == [
        store.read_durable(c.doc_key)["value"] for c in cells_
    ]
    conn = sqlite3.connect(db)
    try:
        per_seq = conn.execute(
            "SELECT l.seq, l.live, COUNT(*), COUNT(DISTINCT json_extract(e.value, '$[0]')),"
            " MIN(json_extract(e.value, '$[1]')), MAX(json_extract(e.value, '$[1]'))"
            " FROM log l, (SELECT seq, entries FROM log UNION ALL SELECT seq, entries"
            " FROM log_part) x, json_each(x.entries) e WHERE x.seq = l.seq"
            " GROUP BY l.seq ORDER BY l.seq"
        ).fetchall()
        sizes = conn.execute(
            "SELECT seq, json_array_length(entries) FROM log UNION ALL SELECT seq,"
            " json_array_length(entries) FROM log_part ORDER BY 1, 2 DESC"
        ).fetchall()
    finally:
        conn.close()
    # One log row per commit, with an entry per document (each naming the commit
    # before it: the document's previous revision); past 128 documents, the rest in
    # parts of at most 128 (the log row counting every part's entries live).
    assert [
        (1, size, size, size, 0, 0),
        (2, size, size, size, 1, 1),
        (3, size, size, size, 2, 2),
    ] == per_seq
    split = [min(128, size - start) for start in range(0, size, 128)]
    assert [(seq, n) for seq in (1, 2, 3) for n in split] == sizes
    store._check()


def test_documents_due_together_are_pruned_together(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # (`monkeypatch` first: its undoing comes after the stores' closing checks.)
    # A small window, so a few commits prune; more documents than one statement takes
    # (walked and deleted in chunks), and some written more often than the rest, so
    # documents with different floors are pruned by the same commit.
    kept = 2
    monkeypatch.setattr(cells.stores.sqlite, "REVISIONS_KEPT", kept)
    store = stores(db)
    space = Space(store, "c")
    every = [space.get_cell(f"doc-{i}").doc_key for i in range(140)]
    often = every[:10]
    for n in range(4 * kept + 3):
        tx = space.edit()
        for doc in every if n % 2 == 0 else often:
            tx.write(doc, ("value",), n)
        assert tx.commit().wait(WAIT).ok
        store._check()  # counts, floors, next floors and chains after every commit
    conn = sqlite3.connect(db)
    try:
        counts = dict(conn.execute("SELECT doc, revisions FROM head").fetchall())
        floors = conn.execute("SELECT COUNT(*) FROM head WHERE floor IS NOT NULL").fetchone()[0]
    finally:
        conn.close()
    assert all(kept <= c <= 2 * kept for c in counts.values()), counts
    assert len(every) == floors
    last = 4 * kept + 2
    assert [last] * len(every) == [store.read_durable(k)["value"] for k in every]


@pytest.mark.parametrize("layout", ["together", "together, half forgotten", "round robin"])
def test_pruning_scans_a_dense_stretch_of_rows_and_walks_a_sparse_one(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath, layout: str
) -> None:
    # Documents written by the same commits have their oldest revisions in the same
    # log rows: pruning reads that stretch of rows in one statement. A document whose
    # oldest revisions are spread among others' (three written in turn: two thirds of
    # the stretch are the others') is walked back entry by entry instead. Either way
    # every invariant holds after each commit, each document keeps its window, and the
    # rows whose entries were all pruned are gone. The scan counts the documents of the
    # rows this writer committed as it remembers them (`_written`), decoding no entries;
    # a row it does not remember (every other commit's, forgotten here, as a row another
    # writer committed is never known) is decoded.
    together = layout.startswith("together")
    kept = 2
    monkeypatch.setattr(cells.stores.sqlite, "REVISIONS_KEPT", kept)
    store = stores(db)
    space = Space(store, "c")
    docs = [space.get_cell(f"doc-{i}").doc_key for i in range(20 if together else 3)]
    assert store._wconn is not None
    heard: list[str] = []
    store._wconn.set_trace_callback(heard.append)
    decode = cells.stores.sqlite._decode_stubs
    decoded: list[int] = []

    def counting(text: str) -> Any:
        out = decode(text)
        decoded.append(len(out))
        return out

    commits = 6 * kept + 3 if together else 3 * (6 * kept + 3)
    for n in range(commits):
        tx = space.edit()
        for doc in docs if together else [docs[n % 3]]:
            tx.write(doc, ("value",), n)
        monkeypatch.setattr(cells.stores.sqlite, "_decode_stubs", counting)
        assert tx.commit().wait(WAIT).ok
        monkeypatch.setattr(cells.stores.sqlite, "_decode_stubs", decode)
        store._check()  # counts, floors, next floors and chains after every commit
        if layout == "together, half forgotten" and n % 2:
            del store._written[next(reversed(store._written))]  # (this commit's row)
    store._wconn.set_trace_callback(None)
    scans = [s for s in heard if s.startswith("SELECT seq, live, entries FROM log WHERE")]
    walks = [s for s in heard if s.startswith("SELECT live, entries FROM log WHERE seq =")]
    if layout == "together":
        assert (4, 0, []) == (len(scans), len(walks), decoded)  # (at commits 5, 8, 11, 14)
    elif together:
        # (Each scan of 3 rows: 1 or 2 of them forgotten, decoded.)
        assert (4, 0) == (len(scans), len(walks))
        assert 4 <= len(decoded) <= 8 and set(decoded) == {len(docs)}
    else:
        assert 0 == len(scans) and len(walks) >= 3 * 3
    conn = sqlite3.connect(db)
    try:
        counts = conn.execute("SELECT revisions FROM head").fetchall()
        left = conn.execute("SELECT COUNT(*) FROM log").fetchone()[0]
    finally:
        conn.close()
    assert all(kept <= c <= 2 * kept for (c,) in counts), counts
    assert left <= 2 * kept * (1 if together else 3) + 1
    last = [commits - 1] * len(docs) if together else [commits - 3, commits - 2, commits - 1]
    assert last == [store.read_durable(k)["value"] for k in docs]


def test_the_writer_remembers_the_documents_of_its_newest_log_rows_within_a_cap(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # `_written` (what the usual pruning counts instead of reading log rows) holds the
    # documents of each row of at least `_WRITTEN_FROM` entries this writer committed,
    # the newest kept: at most `_WRITTEN_KEPT` entries and rows, the oldest quarter
    # dropped at once past it. Consecutive commits of the same documents share one
    # list; each list is what the row says.
    monkeypatch.setattr(cells.stores.sqlite, "_WRITTEN_KEPT", 40)
    monkeypatch.setattr(cells.stores.sqlite, "_WRITTEN_FROM", 2)
    monkeypatch.setattr(cells.stores.sqlite, "REVISIONS_KEPT", 2)
    store = stores(db)
    space = Space(store, "c")
    docs = [space.get_cell(f"doc-{i}").doc_key for i in range(4)]
    for n in range(30):
        tx = space.edit()
        for doc in docs if n % 10 < 5 else docs[:1] if n % 10 < 7 else docs[:2]:
            tx.write(doc, ("value",), n)
        assert tx.commit().wait(WAIT).ok
        written = store._written
        assert store._written_entries == sum(len(d) + 1 for d in written.values()) <= 40
        store._check()
    assert max(written) == 30 and len(written) >= 5
    assert {2, 4} == {len(d) for d in written.values()}  # (one document: not kept)
    lists = list(written.values())
    assert all(a is b for a, b in itertools.pairwise(lists) if a == b)
    conn = sqlite3.connect(db)
    try:
        for seq, docs_at in written.items():
            row = conn.execute("SELECT entries FROM log WHERE seq = ?", (seq,)).fetchone()
            if row is not None:
                assert sorted(docs_at) == sorted(e[0] for e in msgspec.json.decode(row[0]))
    finally:
        conn.close()


def reading(sid: str, n: int, read: DocKey, basis: int, written: DocKey) -> CommitRequest:
    """Commit `n` of `sid`: reads `read`'s field at `basis`, writes `written`'s."""
    claim = ReadClaim(read, ("value",), False, basis)
    return CommitRequest(sid, n, (claim,), (), (Write(written, ("value",), n),), frozenset())


def test_a_read_of_a_document_the_writer_committed_is_checked_without_a_query(
    stores: Make, db: FsPath
) -> None:
    # The writer remembers the head rows it committed (`_known`): a read whose basis is
    # its document's head (nobody wrote it since) is decided without reading the head.
    store = stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x, y = key("x"), key("y")
    assert 1 == commit(store, listener, sid, 1, x).seq
    assert store._wconn is not None
    heard: list[str] = []
    store._wconn.set_trace_callback(heard.append)
    store.submit(listener, reading(sid, 2, x, 1, y))
    assert store.flush(WAIT)
    store._wconn.set_trace_callback(None)
    listener.mailbox.drain()
    assert 2 == listener.got[-1].seq
    assert [] == [s for s in heard if "h.floor" in s]  # (`_revisions_since`'s head read)


def count_decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the log entries the store decodes from now on (one element: the total)."""
    decode = cells.stores.sqlite._decode_stubs
    total = [0]

    def counted(text: str) -> Any:
        got = decode(text)
        total[0] += len(got)
        return got

    monkeypatch.setattr(cells.stores.sqlite, "_decode_stubs", counted)
    return total


def test_a_conflict_walk_into_a_large_commit_decodes_one_part(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # A commit of 1,000 documents keeps its entries in parts of 128 (by document
    # number): a conflict check that walks into it for one document decodes the log
    # row's 128 and that document's part, not the 1,000 (one walk used to decode them
    # all, then keep them; two such commits walked in turn past the cache cap
    # decoded them all at every step). Documents in the first, a middle and the last
    # part are each found, with what the commit wrote.
    monkeypatch.setattr(cells.stores.sqlite, "_LOGGED_FROM", 10**9)  # (no row is kept)
    store = stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    docs = [key(f"d{i:04}") for i in range(1000)]
    assert 1 == commit(store, listener, sid, 1, *docs).seq
    decoded = count_decoded(monkeypatch)
    for n, doc in enumerate([docs[0], docs[500], docs[-1]], 2):
        before = decoded[0]
        store.submit(listener, reading(sid, n, doc, 0, key("out")))  # (basis 0: before seq 1)
        assert store.flush(WAIT)
        listener.mailbox.drain()
        error = listener.got[-1].error
        assert isinstance(error, ConflictError)
        assert "seq 1 has since written []" in str(error)  # (its first write: the root)
        assert decoded[0] - before <= 2 * 128, decoded
    store._check()


def test_pruning_after_a_large_setup_costs_what_it_prunes(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # One commit sets up N documents, then every document is written alone, round
    # after round, so each document's first pruning walks back into the setup commit
    # at its own time. Each such walk decodes the setup's log row and the part
    # holding that document (at most 2 * 128 entries), not the N entries of the
    # setup: the entries decoded across all pruning grow as N (about twice as many
    # for twice the documents), where decoding the whole setup per document grew as
    # N^2 (4x).
    kept = 2
    monkeypatch.setattr(cells.stores.sqlite, "REVISIONS_KEPT", kept)

    def decoded_for(n: int, path: FsPath) -> tuple[int, int]:
        store = stores(path)
        listener = Verdicts()
        sid = store.connect(listener)
        docs = [key(f"d{i:05}") for i in range(n)]
        assert 1 == commit(store, listener, sid, 1, *docs).seq
        decoded = count_decoded(monkeypatch)
        local = 2
        for _ in range(2 * kept):  # (the last round takes each to 2k+1 revisions: pruned)
            for doc in docs:
                store.submit(
                    listener,
                    CommitRequest(
                        sid, local, (), (), (Write(doc, ("value",), local),), frozenset()
                    ),
                )
                local += 1
        assert store.flush(WAIT)
        listener.mailbox.drain()
        assert all(v.seq is not None for v in listener.got)
        conn = sqlite3.connect(path)
        try:
            floors = conn.execute("SELECT COUNT(*) FROM head WHERE floor IS NOT NULL").fetchone()
            parts = conn.execute("SELECT COUNT(*) FROM log_part").fetchone()
        finally:
            conn.close()
        assert (n, 0) == (floors[0], parts[0])  # (every document pruned; the setup's parts gone)
        store._check()
        return decoded[0], n

    small, n = decoded_for(600, db)
    large, _ = decoded_for(1200, db.with_name("large.db"))
    assert small <= n * (2 * 128 + 4 * kept), small
    assert large <= 2.3 * small, (small, large)


def test_a_read_of_a_remembered_document_another_writer_replaced_conflicts(
    stores: Make, db: FsPath
) -> None:
    # What the writer remembers is not used once another writer committed: the read
    # at seq 1 meets the other store's write at seq 2.
    store, other = stores(db), stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x, y = key("x"), key("y")
    assert 1 == commit(store, listener, sid, 1, x).seq
    assert Space(other, "c").cell("x").set(7).wait(WAIT).ok  # seq 2
    store.submit(listener, reading(sid, 2, x, 1, y))
    assert store.flush(WAIT)
    listener.mailbox.drain()
    verdict = listener.got[-1]
    assert verdict.seq is None
    assert isinstance(verdict.error, ConflictError)
    assert "seq 2 has since written ['value']" in str(verdict.error)


def test_a_conflict_walk_through_a_large_commit_reads_its_row_once(
    stores: Make, db: FsPath
) -> None:
    # A large commit's revisions are one log row: a conflict check that walks through
    # it keeps it decoded, so checks of its other documents read it no more (a walk
    # would otherwise decode every entry of a setup's row at each step). What each
    # check finds is the same: the first write of each document, at its root.
    store = stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    docs = [key(f"d{i}") for i in range(100)]
    assert 1 == commit(store, listener, sid, 1, *docs).seq
    assert store._wconn is not None
    heard: list[str] = []
    store._wconn.set_trace_callback(heard.append)
    for n, doc in enumerate(docs[:3], 2):
        store.submit(listener, reading(sid, n, doc, 0, key("out")))  # (basis 0: before seq 1)
        assert store.flush(WAIT)
        listener.mailbox.drain()
        error = listener.got[-1].error
        assert isinstance(error, ConflictError)
        assert "seq 1 has since written []" in str(error)
    store._wconn.set_trace_callback(None)
    assert 1 == len([s for s in heard if "FROM log l JOIN session s" in s]), heard


def test_the_only_writer_commits_without_reading_the_max_seq(stores: Make, db: FsPath) -> None:
    # While no other connection commits, the max seq is the one this writer left: four
    # statements for a one-document commit (BEGIN, its log row if none is newer than
    # that seq, the head, COMMIT), none of them the read of the max seq nor of
    # data_version (its statement was a fifth).
    store = stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x = key("x")
    assert 1 == commit(store, listener, sid, 1, x).seq
    assert store._wconn is not None
    heard: list[str] = []
    store._wconn.set_trace_callback(heard.append)
    assert 2 == commit(store, listener, sid, 2, x).seq
    store._wconn.set_trace_callback(None)
    assert 4 == len(heard), heard
    assert [] == [s for s in heard if "ORDER BY seq DESC LIMIT 1" in s or "data_version" in s]


def test_a_rejected_commit_of_the_only_writer_leaves_no_row(stores: Make, db: FsPath) -> None:
    # Its row went in before it was validated; the rejection takes it back, and the
    # next commit gets the next seq.
    store = stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x, y = key("x"), key("y")
    assert 1 == commit(store, listener, sid, 1, x).seq
    assert 2 == commit(store, listener, sid, 2, x).seq
    store.submit(listener, reading(sid, 3, x, 1, y))  # x was written at seq 2: conflict
    assert store.flush(WAIT)
    listener.mailbox.drain()
    assert isinstance(listener.got[-1].error, ConflictError)
    assert 2 == store.seq
    conn = sqlite3.connect(db)
    try:
        assert [(1,), (2,)] == conn.execute("SELECT seq FROM log ORDER BY seq").fetchall()
    finally:
        conn.close()
    store._check()
    assert 3 == commit(store, listener, sid, 4, y).seq


def test_a_commit_after_another_writers_reads_the_max_seq_again(stores: Make, db: FsPath) -> None:
    store, other = stores(db), stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x, y = key("x"), key("y")
    assert 1 == commit(store, listener, sid, 1, x).seq
    assert Space(other, "c").cell("y").set(7).wait(WAIT).ok  # seq 2
    assert 3 == commit(store, listener, sid, 2, x, y).seq
    assert {"value": 2} == store.read_durable(y)
    store._check()


def test_a_commit_after_another_writers_whose_first_row_was_pruned_takes_the_next_seq(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # The writer's usual commit inserts its log row only if no row is newer than the
    # max seq it knows. Another writer committed after it, and pruned the first of its
    # rows (the seq this writer would take): the insert must still see the newer ones,
    # not take that seq again below the max.
    monkeypatch.setattr(cells.stores.sqlite, "REVISIONS_KEPT", 1)
    store, other = stores(db), stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    x = key("x")
    assert 1 == commit(store, listener, sid, 1, x).seq
    y = Space(other, "c").cell("y")
    for n in range(4):  # seqs 2 to 5; the third prunes y's revisions at 2 and 3
        assert y.set(n).wait(WAIT).ok
    conn = sqlite3.connect(db)
    try:
        assert [(1,), (4,), (5,)] == conn.execute("SELECT seq FROM log ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert 6 == commit(store, listener, sid, 2, x).seq
    assert 6 == store.seq
    store._check()
    other._check()


def remembered_then_written_by_another(
    stores: Make, db: FsPath
) -> tuple[SQLiteStore, Verdicts, str, Space]:
    """A store that committed x and y at seq 1 (its writer remembers both heads), its
    listener and session, and a space on another store object of the same file."""
    store, other = stores(db), stores(db)
    listener = Verdicts()
    sid = store.connect(listener)
    assert 1 == commit(store, listener, sid, 1, key("x"), key("y")).seq
    return store, listener, sid, Space(other, "c")


def test_a_commit_of_documents_the_writer_remembers_after_another_writers_takes_the_next_seq(
    stores: Make, db: FsPath
) -> None:
    # Both documents' heads are remembered from this writer's commit; another writer
    # then writes one and a third. The next commit of both updates no head (a log row
    # is newer than the seq it would take), and goes the general way: the next seq, on
    # the other writer's values.
    store, listener, sid, other = remembered_then_written_by_another(stores, db)
    x, y = key("x"), key("y")
    tx = other.edit()
    tx.write(x, ("other",), "o")
    tx.write(key("z"), ("value",), 0)
    assert tx.commit().wait(WAIT).ok  # seq 2
    assert 3 == commit(store, listener, sid, 2, x, y).seq
    assert {"value": 2, "other": "o"} == store.read_durable(x)
    assert {"value": 2} == store.read_durable(y)
    store._check()


def test_a_read_the_writer_remembers_is_checked_again_after_another_writers_commit(
    stores: Make, db: FsPath
) -> None:
    # The writer remembers x and y at seq 1, its own commit; another writer then writes
    # x. A read of x at basis 1 writing y looks plainly valid by what the writer
    # remembers, but its head update finds a newer log row: nothing is written, and the
    # commit is validated against the file, and conflicts.
    store, listener, sid, other = remembered_then_written_by_another(stores, db)
    x, y = key("x"), key("y")
    assert other.cell("x").set(7).wait(WAIT).ok  # seq 2
    store.submit(listener, reading(sid, 2, x, 1, y))
    assert store.flush(WAIT)
    listener.mailbox.drain()
    assert isinstance(listener.got[-1].error, ConflictError)
    assert 2 == store.seq
    assert 3 == commit(store, listener, sid, 3, y).seq
    store._check()


@pytest.mark.parametrize("documents", [1, 3])
def test_a_value_its_stored_text_must_tag_or_escape_is_stored_by_the_codec(
    stores: Make, db: FsPath, documents: int
) -> None:
    # The writer remembers whether a document's value is plain (a dict of plain fields,
    # stored as `msgspec` encodes it) and keeps that when a commit sets a field of it;
    # a field that is not plain (a float the codec tags, a dict of one "/" key) or a
    # field named "/" (then the document's only one) makes the stored text the codec's.
    # One document a commit (the one-write commit) and three (`_stage_known`).
    store = stores(db)
    space = Space(store, "c")
    cases: list[list[tuple[tuple[str, ...], Value]]] = [
        [(("value",), -0.0)],
        [(("value",), {"/": "x"})],
        [(("value",), MISSING), (("/",), 2)],
        [(("other",), "plain")],
    ]
    expected: list[Value] = [
        {"value": -0.0},
        {"value": {"/": "x"}},
        {"/": 2},
        {"value": 1, "other": "plain"},
    ]
    written: list[list[DocKey]] = []
    for n, steps in enumerate(cases):
        keys = [space.get_cell(f"d{n}-{i}").doc_key for i in range(documents)]
        written.append(keys)
        # (The first write is remembered as plain, and the second keeps it so.)
        for path, value in [(("value",), 1), (("value",), 1), *steps]:
            tx = space.edit()
            for k in keys:
                tx.write(k, path, value)
            assert tx.commit().wait(WAIT).ok
    store._check()
    fresh = stores(db)
    for value, keys in zip(expected, written, strict=True):
        for k in keys:
            assert repr(value) == repr(fresh.read_durable(k)), k  # (repr: -0.0 == 0.0)


def pages_written(db: FsPath, commits: int, commit_one: Any) -> dict[str, float]:
    """Pages each commit appends to the write-ahead log, per commit, by the table or index
    they belong to (`dbstat`; "(free)" for a page no tree holds), over `commits` calls
    of `commit_one(n)` after a checkpoint that empties the log."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for n in range(commits):
            commit_one(n)
        names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    log = FsPath(f"{db}-wal").read_bytes()
    counts: dict[str, int] = {}
    for at in range(32, len(log) - size - 23, size + 24):
        name = names.get(int.from_bytes(log[at : at + 4], "big"), "(free)")
        counts[name] = counts.get(name, 0) + 1
    return {name: n / commits for name, n in counts.items()}


def test_a_one_document_commit_writes_its_head_page_and_the_logs_last(
    stores: Make, db: FsPath
) -> None:
    # A one-document commit writes two pages, its head's and the log's last (format 4
    # wrote a third, `commit_log`'s), whatever else the store did before it; page 1
    # (the file's size) when the log grows by a page, about one commit in 64.
    store = stores(db)
    space = Space(store, "c")
    a, b = space.get_cell("a"), space.get_cell("b")
    assert a.set(1).wait(WAIT).ok
    for n in range(200):  # (past a pruning of b's history)
        assert b.set(n).wait(WAIT).ok

    def read_a_write_b(n: int) -> None:
        tx = space.edit()
        b.with_tx(tx).set(a.with_tx(tx).get() + n)
        assert tx.commit().wait(WAIT).ok

    pages = pages_written(db, 128, read_a_write_b)
    assert {"head", "log", "sqlite_schema"} >= set(pages), pages
    assert pages["head"] == 1.0 and pages["log"] <= 1.05, pages
    assert pages.get("sqlite_schema", 0) <= 0.05, pages


def test_a_hundred_document_commit_writes_one_page_of_heads_and_no_keys(
    stores: Make, db: FsPath
) -> None:
    # Heads carry no key (it is in `document`, written once per document): 100 cells'
    # heads share a page, and updating them writes no key page. The commit's revisions
    # are one log row (about half a page: format 5's 100 rows took 3.6).
    store = stores(db)
    space = Space(store, "c")
    cells_ = [space.get_cell({"k": n}) for n in range(100)]

    def write_all(n: int) -> None:
        tx = space.edit()
        for cell in cells_:
            cell.with_tx(tx).set(n)
        assert tx.commit().wait(WAIT).ok

    for n in range(3):
        write_all(n)
    pages = pages_written(db, 64, write_all)
    assert pages["head"] <= 1.1, pages
    assert pages["log"] <= 2.0, pages
    # (Page 1 counts free pages, which appending to and pruning the log take and give.)
    assert {"head", "log", "(free)", "sqlite_schema"} >= set(pages), pages

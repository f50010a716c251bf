"""SQLiteStore keeps bounded history, as MemoryStore does (issue 13 item 6).

Each document keeps its newest `REVISIONS_KEPT` revisions (pruned when it has twice
that many); a read whose basis is older than what was pruned conflicts; pollers that
fell behind the pruned window still catch up on every document; commit_log keeps
only rows something names. Files of format versions 1 and 2 (written here with the
DDL those versions used) are upgraded when opened, keeping every decision.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest
from sqlite_support import Make, open_stores

import cells.stores.sqlite
from cells import (
    MISSING,
    ConflictError,
    CorruptStoreError,
    DocKey,
    Link,
    MemoryStore,
    Outcome,
    Space,
    SQLiteStore,
    StoreError,
)
from cells._codec import decode_json, encode_json
from cells._values import value_equal
from cells.stores._sql import encode_value, key_params
from cells.stores.memory import REVISIONS_KEPT
from cells.stores.sqlite import _SCHEMA_5, VERSION

WAIT = 20.0


@pytest.fixture
def db(tmp_path: FsPath) -> FsPath:
    return tmp_path / "cells.db"


@pytest.fixture
def stores() -> Iterator[Make]:
    with open_stores(synchronous="OFF") as make:  # history, not durability, is tested here
        yield make


def rows(db: FsPath, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def kept(db: FsPath) -> int:
    """The revisions the file keeps: log entries above their document's floor."""
    conn = sqlite3.connect(db)
    try:
        return int(
            conn.execute(
                "SELECT COUNT(*) FROM log l, json_each(l.entries) e JOIN head h"
                " ON h.doc = json_extract(e.value, '$[0]') WHERE l.seq > COALESCE(h.floor, 0)"
            ).fetchone()[0]
        )
    finally:
        conn.close()


def test_history_of_one_document_stays_bounded_under_churn(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "h")
    cell = space.get_cell("page")
    cycles = 6 * REVISIONS_KEPT
    for _ in range(cycles):
        tx = space.edit()
        current = tx.read(cell.doc_key, ("value",))
        tx.write(cell.doc_key, ("value",), (current or 0) + 1)
        assert tx.commit().wait(WAIT).ok
    assert cycles == cell.get()
    assert cycles == store.seq  # seqs still count every commit
    assert REVISIONS_KEPT <= kept(db) <= 2 * REVISIONS_KEPT
    assert REVISIONS_KEPT <= rows(db, "log") <= 2 * REVISIONS_KEPT
    assert 0 == rows(db, "rejection")
    store._check()


def test_history_stays_bounded_when_each_commit_writes_many_documents(
    stores: Make, db: FsPath
) -> None:
    # More documents per commit than one pruning check statement takes (150), so the
    # check runs in chunks; every document must still be pruned.
    store = stores(db)
    space = Space(store, "h")
    docs = [space.get_cell(f"doc-{i}") for i in range(160)]
    cycles = 2 * REVISIONS_KEPT + 2
    for n in range(cycles):
        tx = space.edit()
        for cell in docs:
            tx.write(cell.doc_key, ("value",), n)
        assert tx.commit().wait(WAIT).ok
    assert [cycles - 1] * len(docs) == [store.read_durable(c.doc_key)["value"] for c in docs]
    assert kept(db) <= len(docs) * (REVISIONS_KEPT + 2)
    assert rows(db, "log") <= REVISIONS_KEPT + 2  # (a row goes once its entries are pruned)
    assert rows(db, "head WHERE floor IS NOT NULL") == len(docs)
    store._check()


def test_a_commit_writing_below_many_documents_builds_on_each_stored_value(
    stores: Make, db: FsPath
) -> None:
    # A second store object writes blind (it never read the documents), so the store
    # must build each written document from its own stored head: existing, deleted and
    # never-written documents in one commit, in more than one read statement.
    store = stores(db)
    space = Space(store, "h")
    cells = [space.get_cell(f"doc-{i}") for i in range(200)]
    tx = space.edit()
    for i, cell in enumerate(cells[:150]):
        tx.write(cell.doc_key, (), {"value": {"kept": i}})
    assert tx.commit().wait(WAIT).ok
    tx = space.edit()
    tx.write(cells[0].doc_key, (), MISSING)  # deleted: a head row whose value is NULL
    assert tx.commit().wait(WAIT).ok
    blind = Space(stores(db), "h")
    tx = blind.edit()
    for cell in cells:
        tx.write(cell.doc_key, ("value", "new"), 1)
    assert tx.commit().wait(WAIT).ok
    got = [store.read_durable(c.doc_key) for c in cells]
    assert {"value": {"new": 1}} == got[0]
    assert [{"value": {"kept": i, "new": 1}} for i in range(1, 150)] == got[1:150]
    assert [{"value": {"new": 1}}] * 50 == got[150:]


def test_a_basis_older_than_the_pruned_revisions_conflicts(stores: Make, db: FsPath) -> None:
    """The write that changed what A read was pruned; the kept ones touch another path.
    Without the floor, A's commit would be accepted on a stale read."""
    a, b = stores(db), stores(db)
    sa, sb = Space(a, "h"), Space(b, "h")
    doc = sa.get_cell("doc")
    assert doc.set({"x": 0, "y": 0}).wait(WAIT).ok
    tx = sa.edit()
    assert 0 == tx.read(doc.doc_key, ("value", "x"))  # basis: seq 1
    other = sb.get_cell("doc")
    assert other.key("x").set(1).wait(WAIT).ok  # changes what A read
    for i in range(2 * REVISIONS_KEPT + 1):
        assert other.key("y").set(i).wait(WAIT).ok  # prunes the write to x
    tx.write(sa.get_cell("out").doc_key, ("value",), "from a stale read")
    result = tx.commit().wait(WAIT)
    assert Outcome.STALE_BASIS is result.outcome
    assert isinstance(result.error, ConflictError)
    assert MISSING is b.read_durable(sb.get_cell("out").doc_key)


def test_a_basis_inside_the_kept_window_still_commits(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    sa, sb = Space(a, "h"), Space(b, "h")
    doc = sb.get_cell("doc")
    for i in range(3 * REVISIONS_KEPT):
        assert doc.key("y").set(i).wait(WAIT).ok
    assert a.poll() >= 0
    tx = sa.edit()
    assert {"y": 3 * REVISIONS_KEPT - 1} == tx.read(doc.doc_key, ("value",))
    tx.write(sa.get_cell("out").doc_key, ("value",), 1)
    assert tx.commit().wait(WAIT).ok


def test_a_poller_behind_the_pruned_window_catches_up_on_every_document(
    stores: Make, db: FsPath
) -> None:
    watcher, writer = stores(db), stores(db)
    watching = Space(watcher, "h")
    names = ["once", "churned", "deleted"]
    for name in names:
        assert MISSING is watching.get_cell(name).get()  # loaded: foreign commits reach it
    sw = Space(writer, "h")
    assert sw.get_cell("once").set("written once").wait(WAIT).ok
    assert sw.get_cell("deleted").set("soon gone").wait(WAIT).ok
    for i in range(3 * REVISIONS_KEPT):
        assert sw.get_cell("churned").set(i).wait(WAIT).ok
    assert sw.get_cell("deleted").delete().wait(WAIT).ok
    assert watcher.poll() > 0
    watching.replica.pump()
    assert "written once" == watching.get_cell("once").get()
    assert 3 * REVISIONS_KEPT - 1 == watching.get_cell("churned").get()
    assert MISSING is watching.get_cell("deleted").get()
    # And its own commits still go through (its writer caught up too).
    assert watching.get_cell("churned").set("from the watcher").wait(WAIT).ok


def test_a_poller_hears_of_every_document_of_a_commit_kept_in_parts(
    stores: Make, db: FsPath
) -> None:
    # 300 documents: 128 in the log row, 128 and 44 in parts. Another store's session
    # that loaded them hears of each (its changes are read from the row and the parts).
    watcher, writer = stores(db), stores(db)
    watching = Space(watcher, "h")
    names = [f"doc-{i}" for i in range(300)]
    for name in names:
        assert MISSING is watching.get_cell(name).get()  # loaded: foreign commits reach it
    space = Space(writer, "h")
    tx = space.edit()
    for i, name in enumerate(names):
        tx.write(space.get_cell(name).doc_key, ("value",), i)
    assert tx.commit().wait(WAIT).ok
    assert 2 == rows(db, "log_part")
    assert 1 == watcher.poll()
    watching.replica.pump()
    assert list(range(300)) == [watching.get_cell(name).get() for name in names]


def test_log_entries_are_stored_as_text_and_checked_as_text(stores: Make, db: FsPath) -> None:
    # A log row's (and part's) entries are JSON text, bound as `str`: SQLite 3.45 and
    # later read a BLOB given to a JSON function as its binary JSON (JSONB), so entries
    # stored as a BLOB would make `_check`'s `json_each` fail or misread them. One
    # document (the known path), 100 (one row) and 300 (a row and two parts).
    store = stores(db)
    space = Space(store, "h")
    assert space.get_cell("one").set(1).wait(WAIT).ok
    for count in (100, 300):
        tx = space.edit()
        for i in range(count):
            tx.write(space.get_cell(f"doc-{i}").doc_key, ("value",), count)
        assert tx.commit().wait(WAIT).ok
    conn = sqlite3.connect(db)
    try:
        kinds = conn.execute(
            "SELECT typeof(entries) FROM log UNION ALL SELECT typeof(entries) FROM log_part"
        ).fetchall()
        assert 2 == rows(db, "log_part")
        assert {("text",)} == set(kinds) and len(kinds) >= 5, kinds
        store._check()
        # A file written before (entries bound as bytes: BLOBs) is still checked as text.
        with conn:
            conn.execute("UPDATE log SET entries = CAST(entries AS BLOB)")
            conn.execute("UPDATE log_part SET entries = CAST(entries AS BLOB)")
        assert {"blob"} == {k for (k,) in conn.execute("SELECT typeof(entries) FROM log")}
    finally:
        conn.close()
    store._check()
    assert 300 == space.get_cell("doc-0").get()


def test_commits_built_on_many_pending_layers_resolve_after_pruning(
    stores: Make, db: FsPath
) -> None:
    """Dependencies are answered from the store's memory (no row per verdict is kept).

    The commits in flight span a prune (the document passes 2 * REVISIONS_KEPT
    revisions while they are evaluated); their basis stays inside the kept window, so
    all are accepted. (A basis older than the window conflicts, on MemoryStore too:
    `test_a_basis_older_than_the_pruned_revisions_conflicts`.)"""
    store = stores(db)
    space = Space(store, "h")
    cell = space.get_cell("counter")
    for i in range(2 * REVISIONS_KEPT - 8):
        assert cell.set(i + 1).wait(WAIT).ok
    gate = store.testing.hold_verdicts()
    pendings = []
    for _ in range(REVISIONS_KEPT):
        tx = space.edit()
        current = tx.read(cell.doc_key, ("value",))
        tx.write(cell.doc_key, ("value",), current + 1)
        pendings.append(tx.commit())
    gate.release()
    results = [p.wait(WAIT) for p in pendings]
    assert [r.outcome for r in results] == [Outcome.OK] * len(results)
    assert 3 * REVISIONS_KEPT - 8 == store.read_durable(cell.doc_key)["value"]
    assert kept(db) <= 2 * REVISIONS_KEPT
    assert 0 == rows(db, "rejection")


# ---------------------------------------------------------------- older formats
# The DDL of store format version 2, as cellweave wrote it before version 3 (history
# keyed by document); version 1 is the same without `revision_floor` and two indexes.
_KEY = "space TEXT NOT NULL, doc_id TEXT NOT NULL, scope TEXT NOT NULL,"
_KEY += " principal TEXT NOT NULL, session TEXT NOT NULL"
_PK = "space, doc_id, scope, principal, session"
_MATCH = "space = ? AND doc_id = ? AND scope = ? AND principal = ? AND session = ?"
V1_DDL = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE commit_log (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
    " local_seq INTEGER NOT NULL, UNIQUE (session_id, local_seq))",
    "CREATE TABLE rejection (session_id TEXT NOT NULL, local_seq INTEGER NOT NULL,"
    " PRIMARY KEY (session_id, local_seq)) WITHOUT ROWID",
    f"CREATE TABLE revision ({_KEY}, seq INTEGER NOT NULL REFERENCES commit_log (seq),"
    f" paths TEXT NOT NULL, PRIMARY KEY ({_PK}, seq)) WITHOUT ROWID",
    "CREATE INDEX revision_by_seq ON revision (seq)",
    f"CREATE TABLE head ({_KEY}, seq INTEGER NOT NULL REFERENCES commit_log (seq),"
    f" value TEXT, PRIMARY KEY ({_PK})) WITHOUT ROWID",
    f"CREATE TABLE claimed ({_KEY}, seq INTEGER NOT NULL REFERENCES commit_log (seq),"
    f" PRIMARY KEY ({_PK})) WITHOUT ROWID",
)
V2_DDL = (
    *V1_DDL,
    f"CREATE TABLE revision_floor ({_KEY}, seq INTEGER NOT NULL, PRIMARY KEY ({_PK}))"
    " WITHOUT ROWID",
    "CREATE INDEX head_by_seq ON head (seq)",
    "CREATE INDEX claimed_by_seq ON claimed (seq)",
)

OldCommit = tuple[dict[DocKey, tuple[Any, list[list[Any]]]], list[DocKey]]
"""One commit: the documents it writes (value, paths written), and the keys it claims."""


def write_old_file(db: FsPath, version: int, commits: list[OldCommit]) -> None:
    """A file as cellweave wrote it in format `version` (1 or 2), holding `commits`
    (seq 1, 2, ...): version 2 prunes history as it did (a document past 2 *
    REVISIONS_KEPT revisions keeps its newest REVISIONS_KEPT and records a floor;
    commit_log keeps the rows something names); version 1 keeps everything."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for stmt in V2_DDL if version == 2 else V1_DDL:
        conn.execute(stmt)
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [("format", "cellweave-store"), ("version", str(version))]
    )
    newest_first = f"SELECT seq FROM revision WHERE {_MATCH} ORDER BY seq DESC LIMIT 1 OFFSET ?"
    for seq, (writes, claims) in enumerate(commits, 1):
        conn.execute("INSERT INTO commit_log VALUES (?, ?, ?)", (seq, "old@1", seq))
        for key, (value, paths) in writes.items():
            k = key_params(key)
            conn.execute(
                "INSERT INTO revision VALUES (?, ?, ?, ?, ?, ?, ?)", (*k, seq, json.dumps(paths))
            )
            conn.execute(
                "INSERT INTO head VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE"
                " SET seq = excluded.seq, value = excluded.value",
                (*k, seq, encode_value(value)),
            )
            if version == 2 and conn.execute(newest_first, (*k, 2 * REVISIONS_KEPT)).fetchone():
                floor = conn.execute(newest_first, (*k, REVISIONS_KEPT)).fetchone()[0]
                conn.execute(f"DELETE FROM revision WHERE {_MATCH} AND seq <= ?", (*k, floor))
                conn.execute(
                    "INSERT INTO revision_floor VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE"
                    " SET seq = excluded.seq",
                    (*k, floor),
                )
                conn.execute(
                    "DELETE FROM commit_log WHERE seq NOT IN (SELECT seq FROM revision"
                    " UNION SELECT seq FROM head UNION SELECT seq FROM claimed)"
                )
        for key in claims:
            conn.execute("INSERT INTO claimed VALUES (?, ?, ?, ?, ?, ?)", (*key_params(key), seq))
    conn.execute("COMMIT")
    conn.close()


History = dict[DocKey, tuple[int | None, list[tuple[int, tuple[tuple[Any, ...], ...]]]]]


def old_history(db: FsPath) -> History:
    """Per document of an old-format file: its floor, and its kept (seq, paths) revisions."""
    conn = sqlite3.connect(db)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        out: History = {}
        for row in conn.execute(f"SELECT {_PK} FROM head").fetchall():
            floor = None
            if "revision_floor" in tables:
                got = conn.execute(f"SELECT seq FROM revision_floor WHERE {_MATCH}", row).fetchone()
                floor = None if got is None else got[0]
            revs = conn.execute(f"SELECT seq, paths FROM revision WHERE {_MATCH} ORDER BY seq", row)
            out[DocKey(*row)] = (
                floor,
                [(seq, tuple(tuple(p) for p in json.loads(paths))) for seq, paths in revs],
            )
        return out
    finally:
        conn.close()


def assert_every_basis_meets(
    store: SQLiteStore,
    before: History,
    last_seq: int,
    session: Callable[[int], tuple[str, int]] = lambda seq: ("old@1", seq),
) -> None:
    """Every basis up to `last_seq` meets exactly the revisions the old file kept after it (or
    its floor), with the session and local seq of the commit that wrote each (`session`
    of its seq); `before` maps each document to the old file's floor and (seq, paths)
    revisions."""
    conn = store._reader_conn()
    for key, (floor, revs) in before.items():
        for basis in range(last_seq + 1):
            got = store._revisions_since(conn, "s", "s@1", key, basis)
            if floor is not None and basis < floor:
                assert [(floor, ((),))] == [(r.seq, r.paths) for r in got]
                continue
            assert [(seq, p) for seq, p in revs if seq > basis] == [
                (r.seq, r.paths) for r in got
            ], (key, basis)
            assert all((r.session_id, r.local_seq) == session(r.seq) for r in got)


def meta_version(db: FsPath) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0])
    finally:
        conn.close()


def keys(*names: str) -> list[DocKey]:
    space = Space(MemoryStore(), "h")
    return [space.get_cell(name).doc_key for name in names]


def old_commits() -> list[OldCommit]:
    """A history with every kind of row: a document written past two prunes (alternating
    paths, so which revisions a basis meets decides conflicts), one written once, one
    deleted, a commit of several documents, a create-only claim that wrote nothing."""
    churned, once, deleted, claimed = keys("churned", "once", "deleted", "claimed")
    commits: list[OldCommit] = [
        ({once: ({"value": {"x": 1}}, [["value"]]), deleted: ({"value": 1}, [[]])}, []),
        ({}, [claimed]),
    ]
    for i in range(3 * REVISIONS_KEPT + 7):
        writes: dict[DocKey, tuple[Any, list[list[Any]]]] = {
            churned: ({"value": {"x": i, "y": i}}, [["value", "xy"[i % 2]]])
        }
        if i == 5:
            writes[deleted] = (MISSING, [[]])
        commits.append((writes, []))
    return commits


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_file_is_upgraded_when_opened(
    stores: Make, db: FsPath, version: int
) -> None:
    commits = old_commits()
    write_old_file(db, version, commits)
    before = old_history(db)
    churned, once, deleted, claimed = keys("churned", "once", "deleted", "claimed")
    assert (before[churned][0] is not None) is (version == 2)  # version 2 pruned it
    store = stores(db)
    assert str(VERSION) == meta_version(db)
    if version == 2:  # (version 1 kept more than 2 * REVISIONS_KEPT: pruned at next write)
        store._check()  # counts, floors, next floors, each revision naming the one before
    assert len(commits) == store.seq
    assert {"value": {"x": 1}} == store.read_durable(once)
    assert MISSING is store.read_durable(deleted)
    last = 3 * REVISIONS_KEPT + 6
    assert {"value": {"x": last, "y": last}} == store.read_durable(churned)
    assert_every_basis_meets(store, before, len(commits))
    # And the store goes on: create-only still meets the old claim; a document of the
    # version 1 file, never pruned, is pruned at its next write; history stays bounded.
    space = Space(store, "h")
    tx = space.edit()
    tx.create_only(claimed)
    tx.write(claimed, ("value",), 1)
    assert Outcome.PERMANENT is tx.commit().wait(WAIT).outcome
    for i in range(3 * REVISIONS_KEPT):
        assert space.get_cell("churned").key("x").set(-i).wait(WAIT).ok
    assert kept(db) <= 2 * REVISIONS_KEPT + 2
    store._check()


# The DDL of store format version 3, as cellweave wrote it before version 4 (revisions
# keyed by (seq, document number), each naming its document's previous one by seq).
V3_DDL = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE commit_log (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
    " local_seq INTEGER NOT NULL)",
    "CREATE TABLE rejection (session_id TEXT NOT NULL, local_seq INTEGER NOT NULL,"
    " PRIMARY KEY (session_id, local_seq)) WITHOUT ROWID",
    f"CREATE TABLE head (doc INTEGER PRIMARY KEY, {_KEY}, seq INTEGER NOT NULL,"
    " revisions INTEGER NOT NULL, floor INTEGER, next_floor INTEGER, value TEXT,"
    f" UNIQUE ({_PK}))",
    "CREATE TABLE revision (seq INTEGER NOT NULL, doc INTEGER NOT NULL, prev INTEGER NOT NULL,"
    " paths TEXT NOT NULL, PRIMARY KEY (seq, doc)) WITHOUT ROWID",
    f"CREATE TABLE claimed ({_KEY}, seq INTEGER NOT NULL, PRIMARY KEY ({_PK})) WITHOUT ROWID",
    "CREATE INDEX claimed_by_seq ON claimed (seq)",
)


def write_v3_file(db: FsPath, commits: list[OldCommit]) -> None:
    """A file as cellweave wrote it in format 3, holding `commits` (seq 1, 2, ...): a
    document past 2 * REVISIONS_KEPT revisions keeps its newest REVISIONS_KEPT, its head
    counting them and recording its floor, and the next floor once it keeps more than
    REVISIONS_KEPT; each revision names the document's previous one by seq (the oldest
    kept one its floor); commit_log keeps the rows something names."""
    kept = REVISIONS_KEPT
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for stmt in V3_DDL:
        conn.execute(stmt)
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [("format", "cellweave-store"), ("version", "3")]
    )
    for seq, (writes, claims) in enumerate(commits, 1):
        conn.execute("INSERT INTO commit_log VALUES (?, ?, ?)", (seq, "old@1", seq))
        for key, (value, paths) in writes.items():
            k = key_params(key)
            conn.execute(
                f"INSERT INTO head ({_PK}, seq, revisions) VALUES (?, ?, ?, ?, ?, 0, 0)"
                " ON CONFLICT DO NOTHING",
                k,
            )
            doc, last = conn.execute(f"SELECT doc, seq FROM head WHERE {_MATCH}", k).fetchone()
            conn.execute(
                "INSERT INTO revision VALUES (?, ?, ?, ?)", (seq, doc, last, json.dumps(paths))
            )
            conn.execute(
                "UPDATE head SET next_floor = CASE revisions WHEN ? THEN ? ELSE next_floor END,"
                " seq = ?, revisions = revisions + 1, value = ? WHERE doc = ?",
                (kept, seq, seq, encode_value(value), doc),
            )
            count = conn.execute("SELECT revisions FROM head WHERE doc = ?", (doc,)).fetchone()[0]
            if count > 2 * kept:
                oldest = conn.execute(
                    "SELECT seq FROM revision WHERE doc = ? ORDER BY seq LIMIT ?",
                    (doc, count - kept),
                ).fetchall()
                floor = oldest[-1][0]
                conn.execute("DELETE FROM revision WHERE doc = ? AND seq <= ?", (doc, floor))
                conn.execute(
                    "UPDATE head SET revisions = ?, floor = ?, next_floor = NULL WHERE doc = ?",
                    (kept, floor, doc),
                )
                conn.execute(
                    "DELETE FROM commit_log WHERE seq < ? AND seq NOT IN (SELECT seq FROM"
                    " revision UNION SELECT seq FROM claimed)",
                    (seq,),
                )
        for key in claims:
            conn.execute("INSERT INTO claimed VALUES (?, ?, ?, ?, ?, ?)", (*key_params(key), seq))
    conn.execute("COMMIT")
    conn.close()


def v3_history(db: FsPath, heads: str = f"SELECT doc, floor, {_PK} FROM head") -> History:
    """Per document of a version 3 file: its floor, and its kept (seq, paths) revisions
    (`heads`: each document's number, floor and key, for a later version's layout)."""
    conn = sqlite3.connect(db)
    try:
        out: History = {}
        for doc, floor, *key in conn.execute(heads).fetchall():
            revs = conn.execute(
                "SELECT seq, paths FROM revision WHERE doc = ? ORDER BY seq", (doc,)
            )
            out[DocKey(*key)] = (
                floor,
                [(seq, tuple(tuple(p) for p in json.loads(paths))) for seq, paths in revs],
            )
        return out
    finally:
        conn.close()


def goes_on_after_upgrade(
    store: SQLiteStore,
    watcher: SQLiteStore,
    watching: Space,
    claimed: DocKey,
    db: FsPath,
    revision_rows: int | None,
) -> None:
    """After an upgrade: a create-only commit of `claimed` meets the old file's claim,
    "churned" is pruned (checked at each step of its churn; the file keeps at most
    `revision_rows` revisions, when given), and `watching` (another store's session that
    loaded the documents before) hears of every later commit."""
    space = Space(store, "h")
    tx = space.edit()
    tx.create_only(claimed)
    tx.write(claimed, ("value",), 1)
    assert Outcome.PERMANENT is tx.commit().wait(WAIT).outcome
    for i in range(2 * REVISIONS_KEPT):
        assert space.get_cell("churned").key("x").set(-i).wait(WAIT).ok
        if i in (0, REVISIONS_KEPT - 1, REVISIONS_KEPT, 2 * REVISIONS_KEPT - 1):
            store._check()
    if revision_rows is not None:
        assert kept(db) <= revision_rows
    assert space.get_cell("once").key("x").set(2).wait(WAIT).ok
    assert watcher.poll() > 0
    watching.replica.pump()
    assert -(2 * REVISIONS_KEPT - 1) == watching.get_cell("churned").get()["x"]
    assert {"x": 2} == watching.get_cell("once").get()


def open_upgraded(stores: Make, db: FsPath, commits: int, before: History) -> SQLiteStore:
    """Open the old file `db` (`old_commits()`, whose history is `before`), checking that it
    was upgraded to `VERSION` with its invariants, seqs and values."""
    churned, once, deleted = keys("churned", "once", "deleted")
    assert before[churned][0] is not None  # pruned twice, and more than kept since
    assert REVISIONS_KEPT < len(before[churned][1]) <= 2 * REVISIONS_KEPT
    store = stores(db)
    assert "7" == str(VERSION) == meta_version(db)
    store._check()
    assert commits == store.seq
    assert {"value": {"x": 1}} == store.read_durable(once)
    assert MISSING is store.read_durable(deleted)
    last = 3 * REVISIONS_KEPT + 6
    assert {"value": {"x": last, "y": last}} == store.read_durable(churned)
    return store


def test_a_version_3_file_is_upgraded_when_opened(stores: Make, db: FsPath) -> None:
    # Versions 4 to 6 change how revisions are stored and chained: every document,
    # revision, floor, next floor and claim of the version 3 file is kept.
    commits = old_commits()
    write_v3_file(db, commits)
    before = v3_history(db)
    (claimed,) = keys("claimed")
    store = open_upgraded(stores, db, len(commits), before)  # (and its invariants)
    last = 3 * REVISIONS_KEPT + 6
    assert_every_basis_meets(store, before, len(commits))
    # The store goes on: create-only meets the old claim, the churned document is
    # pruned by its upgraded next floor, and another store's session that loaded the
    # documents before hears of every later commit (found by revision id).
    watcher = stores(db)
    watching = Space(watcher, "h")
    assert {"x": 1} == watching.get_cell("once").get()
    assert last == watching.get_cell("churned").get()["x"]
    goes_on_after_upgrade(store, watcher, watching, claimed, db, 2 * REVISIONS_KEPT + 2)
    # A cellweave of format 3 still holding the file open cannot commit to it: its
    # first statement (the commit's row) has no table, so it writes nothing.
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table: commit_log"):
            conn.execute(
                "INSERT INTO commit_log (seq, session_id, local_seq) VALUES (?, ?, ?)",
                (store.seq + 1, "old@1", 1),
            )
    finally:
        conn.close()


# The DDL of store format version 4, as cellweave wrote it before version 5 (a
# `commit_log` table beside revisions with ids in commit order, chained by id).
V4_DDL = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE commit_log (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
    " local_seq INTEGER NOT NULL, first INTEGER NOT NULL)",
    "CREATE TABLE rejection (session_id TEXT NOT NULL, local_seq INTEGER NOT NULL,"
    " PRIMARY KEY (session_id, local_seq)) WITHOUT ROWID",
    f"CREATE TABLE head (doc INTEGER PRIMARY KEY, {_KEY}, seq INTEGER NOT NULL,"
    " revisions INTEGER NOT NULL, floor INTEGER, next_floor INTEGER, value TEXT,"
    f" rev INTEGER NOT NULL DEFAULT 0, UNIQUE ({_PK}))",
    "CREATE TABLE revision (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL,"
    " doc INTEGER NOT NULL, prev INTEGER NOT NULL, paths TEXT NOT NULL)",
    f"CREATE TABLE claimed ({_KEY}, seq INTEGER NOT NULL, PRIMARY KEY ({_PK})) WITHOUT ROWID",
    "CREATE INDEX claimed_by_seq ON claimed (seq)",
)


def v4_session(seq: int) -> tuple[str, int]:
    """The (session key, local seq) of commit `seq` in `write_v4_file`: two sessions, in turn."""
    return f"old@{1 + seq % 2}", seq


def update_and_prune_by_id(
    conn: sqlite3.Connection, doc: int, seq: int, rev: int, value: Any
) -> bool:
    """Formats 4 and 5: `doc`'s head after its revision `rev` at `seq`, then its pruning
    (a document past 2 * REVISIONS_KEPT revisions keeps its newest REVISIONS_KEPT and
    records its floor). Whether it pruned."""
    kept = REVISIONS_KEPT
    conn.execute(
        "UPDATE head SET next_floor = CASE revisions WHEN ? THEN ? ELSE next_floor END,"
        " seq = ?, revisions = revisions + 1, rev = ?, value = ? WHERE doc = ?",
        (kept, rev, seq, rev, encode_value(value), doc),
    )
    count = conn.execute("SELECT revisions FROM head WHERE doc = ?", (doc,)).fetchone()[0]
    if count <= 2 * kept:
        return False
    oldest = conn.execute(
        "SELECT id, seq FROM revision WHERE doc = ? ORDER BY id LIMIT ?", (doc, count - kept)
    ).fetchall()
    conn.execute("DELETE FROM revision WHERE doc = ? AND id <= ?", (doc, oldest[-1][0]))
    conn.execute(
        "UPDATE head SET revisions = ?, floor = ?, next_floor = NULL WHERE doc = ?",
        (kept, oldest[-1][1], doc),
    )
    return True


def write_v4_file(db: FsPath, commits: list[OldCommit]) -> None:
    """A file as cellweave wrote it in format 4, holding `commits` (seq 1, 2, ...) of two
    sessions in turn (`v4_session`): revision ids in commit order, each naming its
    document's previous one by id (the oldest kept one a pruned id), the head its last
    one (`rev`) and its next floor by id, each commit_log row its first revision's id;
    a document past 2 * REVISIONS_KEPT revisions keeps its newest REVISIONS_KEPT and
    records its floor; commit_log keeps the newest row and the rows something names."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for stmt in V4_DDL:
        conn.execute(stmt)
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [("format", "cellweave-store"), ("version", "4")]
    )
    next_id = 1
    for seq, (writes, claims) in enumerate(commits, 1):
        conn.execute("INSERT INTO commit_log VALUES (?, ?, ?, ?)", (seq, *v4_session(seq), next_id))
        for key, (value, paths) in writes.items():
            k = key_params(key)
            conn.execute(
                f"INSERT INTO head ({_PK}, seq, revisions) VALUES (?, ?, ?, ?, ?, 0, 0)"
                " ON CONFLICT DO NOTHING",
                k,
            )
            doc, prev = conn.execute(f"SELECT doc, rev FROM head WHERE {_MATCH}", k).fetchone()
            conn.execute(
                "INSERT INTO revision VALUES (?, ?, ?, ?, ?)",
                (next_id, seq, doc, prev, json.dumps(paths)),
            )
            pruned = update_and_prune_by_id(conn, doc, seq, next_id, value)
            next_id += 1
            if pruned:
                conn.execute(
                    "DELETE FROM commit_log WHERE seq < ? AND seq NOT IN (SELECT seq FROM"
                    " revision UNION SELECT seq FROM claimed)",
                    (seq,),
                )
        for key in claims:
            conn.execute("INSERT INTO claimed VALUES (?, ?, ?, ?, ?, ?)", (*key_params(key), seq))
    conn.execute("COMMIT")
    conn.close()


def test_a_version_4_file_is_upgraded_when_opened(stores: Make, db: FsPath) -> None:
    # Version 5 moved each commit's seq, session and local seq onto its revision rows
    # and dropped commit_log, version 6 gathers a commit's revisions into one log row:
    # every document, revision, floor, next floor, claim and commit's session is kept.
    commits = old_commits()
    write_v4_file(db, commits)
    before = v3_history(db)  # (the same columns in version 4)
    (claimed,) = keys("claimed")
    # (Its invariants: counts, floors, next floors, chains, sessions, the claim's row.)
    store = open_upgraded(stores, db, len(commits), before)
    last = 3 * REVISIONS_KEPT + 6
    assert_every_basis_meets(store, before, len(commits), v4_session)
    conn = store._reader_conn()
    # The commit that only claimed keeps its seq, session and local seq.
    assert [(2, "old@1", 2)] == conn.execute(
        "SELECT l.seq, s.key, l.local_seq FROM log l JOIN session s ON s.id = l.session"
        " WHERE l.entries = '[]'"
    ).fetchall()
    # The store goes on: create-only meets the old claim, the churned document is
    # pruned by its upgraded next floor, and another store's session that loaded the
    # documents before hears of every later commit.
    watcher = stores(db)
    watching = Space(watcher, "h")
    assert last == watching.get_cell("churned").get()["x"]
    goes_on_after_upgrade(store, watcher, watching, claimed, db, None)
    # A cellweave of format 4 still holding the file open cannot commit to it: the
    # commit's row has no table.
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table: commit_log"):
            conn.execute(
                "INSERT INTO commit_log (seq, session_id, local_seq, first) VALUES (?, ?, ?, ?)",
                (store.seq + 1, "old@1", 1, 10**6),
            )
    finally:
        conn.close()


def test_a_failed_upgrade_leaves_the_file_as_it_was(db: FsPath) -> None:
    write_old_file(db, 2, old_commits())
    conn = sqlite3.connect(db)
    conn.executescript(  # damaged: the revisions lost their paths
        "ALTER TABLE revision RENAME TO r; CREATE TABLE revision AS SELECT space, doc_id,"
        " scope, principal, session, seq FROM r; DROP TABLE r;"
    )
    content = list(conn.iterdump())
    conn.close()
    with pytest.raises(StoreError, match="cannot initialize the store") as info:
        SQLiteStore(db, poll_interval=0)
    assert "paths" in str(info.value)
    assert "2" == meta_version(db)
    conn = sqlite3.connect(db)
    try:  # the upgrade rolled back: every table, row and index as it was
        assert content == list(conn.iterdump())
    finally:
        conn.close()


def test_a_writer_builds_on_what_another_writer_committed_since(stores: Make, db: FsPath) -> None:
    # Each store's writer remembers the heads it committed; once another writer has
    # committed, it must read them again: a blind write below a document builds on
    # the stored value, the other writer's fields included.
    a, b = stores(db), stores(db)
    sa, sb = Space(a, "h"), Space(b, "h")
    cells = [sa.get_cell(f"doc-{i}") for i in range(3)]
    for field, (store_space, n) in enumerate([(sa, 1), (sb, 2), (sa, 3), (sb, 4), (sa, 5)]):
        tx = store_space.edit()
        for cell in cells:
            tx.write(cell.doc_key, ("value", f"f{field}"), n)
        assert tx.commit().wait(WAIT).ok
    want = {"value": {"f0": 1, "f1": 2, "f2": 3, "f3": 4, "f4": 5}}
    assert [want] * 3 == [a.read_durable(c.doc_key) for c in cells]
    a._check()
    b._check()


@pytest.mark.parametrize(
    "value",
    [
        {"value": 3},
        {"value": True, "none": None, "text": "caf\u00e9", "n": -(2**63)},
        {},
        {"/": 1},  # escaped by the codec: it would read back as a tag
        {"/": "x", "other": 2},
        {"value": 1.5},
        {"value": float("nan")},
        {"value": -0.0},
        {"value": Link("s", "d", "space", ("value",))},
        {"value": [1, {"/": 2}]},
        {"value": {"nested": 1}},
        [1, 2],
        7,
        "text",
    ],
)
def test_stored_text_is_the_codecs_for_every_value(value: Any) -> None:
    # encode_value writes a dict of plain fields without the codec's copy: the same text.
    assert encode_json(value).decode() == encode_value(value)
    assert value_equal(value, decode_json(encode_value(value) or ""))


def write_v5_file(db: FsPath, commits: list[OldCommit]) -> None:
    """A file as cellweave wrote it in format 5, holding `commits` (seq 1, 2, ...) of two
    sessions in turn (`v4_session`, numbered in `session`): a `revision` row per document
    written (ids in commit order, each naming its commit's seq, session and local seq and
    its document's previous revision by id, the oldest kept one a pruned id), one row
    naming no document for a commit that wrote none; keys in `document`, each head its
    last revision's seq and id and its next floor by id; a document past 2 *
    REVISIONS_KEPT revisions keeps its newest REVISIONS_KEPT and records its floor."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for stmt in _SCHEMA_5:
        conn.execute(stmt)
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)", [("format", "cellweave-store"), ("version", "5")]
    )
    next_id = 1
    for seq, (writes, claims) in enumerate(commits, 1):
        session_key, local_seq = v4_session(seq)
        conn.execute("INSERT OR IGNORE INTO session (key) VALUES (?)", (session_key,))
        (session,) = conn.execute("SELECT id FROM session WHERE key = ?", (session_key,)).fetchone()
        if not writes:
            conn.execute(
                "INSERT INTO revision VALUES (?, ?, NULL, 0, NULL, ?, ?)",
                (next_id, seq, session, local_seq),
            )
            next_id += 1
        for key, (value, paths) in writes.items():
            k = key_params(key)
            conn.execute(
                f"INSERT INTO document ({_PK}) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", k
            )
            (doc,) = conn.execute(f"SELECT doc FROM document WHERE {_MATCH}", k).fetchone()
            conn.execute(
                "INSERT INTO head (doc, seq, revisions) VALUES (?, 0, 0) ON CONFLICT DO NOTHING",
                (doc,),
            )
            (prev,) = conn.execute("SELECT rev FROM head WHERE doc = ?", (doc,)).fetchone()
            conn.execute(
                "INSERT INTO revision VALUES (?, ?, ?, ?, ?, ?, ?)",
                (next_id, seq, doc, prev, json.dumps(paths), session, local_seq),
            )
            update_and_prune_by_id(conn, doc, seq, next_id, value)
            next_id += 1
        for key in claims:
            conn.execute("INSERT INTO claimed VALUES (?, ?, ?, ?, ?, ?)", (*key_params(key), seq))
    conn.execute("COMMIT")
    conn.close()


def test_a_version_5_file_is_upgraded_when_opened(stores: Make, db: FsPath) -> None:
    # Version 6 gathers each commit's revision rows into one log row (an entry per
    # document, naming its previous revision by seq; none for a commit that only
    # claimed) and names next floors by seq: every document, revision, floor, next
    # floor, claim and commit's session and local seq is kept, in one transaction.
    commits = old_commits()
    write_v5_file(db, commits)
    before = v3_history(db, f"SELECT h.doc, h.floor, {_PK} FROM head h JOIN document USING (doc)")
    (claimed,) = keys("claimed")
    # (Its invariants: counts, floors, next floors, chains, live counts, the claim's row.)
    store = open_upgraded(stores, db, len(commits), before)
    last = 3 * REVISIONS_KEPT + 6
    assert_every_basis_meets(store, before, len(commits), v4_session)
    conn = store._reader_conn()
    # The commit that only claimed keeps its seq, session and local seq, in a row of
    # its own; the version 5 tables are gone.
    assert [(2, "old@1", 2, 0)] == conn.execute(
        "SELECT l.seq, s.key, l.local_seq, l.live FROM log l JOIN session s"
        " ON s.id = l.session WHERE l.entries = '[]'"
    ).fetchall()
    assert not conn.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE '%revision%'"
    ).fetchall()
    # The store goes on: create-only meets the old claim, the churned document is
    # pruned by its upgraded next floor, and another store's session that loaded the
    # documents before hears of every later commit.
    watcher = stores(db)
    watching = Space(watcher, "h")
    assert last == watching.get_cell("churned").get()["x"]
    goes_on_after_upgrade(store, watcher, watching, claimed, db, 2 * REVISIONS_KEPT + 2)
    # A cellweave of format 5 still holding the file open cannot commit to it: its
    # revision row has no table, so the commit writes nothing.
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table: revision"):
            conn.execute(
                "INSERT INTO revision (seq, session, local_seq, id, doc, prev, paths)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (store.seq + 1, 1, 1, 10**6, 1, 0, "[]"),
            )
    finally:
        conn.close()


def test_a_version_5_file_with_a_large_commit_is_upgraded_into_parts(
    monkeypatch: pytest.MonkeyPatch, stores: Make, db: FsPath
) -> None:
    # (`monkeypatch` first: its undoing comes after the stores' closing checks.)
    # Parts of 4 entries: the last commit, of 10 documents, keeps its 4 lowest-numbered
    # documents' entries in its log row (which counts all 10 live) and the others in
    # parts of 4 and 2 keyed by their first document, as a commit of format 6 writes
    # them: every basis meets what it met before, and the store goes on.
    monkeypatch.setattr(cells.stores.sqlite, "_PART", 4)
    wide = keys(*(f"wide-{i}" for i in range(10)))
    commits = old_commits()
    commits.append(({k: ({"value": i}, [["value"]]) for i, k in enumerate(wide)}, []))
    write_v5_file(db, commits)
    before = v3_history(db, f"SELECT h.doc, h.floor, {_PK} FROM head h JOIN document USING (doc)")
    store = open_upgraded(stores, db, len(commits), before)  # (and its invariants)
    assert_every_basis_meets(store, before, len(commits), v4_session)
    conn = store._reader_conn()
    numbers = sorted(
        conn.execute(f"SELECT doc FROM document WHERE {_MATCH}", key_params(k)).fetchone()[0]
        for k in wide
    )
    last = len(commits)
    assert [(10, 4)] == conn.execute(
        "SELECT live, json_array_length(entries) FROM log WHERE seq = ?", (last,)
    ).fetchall()
    assert [(last, numbers[4], 4, 4), (last, numbers[8], 2, 2)] == conn.execute(
        "SELECT seq, first, live, json_array_length(entries) FROM log_part ORDER BY first"
    ).fetchall()
    space = Space(store, "h")
    tx = space.edit()
    for i, k in enumerate(wide):
        tx.write(k, ("value",), -i)
    assert tx.commit().wait(WAIT).ok
    store._check()
    assert [-i for i in range(10)] == [store.read_durable(k)["value"] for k in wide]


def test_a_failed_version_5_upgrade_leaves_the_file_as_it_was(db: FsPath) -> None:
    write_v5_file(db, old_commits())
    conn = sqlite3.connect(db)
    # Damaged: the newest revision lost its paths.
    conn.execute("UPDATE revision SET paths = 'not json' WHERE id = (SELECT MAX(id) FROM revision)")
    conn.commit()
    content = list(conn.iterdump())
    conn.close()
    with pytest.raises(StoreError, match="cannot initialize the store") as info:
        SQLiteStore(db, poll_interval=0)
    assert "JSON" in str(info.value)
    assert "5" == meta_version(db)
    conn = sqlite3.connect(db)
    try:  # the upgrade rolled back: every table, row and index as it was
        assert content == list(conn.iterdump())
    finally:
        conn.close()


def test_a_version_6_file_is_read_as_it_is_when_opened(stores: Make, db: FsPath) -> None:
    # Version 7 writes the paths of an entry that wrote a cell's whole value as `0`
    # (`[["value"]]`); a version 6 file's entries are read as they are: opening it
    # changes only its version number, every basis meets what it met, and its own
    # entries and the new ones (`0`) are walked alike.
    commits = old_commits()
    write_v5_file(db, commits)
    before = v3_history(db, f"SELECT h.doc, h.floor, {_PK} FROM head h JOIN document USING (doc)")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for stmt in cells.stores.sqlite._upgrade_5_to_6(cells.stores.sqlite._PART):
        conn.execute(stmt)
    conn.execute("UPDATE meta SET value = '6' WHERE key = 'version'")
    conn.execute("COMMIT")
    entries = conn.execute("SELECT seq, entries FROM log ORDER BY seq").fetchall()
    conn.close()
    assert any('[["value"]]' in text for _, text in entries)  # (a version 6 entry of it)
    store = open_upgraded(stores, db, len(commits), before)  # (and its invariants)
    conn = store._reader_conn()
    assert entries == conn.execute("SELECT seq, entries FROM log ORDER BY seq").fetchall()
    assert_every_basis_meets(store, before, len(commits), v4_session)
    (once,) = keys("once")
    once_seq = len(commits) + 1
    assert Space(store, "h").get_cell("once").set({"x": 2}).wait(WAIT).ok
    doc = conn.execute(f"SELECT doc FROM document WHERE {_MATCH}", key_params(once)).fetchone()[0]
    assert [[doc, 1, 0]] == json.loads(
        conn.execute("SELECT entries FROM log WHERE seq = ?", (once_seq,)).fetchone()[0]
    )
    got = store._revisions_since(store._reader_conn(), "s", "s@1", once, 0)
    assert [(1, (("value",),)), (once_seq, (("value",),))] == [(r.seq, r.paths) for r in got]
    store._check()


def test_an_entry_whose_paths_are_neither_a_list_nor_0_is_corrupt(db: FsPath) -> None:
    store = SQLiteStore(db, poll_interval=0)
    try:
        cell = Space(store, "h").get_cell("x")
        for n in range(2):
            assert cell.set(n).wait(WAIT).ok
        conn = sqlite3.connect(db)
        conn.execute("UPDATE log SET entries = replace(entries, ',0]', ',5]') WHERE seq = 2")
        conn.commit()
        conn.close()
        with pytest.raises(AssertionError, match="previous revision or paths"):
            store._check()
        with pytest.raises(CorruptStoreError, match="5"):
            store._revisions_since(store._reader_conn(), "s", "s@1", cell.doc_key, 0)
    finally:
        store.close()

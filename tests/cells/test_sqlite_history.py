"""SQLiteStore keeps bounded history, as MemoryStore does (issue 13 item 6).

Each document keeps its newest `REVISIONS_KEPT` revisions (pruned when it has twice
that many); a read whose basis is older than what was pruned conflicts; pollers that
fell behind the pruned window still catch up on every document; commit_log keeps
only rows something names. A version 1 file is upgraded when opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest

from cells import MISSING, ConflictError, Outcome, Space, SQLiteStore
from cells.stores.memory import REVISIONS_KEPT
from cells.stores.sqlite import VERSION

Make = Callable[..., SQLiteStore]
WAIT = 20.0


@pytest.fixture
def db(tmp_path: FsPath) -> FsPath:
    return tmp_path / "cells.db"


@pytest.fixture
def stores() -> Iterator[Make]:
    opened: list[SQLiteStore] = []

    def make(path: FsPath, **kwargs: Any) -> SQLiteStore:
        kwargs.setdefault("poll_interval", 0)
        kwargs.setdefault("synchronous", "OFF")  # history, not durability, is tested here
        store = SQLiteStore(path, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            store._check()
            store.close()


def rows(db: FsPath, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
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
    assert REVISIONS_KEPT <= rows(db, "revision") <= 2 * REVISIONS_KEPT
    assert REVISIONS_KEPT <= rows(db, "commit_log") <= 2 * REVISIONS_KEPT
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
    assert rows(db, "revision") <= len(docs) * (REVISIONS_KEPT + 2)
    assert rows(db, "revision_floor") == len(docs)
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
    assert rows(db, "revision") <= 2 * REVISIONS_KEPT
    assert 0 == rows(db, "rejection")


def test_a_version_1_file_is_upgraded_when_opened(stores: Make, db: FsPath) -> None:
    with SQLiteStore(db, poll_interval=0) as store:
        assert Space(store, "h").get_cell("doc").set(1).wait(WAIT).ok
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP TABLE revision_floor; DROP INDEX head_by_seq; DROP INDEX claimed_by_seq;"
        " UPDATE meta SET value = '1' WHERE key = 'version';"
    )
    conn.close()
    store = stores(db)
    space = Space(store, "h")
    assert 1 == space.get_cell("doc").get()
    for i in range(3 * REVISIONS_KEPT):
        assert space.get_cell("doc").set(i).wait(WAIT).ok
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0]
    conn.close()
    assert str(VERSION) == version
    assert rows(db, "revision") <= 2 * REVISIONS_KEPT

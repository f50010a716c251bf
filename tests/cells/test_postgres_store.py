"""PostgresStore against a real, throwaway PostgreSQL server (bench/pg_cluster.py).

The store-generic tests of the SQLite suites (round trips, conflicts between store
objects, dependencies, create-only, test gates, foreign delivery by poll, closing,
bounded history, value rules) run here unchanged, through this module's fixtures:
`db` names a fresh schema instead of a file, and `stores(db)` opens a PostgresStore
on it. Several store objects on one schema stand in for several processes; the
integrate test uses a real subprocess. No mocks: a stopped server, an unknown role, a
missing database and a schema of a newer version are all real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path as FsPath
from typing import Any

import psycopg
import pytest
import test_sqlite_history as sqlite_history
import test_sqlite_store as sqlite_store
import test_value_rules as value_rules

from bench.pg_cluster import Cluster
from cells import (
    MISSING,
    CorruptStoreError,
    DocKey,
    Outcome,
    PostgresStore,
    Space,
    StoreBase,
    StoreError,
    value_equal,
)
from cells.errors import InvalidArgumentError, LivenessError, TerminalCommitError
from cells.stores.memory import REVISIONS_KEPT
from cells.stores.postgres import VERSION

REPO = FsPath(__file__).resolve().parents[2]
WAIT = 20.0
"""Bound on every wait for a verdict or a subprocess (I/O waits, not race control)."""

Make = Callable[..., PostgresStore]


@pytest.fixture
def db() -> str:
    """A fresh schema name: each test starts on an empty store."""
    return f"t_{uuid.uuid4().hex}"


@pytest.fixture
def stores(pg_cluster: Cluster) -> Iterator[Make]:
    """Open PostgresStores (polling off unless asked); checked, closed and dropped after."""
    opened: list[PostgresStore] = []

    def make(schema: str, **kwargs: Any) -> PostgresStore:
        kwargs.setdefault("poll_interval", 0)
        store = PostgresStore(pg_cluster.dsn, schema=schema, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            store._check()
        store.close()
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        for schema in {s.schema for s in opened}:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def make_store(stores: Make, db: str) -> Callable[[], StoreBase]:
    """For the value-rule tests: every store opens the same schema."""
    return lambda: stores(db)


def rows(pg_cluster: Cluster, schema: str, table: str) -> int:
    with psycopg.connect(pg_cluster.dsn) as conn:
        row = conn.execute(f"SELECT COUNT(*) FROM {schema}.{table}").fetchone()
        assert row is not None
        return int(row[0])


# --------------------------------------------------------------------------- the generic suites

test_commit_through_one_store_integrates_in_another_after_poll = (
    sqlite_store.test_commit_through_one_store_integrates_in_another_after_poll
)
test_conflicting_commits_from_two_stores_reject_the_second = (
    sqlite_store.test_conflicting_commits_from_two_stores_reject_the_second
)
test_commit_built_on_a_rejected_commit_is_rejected_as_dependent = (
    sqlite_store.test_commit_built_on_a_rejected_commit_is_rejected_as_dependent
)
test_blind_write_below_a_replaced_value_is_a_conflict = (
    sqlite_store.test_blind_write_below_a_replaced_value_is_a_conflict
)
test_create_only_has_one_winner_even_after_delete = (
    sqlite_store.test_create_only_has_one_winner_even_after_delete
)
test_create_only_claim_without_write_blocks_later_creates = (
    sqlite_store.test_create_only_claim_without_write_blocks_later_creates
)
test_sessions_with_equal_ids_never_mix = sqlite_store.test_sessions_with_equal_ids_never_mix
test_hold_verdicts_accept_and_reject = sqlite_store.test_hold_verdicts_accept_and_reject
test_hold_loads_release_and_fail = sqlite_store.test_hold_loads_release_and_fail
test_poll_delivers_each_foreign_commit_once_in_seq_order = (
    sqlite_store.test_poll_delivers_each_foreign_commit_once_in_seq_order
)
test_writer_delivers_missed_foreign_commits_before_its_own = (
    sqlite_store.test_writer_delivers_missed_foreign_commits_before_its_own
)
test_close_answers_queued_commits_and_refuses_new_ones = (
    sqlite_store.test_close_answers_queued_commits_and_refuses_new_ones
)
test_close_fails_commits_held_by_a_gate = sqlite_store.test_close_fails_commits_held_by_a_gate
test_commits_from_many_threads_get_gap_free_seqs = (
    sqlite_store.test_commits_from_many_threads_get_gap_free_seqs
)

test_a_basis_older_than_the_pruned_revisions_conflicts = (
    sqlite_history.test_a_basis_older_than_the_pruned_revisions_conflicts
)
test_a_basis_inside_the_kept_window_still_commits = (
    sqlite_history.test_a_basis_inside_the_kept_window_still_commits
)
test_a_poller_behind_the_pruned_window_catches_up_on_every_document = (
    sqlite_history.test_a_poller_behind_the_pruned_window_catches_up_on_every_document
)

test_whole_value_and_path_writes_read_back_after_reopening = (
    value_rules.test_whole_value_and_path_writes_read_back_after_reopening
)
test_refused_on_every_store_alike_before_anything_is_staged = (
    value_rules.test_refused_on_every_store_alike_before_anything_is_staged
)
test_the_deepest_value_allowed_is_stored_and_read_back = (
    value_rules.test_the_deepest_value_allowed_is_stored_and_read_back
)
test_a_write_path_longer_than_a_document_may_nest_is_refused = (
    value_rules.test_a_write_path_longer_than_a_document_may_nest_is_refused
)
test_edit_with_retry_does_not_retry_a_refused_value = (
    value_rules.test_edit_with_retry_does_not_retry_a_refused_value
)


# --------------------------------------------------------------------------- PostgreSQL's own


def test_values_round_trip_through_the_server(stores: Make, db: str) -> None:
    first = stores(db)
    cell = Space(first, "notes").cell("doc")
    assert cell.set(sqlite_store.SAMPLE).wait(WAIT).ok
    first.close()
    stored = stores(db).read_durable(cell.doc_key)
    assert value_equal({"value": sqlite_store.SAMPLE}, stored)
    assert stored["value"]["int64"] == [2**63 - 1, -(2**63)]


def test_acknowledged_commit_survives_close_and_reopen(stores: Make, db: str) -> None:
    store = stores(db)
    space = Space(store, "d")
    assert space.cell("kept").set({"n": 1}).wait(WAIT).ok
    assert space.cell("gone").set("soon deleted").wait(WAIT).ok
    assert space.cell("gone").delete().wait(WAIT).ok
    store.close()
    again = stores(db)
    s2 = Space(again, "d")
    assert s2.cell("kept").get() == {"n": 1}
    assert again.read_durable(s2.cell("gone").doc_key) == {}  # value key deleted
    assert again.seq == 3
    assert "seq=3" in repr(again) and f"schema={db}" in repr(again)


def test_history_of_one_document_stays_bounded_under_churn(
    stores: Make, db: str, pg_cluster: Cluster
) -> None:
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
    assert cycles == store.seq
    assert REVISIONS_KEPT <= rows(pg_cluster, db, "revision") <= 2 * REVISIONS_KEPT
    store._check()


INTEGRATOR = r"""
import sys
from cells import PostgresStore, Space

with PostgresStore(sys.argv[1], schema=sys.argv[2], poll_interval=0) as store:
    result = Space(store, "shared").cell("doc").set({"from": "child", "n": -0.0}).wait(30)
    assert result.ok, result
    print("ACK", result.seq, flush=True)
"""


def test_commit_from_another_process_integrates_after_poll(
    stores: Make, db: str, pg_cluster: Cluster
) -> None:
    store = stores(db)
    space = Space(store, "shared")
    cell = space.cell("doc")
    assert MISSING is cell.get()
    notes = sqlite_store.record(space)
    done = subprocess.run(
        [sys.executable, "-c", INTEGRATOR, pg_cluster.dsn, db],
        capture_output=True,
        cwd=REPO,
        timeout=WAIT * 3,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"ACK 1\n"
    assert store.poll() == 1
    space.replica.pump()
    assert [n.kind for n in notes] == ["integrate"]
    assert value_equal({"from": "child", "n": -0.0}, cell.get())


def _wait_for(space: Space, notes: list[Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not notes and time.monotonic() < deadline:
        space.replica.mailbox.wait_for_items(deadline - time.monotonic())
        space.replica.pump()


def test_a_notification_wakes_the_listener_long_before_its_poll_interval(
    stores: Make, db: str
) -> None:
    store = stores(db, poll_interval=3600)  # only a notification can deliver in time
    space = Space(store, "t")
    cell = space.cell("doc")
    assert MISSING is cell.get()
    notes = sqlite_store.record(space)
    # LISTENing, and the one poll after LISTEN is done: only a notification can deliver now.
    assert store._listening.wait(WAIT)
    assert Space(stores(db), "t").cell("doc").set("hi").wait(WAIT).ok
    _wait_for(space, notes)
    assert [n.kind for n in notes] == ["integrate"]
    assert cell.get() == "hi"


def test_a_lost_notification_delays_delivery_by_at_most_one_poll(stores: Make, db: str) -> None:
    store = stores(db, poll_interval=0.2)
    space = Space(store, "t")
    cell = space.cell("doc")
    assert MISSING is cell.get()
    notes = sqlite_store.record(space)
    writer = stores(db)
    writer._channel = "nobody_listens_here"  # its notification is lost
    assert Space(writer, "t").cell("doc").set("caught up by seq").wait(WAIT).ok
    _wait_for(space, notes)
    assert [n.kind for n in notes] == ["integrate"]
    assert cell.get() == "caught up by seq"
    store.close()
    assert not store._listener_thread or not store._listener_thread.is_alive()


CRASHER = r"""
import sys
from cells import PostgresStore, Space

store = PostgresStore(sys.argv[1], poll_interval=0)
space = Space(store, "crash")
i = 0
while True:  # commit until killed; the parent kills right after an acknowledgement
    result = space.cell(f"doc-{i}").set({"i": i, "pad": "x" * 500}).wait(30)
    if not result.ok:
        print("FAIL", result, flush=True)
        sys.exit(1)
    print(f"ACK {result.seq} {i}", flush=True)
    i += 1
"""


def test_acknowledged_commits_survive_kill_9_of_the_writer_and_a_server_crash() -> None:
    server = Cluster()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHER, server.dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            bufsize=0,
        )
        acked: dict[int, int] = {}
        try:
            lines = sqlite_store.Lines(proc)
            while len(acked) < 20:
                word, seq_text, i_text = lines.next().split()
                assert word == "ACK"
                acked[int(i_text)] = int(seq_text)
            os.kill(proc.pid, signal.SIGKILL)  # in the middle of the next commit
            server.restart(crash=True)  # and the server dies too, without a checkpoint
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(WAIT)
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            stderr = proc.stderr.read()
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, stderr

        with PostgresStore(server.dsn, poll_interval=0) as store:
            space = Space(store, "crash")
            for i, seq in acked.items():
                key = space.cell(f"doc-{i}").doc_key
                assert {"value": {"i": i, "pad": "x" * 500}} == store.read_durable(key)
                assert seq == store._read(key).seq
            assert store.seq >= 20
            store._check()
    finally:
        server.stop()


# --------------------------------------------------------------------------- failures


def test_a_stopped_server_fails_commits_as_liveness_and_reads_as_store_errors() -> None:
    with_server = Cluster()
    try:
        store = PostgresStore(with_server.dsn, poll_interval=0, connect_timeout=2)
        space = Space(store, "f")
        assert space.cell("x").set(1).wait(WAIT).ok
        # Another store LISTENing: its connection dies with the server.
        watcher = PostgresStore(with_server.dsn, poll_interval=0.2, connect_timeout=2)
        watching = Space(watcher, "f")
        assert MISSING is watching.cell("y").get()
        notes = sqlite_store.record(watching)
        assert watcher._listening.wait(WAIT)
        with_server.stop_server()

        result = space.cell("x").set(2).wait(WAIT)
        assert Outcome.LIVENESS is result.outcome
        assert isinstance(result.error, LivenessError)
        assert isinstance(result.error.__cause__, StoreError)
        assert "postgresql://" in str(result.error)
        with pytest.raises(StoreError, match="cannot read"):
            store.read_durable(DocKey("f", "x"))
        with pytest.raises(StoreError, match="poll failed"):
            store.poll()

        with_server.restart()  # the store reconnects on its own (the pool backs off)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                assert store.seq == 1
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
        again = space.cell("y").set(3).wait(WAIT)
        assert again.ok, again
        assert {"value": 1} == store.read_durable(DocKey("f", "x"))
        # The watcher listens again and catches up by seq: the commit reaches it.
        _wait_for(watching, notes)
        assert [n.kind for n in notes] == ["integrate"]
        assert 3 == watching.cell("y").get()
        store._check()
        watcher._check()
        watching.replica.close()
        watcher.close()
        store.close()
    finally:
        with_server.stop()


def test_what_the_database_refuses_settles_terminal_and_raises_store_errors(
    stores: Make, db: str
) -> None:
    """PostgreSQL text cannot hold NUL, which a document id may: no raw psycopg error."""
    store = stores(db)
    space = Space(store, "n")
    key = DocKey("n", "a\x00b")
    tx = space.edit()
    with pytest.raises(StoreError, match="cannot read"):
        tx.write(key, ("value",), 1)  # staging loads the document
    tx = space.edit()
    tx.create_only(key)  # loads nothing: the store meets the key in the commit
    result = tx.commit().wait(WAIT)
    assert Outcome.TERMINAL is result.outcome
    assert isinstance(result.error, TerminalCommitError)
    assert isinstance(result.error.__cause__, StoreError)
    assert "NUL" in str(result.error)
    with pytest.raises(StoreError, match="cannot read"):
        store.read_durable(key)
    assert space.cell("fine").set(1).wait(WAIT).ok  # the store goes on


def test_an_unreachable_server_is_a_store_error(tmp_path: FsPath) -> None:
    with pytest.raises(StoreError, match="unreachable") as info:
        PostgresStore(f"host={tmp_path} port=5999 user=x dbname=x password=hunter2")
    assert "hunter2" not in str(info.value)
    assert not isinstance(info.value, psycopg.Error)


def test_an_unknown_role_is_an_authentication_error(pg_cluster: Cluster) -> None:
    dsn = f"host={pg_cluster.socket_dir} port={pg_cluster.port} user=nobody_here dbname=postgres"
    with pytest.raises(StoreError, match="authentication failed"):
        PostgresStore(dsn)


def test_a_missing_database_is_a_store_error(pg_cluster: Cluster) -> None:
    with pytest.raises(StoreError, match="no such database"):
        PostgresStore(pg_cluster.dsn_for("no_such_db"))


def test_a_schema_of_a_newer_version_is_refused_untouched(
    stores: Make, db: str, pg_cluster: Cluster
) -> None:
    stores(db).close()
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {db}.meta SET value = %s WHERE key = 'version'", (str(VERSION + 1),))
    with pytest.raises(CorruptStoreError, match="newer cellweave"):
        stores(db)
    with psycopg.connect(pg_cluster.dsn) as conn:
        row = conn.execute(f"SELECT value FROM {db}.meta WHERE key = 'version'").fetchone()
    assert row == (str(VERSION + 1),)


def test_a_schema_that_is_not_a_store_is_refused_untouched(
    stores: Make, db: str, pg_cluster: Cluster
) -> None:
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {db}")
        conn.execute(f"CREATE TABLE {db}.customers (id int)")
    with pytest.raises(CorruptStoreError, match="not a cellweave store"):
        stores(db)
    assert 0 == rows(pg_cluster, db, "customers")


def test_a_schema_named_like_a_keyword_works(stores: Make, pg_cluster: Cluster) -> None:
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute('DROP SCHEMA IF EXISTS "user" CASCADE')
    a, b = stores("user"), stores("user")
    assert Space(a, "k").cell("x").set(1).wait(WAIT).ok
    assert b.poll() == 0  # nobody connected to b: nothing to deliver
    assert {"value": 1} == b.read_durable(DocKey("k", "x"))


def test_bad_arguments_are_refused(pg_cluster: Cluster) -> None:
    with pytest.raises(InvalidArgumentError):
        PostgresStore(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="schema"):
        PostgresStore(pg_cluster.dsn, schema="Robert'); DROP TABLE x;--")
    with pytest.raises(InvalidArgumentError, match="poll_interval"):
        PostgresStore(pg_cluster.dsn, poll_interval=-1)
    with pytest.raises(InvalidArgumentError, match="pool_size"):
        PostgresStore(pg_cluster.dsn, pool_size=0)
    with pytest.raises(InvalidArgumentError, match="dsn") as info:
        PostgresStore("password=hunter2 host='unterminated")
    assert "hunter2" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="connect_timeout"):
        PostgresStore(pg_cluster.dsn, connect_timeout=0)


class LoadRecorder(sqlite_store.Recorder):
    """Records the loads the store answers, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[tuple[DocKey, Any, BaseException | None]] = []

    def on_loaded(self, key: DocKey, state: Any, error: BaseException | None) -> None:
        self.loaded.append((key, state, error))


def test_loads_asked_in_one_step_are_read_together_and_answered_in_order(
    stores: Make, db: str
) -> None:
    """A replica's loads of one mailbox step go out as one read (a takeover's page
    starts): every document answers with its own state, a missing one as missing, a
    document asked twice twice, and a load asked after the read went out waits for
    the next read (it sees a commit made in between)."""
    writer, reader = stores(db), stores(db)
    sw = Space(writer, "m")
    for name, value in (("a", 1), ("b", 2), ("c", 3)):
        assert sw.cell(name).set(value).wait(WAIT).ok
    recorder = LoadRecorder()
    reader.connect(recorder)
    keys = [sw.cell(name).doc_key for name in ("a", "b", "nope", "c", "a")]
    for key in keys:
        reader.load(recorder, key)
    assert recorder.loaded == []  # nothing read yet: the batch is read when the mailbox runs
    recorder.mailbox.drain()
    got = [(k, s.seq if s else None, s.value if s else None, e) for k, s, e in recorder.loaded]
    assert got == [
        (keys[0], 1, {"value": 1}, None),
        (keys[1], 2, {"value": 2}, None),
        (keys[2], 0, MISSING, None),
        (keys[3], 3, {"value": 3}, None),
        (keys[4], 1, {"value": 1}, None),
    ]
    reader.load(recorder, keys[1])
    assert sw.cell("b").set(20).wait(WAIT).ok
    recorder.mailbox.drain()
    assert recorder.loaded[-1][1] is not None and recorder.loaded[-1][1].value == {"value": 20}

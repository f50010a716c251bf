"""SQLiteStore: durability, cross-store and cross-process fan-out, refusal of foreign files.

Several `SQLiteStore` objects on one file stand in for several processes
(each has its own connections and writer thread); the kill -9 and
integrate tests use real subprocesses. `poll_interval=0` everywhere except
the polling-thread test, so foreign changes arrive exactly at `poll()`.
"""

from __future__ import annotations

import math
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Any

import pytest
from sqlite_support import Make, open_stores

from cells import (
    MISSING,
    CorruptStoreError,
    DocKey,
    Link,
    Notification,
    Outcome,
    Replica,
    Space,
    SQLiteStore,
    StoreError,
    value_equal,
)
from cells._pending import Mailbox
from cells._store import CommitRequest, DocState, Verdict
from cells._values import Value
from cells.errors import ConflictError, DependencyRejectedError, LivenessError
from cells.stores.sqlite import VERSION

REPO = FsPath(__file__).resolve().parents[2]
WAIT = 20.0
"""Bound on every wait for a verdict or a subprocess line (I/O waits, not race control)."""

SAMPLE: dict[str, Any] = {
    "neg_zero": -0.0,
    "/": {"num@1": "NaN"},
    "tags": [{"/": {"link@1": 1}}, {"/": "x"}, {"/": {"dict@1": {}}}],
    "tenth": 0.1,
    "int64": [2**63 - 1, -(2**63)],
    "text": 'héllo wörld ✓ 😀 \u0000 "quoted" \\ \n',
    "ключ": {"嵌套": [1, [2, {"deep": None}], True, False], "empty": {}, "none": []},
    "link": Link("notes", "other", "user", ("items", 0)),
    "links": [Link("notes", "a"), Link("elsewhere", "b", "session", ())],
}


@pytest.fixture
def db(tmp_path: FsPath) -> FsPath:
    return tmp_path / "store" / "cells.db"


@pytest.fixture
def stores() -> Iterator[Make]:
    """Open SQLiteStores (polling off unless asked); checked and closed at teardown."""
    with open_stores() as make:
        yield make


class Recorder:
    """A bare session listener: records what the store posts, in order."""

    def __init__(self) -> None:
        self.mailbox = Mailbox()
        self.foreign: list[tuple[int, dict[DocKey, Value]]] = []
        self.verdicts: list[tuple[int, Verdict]] = []

    def on_verdict(self, request: CommitRequest, verdict: Verdict) -> None:
        self.verdicts.append((request.local_seq, verdict))

    def on_foreign(self, seq: int, docs: dict[DocKey, Value]) -> None:
        self.foreign.append((seq, docs))

    def on_loaded(self, key: DocKey, state: DocState | None, error: BaseException | None) -> None:
        raise AssertionError("not used")

    def on_accepted(self, request: CommitRequest, seq: int, base_seq: int, value: Value) -> None:
        raise AssertionError("not used: a recorder commits nothing")

    def on_accepted_many(
        self, request: CommitRequest, seq: int, values: list[Value], base_seqs: list[int]
    ) -> None:
        raise AssertionError("not used: a recorder commits nothing")

    def accept_runs(self, runs: list[Any], results: list[Any], start: int) -> None:
        raise AssertionError("not used: a recorder commits nothing")

    def accept_entry(self, entry: tuple[Any, ...], seq: int, base_seq: int, value: Value) -> None:
        raise AssertionError("not used: a recorder commits nothing")

    def low_water(self) -> int | None:
        return None  # it commits nothing: it needs no revision history


def record(space: Space) -> list[Notification]:
    notes: list[Notification] = []
    space.replica.subscribe(notes.append)
    return notes


def file_state(path: FsPath) -> tuple[bytes, list[str]]:
    return path.read_bytes(), sorted(os.listdir(path.parent))


# --------------------------------------------------------------------------- round trips


def test_commit_through_one_store_integrates_in_another_after_poll(
    stores: Make, db: FsPath
) -> None:
    a, b = stores(db), stores(db)
    sa, sb = Space(a, "notes"), Space(b, "notes")
    cb = sb.cell("doc")
    assert cb.get() is MISSING  # loaded (absent) before the other store writes
    notes = record(sb)

    result = sa.cell("doc").set(SAMPLE).wait(WAIT)
    assert result.ok
    assert notes == []  # nothing crosses stores before poll()

    assert b.poll() == 1
    sb.replica.pump()
    assert [n.kind for n in notes] == ["integrate"]
    (change,) = notes[0].changes
    assert change.key == cb.doc_key
    assert value_equal({"value": SAMPLE}, change.after)
    assert math.copysign(1.0, change.after["value"]["neg_zero"]) == -1.0
    assert value_equal({"value": SAMPLE}, sb.replica.visible(cb.doc_key))
    assert b.poll() == 0  # nothing new: no second delivery


def test_values_round_trip_through_the_file(stores: Make, db: FsPath) -> None:
    with SQLiteStore(db, poll_interval=0) as first:
        cell = Space(first, "notes").cell("doc")
        key = cell.doc_key
        assert cell.set(SAMPLE).wait(WAIT).ok
    reopened = stores(db)
    stored = reopened.read_durable(key)
    assert value_equal({"value": SAMPLE}, stored)
    assert type(stored["value"]["link"]) is Link
    assert stored["value"]["int64"] == [2**63 - 1, -(2**63)]


def test_acknowledged_commit_survives_close_and_reopen(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "d")
    assert space.cell("kept").set({"n": 1}).wait(WAIT).ok
    assert space.cell("gone").set("soon deleted").wait(WAIT).ok
    assert space.cell("gone").delete().wait(WAIT).ok
    store.close()

    again = stores(db)
    s2 = Space(again, "d")
    assert s2.cell("kept").get() == {"n": 1}
    assert again.read_durable(s2.cell("kept").doc_key) == {"value": {"n": 1}}
    assert again.read_durable(s2.cell("gone").doc_key) == {}  # value key deleted
    assert again.seq == 3
    assert "seq=3" in repr(again) and "cells.db" in repr(again)


CRASHER = r"""
import sys
from cells import SQLiteStore, Space

store = SQLiteStore(sys.argv[1], poll_interval=0)
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


class Lines:
    """Lines of a subprocess's stdout, each waited for at most `WAIT` seconds."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self._fd = proc.stdout.fileno()
        self._buf = b""

    def next(self) -> str:
        deadline = time.monotonic() + WAIT
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise TimeoutError(f"no line from the subprocess within {WAIT} s")
            chunk = os.read(self._fd, 4096)
            if not chunk:
                raise EOFError(f"subprocess output ended: {self._buf!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()


def test_acknowledged_commits_survive_kill_9(stores: Make, db: FsPath) -> None:
    db.parent.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        bufsize=0,
    )
    acked: dict[int, int] = {}
    try:
        lines = Lines(proc)
        while len(acked) < 20:
            word, seq_text, i_text = lines.next().split()
            assert word == "ACK"
            acked[int(i_text)] = int(seq_text)
        os.kill(proc.pid, signal.SIGKILL)  # at once: the child is in the middle of the next commit
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, stderr

    store = stores(db)
    space = Space(store, "crash")
    for i, seq in acked.items():
        key = space.cell(f"doc-{i}").doc_key
        assert {"value": {"i": i, "pad": "x" * 500}} == store.read_durable(key)
        assert seq == store._read(key).seq
    assert store.seq >= 20
    store._check()


# --------------------------------------------------------------------------- refusing files


@pytest.mark.parametrize(
    "content",
    [
        random.Random(7).randbytes(8192),
        b"hello, not a database\n",
        b"SQLite format 3\x00" + random.Random(8).randbytes(8192),
    ],
    ids=["random-bytes", "text", "sqlite-header-then-garbage"],
)
def test_file_that_is_not_a_database_is_refused_untouched(db: FsPath, content: bytes) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(content)
    before = file_state(db)
    with pytest.raises(CorruptStoreError) as info:
        SQLiteStore(db, poll_interval=0)
    assert str(db) in str(info.value)
    assert before == file_state(db)


def test_foreign_sqlite_database_is_refused_untouched(db: FsPath) -> None:
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("CREATE TABLE meta (k TEXT, v TEXT)")  # a `meta` table that is not ours
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = file_state(db)
    with pytest.raises(CorruptStoreError) as info:
        SQLiteStore(db, poll_interval=0)
    assert str(db) in str(info.value)
    assert "not a cellweave store" in str(info.value)
    assert before == file_state(db)


def test_store_of_a_newer_format_is_refused_untouched(db: FsPath) -> None:
    with SQLiteStore(db, poll_interval=0) as store:
        assert Space(store).cell("x").set(1).wait(WAIT).ok
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(VERSION + 1),))
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(CorruptStoreError) as info:
        SQLiteStore(db, poll_interval=0)
    assert str(db) in str(info.value) and "newer" in str(info.value)
    assert before == db.read_bytes()


def test_empty_file_and_missing_directories_are_initialized(stores: Make, tmp_path: FsPath) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    nested = tmp_path / "a" / "b" / "c.db"
    for path in (empty, nested):
        store = stores(path)
        assert Space(store).cell("x").set(1).wait(WAIT).ok
        store.close()
        assert stores(path).seq == 1


def test_bad_arguments_are_refused(db: FsPath) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(db, synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="poll_interval"):
        SQLiteStore(db, poll_interval=-1)
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(":memory:")
    assert not db.exists()


# --------------------------------------------------------------------------- validation


def test_conflicting_commits_from_two_stores_reject_the_second(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    sa, sb = Space(a, "c"), Space(b, "c")
    ca, cb = sa.cell("n"), sb.cell("n")
    assert ca.set(1).wait(WAIT).ok

    # Both transactions read n == 1 before either commits.
    tx_a, tx_b = sa.edit(), sb.edit()
    na, nb = ca.with_tx(tx_a).get(), cb.with_tx(tx_b).get()
    assert na == nb == 1
    ca.with_tx(tx_a).set(na + 1)
    cb.with_tx(tx_b).set(nb + 1)
    result_a = tx_a.commit().wait(WAIT)
    result_b = tx_b.commit().wait(WAIT)

    assert result_a.ok and result_a.seq == 2
    assert Outcome.STALE_BASIS is result_b.outcome
    assert isinstance(result_b.error, ConflictError)
    b.poll()
    sb.replica.pump()
    assert cb.get() == 2
    assert b.read_durable(cb.doc_key) == {"value": 2}
    assert a.seq == 2  # the rejected commit took no seq


def test_commit_built_on_a_rejected_commit_is_rejected_as_dependent(
    stores: Make, db: FsPath
) -> None:
    a, b = stores(db), stores(db)
    sb = Space(b, "d")
    ca, cb = Space(a, "d").cell("items"), sb.cell("items")
    assert ca.set([1]).wait(WAIT).ok
    tx = sb.edit()
    cb.with_tx(tx).set([*cb.with_tx(tx).get(), "b"])  # basis seq 1
    assert ca.set(["a"]).wait(WAIT).ok  # seq 2 overwrites what tx read
    first = tx.commit()
    second = cb.push("c")  # reads the pending layer of `first`: depends on it
    r1, r2 = first.wait(WAIT), second.wait(WAIT)
    assert isinstance(r1.error, ConflictError)
    assert isinstance(r2.error, DependencyRejectedError)
    assert "which was rejected" in str(r2.error)  # not "has no verdict yet"
    assert b.read_durable(cb.doc_key) == {"value": ["a"]}


def test_blind_write_below_a_replaced_value_is_a_conflict(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    ca, cb = Space(a, "w").cell("doc"), Space(b, "w").cell("doc")
    assert ca.set({"a": 1}).wait(WAIT).ok
    assert cb.get() == {"a": 1}
    assert ca.set("now a string").wait(WAIT).ok
    result = cb.key("a").set(2).wait(WAIT)  # reads nothing: only applying it can fail
    assert result.outcome is Outcome.STALE_BASIS
    assert isinstance(result.error, ConflictError)
    assert b.read_durable(cb.doc_key) == {"value": "now a string"}


def test_create_only_has_one_winner_even_after_delete(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    spaces = [Space(a, "r"), Space(b, "r"), Space(a, "r")]
    key = spaces[0].cell("receipt").doc_key
    pendings = []
    for i, sp in enumerate(spaces):
        tx = sp.edit()
        tx.create_only(key)
        tx.write(key, ("value",), f"by {i}")
        pendings.append(tx.commit())
    results = [p.wait(WAIT) for p in pendings]

    outcomes = sorted(r.outcome.value for r in results)
    assert outcomes == ["ok", "permanent", "permanent"]
    winner = spaces[[r.ok for r in results].index(True)]
    assert winner.cell("receipt").delete().wait(WAIT).ok
    tx = winner.edit()
    tx.delete(key)
    assert tx.commit().wait(WAIT).ok
    assert MISSING is a.read_durable(key)
    a.close()
    b.close()

    later = stores(db)
    tx = Space(later, "r").edit()
    tx.create_only(key)
    tx.write(key, ("value",), "again")
    assert Outcome.PERMANENT is tx.commit().wait(WAIT).outcome


def test_create_only_claim_without_write_blocks_later_creates(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "r")
    key = space.cell("claimed").doc_key
    tx = space.edit()
    tx.create_only(key)
    assert tx.commit().wait(WAIT).ok
    assert DocState(0, MISSING) == store._read(key)  # claimed, never written
    store.close()

    again = stores(db)
    tx = Space(again, "r").edit()
    tx.create_only(key)
    tx.write(key, ("value",), 1)
    assert Outcome.PERMANENT is tx.commit().wait(WAIT).outcome


def test_sessions_with_equal_ids_never_mix(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    first = Replica(a, session_id="same")
    other = Replica(b, session_id="same")  # another process choosing the same id
    assert Space(first, "s").cell("x").set(1).wait(WAIT).ok
    assert Space(other, "s").cell("y").set(1).wait(WAIT).ok
    first.close()
    again = Replica(a, session_id="same")  # reconnect: local seqs start at 1 again
    assert Space(again, "s").cell("x").set(2).wait(WAIT).ok
    assert a.read_durable(DocKey("s", "x")) == {"value": 2}
    assert a.seq == 3


# --------------------------------------------------------------------------- test gates


def test_hold_verdicts_accept_and_reject(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "g")
    cell = space.cell("x")
    with store.testing.hold_verdicts() as gate:
        first = cell.set([1])
        second = cell.push(2)  # read the pending [1]: depends on the first commit
        assert gate.waiting() == 2
        space.replica.pump()
        assert not first.done() and not second.done()

        gate.reject(0)
        gate.accept(0)
        r1, r2 = first.wait(WAIT), second.wait(WAIT)
        assert Outcome.STALE_BASIS is r1.outcome
        assert Outcome.STALE_BASIS is r2.outcome
        assert isinstance(r2.error, DependencyRejectedError)
        assert "which was rejected" in str(r2.error)  # the rejection was recorded

        third = cell.set("kept")
        assert gate.waiting() == 1
        gate.accept()
        assert third.wait(WAIT).ok
    assert store.read_durable(cell.doc_key) == {"value": "kept"}
    assert store.seq == 1


def test_hold_loads_release_and_fail(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    assert Space(a, "l").cell("x").set(7).wait(WAIT).ok
    sb = Space(b, "l")
    cell = sb.cell("x")
    notes = record(sb)
    with b.testing.hold_loads(cell) as gate:
        assert MISSING is cell.get()
        assert gate.waiting() == 1
        sb.replica.pump()
        assert notes == []
        gate.release()
    sb.replica.pump()
    assert [n.kind for n in notes] == ["load"]
    assert cell.get() == 7

    other = sb.cell("y").doc_key
    gate = b.testing.hold_loads(other)
    pending = sb.replica.sync([other])
    assert gate.waiting() == 1
    gate.fail()
    with pytest.raises(LivenessError):
        pending.wait(WAIT)


# --------------------------------------------------------------------------- foreign changes


def test_poll_delivers_each_foreign_commit_once_in_seq_order(stores: Make, db: FsPath) -> None:
    writer, reader = stores(db), stores(db)
    recorder = Recorder()
    reader.connect(recorder)
    sw = Space(writer, "p")
    x, y = sw.cell("x").doc_key, sw.cell("y").doc_key
    assert sw.cell("x").set(1).wait(WAIT).ok  # seq 1: superseded below, never delivered
    tx = sw.edit()
    tx.write(x, ("value",), 2)
    tx.write(y, ("value",), "y")
    assert tx.commit().wait(WAIT).ok  # seq 2: x superseded, y delivered
    assert sw.cell("x").set(3).wait(WAIT).ok  # seq 3

    assert reader.poll() == 2
    recorder.mailbox.drain()
    assert [(2, {y: {"value": "y"}}), (3, {x: {"value": 3}})] == recorder.foreign
    assert reader.poll() == 0
    assert sw.cell("x").delete().wait(WAIT).ok
    assert reader.poll() == 1
    recorder.mailbox.drain()
    assert (4, {x: {}}) == recorder.foreign[-1]


def test_writer_delivers_missed_foreign_commits_before_its_own(stores: Make, db: FsPath) -> None:
    a, b = stores(db), stores(db)
    recorder = Recorder()
    a.connect(recorder)
    sa, sb = Space(a, "w"), Space(b, "w")
    assert sb.cell("y").set("from b").wait(WAIT).ok  # seq 1, a never polled
    assert sa.cell("x").set("from a").wait(WAIT).ok  # seq 2
    recorder.mailbox.drain()
    assert [seq for seq, _ in recorder.foreign] == [1, 2]
    assert {sb.cell("y").doc_key: {"value": "from b"}} == recorder.foreign[0][1]
    assert a.poll() == 0


INTEGRATOR = r"""
import sys
from cells import SQLiteStore, Space

with SQLiteStore(sys.argv[1], poll_interval=0) as store:
    result = Space(store, "shared").cell("doc").set({"from": "child", "n": -0.0}).wait(30)
    assert result.ok, result
    print("ACK", result.seq, flush=True)
"""


def test_commit_from_another_process_integrates_after_poll(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "shared")
    cell = space.cell("doc")
    assert MISSING is cell.get()
    notes = record(space)

    done = subprocess.run(
        [sys.executable, "-c", INTEGRATOR, str(db)],
        capture_output=True,
        cwd=REPO,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"ACK 1\n"

    assert store.poll() == 1
    space.replica.pump()
    assert [n.kind for n in notes] == ["integrate"]
    assert value_equal({"from": "child", "n": -0.0}, cell.get())


def test_polling_thread_delivers_foreign_commits(stores: Make, db: FsPath) -> None:
    store = stores(db, poll_interval=0.01)
    space = Space(store, "t")
    cell = space.cell("doc")
    assert MISSING is cell.get()
    notes = record(space)
    other = stores(db)
    assert Space(other, "t").cell("doc").set("hi").wait(WAIT).ok

    deadline = time.monotonic() + WAIT
    while not notes and time.monotonic() < deadline:
        space.replica.mailbox.wait_for_items(deadline - time.monotonic())
        space.replica.pump()
    assert [n.kind for n in notes] == ["integrate"]
    assert cell.get() == "hi"
    store.close()
    names = [t.name for t in threading.enumerate() if t.is_alive()]
    assert not [n for n in names if n.startswith("cellweave-sqlite-poll") and str(db) in n]


# --------------------------------------------------------------------------- threads and closing


def test_close_answers_queued_commits_and_refuses_new_ones(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "q")
    pendings = [space.cell(f"d{i}").set(i) for i in range(10)]
    store.close()
    space.replica.pump()
    assert all(p.done() and p.result().ok for p in pendings)
    with pytest.raises(StoreError, match="closed"):
        space.cell("late").set(1)

    again = stores(db)
    assert [{"value": i} for i in range(10)] == [
        again.read_durable(DocKey("q", f"d{i}")) for i in range(10)
    ]


def test_close_fails_commits_held_by_a_gate(stores: Make, db: FsPath) -> None:
    store = stores(db)
    space = Space(store, "h")
    gate = store.testing.hold_verdicts()
    pending = space.cell("x").set(1)
    store.close()
    space.replica.pump()
    result = pending.result()
    assert Outcome.LIVENESS is result.outcome
    assert isinstance(result.error, LivenessError)
    assert isinstance(result.error.__cause__, StoreError)
    assert not gate.active
    assert MISSING is stores(db).read_durable(DocKey("h", "x"))


def test_commits_from_many_threads_get_gap_free_seqs(stores: Make, db: FsPath) -> None:
    store = stores(db)
    errors: list[BaseException] = []
    seqs: list[int] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        try:
            space = Space(store, "m")  # one replica per thread
            for i in range(15):
                result = space.cell(f"t{n}-{i}").set(i).wait(WAIT)
                assert result.ok and result.seq is not None, result
                with lock:
                    seqs.append(result.seq)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert errors == []
    assert list(range(1, 61)) == sorted(seqs)
    store._check()

"""Benchmarks of the cells layer: commits through a replica, in memory and on SQLite.

Groups
------
``memory commit``
    One op is one transaction that reads one cell, writes another and commits,
    with the store's verdict processed (``replica.pump()`` after every commit)
    inside the timed region. Baseline: the same read and write on plain dicts.
``sqlite commit``
    One op is one durable commit (``synchronous=FULL``) that reads one value
    and writes another, waiting for the verdict. Baseline: raw ``sqlite3``
    doing the same in a ``BEGIN IMMEDIATE`` transaction (WAL, FULL).
``sqlite batched``
    One op is one write; 100 writes go into each commit. Baseline: raw
    ``sqlite3`` upserting 100 rows with one ``executemany`` per ``BEGIN
    IMMEDIATE`` transaction (WAL, FULL): the idiomatic durable equivalent.

Both sides of both SQLite groups start on a write-ahead log grown to its
steady-state size (``_grow_wal``), and count ``wal_pages``: the pages each side
appended to its write-ahead log, read after every commit from the WAL-index
header in the ``-shm`` file (``_WalPages``), the same way on both sides.

Every SQLite benchmark works on a fresh database file in its own temporary
directory. Files are removed (and connections closed) by the next setup of
this module, which is untimed, or at exit; closing inside ``run()`` would time
the final WAL checkpoint, which no op pays in steady state.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable

from bench.harness import BenchError, Counts, Run, bench
from cells import Cell, CommitResult, MemoryStore, Replica, Space, SQLiteStore

MEMORY_OPS = 2000
SQLITE_OPS = 1000
BATCH = 100
BATCHED_COMMITS = 200
SQLITE_BATCHED_OPS = BATCH * BATCHED_COMMITS

# ---------------------------------------------------------------------------- cleanup

_leftovers: list[Callable[[], None]] = []


def _clean_up() -> None:
    """Close and delete what earlier samples left behind (called from setups, untimed)."""
    while _leftovers:
        _leftovers.pop()()


atexit.register(_clean_up)


def _temp_dir(label: str) -> str:
    path = tempfile.mkdtemp(prefix=f"cellweave-bench-{label}-")
    _leftovers.append(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def _check_ok(result: CommitResult, where: str) -> None:
    if not result.ok:
        raise BenchError(f"{where}: a commit was not accepted: {result!r}")


class _Counter:
    """The replica's counted work since construction (commits, verdicts, notifications)."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        stats = replica.stats
        self.start = (stats.commits_sent, stats.accepted, stats.notifications)

    def counts(self, **extra: int) -> Counts:
        stats = self.replica.stats
        commits, accepted, notifications = self.start
        return {
            "commits": stats.commits_sent - commits,
            "accepted": stats.accepted - accepted,
            "notifications": stats.notifications - notifications,
            **extra,
        }


def _two_cells(space: Space) -> tuple[Cell, Cell]:
    """Cells "a" (holding 1) and "b" (holding 0), committed and confirmed."""
    a = space.get_cell({"bench": "a"})
    b = space.get_cell({"bench": "b"})
    _check_ok(a.set(1).wait(), "setup")
    _check_ok(b.set(0).wait(), "setup")
    return a, b


# ---------------------------------------------------------------------------- memory commit


@bench(group="memory commit", name="plain dicts", ops=MEMORY_OPS, baseline=True)
def plain_dicts() -> Run:
    # Documents as dicts of {"value": ...}; a write replaces the document, as
    # cells never mutate a stored value in place.
    docs: dict[str, dict[str, int]] = {"a": {"value": 1}, "b": {"value": 0}}

    def run() -> Counts:
        for i in range(MEMORY_OPS):
            v = docs["a"]["value"]
            docs["b"] = {"value": v + i}
        if docs["b"]["value"] != MEMORY_OPS:
            raise BenchError("plain dicts: wrong final value")
        return {"reads": MEMORY_OPS, "writes": MEMORY_OPS}

    return run


@bench(group="memory commit", name="MemoryStore commit", ops=MEMORY_OPS)
def memory_commit() -> Run:
    _clean_up()
    space = Space(MemoryStore(), "bench")
    replica = space.replica
    a, b = _two_cells(space)
    counter = _Counter(replica)

    def run() -> Counts:
        for i in range(MEMORY_OPS):
            tx = space.edit()
            v = a.with_tx(tx).get()
            b.with_tx(tx).set(v + i)  # never equal to b's value: no commit is elided
            pending = tx.commit()
            replica.pump()  # the verdict: confirm the layer, settle the transaction
            _check_ok(pending.result(), "MemoryStore commit")
        counts = counter.counts(reads=MEMORY_OPS, writes=MEMORY_OPS)
        if counts["commits"] != MEMORY_OPS or counts["accepted"] != MEMORY_OPS:
            raise BenchError(f"MemoryStore commit: counted {counts}, not {MEMORY_OPS} commits")
        return counts

    return run


# ---------------------------------------------------------------------------- sqlite commit


class _WalPages:
    """Pages SQLite appended to a database's write-ahead log, counted from the WAL-index
    header at the start of its ``-shm`` file (SQLite's documented WAL format): ``mxFrame``
    (offset 16) is the number of valid frames, one page each; the salts (offset 32)
    change when the log restarts from its first frame after a checkpoint. Call
    ``tick()`` after every commit (a restart loses nothing then: the frames after it are
    all the commit's). One ``pread`` per call."""

    def __init__(self, db: str) -> None:
        fd = self._fd = os.open(db + "-shm", os.O_RDONLY)
        _leftovers.append(lambda: os.close(fd))
        self.pages = 0
        self._last = self._read()

    def _read(self) -> tuple[int, bytes]:
        header = os.pread(self._fd, 48, 0)
        return int.from_bytes(header[16:20], sys.byteorder), header[32:40]

    def tick(self) -> None:
        frames, salt = self._read()
        last, last_salt = self._last
        self.pages += frames - last if salt == last_salt and frames >= last else frames
        self._last = (frames, salt)


def _grow_wal(db: str) -> None:
    """Bring a fresh database's write-ahead log to its steady-state size, untimed: one
    transaction of about 1,000 pages (on another connection, on a scratch table it then
    drops) grows the log file past SQLite's checkpoint threshold, and later commits
    reuse that file from its start. On a fresh file every commit would extend the log,
    and a flush that changes the file's size costs more (the file system's metadata
    too) than one that overwrites: the side writing fewer pages per commit (raw
    ``sqlite3``) would pay that for longer. Both sides get the same treatment."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("CREATE TABLE bench_scratch (x BLOB)")
        con.execute("INSERT INTO bench_scratch VALUES (zeroblob(4100000))")
        con.execute("COMMIT")
        con.execute("DROP TABLE bench_scratch")
    finally:
        con.close()


def _raw_connection(label: str) -> tuple[sqlite3.Connection, _WalPages]:
    path = os.path.join(_temp_dir(label), "raw.db")
    # Autocommit mode: the benchmark issues BEGIN IMMEDIATE / COMMIT itself.
    con = sqlite3.connect(path, isolation_level=None)
    _leftovers.append(con.close)
    mode = con.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or mode[0] != "wal":
        raise BenchError(f"raw sqlite3: could not switch to WAL (got {mode!r})")
    con.execute("PRAGMA synchronous = FULL")
    con.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("""INSERT INTO kv VALUES ('a', '{"value": 1}'), ('b', '{"value": 0}')""")
    _grow_wal(path)
    return con, _WalPages(path)


def _sqlite_space(label: str) -> tuple[Space, _WalPages]:
    path = os.path.join(_temp_dir(label), "cells.db")
    store = SQLiteStore(path, synchronous="FULL")
    _leftovers.append(store.close)
    space = Space(store, "bench")
    _leftovers.append(space.replica.close)  # runs first: leftovers close in reverse order
    _grow_wal(path)
    return space, _WalPages(path)


@bench(group="sqlite commit", name="raw sqlite3", ops=SQLITE_OPS, baseline=True)
def raw_sqlite_commit() -> Run:
    _clean_up()
    con, wal = _raw_connection("raw")
    wal.tick()  # (from here on)

    def run() -> Counts:
        for i in range(SQLITE_OPS):
            con.execute("BEGIN IMMEDIATE")
            row = con.execute("SELECT value FROM kv WHERE key = 'a'").fetchone()
            con.execute("UPDATE kv SET value = ? WHERE key = 'b'", (f'{{"value": {i}}}',))
            con.execute("COMMIT")
            wal.tick()
            if row is None:
                raise BenchError("raw sqlite3: row 'a' is missing")
        return {
            "commits": SQLITE_OPS,
            "reads": SQLITE_OPS,
            "writes": SQLITE_OPS,
            "wal_pages": wal.pages,
        }

    return run


@bench(group="sqlite commit", name="SQLiteStore commit", ops=SQLITE_OPS)
def sqlite_store_commit() -> Run:
    _clean_up()
    space, wal = _sqlite_space("store")
    a, b = _two_cells(space)
    counter = _Counter(space.replica)
    wal.tick()  # (from here on)

    def run() -> Counts:
        for i in range(SQLITE_OPS):
            tx = space.edit()
            v = a.with_tx(tx).get()
            b.with_tx(tx).set(v + i)
            _check_ok(tx.commit().wait(), "SQLiteStore commit")  # durable when this returns
            wal.tick()
        return counter.counts(reads=SQLITE_OPS, writes=SQLITE_OPS, wal_pages=wal.pages)

    return run


# ---------------------------------------------------------------------------- sqlite batched


@bench(
    group="sqlite batched",
    name=f"raw sqlite3 batched ({BATCH} writes/commit)",
    ops=SQLITE_BATCHED_OPS,
    baseline=True,
)
def raw_sqlite_batched() -> Run:
    _clean_up()
    con, wal = _raw_connection("raw-batched")
    upsert = (
        "INSERT INTO kv (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )

    def write_batch(n: int) -> None:
        con.execute("BEGIN IMMEDIATE")
        con.executemany(upsert, [(f"k{j}", f'{{"value": {n}}}') for j in range(BATCH)])
        con.execute("COMMIT")
        wal.tick()

    write_batch(-1)  # untimed: the rows exist, so every timed write is an update
    wal.pages = 0

    def run() -> Counts:
        for n in range(BATCHED_COMMITS):
            write_batch(n)
        return {"commits": BATCHED_COMMITS, "writes": SQLITE_BATCHED_OPS, "wal_pages": wal.pages}

    return run


@bench(
    group="sqlite batched",
    name=f"SQLiteStore batched ({BATCH} writes/commit)",
    ops=SQLITE_BATCHED_OPS,
)
def sqlite_store_batched() -> Run:
    _clean_up()
    space, wal = _sqlite_space("store-batched")
    cells = [space.get_cell({"bench": "k", "n": j}) for j in range(BATCH)]

    def write_batch(n: int) -> None:
        tx = space.edit()
        for cell in cells:
            cell.with_tx(tx).set(n)
        _check_ok(tx.commit().wait(), "SQLiteStore batched")  # durable when this returns
        wal.tick()

    write_batch(-1)  # untimed: the documents exist and are loaded in the replica
    counter = _Counter(space.replica)
    wal.pages = 0

    def run() -> Counts:
        for n in range(BATCHED_COMMITS):
            write_batch(n)
        return counter.counts(writes=SQLITE_BATCHED_OPS, wal_pages=wal.pages)

    return run

"""Durable commits, `SQLiteStore` against raw ``sqlite3``, paired round by round:
``python -m bench.sqlite_durable``.

The ``sqlite commit`` and ``sqlite batched`` bench rows time each side in its own
block of samples, so a flush (``fsync``) that takes 0.6 ms in one block and 5 ms in
the next (this machine's disk, shared with other builds) decides their ratio. Here
the two sides take turns instead:

- one file per side, opened once (WAL, the same ``synchronous`` on both, the log
  grown to its steady-state size first, as the bench rows do), and one untimed
  commit each, so every timed write is an update;
- ``--rounds`` rounds; in each, ``--commits`` commits of raw ``sqlite3``, then as many
  of `SQLiteStore`, or the other way round (the order alternates, so neither side
  always follows the other's checkpoint);
- each side's wall time (``perf_counter``) and CPU time (``process_time``: every
  thread, so the store's writer too) per commit, each round's ratio raw / store
  (the store's rate as a fraction of raw's: >= 0.9 is issue 20's goal for a single
  commit, >= 0.5 for 100 documents a commit) and the median ratio with its
  quartiles: a round's two halves ran seconds apart, so slow drift of the flush
  time cancels in the ratio. The median leaves out the few rounds in which the store
  pruned (every ``REVISIONS_KEPT + 1`` commits of a document) or a log checkpointed;
  the mean CPU per commit and the ratio of the means over all rounds count them;
- the pages each side appended to its write-ahead log per commit (`_WalPages`)
  and how often its log restarted after a checkpoint (a checkpoint flushes the log
  and the database file: more flushes);
- the statements each side steps per commit, counted over 50 untimed commits after the
  rounds (its connection's trace callback: each row of an ``executemany`` is one);
- which tables (B-trees) the pages each side writes belong to, over 128 more untimed
  commits: the log is checkpointed and emptied first, then each frame's page number is
  read from the log and named by SQLite's ``dbstat`` table (a page no tree holds is a
  freelist page: ``(free)``; ``sqlite_schema`` is page 1, whose header counts free pages).

One commit on each side is what the bench rows do: ``--documents 1``, raw reads
one row and updates another in a ``BEGIN IMMEDIATE`` transaction, the store reads
one cell and writes another; ``--documents 100``, raw upserts 100 rows with one
``executemany``, the store writes 100 cells.

``--fsyncs`` counts instead of timing: it runs each side's commits in a child
process under ``strace -f`` (``fsync``, ``fdatasync``) twice, with ``--commits``
commits and with none, and prints the difference per commit: the flushes each
durable commit costs, counted on both sides. ``--dir /dev/shm`` puts the files on
tmpfs, where a flush costs next to nothing: what is left is each side's CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from bench.bench_cells import _clean_up, _grow_wal, _leftovers, _WalPages
from cells import Space, SQLiteStore

_UPSERT = (
    "INSERT INTO kv (key, value) VALUES (?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


class _Side:
    """One side's commit loop and its counters."""

    def __init__(
        self, name: str, commit: Callable[[int], None], wal: _WalPages, conn: sqlite3.Connection
    ) -> None:
        self.name = name
        self.commit = commit
        self.wal = wal
        self.conn = conn
        """The connection the side's commits run on (its statements are counted)."""
        self.path = ""
        """The side's database file."""
        self.restarts = 0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.pages = 0
        self.commits = 0

    def run(self, first: int, commits: int) -> None:
        wal = self.wal
        commit = self.commit
        pages = wal.pages
        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
        for n in range(first, first + commits):
            commit(n)
            # (One pread, the same on both sides, as in the bench rows: after every commit,
            # so a log restart loses no frame from the count.)
            salt = wal._last[1]
            wal.tick()
            self.restarts += wal._last[1] != salt
        w1, c1 = time.perf_counter_ns(), time.process_time_ns()
        self.pages += wal.pages - pages
        self.commits += commits
        self.wall.append((w1 - w0) / commits)
        self.cpu.append((c1 - c0) / commits)

    def pages_by_table(self, path: str, first: int, commits: int) -> dict[str, float]:
        """Pages written per commit, by the table or index each page belongs to, over
        `commits` untimed commits after a checkpoint that empties the log (each frame of
        the log is one page written; its first 4 bytes name the page)."""
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for n in range(first, first + commits):
            self.commit(n)
        names = dict(self.conn.execute("SELECT pageno, name FROM dbstat"))
        size = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
        with open(path + "-wal", "rb") as f:
            log = f.read()
        counts: dict[str, int] = {}
        for at in range(32, len(log) - size - 23, size + 24):  # (a 32-byte header, then frames)
            name = names.get(int.from_bytes(log[at : at + 4], "big"), "(free)")
            counts[name] = counts.get(name, 0) + 1
        return {name: n / commits for name, n in sorted(counts.items(), key=lambda i: -i[1])}

    def statements(self, first: int, commits: int) -> float:
        """Statements stepped per commit over `commits` untimed commits (the connection's
        trace callback hears every one, and each row of an ``executemany``)."""
        heard: list[str] = []
        self.conn.set_trace_callback(heard.append)
        try:
            for n in range(first, first + commits):
                self.commit(n)
        finally:
            self.conn.set_trace_callback(None)
        return len(heard) / commits


def _raw(directory: str, synchronous: str, documents: int) -> _Side:
    path = os.path.join(directory, "raw.db")
    con = sqlite3.connect(path, isolation_level=None)
    _leftovers.append(con.close)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute(f"PRAGMA synchronous = {synchronous}")
    con.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("""INSERT INTO kv VALUES ('a', '{"value": 1}'), ('b', '{"value": 0}')""")
    _grow_wal(path)

    def single(n: int) -> None:
        con.execute("BEGIN IMMEDIATE")
        row = con.execute("SELECT value FROM kv WHERE key = 'a'").fetchone()
        con.execute("UPDATE kv SET value = ? WHERE key = 'b'", (f'{{"value": {n}}}',))
        con.execute("COMMIT")
        if row is None:
            raise SystemExit("raw sqlite3: row 'a' is missing")

    def batch(n: int) -> None:
        con.execute("BEGIN IMMEDIATE")
        con.executemany(_UPSERT, [(f"k{j}", f'{{"value": {n}}}') for j in range(documents)])
        con.execute("COMMIT")

    commit = single if documents == 1 else batch
    commit(-1)
    side = _Side("raw sqlite3", commit, _WalPages(path), con)
    side.path = path
    return side


def _store(directory: str, synchronous: str, documents: int) -> _Side:
    path = os.path.join(directory, "cells.db")
    store = SQLiteStore(path, synchronous=synchronous, poll_interval=0)
    space = Space(store, "bench")
    _grow_wal(path)

    def done(result: object) -> None:
        if not getattr(result, "ok", False):
            raise SystemExit(f"SQLiteStore: a commit was not accepted: {result!r}")

    if documents == 1:
        a = space.get_cell({"bench": "a"})
        b = space.get_cell({"bench": "b"})
        done(a.set(1).wait())

        def commit(n: int) -> None:
            tx = space.edit()
            v = a.with_tx(tx).get()
            b.with_tx(tx).set(v + n)
            done(tx.commit().wait())

    else:
        cells = [space.get_cell({"bench": "k", "n": j}) for j in range(documents)]

        def commit(n: int) -> None:
            tx = space.edit()
            for cell in cells:
                cell.with_tx(tx).set(n)
            done(tx.commit().wait())

    commit(-1)

    def close() -> None:
        space.replica.close()
        store.close()

    _leftovers.append(close)
    assert store._wconn is not None
    side = _Side("SQLiteStore", commit, _WalPages(path), store._wconn)
    side.path = path
    return side


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 4:
        m = statistics.median(xs)
        return min(xs), m, max(xs)
    q = statistics.quantiles(xs, n=4)
    return q[0], q[1], q[2]


def measure(rounds: int, commits: int, documents: int, directory: str, synchronous: str) -> None:
    tmp = tempfile.mkdtemp(prefix="cellweave-durable-", dir=directory)
    try:
        raw = _raw(tmp, synchronous, documents)
        store = _store(tmp, synchronous, documents)
        first = 0
        for r in range(rounds):
            order = (raw, store) if r % 2 == 0 else (store, raw)
            for side in order:
                side.run(first, commits)
            first += commits
        counted = {side.name: side.statements(first, 50) for side in (raw, store)}
        first += 50
        by_table = {side.name: side.pages_by_table(side.path, first, 128) for side in (raw, store)}
        ratios = {
            clock: [a / b for a, b in zip(getattr(raw, clock), getattr(store, clock), strict=True)]
            for clock in ("wall", "cpu")
        }
        print(
            f"{rounds} rounds of {commits} commits per side, {documents} document(s) a commit,"
            f" synchronous={synchronous}, files in {directory}"
        )
        for side in (raw, store):
            print(
                f"  {side.name:12}  wall {statistics.median(side.wall) / 1e3:9.1f} us"
                f"  cpu {statistics.median(side.cpu) / 1e3:9.1f} us per commit (medians),"
                f" {statistics.fmean(side.cpu) / 1e3:.1f} us (mean);"
                f" wal pages {side.pages / side.commits:6.2f} per commit;"
                f" log restarts {side.restarts}; statements {counted[side.name]:6.2f} per commit"
            )
            tables = ", ".join(f"{name} {n:.2f}" for name, n in by_table[side.name].items())
            print(f"  {'':12}  pages per commit by table: {tables}")
        for clock, xs in ratios.items():
            lo, mid, hi = _quartiles(xs)
            print(
                f"  store rate / raw rate, {clock:4}: median {mid:.3f}"
                f" (quartiles {lo:.3f} to {hi:.3f}; min {min(xs):.3f}, max {max(xs):.3f})"
            )
        print(
            "  store rate / raw rate, cpu, all rounds: "
            f"{statistics.fmean(raw.cpu) / statistics.fmean(store.cpu):.3f}"
            " (the rounds that pruned or checkpointed included)"
        )
    finally:
        _clean_up()
        shutil.rmtree(tmp, ignore_errors=True)


def _side_only(side: str, commits: int, documents: int, directory: str, synchronous: str) -> None:
    """Set up one side and run `commits` commits: what ``--fsyncs`` counts under strace."""
    tmp = tempfile.mkdtemp(prefix="cellweave-durable-", dir=directory)
    try:
        make = _raw if side == "raw" else _store
        s = make(tmp, synchronous, documents)
        for n in range(commits):
            s.commit(n)
    finally:
        _clean_up()
        shutil.rmtree(tmp, ignore_errors=True)


def _count_fsyncs(side: str, commits: int, documents: int, directory: str, sync: str) -> int:
    with tempfile.TemporaryDirectory(prefix="cellweave-strace-") as out_dir:
        out = os.path.join(out_dir, "trace")
        args = [sys.executable, "-m", "bench.sqlite_durable", "--side", side]
        args += ["--commits", str(commits), "--documents", str(documents)]
        args += ["--dir", directory, "--synchronous", sync]
        subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", out, *args], check=True
        )
        with open(out) as f:
            return sum(1 for line in f if "fsync(" in line or "fdatasync(" in line)


def count_fsyncs(commits: int, documents: int, directory: str, synchronous: str) -> None:
    print(
        f"flushes per commit (strace -f: fsync and fdatasync; {commits} commits less none),"
        f" {documents} document(s) a commit, synchronous={synchronous}"
    )
    for side in ("raw", "store"):
        with_commits = _count_fsyncs(side, commits, documents, directory, synchronous)
        without = _count_fsyncs(side, 0, documents, directory, synchronous)
        print(f"  {side:6} {(with_commits - without) / commits:6.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_durable")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--documents", type=int, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--synchronous", default="FULL", choices=("OFF", "NORMAL", "FULL"))
    parser.add_argument("--fsyncs", action="store_true", help="count flushes, do not time")
    parser.add_argument("--side", choices=("raw", "store"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        _side_only(args.side, args.commits, args.documents, args.dir, args.synchronous)
    elif args.fsyncs:
        count_fsyncs(args.commits, args.documents, args.dir, args.synchronous)
    else:
        measure(args.rounds, args.commits, args.documents, args.dir, args.synchronous)


if __name__ == "__main__":
    main()

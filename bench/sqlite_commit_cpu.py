"""Where a durable SQLite commit's CPU goes: ``python -m bench.sqlite_commit_cpu``.

Runs ``--commits`` commits (default 640: ten pruning cycles of each document) of
``--documents`` documents each (default 100, as the ``sqlite batched`` rows; 1: the
``sqlite commit`` row's read of one cell and write of another) through a `Space` on
a fresh `SQLiteStore` file (``--dir``; its write-ahead log first grown to its
steady-state size, then 200 untimed commits), and prints per commit, in thread CPU
time (``time.thread_time``):

- the store's SQL: every ``execute`` / ``executemany`` on the writer connection (a
  proxy times each call: SQLite's work and the `sqlite3` module's binding; not the
  Python that builds the parameters), and how many statements that was;
- the store's whole evaluation (`_evaluate_lists`, what `_evaluate` is made of: the
  statements and the Python around them), on whichever thread ran it (a 100-document
  commit on the writer thread, a one-document one on the waiting caller's: then it is
  also inside the caller's ``wait``);
- the caller's thread: the writes (``cell.with_tx(tx).set``), ``commit()`` (the
  local commit and the request), and ``wait()`` with the verdict processed.

Counted work per commit is in ``bench.sqlite_commit_work`` and ``bench.sqlite_durable``;
these are times (they move with the machine's load): compare versions by running
each in turn (or ``bench.compare`` on the bench rows).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.bench_cells import _grow_wal
from cells import Space, SQLiteStore, Transaction


class _TimedConnection:
    """The writer connection (or a cursor of it), each statement's thread CPU added up."""

    def __init__(self, conn: Any, counts: _TimedConnection | None = None) -> None:
        self._conn = conn
        self._counts = self if counts is None else counts
        self.ns = 0
        self.statements = 0

    def execute(self, *args: Any) -> Any:
        start = time.thread_time_ns()
        try:
            out = self._conn.execute(*args)
            return self if out is self._conn else out  # (a cursor returns itself)
        finally:
            self._counts.ns += time.thread_time_ns() - start
            self._counts.statements += 1

    def executemany(self, *args: Any) -> Any:
        start = time.thread_time_ns()
        try:
            out = self._conn.executemany(*args)
            return self if out is self._conn else out
        finally:
            self._counts.ns += time.thread_time_ns() - start
            self._counts.statements += 1

    def cursor(self) -> _TimedConnection:
        return _TimedConnection(self._conn.cursor(), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def measure(directory: str, commits: int, documents: int) -> str:
    tmp = tempfile.mkdtemp(prefix="cellweave-commit-cpu-", dir=directory)
    path = os.path.join(tmp, "cells.db")
    store = SQLiteStore(path, synchronous="FULL", poll_interval=0)
    timed = _TimedConnection(store._wconn)
    store._wconn = timed  # type: ignore[assignment]
    store._wcur = timed.cursor()  # type: ignore[assignment]
    evaluated = [0]
    evaluate = store._evaluate_lists

    def timed_evaluate(request: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return evaluate(request)
        finally:
            evaluated[0] += time.thread_time_ns() - start

    store._evaluate_lists = timed_evaluate  # type: ignore[method-assign]
    space = Space(store, "bench")
    try:
        _grow_wal(path)
        one: Callable[[int], Transaction]
        if documents == 1:
            a, b = space.get_cell({"bench": "a"}), space.get_cell({"bench": "b"})
            assert a.set(1).wait().ok

            def one(n: int) -> Transaction:
                tx = space.edit()
                b.with_tx(tx).set(a.with_tx(tx).get() + n)
                return tx

        else:
            cells = [space.get_cell({"bench": "k", "n": j}) for j in range(documents)]

            def one(n: int) -> Transaction:
                tx = space.edit()
                for cell in cells:
                    cell.with_tx(tx).set(n)
                return tx

        for n in range(200):
            assert one(n).commit().wait().ok
        timed.ns = timed.statements = evaluated[0] = 0
        writes = committing = waiting = 0
        for n in range(commits):
            t0 = time.thread_time_ns()
            tx = one(n)
            t1 = time.thread_time_ns()
            pending = tx.commit()
            t2 = time.thread_time_ns()
            assert pending.wait().ok
            t3 = time.thread_time_ns()
            writes, committing, waiting = writes + t1 - t0, committing + t2 - t1, waiting + t3 - t2
    finally:
        space.replica.close()
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def us(ns: int) -> str:
        return f"{ns / commits / 1e3:7.1f} us"

    return (
        f"{documents} document(s) a commit, {commits} commits, files in {directory}\n"
        f"  store: SQL {us(timed.ns)} ({timed.statements / commits:.2f} statements),"
        f" evaluation {us(evaluated[0])}\n"
        f"  caller's thread: writes {us(writes)}, commit() {us(committing)},"
        f" wait and verdict {us(waiting)}; total {us(writes + committing + waiting)}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_commit_cpu", description=__doc__)
    parser.add_argument("--commits", type=int, default=640)
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args(argv)
    print(measure(args.dir, args.commits, args.documents))


if __name__ == "__main__":
    main()

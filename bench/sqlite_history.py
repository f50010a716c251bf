"""How much history a SQLite store keeps under churn: ``python -m bench.sqlite_history``.

Runs N commit cycles (default 10,000) on one document of a fresh store file: each
cycle reads the document and writes it (a read-modify-write, as a page record or a
counter is kept). Prints, every ``--every`` cycles and at the end, the file's size
after a checkpoint (the WAL folded in and truncated) and the row counts of the
store's tables. A store whose history is bounded shows flat sizes and counts; one
that keeps every revision grows linearly. Not a timing benchmark: this measures
space, so it is a script, not a ``bench`` group.

Options: ``--cycles N``, ``--every K``, ``--synchronous MODE`` (default FULL).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Sequence

from cells import Space, SQLiteStore

TABLES = ("log", "session", "document", "head", "claimed", "rejection")


def _measure(file: str) -> tuple[int, dict[str, int]]:
    """File size after a full checkpoint, and the row count of each table present."""
    conn = sqlite3.connect(file)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        counts = {
            t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
            for t in TABLES
            if t in present
        }
    finally:
        conn.close()
    size = os.path.getsize(file)
    wal = file + "-wal"
    if os.path.exists(wal):
        size += os.path.getsize(wal)
    return size, counts


def _line(cycles: int, size: int, counts: dict[str, int], elapsed: float) -> str:
    rows = "  ".join(f"{t}={n}" for t, n in counts.items())
    return f"{cycles:>7} cycles  {size / 1024:>8.1f} KiB  {rows}  ({elapsed:.1f} s)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_history", description=__doc__)
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=2_000)
    parser.add_argument("--synchronous", default="FULL")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cellweave-history-") as where:
        file = os.path.join(where, "cells.db")
        start = time.perf_counter()
        with SQLiteStore(file, synchronous=args.synchronous, poll_interval=0) as store:
            space = Space(store, "bench")
            cell = space.get_cell({"page": 1})
            key = cell.doc_key
            for i in range(1, args.cycles + 1):
                tx = space.edit()
                current = tx.read(key, ("value",))
                count = current["n"] if isinstance(current, dict) else 0
                tx.write(key, ("value",), {"n": count + 1, "open": i % 2 == 0})
                result = tx.commit().wait(30)
                if not result.ok:
                    raise SystemExit(f"cycle {i}: commit not accepted: {result!r}")
                if i % args.every == 0 or i == args.cycles:
                    size, counts = _measure(file)
                    print(_line(i, size, counts, time.perf_counter() - start), flush=True)
            print(f"bytes per cycle: {_measure(file)[0] / args.cycles:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

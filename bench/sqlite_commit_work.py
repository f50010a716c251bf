"""What one SQLite commit asks of SQLite: ``python -m bench.sqlite_commit_work``.

Runs ``--commits`` commits (default 650: ten pruning cycles of each document) of
``--documents`` documents each (default 100, as the ``sqlite batched`` rows) through
a `Space` on a fresh `SQLiteStore` file whose write-ahead log was first grown to its
steady-state size (as the bench rows do), after one untimed commit. Prints, per
commit:

- the statements SQLite stepped, by kind (the writer connection's trace callback,
  which hears every statement stepped, one per row of an ``executemany``);
- the pages appended to the write-ahead log, by owner: each frame's page number is
  read from its header in the ``-wal`` file, and the table or index owning the page
  at the end from ``dbstat`` (``free`` for a page then on the free list, such as
  log pages that pruning emptied).

Counted work, not time: it does not move with the machine's load. Not a ``bench``
group for that reason (as ``bench.sqlite_history``).
"""

from __future__ import annotations

import argparse
import collections
import os
import sqlite3
import sys
import tempfile
from collections.abc import Sequence

from bench.bench_cells import _grow_wal
from cells import Space, SQLiteStore

_FRAME_HEADER = 24
_WAL_HEADER = 32


class _WalFrames:
    """The page number of every frame appended to a write-ahead log since the last look
    (the WAL-index header's frame count and salts, as `bench_cells._WalPages`)."""

    def __init__(self, db: str, page_size: int) -> None:
        self._shm = os.open(db + "-shm", os.O_RDONLY)
        self._wal = os.open(db + "-wal", os.O_RDONLY)
        self._page_size = page_size
        self._last = self._header()

    def close(self) -> None:
        os.close(self._shm)
        os.close(self._wal)

    def _header(self) -> tuple[int, bytes]:
        header = os.pread(self._shm, 48, 0)
        return int.from_bytes(header[16:20], sys.byteorder), header[32:40]

    def pages(self) -> list[int]:
        frames, salt = self._header()
        last, last_salt = self._last
        start = last if salt == last_salt and frames >= last else 0
        self._last = (frames, salt)
        out = []
        for i in range(start, frames):
            at = _WAL_HEADER + i * (_FRAME_HEADER + self._page_size)
            out.append(int.from_bytes(os.pread(self._wal, 4, at), "big"))
        return out


def measure(commits: int, documents: int) -> None:
    with tempfile.TemporaryDirectory(prefix="cellweave-commit-work-") as tmp:
        path = os.path.join(tmp, "cells.db")
        store = SQLiteStore(path, synchronous="FULL", poll_interval=0)
        space = Space(store, "bench")
        cells = [space.get_cell({"bench": "k", "n": j}) for j in range(documents)]
        _grow_wal(path)

        def commit(n: int) -> None:
            tx = space.edit()
            for cell in cells:
                cell.with_tx(tx).set(n)
            result = tx.commit().wait()
            if not result.ok:
                raise SystemExit(f"commit {n} was not accepted: {result!r}")

        commit(-1)  # untimed: the documents exist and are loaded
        conn = store._wconn
        assert conn is not None
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        statements: collections.Counter[str] = collections.Counter()
        frames = _WalFrames(path, page_size)
        pages: collections.Counter[int] = collections.Counter()

        def heard(sql: str) -> None:
            kind = " ".join(sql.split()[:4])
            statements[kind] += 1

        conn.set_trace_callback(heard)
        for n in range(commits):
            commit(n)
            pages.update(frames.pages())
        conn.set_trace_callback(None)
        frames.close()
        check = sqlite3.connect(path)
        try:
            owner = dict(check.execute("SELECT pageno, name FROM dbstat").fetchall())
        finally:
            check.close()
        by_owner: collections.Counter[str] = collections.Counter()
        for page, count in pages.items():
            by_owner[str(owner.get(page, "free"))] += count
        space.replica.close()
        store.close()

    print(f"{commits} commits of {documents} documents each; per commit:")
    print(f"  statements stepped  {sum(statements.values()) / commits:8.2f}")
    for kind, count in statements.most_common():
        print(f"    {count / commits:8.2f}  {kind} ...")
    print(f"  log pages appended  {sum(pages.values()) / commits:8.2f}")
    for name, count in by_owner.most_common():
        print(f"    {count / commits:8.2f}  {name}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_commit_work")
    parser.add_argument("--commits", type=int, default=650)
    parser.add_argument("--documents", type=int, default=100)
    args = parser.parse_args(argv)
    measure(args.commits, args.documents)


if __name__ == "__main__":
    main()

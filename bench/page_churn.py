"""Command line: ``python -m bench.page_churn [--cycles N] [--every K] [--path FILE]``.

Open and stop one page again and again on a `SQLiteStore` file (each cycle an
awaited `rt.open_page` and an awaited `rt.stop`) and print, every K cycles,
the file's size (the database and its write-ahead log), the rows the store keeps
(`revision`, `session`, `head`) and the time per cycle over the last K.

Issue 13, item 6 asks that the file stay flat under 10,000 such cycles. Two
things must hold for that: page records must not accumulate (closed records
are removed: the runner's part) and the store must prune the commit history
its conflict check no longer needs (the store's part). This measures both at
once, so it shows whichever is still missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence

from bench.bench_pages import Page
from cells import SQLiteStore
from runner import Runtime


def _sizes_kb(path: str) -> tuple[float, float]:
    """The database file's size and its write-ahead log's, in KB."""
    wal = path + "-wal"
    return os.path.getsize(path) / 1024, (os.path.getsize(wal) if os.path.exists(wal) else 0) / 1024


def _line(cycles: int, path: str, per_cycle: str) -> str:
    db, wal = _sizes_kb(path)
    rows = _rows(path)
    return (
        f"{cycles:>7} {db:>8.0f} {wal:>8.0f} {rows['session']:>10} {rows['revision']:>9}"
        f" {rows['head']:>5} {per_cycle:>9}"
    )


def _rows(path: str) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            for table in ("session", "revision", "head")
        }
    finally:
        conn.close()


async def churn(path: str, cycles: int, every: int) -> None:
    store = SQLiteStore(path)
    rt = Runtime(store, space="churn")
    page = rt.get_cell("page")
    tx = rt.edit()
    rt.setup(tx, Page, {"value": 1}, page)
    if not (await tx.commit()).ok:
        raise SystemExit("setting up the page failed")
    print(
        f"{'cycles':>7} {'db KB':>8} {'wal KB':>8} {'session':>10} {'revision':>9} {'head':>5}"
        f" {'ms/cycle':>9}"
    )
    print(_line(0, path, ""))
    started = time.perf_counter()
    for i in range(1, cycles + 1):
        if await rt.open_page(page) is not True:
            raise SystemExit(f"cycle {i}: the page did not open")
        await rt.stop(page)
        if i % every == 0:
            await rt.idle()
            per_cycle = (time.perf_counter() - started) / every * 1000
            print(_line(i, path, f"{per_cycle:.2f}"), flush=True)
            started = time.perf_counter()
    await rt.aclose()
    store.close()
    print(_line(cycles, path, "closed"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.page_churn", description=__doc__)
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--path", help="the SQLite file (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.every < 1:
        parser.error("--cycles and --every must be positive")
    path = args.path
    if path is None:
        path = os.path.join(tempfile.mkdtemp(prefix="page-churn-"), "churn.db")
    elif os.path.exists(path):
        parser.error(f"{path} exists: give a path to a new file")
    print(f"# {args.cycles} open + stop cycles of one page on {path}", file=sys.stderr)
    asyncio.run(churn(path, args.cycles, args.every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

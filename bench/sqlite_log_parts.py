"""What a large SQLite commit costs later walks: ``python -m bench.sqlite_log_parts``.

Counts the log entries the store decodes (every call of its entries decoder), on a
fresh `SQLiteStore` file in ``--dir`` (``synchronous="OFF"``: decoding, not flushing,
is measured):

- **walk**: one commit of ``--walk`` documents (default 8,000), then, with the
  store's cache of decoded rows emptied, one conflict walk (`_revisions_since`
  from basis 0) to a document in the commit's first, a middle and its last part:
  the entries decoded and the time of each;
- **pruning**: for each of ``--sizes`` (default 600, 1,200, 2,400) a setup
  commit of N documents, then every document written alone, round after round,
  with ``REVISIONS_KEPT`` 2, so that each document's first pruning walks back into
  the setup at its own time: the entries decoded across all of it, and per
  document. Linear in N when pruning costs what it prunes.

Counted work is the figure to compare; the times move with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cells.stores.sqlite as sqlite_store
from cells import Space, SQLiteStore

WAIT = 60.0


@contextlib.contextmanager
def _counting(kept: int | None = None) -> Iterator[list[int]]:
    """Counts decoded log entries (one element: the total) while inside; with `kept`,
    the store keeps that many revisions per document."""
    store_module: Any = sqlite_store  # (its decoder and window, replaced while inside)
    decode: Callable[[str], Any] = store_module._decode_stubs
    window = store_module.REVISIONS_KEPT
    total = [0]

    def counted(text: str) -> Any:
        got = decode(text)
        total[0] += len(got)
        return got

    store_module._decode_stubs = counted
    if kept is not None:
        store_module.REVISIONS_KEPT = kept
    try:
        yield total
    finally:
        store_module._decode_stubs = decode
        store_module.REVISIONS_KEPT = window


def _setup(path: str, n: int) -> tuple[SQLiteStore, Space, list[Any]]:
    store = SQLiteStore(path, synchronous="OFF", poll_interval=0)
    space = Space(store, "c")
    keys = [space.get_cell(f"d{i:06}").doc_key for i in range(n)]
    tx = space.edit()
    for i, key in enumerate(keys):
        tx.write(key, ("value",), i)
    if not tx.commit().wait(WAIT).ok:
        raise RuntimeError("the setup commit failed")
    return store, space, keys


def walk(directory: str, n: int) -> str:
    lines = [f"walk: one commit of {n} documents, then one conflict walk into it"]
    with _counting() as decoded:
        store, _, keys = _setup(os.path.join(directory, "walk.db"), n)
        try:
            conn = store._reader_conn()
            for name, key in (("first", keys[0]), ("middle", keys[n // 2]), ("last", keys[-1])):
                store._logged.clear()
                before = decoded[0]
                start = time.perf_counter()
                found = store._revisions_since(conn, "s", "s@1", key, 0)
                took = time.perf_counter() - start
                lines.append(
                    f"  to the {name:6} part's document: {decoded[0] - before:6} entries"
                    f" decoded, {took * 1e6:8.0f} us ({len(found)} revision)"
                )
        finally:
            store.close()
    return "\n".join(lines)


def pruning(directory: str, sizes: Sequence[int]) -> str:
    kept = 2
    lines = [f"pruning: an N-document setup, then {2 * kept} rounds of one-document commits"]
    for n in sizes:
        with _counting(kept) as decoded:
            store, space, keys = _setup(os.path.join(directory, f"prune-{n}.db"), n)
            try:
                decoded[0] = 0
                start = time.process_time()
                for round_ in range(2 * kept):
                    pending = []
                    for key in keys:
                        tx = space.edit()
                        tx.write(key, ("value",), -round_)
                        pending.append(tx.commit())
                    if not all(p.wait(WAIT).ok for p in pending):
                        raise RuntimeError("a commit failed")
                took = time.process_time() - start
            finally:
                store.close()
        lines.append(
            f"  N={n:6}: {decoded[0]:9} entries decoded ({decoded[0] / n:6.0f} per document),"
            f" {took:6.2f} s CPU for {2 * kept * n} commits"
        )
    return "\n".join(lines)


def measure(directory: str | None, walk_size: int, sizes: Sequence[int]) -> str:
    where = tempfile.mkdtemp(prefix="bench-log-parts-", dir=directory)
    try:
        return walk(where, walk_size) + "\n" + pruning(where, sizes)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sqlite_log_parts")
    parser.add_argument("--walk", type=int, default=8000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[600, 1200, 2400])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    print(measure(args.dir, args.walk, args.sizes))


if __name__ == "__main__":
    main()

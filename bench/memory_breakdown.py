"""Where the memory of a unit goes: ``python -m bench.memory_breakdown ROW [options]``.

Options: ``--units N``, ``--by file|line``, ``--via runner``, ``--top K``, ``--sqlite``.

ROW is one of ``element`` (a mapped list element, as the ``memory per unit``
row), ``page`` (an open page, as that row), ``derive`` (a live `Scheduler.derive`
node reading one shared source, as the ``memory per node`` rows; ``--updates K``:
after K more updates), ``observed`` (a derive node on its own source with a
`Scheduler.sink` on it, as the observed derived node row) or ``served`` (a claimed
idle served page after one idle heartbeat, as ``bench.claims_scale``, on a throwaway
PostgreSQL cluster, or on SQLite with ``--sqlite``; its UI runtimes open the pages in
a separate process). In a fresh process, builds N units under `tracemalloc` (after
`gc.collect()`), takes a snapshot and prints the bytes and objects per unit that are still held,
grouped by source file (or file and line), largest first, with the total.
Allocations of this module itself are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench.bench_memory import Board, Page
from runner import Runtime

FRAMES = 1
"""Frames kept per allocation (``--via``: more, to find the runner line behind each)."""
VIA: str | None = None
ONLY: str | None = None
"""With ``--only PART``: only allocations made in a file whose path holds PART."""
"""With ``--via DIR``: group by the innermost frame inside DIR (``runner``) instead."""


def _via(snap: tracemalloc.Snapshot, base: tracemalloc.Snapshot, units: int, top: int) -> None:
    before = {t.traceback: t.size for t in base.traces}
    groups: dict[str, list[int]] = {}
    mark = f"/{VIA}/"
    for t in snap.traces:
        if before.get(t.traceback) == t.size:
            continue
        if ONLY is not None and ONLY not in t.traceback[-1].filename:
            continue
        where = "(elsewhere)"
        for frame in reversed(t.traceback):  # innermost first
            if mark in frame.filename:
                where = f"{os.path.relpath(frame.filename)}:{frame.lineno}"
                break
        g = groups.setdefault(where, [0, 0])
        g[0] += t.size
        g[1] += 1
    total = sum(g[0] for g in groups.values())
    print(
        f"by the innermost {VIA}/ frame: {total / units:,.0f} B per unit (approximate: new traces)"
    )
    for where, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{size / units:>9,.0f} B {count / units:>6.1f}  {where}")


def _report(
    snap: tracemalloc.Snapshot, base: tracemalloc.Snapshot, units: int, by: str, top: int
) -> None:
    if VIA is not None:
        _via(snap, base, units, top)
        return
    stats = snap.compare_to(base, "filename" if by == "file" else "lineno")
    total = sum(s.size_diff for s in stats)
    count = sum(s.count_diff for s in stats)
    print(
        f"total {total / units:,.0f} B per unit, {count / units:.1f} objects per unit"
        f" ({units} units)"
    )
    for s in stats[:top]:
        if abs(s.size_diff) / units < 8:
            continue
        frame = s.traceback[0]
        where = frame.filename
        for root in ("/site-packages/", "/lib/python3"):
            if root in where:
                where = where.split(root, 1)[1]
                break
        else:
            where = os.path.relpath(where)
        if by == "line":
            where = f"{where}:{frame.lineno}"
        print(f"{s.size_diff / units:>9,.0f} B {s.count_diff / units:>6.1f}  {where}")


async def _element(rt: Runtime, units: int) -> object:
    items, board = rt.get_cell("items"), rt.get_cell("board")
    async with rt.edit() as tx:
        items.with_tx(tx).set(list(range(units)))
        rt.run(tx, Board, {"items": items}, board)
    value = await board.pull()
    assert len(value["cards"]) == units
    return value


async def _page(rt: Runtime, units: int) -> object:
    pages = []
    async with rt.edit() as tx:
        for i in range(units):
            res = rt.get_cell(("page", i))
            rt.setup(tx, Page, {"n": i}, res)
            pages.append(res)
    for res in pages:
        await rt.open_page(res)
    assert (await pages[-1].pull())["card"]["n"] == units - 1
    return pages


def _scheduler_row(row: str, units: int, updates: int, by: str, top: int) -> None:
    """`derive` or `observed` (see the module doc): scheduler nodes on a bare `Space`."""
    from cells import MemoryStore, Space
    from scheduler import Scheduler

    space = Space(MemoryStore(), "bench")
    sch = Scheduler(space.replica)
    src = space.cell("src")
    src.set(0)
    sch.settle()
    gc.collect()
    tracemalloc.start(FRAMES)
    base = tracemalloc.take_snapshot()
    kept: list[object] = []
    if row == "derive":
        for i in range(units):
            out = space.cell(f"n{i}")
            sch.derive(out, [src], lambda v, i=i: v + i)
            kept.append(out)
        for node in list(sch.graph.nodes):
            sch.demand(node)
        sch.settle()
        for k in range(1, updates + 1):
            src.set(k)
            sch.settle()
        sch.replica.pump()
        assert sch.stats.runs_computation == units * (updates + 1)
    else:
        sources = [space.cell(f"src{i}") for i in range(units)]
        tx = space.edit()
        for i, cell in enumerate(sources):
            cell.with_tx(tx).set(i)
        tx.commit()
        space.replica.pump()
        seen: list[object] = []
        for i, cell in enumerate(sources):
            out = space.cell(f"out{i}")
            sch.derive(out, [cell], lambda v: {"n": v, "double": (v or 0) * 2})
            kept += (cell, out, sch.sink(out, seen.append))
        sch.settle()
        assert len(seen) == units
        kept.append(seen)
    gc.collect()
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    snap = tracemalloc.take_snapshot().filter_traces(skip)
    tracemalloc.stop()
    _report(snap, base.filter_traces(skip), units, by, top)
    del kept
    sch.close()


def _in_memory(
    main: Callable[[Runtime, int], Awaitable[object]], units: int, by: str, top: int
) -> None:
    loop = asyncio.new_event_loop()
    rt = Runtime(space="bench")
    loop.run_until_complete(rt.get_cell("warm-up").set(0))
    gc.collect()
    tracemalloc.start(FRAMES)
    base = tracemalloc.take_snapshot()
    t0 = time.process_time()
    kept = loop.run_until_complete(main(rt, units))
    took = time.process_time() - t0
    gc.collect()
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    tracemalloc.stop()
    _report(
        snap, base.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]), units, by, top
    )
    print(f"build: {took / units * 1e6:.0f} us CPU per unit (tracing on)")
    del kept
    loop.run_until_complete(rt.aclose())
    loop.close()


async def _served(units: int, by: str, top: int, sqlite: bool) -> None:
    from bench.claims_scale import _claim_all, open_pages_elsewhere
    from bench.pg_cluster import Cluster
    from cells import PostgresStore, SQLiteStore

    cluster = None
    store: Any
    if sqlite:
        tmp = tempfile.mkdtemp()
        store = SQLiteStore(os.path.join(tmp, "served.db"))
    else:
        cluster = Cluster()
        store = PostgresStore(cluster.dsn, schema=f"s_{uuid.uuid4().hex[:12]}", poll_interval=0)
    try:
        open_pages_elsewhere(store, units)
        gc.collect()
        rt = Runtime(store, principal="server")
        await rt.__aenter__()
        gc.collect()
        tracemalloc.start(FRAMES)
        base = tracemalloc.take_snapshot()
        t0 = time.process_time()
        server = await rt.serve_pages(manual=True)
        await _claim_all(server, rt, units)
        took = time.process_time() - t0
        # One idle heartbeat, as a serving process is in between changes: it packs the
        # documents the pages' starts decoded (`Replica.pack`).
        await server.tick()
        await rt.idle()
        gc.collect()
        skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
        snap = tracemalloc.take_snapshot().filter_traces(skip)
        tracemalloc.stop()
        _report(snap, base.filter_traces(skip), units, by, top)
        print(f"claim and start: {took / units * 1e6:.0f} us CPU per page (tracing on)")
        await rt.aclose()
    finally:
        if cluster is not None:
            store.drop_schema()
            store.close()
            cluster.stop()
        else:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_breakdown")
    parser.add_argument("row", choices=["element", "page", "derive", "observed", "served"])
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=0, help="derive: updates after the run")
    parser.add_argument("--by", choices=["file", "line"], default="file")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--sqlite", action="store_true", help="served pages on SQLite, not PostgreSQL"
    )
    parser.add_argument("--via", help="group by the innermost frame in this package (runner)")
    parser.add_argument("--only", help="with --via: only allocations made in this file")
    args = parser.parse_args(argv)
    global VIA, FRAMES, ONLY
    ONLY = args.only
    if args.via:
        VIA, FRAMES = args.via, 25
    if args.row in ("derive", "observed"):
        _scheduler_row(args.row, args.units, args.updates, args.by, args.top)
    elif args.row == "served":
        asyncio.run(_served(args.units, args.by, args.top, args.sqlite))
    else:
        _in_memory(_element if args.row == "element" else _page, args.units, args.by, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Claims at scale: ``python -m bench.claims_scale [--pages 100 1000 10000] [--takeover 1000]``.

On a throwaway PostgreSQL cluster (bench/pg_cluster.py), for each page count N:

- N idle open pages (each triples an input nobody changes), 100 per principal,
  are opened by UI runtimes in a separate process (`--ui`), which then exits; one
  serving runtime (`rt.serve_pages`) in this process claims and runs them all, so
  its heap holds everything a real serving process pays per page (ids derived and
  their remembered causes included: UI runtimes in this process would have derived
  and remembered them first);
- memory: Python heap (tracemalloc) of the serving process once every page is
  claimed, running and idle, less before `serve_pages`, per page, twice: right after
  the last page started, and after one more (idle) heartbeat, the state a serving
  process stays in while nothing changes (each heartbeat packs the documents the
  pages' starts decoded, `Replica.pack`); and of the claim bookkeeping alone (the
  `PageServer`'s own tables: held pages, fence map, first-seen times) per page;
- statements: claim statements per heartbeat over 20 idle ticks (the renew is one
  statement for all N pages; the others are the principal listing and the stale
  sweep), and one idle tick's time: wall (the database's work included: the
  renew updates N rows) and this process's CPU.

Then a takeover: a serving runtime holding `--takeover` pages stops heartbeating
(killed: no release), and a second one, ticking every heartbeat on the same clock,
takes them over after the lease expires. Reported: seconds from the lease's expiry
until the second one holds all of them and they are running and idle, against the
lease (the requirement: within two lease windows of the death).

Times in the takeover use the real clock with the default lease and heartbeat
(10 s, 2 s), but the ticks run back to back (a full batch runs the next at once, as
the serving loop does), so nothing waits for wall time to pass.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from typing import Any

from bench.pg_cluster import Cluster
from cells import PostgresStore
from runner import PageServer, Runtime, lift, pattern

PER_PRINCIPAL = 100


def triple(v: Any) -> Any:
    return None if v is None else v * 3


@pattern
def Idle(value):  # type: ignore[no-untyped-def]
    return {"tripled": lift(triple)(value)}


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(_deep_size(v, seen) for v in obj)
    elif hasattr(obj, "__slots__"):
        for name in obj.__slots__:
            if hasattr(obj, name):
                size += _deep_size(getattr(obj, name), seen)
    elif hasattr(obj, "__struct_fields__"):
        size += sum(_deep_size(getattr(obj, f), seen) for f in obj.__struct_fields__)
    return size


def _bookkeeping(server: PageServer) -> int:
    seen: set[int] = set()
    return sum(
        _deep_size(part, seen)
        for part in (
            server.held,
            server.first_seen,
            server.elsewhere,
            server.refusals,
            server._fence_by_id,
            server._root_ref,
        )
    )


async def _open_pages(store: PostgresStore, n: int) -> None:
    """`n` open pages, 100 per principal (a principal's pages document holds all of
    that principal's records: one principal with 10,000 pages would measure that
    document, not the claims)."""
    for first in range(0, n, PER_PRINCIPAL):
        async with Runtime(store, principal=f"user{first // PER_PRINCIPAL}", pages="served") as ui:
            tx = ui.edit()
            cells = []
            for i in range(first, min(n, first + PER_PRINCIPAL)):
                page = ui.get_cell(f"page{i}")
                ui.setup(tx, Idle, {"value": i}, page)
                cells.append(page)
            assert (await tx.commit()).ok
            opened = await asyncio.gather(*(ui.open_page(c) for c in cells))
            assert all(opened)
            await ui.idle()  # the UI records the pages; the serving runtime runs them


def open_pages_elsewhere(store: Any, n: int) -> None:
    """`_open_pages(store, n)` in a separate process (a UI's), so this process derives
    and remembers nothing of the pages before it serves them. `store` is a
    `PostgresStore` (its DSN and schema) or a `SQLiteStore` (its path)."""
    if isinstance(store, PostgresStore):
        where = ["--ui-dsn", store.dsn, "--ui-schema", store.schema]
    else:
        where = ["--ui-sqlite", str(store.path)]
    subprocess.run([sys.executable, "-m", "bench.claims_scale", "--ui", str(n), *where], check=True)


def _ui(args: argparse.Namespace) -> None:
    from bench import claims_scale  # not `__main__`: the pattern is named by its module
    from cells import SQLiteStore

    store: Any
    if args.ui_sqlite:
        store = SQLiteStore(args.ui_sqlite)
    else:
        store = PostgresStore(args.ui_dsn, schema=args.ui_schema, poll_interval=0)
    asyncio.run(claims_scale._open_pages(store, args.ui))
    store.close()


async def _claim_all(server: PageServer, rt: Runtime, n: int) -> None:
    while len(server.held) < n:
        await server.tick()
        await rt.idle()
    await rt.idle()


async def scale(dsn: str, n: int) -> dict[str, float]:
    store = PostgresStore(dsn, schema=f"s_{uuid.uuid4().hex[:12]}", poll_interval=0)
    open_pages_elsewhere(store, n)
    gc.collect()
    tracemalloc.start()
    rt = Runtime(store, principal="server")
    await rt.__aenter__()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    server = await rt.serve_pages(manual=True)
    await _claim_all(server, rt, n)
    gc.collect()
    started = tracemalloc.get_traced_memory()[0] - base
    await server.tick()
    await rt.idle()
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    book = _bookkeeping(server)
    before = server.table.statements
    t0 = time.perf_counter()
    c0 = time.process_time()
    ticks = 20
    for _ in range(ticks):
        await server.tick()
    tick_s = (time.perf_counter() - t0) / ticks
    tick_cpu_s = (time.process_time() - c0) / ticks
    statements = (server.table.statements - before) / ticks
    await rt.aclose()
    store.drop_schema()
    store.close()
    return {
        "pages": n,
        "started_per_page_kb": started / n / 1024,
        "heap_per_page_kb": heap / n / 1024,
        "claims_per_page_b": book / n,
        "statements_per_tick": statements,
        "tick_ms": tick_s * 1000,
        "tick_cpu_ms": tick_cpu_s * 1000,
    }


async def takeover(dsn: str, n: int) -> dict[str, float]:
    store = PostgresStore(dsn, schema=f"t_{uuid.uuid4().hex[:12]}", poll_interval=0)
    open_pages_elsewhere(store, n)
    now = [1000.0]
    a = Runtime(store, principal="server")
    await a.__aenter__()
    sa = await a.serve_pages(clock=lambda: now[0], manual=True)
    await _claim_all(sa, a, n)
    # Killed: no release, no heartbeat from here on.
    sa.stopped = True
    a._server = None
    a.close()
    b = Runtime(store, principal="server")
    await b.__aenter__()
    sb = await b.serve_pages(clock=lambda: now[0], manual=True, probe=lambda owner: None)
    assert not sb.held
    now[0] += sb.lease + 0.001  # the lease just expired
    t0 = time.perf_counter()
    ticks = 0
    while len(sb.held) < n:
        await sb.tick()
        ticks += 1
        now[0] = 1000.0 + sb.lease + 0.001 + (time.perf_counter() - t0)
    claimed = time.perf_counter() - t0
    await b.idle()
    took = time.perf_counter() - t0
    reasons = {t["reason"] for t in sb.takeovers}
    lease = sb.lease
    await b.aclose()
    store.drop_schema()
    store.close()
    return {
        "pages": n,
        "seconds": took,
        "claimed": claimed,
        "ticks": ticks,
        "lease": lease,
        "reasons": len(reasons),
    }


async def main_async(args: argparse.Namespace) -> None:
    cluster = Cluster()
    try:
        print(_load(), flush=True)
        print(
            "pages  heap/page KB started  heap/page KB idle  claims/page B  statements/tick"
            "  idle tick ms  tick CPU ms"
        )
        for n in args.pages:
            r = await scale(cluster.dsn, n)
            print(
                f"{r['pages']:>5}  {r['started_per_page_kb']:>20.2f}"
                f"  {r['heap_per_page_kb']:>17.2f}  {r['claims_per_page_b']:>13.0f}"
                f"  {r['statements_per_tick']:>15.1f}  {r['tick_ms']:>12.2f}"
                f"  {r['tick_cpu_ms']:>11.2f}",
                flush=True,
            )
        if args.takeover:
            t = await takeover(cluster.dsn, args.takeover)
            within = t["lease"] + t["seconds"] <= 2 * t["lease"]
            print(
                f"takeover of {t['pages']} pages after the lease expired: all claimed in"
                f" {t['claimed']:.2f} s, all running and idle in {t['seconds']:.2f} s,"
                f" {t['ticks']} ticks (lease {t['lease']} s: the pages run again"
                f" {t['lease'] + t['seconds']:.1f} s after the death, within two leases ="
                f" {2 * t['lease']:.0f} s: {'yes' if within else 'NO'})"
            )
        print(_load())
    finally:
        cluster.stop()


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f} ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claims_scale")
    parser.add_argument("--pages", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--takeover", type=int, default=1000)
    parser.add_argument("--ui", type=int, help=argparse.SUPPRESS)  # the UI process's page count
    parser.add_argument("--ui-dsn", help=argparse.SUPPRESS)
    parser.add_argument("--ui-schema", help=argparse.SUPPRESS)
    parser.add_argument("--ui-sqlite", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ui is not None:
        _ui(args)
    else:
        asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Changes from elsewhere: latency of another process's commit, and the cost of idling.

``python -m bench.flow [--commits N] [--idle SECONDS] [--poll SECONDS]``

1. Cross-process latency. This process opens a `SQLiteStore` file, runs a
   `Runtime` on it with a sink on one cell, and lets its event loop run (no
   call on the runtime). A second Python process writes that cell N times
   (a random pause of 20-120 ms between commits, so commits land at every
   phase of the polling interval) and prints, for each, the monotonic time at
   which its commit was durable (`.wait()` returned). The latency of a commit
   is the time the sink received it minus that time (`time.monotonic` is one
   clock for every process on Linux). Reported: median, 90th percentile, max.
2. Idle cost. A runtime with a sink and nothing changing, on a SQLite file
   (its polling thread runs) and on a `MemoryStore`: process CPU time
   (`time.process_time`, every thread) over SECONDS of the loop idling,
   as a percentage of one core.

Not part of `python -m bench` (which times repeated operations): this
measures waiting, once, and prints its own table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from cells import MemoryStore, SQLiteStore, StoreBase
from runner import Runtime

WRITER = textwrap.dedent(
    """
    import random, sys, time
    from cells import SQLiteStore
    from runner import Runtime

    store = SQLiteStore(sys.argv[1], poll_interval=0)
    rt = Runtime(store=store, space="flow")
    x = rt.get_cell("x")
    rng = random.Random(int(sys.argv[3]))
    for k in range(1, int(sys.argv[2]) + 1):
        time.sleep(rng.uniform(0.02, 0.12))
        result = x.set(k).wait()
        assert result.ok, result
        print(k, time.monotonic(), flush=True)
    rt.close()
    store.close()
    """
)


async def cross_process(commits: int, poll: float) -> list[float]:
    """Latencies (seconds) of `commits` commits made by another process."""
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "flow.db")
        store = SQLiteStore(db, poll_interval=poll)
        rt = Runtime(store=store, space="flow")
        await rt.get_cell("x").set(0)
        received: dict[int, float] = {}

        def seen(value: Any) -> None:
            if isinstance(value, int) and value > 0:
                received.setdefault(value, time.monotonic())

        rt.get_cell("x").sink(seen)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER, db, str(commits), "14", stdout=subprocess.PIPE
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"the writer process failed ({proc.returncode})")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while commits not in received and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await rt.aclose()
        store.close()
    committed = {
        int(k): float(t) for k, t in (line.split() for line in out.decode().split("\n") if line)
    }
    # A commit overwritten before a poll saw it is never received (the sink sees
    # the settled value only): it has no latency, and is counted as skipped.
    return [received[k] - committed[k] for k in sorted(committed) if k in received]


async def idle_cpu(store: StoreBase, seconds: float) -> float:
    """Percent of one core this process used while a runtime with a sink idled."""
    rt = Runtime(store=store, space="idle")
    await rt.get_cell("x").set(1)
    rt.get_cell("x").sink(lambda v: None)
    await rt.idle()
    start = time.process_time()
    await asyncio.sleep(seconds)
    used = time.process_time() - start
    await rt.aclose()
    return 100.0 * used / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__)
    parser.add_argument("--commits", type=int, default=60)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idling measured")
    parser.add_argument("--poll", type=float, default=0.05, help="SQLiteStore poll_interval")
    args = parser.parse_args(argv)

    lat = asyncio.run(cross_process(args.commits, args.poll))
    ms = sorted(v * 1000 for v in lat)
    print(f"cross-process commit -> sink (SQLite, poll_interval={args.poll} s)")
    print(
        f"  {len(ms)} of {args.commits} commits received; median {statistics.median(ms):.1f} ms,"
        f" p90 {ms[int(0.9 * (len(ms) - 1))]:.1f} ms, min {ms[0]:.1f} ms, max {ms[-1]:.1f} ms"
    )
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteStore(str(Path(tmp) / "idle.db"), poll_interval=args.poll)
        pct = asyncio.run(idle_cpu(sqlite, args.idle))
        sqlite.close()
    print(f"idle runtime with a sink, {args.idle:g} s: SQLite {pct:.2f} % of one core", end="")
    pct = asyncio.run(idle_cpu(MemoryStore(), args.idle))
    print(f", MemoryStore {pct:.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

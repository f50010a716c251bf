"""Crash trials: ``python -m bench.crash_trials [--trials 100] [--seed 1] [--path FILE]``.

`make crash-trials` runs this (it is not part of `make test`: it takes minutes).

Each trial starts a *writer* process on one `SQLiteStore` file (the same file
for every trial, so later trials run on what earlier kills left) and kills it
with SIGKILL after a random delay: no `close`, no `atexit`, no flush. The
writer runs three workers at once, each doing, in a random order:

- acknowledged writes: a fresh cell set in its own transaction, counted once
  `await tx.commit()` reported success (and, beside the workers, a thread running
  no loop does the same with `Pending.wait()`, on a runtime of its own: the waiting
  thread writes the queued commits to the file itself);
- page opens: a result set up, then `await rt.open_page(cell)`, counted once
  it resolved `True`;
- page stops: `await rt.stop(page)`, counted once it resolved; some stops are
  issued and not awaited, and some race an open still in flight.

Each acknowledgment is written to the writer's stdout (a pipe) with one
`os.write` *after* the operation was acknowledged; once that call returns the
line is in the kernel's pipe buffer and survives the kill. The parent reads
the pipe to its end after the kill, then opens the file itself and checks:

- every acknowledged write is present, with its value;
- every acknowledged page open whose stop was never issued is recorded open
  and resumes (`await rt.resume()`);
- no page whose stop was acknowledged is recorded open or resumes;
- `PRAGMA integrity_check` says ok.

Pages whose stop was issued but not acknowledged may come back or not; they
are counted, not judged. The delays and every worker's choices come from
`--seed`, so a run can be repeated (the moment the kill lands still depends
on the machine's speed). Exit status 1 if anything was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

import attrs

from bench.bench_pages import Page
from cells import Cell, SQLiteStore
from runner import ResumeError, Runtime

SPACE = "crash"
WORKERS = 3


# ---------------------------------------------------------------------------- the writer


def _ack(line: str) -> None:
    """One `write` on the pipe: when it returns, the line outlives this process."""
    data = (line + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


async def _worker(rt: Runtime, trial: int, index: int, rng: random.Random) -> None:
    open_pages: list[tuple[str, Cell]] = []
    n = 0
    while True:
        n += 1
        name = f"t{trial}w{index}n{n}"
        roll = rng.random()
        if roll < 0.5 or (roll >= 0.75 and not open_pages):
            cell = rt.get_cell(("write", name))
            tx = rt.edit()
            cell.with_tx(tx).set({"n": n})
            if (await tx.commit()).ok:
                _ack(f"W {name} {n}")
        elif roll < 0.75:
            cell = rt.get_cell(("page", name))
            tx = rt.edit()
            rt.setup(tx, Page, {"value": n}, cell)
            if not (await tx.commit()).ok:
                continue
            opened = rt.open_page(cell)
            if roll >= 0.7:
                # A stop racing the open: issued while the page's record is in flight.
                _ack(f"s {name}")
                stopped = rt.stop(cell)
                await asyncio.gather(opened, return_exceptions=True)
                await stopped
                _ack(f"S {name}")
            elif await opened is True:
                _ack(f"O {name}")
                open_pages.append((name, cell))
        else:
            name, cell = open_pages.pop(rng.randrange(len(open_pages)))
            _ack(f"s {name}")
            stopped = rt.stop(cell)
            if rng.random() < 0.3:
                continue  # issued, never awaited: not acknowledged
            await stopped
            _ack(f"S {name}")


def _sync_writer(store: SQLiteStore, trial: int) -> None:
    """Acknowledged writes from a thread running no event loop, on a runtime of its own:
    each `Pending.wait()` writes the queued commits to the file on this thread (the
    async workers' too, when it gets there first), where the workers' are written by
    the store's writer thread."""
    rt = Runtime(store, space=SPACE)
    n = 0
    while True:
        n += 1
        name = f"t{trial}sync{n}"
        if rt.get_cell(("write", name)).set({"n": n}).wait().ok:
            _ack(f"W {name} {n}")


async def _write(path: str, trial: int, seed: int) -> None:
    store = SQLiteStore(path)
    rt = Runtime(store, space=SPACE)
    _ack("R")
    threading.Thread(target=_sync_writer, args=(store, trial), daemon=True).start()
    rngs = [random.Random(seed * 1000 + i) for i in range(WORKERS)]
    await asyncio.gather(*(_worker(rt, trial, i, rngs[i]) for i in range(WORKERS)))


# ---------------------------------------------------------------------------- the parent


@attrs.define
class Ledger:
    """What writers acknowledged, over every trial so far."""

    writes: dict[str, int] = attrs.field(factory=dict)
    opened: set[str] = attrs.field(factory=set)
    """Pages whose open was acknowledged (by name)."""
    stop_issued: set[str] = attrs.field(factory=set)
    """Pages whose stop was issued."""
    stopped: set[str] = attrs.field(factory=set)
    """Pages whose stop was acknowledged."""

    def take(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "W":
            name, n = rest.split(" ")
            self.writes[name] = int(n)
        elif kind == "O":
            self.opened.add(rest)
        elif kind == "s":
            self.stop_issued.add(rest)
        elif kind == "S":
            self.stopped.add(rest)


@attrs.define
class Tally:
    trials: int = 0
    killed: int = 0
    acked_writes: int = 0
    lost_writes: int = 0
    acked_opens_total: int = 0
    """Page opens acknowledged, whatever happened to the page later."""
    acked_opens: int = 0
    """Of those, the pages whose stop was never issued: each must be recorded open."""
    lost_opens: int = 0
    acked_stops: int = 0
    resumed_stops: int = 0
    unacked_stops: int = 0
    unacked_stops_back: int = 0
    integrity_failures: int = 0
    lost: set[str] = attrs.field(factory=set, repr=False)
    """Every violation seen, once each (a check after each trial sees earlier ones again)."""

    def violations(self) -> int:
        return self.lost_writes + self.lost_opens + self.resumed_stops + self.integrity_failures


def _run_writer(path: str, trial: int, seed: int, delay: float, ledger: Ledger) -> None:
    """One trial's writer, killed `delay` seconds after it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.crash_trials", "--writer", path, str(trial), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode()
            if not text.endswith("\n"):
                break  # a torn line was never acknowledged
            lines.append(text[:-1])
            if text == "R\n":
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(60)
    time.sleep(delay)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(60)
    reader.join(60)
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    if proc.returncode != -signal.SIGKILL:
        raise SystemExit(f"trial {trial}: the writer ended on its own ({proc.returncode}):\n{err}")
    for line in lines:
        ledger.take(line)


async def _check(path: str, ledger: Ledger, tally: Tally, seen_unacked: set[str]) -> None:
    store = SQLiteStore(path)
    try:
        rt = Runtime(store, space=SPACE)
        try:
            resumed = await rt.resume()
        except ResumeError as error:
            resumed = [c for c in error.resumed if isinstance(c, Cell)]
        resumed_ids = {c.id for c in resumed}
        recorded_ids = {c.id for c in rt.pages()}
        for name, n in ledger.writes.items():
            value = store.read_durable(rt.get_cell(("write", name)).doc_key)
            present = isinstance(value, dict) and value.get("value") == {"n": n}
            if not present and f"W {name}" not in tally.lost:
                tally.lost.add(f"W {name}")
                tally.lost_writes += 1
                print(f"lost write {name}: {value!r}", file=sys.stderr)
        expected_open = ledger.opened - ledger.stop_issued
        for name in expected_open:
            page_id = rt.get_cell(("page", name)).id
            if (page_id not in recorded_ids or page_id not in resumed_ids) and (
                f"O {name}" not in tally.lost
            ):
                tally.lost.add(f"O {name}")
                tally.lost_opens += 1
                print(f"lost page open {name}", file=sys.stderr)
        for name in ledger.stopped:
            page_id = rt.get_cell(("page", name)).id
            if (page_id in recorded_ids or page_id in resumed_ids) and (
                f"S {name}" not in tally.lost
            ):
                tally.lost.add(f"S {name}")
                tally.resumed_stops += 1
                print(f"a page whose stop was acknowledged came back: {name}", file=sys.stderr)
        for name in ledger.stop_issued - ledger.stopped - seen_unacked:
            seen_unacked.add(name)
            tally.unacked_stops += 1
            if rt.get_cell(("page", name)).id in recorded_ids:
                tally.unacked_stops_back += 1
        tally.acked_writes = len(ledger.writes)
        tally.acked_opens_total = len(ledger.opened)
        tally.acked_opens = len(expected_open)
        tally.acked_stops = len(ledger.stopped)
        await rt.aclose()
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            tally.integrity_failures += 1
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--writer"]:
        path, trial, seed = argv[1], int(argv[2]), int(argv[3])
        asyncio.run(_write(path, trial, seed))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.crash_trials", description=__doc__)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1, help="delays and workers' choices")
    parser.add_argument("--path", help="the SQLite file (default: a fresh temporary one)")
    parser.add_argument("--min-delay", type=float, default=0.2, help="seconds before the kill")
    parser.add_argument("--max-delay", type=float, default=1.5)
    args = parser.parse_args(argv)
    path = args.path or os.path.join(tempfile.mkdtemp(prefix="crash-trials-"), "trials.db")
    rng = random.Random(args.seed)
    ledger, tally = Ledger(), Tally()
    seen_unacked: set[str] = set()
    print(f"# {args.trials} trials, seed {args.seed}, on {path}", file=sys.stderr)
    for trial in range(1, args.trials + 1):
        delay = rng.uniform(args.min_delay, args.max_delay)
        _run_writer(path, trial, rng.randrange(1 << 30), delay, ledger)
        tally.killed += 1
        tally.trials += 1
        asyncio.run(_check(path, ledger, tally, seen_unacked))
        counts = attrs.asdict(tally, filter=lambda a, _v: a.name != "lost")
        print(f"trial {trial}: {counts}", file=sys.stderr, flush=True)
    for field, value in attrs.asdict(tally, filter=lambda a, _v: a.name != "lost").items():
        print(f"{field:>20} {value}")
    return 1 if tally.violations() else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmarks of pages and start/stop churn: opening and closing 1,000 pages on a
`MemoryStore` and on a `SQLiteStore` file, and N start + stop cycles on one result.

The workload is `Page`, defined here: one lift (`doubled = value * 2`), so one
page is one registration and one scheduler node. A page is *durable intent*:
`await rt.open_page(cell)` records `{target, open, session, via}` in the
principal's pages document (one document for all of a principal's pages),
commits it, and starts the result with an independent lifetime; `rt.stop`
records the stop (the same document, `open: False`) before it cancels
anything. Both commits are detached, so the timed region ends with `await
rt.idle()`: a page operation is not done until its record's verdict is in.

Groups
------
``pages memory`` / ``pages sqlite``
    One op is one page. Rows: `await rt.open_page(cell)` on results set up
    beforehand (untimed, one transaction); `rt.stop(cell)` of an open,
    running page. Baseline: the same number of plain cell writes, one commit
    each (a fresh cell per write, awaited), on the same kind of store in the
    same run. A third row writes page-sized records into *one* document, one
    commit each, which is what the pages document costs without a runner.
    On SQLite the stop row's pages are opened once per process on a template
    file (through `open_page`, so the records are the runtime's own), which
    each sample copies and resumes (`await rt.resume()`, untimed): opening
    1,000 pages on SQLite takes seconds, and paying it twice per sample would
    make the group take minutes.
``pages history sqlite``
    One op is one `await rt.open_page(cell)` + `await rt.stop(cell)` cycle
    of a fresh page on a `SQLiteStore` file where 0, 2,000 or 10,000 other
    pages were opened and stopped before (each row copies a template file
    made once per process by that many real open + stop cycles, untimed).
    An open and a stop must cost the same whatever the number of pages
    opened before (issue 13, item 6): closed records are removed, so the
    pages document holds only the open ones. Baseline: the row with no prior
    pages. The file keeps its commit history (pruning it is the store's
    job; `python -m bench.page_churn` measures the file over 10,000 cycles).
``start/stop churn``
    One op is one `await rt.start(cell)` + `rt.stop(cell)` cycle on one
    result (not a page: no records). Baseline: as above, on a `MemoryStore`.

Counted work beside the times: transactions sent to the store (`sent`) and
elided by the replica (`elided`: they changed nothing), registrations
installed (+) or ended (-), page records marked open (+) or stopped (-), and,
after the close and churn rows, what leaked: every registration, lifetime,
start attempt (active, by key, generation), pending start, remembered declined
release, page owner and scheduler node left over. The leaks must all be 0 (the
benchmark fails otherwise; they are checked after the clock stops, in the
row's finish function) and are printed in the table so a reader sees that they
were checked.

See docs/performance.md ("Pages and churn") for numbers.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import Cell, MemoryStore, SQLiteStore, StoreBase
from runner import Runtime, lift, pattern

PAGES = 1000
"""Pages opened or closed per sample."""
CYCLES = 1000
"""Start + stop cycles per sample, on one result."""
RECORD = {"target": "x" * 60, "open": True, "session": "local", "via": "open_page"}
"""About the size of a page record (the target is a link; here a string of its size)."""

# ---------------------------------------------------------------------------- the pattern


def double(v: Any) -> Any:
    return None if v is None else v * 2


@pattern
def Page(value):  # type: ignore[no-untyped-def]
    """One lift: a page is one registration and one node."""
    return {"doubled": lift(double)(value)}


# ---------------------------------------------------------------------------- harness glue


class _World:
    """One sample's runtime, its store (and directory, for SQLite) and event loop."""

    def __init__(self, kind: str, path: str | None = None) -> None:
        self.kind = kind
        self.dir: str | None = None
        store: StoreBase
        if kind == "sqlite":
            if path is None:
                self.dir = tempfile.mkdtemp(prefix="bench-pages-")
                path = os.path.join(self.dir, "pages.db")
            store = SQLiteStore(path)
        else:
            store = MemoryStore()
        self.store = store
        self.rt = Runtime(store, space="bench")
        self.loop = asyncio.new_event_loop()
        Page.graph  # noqa: B018  (traced outside any timed region)

    def drive(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return self.loop.run_until_complete(main())

    def close(self) -> None:
        self.loop.run_until_complete(self.rt.aclose())
        self.loop.close()
        self.store.close()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def results(self, n: int, name: str = "page") -> list[Cell]:
        return [self.rt.get_cell((name, i)) for i in range(n)]

    async def set_up(self, results: list[Cell]) -> None:
        tx = self.rt.edit()
        for i, res in enumerate(results):
            self.rt.setup(tx, Page, {"value": i}, res)
        outcome = await tx.commit()
        if not outcome.ok:
            raise BenchError(f"setting up {len(results)} results: the commit failed: {outcome!r}")
        await self.rt.idle()

    def open_pages(self) -> int:
        return len(self.rt.pages())

    def counter(self) -> _Counter:
        return _Counter(self)


class _Counter:
    """Counted work since construction."""

    def __init__(self, world: _World) -> None:
        self.world = world
        self.start = self._now()

    def _now(self) -> dict[str, int]:
        rt = self.world.rt
        stats = rt.replica.stats
        return {
            "sent": stats.commits_sent,
            "elided": stats.commits_elided,
            "registrations": len(rt.registrations()),
            "page_records": self.world.open_pages(),
        }

    def counts(self, **extra: int) -> Counts:
        now = self._now()
        return {k: now[k] - self.start[k] for k in now} | extra


def leaks(rt: Runtime) -> dict[str, int]:
    """Everything a runtime with nothing running must not hold (all 0)."""
    runner = rt.runner
    attempts = runner.attempts
    book = rt._pages_book
    return {
        "leaked_registrations": len(rt.registrations()),
        "leaked_lifetimes": len(rt.lifetimes()),
        "leaked_attempts": len(attempts.active) + len(attempts.by_key) + len(attempts.generation),
        "leaked_pending": len(rt.pending_starts()),
        "leaked_declined": len(runner._declined),
        "leaked_page_records": len(book.by_pid) + len(book.by_key) + len(book.stop_failed),
        "leaked_nodes": int(rt.scheduler.statistics()["nodes"]),
    }


def _check_no_leaks(rt: Runtime, where: str) -> dict[str, int]:
    found = leaks(rt)
    if any(found.values()):
        raise BenchError(f"{where}: left behind {found}")
    rt._check()
    return found


_leftovers: list[_World] = []


def _clean_up() -> None:
    """Close what earlier samples left (called from setups, untimed)."""
    while _leftovers:
        _leftovers.pop().close()


atexit.register(_clean_up)


def _world(kind: str, path: str | None = None) -> _World:
    _clean_up()
    world = _World(kind, path)
    _leftovers.append(world)
    return world


# ---------------------------------------------------------------------------- rows


def _plain_writes(kind: str, n: int) -> Run:
    """Baseline: `n` plain cell writes, a fresh cell each, one awaited commit each."""
    world = _world(kind)
    cells = world.results(n, name="plain")
    counter = world.counter()

    async def main() -> None:
        for i, cell in enumerate(cells):
            tx = world.rt.edit()
            cell.with_tx(tx).set({"value": i})
            outcome = await tx.commit()
            if not outcome.ok:
                raise BenchError(f"plain write {i}: the commit failed: {outcome!r}")

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


def _one_document_writes(kind: str) -> Run:
    """PAGES page-sized records written into one document, one awaited commit each."""
    world = _world(kind)
    doc = world.rt.get_cell("records")
    counter = world.counter()

    async def main() -> None:
        for i in range(PAGES):
            tx = world.rt.edit()
            doc.with_tx(tx).key(f"p{i}").set(RECORD)
            outcome = await tx.commit()
            if not outcome.ok:
                raise BenchError(f"record write {i}: the commit failed: {outcome!r}")

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        got = doc.get()
        if not isinstance(got, dict) or len(got) != PAGES:
            raise BenchError("the records document does not hold every record")
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


def _open_pages(kind: str) -> Run:
    world = _world(kind)
    rt = world.rt
    results = world.results(PAGES)
    world.drive(lambda: world.set_up(results))
    counter = world.counter()

    async def main() -> None:
        for res in results:
            if await rt.open_page(res) is not True:
                raise BenchError(f"rt.open_page({res!r}) did not claim the page")
        await rt.idle()  # every page record's verdict is in

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = counter.counts()
        if (counts["registrations"], counts["page_records"]) != (PAGES, PAGES):
            raise BenchError(f"after opening {PAGES} pages: {counts}")
        if len(rt.lifetimes()) != PAGES or rt.pending_starts():
            raise BenchError("open pages without lifetimes, or starts left pending")
        return counts

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


def _close_pages(world: _World, results: list[Cell]) -> Run:
    rt = world.rt
    counter = world.counter()

    async def main() -> None:
        for res in results:
            rt.stop(res)
        await rt.idle()  # every stop record's verdict is in

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = counter.counts()
        if (counts["registrations"], counts["page_records"]) != (-PAGES, -PAGES):
            raise BenchError(f"after closing {PAGES} pages: {counts}")
        return dict(counts) | _check_no_leaks(rt, f"closing {PAGES} pages")

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


_template: str | None = None


def _template_file() -> str:
    """Once per process: a SQLite file with PAGES pages opened through `open_page`."""
    global _template
    if _template is None:
        directory = tempfile.mkdtemp(prefix="bench-pages-template-")
        atexit.register(shutil.rmtree, directory, True)
        path = os.path.join(directory, "template.db")
        world = _World("sqlite", path)
        try:
            results = world.results(PAGES)

            async def main() -> None:
                await world.set_up(results)
                for res in results:
                    if await world.rt.open_page(res) is not True:
                        raise BenchError(f"template: rt.open_page({res!r}) did not claim it")
                await world.rt.idle()

            world.drive(main)
        finally:
            world.close()  # a closed SQLiteStore has checkpointed its write-ahead log
        _template = path
    return _template


# ---------------------------------------------------------------------------- pages memory


@bench(group="pages memory", name="plain cell write (1 commit)", ops=PAGES, baseline=True)
def memory_plain_writes() -> Run:
    return _plain_writes("memory", PAGES)


@bench(group="pages memory", name="record into one doc (1 commit)", ops=PAGES)
def memory_record_writes() -> Run:
    return _one_document_writes("memory")


@bench(group="pages memory", name="await rt.open_page", ops=PAGES)
def memory_open() -> Run:
    return _open_pages("memory")


@bench(group="pages memory", name="rt.stop (open page)", ops=PAGES)
def memory_close() -> Run:
    world = _world("memory")
    results = world.results(PAGES)

    async def prepare() -> None:
        await world.set_up(results)
        for res in results:
            if await world.rt.open_page(res) is not True:
                raise BenchError(f"rt.open_page({res!r}) did not claim the page")
        await world.rt.idle()

    world.drive(prepare)
    return _close_pages(world, results)


# ---------------------------------------------------------------------------- pages sqlite


@bench(group="pages sqlite", name="plain cell write (1 commit)", ops=PAGES, baseline=True)
def sqlite_plain_writes() -> Run:
    return _plain_writes("sqlite", PAGES)


@bench(group="pages sqlite", name="record into one doc (1 commit)", ops=PAGES)
def sqlite_record_writes() -> Run:
    return _one_document_writes("sqlite")


@bench(group="pages sqlite", name="await rt.open_page", ops=PAGES)
def sqlite_open() -> Run:
    return _open_pages("sqlite")


@bench(group="pages sqlite", name="rt.stop (open page, resumed)", ops=PAGES)
def sqlite_close() -> Run:
    template = _template_file()
    _clean_up()
    directory = tempfile.mkdtemp(prefix="bench-pages-")
    path = os.path.join(directory, "pages.db")
    for suffix in ("", "-wal"):  # closing checkpoints the log; copy one if it stayed
        if os.path.exists(template + suffix):
            shutil.copyfile(template + suffix, path + suffix)
    world = _world("sqlite", path)
    world.dir = directory
    results = world.results(PAGES)

    async def prepare() -> None:
        resumed = await world.rt.resume()
        if len(resumed) != PAGES:
            raise BenchError(f"resume started {len(resumed)} of {PAGES} pages")

    world.drive(prepare)
    return _close_pages(world, results)


# ---------------------------------------------------------------------------- pages history

HISTORY_CYCLES = 100
"""Open + stop cycles per sample of the `pages history sqlite` rows."""
_history: dict[int, str] = {}


async def _open_and_stop(world: _World, results: list[Cell]) -> None:
    """One awaited `open_page` + awaited `stop` per result, in order."""
    rt = world.rt
    for res in results:
        if await rt.open_page(res) is not True:
            raise BenchError(f"rt.open_page({res!r}) did not claim the page")
        await rt.stop(res)


def _history_file(prior: int) -> str:
    """Once per process and size: a SQLite file on which `prior` pages were opened and
    stopped, each through the runtime (built on the next smaller one, if made)."""
    if prior in _history:
        return _history[prior]
    directory = tempfile.mkdtemp(prefix="bench-pages-history-")
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "history.db")
    done = max((n for n in _history if n < prior), default=0)
    if done:
        _copy_store(_history[done], path)
    world = _World("sqlite", path)
    try:
        chunk = 500
        for first in range(done, prior, chunk):
            results = [
                world.rt.get_cell(("prior", i)) for i in range(first, min(prior, first + chunk))
            ]

            async def main(results: list[Cell] = results) -> None:
                await world.set_up(results)
                await _open_and_stop(world, results)
                await world.rt.idle()

            world.drive(main)
        if world.open_pages():
            raise BenchError(f"{prior} prior pages: {world.open_pages()} left open")
    finally:
        world.close()  # a closed SQLiteStore has checkpointed its write-ahead log
    _history[prior] = path
    return path


def _copy_store(source: str, target: str) -> None:
    for suffix in ("", "-wal"):  # closing checkpoints the log; copy one if it stayed
        if os.path.exists(source + suffix):
            shutil.copyfile(source + suffix, target + suffix)


def _pages_history(prior: int) -> Run:
    template = _history_file(prior)
    _clean_up()
    directory = tempfile.mkdtemp(prefix="bench-pages-")
    path = os.path.join(directory, "pages.db")
    _copy_store(template, path)
    world = _world("sqlite", path)
    world.dir = directory
    results = world.results(HISTORY_CYCLES, name="fresh")
    world.drive(lambda: world.set_up(results))
    counter = world.counter()

    async def main() -> None:
        await _open_and_stop(world, results)
        await world.rt.idle()

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = dict(counter.counts())
        del counts["registrations"], counts["page_records"]  # 0 by construction
        found = _check_no_leaks(world.rt, f"{HISTORY_CYCLES} open + stop cycles")
        return counts | found

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


@bench(
    group="pages history sqlite", name="open+stop, 0 prior pages", ops=HISTORY_CYCLES, baseline=True
)
def history_0() -> Run:
    return _pages_history(0)


@bench(group="pages history sqlite", name="open+stop, 2,000 prior pages", ops=HISTORY_CYCLES)
def history_2000() -> Run:
    return _pages_history(2000)


@bench(group="pages history sqlite", name="open+stop, 10,000 prior pages", ops=HISTORY_CYCLES)
def history_10000() -> Run:
    return _pages_history(10000)


# ---------------------------------------------------------------------------- churn


@bench(group="start/stop churn", name="plain cell write (1 commit)", ops=CYCLES, baseline=True)
def churn_plain_writes() -> Run:
    return _plain_writes("memory", CYCLES)


@bench(group="start/stop churn", name="await rt.start + rt.stop (one result)", ops=CYCLES)
def churn() -> Run:
    world = _world("memory")
    rt = world.rt
    (res,) = world.results(1)
    world.drive(lambda: world.set_up([res]))
    counter = world.counter()
    installs = [0]

    async def main() -> None:
        for _ in range(CYCLES):
            if await rt.start(res) is not True:
                raise BenchError("rt.start of a stopped result did not claim it")
            installs[0] += len(rt.registrations())
            rt.stop(res)

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = dict(counter.counts())
        if installs[0] != CYCLES or counts["registrations"] != 0:
            raise BenchError(f"{CYCLES} cycles installed {installs[0]} registrations")
        del counts["registrations"], counts["page_records"]  # 0 by construction
        found = _check_no_leaks(rt, f"{CYCLES} start + stop cycles")
        return counts | {"installed": installs[0]} | found

    def run() -> Finish:
        world.drive(main)
        return finish

    return run

"""Benchmarks of reactive lists: `items.map(Card)` over N = 100, 1,000 and 10,000 tasks.

The workload is `Board`, defined here: `{"out": items.map(Card)}`, where
`items` is a list of links to task cells (`{"title": ..., "body": ...}`)
and `Card(element)` is three lifts that do about 20 us of Python together
(`words`, `score`, `label`), so one element is one registration and three
scheduler nodes. Two more list shapes keep the tasks inline in the list
document: dict elements (keyed by element id), and plain title strings mapped
by `Line` (the same three lifts over the title, with an empty body).

Groups
------
``lists setup``
    One op is one element. `map N=...`: `rt.run(tx, Board, ...)` + commit +
    the first full pull of `out` (every card computed), on a fresh runtime
    and store per sample whose task cells were written beforehand (untimed).
    `cold resume`: the runtime that set the board up is closed (which writes
    every card's inputs record); a second `Runtime` on the same `MemoryStore`
    (or a new `SQLiteStore` on a copy of the closed file) starts the existing
    result, `await rt.start(res)`, and pulls `out` in full. No card runs and
    every element child stays dormant (`runner._list_dormant`): one
    registration, the board's. The SQLite row then edits one task and pulls
    `out` (untimed): exactly that card runs again. Baseline: the same cards
    computed by plain Python (the three functions called per task).
``lists edit``
    One op is one element's title edited (a path write: through the element's
    link, into its inline dict, or of the inline string itself), then a pull of
    that card's label, for each list shape at each N. Peers doing the same
    edit: the idiomatic reaktiv UI (a `Signal` per task, a `Computed` per
    card, an `Effect` per card that shows it; the group's baseline at the
    largest N), a naive reaktiv design (the whole list in one `Signal`, every
    card in one `Computed`: the same work as recomputing everything), and
    plain Python recomputing every card. More rows per N edit a task (linked,
    or an inline dict) under `items.filter(Keep)` (its verdict flips) and under
    `items.flat_map(Tag)` (its items change), then either wait for the pass with
    a sink on the output's first item installed ("sink") or pull that item with
    no observer ("pull"); their reaktiv peers use a Computed per task and a
    Computed list over them.
``lists sink``
    One op is one element edited, then the pass that re-delivers the whole
    mapped list to a plain `sink` on `out` (what a view without patches
    does), for each list shape at each N.
``lists insert`` / ``lists remove`` / ``lists reverse``
    One op is one list change followed by a pull of what it affects: a new
    task linked at the front (`items.insert(0, link)`), then a pull of card
    0; the middle element removed (`items.remove(i)`), then a pull of the card
    now in its place; the whole list of links reversed, then a pull of card 0.
    The insert and remove groups also make the same change by writing the
    whole new list (`items.set([...])`, what a client without the incremental
    calls does), and the same `insert` / `remove` calls on the list of inline
    dicts (keyed by element id, which a splice moves with its element: no other
    element's card runs).

The change groups reuse one set-up world per N and list shape for all their
samples (built once per process, untimed, on the first sample that needs
it): a fresh 10,000-element setup costs about half a minute, and building
one per sample would make the run take many minutes. Every sample changes
different elements (new titles, new tasks), so no sample repeats a no-op.

Counted work beside the times (deltas over the timed region): scheduler
computations and effect runs, transactions sent to the store (`sent`) and
elided (`elided`: an effect's run commits nothing), calls of the
element functions (`calls`: three per computed card), coordinator
reconciles, registrations, the reader index's path comparisons (how many
read paths a change was matched against), and for the sink its deliveries.
The reaktiv rows count the same things on their side: element-function
calls, `Computed` runs and `Effect` runs, counted by the functions
themselves. Each change row asserts its counts exactly, and every row checks
the values it pulled (or was delivered) against the same cards computed in
plain Python.

Sizes: ``BENCH_LIST_SIZES`` (default ``100,1000,10000``); for example
``BENCH_LIST_SIZES=100,1000`` leaves out the 10,000-element rows, which take
most of the run (the harness's ``--quick`` only lowers the sample count).

See docs/performance.md ("Reactive lists") for numbers.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

import reaktiv

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import MISSING, Cell, MemoryStore, SQLiteStore, StoreBase
from runner import Runtime, lift, pattern


def _sizes() -> list[int]:
    raw = os.environ.get("BENCH_LIST_SIZES", "100,1000,10000")
    try:
        sizes = [int(s) for s in raw.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(n < 10 for n in sizes):
        raise BenchError(f"BENCH_LIST_SIZES must be sizes >= 10, comma-separated; got {raw!r}")
    return sizes


SIZES = _sizes()
BIG = max(SIZES)
CHANGES = 5
"""List changes per sample in the insert and remove groups."""
EDITS = 20
"""Edits per sample in the edit group (cheap: more of them steady the median)."""
NODES_PER_CARD = 3

# ---------------------------------------------------------------------------- the work

CALLS = [0]
"""Element-function calls (three per card computed)."""


def _spin(text: str) -> int:
    h = 0
    for _ in range(2):
        for ch in text:
            h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    return h


def words(title: Any, body: Any) -> int:
    CALLS[0] += 1
    return len(f"{title} {body}".split())


def score(title: Any, body: Any) -> int:
    CALLS[0] += 1
    return _spin(f"{title}|{body}") % 1000


def label(title: Any, n: Any, s: Any) -> str:
    CALLS[0] += 1
    return f"{str(title or '').upper()} ({n} words, score {s})"


def card(task: dict[str, Any]) -> dict[str, Any]:
    """The card of one task, in plain Python (what `Card` computes)."""
    t, b = task["title"], task["body"]
    s = score(t, b)
    return {"label": label(t, words(t, b), s), "score": s}


def expected(task: dict[str, Any]) -> dict[str, Any]:
    """`card(task)` for checking a result: not counted in `CALLS`."""
    before = CALLS[0]
    try:
        return card(task)
    finally:
        CALLS[0] = before


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    """Three lifts over one task: its word count, a score, and a label using both."""
    n = lift(words)(element["title"], element["body"])
    s = lift(score)(element["title"], element["body"])
    return {"label": lift(label)(element["title"], n, s), "score": s}


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Card)}


@pattern
def Line(element):  # type: ignore[no-untyped-def]
    """`Card` of an inline scalar (the element is the title; the body is empty)."""
    n = lift(words)(element, "")
    s = lift(score)(element, "")
    return {"label": lift(label)(element, n, s), "score": s}


@pattern
def LineBoard(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Line)}


def kept(title: Any, body: Any) -> bool:
    """A filter's verdict: as much work as `score`, kept when the title ends in "!"."""
    score(title, body)
    return str(title).endswith("!")


def tagged(title: Any, body: Any) -> list[Any]:
    """A flat_map's result: the title and its score (two items per task)."""
    return [title, score(title, body)]


@pattern
def Keep(element):  # type: ignore[no-untyped-def]
    return lift(kept)(element["title"], element["body"])


@pattern
def Tag(element):  # type: ignore[no-untyped-def]
    return lift(tagged)(element["title"], element["body"])


@pattern
def KeptBoard(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(Keep)}


@pattern
def TagBoard(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(Tag)}


LINKS, DICTS, SCALARS = "links", "inline dicts", "inline scalars"
"""How the list holds its tasks: links to task cells, inline dicts, inline title strings."""


def task(i: int, title: str | None = None, body: str | None = None) -> dict[str, Any]:
    if body is None:
        body = f"write the report for item {i} and send it"
    return {"title": title or f"task {i}", "body": body}


# ---------------------------------------------------------------------------- harness glue


class _World:
    """A runtime, its store, the event loop that drives it, and the tasks it maps.

    `tasks` mirrors the list in Python, in list order: the cell of each task
    (links mode) and the task's current value, so the expected cards are known.
    """

    def __init__(self, n: int, *, kind: str = LINKS, store: StoreBase | None = None) -> None:
        self.n = n
        self.kind = kind
        self.links = kind == LINKS
        self.store: StoreBase = store if store is not None else MemoryStore()
        self.loop = asyncio.new_event_loop()
        self.rt = Runtime(self.store, space="bench")
        self.items = self.rt.get_cell("items")
        self.res = self.rt.get_cell("board")
        self.cells: list[Cell] = []
        self.tasks: list[dict[str, Any]] = []
        self.made = 0
        self.board: Any = None
        """The pattern run over the list (None: `Board`, or `LineBoard` for scalars)."""
        Board.graph  # noqa: B018  traced before any timed region
        Card.graph  # noqa: B018
        LineBoard.graph  # noqa: B018
        Line.graph  # noqa: B018

    def drive(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return self.loop.run_until_complete(main())

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.rt.aclose())
            self.loop.close()

    async def write_tasks(self) -> None:
        tx = self.rt.edit()
        for i in range(self.n):
            self.tasks.append(task(i, body="" if self.kind == SCALARS else None))
            if self.links:
                c = self.rt.get_cell(("task", i))
                c.with_tx(tx).set(self.tasks[-1])
                self.cells.append(c)
        self.made = self.n
        value: list[Any]
        if self.links:
            value = [c.link() for c in self.cells]
        elif self.kind == SCALARS:
            value = [t["title"] for t in self.tasks]
        else:
            value = list(self.tasks)
        self.items.with_tx(tx).set(value)
        if not (await tx.commit()).ok:
            raise BenchError(f"writing {self.n} tasks: the commit failed")

    async def run_board(self) -> None:
        tx = self.rt.edit()
        board = self.board or (LineBoard if self.kind == SCALARS else Board)
        self.rt.run(tx, board, {"items": self.items}, self.res)
        if not (await tx.commit()).ok:
            raise BenchError(f"rt.run of a {self.n}-element board: the commit failed")

    async def pull_all(self) -> None:
        got = await self.res.key("out").pull()
        self.expect_all(got)

    def expect_all(self, got: Any) -> None:
        if got != [expected(t) for t in self.tasks]:
            raise BenchError(f"{self.n}-element board: the pulled cards are not the tasks' cards")

    def coordinator_reconciles(self) -> int:
        return sum(c.reconciles for c in self.rt.runner.coordinators)

    def whole_combines(self) -> int:
        """Runs of filter / flat_map combiners that combined the whole list."""
        return sum(c.combiner.combines for c in self.rt.runner.coordinators if c.combiner)

    def now(self) -> dict[str, int]:
        # O(1) counters only: this runs inside the timed region, and
        # `scheduler.statistics()` (which walks every node) or `rt.registrations()`
        # (a frozenset of every key) cost milliseconds at N = 10,000, charged to
        # the op.
        scheduler = self.rt.scheduler
        stats = scheduler.stats
        return {
            "computations": stats.runs_computation,
            "effects": stats.runs_effect,
            # Transactions sent to the store and elided (changed nothing: an effect's run).
            "sent": self.rt.replica.stats.commits_sent,
            "elided": self.rt.replica.stats.commits_elided,
            "calls": CALLS[0],
            "reconciles": self.coordinator_reconciles(),
            "combines": self.whole_combines(),
            "registrations": len(self.rt.runner.registrations),
            "comparisons": scheduler.index.comparisons,  # reader-index path checks
        }

    def counter(self) -> Callable[[], dict[str, int]]:
        start = self.now()
        return lambda: {k: v - start[k] for k, v in self.now().items()}

    async def edit(self, i: int, title: str) -> None:
        """One UI edit of element i's title: a path write into the list (through the
        element's link, into its inline dict, or of the inline scalar itself)."""
        if self.kind == SCALARS:
            await self.items.key(i).set(title)
        else:
            await self.items.key(i, "title").set(title)
        self.tasks[i] = {**self.tasks[i], "title": title}


_leftovers: list[_World] = []
_shared: dict[tuple[int, str], _World] = {}
_cancels: list[Callable[[], None]] = []
"""Sinks a row installed on a shared world, cancelled before the next row's setup."""
_templates: dict[str, Any] = {}


def _clean_up() -> None:
    while _cancels:
        _cancels.pop()()
    while _leftovers:
        _leftovers.pop().close()


def _close_all() -> None:
    _clean_up()
    for world in _shared.values():
        world.close()
    _shared.clear()
    for value in _templates.values():
        if isinstance(value, _World):
            value.close()
        elif isinstance(value, SQLiteStore):
            value.close()  # the cold resume's copy (its runtime closed above)
    if "sqlite_dir" in _templates:
        shutil.rmtree(_templates["sqlite_dir"], ignore_errors=True)
    _templates.clear()


atexit.register(_close_all)


def _fresh(n: int, **kw: Any) -> _World:
    _clean_up()
    world = _World(n, **kw)
    _leftovers.append(world)
    return world


def _built(n: int, *, kind: str = LINKS, board: Any = None) -> _World:
    """The shared, set-up and fully computed world of `n` elements (built once per process);
    `board`: another pattern than `Board` over the list of links (its output pulled whole
    once, unchecked)."""
    _clean_up()
    name = kind if board is None else f"{kind} {board.__qualname__}"
    world = _shared.get((n, name))
    if world is None:
        world = _shared[(n, name)] = _World(n, kind=kind)
        world.board = board

        async def build() -> None:
            await world.write_tasks()
            await world.run_board()
            if board is None:
                await world.pull_all()
            else:
                await world.res.key("out").pull()
            await world.rt.idle()

        world.drive(build)
    return world


def _expect(what: str, counts: dict[str, int], **expected: int) -> None:
    wrong = {k: (counts[k], v) for k, v in expected.items() if counts[k] != v}
    if wrong:
        raise BenchError(f"{what}: counted (got, expected) {wrong}; all counts {counts}")


# ---------------------------------------------------------------------------- setup


def _setup_bench(n: int) -> None:
    @bench(group="lists setup", name=f"map setup + first pull N={n}", ops=n)
    def map_setup() -> Run:
        world = _fresh(n)
        world.drive(world.write_tasks)

        async def main() -> None:
            await world.run_board()
            await world.pull_all()

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"setup of {n}",
                counts,
                calls=NODES_PER_CARD * n,
                computations=NODES_PER_CARD * n + 1,  # + the coordinator's one reconcile
                reconciles=1,
                registrations=n + 1,
            )
            return counts

        return run


for _n in SIZES:
    _setup_bench(_n)


@bench(group="lists setup", name=f"plain Python cards N={BIG}", ops=BIG, baseline=True)
def plain_cards() -> Run:
    tasks = [task(i) for i in range(BIG)]

    def run() -> Counts:
        before = CALLS[0]
        cards = [card(t) for t in tasks]
        if len(cards) != BIG:
            raise BenchError("plain cards: wrong length")
        return {"calls": CALLS[0] - before}

    return run


def _memory_template() -> _World:
    world = _templates.get("memory")
    if world is None:
        world = _templates["memory"] = _built_alone(BIG, MemoryStore())
        world.close()  # the runtime that set it up is gone; its store stays
    assert isinstance(world, _World)
    return world


def _built_alone(n: int, store: StoreBase) -> _World:
    world = _World(n, store=store)

    async def build() -> None:
        await world.write_tasks()
        await world.run_board()
        await world.pull_all()
        await world.rt.idle()

    world.drive(build)
    return world


async def _resume(second: _World, first: _World) -> None:
    if await second.rt.start(second.res) is not True:
        raise BenchError("cold resume: rt.start did not claim the existing board")
    got = await second.res.key("out").pull()
    first.expect_all(got)


def _dormant(world: _World) -> int:
    """Element children a restart left dormant (no registration, node or run)."""
    runner = world.rt.runner
    return sum(len(w.sleepers()) for c in runner.coordinators for w in c.watches.values())


def _expect_resumed(second: _World, counts: Counts) -> Counts:
    """A resume of a board whose runtime closed: every card's stored result and
    inputs record vouch for it, so no card runs and every element child stays
    dormant (`runner._list_dormant`); only the board's run is installed."""
    _expect(
        f"cold resume of {BIG}",
        dict(counts),
        calls=0,
        computations=1,  # the coordinator's one reconcile
        reconciles=1,
        registrations=1,  # the board's run
    )
    if (asleep := _dormant(second)) != BIG:
        raise BenchError(f"cold resume of {BIG}: {asleep} element children dormant")
    return counts


async def _edit_after_resume(second: _World, first: _World) -> None:
    second.tasks = list(first.tasks)
    second.cells = [second.rt.get_cell(("task", i)) for i in range(len(first.tasks))]
    i = len(second.tasks) // 2
    await second.edit(i, f"edited after resume at {i}")
    second.expect_all(await second.res.key("out").pull())


def _expect_edit_reaches(second: _World, first: _World) -> None:
    """One element edited after the resume, then `out` pulled (untimed): the edit wakes
    exactly its element's child, which runs its card once; the rest stay dormant."""
    counted = second.counter()
    second.drive(lambda: _edit_after_resume(second, first))
    _expect(
        f"an edit after the cold resume of {BIG}",
        counted(),
        calls=NODES_PER_CARD,
        registrations=1,  # the edited element's child, woken
    )
    if (asleep := _dormant(second)) != BIG - 1:
        raise BenchError(f"after one edit, {asleep} of {BIG} element children dormant")


@bench(group="lists setup", name=f"cold resume N={BIG} (MemoryStore)", ops=BIG)
def cold_resume_memory() -> Run:
    first = _memory_template()
    second = _fresh(BIG, store=first.store)

    def run() -> Finish:
        counted = second.counter()
        second.drive(lambda: _resume(second, first))
        counts = counted()
        # No edit here: it would change the shared store every later sample resumes.
        return lambda: _expect_resumed(second, counts)

    return run


def _sqlite_template() -> tuple[_World, str]:
    if "sqlite" not in _templates:
        directory = _templates["sqlite_dir"] = tempfile.mkdtemp(prefix="bench-lists-")
        path = os.path.join(directory, "board.db")
        world = _built_alone(BIG, SQLiteStore(path))
        world.close()  # the process that set it up is gone; its file stays
        world.store.close()
        _templates["sqlite"] = (world, path)
    first, path = _templates["sqlite"]
    return first, path


@bench(group="lists setup", name=f"cold resume N={BIG} (SQLite file reopened)", ops=BIG)
def cold_resume_sqlite() -> Run:
    first, path = _sqlite_template()
    _clean_up()
    # Each sample reopens its own copy of the closed file: the untimed edit after the
    # resume commits to it, and the next sample must find the file as it was closed.
    if (previous := _templates.pop("resumed", None)) is not None:
        previous.close()
    _templates["copies"] = copies = _templates.get("copies", 0) + 1
    copy = os.path.join(os.path.dirname(path), f"resumed-{copies}.db")
    shutil.copyfile(path, copy)
    store = _templates["resumed"] = SQLiteStore(copy)
    second = _World(BIG, store=store)
    _leftovers.append(second)

    def run() -> Finish:
        counted = second.counter()
        second.drive(lambda: _resume(second, first))
        counts = counted()

        def finish() -> Counts:
            _expect_resumed(second, counts)
            _expect_edit_reaches(second, first)
            return counts

        return finish

    return run


# ---------------------------------------------------------------------------- edit


def _edit_bench(n: int, kind: str) -> None:
    what = "scalar write" if kind == SCALARS else "path write"

    @bench(group="lists edit", name=f"cellweave {what} N={n} ({kind})", ops=EDITS)
    def edit() -> Run:
        world = _built(n, kind=kind)
        step = max(1, n // EDITS)
        positions = [(k * step + world.made) % n for k in range(EDITS)]
        world.made += 1
        # (Each edit a new title, also when N < EDITS edits an element twice a sample.)
        titles = [f"edited {world.made}.{k} at {i}" for k, i in enumerate(positions)]

        async def main() -> None:
            for i, title in zip(positions, titles, strict=True):
                await world.edit(i, title)
                got = await world.res.key("out", i, "label").pull()
                if got != expected(world.tasks[i])["label"]:
                    raise BenchError(f"edit of {i}: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"edit at N={n} ({kind})",
                counts,
                calls=NODES_PER_CARD * EDITS,
                computations=NODES_PER_CARD * EDITS,
                reconciles=0,
                registrations=0,
            )
            return counts

        return run


for _kind in (LINKS, DICTS, SCALARS):
    for _n in SIZES:
        _edit_bench(_n, _kind)


def _first_kept(tasks: list[dict[str, Any]], op: str) -> Callable[[int, str], Any]:
    """What the output's first item is once task i (already updated in `tasks`) has its
    new title, in O(log N) plus a C-level list insert or delete: a
    flat_map's first item is task 0's title; a filter's is the first task whose title
    ends in "!" (their positions are kept sorted). Built outside the timed region."""
    import bisect

    kept = [i for i, t in enumerate(tasks) if str(t["title"]).endswith("!")]

    def after(i: int, title: str) -> Any:
        if op == "flat_map":
            return tasks[0]["title"]
        at = bisect.bisect_left(kept, i)
        present = at < len(kept) and kept[at] == i
        if title.endswith("!") and not present:
            kept.insert(at, i)
        elif not title.endswith("!") and present:
            del kept[at]
        return tasks[kept[0]] if kept else None

    return after


def _aggregate_edit_bench(n: int, board: Any, op: str, kind: str, how: str) -> None:
    @bench(
        group="lists edit",
        name=f"cellweave {op}, one result changed, {how} N={n} ({kind})",
        ops=EDITS,
    )
    def edit_aggregate() -> Run:
        """One task's title edited (through its link, or into its inline dict) so that its
        element's result changes (a filter's verdict flips; a flat_map's items change).
        The element's one node runs, then the list's combiner, which splices only that
        element's part of the output (issue 14 item 5); the coordinator's reconcile does
        not run. `how`: "pull" pulls the output's first item after each edit (a pull
        makes the combiner and every element's node live, then lets go: the scheduler's
        liveness walk is O(N)); "sink" keeps a sink on the output's first item (a view
        showing it) and waits for the pass to settle (`rt.idle()`)."""
        world = _built(n, kind=kind, board=board)
        step = max(1, n // EDITS)
        positions = [(k * step + world.made) % n for k in range(EDITS)]
        world.made += 1
        first = _first_kept(world.tasks, op)
        seen: list[Any] = []
        if how == "sink":
            _cancels.append(world.res.key("out", 0).sink(seen.append))
            world.drive(world.rt.idle)

        async def main() -> None:
            for i in positions:
                title = world.tasks[i]["title"]
                title = title[:-1] if title.endswith("!") else f"{title}!"
                await world.edit(i, title)
                want = first(i, title)
                if how == "pull":
                    got = await world.res.key("out", 0).pull()
                    got = None if got is MISSING else got  # no item kept: absent
                else:
                    await world.rt.idle()
                    got = seen[-1]
                if got != want:
                    raise BenchError(f"{op} edit of {i}: got {got!r}, not {want!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"{op} edit at N={n} ({kind}, {how})",
                counts,
                calls=EDITS,  # the element's one lift (`score` inside it)
                computations=2 * EDITS,  # the lift and the combiner's update
                reconciles=0,
                combines=0,
                registrations=0,
            )
            return counts

        return run


def _reaktiv_aggregate_bench(n: int, op: str) -> None:
    @bench(
        group="lists edit",
        name=f"reaktiv idiomatic {op} (Signal, Computed per task, Computed list) N={n}",
        ops=EDITS,
    )
    def edit_reaktiv_aggregate() -> Run:
        """The same edit in reaktiv, written as a reaktiv UI would: a Signal per task, a
        Computed per task (its verdict, or its items), a Computed for the filtered or
        flattened list over them, and an Effect showing its first item. reaktiv re-runs
        the list's Computed over every task's Computed: O(N) per edit."""
        runs = [0]
        fired = [0]
        signals = [reaktiv.Signal(task(i)) for i in range(n)]

        def per_task(signal: Any) -> Any:
            def compute() -> Any:
                runs[0] += 1
                t = signal()
                fn = kept if op == "filter" else tagged
                return fn(t["title"], t["body"])

            return reaktiv.Computed(compute)

        results = [per_task(s) for s in signals]

        def combined() -> list[Any]:
            runs[0] += 1
            if op == "filter":
                return [s() for s, r in zip(signals, results, strict=True) if r()]
            return [x for r in results for x in r()]

        out = reaktiv.Computed(combined)
        shown: list[Any] = [None]

        def show() -> None:
            fired[0] += 1
            items = out()
            shown[0] = items[0] if items else None

        effect = reaktiv.Effect(show)
        made = [0]
        tasks = [task(i) for i in range(n)]
        first = _first_kept(tasks, op)

        def run() -> Counts:
            made[0] += 1
            start = (CALLS[0], runs[0], fired[0])
            for k in range(EDITS):
                i = (k * (n // EDITS) + made[0]) % n
                title = signals[i]()["title"]
                title = title[:-1] if title.endswith("!") else f"{title}!"
                tasks[i] = {**signals[i](), "title": title}
                signals[i].set(tasks[i])
                expect = first(i, title)
                if shown[0] != expect:
                    raise BenchError(f"reaktiv {op}: shown {shown[0]!r}, not {expect!r}")
            assert effect is not None
            return {
                "calls": CALLS[0] - start[0],
                "computations": runs[0] - start[1],
                "effects": fired[0] - start[2],
            }

        return run


def _aggregate_splice_bench(n: int, board: Any, op: str, kind: str, change: str) -> None:
    what = "insert at front" if change == "insert" else "remove middle"

    @bench(
        group=f"lists {change}",
        name=f"cellweave {op} {what}, sink N={n} ({kind})",
        ops=CHANGES,
    )
    def splice_aggregate() -> Run:
        """`items.insert(0, x)` (a new task: inline, or linked to a cell written before,
        untimed) or `items.remove(i)` of the middle element under a filter or flat_map,
        with a sink on the output's first item (a view showing it), then `await
        rt.idle()`. The coordinator reconciles once and splices its elements document;
        the combiner splices the output (`combines` stays 0: issue 14 item 5) and its
        read set. An insert runs the new element's one lift, before the combiner; a
        remove runs no element's node. The inserted tasks'
        titles end in "!" so the filter keeps them and the view changes each time."""
        world = _built(n, kind=kind, board=board)
        made = world.made
        world.made += CHANGES
        new_tasks = [task(made + k, f"inserted {made + k}!") for k in range(CHANGES)]
        new_cells = [world.rt.get_cell(("task", made + k)) for k in range(CHANGES)]
        if change == "insert" and world.links:

            async def prepare() -> None:
                tx = world.rt.edit()
                for cell, t in zip(new_cells, new_tasks, strict=True):
                    cell.with_tx(tx).set(t)
                if not (await tx.commit()).ok:
                    raise BenchError(f"{op} insert: writing the new tasks failed")

            world.drive(prepare)
        # What the view shows after each change, worked out before the timed region.
        tasks = list(world.tasks)
        wanted: list[Any] = []
        for t in new_tasks:
            if change == "insert":
                tasks.insert(0, t)
            else:
                del tasks[len(tasks) // 2]
            kept = [x for x in tasks if str(x["title"]).endswith("!")]
            wanted.append(tasks[0]["title"] if op == "flat_map" else kept[0] if kept else None)
        seen: list[Any] = []
        _cancels.append(world.res.key("out", 0).sink(seen.append))
        world.drive(world.rt.idle)
        undo: list[tuple[int, Any, Any, Cell | None]] = []
        """(position, task, list item, its cell) of each change, to undo it untimed."""

        async def main() -> None:
            for k, want in enumerate(wanted):
                if change == "insert":
                    t = new_tasks[k]
                    item = new_cells[k].link() if world.links else t
                    world.tasks.insert(0, t)
                    if world.links:
                        world.cells.insert(0, new_cells[k])
                    undo.append((0, t, item, None))
                    await world.items.insert(0, item)
                else:
                    i = len(world.tasks) // 2
                    t = world.tasks.pop(i)
                    cell = world.cells.pop(i) if world.links else None
                    undo.append((i, t, t if cell is None else cell.link(), cell))
                    await world.items.remove(i)
                await world.rt.idle()
                if seen[-1] != want:
                    raise BenchError(f"{op} {change}: shown {seen[-1]!r}, not {want!r}")

        async def put_back() -> None:
            # The world is shared with the edit rows: undone, untimed.
            while undo:
                i, t, item, cell = undo.pop()
                if change == "insert":
                    del world.tasks[i]
                    if world.links:
                        del world.cells[i]
                    await world.items.remove(i)
                else:
                    world.tasks.insert(i, t)
                    if cell is not None:
                        world.cells.insert(i, cell)
                    await world.items.insert(i, item)
            await world.rt.idle()

        def run() -> Callable[[], Counts]:
            counted = world.counter()
            world.drive(main)
            counts = counted()

            def finish() -> Counts:
                world.drive(put_back)
                inserted = CHANGES if change == "insert" else 0
                _expect(
                    f"{op} {change} at N={n} ({kind})",
                    counts,
                    calls=inserted,  # the new element's one lift; a remove runs none
                    # A reconcile and one combiner update each, and the new element's lift
                    # (run before the combiner: it reads the lift's result).
                    computations=2 * CHANGES + inserted,
                    reconciles=CHANGES,
                    combines=0,  # the output is spliced, never combined whole
                    registrations=CHANGES if change == "insert" else -CHANGES,
                )
                return counts

            return finish

        return run


for _n in SIZES:
    for _kind in (LINKS, DICTS):
        for _how in ("sink", "pull"):
            _aggregate_edit_bench(_n, KeptBoard, "filter", _kind, _how)
            _aggregate_edit_bench(_n, TagBoard, "flat_map", _kind, _how)
    _reaktiv_aggregate_bench(_n, "filter")
    _reaktiv_aggregate_bench(_n, "flat_map")
    for _kind in (LINKS, DICTS):
        for _change in ("insert", "remove"):
            _aggregate_splice_bench(_n, KeptBoard, "filter", _kind, _change)
            _aggregate_splice_bench(_n, TagBoard, "flat_map", _kind, _change)


def _peer_benches(n: int) -> None:
    @bench(
        group="lists edit",
        name=f"reaktiv idiomatic (Signal, Computed, Effect per card) N={n}",
        ops=EDITS,
        baseline=(n == BIG),
    )
    def edit_reaktiv_idiomatic() -> Run:
        """What a reaktiv UI does: a Signal per task, a Computed per card, an Effect per
        card that shows it (here: stores it in `shown`). Effects run synchronously on
        `set`, so each edit computes and shows exactly the edited card."""
        runs = [0]
        fired = [0]
        signals = [reaktiv.Signal(task(i)) for i in range(n)]
        shown: list[Any] = [None] * n

        def view(i: int) -> tuple[Any, Any]:
            signal = signals[i]

            def compute() -> dict[str, Any]:
                runs[0] += 1
                return card(signal())

            computed = reaktiv.Computed(compute)

            def show() -> None:
                fired[0] += 1
                shown[i] = computed()

            return computed, reaktiv.Effect(show)

        views = [view(i) for i in range(n)]  # kept alive: effects are weakly held
        made = [0]

        def run() -> Counts:
            made[0] += 1
            start = (CALLS[0], runs[0], fired[0])
            for k in range(EDITS):
                i = (k * max(1, n // EDITS) + made[0]) % n  # (the positions cellweave's row edits)
                new = {**signals[i](), "title": f"edited {made[0]}.{k} at {i}"}
                signals[i].set(new)
                if shown[i] != expected(new):
                    raise BenchError(f"reaktiv idiomatic: card {i} not shown")
            counts = {
                "calls": CALLS[0] - start[0],
                "computations": runs[0] - start[1],
                "effects": fired[0] - start[2],
            }
            _expect(
                f"reaktiv idiomatic at N={n}",
                counts,
                calls=NODES_PER_CARD * EDITS,
                computations=EDITS,
                effects=EDITS,
            )
            assert len(views) == n
            return counts

        return run

    @bench(group="lists edit", name=f"reaktiv naive: whole list in one Computed N={n}", ops=EDITS)
    def edit_reaktiv() -> Run:
        tasks = reaktiv.Signal([task(i) for i in range(n)])
        runs = [0]

        def compute() -> list[dict[str, Any]]:
            runs[0] += 1
            return [card(t) for t in tasks()]

        cards = reaktiv.Computed(compute)
        cards()

        def run() -> Counts:
            before = (CALLS[0], runs[0])
            for k in range(EDITS):
                i = k * (n // EDITS)
                new = list(tasks())  # reaktiv compares by identity: a new list
                new[i] = {**new[i], "title": f"edited {k}"}
                tasks.set(new)
                if cards()[i] != expected(new[i]):
                    raise BenchError("reaktiv: wrong card")
            return {"calls": CALLS[0] - before[0], "computations": runs[0] - before[1]}

        return run

    @bench(group="lists edit", name=f"plain Python recompute all N={n}", ops=EDITS)
    def edit_plain() -> Run:
        tasks = [task(i) for i in range(n)]
        cards = [card(t) for t in tasks]

        def run() -> Counts:
            nonlocal cards
            before = CALLS[0]
            for k in range(EDITS):
                i = k * (n // EDITS)
                tasks[i] = {**tasks[i], "title": f"edited {k}"}
                cards = [card(t) for t in tasks]
            return {"calls": CALLS[0] - before}

        return run


for _n in SIZES:
    _peer_benches(_n)


# ---------------------------------------------------------------------------- sink

SINK_EDITS = 3
"""Edits per sample in the sink group (each re-delivers the whole list)."""


def _sink_bench(n: int, kind: str) -> None:
    @bench(
        group="lists sink",
        name=f"cellweave whole-list sink, one edit N={n} ({kind})",
        ops=SINK_EDITS,
    )
    def sink() -> Run:
        """A plain `sink` on the whole mapped list (what a view without patches does):
        one element edited, then the pass that re-delivers the list. The sink is
        installed untimed (its first delivery materializes every card)."""
        world = _built(n, kind=kind)
        got: list[Any] = []
        _cancels.append(world.res.key("out").sink(got.append))
        world.drive(world.rt.idle)
        world.made += 1
        positions = [(world.made * 7919 + k * (n // SINK_EDITS)) % n for k in range(SINK_EDITS)]
        titles = [f"sunk {world.made} at {i}" for i in positions]

        async def main() -> None:
            for i, title in zip(positions, titles, strict=True):
                await world.edit(i, title)
                await world.rt.idle()
                if got[-1][i] != expected(world.tasks[i]):
                    raise BenchError(f"sink at N={n} ({kind}): card {i} not delivered")

        def run() -> Counts:
            del got[:]
            counted = world.counter()
            world.drive(main)
            counts = {**counted(), "deliveries": len(got)}
            _expect(
                f"sink at N={n} ({kind})",
                counts,
                calls=NODES_PER_CARD * SINK_EDITS,
                computations=NODES_PER_CARD * SINK_EDITS,
                effects=SINK_EDITS,
                reconciles=0,
                deliveries=SINK_EDITS,
            )
            return counts

        return run


for _kind in (LINKS, DICTS, SCALARS):
    for _n in SIZES:
        _sink_bench(_n, _kind)


# ---------------------------------------------------------------------------- insert, remove


def _structure_benches(n: int) -> None:
    for whole in (False, True):
        _insert_bench(n, whole)
        _remove_bench(n, whole)
    for kind in (DICTS, SCALARS):
        _inline_insert_bench(n, kind)
        _inline_remove_bench(n, kind)
    _reverse_bench(n)


def _inline_insert_bench(n: int, kind: str) -> None:
    @bench(group="lists insert", name=f"cellweave insert at front N={n} ({kind})", ops=CHANGES)
    def insert_inline() -> Run:
        """`items.insert(0, x)` into a list of inline dicts (or title strings), then a
        pull of card 0. Inline elements are keyed by element id, which the splice moves
        with each element: the reconcile diffs only the ids' middle, and only the new
        element's card runs (no kept element's child is invalidated or re-pointed)."""
        world = _built(n, kind=kind)
        made = world.made
        world.made += CHANGES
        body = "" if kind == SCALARS else None
        new_tasks = [task(made + k, f"inserted {made + k}", body) for k in range(CHANGES)]

        async def main() -> None:
            for t in new_tasks:
                world.tasks.insert(0, t)
                await world.items.insert(0, t["title"] if kind == SCALARS else t)
                got = await world.res.key("out", 0, "label").pull()
                if got != expected(world.tasks[0])["label"]:
                    raise BenchError(f"inline insert: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"inline insert at N={n} ({kind})",
                counts,
                calls=NODES_PER_CARD * CHANGES,  # the new element's card only
                computations=(NODES_PER_CARD + 1) * CHANGES,  # + one reconcile each
                reconciles=CHANGES,
                registrations=CHANGES,
            )
            return counts

        return run


def _inline_remove_bench(n: int, kind: str) -> None:
    @bench(group="lists remove", name=f"cellweave remove middle N={n} ({kind})", ops=CHANGES)
    def remove_inline() -> Run:
        """`items.remove(i)` of the middle inline dict (or title string), then a pull of
        the card now at i: that card is its element's, computed before (see the insert
        row): no card runs."""
        world = _built(n, kind=kind)

        async def main() -> None:
            for _ in range(CHANGES):
                i = len(world.tasks) // 2
                del world.tasks[i]
                await world.items.remove(i)
                got = await world.res.key("out", i, "label").pull()
                if got != expected(world.tasks[i])["label"]:
                    raise BenchError(f"inline remove: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"inline remove at N={n} ({kind})",
                counts,
                calls=0,  # the card now at i is its element's, computed before
                computations=CHANGES,  # the reconciles; no card runs
                reconciles=CHANGES,
                registrations=-CHANGES,  # the removed element's child
            )
            return counts

        return run


def _insert_bench(n: int, whole: bool) -> None:
    how = ", whole-list set" if whole else ""

    @bench(group="lists insert", name=f"cellweave insert at front{how} N={n}", ops=CHANGES)
    def insert() -> Run:
        world = _built(n)
        rt = world.rt
        new_cells: list[Cell] = []
        for _ in range(CHANGES):
            i = world.made
            world.made += 1
            cell = rt.get_cell(("task", i))
            new_cells.append(cell)

        async def prepare() -> None:
            tx = rt.edit()
            for j, cell in enumerate(new_cells):
                cell.with_tx(tx).set(task(world.made - CHANGES + j))
            if not (await tx.commit()).ok:
                raise BenchError("insert: writing the new tasks failed")

        world.drive(prepare)

        async def main() -> None:
            for cell in new_cells:
                world.cells.insert(0, cell)
                world.tasks.insert(0, cell.get())
                if whole:
                    await world.items.set([c.link() for c in world.cells])
                else:
                    await world.items.insert(0, cell.link())
                got = await world.res.key("out", 0, "label").pull()
                if got != expected(world.tasks[0])["label"]:
                    raise BenchError(f"insert: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"insert at N={n}",
                counts,
                calls=NODES_PER_CARD * CHANGES,
                computations=(NODES_PER_CARD + 1) * CHANGES,  # + one reconcile each
                reconciles=CHANGES,
                registrations=CHANGES,
            )
            return counts

        return run


def _remove_bench(n: int, whole: bool) -> None:
    how = ", whole-list set" if whole else ""

    @bench(group="lists remove", name=f"cellweave remove middle{how} N={n}", ops=CHANGES)
    def remove() -> Run:
        world = _built(n)

        async def main() -> None:
            for _ in range(CHANGES):
                i = len(world.cells) // 2
                del world.cells[i], world.tasks[i]
                if whole:
                    await world.items.set([c.link() for c in world.cells])
                else:
                    await world.items.remove(i)
                got = await world.res.key("out", i, "label").pull()
                if got != expected(world.tasks[i])["label"]:
                    raise BenchError(f"remove: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(
                f"remove at N={n}",
                counts,
                calls=0,
                computations=CHANGES,  # the reconciles; no card runs
                reconciles=CHANGES,
                registrations=-CHANGES,
            )
            return counts

        return run


def _reverse_bench(n: int) -> None:
    @bench(group="lists reverse", name=f"cellweave reverse links N={n}", ops=1)
    def reverse() -> Run:
        world = _built(n)

        async def main() -> None:
            world.cells.reverse()
            world.tasks.reverse()
            await world.items.set([c.link() for c in world.cells])
            got = await world.res.key("out", 0, "label").pull()
            if got != expected(world.tasks[0])["label"]:
                raise BenchError(f"reverse: pulled {got!r}")

        def run() -> Counts:
            counted = world.counter()
            world.drive(main)
            counts = counted()
            _expect(f"reverse at N={n}", counts, calls=0, reconciles=1, registrations=0)
            return counts

        return run


for _n in SIZES:
    _structure_benches(_n)


# ---------------------------------------------------------------------------- profile


def profile(n: int = BIG, *, links: bool = True, top: int = 25) -> None:
    """cProfile path writes, inserts at the front and removes on a built `n`-element board.

    Run as ``python -m bench.bench_lists [N] [inline]``; prints the top
    functions by cumulative and by own CPU time for each kind of change
    (`inline`: the tasks inline in the list document; edits only).
    """
    import cProfile
    import gc
    import pstats
    import time

    world = _built(n, kind=LINKS if links else DICTS)
    cells = [world.rt.get_cell(("task", "profiled", k)) for k in range(CHANGES)]

    async def write_tasks() -> None:
        for k, cell in enumerate(cells):
            await cell.set(task(n + k, "profiled"))

    world.drive(write_tasks)

    async def edit() -> None:
        for k in range(CHANGES):
            i = (n // CHANGES) * k
            await world.items.key(i, "title").set(f"edited under the profiler {k}")
            await world.res.key("out", i, "label").pull()

    async def insert() -> None:
        for cell in cells:
            world.cells.insert(0, cell)
            await world.items.insert(0, cell.link())
            await world.res.key("out", 0, "label").pull()

    async def remove() -> None:
        for _ in cells:
            i = len(world.cells) // 2
            del world.cells[i]
            await world.items.remove(i)
            await world.res.key("out", i, "label").pull()

    changes = (
        [("path write", edit), ("insert at front", insert), ("remove middle", remove)]
        if links
        else [("edit", edit)]
    )
    for name, change in changes:
        gc.collect()  # as the harness does before a timed region
        # CPU time, not wall time: on a shared machine, wall time charges whatever
        # function was running when the process lost its core.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        world.drive(change)
        profiler.disable()
        print(f"\n=== {CHANGES} x {name}, N={n} ===")
        stats = pstats.Stats(profiler).strip_dirs()
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    import sys

    profile(int(sys.argv[1]) if len(sys.argv) > 1 else BIG, links="inline" not in sys.argv[2:])

"""Benchmarks of memory held per unit of a running program (issue 20 item 9).

Group ``memory per unit``: each row builds ``UNITS`` units under `tracemalloc`
and reports the bytes still held per unit (current traced size after minus
before, `gc.collect()` first), everything the runtime keeps for them included
(nodes, registrations, replica records, stored values, the `MemoryStore`'s
copies and history). The runtime, store and loop exist before the first
measurement. The time column is build time with tracing on: not an operation
cost.

- **reaktiv, one computed per element** (baseline): a `Signal` per element and
  a `Computed` reading it, each read once (a reaktiv program's mapped list).
- **mapped element**: a board ``items.map(Card)`` over a list of ``UNITS``
  numbers, one lift per card, pulled once (every card computed).
- **open page**: ``UNITS`` results of a one-lift pattern, each opened as a
  page (``rt.open_page``) and computed.
- **reaktiv, observed computed**: a `Signal`, a `Computed` reading it and an
  `Effect` on the computed, per unit (the baseline of the next row).
- **observed derived node**: ``UNITS`` computations made with
  `Scheduler.derive`, each reading its own source and observed by a
  `Scheduler.sink` (one delivery each).
- **principal of a shared inbox**: a space-scoped result mapping a shared list
  of ``INBOX`` elements (one lift per card) is set up once; ``PRINCIPALS``
  principals each start it (`rt.session(...)`) and pull it: one unit is one
  principal's instance (its nodes, element children and reads).

Counted work: ``bytes_per_unit`` and ``units``; ``runs`` the lift calls.

See docs/performance.md ("Memory per element, page and node") for numbers.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import reaktiv

from bench.harness import BenchError, Counts, Run, bench
from cells import MemoryStore, Space
from runner import Runtime, lift, pattern
from scheduler import Scheduler

UNITS = 1000
INBOX = 100
"""Elements of the shared inbox."""
PRINCIPALS = 20
"""Principals that start the shared inbox (its units)."""
RUNS = [0]


def card(x: Any) -> Any:
    RUNS[0] += 1
    return {"n": x, "double": (x or 0) * 2}


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    return lift(card)(element)


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}


@pattern
def Page(n):  # type: ignore[no-untyped-def]
    return {"card": lift(card)(n)}


def _card_of(signal: reaktiv.Signal[int]) -> Callable[[], Any]:
    return lambda: card(signal())


def _traced(build: Callable[[], object], units: int = UNITS) -> Counts:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        runs = RUNS[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if kept is None:
        raise BenchError("memory per unit: build() kept nothing")
    return {"bytes_per_unit": (after - before) // units, "units": units, "runs": RUNS[0] - runs}


@bench(group="memory per unit", name="reaktiv, one computed per element", ops=1, baseline=True)
def memory_reaktiv() -> Run:
    def build() -> object:
        signals = [reaktiv.Signal(i) for i in range(UNITS)]
        computeds = [reaktiv.Computed(_card_of(s)) for s in signals]
        if [c() for c in computeds[-1:]] != [card(UNITS - 1)]:
            raise BenchError("reaktiv: wrong value")
        RUNS[0] -= 1  # (the check's own call)
        return signals, computeds

    return lambda: _traced(build)


def _in_loop(
    main: Callable[[Runtime], Any],
    units: int = UNITS,
    prepare: Callable[[Runtime], Any] | None = None,
) -> Run:
    loop = asyncio.new_event_loop()
    rt = Runtime(space="bench")
    loop.run_until_complete(rt.get_cell("warm-up").set(0))  # (the runtime's own setup)
    if prepare is not None:
        loop.run_until_complete(prepare(rt))

    def run() -> Counts:
        try:
            return _traced(lambda: loop.run_until_complete(main(rt)), units)
        finally:
            loop.run_until_complete(rt.aclose())
            loop.close()

    return run


@bench(group="memory per unit", name="mapped element (one lift per card)", ops=1)
def memory_mapped_element() -> Run:
    async def main(rt: Runtime) -> object:
        items, board = rt.get_cell("items"), rt.get_cell("board")
        async with rt.edit() as tx:
            items.with_tx(tx).set(list(range(UNITS)))
            rt.run(tx, Board, {"items": items}, board)
        value = await board.pull()
        if len(value["cards"]) != UNITS:
            raise BenchError("mapped element: wrong board")
        return value

    return _in_loop(main)


@bench(group="memory per unit", name="open page (one lift)", ops=1)
def memory_open_page() -> Run:
    async def main(rt: Runtime) -> object:
        pages = []
        async with rt.edit() as tx:
            for i in range(UNITS):
                res = rt.get_cell(("page", i))
                rt.setup(tx, Page, {"n": i}, res)
                pages.append(res)
        for res in pages:
            await rt.open_page(res)
        if (await pages[-1].pull()) != {"card": card(UNITS - 1)}:
            raise BenchError("open page: wrong value")
        RUNS[0] -= 1
        return pages

    return _in_loop(main)


@bench(group="memory per unit", name="reaktiv, observed computed", ops=1)
def memory_reaktiv_observed() -> Run:
    def build() -> object:
        seen: list[Any] = []
        signals = [reaktiv.Signal(i) for i in range(UNITS)]
        computeds = [reaktiv.Computed(_card_of(s)) for s in signals]
        effects = [reaktiv.Effect(_deliver(c, seen)) for c in computeds]
        if len(seen) != UNITS:
            raise BenchError(f"reaktiv observed: {len(seen)} deliveries")
        return signals, computeds, effects, seen

    return lambda: _traced(build)


def _deliver(computed: Callable[[], Any], seen: list[Any]) -> Callable[[], None]:
    return lambda: seen.append(computed())


@bench(group="memory per unit", name="observed derived node (derive + sink)", ops=1)
def memory_observed_derived() -> Run:
    space = Space(MemoryStore(), "bench")
    sch = Scheduler(space.replica)
    space.cell("warm-up").set(0)
    sch.settle()

    def build() -> object:
        seen: list[Any] = []
        sources = [space.cell(f"src{i}") for i in range(UNITS)]
        tx = space.edit()
        for i, src in enumerate(sources):
            src.with_tx(tx).set(i)
        tx.commit()
        space.replica.pump()
        outs = [space.cell(f"out{i}") for i in range(UNITS)]
        cancels = []
        for src, out in zip(sources, outs, strict=True):
            sch.derive(out, [src], card)
            cancels.append(sch.sink(out, seen.append))
        sch.settle()
        if len(seen) != UNITS or seen[-1] != card(UNITS - 1):
            raise BenchError(f"observed derived: {len(seen)} deliveries")
        RUNS[0] -= 1
        return sources, outs, cancels, seen

    def run() -> Counts:
        try:
            return _traced(build)
        finally:
            sch.close()

    return run


@pattern
def Inbox(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}


@bench(group="memory per unit", name=f"principal of a {INBOX}-element shared inbox", ops=1)
def memory_inbox_principal() -> Run:
    async def prepare(rt: Runtime) -> None:
        items, inbox = rt.get_cell("items"), rt.get_cell("inbox")
        async with rt.edit() as tx:
            items.with_tx(tx).set(list(range(INBOX)))
            rt.setup(tx, Inbox, {"items": items}, inbox)

    async def main(rt: Runtime) -> object:
        kept = []
        for i in range(PRINCIPALS):
            session = rt.session(f"p{i}", "s")
            inbox = session.get_cell("inbox")
            await session.start(inbox)
            value = await inbox.pull()
            if len(value["cards"]) != INBOX:
                raise BenchError("shared inbox: wrong value")
            kept.append((session, value))
        return kept

    return _in_loop(main, PRINCIPALS, prepare)

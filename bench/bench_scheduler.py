"""Benchmarks of the scheduler on the standard reactivity shapes.

Each group runs the same workload three ways in one run, round-robin:
plain Python recomputation (the baseline: one object per derived value, a
fixed order, every write recomputes everything downstream), the reaktiv
signals library, and cellweave (every node update is a transaction with a
commit, its verdict and a notification). Counted work is reported beside the
times, counted where it happened (bench/_counting.py): ``runs`` (derived
functions called: counted inside reaktiv's formulas, from the scheduler's
statistics for cellweave), ``effects`` (effect or sink calls), and for
cellweave the transactions ``sent`` to the store and ``elided`` (settled at once
because they changed nothing: an effect's run that needed a transaction; a sink
reading a plain value needs none). Every row asserts its counts.

``chain``   1 source -> 1000 derived in a line; one op = one write + read of the tail.
``broad``   1 source -> 1000 derived, each with an effect; one op = one write.
``diamond`` 1 source -> 5 -> sum, with an effect; one op = one write.

See docs/performance.md for numbers and the goals they are measured against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import reaktiv

from bench._counting import Commits, Tally
from bench.harness import Counts, Run, bench
from cells import MISSING, Cell, MemoryStore, Space, Transaction, read_value
from scheduler import Scheduler

CHAIN = 1000
CHAIN_WRITES = 20
BROAD = 1000
BROAD_WRITES = 10
DIAMOND_WRITES = 200


class _Plain:
    __slots__ = ("fn", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.value: Any = None


def _plus(f: Callable[[], Any], k: int) -> Callable[[], Any]:
    return lambda: f() + k


def _counting(c: Callable[[], Any], count: list[int]) -> Callable[[], None]:
    # reaktiv passes a cleanup argument to effects that take parameters: keep it zero-arg.
    def effect() -> None:
        c()
        count[0] += 1

    return effect


def _reader(node: _Plain) -> Callable[[], Any]:
    return lambda: node.value


def _computation(
    sp: Space, sch: Scheduler, out: Cell, inputs: list[Cell], f: Callable[..., Any]
) -> None:
    links = [c.link() for c in inputs]
    key = out.doc_key

    def run(tx: Transaction) -> None:
        vals = [read_value(tx, link) for link in links]
        tx.write(key, ("value",), f(*[0 if v is MISSING else v for v in vals]))

    sch.register(
        run,
        identity=sp.identity,
        outputs=[(key, ("value",))],
        reads=[(c.doc_key, ("value",), False) for c in inputs],
    )


def _derived(
    sp: Space, sch: Scheduler, out: Cell, inputs: list[Cell], f: Callable[..., Any]
) -> None:
    sch.derive(out, inputs, f)


_Make = Callable[[Space, Scheduler, Cell, list[Cell], Callable[..., Any]], None]
"""How a row makes a node: `_computation` (a node function over a transaction) or
`_derived` (`Scheduler.derive`)."""


# ----------------------------------------------------------------------------- chain


@bench(group="chain 1000", name="plain", ops=CHAIN_WRITES, baseline=True)
def chain_plain() -> Run:
    source = [0]
    nodes: list[_Plain] = []
    prev: Callable[[], Any] = lambda: source[0]  # noqa: E731
    for _ in range(CHAIN):
        node = _Plain(_plus(prev, 1))
        nodes.append(node)
        prev = _reader(node)

    def run() -> Counts:
        runs = 0
        for i in range(CHAIN_WRITES):
            source[0] = i
            for n in nodes:
                n.value = n.fn()
                runs += 1
            assert nodes[-1].value == i + CHAIN
        return {"runs": runs, "effects": CHAIN_WRITES}

    return run


@bench(group="chain 1000", name="reaktiv (effect on tail)", ops=CHAIN_WRITES)
def chain_reaktiv() -> Run:
    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # reaktiv recurses per node
    src = reaktiv.Signal(0)
    prev: Any = src
    runs = Tally()
    for _ in range(CHAIN):
        prev = reaktiv.Computed(runs.wrap(_plus(prev, 1)))
    tail = prev
    seen: list[int] = []
    keep = [reaktiv.Effect(lambda: seen.append(tail()))]  # reaktiv stops a dropped effect

    def run() -> Counts:
        runs.take()
        n = len(seen)
        for i in range(CHAIN_WRITES):
            src.set(i + 1)
        assert seen[-1] == CHAIN_WRITES + CHAIN
        assert keep
        counts = {"runs": runs.take(), "effects": len(seen) - n}
        assert counts == {"runs": CHAIN * CHAIN_WRITES, "effects": CHAIN_WRITES}, counts
        return counts

    return run


@bench(group="chain 1000", name="cellweave (sink on tail)", ops=CHAIN_WRITES)
def chain_cellweave() -> Run:
    return _chain(_computation)


@bench(group="chain 1000", name="cellweave derive (sink on tail)", ops=CHAIN_WRITES)
def chain_cellweave_derive() -> Run:
    """The same graph made with `Scheduler.derive` (a node that is a function of its
    inputs' values, as reaktiv's `Computed` is): its runs commit with no transaction
    (`Replica.run_field`)."""
    return _chain(_derived)


def _chain(make: _Make) -> Run:
    sp = Space(MemoryStore(), "bench")
    sch = Scheduler(sp.replica)
    src = sp.cell("src")
    src.set(0)
    prev = src
    for i in range(CHAIN):
        out = sp.cell(f"c{i}")
        make(sp, sch, out, [prev], lambda v: v + 1)
        prev = out
    seen: list[int] = []
    sch.sink(prev, seen.append)
    sch.settle()

    def run() -> Counts:
        runs0, n, commits = sch.stats.runs_computation, len(seen), Commits(sp.replica)
        for i in range(CHAIN_WRITES):
            src.set(i + 1)
            sch.settle()
        assert seen[-1] == CHAIN_WRITES + CHAIN, seen[-1]
        counts = {
            "runs": sch.stats.runs_computation - runs0,
            "effects": len(seen) - n,
        } | commits.counts()
        # Per write: the source's commit and one per node sent; the sink reads its
        # plain value with no transaction (`Sink.run_direct`): nothing elided.
        expected = {
            "runs": CHAIN * CHAIN_WRITES,
            "effects": CHAIN_WRITES,
            "sent": (CHAIN + 1) * CHAIN_WRITES,
            "elided": 0,
        }
        assert counts == expected, counts
        return counts

    return run


# ----------------------------------------------------------------------------- broad


@bench(group="broad 1000", name="plain", ops=BROAD_WRITES, baseline=True)
def broad_plain() -> Run:
    source = [0]
    nodes = [_Plain(_plus(lambda: source[0], i)) for i in range(BROAD)]
    total = [0]

    def run() -> Counts:
        runs = 0
        total[0] = 0
        for w in range(BROAD_WRITES):
            source[0] = w
            for n in nodes:
                n.value = n.fn()
                runs += 1
                total[0] += 1  # the effect
            assert nodes[-1].value == w + BROAD - 1
        return {"runs": runs, "effects": total[0]}

    return run


@bench(group="broad 1000", name="reaktiv", ops=BROAD_WRITES)
def broad_reaktiv() -> Run:
    src = reaktiv.Signal(0)
    count = [0]
    runs = Tally()
    keep: list[Any] = []
    last: list[Any] = []
    for i in range(BROAD):
        c = reaktiv.Computed(runs.wrap(_plus(src, i)))
        keep.append(c)
        keep.append(reaktiv.Effect(_counting(c, count)))
    last.append(keep[-2])

    def run() -> Counts:
        runs.take()
        count[0] = 0
        for w in range(BROAD_WRITES):
            src.set(w + 1)
            assert last[0]() == w + BROAD
        assert keep
        counts = {"runs": runs.take(), "effects": count[0]}
        assert counts == {"runs": BROAD * BROAD_WRITES, "effects": BROAD * BROAD_WRITES}, counts
        return counts

    return run


@bench(group="broad 1000", name="cellweave", ops=BROAD_WRITES)
def broad_cellweave() -> Run:
    return _broad(_computation)


@bench(group="broad 1000", name="cellweave derive", ops=BROAD_WRITES)
def broad_cellweave_derive() -> Run:
    """The same graph made with `Scheduler.derive` (see `chain_cellweave_derive`)."""
    return _broad(_derived)


def _broad(make: _Make) -> Run:
    sp = Space(MemoryStore(), "bench")
    sch = Scheduler(sp.replica)
    src = sp.cell("src")
    src.set(0)
    count = [0]
    last: list[Any] = []
    for i in range(BROAD):
        out = sp.cell(f"b{i}")
        make(sp, sch, out, [src], lambda v, i=i: v + i)
        sch.sink(out, lambda _v: count.__setitem__(0, count[0] + 1))
    sch.sink(out, last.append)  # the last node's value, to check it (one more sink)
    sch.settle()

    def run() -> Counts:
        runs0, commits = sch.stats.runs_computation, Commits(sp.replica)
        count[0] = 0
        n = len(last)
        for w in range(BROAD_WRITES):
            src.set(w + 1)
            sch.settle()
            assert last[-1] == w + BROAD, last[-1]
        assert len(last) - n == BROAD_WRITES
        counts = {"runs": sch.stats.runs_computation - runs0, "effects": count[0]}
        counts |= commits.counts()
        # Per write: the source's commit and one per node sent; every sink run
        # (1,000 counting sinks and the checking one) reads its plain value with no
        # transaction (`Sink.run_direct`): nothing elided.
        expected = {
            "runs": BROAD * BROAD_WRITES,
            "effects": BROAD * BROAD_WRITES,
            "sent": (BROAD + 1) * BROAD_WRITES,
            "elided": 0,
        }
        assert counts == expected, counts
        return counts

    return run


# ----------------------------------------------------------------------------- diamond


@bench(group="diamond 5", name="plain", ops=DIAMOND_WRITES, baseline=True)
def diamond_plain() -> Run:
    source = [0]
    mids = [_Plain(lambda: source[0] + 1) for _ in range(5)]
    total = _Plain(lambda: sum(m.value for m in mids))

    def run() -> Counts:
        runs = 0
        for w in range(DIAMOND_WRITES):
            source[0] = w
            for m in mids:
                m.value = m.fn()
            total.value = total.fn()
            runs += 6
            assert total.value == (w + 1) * 5
        return {"runs": runs, "effects": DIAMOND_WRITES}

    return run


@bench(group="diamond 5", name="reaktiv", ops=DIAMOND_WRITES)
def diamond_reaktiv() -> Run:
    src = reaktiv.Signal(0)
    runs = Tally()
    mids = [reaktiv.Computed(runs.wrap(lambda: src() + 1)) for _ in range(5)]
    total = reaktiv.Computed(runs.wrap(lambda: sum(m() for m in mids)))
    seen: list[int] = []
    keep = [reaktiv.Effect(lambda: seen.append(total()))]  # reaktiv stops a dropped effect

    def run() -> Counts:
        runs.take()
        n = len(seen)
        for w in range(DIAMOND_WRITES):
            src.set(w + 1)
        assert seen[-1] == (DIAMOND_WRITES + 1) * 5
        assert keep
        counts = {"runs": runs.take(), "effects": len(seen) - n}
        assert counts == {"runs": 6 * DIAMOND_WRITES, "effects": DIAMOND_WRITES}, counts
        return counts

    return run


@bench(group="diamond 5", name="cellweave", ops=DIAMOND_WRITES)
def diamond_cellweave() -> Run:
    return _diamond(_computation)


@bench(group="diamond 5", name="cellweave derive", ops=DIAMOND_WRITES)
def diamond_cellweave_derive() -> Run:
    """The same graph made with `Scheduler.derive` (see `chain_cellweave_derive`)."""
    return _diamond(_derived)


def _diamond(make: _Make) -> Run:
    sp = Space(MemoryStore(), "bench")
    sch = Scheduler(sp.replica)
    src = sp.cell("src")
    src.set(0)
    mids = []
    for i in range(5):
        m = sp.cell(f"m{i}")
        make(sp, sch, m, [src], lambda v: v + 1)
        mids.append(m)
    total = sp.cell("total")
    make(sp, sch, total, mids, lambda *vs: sum(vs))
    seen: list[int] = []
    sch.sink(total, seen.append)
    sch.settle()

    def run() -> Counts:
        runs0, n, commits = sch.stats.runs_computation, len(seen), Commits(sp.replica)
        for w in range(DIAMOND_WRITES):
            src.set(w + 1)
            sch.settle()
        assert seen[-1] == (DIAMOND_WRITES + 1) * 5
        counts = {"runs": sch.stats.runs_computation - runs0, "effects": len(seen) - n}
        counts |= commits.counts()
        expected = {
            "runs": 6 * DIAMOND_WRITES,
            "effects": DIAMOND_WRITES,
            "sent": 7 * DIAMOND_WRITES,
            "elided": 0,  # the sink reads with no transaction (`Sink.run_direct`)
        }
        assert counts == expected, counts
        return counts

    return run

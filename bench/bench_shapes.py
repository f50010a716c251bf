"""Benchmarks of the scheduler on the standard shapes of reference-peers.md section 4.

Each group runs one workload three ways, round-robin: plain Python (the
baseline: hand-written recomputation, one object or local per derived value,
a fixed order), the reaktiv signals library, and cellweave (every node a
registered computation with declared reads, every effect a ``Scheduler.sink``,
every node update a transaction with a commit). Results are asserted in every
sample, so a wrong answer fails the run instead of looking fast.

``cellx 1000``          4 sources, 1000 layers of 4 nodes (p1=p2, p2=p1-p3, p3=p2+p4,
                        p4=p3 of the layer below), an effect on every node; one op =
                        one batched 4-write plus reading the 4 end values. The build
                        is setup (untimed). reaktiv runs pull-only (no effects): with
                        an effect per node its propagation is exponential in depth.
                        cellweave runs twice: a sink per node (plain's work: 4000
                        effects per op), and sinks on the 4 ends only (reaktiv's work:
                        every node recomputes, 4 values are read).
``layered diamonds N``  N layers of a -> (b, c) -> d, each d the next layer's a, a sink
                        on the last d; one op = one write. reaktiv only at N=10.
``kairo *``             the eight kairo cases; one op = one ``iter()`` exactly as in
                        section 4 (so time/op compares with section 5.3 h), only fewer
                        iterations per sample.
``memory per node``     not a timed op: run() builds 2000 computations each reading
                        one source under tracemalloc and reports ``bytes_per_node``
                        (traced bytes after building, minus before, over 2000; closures,
                        output cells and stored values included). ops=1, so the time
                        column of these rows is the build time of 2000 nodes (with
                        tracemalloc on, so slower than an untraced build). Rows: dormant,
                        live after one run, live after 10 and 100 more updates; and the
                        benchmark's own per-node objects alone (the runtime's part of a
                        row is that row minus this one); then the same computations
                        written with ``Scheduler.derive`` (its own objects: the output
                        cell and the user's function), dormant and live.

Counted work, counted where it happened (bench/_counting.py) and asserted:
``runs`` (derived-value function calls: counted inside reaktiv's formulas,
from the scheduler's statistics for cellweave, inline for plain Python),
``effects`` (effect or sink runs that saw a change), and for cellweave the
transactions ``sent`` to the store and ``elided`` (settled at once because
they changed nothing, as an effect's run in a transaction does; a sink of a value
with no link opens none, so these rows elide nothing).
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import reaktiv

from bench._counting import Commits, Tally
from bench.harness import Counts, Run, bench
from cells import MISSING, Cell, DocKey, MemoryStore, Path, Space, Transaction, read_value
from scheduler import Scheduler

CELLX_LAYERS = 1000
CELLX_OPS = 2
DIAMOND_LAYERS_SMALL = 10
DIAMOND_LAYERS_LARGE = 18
DIAMOND_WRITES = 100
MEMORY_NODES = 2000

_CELLX_START = (1, 2, 3, 4)
_CELLX_WRITE = (4, 3, 2, 1)
# reference-peers.md section 4: end values for L = 1000 (the layer map has period 12:
# the same for any L = 4 mod 12).
_CELLX_BEFORE = (-3, -6, -2, 2)
_CELLX_AFTER = (-2, -4, 2, 3)


def _deep_recursion() -> None:
    # reaktiv recurses about 6 frames per node on a pull through a deep graph.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50_000))


# ----------------------------------------------------------------------------- cellweave


class _Weave:
    """One space and scheduler; sources, computations and sinks over them."""

    def __init__(self, derive: bool = False) -> None:
        self.sp = Space(MemoryStore(), "bench")
        self.sch = Scheduler(self.sp.replica)
        self._names = 0
        self.derive = derive
        """`node` makes a `Scheduler.derive` node (a value function: the "cellweave
        derive" rows), not a node function over a transaction."""

    def _cell(self) -> Cell:
        self._names += 1
        return self.sp.cell(f"n{self._names}")

    def source(self, value: Any) -> Cell:
        c = self._cell()
        c.set(value)
        return c

    def node(self, inputs: Sequence[Cell], f: Callable[..., Any]) -> Cell:
        """A computation: its output is ``f(*input values)`` (a missing input reads as 0;
        None for a derive: these graphs set every input before they read it)."""
        if self.derive:
            out = self._cell()
            self.sch.derive(out, inputs, f)
            return out
        out, run, outputs, reads = self.node_parts(inputs, f)
        self.sch.register(run, identity=self.sp.identity, outputs=outputs, reads=reads)
        return out

    def node_parts(
        self, inputs: Sequence[Cell], f: Callable[..., Any]
    ) -> tuple[
        Cell,
        Callable[[Transaction], None],
        list[tuple[DocKey, Path]],
        list[tuple[DocKey, Path, bool]],
    ]:
        """What `node` hands to `register`, made without registering: the output cell,
        the node function, the declared outputs and reads (the "benchmark's own objects"
        row of `memory per node` measures exactly these)."""
        out = self._cell()
        links = tuple(c.link() for c in inputs)
        key = out.doc_key

        def run(tx: Transaction) -> None:
            vals = [read_value(tx, link) for link in links]
            tx.write(key, ("value",), f(*[0 if v is MISSING else v for v in vals]))

        return (
            out,
            run,
            [(key, ("value",))],
            [(c.doc_key, ("value",), False) for c in inputs],
        )

    def dynamic(self, declared: Sequence[Cell], f: Callable[[Callable[[Cell], Any]], Any]) -> Cell:
        """A computation that reads through ``get`` as it goes (``declared``: all it may read)."""
        out = self._cell()
        key = out.doc_key

        def run(tx: Transaction) -> None:
            def get(c: Cell) -> Any:
                v = read_value(tx, c.link())
                return 0 if v is MISSING else v

            tx.write(key, ("value",), f(get))

        self.sch.register(
            run,
            identity=self.sp.identity,
            outputs=[(key, ("value",))],
            reads=[(c.doc_key, ("value",), False) for c in declared],
        )
        return out

    def sink(self, cell: Cell, seen: list[Any]) -> None:
        self.sch.sink(cell, seen.append)

    def write(self, cell: Cell, value: Any) -> None:
        cell.set(value)
        self.sch.settle()

    def write_many(self, cells: Sequence[Cell], values: Sequence[Any]) -> None:
        """One transaction writing every cell (a batch), then settle."""
        tx = self.sp.edit()
        for c, v in zip(cells, values, strict=True):
            tx.write(c.doc_key, ("value",), v)
        tx.commit()
        self.sch.settle()

    def mark(self) -> tuple[int, Commits]:
        return self.sch.stats.runs_computation, Commits(self.sp.replica)

    def counts(self, mark: tuple[int, Commits], effects: int) -> Counts:
        """Computation runs, effects, and transactions sent and elided since `mark`
        (an effect's run, or a run whose result did not change, commits nothing)."""
        return {
            "runs": self.sch.stats.runs_computation - mark[0],
            "effects": effects,
        } | mark[1].counts()


def _effect(read: Callable[[], Any], seen: list[Any]) -> Callable[[], None]:
    # reaktiv passes a cleanup argument to effects that take parameters: keep it zero-arg.
    def effect() -> None:
        seen.append(read())

    return effect


def _plus(f: Callable[[], Any], k: int) -> Callable[[], Any]:
    return lambda: f() + k


def _plus2(f: Callable[[], Any], g: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: f() + g()


def _mid(f: Callable[[], Any], g: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: (f() + g()) // 2


def _minus2(f: Callable[[], Any], g: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: f() - g()


def _item(f: Callable[[], Any], key: str) -> Callable[[], Any]:
    return lambda: f()[key]


def _counted(tally: Tally, f: Callable[[], Any]) -> Any:
    """A reaktiv Computed of `f` whose runs `tally` counts."""
    return reaktiv.Computed(tally.wrap(f))


def _box_counter(box: list[Any], count: list[int]) -> Callable[[Any], None]:
    def sink(v: Any) -> None:
        box.append(v)
        count[0] += 1

    return sink


def _count_effect(read: Callable[[], Any], count: list[int]) -> Callable[[], None]:
    def effect() -> None:
        read()
        count[0] += 1

    return effect


# ----------------------------------------------------------------------------- cellx


def _cellx_check(ends: Sequence[Any], expected: tuple[int, int, int, int]) -> None:
    assert tuple(ends) == expected, (tuple(ends), expected)


@bench(group="cellx 1000", name="plain (effect per node)", ops=CELLX_OPS, baseline=True)
def cellx_plain() -> Run:
    src = list(_CELLX_START)
    layers = [[0, 0, 0, 0] for _ in range(CELLX_LAYERS)]
    effects = [0]

    def effect(_v: int) -> None:
        effects[0] += 1

    def recompute() -> None:
        m = src
        for layer in layers:
            p1, p2, p3, p4 = m[1], m[0] - m[2], m[1] + m[3], m[2]
            for i, v in enumerate((p1, p2, p3, p4)):
                if layer[i] != v:
                    layer[i] = v
                    effect(v)
            m = layer

    recompute()
    _cellx_check(layers[-1], _CELLX_BEFORE)

    def run() -> Counts:
        effects[0] = 0
        for k in range(CELLX_OPS):
            src[:] = _CELLX_WRITE if k % 2 == 0 else _CELLX_START
            recompute()
            _cellx_check(layers[-1], _CELLX_AFTER if k % 2 == 0 else _CELLX_BEFORE)
        return {"runs": 4 * CELLX_LAYERS * CELLX_OPS, "effects": effects[0]}

    return run


@bench(group="cellx 1000", name="reaktiv (pull only)", ops=CELLX_OPS)
def cellx_reaktiv() -> Run:
    tally = Tally()
    _deep_recursion()
    srcs = [reaktiv.Signal(v) for v in _CELLX_START]
    m: list[Any] = list(srcs)
    for _ in range(CELLX_LAYERS):
        a, b, c, d = m
        m = [
            _counted(tally, _plus(b, 0)),
            _counted(tally, _minus2(a, c)),
            _counted(tally, _plus2(b, d)),
            _counted(tally, _plus(c, 0)),
        ]
    ends = m
    _cellx_check([e() for e in ends], _CELLX_BEFORE)

    def run() -> Counts:
        tally.take()
        for k in range(CELLX_OPS):
            with reaktiv.batch():
                for s, v in zip(srcs, _CELLX_WRITE if k % 2 == 0 else _CELLX_START, strict=True):
                    s.set(v)
            _cellx_check([e() for e in ends], _CELLX_AFTER if k % 2 == 0 else _CELLX_BEFORE)
        counted = tally.take()
        assert counted == 4 * CELLX_LAYERS * CELLX_OPS, (counted, 4 * CELLX_LAYERS * CELLX_OPS)
        return {"runs": counted, "effects": 0}

    return run


def _cellx_cellweave(sink_every_node: bool, derive: bool = False) -> Run:
    w = _Weave(derive)
    srcs = [w.source(v) for v in _CELLX_START]
    m = list(srcs)
    nodes: list[Cell] = []
    for _ in range(CELLX_LAYERS):
        a, b, c, d = m
        m = [
            w.node([b], lambda b: b),
            w.node([a, c], lambda a, c: a - c),
            w.node([b, d], lambda b, d: b + d),
            w.node([c], lambda c: c),
        ]
        nodes.extend(m)
    observed = nodes if sink_every_node else nodes[-4:]
    seen: list[list[Any]] = [[] for _ in observed]
    for cell, box in zip(observed, seen, strict=True):
        w.sink(cell, box)
    _cellx_check([box[-1] for box in seen[-4:]], _CELLX_BEFORE)

    def run() -> Counts:
        mark = w.mark()
        before = sum(len(box) for box in seen)
        for k in range(CELLX_OPS):
            w.write_many(srcs, _CELLX_WRITE if k % 2 == 0 else _CELLX_START)
            ends = [e.get() for e in nodes[-4:]]
            _cellx_check(ends, _CELLX_AFTER if k % 2 == 0 else _CELLX_BEFORE)
            assert [box[-1] for box in seen[-4:]] == ends
        counts = w.counts(mark, sum(len(box) for box in seen) - before)
        assert counts["runs"] == 4 * CELLX_LAYERS * CELLX_OPS, counts
        return counts

    return run


@bench(group="cellx 1000", name="cellweave (sink per node)", ops=CELLX_OPS)
def cellx_cellweave() -> Run:
    return _cellx_cellweave(sink_every_node=True)


@bench(group="cellx 1000", name="cellweave (sinks on the 4 ends)", ops=CELLX_OPS)
def cellx_cellweave_ends() -> Run:
    """reaktiv's counted work: every node recomputes, only the 4 end values are read
    (reaktiv by a pull, cellweave by a sink each, since a sink is what keeps them live)."""
    return _cellx_cellweave(sink_every_node=False)


@bench(group="cellx 1000", name="cellweave derive (sink per node)", ops=CELLX_OPS)
def cellx_cellweave_derive() -> Run:
    """The same graph made with `Scheduler.derive` (value functions: see `_Weave.node`)."""
    return _cellx_cellweave(sink_every_node=True, derive=True)


@bench(group="cellx 1000", name="cellweave derive (sinks on the 4 ends)", ops=CELLX_OPS)
def cellx_cellweave_derive_ends() -> Run:
    return _cellx_cellweave(sink_every_node=False, derive=True)


# ----------------------------------------------------------------------------- layered diamonds
# Each layer: b = a + 1, c = a + 2, d = (b + c) // 2 (= a + 1); d is the next layer's a.


def _diamonds_expected(layers: int, a: int) -> int:
    return a + layers


def _diamonds_plain(layers: int) -> Run:
    source = [0]
    nodes = [[0, 0, 0] for _ in range(layers)]
    effects = [0]

    def run() -> Counts:
        effects[0] = 0
        runs = 0
        for w in range(DIAMOND_WRITES):
            source[0] = w + 1
            a = source[0]
            for n in nodes:
                n[0] = a + 1
                n[1] = a + 2
                n[2] = (n[0] + n[1]) // 2
                a = n[2]
                runs += 3
            effects[0] += 1
            assert a == _diamonds_expected(layers, w + 1)
        return {"runs": runs, "effects": effects[0]}

    return run


def _diamonds_cellweave(layers: int) -> Run:
    w = _Weave()
    src = w.source(0)
    a = src
    for _ in range(layers):
        b = w.node([a], lambda v: v + 1)
        c = w.node([a], lambda v: v + 2)
        a = w.node([b, c], lambda x, y: (x + y) // 2)
    seen: list[Any] = []
    w.sink(a, seen)
    assert seen[-1] == _diamonds_expected(layers, 0)

    def run() -> Counts:
        mark = w.mark()
        n = len(seen)
        for i in range(DIAMOND_WRITES):
            w.write(src, i + 1)
            assert seen[-1] == _diamonds_expected(layers, i + 1), seen[-1]
        return w.counts(mark, len(seen) - n)

    return run


@bench(group="layered diamonds 10", name="plain", ops=DIAMOND_WRITES, baseline=True)
def diamonds10_plain() -> Run:
    return _diamonds_plain(DIAMOND_LAYERS_SMALL)


@bench(group="layered diamonds 10", name="reaktiv (effect at end)", ops=DIAMOND_WRITES)
def diamonds10_reaktiv() -> Run:
    tally = Tally()
    layers = DIAMOND_LAYERS_SMALL
    src = reaktiv.Signal(0)
    a: Any = src
    for _ in range(layers):
        b = _counted(tally, _plus(a, 1))
        c = _counted(tally, _plus(a, 2))
        a = _counted(tally, _mid(b, c))
    seen: list[Any] = []
    keep = [reaktiv.Effect(_effect(a, seen))]  # reaktiv stops a dropped effect

    def run() -> Counts:
        tally.take()
        n = len(seen)
        for i in range(DIAMOND_WRITES):
            src.set(i + 1)
            assert seen[-1] == _diamonds_expected(layers, i + 1), seen[-1]
        assert keep
        counted = tally.take()
        assert counted == 3 * layers * DIAMOND_WRITES, (counted, 3 * layers * DIAMOND_WRITES)
        return {"runs": counted, "effects": len(seen) - n}

    return run


@bench(group="layered diamonds 10", name="cellweave (sink at end)", ops=DIAMOND_WRITES)
def diamonds10_cellweave() -> Run:
    return _diamonds_cellweave(DIAMOND_LAYERS_SMALL)


@bench(group="layered diamonds 18", name="plain", ops=DIAMOND_WRITES, baseline=True)
def diamonds18_plain() -> Run:
    """No reaktiv row: its push phase enumerates paths, 2**18 per write here."""
    return _diamonds_plain(DIAMOND_LAYERS_LARGE)


@bench(group="layered diamonds 18", name="cellweave (sink at end)", ops=DIAMOND_WRITES)
def diamonds18_cellweave() -> Run:
    return _diamonds_cellweave(DIAMOND_LAYERS_LARGE)


# ----------------------------------------------------------------------------- kairo
# One op = one iter() of the kairo case: a first write of 1, then the case's writes,
# each followed by the case's check. Effect counts are reset after the first write
# and checked at the end of the iter, as kairo does.

AVOIDABLE_ITERS = 2
AVOIDABLE_WRITES = 1000
BROAD_ITERS = 2
BROAD_WIDTH = 50
DEEP_ITERS = 3
DEEP_LEN = 50
KDIAMOND_ITERS = 2
KDIAMOND_WIDTH = 5
KDIAMOND_WRITES = 500
MUX_ITERS = 4
MUX_WIDTH = 100
REPEATED_ITERS = 20
REPEATED_READS = 30
REPEATED_WRITES = 100
TRIANGLE_ITERS = 6
TRIANGLE_LEN = 10
TRIANGLE_WRITES = 100
UNSTABLE_ITERS = 6
UNSTABLE_WIDTH = 20
UNSTABLE_WRITES = 100


def _busy() -> int:
    a = 0
    for _ in range(100):
        a += 1
    return a


# --- avoidablePropagation: head -> c1 -> c2 (constant 0) -> c3 (busy) -> c4 -> c5 -> effect


@bench(group="kairo avoidable", name="plain", ops=AVOIDABLE_ITERS, baseline=True)
def avoidable_plain() -> Run:
    """Hand-written: stops at c2 when its value did not change, as the reactive rows do."""
    v = {"head": 0, "c1": 0, "c2": 0, "c3": 0, "c4": 0, "c5": 0}
    effects = [0]
    c3_runs = [0]

    def write(x: int) -> int:
        runs = 2
        v["head"] = x
        v["c1"] = v["head"]
        c2 = 0  # c2 reads c1 and ignores it
        if c2 != v["c2"] or not c3_runs[0]:
            v["c2"] = c2
            _busy()
            c3_runs[0] += 1
            v["c3"] = v["c2"] + 1
            v["c4"] = v["c3"] + 2
            c5 = v["c4"] + 3
            runs += 3
            if c5 != v["c5"]:
                v["c5"] = c5
                _busy()
                effects[0] += 1
        return runs

    write(0)

    def run() -> Counts:
        runs = 0
        effects[0] = 0
        for _ in range(AVOIDABLE_ITERS):
            runs += write(1)
            assert v["c5"] == 6
            for i in range(AVOIDABLE_WRITES):
                runs += write(i)
                assert v["c5"] == 6
        assert c3_runs[0] == 1 and effects[0] == 0
        return {"runs": runs, "effects": effects[0]}

    return run


@bench(group="kairo avoidable", name="reaktiv", ops=AVOIDABLE_ITERS)
def avoidable_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    c3_runs = [0]

    def c3_fn() -> int:
        c3_runs[0] += 1
        _busy()
        value: int = c2() + 1
        return value

    c1 = _counted(tally, lambda: head())
    c2 = _counted(tally, lambda: (c1(), 0)[1])
    c3 = _counted(tally, c3_fn)
    c4 = _counted(tally, lambda: c3() + 2)
    c5 = _counted(tally, lambda: c4() + 3)
    seen: list[Any] = []

    def effect() -> None:
        seen.append(c5())
        _busy()

    keep = [reaktiv.Effect(effect)]

    def run() -> Counts:
        tally.take()
        n = len(seen)
        for _ in range(AVOIDABLE_ITERS):
            with reaktiv.batch():
                head.set(1)
            assert c5() == 6
            for i in range(AVOIDABLE_WRITES):
                with reaktiv.batch():
                    head.set(i)
                assert c5() == 6
        assert keep and c3_runs[0] == 1 and len(seen) == n == 1
        counted = tally.take()
        assert counted == 2 * (AVOIDABLE_WRITES + 1) * AVOIDABLE_ITERS, (
            counted,
            2 * (AVOIDABLE_WRITES + 1) * AVOIDABLE_ITERS,
        )
        return {"runs": counted, "effects": len(seen) - n}

    return run


@bench(group="kairo avoidable", name="cellweave", ops=AVOIDABLE_ITERS)
def avoidable_cellweave() -> Run:
    return _avoidable(derive=False)


@bench(group="kairo avoidable", name="cellweave derive", ops=AVOIDABLE_ITERS)
def avoidable_cellweave_derive() -> Run:
    return _avoidable(derive=True)


def _avoidable(derive: bool) -> Run:
    w = _Weave(derive)
    head = w.source(0)
    c3_runs = [0]

    def c3_fn(c2: int) -> int:
        c3_runs[0] += 1
        _busy()
        return c2 + 1

    c1 = w.node([head], lambda h: h)
    c2 = w.node([c1], lambda _c1: 0)
    c3 = w.node([c2], c3_fn)
    c4 = w.node([c3], lambda x: x + 2)
    c5 = w.node([c4], lambda x: x + 3)
    seen: list[Any] = []

    def effect(x: Any) -> None:
        seen.append(x)
        _busy()

    w.sch.sink(c5, effect)

    def run() -> Counts:
        mark = w.mark()
        n = len(seen)
        for _ in range(AVOIDABLE_ITERS):
            w.write(head, 1)
            assert seen[-1] == 6
            for i in range(AVOIDABLE_WRITES):
                w.write(head, i)
                assert seen[-1] == 6
        assert c3_runs[0] == 1 and len(seen) == n == 1
        return w.counts(mark, len(seen) - n)

    return run


# --- broadPropagation: 50 x (a_i = head + i; b_i = a_i + 1; effect(b_i))


@bench(group="kairo broad", name="plain", ops=BROAD_ITERS, baseline=True)
def kbroad_plain() -> Run:
    head = [0]
    a = [0] * BROAD_WIDTH
    b = [0] * BROAD_WIDTH
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        for i in range(BROAD_WIDTH):
            a[i] = head[0] + i
            b[i] = a[i] + 1
            effects[0] += 1  # the effect (b_i changes on every write)

    def run() -> Counts:
        total = 0
        for _ in range(BROAD_ITERS):
            write(1)
            effects[0] = 0
            for i in range(BROAD_WIDTH):
                write(i)
                assert b[-1] == i + BROAD_WIDTH
            assert effects[0] == BROAD_WIDTH * BROAD_WIDTH
            total += effects[0]
        return {"runs": 2 * BROAD_WIDTH * (BROAD_WIDTH + 1) * BROAD_ITERS, "effects": total}

    return run


@bench(group="kairo broad", name="reaktiv", ops=BROAD_ITERS)
def kbroad_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    count = [0]
    keep: list[Any] = []
    last: Any = None
    for i in range(BROAD_WIDTH):
        a = _counted(tally, _plus(head, i))
        b = _counted(tally, _plus(a, 1))

        keep.append(reaktiv.Effect(_count_effect(b, count)))
        last = b

    def run() -> Counts:
        tally.take()
        total = 0
        for _ in range(BROAD_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(BROAD_WIDTH):
                with reaktiv.batch():
                    head.set(i)
                assert last() == i + BROAD_WIDTH
            assert count[0] == BROAD_WIDTH * BROAD_WIDTH, count[0]
            total += count[0]
        assert keep
        counted = tally.take()
        assert counted == 2 * BROAD_WIDTH * (BROAD_WIDTH + 1) * BROAD_ITERS, counted
        return {"runs": counted, "effects": total}

    return run


@bench(group="kairo broad", name="cellweave", ops=BROAD_ITERS)
def kbroad_cellweave() -> Run:
    return _kbroad(derive=False)


@bench(group="kairo broad", name="cellweave derive", ops=BROAD_ITERS)
def kbroad_cellweave_derive() -> Run:
    return _kbroad(derive=True)


def _kbroad(derive: bool) -> Run:
    w = _Weave(derive)
    head = w.source(0)
    count = [0]
    last: list[Any] = []
    for i in range(BROAD_WIDTH):
        a = w.node([head], lambda h, i=i: h + i)
        b = w.node([a], lambda x: x + 1)
        if i == BROAD_WIDTH - 1:
            w.sink(b, last)
        else:
            w.sch.sink(b, lambda _v: count.__setitem__(0, count[0] + 1))

    def run() -> Counts:
        mark = w.mark()
        total = 0
        for _ in range(BROAD_ITERS):
            w.write(head, 1)
            count[0] = 0
            n = len(last)
            for i in range(BROAD_WIDTH):
                w.write(head, i)
                assert last[-1] == i + BROAD_WIDTH
            effects = count[0] + len(last) - n
            assert effects == BROAD_WIDTH * BROAD_WIDTH, effects
            total += effects
        return w.counts(mark, total)

    return run


# --- deepPropagation: chain of 50 (c_k = c_{k-1} + 1), effect on the tail


@bench(group="kairo deep", name="plain", ops=DEEP_ITERS, baseline=True)
def deep_plain() -> Run:
    head = [0]
    chain = [0] * DEEP_LEN
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        prev = head[0]
        for k in range(DEEP_LEN):
            chain[k] = prev + 1
            prev = chain[k]
        effects[0] += 1

    def run() -> Counts:
        total = 0
        for _ in range(DEEP_ITERS):
            write(1)
            effects[0] = 0
            for i in range(DEEP_LEN):
                write(i)
                assert chain[-1] == DEEP_LEN + i
            assert effects[0] == DEEP_LEN
            total += effects[0]
        return {"runs": DEEP_LEN * (DEEP_LEN + 1) * DEEP_ITERS, "effects": total}

    return run


@bench(group="kairo deep", name="reaktiv", ops=DEEP_ITERS)
def deep_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    prev: Any = head
    for _ in range(DEEP_LEN):
        prev = _counted(tally, _plus(prev, 1))
    tail = prev
    count = [0]
    keep = [reaktiv.Effect(_count_effect(tail, count))]

    def run() -> Counts:
        tally.take()
        total = 0
        for _ in range(DEEP_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(DEEP_LEN):
                with reaktiv.batch():
                    head.set(i)
                assert tail() == DEEP_LEN + i
            assert count[0] == DEEP_LEN, count[0]
            total += count[0]
        assert keep
        counted = tally.take()
        assert counted == DEEP_LEN * (DEEP_LEN + 1) * DEEP_ITERS, counted
        return {"runs": counted, "effects": total}

    return run


@bench(group="kairo deep", name="cellweave", ops=DEEP_ITERS)
def deep_cellweave() -> Run:
    return _deep(derive=False)


@bench(group="kairo deep", name="cellweave derive", ops=DEEP_ITERS)
def deep_cellweave_derive() -> Run:
    return _deep(derive=True)


def _deep(derive: bool) -> Run:
    w = _Weave(derive)
    head = w.source(0)
    prev = head
    for _ in range(DEEP_LEN):
        prev = w.node([prev], lambda x: x + 1)
    seen: list[Any] = []
    w.sink(prev, seen)

    def run() -> Counts:
        mark = w.mark()
        total = 0
        for _ in range(DEEP_ITERS):
            w.write(head, 1)
            n = len(seen)
            for i in range(DEEP_LEN):
                w.write(head, i)
                assert seen[-1] == DEEP_LEN + i
            assert len(seen) - n == DEEP_LEN
            total += len(seen) - n
        return w.counts(mark, total)

    return run


# --- diamond: 5 x (head + 1), their sum, effect(sum)


@bench(group="kairo diamond", name="plain", ops=KDIAMOND_ITERS, baseline=True)
def kdiamond_plain() -> Run:
    head = [0]
    mids = [0] * KDIAMOND_WIDTH
    total = [0]
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        for k in range(KDIAMOND_WIDTH):
            mids[k] = head[0] + 1
        total[0] = sum(mids)
        effects[0] += 1

    def run() -> Counts:
        n = 0
        for _ in range(KDIAMOND_ITERS):
            write(1)
            effects[0] = 0
            for i in range(KDIAMOND_WRITES):
                write(i)
                assert total[0] == (i + 1) * KDIAMOND_WIDTH
            assert effects[0] == KDIAMOND_WRITES
            n += effects[0]
        runs = (KDIAMOND_WIDTH + 1) * (KDIAMOND_WRITES + 1) * KDIAMOND_ITERS
        return {"runs": runs, "effects": n}

    return run


@bench(group="kairo diamond", name="reaktiv", ops=KDIAMOND_ITERS)
def kdiamond_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    mids = [_counted(tally, _plus(head, 1)) for _ in range(KDIAMOND_WIDTH)]
    total = _counted(tally, lambda: sum(m() for m in mids))
    count = [0]
    keep = [reaktiv.Effect(_count_effect(total, count))]

    def run() -> Counts:
        tally.take()
        n = 0
        for _ in range(KDIAMOND_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(KDIAMOND_WRITES):
                with reaktiv.batch():
                    head.set(i)
                assert total() == (i + 1) * KDIAMOND_WIDTH
            assert count[0] == KDIAMOND_WRITES, count[0]
            n += count[0]
        assert keep
        runs = (KDIAMOND_WIDTH + 1) * (KDIAMOND_WRITES + 1) * KDIAMOND_ITERS
        counted = tally.take()
        assert counted == runs, (counted, runs)
        return {"runs": counted, "effects": n}

    return run


@bench(group="kairo diamond", name="cellweave", ops=KDIAMOND_ITERS)
def kdiamond_cellweave() -> Run:
    return _kdiamond(derive=False)


@bench(group="kairo diamond", name="cellweave derive", ops=KDIAMOND_ITERS)
def kdiamond_cellweave_derive() -> Run:
    return _kdiamond(derive=True)


def _kdiamond(derive: bool) -> Run:
    w = _Weave(derive)
    head = w.source(0)
    mids = [w.node([head], lambda x: x + 1) for _ in range(KDIAMOND_WIDTH)]
    total = w.node(mids, lambda *vs: sum(vs))
    seen: list[Any] = []
    w.sink(total, seen)

    def run() -> Counts:
        mark = w.mark()
        n = 0
        for _ in range(KDIAMOND_ITERS):
            w.write(head, 1)
            k = len(seen)
            for i in range(KDIAMOND_WRITES):
                w.write(head, i)
                assert seen[-1] == (i + 1) * KDIAMOND_WIDTH
            assert len(seen) - k == KDIAMOND_WRITES
            n += len(seen) - k
        return w.counts(mark, n)

    return run


# --- mux: 100 heads; mux = {i: head_i}; split_i = mux[i]; out_i = split_i + 1; effect(out_i)


def _mux_writes() -> list[tuple[int, int]]:
    return [(i, i) for i in range(10)] + [(i, 2 * i) for i in range(10)]


@bench(group="kairo mux", name="plain", ops=MUX_ITERS, baseline=True)
def mux_plain() -> Run:
    heads = [0] * MUX_WIDTH
    mux: dict[str, int] = {}
    split = [0] * MUX_WIDTH
    out = [1] * MUX_WIDTH
    effects = [0]

    def write(i: int, x: int) -> int:
        if heads[i] == x:
            return 0
        heads[i] = x
        mux.clear()
        mux.update({str(k): h for k, h in enumerate(heads)})
        runs = 1
        for k in range(MUX_WIDTH):
            s = mux[str(k)]
            runs += 1
            if s != split[k]:
                split[k] = s
                out[k] = s + 1
                effects[0] += 1
                runs += 1  # out (the effect is counted in `effects`)
        return runs

    def run() -> Counts:
        runs = 0
        effects[0] = 0
        for _ in range(MUX_ITERS):
            for i, x in _mux_writes():
                runs += write(i, x)
                assert out[i] == x + 1
        return {"runs": runs, "effects": effects[0]}

    return run


@bench(group="kairo mux", name="reaktiv", ops=MUX_ITERS)
def mux_reaktiv() -> Run:
    tally = Tally()
    heads = [reaktiv.Signal(0) for _ in range(MUX_WIDTH)]
    mux = _counted(tally, lambda: {str(k): h() for k, h in enumerate(heads)})
    outs = []
    count = [0]
    keep: list[Any] = []
    for k in range(MUX_WIDTH):
        split = _counted(tally, _item(mux, str(k)))
        out = _counted(tally, _plus(split, 1))
        outs.append(out)
        keep.append(reaktiv.Effect(_count_effect(out, count)))

    def run() -> Counts:
        tally.take()
        count[0] = 0
        for _ in range(MUX_ITERS):
            for i, x in _mux_writes():
                with reaktiv.batch():
                    heads[i].set(x)
                assert outs[i]() == x + 1
        assert keep
        # 18 of the 20 writes change a head (head 0 is written 0 twice): mux, 100 splits
        # and one out per change (and one effect run, counted apart).
        changes = sum(1 for _, x in _mux_writes() if x != 0)
        counted = tally.take()
        assert counted == changes * (MUX_WIDTH + 2) * MUX_ITERS, counted
        return {"runs": counted, "effects": count[0]}

    return run


@bench(group="kairo mux", name="cellweave", ops=MUX_ITERS)
def mux_cellweave() -> Run:
    return _mux(derive=False)


@bench(group="kairo mux", name="cellweave derive", ops=MUX_ITERS)
def mux_cellweave_derive() -> Run:
    return _mux(derive=True)


def _mux(derive: bool) -> Run:
    w = _Weave(derive)
    heads = [w.source(0) for _ in range(MUX_WIDTH)]
    mux = w.node(heads, lambda *hs: {str(k): h for k, h in enumerate(hs)})
    count = [0]
    outs: list[list[Any]] = []
    for k in range(MUX_WIDTH):
        split = w.node([mux], lambda m, k=k: m[str(k)] if m else 0)
        out = w.node([split], lambda s: s + 1)
        box: list[Any] = []
        w.sch.sink(out, _box_counter(box, count))
        outs.append(box)

    def run() -> Counts:
        mark = w.mark()
        count[0] = 0
        for _ in range(MUX_ITERS):
            for i, x in _mux_writes():
                w.write(heads[i], x)
                assert outs[i][-1] == x + 1
        return w.counts(mark, count[0])

    return run


# --- repeatedObservers: one computed reads head 30 times and sums; effect


@bench(group="kairo repeated", name="plain", ops=REPEATED_ITERS, baseline=True)
def repeated_plain() -> Run:
    head = [0]
    value = [0]
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        value[0] = sum(head[0] for _ in range(REPEATED_READS))
        effects[0] += 1

    def run() -> Counts:
        n = 0
        for _ in range(REPEATED_ITERS):
            write(1)
            effects[0] = 0
            for i in range(REPEATED_WRITES):
                write(i)
                assert value[0] == REPEATED_READS * i
            assert effects[0] == REPEATED_WRITES
            n += effects[0]
        return {"runs": (REPEATED_WRITES + 1) * REPEATED_ITERS, "effects": n}

    return run


@bench(group="kairo repeated", name="reaktiv", ops=REPEATED_ITERS)
def repeated_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    value = _counted(tally, lambda: sum(head() for _ in range(REPEATED_READS)))
    count = [0]
    keep = [reaktiv.Effect(_count_effect(value, count))]

    def run() -> Counts:
        tally.take()
        n = 0
        for _ in range(REPEATED_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(REPEATED_WRITES):
                with reaktiv.batch():
                    head.set(i)
                assert value() == REPEATED_READS * i
            assert count[0] == REPEATED_WRITES, count[0]
            n += count[0]
        assert keep
        counted = tally.take()
        assert counted == (REPEATED_WRITES + 1) * REPEATED_ITERS, counted
        return {"runs": counted, "effects": n}

    return run


@bench(group="kairo repeated", name="cellweave", ops=REPEATED_ITERS)
def repeated_cellweave() -> Run:
    w = _Weave()
    head = w.source(0)
    value = w.dynamic([head], lambda get: sum(get(head) for _ in range(REPEATED_READS)))
    seen: list[Any] = []
    w.sink(value, seen)

    def run() -> Counts:
        mark = w.mark()
        n = 0
        for _ in range(REPEATED_ITERS):
            w.write(head, 1)
            k = len(seen)
            for i in range(REPEATED_WRITES):
                w.write(head, i)
                assert seen[-1] == REPEATED_READS * i
            assert len(seen) - k == REPEATED_WRITES
            n += len(seen) - k
        return w.counts(mark, n)

    return run


# --- triangle: chain c_1..c_10 (c_k = c_{k-1} + 1, c_0 = head), sum of c_1..c_10; effect


def _triangle_sum(h: int) -> int:
    return TRIANGLE_LEN * h + TRIANGLE_LEN * (TRIANGLE_LEN + 1) // 2


@bench(group="kairo triangle", name="plain", ops=TRIANGLE_ITERS, baseline=True)
def triangle_plain() -> Run:
    head = [0]
    chain = [0] * TRIANGLE_LEN
    total = [0]
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        prev = head[0]
        for k in range(TRIANGLE_LEN):
            chain[k] = prev + 1
            prev = chain[k]
        total[0] = sum(chain)
        effects[0] += 1

    def run() -> Counts:
        n = 0
        for _ in range(TRIANGLE_ITERS):
            write(1)
            effects[0] = 0
            for i in range(TRIANGLE_WRITES):
                write(i)
                assert total[0] == _triangle_sum(i)
            assert effects[0] == TRIANGLE_WRITES
            n += effects[0]
        runs = (TRIANGLE_LEN + 1) * (TRIANGLE_WRITES + 1) * TRIANGLE_ITERS
        return {"runs": runs, "effects": n}

    return run


@bench(group="kairo triangle", name="reaktiv", ops=TRIANGLE_ITERS)
def triangle_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    chain: list[Any] = []
    prev: Any = head
    for _ in range(TRIANGLE_LEN):
        prev = _counted(tally, _plus(prev, 1))
        chain.append(prev)
    total = _counted(tally, lambda: sum(c() for c in chain))
    count = [0]
    keep = [reaktiv.Effect(_count_effect(total, count))]

    def run() -> Counts:
        tally.take()
        n = 0
        for _ in range(TRIANGLE_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(TRIANGLE_WRITES):
                with reaktiv.batch():
                    head.set(i)
                assert total() == _triangle_sum(i)
            assert count[0] == TRIANGLE_WRITES, count[0]
            n += count[0]
        assert keep
        runs = (TRIANGLE_LEN + 1) * (TRIANGLE_WRITES + 1) * TRIANGLE_ITERS
        counted = tally.take()
        assert counted == runs, (counted, runs)
        return {"runs": counted, "effects": n}

    return run


@bench(group="kairo triangle", name="cellweave", ops=TRIANGLE_ITERS)
def triangle_cellweave() -> Run:
    return _triangle(derive=False)


@bench(group="kairo triangle", name="cellweave derive", ops=TRIANGLE_ITERS)
def triangle_cellweave_derive() -> Run:
    return _triangle(derive=True)


def _triangle(derive: bool) -> Run:
    w = _Weave(derive)
    head = w.source(0)
    chain: list[Cell] = []
    prev = head
    for _ in range(TRIANGLE_LEN):
        prev = w.node([prev], lambda x: x + 1)
        chain.append(prev)
    total = w.node(chain, lambda *vs: sum(vs))
    seen: list[Any] = []
    w.sink(total, seen)

    def run() -> Counts:
        mark = w.mark()
        n = 0
        for _ in range(TRIANGLE_ITERS):
            w.write(head, 1)
            k = len(seen)
            for i in range(TRIANGLE_WRITES):
                w.write(head, i)
                assert seen[-1] == _triangle_sum(i)
            assert len(seen) - k == TRIANGLE_WRITES
            n += len(seen) - k
        return w.counts(mark, n)

    return run


# --- unstable: double = 2h, inverse = -h, current = sum over 20 of (h odd ? double : inverse)


def _unstable_value(h: int) -> int:
    return UNSTABLE_WIDTH * (2 * h if h % 2 else -h)


@bench(group="kairo unstable", name="plain", ops=UNSTABLE_ITERS, baseline=True)
def unstable_plain() -> Run:
    head = [0]
    double = [0]
    inverse = [0]
    current = [0]
    effects = [0]

    def write(x: int) -> None:
        head[0] = x
        double[0] = 2 * head[0]
        inverse[0] = -head[0]
        s = 0
        for _ in range(UNSTABLE_WIDTH):
            s += double[0] if head[0] % 2 else inverse[0]
        current[0] = s
        effects[0] += 1

    def run() -> Counts:
        n = 0
        for _ in range(UNSTABLE_ITERS):
            write(1)
            effects[0] = 0
            for i in range(UNSTABLE_WRITES):
                write(i)
                assert current[0] == _unstable_value(i)
            assert effects[0] == UNSTABLE_WRITES
            n += effects[0]
        return {"runs": 3 * (UNSTABLE_WRITES + 1) * UNSTABLE_ITERS, "effects": n}

    return run


@bench(group="kairo unstable", name="reaktiv", ops=UNSTABLE_ITERS)
def unstable_reaktiv() -> Run:
    tally = Tally()
    head = reaktiv.Signal(0)
    double = _counted(tally, lambda: 2 * head())
    inverse = _counted(tally, lambda: -head())

    def current_fn() -> int:
        s = 0
        for _ in range(UNSTABLE_WIDTH):
            s += double() if head() % 2 else inverse()
        return s

    current = _counted(tally, current_fn)
    count = [0]
    keep = [reaktiv.Effect(_count_effect(current, count))]

    def run() -> Counts:
        tally.take()
        n = 0
        for _ in range(UNSTABLE_ITERS):
            with reaktiv.batch():
                head.set(1)
            count[0] = 0
            for i in range(UNSTABLE_WRITES):
                with reaktiv.batch():
                    head.set(i)
                assert current() == _unstable_value(i)
            assert count[0] == UNSTABLE_WRITES, count[0]
            n += count[0]
        assert keep
        counted = tally.take()
        # Per write, `current` runs and recomputes the one input it reads; reaktiv
        # also refreshes the input the previous run read, to decide that `current`
        # is stale: up to 3 runs (fewer where the parity did not flip).
        writes = (UNSTABLE_WRITES + 1) * UNSTABLE_ITERS
        assert 2 * writes <= counted <= 3 * writes, counted
        return {"runs": counted, "effects": n}

    return run


@bench(group="kairo unstable", name="cellweave", ops=UNSTABLE_ITERS)
def unstable_cellweave() -> Run:
    w = _Weave()
    head = w.source(0)
    double = w.node([head], lambda h: 2 * h)
    inverse = w.node([head], lambda h: -h)

    def current_fn(get: Callable[[Cell], Any]) -> int:
        s = 0
        for _ in range(UNSTABLE_WIDTH):
            s += get(double) if get(head) % 2 else get(inverse)
        return s

    current = w.dynamic([head, double, inverse], current_fn)
    seen: list[Any] = []
    w.sink(current, seen)

    def run() -> Counts:
        mark = w.mark()
        n = 0
        for _ in range(UNSTABLE_ITERS):
            w.write(head, 1)
            k = len(seen)
            for i in range(UNSTABLE_WRITES):
                w.write(head, i)
                assert seen[-1] == _unstable_value(i)
            assert len(seen) - k == UNSTABLE_WRITES
            n += len(seen) - k
        return w.counts(mark, n)

    return run


# ----------------------------------------------------------------------------- memory
# run() builds MEMORY_NODES computations, each reading one source, and returns the
# traced bytes per node (tracemalloc: current traced size after minus before, gc.collect()
# first). The scheduler, store and source exist before the first measurement.


def _traced(build: Callable[[], object]) -> Counts:
    """Bytes per node that ``build()`` allocated and still holds."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept is not None
    return {"bytes_per_node": (after - before) // MEMORY_NODES, "nodes": MEMORY_NODES}


class _Plain:
    __slots__ = ("fn", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.value: Any = None


def _src_plus(source: list[int], k: int) -> Callable[[], int]:
    return lambda: source[0] + k


@bench(group="memory per node", name="plain", ops=1, baseline=True)
def memory_plain() -> Run:
    source = [0]

    def build() -> object:
        return [_Plain(_src_plus(source, i)) for i in range(MEMORY_NODES)]

    return lambda: _traced(build)


@bench(group="memory per node", name="reaktiv computed", ops=1)
def memory_reaktiv() -> Run:
    src = reaktiv.Signal(0)

    def build() -> object:
        return [reaktiv.Computed(_plus(src, i)) for i in range(MEMORY_NODES)]

    return lambda: _traced(build)


def _memory_cellweave(live: bool, updates: int = 0) -> Run:
    w = _Weave()
    src = w.source(0)
    w.sch.settle()

    def build() -> object:
        outs = [w.node([src], lambda v, i=i: v + i) for i in range(MEMORY_NODES)]
        if live:
            for node in list(w.sch.graph.nodes):
                w.sch.demand(node)
            w.sch.settle()
            assert w.sch.stats.runs_computation == MEMORY_NODES
            assert [c.get() for c in outs[:3]] == [0, 1, 2]
            for k in range(1, updates + 1):
                src.set(k)
                w.sch.settle()
            w.sch.replica.pump()
            assert w.sch.stats.runs_computation == MEMORY_NODES * (updates + 1)
            assert [c.get() for c in outs[:3]] == [updates, updates + 1, updates + 2]
        else:
            assert w.sch.stats.runs == 0
        return outs

    return lambda: _traced(build)


def _memory_derive(live: bool, updates: int = 0) -> Run:
    """The same 2000 computations written with `Scheduler.derive` (the node function
    is one small object instead of a closure over links and output key)."""
    w = _Weave()
    src = w.source(0)
    w.sch.settle()

    def build() -> object:
        outs: list[Cell] = []
        for i in range(MEMORY_NODES):
            out = w._cell()
            w.sch.derive(out, [src], lambda v, i=i: v + i)
            outs.append(out)
        if live:
            for node in list(w.sch.graph.nodes):
                w.sch.demand(node)
            w.sch.settle()
            for k in range(1, updates + 1):
                src.set(k)
                w.sch.settle()
            w.sch.replica.pump()
            assert w.sch.stats.runs_computation == MEMORY_NODES * (updates + 1)
            assert [c.get() for c in outs[:3]] == [updates, updates + 1, updates + 2]
        else:
            assert w.sch.stats.runs == 0
        return outs

    return lambda: _traced(build)


@bench(group="memory per node", name="derive: the benchmark's own objects", ops=1)
def memory_derive_own_objects() -> Run:
    """What a `derive` row builds per node besides the runtime's part: the output cell
    and the user's function, kept alive, nothing registered."""
    w = _Weave()
    w.sch.settle()

    def build() -> object:
        outs: list[Cell] = []
        held: list[object] = []  # 8 bytes per node: a stand-in for the node's reference
        for i in range(MEMORY_NODES):
            outs.append(w._cell())
            held.append(lambda v, i=i: v + i)
        return outs, held

    return lambda: _traced(build)


@bench(group="memory per node", name="cellweave derive (dormant)", ops=1)
def memory_derive_dormant() -> Run:
    return _memory_derive(live=False)


@bench(group="memory per node", name="cellweave derive (live, ran once)", ops=1)
def memory_derive_live() -> Run:
    return _memory_derive(live=True)


@bench(group="memory per node", name="cellweave derive (live, 101 runs)", ops=1)
def memory_derive_updated() -> Run:
    """After 100 more updates: what stays per update (revision history the store keeps,
    larger seqs and versions) shows here."""
    return _memory_derive(live=True, updates=100)


@bench(group="memory per node", name="cellweave: the benchmark's own objects", ops=1)
def memory_cellweave_own_objects() -> Run:
    """What the cellweave rows build per node *besides* the runtime's part: the output
    cell, the node function (closure, its lambda, links, output key) and the declared
    output, made by the same code, kept alive as `register` would, but not registered.
    The runtime's part of a row below is that row minus this one."""
    w = _Weave()
    src = w.source(0)
    w.sch.settle()

    def build() -> object:
        outs: list[Cell] = []
        held: list[object] = []  # 16 bytes per node: stand-ins for the node's own references
        for i in range(MEMORY_NODES):
            out, run, outputs, _reads = w.node_parts([src], lambda v, i=i: v + i)
            outs.append(out)
            held += (run, outputs[0])
        return outs, held

    return lambda: _traced(build)


@bench(group="memory per node", name="cellweave computation (dormant)", ops=1)
def memory_cellweave_dormant() -> Run:
    return _memory_cellweave(live=False)


@bench(group="memory per node", name="cellweave computation (live, ran once)", ops=1)
def memory_cellweave_live() -> Run:
    return _memory_cellweave(live=True)


@bench(group="memory per node", name="cellweave computation (live, 11 runs)", ops=1)
def memory_cellweave_updated() -> Run:
    """After 10 more updates: what the store keeps per update (the revision history of
    each written document, if any: see `cells.stores.memory`) shows here."""
    return _memory_cellweave(live=True, updates=10)


@bench(group="memory per node", name="cellweave computation (live, 101 runs)", ops=1)
def memory_cellweave_updated_100() -> Run:
    """After 100 more updates (the issue 20 goal: per-update history would pass the cap
    of 2 x REVISIONS_KEPT revisions per document here)."""
    return _memory_cellweave(live=True, updates=100)

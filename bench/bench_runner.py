"""Benchmarks of the runner: setup and start of a nested pattern, its first computation,
stop and restart, and tracing.

The workload is `Parent`: 10 nested `Child` runs, each holding a chain of 5
lifts, so one parent is 11 registrations and 50 computations (and 22
documents of setup: an argument document and a result document per run).
Every sample builds a fresh runtime on a fresh `MemoryStore` outside the
timed region; the timed region drives the runtime's own event loop with
`run_until_complete`, so the store's verdicts are processed inside it.

Groups
------
``runner setup+start``
    One op is one parent. Rows: `rt.run(tx, Parent, ...)` plus commit and
    verdict (setup + start); `rt.stop` of a running, computed parent; `await
    rt.start` of a stopped one (restart); and a stop + start cycle repeated
    on one parent (one op = one cycle), which also checks that nothing leaks.
    Baseline: the same 22 documents with the same values written directly in
    one plain transaction per parent (what the setup writes, without a runner).
``runner first pull``
    One op is the first full computation of one parent: the 50 lifts run (and
    commit) because 10 pulls demand the 10 children's outputs. Baseline: the
    same 50 computed values written directly, one plain transaction each (as
    the scheduler commits one per run); a row with all 50 in one transaction
    shows what batching would give.
``runner trace``
    One op is `runner.pattern(fn).graph` on a newly created pattern (a fresh
    copy of the body, so nothing is cached). Baseline: decoding the stored
    `Child` graph (`PatternGraph.from_json`), which is what a runtime could do
    instead of tracing again.

Counted work beside the times: registrations installed or ended, scheduler
nodes, runs (computations and effects separately), transactions sent to the
store (`sent`) and elided by the replica (`elided`: they changed nothing), and
documents written (counted by the store, once per document per
commit). The baselines are checked, once per process, to leave exactly the
documents, with exactly the values, that the runner leaves.

See docs/performance.md ("Runner: setup and start") for numbers.
"""

from __future__ import annotations

import asyncio
import atexit
import types
from collections.abc import Callable, Coroutine
from typing import Any

from bench.harness import BenchError, Counts, Finish, Run, bench
from cells import Cell, DocKey, Link, MemoryStore
from cells._store import CommitRequest, Verdict
from runner import Pattern, PatternGraph, Runtime, lift, pattern
from runner import _docs as docs
from runner._builder import find_pattern

CHILDREN = 10
LIFTS = 5  # per child: a chain of LIFTS lifts
COMPUTATIONS = CHILDREN * LIFTS
REGISTRATIONS = 1 + CHILDREN
PARENTS = 20
"""Parents per sample (setup+start, stop, restart, first pull)."""
CYCLES = 20
"""Stop + start cycles per sample, on one parent."""
TRACES = 200
"""Patterns traced (or graphs decoded) per sample."""

# ---------------------------------------------------------------------------- the patterns


def add(a: Any, b: Any) -> Any:
    return (a or 0) + (b or 0)


def inc(a: Any) -> Any:
    return (a or 0) + 1


@pattern
def Child(value, k):  # type: ignore[no-untyped-def]
    """A chain of 5 lifts: value + k, then +1 four times (so "e" is value + k + 4)."""
    a = lift(add)(value, k)
    b = lift(inc)(a)
    c = lift(inc)(b)
    d = lift(inc)(c)
    e = lift(inc)(d)
    return {"a": a, "b": b, "c": c, "d": d, "e": e}


@pattern
def Parent(value):  # type: ignore[no-untyped-def]
    """10 nested children; child k computes value + k + 4 at the end of its chain."""
    return {"children": [Child(value=value, k=k) for k in range(CHILDREN)]}


def expected_outputs(value: int) -> list[int]:
    return [value + k + LIFTS - 1 for k in range(CHILDREN)]


# ---------------------------------------------------------------------------- harness glue


class _CountingStore(MemoryStore):
    """A `MemoryStore` that counts the documents each commit writes (and which ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.docs_written = 0
        self.keys_written: set[DocKey] = set()

    def _evaluate(self, request: CommitRequest) -> Verdict:
        keys = request.keys
        self.docs_written += len(keys)
        self.keys_written |= keys
        return super()._evaluate(request)


class _World:
    """One sample's runtime, its store and the event loop that drives it."""

    def __init__(self) -> None:
        self.store = _CountingStore()
        self.rt = Runtime(self.store, space="bench")
        self.loop = asyncio.new_event_loop()
        # Traced before any timed region: setup + start measures instantiation, not tracing.
        Parent.graph  # noqa: B018
        Child.graph  # noqa: B018

    def drive(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return self.loop.run_until_complete(main())

    def close(self) -> None:
        self.loop.run_until_complete(self.rt.aclose())
        self.loop.close()

    def results(self, n: int) -> list[Cell]:
        return [self.rt.get_cell(("parent", i)) for i in range(n)]

    def counter(self) -> _Counter:
        return _Counter(self)


class _Counter:
    """Counted work since construction: commits, documents, runs, registrations, nodes.

    `statistics()` walks every node: call `counts()` in a finish function, after
    the clock stops, never inside the timed region."""

    def __init__(self, world: _World) -> None:
        self.world = world
        self.start = self._now()

    def _now(self) -> dict[str, int]:
        rt = self.world.rt
        stats = rt.scheduler.statistics()
        return {
            "registrations": len(rt.registrations()),
            "nodes": int(stats["nodes"]),
            "computations": int(stats["runs_computation"]),
            "effects": int(stats["runs_effect"]),
            "sent": rt.replica.stats.commits_sent,
            "elided": rt.replica.stats.commits_elided,
            "docs": self.world.store.docs_written,
        }

    def counts(self, **extra: int) -> Counts:
        now = self._now()
        return {k: now[k] - self.start[k] for k in now} | extra


_leftovers: list[_World] = []


def _clean_up() -> None:
    """Close what earlier samples left running (called from setups, untimed)."""
    while _leftovers:
        _leftovers.pop().close()


atexit.register(_clean_up)


def _world() -> _World:
    _clean_up()
    world = _World()
    _leftovers.append(world)
    return world


async def _run_parents(world: _World, results: list[Cell]) -> None:
    rt = world.rt
    for i, res in enumerate(results):
        tx = rt.edit()
        rt.run(tx, Parent, {"value": i}, res)
        outcome = await tx.commit()
        if not outcome.ok:
            raise BenchError(f"rt.run of parent {i}: the commit failed: {outcome!r}")


async def _pull_parent(res: Cell, value: int) -> None:
    pulls = [res.key("children", k, "e").pull() for k in range(CHILDREN)]
    got = await asyncio.gather(*pulls)
    if got != expected_outputs(value):
        raise BenchError(f"parent {value}: computed {got}, expected {expected_outputs(value)}")


def _check_outputs(res: Cell, value: int) -> None:
    got = [res.key("children", k, "e").get() for k in range(CHILDREN)]
    if got != expected_outputs(value):
        raise BenchError(f"parent {value}: holds {got}, expected {expected_outputs(value)}")


# ---------------------------------------------------------------------------- direct writes

Write = tuple[DocKey, tuple[str | int, ...], Any]


def _setup_writes(rt: Runtime, pat: Pattern, argument: Any, result: Link, out: list[Write]) -> None:
    """The writes `rt.run` stages for `pat` at `result`, nested children included."""
    ident = rt.identity
    arg = docs.argument_link(result)
    key = result.key(ident)
    out.append((arg.key(ident), (docs.VALUE,), argument))
    out.append((key, (docs.PATTERN,), pat.identity))
    out.append((key, (docs.ARGUMENT,), arg))
    out.append((key, (docs.VALUE,), docs.bind(pat.graph.result, result)))
    for node in pat.graph.nodes:
        if node.kind == "pattern":
            child = find_pattern(node.target)
            inner = docs.internal_link(result, node.index)
            _setup_writes(rt, child, docs.bind(node.inputs, result), inner, out)


def _pattern_writes(rt: Runtime) -> list[Write]:
    """The pattern documents (written once per store, by the first setup that needs them)."""
    return [
        (docs.pattern_link(rt.space, p.identity).key(rt.identity), (docs.VALUE,), p.graph.to_json())
        for p in (Parent, Child)
    ]


def _value_writes(rt: Runtime, result: Link, value: int) -> list[Write]:
    """The 50 computed values of a parent, where its lifts write them."""
    out: list[Write] = []
    for k, node in enumerate(Parent.graph.nodes):
        child = docs.internal_link(result, node.index)
        for m, _lift in enumerate(Child.graph.nodes):
            cell = docs.internal_link(child, m).key(rt.identity)
            out.append((cell, (docs.VALUE,), value + k + m))
    return out


async def _write(world: _World, writes: list[Write]) -> None:
    tx = world.rt.edit()
    for key, path, value in writes:
        tx.write(key, path, value)
    outcome = await tx.commit()
    if not outcome.ok:
        raise BenchError(f"direct writes: the commit failed: {outcome!r}")


_baseline_checked = False


def _check_baseline_matches_runner() -> None:
    """Once per process: the direct writes leave the documents the runner leaves, equal."""
    global _baseline_checked
    if _baseline_checked:
        return
    real, direct = _World(), _World()
    try:
        (res,) = real.results(1)
        real.drive(lambda: _run_parents(real, [res]))
        real.drive(lambda: _pull_parent(res, 0))
        link = direct.results(1)[0].link()
        setup: list[Write] = _pattern_writes(direct.rt)
        _setup_writes(direct.rt, Parent, {"value": 0}, link, setup)
        values = _value_writes(direct.rt, link, 0)

        async def write_directly() -> None:
            await _write(direct, setup)
            for write in values:
                await _write(direct, [write])

        direct.drive(write_directly)
        keys = real.store.keys_written
        if keys != direct.store.keys_written:
            raise BenchError(
                "direct writes and the runner wrote different documents:"
                f" {len(keys)} against {len(direct.store.keys_written)}"
            )
        for key in keys:
            if real.rt.replica.visible(key) != direct.rt.replica.visible(key):
                raise BenchError(f"direct writes and the runner disagree on {key}")
    finally:
        real.close()
        direct.close()
    _baseline_checked = True


# ---------------------------------------------------------------------------- setup + start


@bench(group="runner setup+start", name="direct writes (22 docs, 1 tx)", ops=PARENTS, baseline=True)
def direct_setup_writes() -> Run:
    _check_baseline_matches_runner()
    world = _world()
    plans: list[list[Write]] = []
    for i, res in enumerate(world.results(PARENTS)):
        writes = _pattern_writes(world.rt) if i == 0 else []
        _setup_writes(world.rt, Parent, {"value": i}, res.link(), writes)
        plans.append(writes)
    counter = world.counter()

    async def main() -> None:
        for writes in plans:
            await _write(world, writes)

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


@bench(group="runner setup+start", name="rt.run + commit (setup + start)", ops=PARENTS)
def run_and_commit() -> Run:
    world = _world()
    results = world.results(PARENTS)
    counter = world.counter()

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = counter.counts()
        if counts["registrations"] != PARENTS * REGISTRATIONS:
            raise BenchError(f"rt.run: {counts['registrations']} registrations installed")
        return counts

    def run() -> Finish:
        world.drive(lambda: _run_parents(world, results))
        return finish

    return run


@bench(group="runner setup+start", name="rt.stop (running, computed)", ops=PARENTS)
def stop_running() -> Run:
    world = _world()
    results = world.results(PARENTS)

    async def prepare() -> None:
        await _run_parents(world, results)
        for i, res in enumerate(results):
            await _pull_parent(res, i)

    world.drive(prepare)
    counter = world.counter()

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = counter.counts()
        if world.rt.registrations() or world.rt.scheduler.statistics()["nodes"]:
            raise BenchError("rt.stop left registrations or nodes behind")
        return counts

    def run() -> Finish:
        for res in results:
            world.rt.stop(res)
        return finish

    return run


@bench(group="runner setup+start", name="await rt.start (restart after stop)", ops=PARENTS)
def restart() -> Run:
    world = _world()
    results = world.results(PARENTS)

    async def prepare() -> None:
        await _run_parents(world, results)
        for i, res in enumerate(results):
            await _pull_parent(res, i)
        for res in results:
            world.rt.stop(res)

    world.drive(prepare)
    counter = world.counter()

    async def main() -> None:
        for res in results:
            if await world.rt.start(res) is not True:
                raise BenchError("rt.start of a stopped parent did not claim it")

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


@bench(group="runner setup+start", name="stop + start cycle (one parent)", ops=CYCLES)
def churn() -> Run:
    world = _world()
    rt = world.rt
    (res,) = world.results(1)

    async def prepare() -> None:
        await _run_parents(world, [res])
        await _pull_parent(res, 0)

    world.drive(prepare)
    counter = world.counter()

    async def main() -> None:
        for _ in range(CYCLES):
            rt.stop(res)
            if await rt.start(res) is not True:
                raise BenchError("rt.start after rt.stop did not claim the parent")

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        # Correctness, not time: after the cycles exactly one parent's worth is
        # installed, and a final stop leaves nothing.
        running = len(rt.inspect()["registrations"])
        nodes = int(rt.scheduler.statistics()["nodes"])
        if (running, nodes) != (REGISTRATIONS, COMPUTATIONS):
            raise BenchError(f"after {CYCLES} cycles: {running} registrations, {nodes} nodes")
        _check_outputs(res, 0)
        rt.stop(res)
        leaked = len(rt.inspect()["registrations"])
        leaked_nodes = int(rt.scheduler.statistics()["nodes"])
        leaked_other = len(rt.lifetimes()) + len(rt.pending_starts())
        if leaked or leaked_nodes or leaked_other:
            raise BenchError(f"after {CYCLES} cycles and a stop: {leaked} registrations leak")
        counts = dict(counter.counts())
        del counts["registrations"], counts["nodes"]  # net 0 by construction; see leaked_*
        return counts | {"leaked_registrations": leaked, "leaked_nodes": leaked_nodes}

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


# ---------------------------------------------------------------------------- first pull


@bench(
    group="runner first pull", name="direct writes (50 values, 50 tx)", ops=PARENTS, baseline=True
)
def direct_value_writes() -> Run:
    _check_baseline_matches_runner()
    world = _world()
    plans = [_value_writes(world.rt, res.link(), i) for i, res in enumerate(world.results(PARENTS))]
    counter = world.counter()

    async def main() -> None:
        for writes in plans:
            for write in writes:
                await _write(world, [write])

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


@bench(group="runner first pull", name="direct writes (50 values, 1 tx)", ops=PARENTS)
def direct_value_writes_batched() -> Run:
    world = _world()
    plans = [_value_writes(world.rt, res.link(), i) for i, res in enumerate(world.results(PARENTS))]
    counter = world.counter()

    async def main() -> None:
        for writes in plans:
            await _write(world, writes)

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        return counter.counts()

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


@bench(group="runner first pull", name="first pull (50 lifts, 10 pulls)", ops=PARENTS)
def first_pull() -> Run:
    world = _world()
    results = world.results(PARENTS)
    world.drive(lambda: _run_parents(world, results))
    counter = world.counter()

    async def main() -> None:
        for i, res in enumerate(results):
            await _pull_parent(res, i)

    def finish() -> Counts:  # untimed: checks and counters, after the clock stops
        counts = counter.counts()
        if counts["computations"] != PARENTS * COMPUTATIONS:
            raise BenchError(f"first pull: {counts['computations']} computations ran")
        return counts

    def run() -> Finish:
        world.drive(main)
        return finish

    return run


# ---------------------------------------------------------------------------- tracing


def _fresh_bodies(p: Pattern, n: int) -> list[Callable[..., Any]]:
    """`n` copies of `p`'s body: each makes a new pattern, traced from scratch.

    The copies share one qualname (`<name>__traced`), so each new pattern
    replaces the last in the process's registry instead of growing it, and the
    benchmark's real `Parent` and `Child` stay the ones registered.
    """
    fn = p.fn
    assert isinstance(fn, types.FunctionType)
    copies: list[Callable[..., Any]] = []
    for _ in range(n):
        copy = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        copy.__qualname__ = f"{fn.__qualname__}__traced"
        copy.__module__ = fn.__module__
        copies.append(copy)
    return copies


def _trace(p: Pattern) -> Run:
    bodies = _fresh_bodies(p, TRACES)
    size = len(p.graph.nodes)

    def run() -> Counts:
        nodes = 0
        for body in bodies:
            nodes += len(pattern(body).graph.nodes)
        if nodes != TRACES * size:
            raise BenchError(f"tracing {p.identity}: {nodes} nodes, expected {TRACES * size}")
        return {"patterns": TRACES, "nodes": nodes}

    return run


def _decode(p: Pattern) -> Run:
    stored = p.graph.to_json()

    def run() -> Counts:
        nodes = 0
        for _ in range(TRACES):
            nodes += len(PatternGraph.from_json(stored).nodes)
        return {"patterns": TRACES, "nodes": nodes}

    return run


@bench(group="runner trace", name="decode stored Child graph", ops=TRACES, baseline=True)
def decode_child() -> Run:
    return _decode(Child)


@bench(group="runner trace", name="trace new Child (5 lifts)", ops=TRACES)
def trace_child() -> Run:
    return _trace(Child)


@bench(group="runner trace", name="decode stored Parent graph", ops=TRACES)
def decode_parent() -> Run:
    return _decode(Parent)


@bench(group="runner trace", name="trace new Parent (10 nested)", ops=TRACES)
def trace_parent() -> Run:
    return _trace(Parent)

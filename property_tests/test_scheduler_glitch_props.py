"""Scheduler properties: liveness under cycles (P-S-LIVE-1), glitch freedom (P-S-GLITCH-1/2),
value gating (P-S-VAL-1) and bounded passes (P-S-BOUND-1).

Two generators:

- `CyclicLivenessMachine`: computations in fixed output slots read *any* cell,
  including outputs of slots filled later (so cycles, self-reads and rootless
  cycles appear), some through a conditional read whose branch follows a value
  (so runs change read sets and rewire edges). Effects and `demand()` handles come
  and go; graphs often have no root at all. After every step the incremental
  liveness must equal both the graph's own oracle (`_check`) and an independent
  model built from what each node declared and last read.
- `test_effects_never_see_a_half_propagated_wave`: random acyclic graphs with
  declared, static reads, registered in a random order; batches of source changes
  land in one transaction each, then `settle()`. Every effect observation equals
  the reference evaluation, and every node runs exactly when it is live and one of
  its inputs changed value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import cells
from cells import Cell, Path, Space, Transaction, read_value
from scheduler import BACKOFF_CAP, MAX_ITERS, PASS_RUN_BUDGET, ManualClock, Node, Scheduler

# --------------------------------------------------------------------------- shared


def norm(v: object) -> int:
    return v if type(v) is int else 0


def sat(v: int) -> int:
    return max(-10, min(10, v))


def check_bounds(sch: Scheduler, runs_before: dict[Node, int], passes_before: int) -> None:
    """P-S-BOUND-1 over one settle: per node and in total, runs are bounded by passes."""
    passes = sch.stats.passes - passes_before
    runs = {n: n.runs - runs_before.get(n, 0) for n in runs_before}
    for n, r in runs.items():
        assert r <= PASS_RUN_BUDGET * passes, (n, r, passes)
    nodes = max(1, len(runs_before))
    assert sum(runs.values()) <= MAX_ITERS * nodes * passes, (sum(runs.values()), passes)


# --------------------------------------------------------------------------- P-S-LIVE-1

N_SOURCES = 3
N_SLOTS = 6
MAX_EFFECTS = 3
SOURCES = tuple(f"s{i}" for i in range(N_SOURCES))
SLOTS = tuple(f"c{i}" for i in range(N_SLOTS))
CYCLIC_OPS = ("sum", "inc", "cond", "const")
PICK_CELL = st.one_of(st.sampled_from(SLOTS), st.sampled_from(SOURCES))
"""Slots at least half the time, so reads of not-yet-filled slots close cycles."""

Program = tuple[str, tuple[str, ...], int]
"""(op, input cell names, constant)."""


def run_program(program: Program, get: Callable[[str], int]) -> int:
    """Saturating functions; `get` is called only for the inputs really read."""
    op, ins, k = program
    if op == "const":
        return k
    if op == "sum":
        return sat(sum(get(n) for n in ins))
    if op == "inc":
        return sat(max(get(n) for n in ins) + 1)
    a, b, c = ins
    return sat(get(b) if get(a) > 0 else get(c))


@attrs.define(eq=False)
class CNode:
    name: str
    """The output slot for a computation; a fresh label for an effect."""
    kind: str
    program: Program
    declared: frozenset[str]
    node: Node
    last_reads: frozenset[str] = frozenset()

    def reads(self) -> frozenset[str]:
        """What the scheduler's edges should come from: the declared reads until the
        first run, then the last run's reads together with the declared ones (a
        declared input stays ordered before the node and live while it is)."""
        return self.last_reads | self.declared if self.node.runs else self.declared


class CyclicLivenessMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sp = Space(cells.MemoryStore(), "glitch-live")
        self.clock = ManualClock()
        self.sch = Scheduler(self.sp.replica, clock=self.clock)
        self.src = dict.fromkeys(SOURCES, 0)
        self.slot: dict[str, CNode] = {}
        """Slot name -> the registered computation writing it."""
        self.effects: list[CNode] = []
        self.all: list[CNode] = []
        self.handles: list[tuple[CNode, Callable[[], None]]] = []
        self.demand: dict[CNode, int] = {}
        self.n_effects = 0

    @initialize()
    def sources(self) -> None:
        for name in SOURCES:
            self.sp.cell(name).set(0)
        self.sp.replica.pump()

    # ------------------------------------------------------------ model
    def registered(self) -> list[CNode]:
        return [c for c in self.all if c.node.registered]

    def model_writers(self, c: CNode) -> set[CNode]:
        out: set[CNode] = set()
        for name in c.reads():
            w = self.slot.get(name)
            if w is not None and w is not c:
                out.add(w)
        return out

    def model_live(self) -> set[CNode]:
        roots = [c for c in self.registered() if c.kind == "effect" or self.demand.get(c, 0) > 0]
        live = set(roots)
        stack = list(roots)
        while stack:
            for w in self.model_writers(stack.pop()):
                if w not in live:
                    live.add(w)
                    stack.append(w)
        return live

    def on_cycle(self) -> set[CNode]:
        nodes = self.registered()
        succ: dict[CNode, set[CNode]] = {c: set() for c in nodes}
        for r in nodes:
            for w in self.model_writers(r):
                succ[w].add(r)
        cyclic: set[CNode] = set()
        for start in nodes:
            seen: set[CNode] = set()
            stack = list(succ[start])
            while stack:
                n = stack.pop()
                if n is start:
                    cyclic.add(start)
                    break
                if n not in seen:
                    seen.add(n)
                    stack.extend(succ[n])
        return cyclic

    def potential_closure(self, c: CNode) -> tuple[set[CNode], bool]:
        """Registered computations `c` may read transitively (all branches); True if acyclic."""
        closure: set[CNode] = set()
        acyclic = True

        def visit(n: CNode, path: set[CNode]) -> None:
            nonlocal acyclic
            for name in n.program[1]:
                w = self.slot.get(name)
                if w is None:
                    continue
                if w in path:
                    acyclic = False
                    continue
                if w not in closure:
                    closure.add(w)
                    visit(w, path | {w})

        visit(c, {c})
        return closure, acyclic

    def ref(self, name: str, memo: dict[str, int]) -> int:
        """Reference value (acyclic closures only): sources, programs, frozen removed slots."""
        if name not in memo:
            if name in self.src:
                memo[name] = self.src[name]
            elif name in self.slot:
                memo[name] = run_program(self.slot[name].program, lambda n: self.ref(n, memo))
            else:
                memo[name] = norm(self.sp.cell(name).get())
        return memo[name]

    # ------------------------------------------------------------ rules
    @rule(i=st.integers(0, N_SOURCES - 1), v=st.integers(-2, 2))
    def set_source(self, i: int, v: int) -> None:
        self.sp.cell(SOURCES[i]).set(v)
        self.src[SOURCES[i]] = v

    def _add(self, name: str, program: Program, declare: bool) -> None:
        out = self.sp.cell(name)
        holder: list[CNode] = []

        def run(tx: Transaction) -> None:
            read: set[str] = set()

            def get(n: str) -> int:
                read.add(n)
                return norm(read_value(tx, self.sp.cell(n).link()))

            value = run_program(program, get)
            c = holder[0]
            if c.node.runs > 1 and c.last_reads != read and c.node.is_live:
                event("a live node's read set changed")
            c.last_reads = frozenset(read)
            tx.write(out.doc_key, ("value",), value)

        decl = frozenset(program[1]) if declare else frozenset()
        node = self.sch.register(
            run,
            identity=self.sp.identity,
            outputs=[(out.doc_key, ("value",))],
            reads=[(self.sp.cell(n).doc_key, ("value",), False) for n in sorted(decl)],
            label=f"{name}={program[0]}{program[1]}",
        )
        c = CNode(name, "computation", program, decl, node)
        holder.append(c)
        self.slot[name] = c
        self.all.append(c)

    def free_slots(self) -> list[str]:
        return [s for s in SLOTS if s not in self.slot]

    @precondition(lambda self: len(self.slot) < N_SLOTS)
    @rule(
        data=st.data(),
        op=st.sampled_from(CYCLIC_OPS),
        k=st.integers(-2, 2),
        declare=st.booleans(),
    )
    def add_computation(self, data: st.DataObject, op: str, k: int, declare: bool) -> None:
        name = data.draw(st.sampled_from(self.free_slots()))
        pick = PICK_CELL
        if op == "const":
            ins: tuple[str, ...] = ()
        elif op == "cond":
            selector = data.draw(st.one_of(st.sampled_from(SOURCES), pick))
            ins = (selector, data.draw(pick), data.draw(pick))
        else:
            ins = tuple(data.draw(st.lists(pick, min_size=1, max_size=3)))
        self._add(name, (op, ins, k), declare)

    @precondition(lambda self: len(self.slot) <= N_SLOTS - 2)
    @rule(data=st.data(), declare=st.booleans())
    def add_ring(self, data: st.DataObject, declare: bool) -> None:
        """A cycle c_a -> c_b -> ... -> c_a, each member maybe also reading a source."""
        free = self.free_slots()
        size = data.draw(st.integers(2, min(3, len(free))))
        ring = data.draw(st.permutations(free))[:size]
        for pos, name in enumerate(ring):
            prev = ring[pos - 1]
            op = data.draw(st.sampled_from(("inc", "sum", "cond")))
            extra = data.draw(st.sampled_from(SOURCES))
            if op == "cond":
                ins: tuple[str, ...] = (extra, prev, data.draw(PICK_CELL))
            else:
                ins = (prev, extra) if data.draw(st.booleans()) else (prev,)
            self._add(name, (op, ins, 0), declare)

    @precondition(lambda self: len([e for e in self.effects if e.node.registered]) < MAX_EFFECTS)
    @rule(ins=st.lists(PICK_CELL, min_size=1, max_size=3, unique=True))
    def add_effect(self, ins: list[str]) -> None:
        label = f"e{self.n_effects}"
        self.n_effects += 1

        def run(tx: Transaction) -> None:
            for n in ins:
                read_value(tx, self.sp.cell(n).link())

        node = self.sch.register(
            run,
            identity=self.sp.identity,
            kind="effect",
            reads=[(self.sp.cell(n).doc_key, ("value",), False) for n in ins],
            label=label,
        )
        c = CNode(label, "effect", ("const", tuple(ins), 0), frozenset(ins), node)
        c.last_reads = frozenset(ins)
        self.effects.append(c)
        self.all.append(c)

    def removable(self) -> list[CNode]:
        return self.registered()

    @precondition(lambda self: bool(self.removable()))
    @rule(data=st.data())
    def remove_node(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.removable()))
        self.sch.remove(c.node)
        assert not c.node.is_live
        if c.kind == "computation":
            del self.slot[c.name]
        self.demand.pop(c, None)

    @precondition(lambda self: bool(self.registered()))
    @rule(data=st.data())
    def demand_node(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.registered()))
        self.handles.append((c, self.sch.demand(c.node)))
        self.demand[c] = self.demand.get(c, 0) + 1

    @precondition(lambda self: bool(self.handles))
    @rule(data=st.data())
    def release_demand(self, data: st.DataObject) -> None:
        c, release = self.handles.pop(data.draw(st.integers(0, len(self.handles) - 1)))
        release()
        if c.node.registered:
            self.demand[c] -= 1
        release()  # idempotent

    @rule(dt=st.sampled_from([0.1, 0.5, BACKOFF_CAP + 0.5]))
    def advance_clock(self, dt: float) -> None:
        self.clock.advance(dt)

    @rule()
    def settle(self) -> None:
        runs_before = {c.node: c.node.runs for c in self.registered()}
        passes_before = self.sch.stats.passes
        deferrals_before = self.sch.stats.deferrals
        self.sch.settle()  # must terminate even with oscillating cycles
        check_bounds(self.sch, runs_before, passes_before)
        if self.sch.stats.deferrals > deferrals_before:
            event("settle deferred a node")
        if any(c.node.runs > runs_before.get(c.node, 0) for c in self.on_cycle()):
            event("a live cycle ran")
        assert self.sch.runnable() == []
        now = self.clock.now()
        deferred = set(self.sch.deferred())
        waiting = {c.node for c in self.registered() if c.node.is_live and c.node.status != "clean"}
        assert deferred == waiting, (deferred, waiting)
        for n in deferred:
            assert now < n.eligible_at <= now + BACKOFF_CAP, (n, n.eligible_at, now)
        # Where nothing upstream can cycle or wait, live values equal the reference.
        memo: dict[str, int] = {}
        for c in self.registered():
            if c.kind != "computation" or not c.node.is_live:
                continue
            closure, acyclic = self.potential_closure(c)
            if not acyclic or any(w.node in deferred for w in closure | {c}):
                continue
            assert c.node.status == "clean", c.node
            actual = self.sp.cell(c.name).get()
            assert actual == self.ref(c.name, memo), (c.node, actual)

    # ------------------------------------------------------------ invariants
    @invariant()
    def liveness(self) -> None:
        self.sch._check()  # P-S-LIVE-1: incremental liveness equals the graph's oracle
        self.sp.replica._check()
        live = self.model_live()
        for c in self.registered():
            # The graph's edges are exactly the model's (declared or last-read sets).
            assert self.sch.graph.edges_into(c.node) == {w.node for w in self.model_writers(c)}, c
            assert c.node.is_live == (c in live), (c.node, c.node.live_refs)
        for c in self.on_cycle():
            if c not in live:
                event("rootless cycle")
                assert not c.node.is_live, c.node
        if not any(e.node.registered for e in self.effects) and not any(self.demand.values()):
            event("no root at all")
            assert not any(c.node.is_live for c in self.registered())


TestCyclicLivenessMachine = CyclicLivenessMachine.TestCase


# --------------------------------------------------------------------------- P-S-GLITCH-1/2

ACYCLIC_OPS = ("sum", "max", "diff", "const", "clamp")

Spec = tuple[
    int,  # number of sources
    list[tuple[str, tuple[str, ...], int]],  # computations c0.. (op, inputs, constant)
    list[tuple[str, ...]],  # effects: cells read
]


def acyclic_eval(op: str, vals: list[int], k: int) -> int:
    if op == "const":
        return k
    if op == "sum":
        return sum(vals)
    if op == "max":
        return max(vals)
    if op == "diff":
        return vals[0] - sum(vals[1:])
    return max(-1, min(1, vals[0]))  # clamp: often unchanged (P-S-VAL-1)


@st.composite
def acyclic_specs(draw: st.DrawFn) -> Spec:
    n_src = draw(st.integers(1, 4))
    names = [f"s{i}" for i in range(n_src)]
    comps: list[tuple[str, tuple[str, ...], int]] = []
    for i in range(draw(st.integers(1, 7))):
        op = draw(st.sampled_from(ACYCLIC_OPS))
        ins = (
            ()
            if op == "const"
            else tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)))
        )
        comps.append((op, ins, draw(st.integers(-2, 2))))
        names.append(f"c{i}")
    effects = [
        tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)))
        for _ in range(draw(st.integers(1, 3)))
    ]
    return n_src, comps, effects


def reference(spec: Spec, src: list[int]) -> dict[str, int]:
    n_src, comps, _ = spec
    vals = {f"s{i}": src[i] for i in range(n_src)}
    for i, (op, ins, k) in enumerate(comps):
        vals[f"c{i}"] = acyclic_eval(op, [vals[n] for n in ins], k)
    return vals


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[Spec, list[int], list[dict[int, int]], list[int], bool]:
    spec = draw(acyclic_specs())
    n_src, comps, effects = spec
    values = st.integers(-2, 2)
    initial = draw(st.lists(values, min_size=n_src, max_size=n_src))
    batches = draw(
        st.lists(
            st.dictionaries(st.integers(0, n_src - 1), values, min_size=1),
            min_size=1,
            max_size=6,
        )
    )
    order = draw(st.permutations(range(len(comps) + len(effects))))
    shared = draw(st.booleans())
    return spec, initial, batches, order, shared


@given(scenario=scenarios())
def test_effects_never_see_a_half_propagated_wave(
    scenario: tuple[Spec, list[int], list[dict[int, int]], list[int], bool],
) -> None:
    check_waves(scenario, derived=False)


@given(scenario=scenarios())
def test_effects_never_see_a_half_propagated_wave_of_derives(
    scenario: tuple[Spec, list[int], list[dict[int, int]], list[int], bool],
) -> None:
    # The same law with the computations made by `Scheduler.derive` (value functions:
    # after their first run they run with no transaction, `Replica.run_field`, joins of
    # whole cells through their kept plans; an input repeated, or cells sharing one
    # document, take the general paths).
    check_waves(scenario, derived=True)


def check_waves(
    scenario: tuple[Spec, list[int], list[dict[int, int]], list[int], bool], derived: bool
) -> None:
    """P-S-GLITCH-1/2, P-S-VAL-1 and P-S-BOUND-1 over `scenario`'s settles; `derived`: the
    computations with inputs are `Scheduler.derive` nodes, not node functions."""
    spec, initial, batches, order, shared = scenario
    _, comps, effects = spec
    sp = Space(cells.MemoryStore(), "glitch")
    sch = Scheduler(sp.replica, clock=ManualClock())

    def cell(name: str) -> Cell:
        # `shared`: every cell is a field of one document, so only value-accurate
        # path matching (not the store's elision of no-op writes) keeps runs minimal.
        return sp.cell("grid").key(name) if shared else sp.cell(name)

    def at(name: str) -> tuple[Any, Path]:
        c = cell(name)
        return c.doc_key, ("value", *c.path)

    def write(tx: Transaction, name: str, value: int) -> None:
        tx.write(*at(name), value)

    tx = sp.edit()
    for i, v in enumerate(initial):
        write(tx, f"s{i}", v)
    tx.commit()
    sp.replica.pump()

    def decl(ins: tuple[str, ...]) -> list[Any]:
        return [(*at(n), False) for n in ins]

    def make_comp(i: int) -> Callable[[Transaction], None]:
        op, ins, k = comps[i]

        def run(tx: Transaction) -> None:
            vals = [norm(read_value(tx, cell(n).link())) for n in ins]
            write(tx, f"c{i}", acyclic_eval(op, vals, k))

        return run

    observations: list[list[tuple[int, ...]]] = [[] for _ in effects]

    def make_effect(j: int) -> Callable[[Transaction], None]:
        ins = effects[j]

        def run(tx: Transaction) -> None:
            observations[j].append(tuple(norm(read_value(tx, cell(n).link())) for n in ins))

        return run

    # Register in a random order: ordinals alone are no topological order.
    nodes: dict[str, Node] = {}
    for idx in order:
        if idx < len(comps) and derived and comps[idx][1]:
            op, ins, k = comps[idx]
            nodes[f"c{idx}"] = sch.derive(
                cell(f"c{idx}"),
                [cell(n) for n in ins],
                lambda *vs, op=op, k=k: acyclic_eval(op, [norm(v) for v in vs], k),
                label=f"c{idx}",
            )
        elif idx < len(comps):
            nodes[f"c{idx}"] = sch.register(
                make_comp(idx),
                identity=sp.identity,
                outputs=[at(f"c{idx}")],
                reads=decl(comps[idx][1]),
                label=f"c{idx}",
            )
        else:
            j = idx - len(comps)
            nodes[f"e{j}"] = sch.register(
                make_effect(j),
                identity=sp.identity,
                kind="effect",
                reads=decl(effects[j]),
                label=f"e{j}",
            )
        sch._check()
    inputs = {f"c{i}": comps[i][1] for i in range(len(comps))}
    inputs.update({f"e{j}": effects[j] for j in range(len(effects))})
    live = {name for name, n in nodes.items() if n.is_live}

    src = list(initial)
    before: dict[str, int] | None = None
    for batch in [{}, *batches]:  # the first settle runs everything live once
        for i, v in batch.items():
            src[i] = v
        if batch:
            tx = sp.edit()
            for i, v in batch.items():
                write(tx, f"s{i}", v)
            tx.commit()
        after = reference(spec, src)
        seen = [len(obs) for obs in observations]
        runs_before = {n: n.runs for n in nodes.values()}
        passes_before = sch.stats.passes
        sch.settle()
        sch._check()
        check_bounds(sch, runs_before, passes_before)
        for name, node in nodes.items():
            ran = node.runs - runs_before[node]
            changed = before is None or any(before[n] != after[n] for n in inputs[name])
            # P-S-GLITCH-2 / P-S-VAL-1: at most once, and exactly when live and an input moved.
            assert ran == (1 if name in live and changed else 0), (name, ran, changed, batch)
        for j, ins in enumerate(effects):
            # P-S-GLITCH-1: every observation is the fully propagated state.
            for obs in observations[j][seen[j] :]:
                assert obs == tuple(after[n] for n in ins), (f"e{j}", obs, after, batch)
        for name in live:
            if name.startswith("c"):
                assert norm(cell(name).get()) == after[name], name
        before = after
        assert sch.runnable() == [] and sch.deferred() == []

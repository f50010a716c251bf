"""Scheduler properties: liveness (P-S-LIVE-1/2), consistency (P-S-CONS-1), dormancy (P-S-DORM-1),
and pulls (each returns the reference value and leaves no demand behind).

A small universe: four source cells and up to eight computations, each a pure
function (sum, max, constant, conditional read, a link to one of two cells chosen
by a third) of one or two *earlier* cells,
so the graph is acyclic. Each computation owns a fresh output cell; a removed
computation's output keeps its last written value (its readers stay
registered). Sinks (effects) sit on random computation outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import cells
import scheduler._readers as readers_module
from cells import MISSING, Cell, Space, Transaction, read_value
from scheduler import ManualClock, Node, Scheduler

N_SOURCES = 4
MAX_COMPUTATIONS = 8
MAX_SINKS = 4
OPS = ("sum", "max", "const", "cond", "ptr")

Program = tuple[str, tuple[str, ...], int]
"""(op, input cell names, constant)."""


def norm(v: object) -> int:
    return v if type(v) is int else 0


def evaluate(program: Program, get: Callable[[str], int]) -> int:
    """The computation's value; `get` is called only for the inputs it really reads."""
    op, ins, k = program
    if op == "const":
        return k
    if op == "sum":
        return sum(get(n) for n in ins)
    if op == "max":
        return max(get(n) for n in ins)
    a, b, c = ins
    # "ptr" writes a link to b or c (a reader follows it to the same value as "cond").
    return get(b) if get(a) > 0 else get(c)


def declared(program: Program) -> tuple[str, ...]:
    op, ins, _ = program
    return ins[:1] if op == "ptr" else ins


@attrs.define(eq=False)
class Comp:
    name: str
    program: Program
    node: Node
    declare: bool


@attrs.define(eq=False)
class SinkRec:
    name: str
    cancel: Callable[[], None]
    seen: list[Any]


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sp = Space(cells.MemoryStore(), "props")
        self.sch = Scheduler(self.sp.replica, clock=ManualClock())
        self.src_values = [0] * N_SOURCES
        self.names: list[str] = []
        self.comps: dict[str, Comp] = {}
        self.sinks: list[SinkRec] = []
        self.ever_live: set[Node] = set()
        self.dormant_runs: list[str] = []
        self.changed_since_settle = True

    def cell(self, name: str) -> Cell:
        return self.sp.cell(name)

    @initialize()
    def sources(self) -> None:
        for i in range(N_SOURCES):
            self.cell(f"s{i}").set(0)
            self.names.append(f"s{i}")
        self.sp.replica.pump()

    # ------------------------------------------------------------ reference
    def ref(self, name: str, memo: dict[str, int] | None = None) -> int:
        memo = {} if memo is None else memo
        if name in memo:
            return memo[name]
        if name.startswith("s"):
            value = self.src_values[int(name[1:])]
        else:
            comp = self.comps[name]
            if comp.node.registered:
                value = evaluate(comp.program, lambda n: self.ref(n, memo))
            else:
                value = norm(self.cell(name).get())  # frozen at its last write
        memo[name] = value
        return value

    def registered(self) -> list[Comp]:
        return [c for c in self.comps.values() if c.node.registered]

    # ------------------------------------------------------------ rules
    @rule(i=st.integers(0, N_SOURCES - 1), v=st.integers(-3, 3))
    def set_source(self, i: int, v: int) -> None:
        self.cell(f"s{i}").set(v)
        if self.src_values[i] != v:
            self.changed_since_settle = True
        self.src_values[i] = v

    @precondition(lambda self: len(self.registered()) < MAX_COMPUTATIONS)
    @rule(data=st.data(), op=st.sampled_from(OPS), k=st.integers(-3, 3), declare=st.booleans())
    def add_computation(self, data: st.DataObject, op: str, k: int, declare: bool) -> None:
        pick = st.sampled_from(self.names)
        if op == "const":
            ins: tuple[str, ...] = ()
        elif op in ("cond", "ptr"):
            ins = (data.draw(pick), data.draw(pick), data.draw(pick))
        else:
            ins = tuple(data.draw(st.lists(pick, min_size=1, max_size=2)))
        name = f"c{len(self.comps)}"
        program: Program = (op, ins, k)
        out = self.cell(name)
        holder: list[Node] = []

        def run(tx: Transaction) -> None:
            node = holder[0]
            if node.is_live or node in self.sch.graph.pulled:  # (a pull holds it)
                self.ever_live.add(node)
            else:
                self.dormant_runs.append(name)

            def get(n: str) -> int:
                return norm(read_value(tx, self.cell(n).link()))

            if op == "ptr":
                # A link whose target moves with `a`: a pull through it may find, after
                # its settle, a place whose writer it did not hold.
                a, b, c = ins
                target = self.cell(b if get(a) > 0 else c).link()
                tx.write(out.doc_key, ("value",), target)
                return
            tx.write(out.doc_key, ("value",), evaluate(program, get))

        reads = (
            [(self.cell(n).doc_key, ("value",), False) for n in declared(program)]
            if declare
            else []
        )
        node = self.sch.register(
            run,
            identity=self.sp.identity,
            outputs=[(out.doc_key, ("value",))],
            reads=reads,
            label=f"{name}={op}{ins}",
        )
        holder.append(node)
        self.comps[name] = Comp(name, program, node, declare)
        self.names.append(name)

    @precondition(lambda self: bool(self.comps) and len(self.sinks) < MAX_SINKS)
    @rule(data=st.data())
    def add_sink(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.comps)))
        seen: list[Any] = []
        cancel = self.sch.sink(self.cell(name), seen.append)  # settles
        self.sinks.append(SinkRec(name, cancel, seen))
        self.changed_since_settle = True

    @precondition(lambda self: bool(self.sinks))
    @rule(data=st.data())
    def cancel_sink(self, data: st.DataObject) -> None:
        rec = self.sinks.pop(data.draw(st.integers(0, len(self.sinks) - 1)))
        rec.cancel()

    @precondition(lambda self: bool(self.registered()))
    @rule(data=st.data())
    def remove_computation(self, data: st.DataObject) -> None:
        comp = data.draw(st.sampled_from(self.registered()))
        self.sch.remove(comp.node)
        assert not comp.node.is_live
        self.changed_since_settle = True

    @rule(data=st.data())
    def pull(self, data: st.DataObject) -> None:
        # A pull makes no node: it holds demand on the writers of what it reads, settles
        # and reads. It returns the consistent value, gives all demand back, and a second
        # pull with nothing changed runs nothing (zero unnecessary runs).
        name = data.draw(st.sampled_from(self.names))
        before = {c.name: c.node.runs for c in self.comps.values()}
        got = self.sch.pull_now(self.cell(name))
        assert norm(got) == self.ref(name), (name, got)
        assert all(n.demand == 0 for n in self.sch.graph.nodes)
        assert not self.sch.graph.pulled, "a pull left nodes held"
        # A pull holds only the stale nodes feeding what it reads: a dormant computation
        # that ran is upstream of the pulled cell (through what it may read).
        upstream = self.upstream(name)
        for comp in self.comps.values():
            if comp.node.runs != before[comp.name] and not comp.node.is_live:
                assert comp.name in upstream, (comp.name, name, upstream)
        runs = self.sch.stats.runs
        assert norm(self.sch.pull_now(self.cell(name))) == self.ref(name)
        assert self.sch.stats.runs == runs, "a second pull with nothing changed ran something"

    def upstream(self, name: str) -> set[str]:
        """`name` and every computation it may read, transitively (all inputs)."""
        seen = {name}
        stack = [name]
        while stack:
            comp = self.comps.get(stack.pop())
            if comp is None:
                continue
            for n in comp.program[1]:
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return seen

    @rule()
    def settle(self) -> None:
        before = self.sch.stats.runs
        self.sch.settle()
        if not self.changed_since_settle:
            assert self.sch.stats.runs == before, "runs without any change since the last settle"
        self.changed_since_settle = False
        self.check_quiescent()
        # Zero unnecessary runs: settling again runs nothing.
        again = self.sch.stats.runs
        self.sch.settle()
        assert self.sch.stats.runs == again, self.sch.statistics()

    def check_quiescent(self) -> None:
        assert self.sch.runnable() == []
        assert self.sch.deferred() == []
        memo: dict[str, int] = {}
        for comp in self.registered():  # P-S-CONS-1
            if comp.node.is_live:
                assert comp.node.status == "clean", comp.node
                # (Through a link to a removed computation's output that was never
                # written, the value is absent: the model counts an absent value as 0.)
                actual = self.cell(comp.name).get()
                assert norm(actual) == self.ref(comp.name, memo), (comp.node, actual)
        for rec in self.sinks:
            assert rec.seen, rec.name
            assert norm(rec.seen[-1]) == self.ref(rec.name, memo), (rec.name, rec.seen)

    # ------------------------------------------------------------ invariants
    @invariant()
    def structure(self) -> None:
        self.sch._check()  # P-S-LIVE-1: incremental liveness equals the oracle
        self.sp.replica._check()

    @invariant()
    def dormancy(self) -> None:
        for comp in self.comps.values():
            if comp.node.is_live:
                self.ever_live.add(comp.node)
        assert self.dormant_runs == [], self.dormant_runs  # P-S-DORM-1
        for comp in self.comps.values():
            if comp.node not in self.ever_live:
                assert comp.node.runs == 0, comp.node


TestSchedulerMachine = SchedulerMachine.TestCase


class TrieSchedulerMachine(SchedulerMachine):
    """The same machine with every read document matched through its reader trie
    (made at the first match, kept in step as read sets change and nodes go)."""

    def __init__(self) -> None:
        self._saved_threshold = readers_module.TRIE_READERS
        readers_module.TRIE_READERS = 1
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            readers_module.TRIE_READERS = self._saved_threshold


TestTrieSchedulerMachine = TrieSchedulerMachine.TestCase


# --------------------------------------------------------------------------- P-S-LIVE-2


@st.composite
def graphs(draw: st.DrawFn) -> list[tuple[str, tuple[int, ...], bool]]:
    """Nodes (kind, indices of earlier computations read, explicitly demanded)."""
    n = draw(st.integers(1, 9))
    spec: list[tuple[str, tuple[int, ...], bool]] = []
    for i in range(n):
        comps = [j for j in range(i) if spec[j][0] == "computation"]
        kind = draw(st.sampled_from(["computation", "computation", "effect"]))
        ins = (
            tuple(draw(st.lists(st.sampled_from(comps), max_size=2, unique=True))) if comps else ()
        )
        demanded = kind == "computation" and draw(st.integers(0, 5)) == 0
        spec.append((kind, ins, demanded))
    return spec


def expected_live(spec: list[tuple[str, tuple[int, ...], bool]]) -> set[int]:
    live = {i for i, (kind, _, demanded) in enumerate(spec) if kind == "effect" or demanded}
    stack = list(live)
    while stack:
        for j in spec[stack.pop()][1]:
            if j not in live:
                live.add(j)
                stack.append(j)
    return live


@given(spec=graphs(), data=st.data())
def test_liveness_is_independent_of_registration_order(
    spec: list[tuple[str, tuple[int, ...], bool]], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(spec))))
    sp = Space(cells.MemoryStore(), "live2")
    sch = Scheduler(sp.replica, clock=ManualClock())
    src = sp.cell("src")
    src.set(1)
    sp.replica.pump()

    def make(i: int) -> Callable[[Transaction], None]:
        kind, ins, _ = spec[i]

        def run(tx: Transaction) -> None:
            total = sum(norm(read_value(tx, sp.cell(f"n{j}").link())) for j in ins)
            total += norm(read_value(tx, src.link()))
            if kind == "computation":
                tx.write(sp.cell(f"n{i}").doc_key, ("value",), total)

        return run

    nodes: dict[int, Node] = {}
    for i in order:
        kind, ins, _ = spec[i]
        reads = [(sp.cell(f"n{j}").doc_key, ("value",), False) for j in ins]
        reads.append((src.doc_key, ("value",), False))
        outputs = [(sp.cell(f"n{i}").doc_key, ("value",))] if kind == "computation" else []
        nodes[i] = sch.register(
            make(i),
            identity=sp.identity,
            kind=kind,  # type: ignore[arg-type]
            outputs=outputs,
            reads=reads,
            label=f"n{i}",
        )
        sch._check()
    for i in order:
        if spec[i][2]:
            sch.demand(nodes[i])
            sch._check()
    expected = expected_live(spec)
    assert {i for i, n in nodes.items() if n.is_live} == expected
    sch.settle()
    assert {i for i, n in nodes.items() if n.runs} == expected  # exactly the live nodes ran
    assert {i for i, n in nodes.items() if n.is_live} == expected
    for i in expected:
        if spec[i][0] == "computation":
            assert sp.cell(f"n{i}").get() is not MISSING
    sch._check()
    sp.replica._check()

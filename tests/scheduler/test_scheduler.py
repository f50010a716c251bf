"""Scheduler: demand, value-accurate invalidation, glitch freedom, bounded passes, waiting."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pytest

import cells
import scheduler
from cells import MISSING, Cell, Space, Transaction, read_value
from scheduler import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    ManualClock,
    Node,
    NodeError,
    Scheduler,
    SystemClock,
)
from scheduler._node import TwoReads


@attrs.define
class Env:
    sp: Space
    sch: Scheduler
    clock: ManualClock

    def source(self, name: str, value: Any) -> Cell:
        c = self.sp.cell(name)
        c.set(value)
        self.sp.replica.pump()
        return c

    def compute(
        self,
        out: Cell,
        inputs: Sequence[Cell],
        fn: Callable[..., Any],
        *,
        declare: bool = True,
        label: str | None = None,
    ) -> Node:
        """A computation writing `fn(*values of inputs)` to `out` (None while an input is absent).

        Without declared reads a never-ran node may run before its writers (it
        cannot be ordered yet), so it must tolerate absent inputs.
        """

        def run(tx: Transaction) -> None:
            values = [read_value(tx, c.link()) for c in inputs]
            result = None if any(v is MISSING or v is None for v in values) else fn(*values)
            tx.write(out.doc_key, ("value",), result)

        reads = [(c.doc_key, ("value",), False) for c in inputs] if declare else []
        return self.sch.register(
            run,
            identity=self.sp.identity,
            outputs=[(out.doc_key, ("value",))],
            reads=reads,
            label=label or f"compute {out.id}",
        )

    def check(self) -> None:
        self.sch._check()
        self.sp.replica._check()


@pytest.fixture
def env() -> Iterator[Env]:
    sp = Space(cells.MemoryStore(), "x")
    clock = ManualClock()
    sch = Scheduler(sp.replica, clock=clock)
    e = Env(sp, sch, clock)
    yield e
    e.check()


def runs(sch: Scheduler) -> int:
    return sch.stats.runs


# ---------------------------------------------------------------------------- demand


@pytest.mark.parametrize("declare", [True, False])
def test_dormant_computation_never_runs_until_a_sink_reads_it(env: Env, declare: bool) -> None:
    a = env.source("a", 1)
    b, c = env.sp.cell("b"), env.sp.cell("c")
    nb = env.compute(b, [a], lambda v: v + 1, declare=declare)
    nc = env.compute(c, [b], lambda v: v * 10, declare=declare)
    env.sch.settle()
    assert (nb.runs, nc.runs) == (0, 0)
    assert not nb.is_live and not nc.is_live
    env.check()

    seen: list[Any] = []
    cancel = env.sch.sink(c, seen.append)
    assert nb.is_live and nc.is_live
    assert nb.runs >= 1 and nc.runs >= 1
    if declare:
        assert (nb.runs, nc.runs) == (1, 1)
    assert seen[-1] == 20
    env.check()

    cancel()
    assert not nb.is_live and not nc.is_live
    env.check()
    before = runs(env.sch)
    a.set(5)
    env.sch.settle()
    assert runs(env.sch) == before  # invalidation of dormant nodes costs no run
    assert seen[-1] == 20
    assert env.sch.runnable() == []
    env.check()

    seen2: list[Any] = []
    env.sch.sink(c, seen2.append)
    assert seen2 == [60]


def test_dormant_invalidation_runs_nothing_even_across_many_changes(env: Env) -> None:
    a = env.source("a", 0)
    b = env.sp.cell("b")
    nb = env.compute(b, [a], lambda v: v + 1)
    for i in range(20):
        a.set(i + 1)
        env.sch.settle()
    assert nb.runs == 0
    assert env.sch.statistics()["runs"] == 0
    assert env.sch.pull_now(b) == 21
    assert nb.runs == 1
    assert not nb.is_live  # the pull released its demand


# ---------------------------------------------------------------------------- value accuracy


def test_writing_an_equal_value_triggers_nothing(env: Env) -> None:
    a = env.source("a", {"k": [1, 2]})
    b = env.sp.cell("b")
    nb = env.compute(b, [a], lambda v: len(v["k"]))
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    before = runs(env.sch)
    a.set({"k": [1, 2]})
    env.sch.settle()
    assert runs(env.sch) == before
    assert nb.runs == 1
    assert seen == [2]


def test_unchanged_output_triggers_no_downstream_run(env: Env) -> None:
    a = env.source("a", 1)
    parity, c = env.sp.cell("parity"), env.sp.cell("c")
    np_ = env.compute(parity, [a], lambda v: v % 2)
    nc = env.compute(c, [parity], lambda v: v * 100)
    seen: list[Any] = []
    env.sch.sink(c, seen.append)
    sink_runs = env.sch.stats.runs_effect
    a.set(3)  # parity unchanged
    env.sch.settle()
    assert np_.runs == 2
    assert nc.runs == 1
    assert env.sch.stats.runs_effect == sink_runs
    a.set(4)
    env.sch.settle()
    assert (np_.runs, nc.runs) == (3, 2)
    assert seen == [100, 0]


def test_a_read_path_reruns_only_when_the_value_there_changes(env: Env) -> None:
    src = env.source("src", {"x": 1, "y": 1})
    out = env.sp.cell("out")
    node = env.compute(out, [src.key("x")], lambda v: v + 1, declare=False)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    src.key("y").set(2)  # same document, another path
    env.sch.settle()
    assert node.runs == 1
    src.set({"x": 1, "y": 3, "z": 0})  # the whole value replaced, x unchanged
    env.sch.settle()
    assert node.runs == 1
    src.key("x").set(5)
    env.sch.settle()
    assert node.runs == 2
    assert seen == [2, 6]


def test_a_runs_own_commit_never_invalidates_it(env: Env) -> None:
    inc = env.source("inc", 1)
    acc = env.source("acc", 0)

    def accumulate(tx: Transaction) -> None:
        step = read_value(tx, inc.link())
        total = read_value(tx, acc.link())
        tx.write(acc.doc_key, ("value",), total + step)

    node = env.sch.register(
        accumulate,
        identity=env.sp.identity,
        outputs=[(acc.doc_key, ("value",))],
        reads=[(inc.doc_key, ("value",), False), (acc.doc_key, ("value",), False)],
        label="accumulate",
    )
    seen: list[Any] = []
    env.sch.sink(acc, seen.append)
    assert node.runs == 1  # re-running would add again: it converged without a re-run
    assert acc.get() == 1
    inc.set(5)
    env.sch.settle()
    assert node.runs == 2
    assert acc.get() == 6
    env.sch.settle()
    assert node.runs == 2
    assert seen == [1, 6]
    assert env.sch.stats.deferrals == 0


# ---------------------------------------------------------------------------- glitch freedom


def test_diamond_runs_each_node_once_and_effects_never_see_a_half_wave(env: Env) -> None:
    a = env.source("a", 1)
    b, c, d = env.sp.cell("b"), env.sp.cell("c"), env.sp.cell("d")
    # Register in an order that does not match the topological order.
    nd = env.compute(d, [b, c], lambda x, y: x + y)
    nc = env.compute(c, [a], lambda v: v * 2)
    nb = env.compute(b, [a], lambda v: v + 1)

    def ref(v: int) -> int:
        return (v + 1) + v * 2

    seen: list[Any] = []
    env.sch.sink(d, seen.append)
    observed: list[tuple[Any, ...]] = []

    def watch(tx: Transaction) -> None:
        observed.append(tuple(read_value(tx, x.link()) for x in (a, b, c, d)))

    env.sch.register(watch, identity=env.sp.identity, kind="effect", label="watch")
    env.sch.settle()
    assert (nb.runs, nc.runs, nd.runs) == (1, 1, 1)
    for i, v in enumerate([2, 7, -3, 10]):
        a.set(v)
        env.sch.settle()
        assert (nb.runs, nc.runs, nd.runs) == (i + 2, i + 2, i + 2)
        env.check()
    assert seen == [ref(v) for v in [1, 2, 7, -3, 10]]
    for av, bv, cv, dv in observed:
        assert (bv, cv, dv) == (av + 1, av * 2, ref(av))


def test_chain_of_ten_thousand_settles_without_recursion(env: Env) -> None:
    limit = sys.getrecursionlimit()
    n = 10_000
    src = env.source("src", 0)
    prev = src
    for i in range(n):
        out = env.sp.cell(f"n{i}")
        env.compute(out, [prev], lambda v: v + 1)
        prev = out
    seen: list[Any] = []
    env.sch.sink(prev, seen.append)
    assert seen == [n]
    stats0 = env.sch.statistics()
    src.set(1)
    env.sch.settle()
    stats1 = env.sch.statistics()
    assert stats1["runs_computation"] - stats0["runs_computation"] == n
    assert stats1["runs_effect"] - stats0["runs_effect"] == 1
    assert seen == [n, n + 1]
    assert sys.getrecursionlimit() == limit


# ---------------------------------------------------------------------------- read sets


def test_conditional_read_follows_the_branch_taken(env: Env) -> None:
    a = env.source("a", 1)
    b = env.source("b", "B0")
    c = env.source("c", "C0")
    out = env.sp.cell("out")

    def choose(tx: Transaction) -> None:
        flag = read_value(tx, a.link())
        v = read_value(tx, (b if flag > 0 else c).link())
        tx.write(out.doc_key, ("value",), v)

    node = env.sch.register(
        choose, identity=env.sp.identity, outputs=[(out.doc_key, ("value",))], label="choose"
    )
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert seen == ["B0"]
    c.set("C1")  # not read yet
    env.sch.settle()
    assert node.runs == 1
    a.set(-1)
    env.sch.settle()
    assert node.runs == 2
    assert seen == ["B0", "C1"]
    b.set("B2")  # the old branch
    env.sch.settle()
    assert node.runs == 2
    c.set("C3")  # the new branch
    env.sch.settle()
    assert node.runs == 3
    assert seen == ["B0", "C1", "C3"]


def test_shallow_read_reruns_on_shape_change_only(env: Env) -> None:
    src = env.source("src", {"x": {"deep": 1}, "items": [1, 2]})
    out = env.sp.cell("out")
    items = env.sp.cell("items")

    def shape(tx: Transaction) -> None:
        top = tx.read(src.doc_key, ("value",), shallow=True)
        lst = tx.read(src.doc_key, ("value", "items"), shallow=True)
        tx.write(out.doc_key, ("value",), sorted(top))
        tx.write(items.doc_key, ("value",), len(lst))

    node = env.sch.register(
        shape,
        identity=env.sp.identity,
        outputs=[(out.doc_key, ("value",)), (items.doc_key, ("value",))],
        label="shape",
    )
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert node.runs == 1
    src.key("x", "deep").set(2)  # deeper than the shallow reads
    env.sch.settle()
    assert node.runs == 1
    src.key("items", 0).set(99)  # a list element: length unchanged
    env.sch.settle()
    assert node.runs == 1
    src.key("y").set(0)  # key set changes
    env.sch.settle()
    assert node.runs == 2
    assert seen == [["items", "x"], ["items", "x", "y"]]
    src.key("items").push(3)  # length changes
    env.sch.settle()
    assert node.runs == 3
    assert items.get() == 3


def test_reading_through_a_link_follows_a_repointed_link(env: Env) -> None:
    x = env.source("x", "X0")
    y = env.source("y", "Y0")
    ptr = env.source("ptr", x.link())
    out = env.sp.cell("out")
    node = env.compute(out, [ptr], lambda v: f"<{v}>", declare=False)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert seen == ["<X0>"]
    x.set("X1")
    env.sch.settle()
    assert node.runs == 2
    ptr.set(y.link())  # re-point
    env.sch.settle()
    assert node.runs == 3
    assert seen == ["<X0>", "<X1>", "<Y0>"]
    x.set("X2")  # no longer followed
    env.sch.settle()
    assert node.runs == 3
    y.set("Y1")
    env.sch.settle()
    assert node.runs == 4
    assert seen[-1] == "<Y1>"


def _branch(env: Env, out: Cell, flag: Cell, yes: Cell, no: Cell, *, declare: bool) -> Node:
    """`out` = `yes` if `flag` is odd else `no`; declares all three it may read."""

    def run(tx: Transaction) -> None:
        pick = yes if read_value(tx, flag.link()) % 2 else no
        tx.write(out.doc_key, ("value",), read_value(tx, pick.link()))

    reads = [(c.doc_key, ("value",), False) for c in (flag, yes, no)] if declare else []
    return env.sch.register(
        run,
        identity=env.sp.identity,
        outputs=[(out.doc_key, ("value",))],
        reads=reads,
        label=f"branch {out.id}",
    )


def test_a_conditional_read_of_a_declared_input_sees_a_current_value_first_time(
    env: Env,
) -> None:
    # kairo "unstable": the branch flips on every write. A declared input's writer stays
    # live and ordered first, so the reader never reads a stale value and runs again.
    head = env.source("head", 0)
    double, inverse, out = env.sp.cell("double"), env.sp.cell("inverse"), env.sp.cell("out")
    nd = env.compute(double, [head], lambda h: 2 * h)
    ni = env.compute(inverse, [head], lambda h: -h)
    nb = _branch(env, out, head, double, inverse, declare=True)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert nd.is_live and ni.is_live  # both declared: both kept current
    assert nb.height > max(nd.height, ni.height)
    for h in range(1, 7):
        before = (nd.runs, ni.runs, nb.runs)
        head.set(h)
        env.sch.settle()
        assert (nd.runs, ni.runs, nb.runs) == tuple(r + 1 for r in before), h
        assert seen[-1] == (2 * h if h % 2 else -h)
        env.check()
    assert seen == [0, 2, -2, 6, -4, 10, -6]


def test_without_declared_reads_a_branch_change_costs_one_healing_run(env: Env) -> None:
    # The contrast: undeclared, the unread branch's writer is dormant, so the first run
    # after the flip reads its stale value and the node runs again once it catches up.
    head = env.source("head", 0)
    double, inverse, out = env.sp.cell("double"), env.sp.cell("inverse"), env.sp.cell("out")
    nd = env.compute(double, [head], lambda h: 2 * h)
    env.compute(inverse, [head], lambda h: -h)
    nb = _branch(env, out, head, double, inverse, declare=False)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert seen == [0]
    assert not nd.is_live  # the first run (head even) read inverse only
    runs_before = nb.runs
    head.set(1)  # odd: now reads double, which was dormant and is stale
    env.sch.settle()
    assert nb.runs - runs_before == 2  # one wasted run, healed in the same pass
    assert seen == [0, 2]  # the sink never saw the stale value


def test_a_change_to_a_declared_input_the_last_run_did_not_read_reruns_nothing(
    env: Env,
) -> None:
    flag = env.source("flag", 1)
    yes = env.source("yes", "Y0")
    no = env.source("no", "N0")
    out = env.sp.cell("out")
    node = _branch(env, out, flag, yes, no, declare=True)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert (node.runs, seen) == (1, ["Y0"])
    no.set("N1")  # declared, not read by the last run
    env.sch.settle()
    assert node.runs == 1
    flag.set(2)
    env.sch.settle()
    assert (node.runs, seen) == (2, ["Y0", "N1"])
    yes.set("Y2")
    env.sch.settle()
    assert node.runs == 2
    env.check()


def test_a_writer_registered_after_its_reader_ran_is_ordered_before_a_declared_input(
    env: Env,
) -> None:
    # The reader's last run did not read `x`, so the reader index does not list it
    # under x: the writer registered later still finds it through the declared reads.
    flag = env.source("flag", 0)
    src = env.source("src", 5)
    x, out = env.sp.cell("x"), env.sp.cell("out")
    reader = _branch(env, out, flag, x, flag, declare=True)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert seen == [0]
    writer = env.compute(x, [src], lambda v: v * 100)
    assert writer.is_live  # declared by a live reader
    assert reader.height > writer.height
    env.sch.settle()
    assert writer.runs == 1 and reader.runs == 1
    runs_before = reader.runs
    src.set(6)
    flag.set(1)
    env.sch.settle()
    assert seen[-1] == 600
    assert reader.runs == runs_before + 1  # one run, on a current x
    env.check()
    env.sch.remove(writer)
    env.sch.remove(reader)
    assert env.sch.graph.declared_only == {}
    env.check()


# ---------------------------------------------------------------------------- bounded passes


def test_non_converging_cycle_backs_off_while_the_rest_settles(env: Env) -> None:
    p = env.source("p", 0)
    q = env.source("q", 0)
    n1 = env.compute(q, [p], lambda v: v + 1, label="p->q")
    n2 = env.compute(p, [q], lambda v: v + 1, label="q->p")
    env.sch.sink(p, lambda v: None)
    a = env.source("a", 1)
    b = env.sp.cell("b")
    env.compute(b, [a], lambda v: v * 3)
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    assert seen == [3]
    cycle = (n1, n2)

    expected_delay = BACKOFF_BASE
    delays: list[float] = []
    for round_ in range(7):
        deferred = [n for n in env.sch.deferred() if n in cycle]
        assert deferred, f"round {round_}: the cycle was not deferred"
        now = env.clock.now()
        for n in deferred:
            assert n.backoff_streak >= 1
            assert n.eligible_at - now == pytest.approx(
                min(BACKOFF_BASE * 2 ** (n.backoff_streak - 1), BACKOFF_CAP)
            )
        delay = max(n.eligible_at for n in deferred) - now
        delays.append(delay)
        assert delay == pytest.approx(expected_delay)
        expected_delay = min(expected_delay * 2, BACKOFF_CAP)
        env.check()

        # Unrelated work still settles, and the gated cycle does not run before its time.
        cycle_runs = n1.runs + n2.runs
        a.set(round_ + 10)
        env.sch.settle()
        assert seen[-1] == (round_ + 10) * 3
        assert n1.runs + n2.runs == cycle_runs

        env.clock.advance(delay)
        env.sch.settle()
        assert n1.runs + n2.runs > cycle_runs  # eligible again: it ran
    assert delays[-1] == pytest.approx(BACKOFF_CAP)


def test_a_single_pass_bounds_runs_per_node(env: Env) -> None:
    p = env.source("p", 0)
    q = env.source("q", 0)
    n1 = env.compute(q, [p], lambda v: v + 1)
    n2 = env.compute(p, [q], lambda v: v + 1)
    env.sch.sink(q, lambda v: None)
    assert 1 <= n1.runs <= scheduler.PASS_RUN_BUDGET
    assert 1 <= n2.runs <= scheduler.PASS_RUN_BUDGET
    assert env.sch.stats.deferrals >= 1
    assert env.sch.runnable() == []


# ---------------------------------------------------------------------------- rejections


def _gated_pair(env: Env) -> tuple[Cell, Cell, Node, list[Any]]:
    a = env.source("a", 1)
    b = env.sp.cell("b")
    node = env.compute(b, [a], lambda v: v * 10)
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    env.sp.replica.pump()
    assert seen == [10] and node.runs == 1
    return a, b, node, seen


def _held_index_writing(gate: cells.VerdictGate, key: cells.DocKey) -> int:
    matches = [i for i, h in enumerate(gate.held()) if key in h.request.keys]
    assert len(matches) == 1, gate.held()
    return matches[0]


def test_stale_basis_rejection_reruns_the_node(env: Env) -> None:
    a, b, node, seen = _gated_pair(env)
    gate = env.sp.replica.store.testing.hold_verdicts()
    a.set(2)
    env.sch.settle()
    assert node.runs == 2 and b.get() == 20
    gate.accept(_held_index_writing(gate, a.doc_key))
    gate.reject(_held_index_writing(gate, b.doc_key), cells.Outcome.STALE_BASIS)
    env.sch.settle()
    assert node.runs == 3
    assert env.sch.stats.stale_reruns == 1
    gate.release()
    env.sch.settle()
    assert b.get() == 20
    assert env.sp.replica.in_flight() == 0
    assert seen[-1] == 20
    env.check()


def test_a_drain_sends_its_commits_as_one_batch_and_only_the_stale_one_reruns(env: Env) -> None:
    a = env.source("a", 1)
    x = env.source("x", 1)
    b, y = env.sp.cell("b"), env.sp.cell("y")
    # Another runtime on the same store writes `x` while the drain runs, after the
    # node reading it ran and before the drain's batch reaches the store.
    other = Space(cells.Replica(env.sp.replica.store), "x")
    evaluated: list[int] = []
    store = env.sp.replica.store

    def y_fn(v: int) -> int:
        return v + 100

    def b_fn(v: int) -> int:
        evaluated.append(store.commits_evaluated)
        if v == 2:
            tx = other.edit()
            tx.write(x.doc_key, ("value",), 7)
            tx.commit()
        return v * 10

    ny = env.compute(y, [x], y_fn, label="y")  # runs first: registered first, same height
    nb = env.compute(b, [a], b_fn, label="b")
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    env.sch.sink(y, seen.append)
    assert b.get() == 10 and y.get() == 101
    before = store.commits_evaluated
    a.set(2)
    x.set(3)
    env.sch.settle()
    # `y` committed 103 on a basis the foreign write overtook: rejected at the end of
    # the drain, re-run; `b`'s commit in the same batch is accepted.
    # When `b` ran, the store had seen the two sets only: `y`'s commit was held back.
    assert evaluated[-1] == before + 2
    assert y.get() == 107 and b.get() == 20
    assert nb.runs == 2
    assert ny.runs == 3
    assert env.sch.stats.stale_reruns == 1
    assert env.sp.replica.in_flight() == 0
    assert store.read_durable(y.doc_key) == {"value": 107}
    env.check()


def test_a_two_input_node_overtaken_in_a_drain_is_rejected_and_reruns(env: Env) -> None:
    # The same race as above for a node of two inputs (its run log entry carries two
    # reads): another runtime writes its second input after it ran, before the drain's
    # commits reach the store.
    a = env.source("a", 1)
    z = env.source("z", 1)
    x = env.source("x", 1)
    b, y = env.sp.cell("b"), env.sp.cell("y")
    other = Space(cells.Replica(env.sp.replica.store), "x")

    def y_fn(w: int, v: int) -> int:
        return w + v + 100

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(x.doc_key, ("value",), 7)
            tx.commit()
        return v * 10

    ny = env.compute(y, [z, x], y_fn, label="y")  # runs first: registered first, same height
    nb = env.compute(b, [a], b_fn, label="b")
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    env.sch.sink(y, seen.append)
    assert b.get() == 10 and y.get() == 102
    a.set(2)
    x.set(3)
    env.sch.settle()
    # `y` committed 104 on a basis of `x` the foreign write overtook: rejected at the
    # end of the drain and re-run (not accepted and then re-run by the foreign change).
    assert env.sch.stats.stale_reruns == 1
    assert y.get() == 108 and b.get() == 20
    assert nb.runs == 2
    assert ny.runs == 3
    assert env.sp.replica.in_flight() == 0
    assert env.sp.replica.store.read_durable(y.doc_key) == {"value": 108}
    env.check()


def test_a_commit_refused_locally_reruns_the_node_without_a_settle_callback(env: Env) -> None:
    a = env.source("a", 1)
    b = env.sp.cell("b")
    bumped: list[int] = []

    def fn(v: int) -> int:
        if not bumped:
            # Change `a` under the running node: its own commit fails the local basis
            # check at once (STALE_BASIS inside commit), and the node runs again.
            bumped.append(v)
            tx = env.sp.edit()
            tx.write(a.doc_key, ("value",), 5)
            tx.commit()
        return v * 10

    node = env.compute(b, [a], fn)
    seen: list[Any] = []
    env.sch.sink(b, seen.append)
    assert b.get() == 50
    assert node.runs == 2
    assert env.sch.stats.stale_reruns == 1
    assert node._gates is None  # an accepted or elided commit makes no Gates record
    assert seen == [50]
    env.check()


def test_permanent_rejection_is_not_retried(env: Env) -> None:
    a, b, node, _seen = _gated_pair(env)
    gate = env.sp.replica.store.testing.hold_verdicts()
    a.set(2)
    env.sch.settle()
    assert node.runs == 2
    gate.accept(_held_index_writing(gate, a.doc_key))
    gate.reject(_held_index_writing(gate, b.doc_key), cells.Outcome.PERMANENT)
    env.sch.settle()
    gate.release()
    env.sch.settle()
    assert node.runs == 2
    assert env.sch.stats.stale_reruns == 0
    assert b.get() == 10  # the rejected write was reverted and not retried
    assert env.sch.runnable() == []


# ---------------------------------------------------------------------------- errors


def test_a_raising_node_fails_its_value_and_the_rest_settles(env: Env) -> None:
    a = env.source("a", 1)
    b = env.sp.cell("b")

    def checked(v: int) -> int:
        if v < 0:
            raise ValueError("negative input")
        return v * 2

    bad = env.compute(b, [a], checked, label="the-bad-one")
    x = env.source("x", 1)
    y = env.sp.cell("y")
    env.compute(y, [x], lambda v: v + 100)
    ys: list[Any] = []
    bs: list[Any] = []
    env.sch.sink(b, bs.append)
    env.sch.sink(y, ys.append)
    assert (bs, ys) == ([2], [101])

    a.set(-1)
    x.set(2)
    env.sch.settle()  # raises nothing: the failure belongs to the value, not the caller
    assert isinstance(bad.error, ValueError)
    assert ys == [101, 102]  # the rest of the graph settled in the same settle()
    assert MISSING == b.get()  # absent while failing, not the stale 2
    assert [bad] == env.sch.failing()
    with pytest.raises(NodeError, match="the-bad-one") as info:
        env.sch.pull_now(b)
    assert info.value.node is bad
    assert isinstance(info.value.__cause__, ValueError)
    (record,) = env.sch.errors()
    assert ("computation", "the-bad-one", "x/space/b") == (record.kind, record.source, record.cell)
    env.sch.settle()  # not recorded again: nothing the node read changed since
    assert 1 == len(env.sch.errors()) and bad.error is not None
    env.check()

    runs_before = bad.runs
    a.set(4)
    env.sch.settle()
    assert bad.runs == runs_before + 1
    assert bad.error is None and [] == env.sch.failing()
    assert 8 == env.sch.pull_now(b)
    assert bs[-1] == 8
    env.check()


# ---------------------------------------------------------------------------- provisional demand


def test_child_registered_by_a_live_run_runs_provisionally_then_only_on_demand(env: Env) -> None:
    a = env.source("a", 1)
    k = env.source("k", 5)
    parent_out, child_out = env.sp.cell("parent"), env.sp.cell("child")
    children: list[Node] = []

    def child(tx: Transaction) -> None:
        tx.write(child_out.doc_key, ("value",), read_value(tx, k.link()) * 7)

    def parent(tx: Transaction) -> None:
        tx.write(parent_out.doc_key, ("value",), read_value(tx, a.link()))
        if not children:
            children.append(
                env.sch.register(
                    child,
                    identity=env.sp.identity,
                    outputs=[(child_out.doc_key, ("value",))],
                    label="child",
                )
            )

    pnode = env.sch.register(
        parent,
        identity=env.sp.identity,
        outputs=[(parent_out.doc_key, ("value",))],
        label="parent",
    )
    env.sch.sink(parent_out, lambda v: None)
    assert pnode.runs == 1
    (cnode,) = children
    assert cnode.height > pnode.height  # ordered after the node that registered it
    assert not any(r is pnode for r in gc.get_referents(cnode))  # (and holds no reference)
    assert cnode.runs == 1  # in the same settle()
    assert child_out.get() == 35
    assert not cnode.provisional
    assert not cnode.is_live
    env.check()

    k.set(6)
    env.sch.settle()
    assert cnode.runs == 1  # dormant: nobody reads it
    seen: list[Any] = []
    env.sch.sink(child_out, seen.append)
    assert cnode.runs == 2
    assert seen == [42]


# ---------------------------------------------------------------------------- pull, idle, observe


def test_pull_now_returns_the_settled_value(env: Env) -> None:
    a = env.source("a", 3)
    b, c = env.sp.cell("b"), env.sp.cell("c")
    env.compute(b, [a], lambda v: v + 1)
    env.compute(c, [b], lambda v: v * v)
    assert env.sch.pull_now(c) == 16
    a.set(4)
    assert env.sch.pull_now(c) == 25
    assert env.sch.statistics()["live"] == 0


def test_async_pull_and_idle(env: Env) -> None:
    a = env.source("a", 3)
    b = env.sp.cell("b")
    nb = env.compute(b, [a], lambda v: v - 1)
    seen: list[Any] = []

    async def main() -> None:
        assert await env.sch.pull(b) == 2
        env.sch.sink(b, seen.append)
        a.set(10)
        await env.sch.idle()
        assert not env.sch.busy()
        assert env.sp.replica.in_flight() == 0
        assert env.sch.runnable() == []
        assert seen == [2, 9]
        assert await env.sch.pull(b) == 9

    asyncio.run(main())
    assert nb.runs == 2


def test_observe_delivers_current_value_then_each_settled_change(env: Env) -> None:
    a = env.source("a", 1)
    b = env.sp.cell("b")
    env.compute(b, [a], lambda v: v * 2)
    got: list[Any] = []
    disposable = env.sch.observe(b).subscribe(got.append)
    assert got == [2]
    a.set(2)
    env.sch.settle()
    a.set(2)
    env.sch.settle()
    a.set(3)
    env.sch.settle()
    assert got == [2, 4, 6]
    disposable.dispose()
    a.set(4)
    env.sch.settle()
    assert got == [2, 4, 6]
    assert env.sch.statistics()["live"] == 0


# ---------------------------------------------------------------------------- replicas


def test_a_change_on_another_replica_reruns_the_reader_here() -> None:
    store = cells.MemoryStore()
    sp1, sp2 = Space(store, "x"), Space(store, "x")
    sch1 = Scheduler(sp1.replica, clock=ManualClock())
    sch2 = Scheduler(sp2.replica, clock=ManualClock())
    a1 = sp1.cell("a")
    a1.set(1)
    sp1.replica.pump()
    a2, b2 = sp2.cell("a"), sp2.cell("b")
    notes: list[str] = []
    sp2.replica.subscribe(lambda nf: notes.append(nf.kind))

    def double(tx: Transaction) -> None:
        tx.write(b2.doc_key, ("value",), read_value(tx, a2.link()) * 2)

    node = sch2.register(double, identity=sp2.identity, outputs=[(b2.doc_key, ("value",))])
    seen: list[Any] = []
    sch2.sink(b2, seen.append)
    assert seen == [2] and node.runs == 1

    notes.clear()
    a1.set(7)
    sch1.settle()
    sp2.replica.pump()
    assert "integrate" in notes
    assert node.status == "invalid"
    sch2.settle()
    assert node.runs == 2
    assert seen == [2, 14]
    sch1._check()
    sch2._check()
    sp1.replica._check()
    sp2.replica._check()


# ---------------------------------------------------------------------------- regressions


def test_wake_timer_is_rearmed_on_a_new_event_loop() -> None:
    # Found by review: a timer armed on a loop that closed before it fired blocked
    # every later timer, so deferred work never woke on the next loop.
    sp = Space(cells.MemoryStore(), "x")
    sch = Scheduler(sp.replica, clock=SystemClock())
    p, q = sp.cell("p"), sp.cell("q")

    def plus_one(out: Cell, inp: Cell) -> Node:
        def run(tx: Transaction) -> None:
            v = read_value(tx, inp.link())
            tx.write(out.doc_key, ("value",), (0 if v is MISSING else v) + 1)

        return sch.register(
            run,
            identity=sp.identity,
            outputs=[(out.doc_key, ("value",))],
            reads=[(inp.doc_key, ("value",), False)],
        )

    plus_one(q, p)
    plus_one(p, q)  # a cycle that never converges: it is deferred behind backoff

    async def first() -> None:
        sch.sink(p, lambda v: None)

    asyncio.run(first())
    assert sch.deferred(), "the cycle should be waiting on backoff"

    async def second() -> bool:
        sch.settle()
        timer = sch._timers._timer
        return (
            timer is not None
            and not timer.cancelled()
            and sch._timers._timer_loop is asyncio.get_running_loop()
        )

    assert asyncio.run(second())
    sch.close()


def test_shallow_read_of_a_scalar_sees_its_kind_not_its_value(env: Env) -> None:
    # What a list coordinator relies on: an inline scalar's new value does not re-run a
    # shallow reader of its position; becoming a link or a container does.
    src = env.source("src", {"items": ["a", "b"]})
    out = env.sp.cell("out")

    def kind(tx: Transaction) -> None:
        value = tx.read(src.doc_key, ("value", "items", 0), shallow=True)
        tx.write(out.doc_key, ("value",), type(value).__name__)

    node = env.sch.register(
        kind, identity=env.sp.identity, outputs=[(out.doc_key, ("value",))], label="kind"
    )
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    src.key("items", 0).set("c")  # another str
    env.sch.settle()
    assert node.runs == 1
    src.key("items", 0).set(out.link())  # a link now
    env.sch.settle()
    src.key("items", 0).set({"x": 1})  # a container
    env.sch.settle()
    assert node.runs == 3
    assert seen == ["str", "Link", "dict"]


def test_shallow_read_gets_an_edge_from_a_writer_two_levels_down(env: Env) -> None:
    # A declared output ("value", "k", "sub") creates key "k" under ("value",): a
    # shallow reader of ("value",) must be fed by that writer (demand and order).
    b, keys, src = env.sp.cell("b"), env.sp.cell("keys"), env.sp.cell("src")
    src.set(1)

    def write_sub(tx: Transaction) -> None:
        tx.write(b.doc_key, ("value", "k", "sub"), read_value(tx, src.link()))

    writer = env.sch.register(
        write_sub,
        identity=env.sp.identity,
        outputs=[(b.doc_key, ("value", "k", "sub"))],
        reads=[(src.doc_key, ("value",), False)],
    )

    def list_keys(tx: Transaction) -> None:
        value = tx.read(b.doc_key, ("value",), shallow=True)
        tx.write(keys.doc_key, ("value",), sorted(value) if isinstance(value, dict) else [])

    env.sch.register(
        list_keys,
        identity=env.sp.identity,
        outputs=[(keys.doc_key, ("value",))],
        reads=[(b.doc_key, ("value",), True)],
    )
    seen: list[Any] = []
    env.sch.sink(keys, seen.append)
    assert writer.is_live
    assert seen[-1] == ["k"]


def test_dormant_invalid_nodes_are_not_scanned_by_later_settles(env: Env) -> None:
    # Found by the cellx benchmark: every settle scanned every never-ran dormant
    # node, so building N sinks (each settling) was quadratic.
    src = env.sp.cell("src")
    src.set(0)
    dormant = [
        env.compute(env.sp.cell(f"d{i}"), [src], lambda v: v + 1, declare=True) for i in range(200)
    ]
    env.sch.settle()
    assert all(n.status == "never-ran" and not n.is_live for n in dormant)
    assert not set(dormant) & set(env.sch._candidates)
    out = env.sp.cell("live")
    env.compute(out, [src], lambda v: v * 10, declare=True)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert [0] == seen
    assert not set(dormant) & set(env.sch._candidates)


def test_removing_a_live_reader_of_a_demanded_writer_and_its_reader_keeps_counts(
    env: Env,
) -> None:
    # Found by the cyclic liveness machine: remove() decremented and withdrew writer
    # by writer; a withdraw's region recount already excluded the removed node, so a
    # later decrement counted it twice (a demanded writer ended with live_refs -1).
    # Which writer came first depended on set order, so repeat with fresh graphs.
    for i in range(30):
        s = env.source(f"s{i}", 1)
        a, b, n_out = env.sp.cell(f"a{i}"), env.sp.cell(f"b{i}"), env.sp.cell(f"n{i}")
        node_a = env.compute(a, [s], lambda v: v + 1)
        env.compute(b, [a], lambda v: v * 2)
        release = env.sch.demand(node_a)
        effect = env.sch.register(
            lambda tx: None,
            identity=env.sp.identity,
            kind="effect",
            reads=[(a.doc_key, ("value",), False), (b.doc_key, ("value",), False)],
        )
        del n_out
        env.sch.remove(effect)
        env.sch._check()
        assert 0 == node_a.live_refs
        release()
        env.sch._check()


def test_two_writers_of_one_document_both_feed_its_reader_until_one_is_removed(env: Env) -> None:
    # The writer map holds a lone writer as the node itself and a set only for
    # several: growing to two writers and shrinking back must keep every edge.
    a = env.source("a", 1)
    out = env.sp.cell("out")
    first = env.compute(out, [a], lambda v: v + 1)
    second = env.compute(out, [a], lambda v: v + 1)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    reader = next(n for n in env.sch.graph.nodes if n.kind == "effect")
    assert {first, second} == env.sch.graph.edges_into(reader)
    env.check()
    env.sch.remove(first)
    assert {second} == env.sch.graph.edges_into(reader)
    assert [second] == list(env.sch.graph.writers_of(out.doc_key))
    env.check()
    a.set(5)
    env.sch.settle()
    assert 6 == seen[-1]
    env.sch.remove(second)
    assert [] == list(env.sch.graph.writers_of(out.doc_key))
    env.check()


def test_gate_fields_read_as_zero_and_are_kept_once_set(env: Env) -> None:
    a = env.source("a", 1)
    node = env.compute(env.sp.cell("b"), [a], lambda v: v + 1)
    assert (0.0, 0.0, 0, 0, 0.0) == (
        node.debounce,
        node.throttle,
        node.retries,
        node.backoff_streak,
        node.eligible_at,
    )
    env.sch.set_throttle(node, 2.0)
    node.retries = 3
    assert (2.0, 3) == (node.throttle, node.retries)
    env.sch.set_throttle(node, 0)
    assert (0.0, 0.0) == (node.throttle, node.eligible_at)


def test_a_node_whose_single_read_moves_to_another_document_follows_it(env: Env) -> None:
    # A one-entry read log is compared with the read set, not kept: a run that reads
    # a different document than last time must still move its read set there.
    a, b = env.source("a", 1), env.source("b", 10)
    out = env.sp.cell("out")
    choice = {"cell": a}

    def run(tx: Transaction) -> None:
        tx.write(out.doc_key, ("value",), read_value(tx, choice["cell"].link()))

    env.sch.register(run, identity=env.sp.identity, outputs=[(out.doc_key, ("value",))])
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert 1 == seen[-1]
    choice["cell"] = b
    a.set(2)  # still read from a: this re-run moves the read set to b
    env.sch.settle()
    assert 10 == seen[-1]
    b.set(11)
    env.sch.settle()
    assert 11 == seen[-1]
    before = runs(env.sch)
    a.set(3)  # no longer read
    env.sch.settle()
    assert before == runs(env.sch)


def test_readers_of_one_document_share_one_read_set_until_one_reads_elsewhere(env: Env) -> None:
    # Many nodes reading one document the same way share one read set (and its key):
    # a fan-out of N readers would otherwise hold N equal copies. A reader that then
    # reads something else gets its own, and the others keep reading what they read.
    a, b = env.source("a", 1), env.source("b", 10)
    outs = [env.sp.cell(f"o{i}") for i in range(3)]
    choice = {"cell": a}

    def reader(out: Cell, moves: bool) -> Callable[[Transaction], None]:
        def run(tx: Transaction) -> None:
            src = choice["cell"] if moves else a
            tx.write(out.doc_key, ("value",), read_value(tx, src.link()))

        return run

    nodes = [
        env.sch.register(
            reader(out, moves=i == 0),
            identity=env.sp.identity,
            outputs=[(out.doc_key, ("value",))],
            reads=[(a.doc_key, ("value",), False)],
        )
        for i, out in enumerate(outs)
    ]
    assert nodes[0].reads is nodes[1].reads is nodes[2].reads
    assert all(n.declared is nodes[0].reads for n in nodes)  # one object, not two per node
    seen: list[list[Any]] = [[] for _ in outs]
    for out, got in zip(outs, seen, strict=True):
        env.sch.sink(out, got.append)
    assert nodes[0].reads is nodes[1].reads is nodes[2].reads
    env.check()
    choice["cell"] = b
    a.set(2)
    env.sch.settle()
    assert [[1, 10], [1, 2], [1, 2]] == seen
    assert {b.doc_key: ((("value",),), ())} == dict(nodes[0].reads)
    assert {a.doc_key: ((("value",),), ())} == dict(nodes[1].reads)
    assert nodes[1].reads is nodes[2].reads
    env.check()
    b.set(11)
    a.set(3)
    env.sch.settle()
    assert [[1, 10, 11], [1, 2, 3], [1, 2, 3]] == seen


def test_a_settle_of_many_nodes_leaves_no_big_candidate_table(env: Env) -> None:
    # A dict never shrinks: the candidates of one big settle stayed as a table of
    # that size for the scheduler's life (37 bytes per node at 2000).
    src = env.source("src", 1)
    seen: list[Any] = []
    for i in range(300):
        out = env.sp.cell(f"o{i}")
        env.compute(out, [src], lambda v, i=i: v + i)
        env.sch.sink(out, seen.append)
    src.set(2)
    env.sch.settle()
    assert 600 == len(seen)
    assert not env.sch.runnable()
    assert sys.getsizeof({}) == sys.getsizeof(env.sch._candidates)


def test_a_node_reading_two_documents_keeps_no_log_and_follows_its_reads(env: Env) -> None:
    # Two documents read once each: the read set is checked against the next run's log
    # directly (no log kept). Reads that move (another document, a second path of one
    # document, a third document) re-derive it, and only what was read last re-runs it.
    a, b, c = env.source("a", {"x": 1, "y": 2}), env.source("b", 10), env.source("c", 100)
    out = env.sp.cell("out")
    plan: dict[str, Any] = {"reads": [(a, ("value",)), (b, ("value",))]}

    def run(tx: Transaction) -> None:
        total = []
        for cell, path in plan["reads"]:
            total.append(tx.read(cell.doc_key, path))
        tx.write(out.doc_key, ("value",), repr(total))

    node = env.sch.register(run, identity=env.sp.identity, outputs=[(out.doc_key, ("value",))])
    kept = env.sch.graph.raw_logs.get  # (the last log, where the graph keeps one)
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert type(node.reads) is TwoReads and kept(node) is None
    ran = node.runs
    b.set(11)
    env.sch.settle()
    assert node.runs == ran + 1 and type(node.reads) is TwoReads and kept(node) is None
    c.set(101)  # not read: no run
    env.sch.settle()
    assert node.runs == ran + 1
    plan["reads"] = [(a, ("value", "x")), (c, ("value",))]  # another document, a deeper path
    b.set(12)
    env.sch.settle()
    assert dict(node.reads) == {
        a.doc_key: ((("value", "x"),), ()),
        c.doc_key: ((("value",),), ()),
    }
    assert kept(node) is None
    runs_now = node.runs
    b.set(13)  # no longer read
    env.sch.settle()
    assert node.runs == runs_now
    plan["reads"] = [(a, ("value", "x")), (a, ("value", "y"))]  # one document, two paths
    c.set(102)
    env.sch.settle()
    assert dict(node.reads) == {a.doc_key: ((("value", "x"), ("value", "y")), ())}
    assert kept(node) is not None  # (a two-entry log of one document is kept)
    runs_now = node.runs
    c.set(103)  # no longer read
    env.sch.settle()
    assert node.runs == runs_now
    plan["reads"] = [(a, ("value",)), (b, ("value",)), (c, ("value",))]
    a.set({"x": 5, "y": 2})
    env.sch.settle()
    assert set(node.reads) == {a.doc_key, b.doc_key, c.doc_key} and kept(node) is not None
    plan["reads"] = [(b, ("value",)), (c, ("value",))]
    a.set({"x": 6, "y": 2})
    env.sch.settle()
    assert type(node.reads) is TwoReads and kept(node) is None
    runs_now = node.runs
    a.set({"x": 7, "y": 2})  # no longer read
    env.sch.settle()
    assert node.runs == runs_now
    c.set(104)
    env.sch.settle()
    assert node.runs == runs_now + 1
    assert seen[-1] == repr([13, 104])
    env.check()


def test_a_kept_read_log_is_dropped_when_the_read_set_changes(env: Env) -> None:
    # A node whose run read two paths of one document keeps that log (`Graph.raw_logs`)
    # to see that the next run read the same. A run that reads something else changes
    # the read set, and the kept log goes with it: when a later run reads those two
    # paths again, its read set is re-derived (a stale log would compare equal and
    # leave the node reading the other document, deaf to this one's changes).
    a, b = env.source("a", {"x": 1, "y": 2}), env.source("b", 10)
    out = env.sp.cell("out")
    plan: dict[str, Any] = {"reads": [(a, ("value", "x")), (a, ("value", "y"))]}

    def run(tx: Transaction) -> None:
        tx.write(out.doc_key, ("value",), [tx.read(c.doc_key, p) for c, p in plan["reads"]])

    node = env.sch.register(run, identity=env.sp.identity, outputs=[(out.doc_key, ("value",))])
    seen: list[Any] = []
    env.sch.sink(out, seen.append)
    assert env.sch.graph.raw_logs.get(node) is not None
    plan["reads"] = [(b, ("value",))]
    a.set({"x": 2, "y": 2})
    env.sch.settle()
    assert set(node.reads) == {b.doc_key} and node not in env.sch.graph.raw_logs
    plan["reads"] = [(a, ("value", "x")), (a, ("value", "y"))]
    b.set(11)
    env.sch.settle()
    assert set(node.reads) == {a.doc_key}
    a.set({"x": 3, "y": 2})
    env.sch.settle()
    assert seen[-1] == [3, 2]
    env.sch.remove(node)
    assert node not in env.sch.graph.raw_logs  # (a removed node's log is not kept)


def test_readers_of_one_document_hold_one_key_object(env: Env) -> None:
    # Each run makes its read log's keys anew; a small read set keeps a key object that
    # is already held (its own last or declared read set, another reader's) instead.
    shared = env.source("shared", 1)
    own = [env.source(f"own{i}", i) for i in range(3)]
    outs = [env.sp.cell(f"o{i}") for i in range(3)]
    nodes = [
        env.compute(out, [shared, mine], lambda a, b: a + b, declare=False)
        for out, mine in zip(outs, own, strict=True)
    ]
    for out in outs:
        env.sch.sink(out, lambda _v: None)
    assert all(type(n.reads) is TwoReads for n in nodes)

    def key_of(node: Node, key: Any) -> Any:
        (held,) = [k for k in node.reads if k == key]
        return held

    first = key_of(nodes[0], shared.doc_key)
    assert all(key_of(n, shared.doc_key) is first for n in nodes)
    before = [key_of(n, mine.doc_key) for n, mine in zip(nodes, own, strict=True)]
    shared.set(2)  # every node runs again: same read sets, same key objects
    env.sch.settle()
    assert all(key_of(n, shared.doc_key) is first for n in nodes)
    assert before == [key_of(n, m.doc_key) for n, m in zip(nodes, own, strict=True)]
    assert [outs[i].get() for i in range(3)] == [2, 3, 4]


def test_graph_nodes_are_the_registered_nodes_once_each_in_registration_order(
    env: Env,
) -> None:
    # The graph keeps no table of every node: a node with outputs is found through the
    # writer table (once, though it writes two documents or shares one), an effect in
    # a table of its own; `nodes` puts them back in registration order.
    src = env.source("src", 1)
    a_out, b_out = env.sp.cell("a"), env.sp.cell("b")
    a = env.compute(a_out, [src], lambda v: v + 1)
    env.sch.sink(a_out, lambda _v: None)
    (sink,) = [n for n in env.sch.graph.nodes if n.kind == "effect"]

    def both(tx: Transaction) -> None:
        tx.write(b_out.doc_key, ("value",), 1)
        tx.write(a_out.doc_key, ("other",), 2)

    b = env.sch.register(
        both,
        identity=env.sp.identity,
        outputs=[(b_out.doc_key, ("value",)), (a_out.doc_key, ("other",))],
    )
    d = env.sch.derive(env.sp.cell("d"), [b_out], lambda v: v)
    nodes = env.sch.graph.nodes
    assert [a, sink, b, d] == list(nodes)
    assert 4 == len(nodes)
    assert all(n in nodes for n in (a, sink, b, d))
    assert object() not in nodes
    env.check()
    env.sch.remove(b)
    env.sch.remove(sink)
    assert [a, d] == list(env.sch.graph.nodes)
    assert b not in env.sch.graph.nodes and sink not in env.sch.graph.nodes
    assert 2 == len(env.sch.graph.nodes)


def test_a_small_drain_keeps_its_membership_table_and_a_large_one_drops_it(env: Env) -> None:
    # A drain empties its membership set (`_in_heap`) as it takes nodes off the heap.
    # Clearing the emptied set would free the table the next drain's seeds fill again
    # (a resize per small drain), so a drain of up to `_KEPT_TABLE` nodes keeps it; a
    # larger one drops it, as a set never shrinks otherwise.
    empty = sys.getsizeof(set())

    def fan(name: str, width: int) -> Cell:
        src = env.source(name, 0)
        for i in range(width):
            out = env.sp.cell(f"{name}{i}")
            env.sch.derive(out, [src], lambda v: v + 1)
            env.sch.sink(out, lambda v: None)
        env.sch.settle()
        return src

    small = fan("small", 10)
    small.set(1)
    env.sch.settle()
    assert not env.sch._in_heap
    assert sys.getsizeof(env.sch._in_heap) > empty
    large = fan("large", 100)
    large.set(1)
    env.sch.settle()
    assert not env.sch._in_heap
    assert sys.getsizeof(env.sch._in_heap) == empty
    env.check()

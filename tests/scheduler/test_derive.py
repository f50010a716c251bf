"""`Scheduler.derive`: the shorthand for a computation `out = fn(*input values)`."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import cells
from cells import Cell, CellweaveError, DocKey, Link, Space
from scheduler import NodeError, Scheduler
from scheduler._readers import _Alike


def test_derive_computes_from_its_inputs_and_follows_them(sp: Space, sch: Scheduler) -> None:
    a, b, total = sp.cell("a"), sp.cell("b"), sp.cell("total")
    a.set(1)
    b.set(2)
    node = sch.derive(total, [a, b], lambda x, y: x + y)
    sch.settle()
    assert node.runs == 0  # dormant: nothing reads `total` yet
    seen: list[Any] = []
    sch.sink(total, seen.append)
    assert seen == [3] and node.runs == 1
    a.set(10)
    sch.settle()
    assert seen == [3, 12] and node.runs == 2
    b.set(2)  # an equal write changes nothing
    sch.settle()
    assert node.runs == 2


def test_a_chain_of_derives_runs_each_once_per_change(sp: Space, sch: Scheduler) -> None:
    src = sp.cell("src")
    src.set(0)
    prev, nodes = src, []
    for i in range(50):
        out = sp.cell(f"c{i}")
        nodes.append(sch.derive(out, [prev], lambda v: v + 1))
        prev = out
    seen: list[Any] = []
    sch.sink(prev, seen.append)
    src.set(5)
    sch.settle()
    assert seen == [50, 55]
    assert all(n.runs == 2 for n in nodes)


def test_derive_gives_none_for_an_absent_input_and_a_copy_of_a_container(
    sp: Space, sch: Scheduler
) -> None:
    items, missing, out = sp.cell("items"), sp.cell("missing"), sp.cell("out")
    items.set([1, 2])

    def f(xs: list[int], absent: Any) -> Any:
        xs.append(99)  # the function's own copy: the stored list does not change
        return {"n": len(xs), "absent": absent}

    sch.derive(out, [items, missing], f)
    assert sch.pull_now(out) == {"n": 3, "absent": None}
    assert items.get() == [1, 2]


def test_derive_writes_at_the_output_cells_path(sp: Space, sch: Scheduler) -> None:
    src, doc = sp.cell("src"), sp.cell("doc")
    src.set(4)
    doc.set({"keep": True})
    sch.derive(doc.key("sq"), [src], lambda v: v * v)
    assert sch.pull_now(doc) == {"keep": True, "sq": 16}


def test_a_raising_function_is_a_node_error_and_heals_when_its_input_does(
    sp: Space, sch: Scheduler
) -> None:
    src, out = sp.cell("src"), sp.cell("out")
    src.set(0)
    sch.derive(out, [src], lambda v: 10 // v)
    seen: list[Any] = []
    sch.sink(out, seen.append)  # a failure is not the sink's: it is recorded, not raised
    assert ["derive"] == [e.source for e in sch.errors()]
    with pytest.raises(NodeError, match="ZeroDivisionError") as info:
        sch.pull_now(out)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    src.set(5)
    sch.settle()
    assert seen[-1] == 2


def test_derive_refuses_bad_arguments_and_registers_nothing(sp: Space, sch: Scheduler) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    other = Space(sp.replica, "d", principal="bob").cell("b")
    with pytest.raises(CellweaveError, match="out must be a Cell"):
        sch.derive("out", [a], abs)  # type: ignore[arg-type]
    with pytest.raises(CellweaveError, match="inputs must be a sequence of Cells"):
        sch.derive(out, a, abs)  # type: ignore[arg-type]
    with pytest.raises(CellweaveError, match=r"inputs\[1\] is not a Cell: 3"):
        sch.derive(out, [a, 3], abs)  # type: ignore[list-item]
    with pytest.raises(CellweaveError, match="fn must be callable"):
        sch.derive(out, [a], 42)  # type: ignore[arg-type]
    with pytest.raises(CellweaveError, match=r"inputs\[0\] .* belongs to identity"):
        sch.derive(out, [other], abs)
    assert not sch.graph.nodes


def test_a_settled_graph_leaves_no_revision_history_in_the_store(sp: Space, sch: Scheduler) -> None:
    # Issue 20 item 2: memory per node stays flat however often it runs. The runtime is
    # the store's only session, so once a settle has processed every verdict no commit
    # can need a revision any more (its low-water mark): the store keeps none but the
    # few added since its last prune (it prunes once per PRUNE_BATCH revisions).
    from cells.stores.memory import PRUNE_BATCH

    store = sp.replica.store
    assert isinstance(store, cells.MemoryStore)
    src = sp.cell("src")
    src.set(0)
    outs = [sp.cell(f"out{i}") for i in range(20)]
    for i, out in enumerate(outs):
        sch.derive(out, [src], lambda v, i=i: v + i)
        sch.sink(out, lambda _v: None)
    for k in range(1, 6):
        src.set(k)
        sch.settle()
        assert 5 + k == outs[5].get()
        kept = [
            r
            for revs in store._revisions.values()
            for r in (revs if isinstance(revs, list) else [revs])
        ]
        assert len(kept) < PRUNE_BATCH
    assert 6 * 21 == store.seq  # (every run committed: 126 revisions were made)
    assert len(kept) == store.prune_history()  # (none of them is needed either)
    assert {} == store._revisions


# ----------------------------------------------------------------------------- direct runs
# A derive of one input whose last run read one plain value commits with no transaction
# (`Replica.run_field`): these pin that the shortcut is taken, and that it keeps every
# guarantee of the transaction run (the basis check, the store's verdict and revert,
# links, values that need normalising, failures).


def test_a_derive_of_a_plain_value_commits_without_a_transaction(sp: Space, sch: Scheduler) -> None:
    src = sp.cell("src")
    src.set(0)
    prev, outs = src, []
    for i in range(3):
        out = sp.cell(f"c{i}")
        sch.derive(out, [prev], lambda v: v + 1)
        outs.append(out)
        prev = out
    seen: list[Any] = []
    sch.sink(prev, seen.append)
    direct, commits = sch.stats.direct_commits, sch.stats.commits
    for v in (1, 2, 3):
        src.set(v)
        sch.settle()
    assert [3, 4, 5, 6] == seen
    # Nine runs, nine commits, every one with no transaction.
    assert (9, 9) == (sch.stats.direct_commits - direct, sch.stats.commits - commits)
    sp.replica.pump()
    assert {"value": 6} == sp.replica.store.read_durable(outs[-1].doc_key)
    assert 0 == sp.replica.in_flight()


def test_a_direct_derive_overtaken_by_a_foreign_commit_is_rejected_and_reruns(
    sp: Space, sch: Scheduler
) -> None:
    # Another runtime writes the input of `y` after `y` ran directly, before the drain's
    # commits reach the store: the store must reject `y`'s commit (its basis is gone),
    # the replica revert it, and `y` run again on the foreign value.
    x, a = sp.cell("x"), sp.cell("a")
    x.set(1)
    a.set(1)
    y, b = sp.cell("y"), sp.cell("b")
    other = Space(cells.Replica(sp.replica.store), "d")

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(x.doc_key, ("value",), 7)
            tx.commit()
        return v * 10

    ny = sch.derive(y, [x], lambda v: v + 100)  # runs first: registered first, same height
    nb = sch.derive(b, [a], b_fn)
    # `z` reads `y`'s commit while it is pending: built on a rejected commit, its own
    # must be rejected too (its run log entry depends on `y`'s), not accepted.
    z = sp.cell("z")
    nz = sch.derive(z, [y], lambda v: v * 2)
    seen: list[Any] = []
    sch.sink(z, seen.append)
    sch.sink(b, seen.append)
    assert 202 == z.get()
    direct = sch.stats.direct_commits
    x.set(3)
    a.set(2)
    sch.settle()
    assert sch.stats.direct_commits - direct >= 3  # `y`, `b`, `z` ran with no transaction
    assert 2 == sch.stats.stale_reruns  # `y` overtaken, `z` on `y`'s rejected commit
    assert (107, 20, 214) == (y.get(), b.get(), z.get())
    assert (3, 2, 3) == (ny.runs, nb.runs, nz.runs)
    assert 0 == sp.replica.in_flight()
    assert {"value": 214} == sp.replica.store.read_durable(z.doc_key)


def test_a_direct_derive_whose_input_moves_while_it_computes_reruns(
    sp: Space, sch: Scheduler
) -> None:
    a, b = sp.cell("a"), sp.cell("b")
    a.set(1)
    bumped: list[int] = []

    def fn(v: int) -> int:
        if v == 2 and not bumped:
            # Change `a` under the running node: its commit must not be made on the
            # value it read (the basis moved), and the node runs again.
            bumped.append(v)
            tx = sp.edit()
            tx.write(a.doc_key, ("value",), 5)
            tx.commit()
        return v * 10

    node = sch.derive(b, [a], fn)
    seen: list[Any] = []
    sch.sink(b, seen.append)
    a.set(2)
    sch.settle()
    assert 50 == b.get()
    assert [10, 50] == seen
    assert 3 == node.runs
    assert 1 == sch.stats.stale_reruns
    sp.replica.pump()
    assert {"value": 50} == sp.replica.store.read_durable(b.doc_key)


def test_a_direct_derive_follows_a_link_that_appears_at_its_input(
    sp: Space, sch: Scheduler
) -> None:
    a, target, out = sp.cell("a"), sp.cell("t"), sp.cell("out")
    a.set(1)
    target.set(40)
    sch.derive(out, [a], lambda v: v + 1)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    a.set(target.link())
    sch.settle()
    target.set(50)  # read through the link now: the node must hear it
    sch.settle()
    a.set(3)  # plain again
    sch.settle()
    direct = sch.stats.direct_commits
    target.set(60)  # no longer read
    a.set(4)
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert [2, 41, 51, 4, 5] == seen


@pytest.mark.parametrize("held", ["key", "link"])
def test_a_derive_keeps_its_input_cell_s_place_and_runs_alike_over_either(
    sp: Space, sch: Scheduler, held: str
) -> None:
    # A cell of a whole shared document holds its key (`Cell.place`): a derive over it
    # keeps that key as its input (no link made per node); over a cell holding a link,
    # the link. Either runs directly, hears a link that appears at its input and follows
    # it, and runs directly again once the input is plain.
    def cell(name: str) -> Cell:
        made = sp.cell(name)
        return made if held == "key" else Cell(sp.replica, sp.identity, made.link())

    a, target, out = cell("a"), cell("t"), cell("out")
    a.set(1)
    target.set(40)
    node = sch.derive(out, [a], lambda v: v + 1)
    assert node.inputs is a.place()  # type: ignore[attr-defined]
    assert type(a.place()) is (DocKey if held == "key" else Link)
    join = sch.derive(cell("sum"), [a, out], lambda x, y: x + y)
    assert join.inputs[0] is a.place()  # type: ignore[attr-defined]
    seen: list[Any] = []
    sch.sink(out, seen.append)
    sch.sink(cell("sum"), seen.append)
    a.set(2)
    sch.settle()
    direct = sch.stats.direct_commits
    a.set(target.link())
    sch.settle()
    target.set(50)  # read through the link now: the node must hear it
    sch.settle()
    a.set(3)  # plain again
    sch.settle()
    a.set(4)
    sch.settle()
    assert [2, 3, 3, 5, 41, 81, 51, 101, 4, 7, 5, 9] == seen
    assert 4 == sch.stats.direct_commits - direct


def test_a_direct_derive_hands_values_to_normalise_to_a_transaction(
    sp: Space, sch: Scheduler
) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(1)
    results: dict[int, Any] = {2: 2.5, 3: {"n": 3}, 4: (4, 5), 5: "é", 6: True}
    calls: list[int] = []

    def f(v: int) -> Any:
        calls.append(v)
        return results.get(v, v)

    node = sch.derive(out, [a], f)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    for v in (2, 3, 4, 5, 6, 7):
        a.set(v)
        sch.settle()
    assert [1, 2.5, {"n": 3}, [4, 5], "é", True, 7] == seen
    assert 1 == sch.stats.direct_commits - direct  # only 7: the others were normalised
    # One call of the function per run: the transaction writes what it computed.
    assert ([1, 2, 3, 4, 5, 6, 7], 7) == (calls, node.runs)
    bad = sp.cell("bad")
    sch.derive(bad, [a], lambda v: object() if v == 8 else v)
    sch.sink(bad, seen.append)
    a.set(8)
    sch.settle()
    assert ["derive"] == [e.source for e in sch.errors()]
    with pytest.raises(NodeError, match="InvalidValueError"):
        sch.pull_now(bad)


def test_a_direct_derive_that_raises_is_a_node_error_and_heals(sp: Space, sch: Scheduler) -> None:
    src, out = sp.cell("src"), sp.cell("out")
    src.set(5)
    sch.derive(out, [src], lambda v: 10 // v)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    src.set(0)
    sch.settle()
    assert ["derive"] == [e.source for e in sch.errors()]
    assert [2, None] == seen  # (its output cleared, as after a transaction run's failure)
    src.set(10)
    sch.settle()
    assert [2, None, 1] == seen
    assert 1 == sch.pull_now(out)  # healed: no error raised


def test_a_direct_derive_keeps_its_replica_busy_while_it_computes(
    sp: Space, sch: Scheduler
) -> None:
    # Its basis is taken before the function runs: the store must keep the history a
    # conflict check of it can need (`low_water`), as for an open transaction. With
    # nothing in flight and no transaction open, the replica looked quiet (None).
    a, b = sp.cell("a"), sp.cell("b")
    a.set(1)
    marks: list[Any] = []

    def fn(v: int) -> int:
        marks.append((sp.replica.low_water(), sp.replica.in_flight()))
        return v + 1

    sch.derive(b, [a], fn)
    sch.sink(b, lambda _v: None)
    direct = sch.stats.direct_commits
    a.set(2)
    sp.replica.pump()  # its verdict in: nothing in flight when the node runs
    store = sp.replica.store
    assert isinstance(store, cells.MemoryStore)  # (the fixture's: `seq` is its newest seq)
    seq = store.seq
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert (seq, 0) == marks[-1]
    assert sp.replica.low_water() is None  # quiet again once its verdict is in


def test_a_direct_derive_s_write_equal_to_a_pending_value_survives_its_failure(
    sp: Space, sch: Scheduler
) -> None:
    # The node computes the value a pending commit of its output already shows: its
    # write must be sent (a shadow write), not elided, or it is lost when that pending
    # commit is rejected.
    a, out = sp.cell("a"), sp.cell("out")
    a.set(1)
    sch.derive(out, [a], lambda v: 2 if v > 1 else v)
    sch.sink(out, lambda _v: None)
    assert 1 == out.get()
    store = sp.replica.store
    with store.testing.hold_verdicts() as gate:
        out.set(2)  # pending: the node will compute the same value
        a.set(5)
        sch.settle()
        assert 3 == gate.waiting()  # the write, the input and the node's shadow write
        gate.reject(0, cells.Outcome.PERMANENT)
        gate.accept(0)
        gate.accept(0)
        sp.replica.pump()
    sch.settle()
    assert 2 == out.get()
    assert {"value": 2} == store.read_durable(out.doc_key)


def test_a_direct_derive_of_a_container_gets_its_own_copy(sp: Space, sch: Scheduler) -> None:
    mux, flag, out = sp.cell("mux"), sp.cell("flag"), sp.cell("out")
    mux.set({"a": 1, "b": [1, 2]})
    flag.set(0)

    def f(m: dict[str, Any], k: int) -> int:
        total: int = m["a"] + sum(m["b"]) + k
        m["a"] = 100  # the function's own copy: nothing stored changes
        m["b"].append(7)
        return total

    node = sch.derive(out, [mux, flag], f)
    one = sch.derive(sp.cell("one"), [mux], lambda m: m.pop("a"))
    seen: list[Any] = []
    sch.sink(out, seen.append)
    sch.sink(sp.cell("one"), seen.append)
    direct = sch.stats.direct_commits
    mux.set({"a": 2, "b": [1, 2]})
    sch.settle()
    flag.set(1)
    sch.settle()
    # Three runs (`out` twice, `one` once), each with no transaction.
    assert 3 == sch.stats.direct_commits - direct
    assert [4, 1, 5, 2, 6] == seen and (3, 2) == (node.runs, one.runs)
    assert {"a": 2, "b": [1, 2]} == mux.get()
    sp.replica.pump()
    assert {"value": {"a": 2, "b": [1, 2]}} == sp.replica.store.read_durable(mux.doc_key)


def test_a_direct_derive_of_a_container_that_gains_a_link_follows_it(
    sp: Space, sch: Scheduler
) -> None:
    mux, target, out = sp.cell("mux"), sp.cell("t"), sp.cell("out")
    mux.set({"a": 1, "in": [2]})
    target.set(40)
    sch.derive(out, [mux], lambda m: m["a"] + sum(m["in"]))
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    mux.set({"a": 1, "in": [target.link()]})  # a link deep inside: the transaction's
    sch.settle()
    assert 0 == sch.stats.direct_commits - direct
    target.set(50)  # read through the link now: the node must hear it
    sch.settle()
    assert 0 == sch.stats.direct_commits - direct
    mux.set({"a": 1, "in": [3]})  # plain again
    sch.settle()
    direct = sch.stats.direct_commits
    target.set(60)  # no longer read
    mux.set({"a": 2, "in": [3]})
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert [3, 41, 51, 4, 5] == seen


def test_a_direct_derive_of_a_long_flat_container_gets_its_own_copy_and_sees_a_link(
    sp: Space, sch: Scheduler
) -> None:
    # A container of many scalars (`kairo mux`: a dict of 100 ints) is copied for the
    # function in one step; the copy is still its own, and a link among the items (last,
    # after every scalar) still makes the run the transaction's, which follows it.
    wide, items, target = sp.cell("wide"), sp.cell("items"), sp.cell("t")
    flat = {str(k): k for k in range(20)}
    wide.set(flat)
    items.set(list(range(20)))
    target.set(1000)

    def total(m: dict[str, int], xs: list[int]) -> int:
        m["0"] = 500  # the function's own copies: nothing stored changes
        xs.append(7)
        return sum(m.values()) + sum(xs)

    out = sp.cell("out")
    sch.derive(out, [wide, items], total)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    direct = sch.stats.direct_commits
    wide.set({**flat, "19": 20})
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert [887, 888] == seen  # 500 + 190 + 190 + 7, then "19" is 20
    assert {**flat, "19": 20} == wide.get() and list(range(20)) == items.get()
    items.set([*range(19), target.link()])  # a link after 19 ints: the transaction's
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert 1869 == seen[-1]  # the dict's 691, and 171 + 1000 (followed) + 7
    sp.replica.pump()
    assert {"value": {**flat, "19": 20}} == sp.replica.store.read_durable(wide.doc_key)


def test_a_direct_derive_of_a_container_overtaken_by_a_foreign_commit_reruns(
    sp: Space, sch: Scheduler
) -> None:
    # As for a plain input: another runtime changes the container `y` read after `y`
    # ran directly, before the drain's commits reach the store: the store rejects `y`'s
    # commit and `y` runs again on the foreign value.
    x, a = sp.cell("x"), sp.cell("a")
    x.set({"k": 1})
    a.set(1)
    y, b = sp.cell("y"), sp.cell("b")
    other = Space(cells.Replica(sp.replica.store), "d")

    def b_fn(v: int) -> int:
        if v == 2:
            tx = other.edit()
            tx.write(x.doc_key, ("value", "k"), 7)
            tx.commit()
        return v * 10

    ny = sch.derive(y, [x], lambda m: m["k"] + 100)  # runs first: registered first
    nb = sch.derive(b, [a], b_fn)
    seen: list[Any] = []
    sch.sink(y, seen.append)
    sch.sink(b, seen.append)
    direct = sch.stats.direct_commits
    x.set({"k": 3})
    a.set(2)
    sch.settle()
    assert sch.stats.direct_commits - direct >= 2  # `y`, `b` ran with no transaction
    assert 1 == sch.stats.stale_reruns  # `y` overtaken
    assert (107, 20) == (y.get(), b.get())
    assert (3, 2) == (ny.runs, nb.runs)
    sp.replica.pump()
    assert 0 == sp.replica.in_flight()
    assert {"value": 107} == sp.replica.store.read_durable(y.doc_key)


def test_a_direct_derive_s_kept_plan_goes_with_its_read_set(sp: Space, sch: Scheduler) -> None:
    # A direct derive keeps its checked places (`FieldPlan`) for its read set object; a
    # new read set that is not exactly its inputs' places runs it in a transaction.
    a, b, extra, total = sp.cell("a"), sp.cell("b"), sp.cell("extra"), sp.cell("total")
    a.set(1)
    b.set(2)
    extra.set(0)
    node = sch.derive(total, [a, b], lambda x, y: x + y)
    seen: list[Any] = []
    sch.sink(total, seen.append)
    a.set(10)
    sch.settle()
    direct = sch.stats.direct_commits
    a.set(20)  # through the kept plan
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (22, 1)
    reads = dict(node.reads)
    reads[extra.doc_key] = ((("value",),), ())
    sch.graph.set_reads(node, reads)  # (as a run that read `extra` too would leave it)
    a.set(30)
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (32, 1)  # a transaction run
    a.set(40)  # it read its inputs alone again: direct from then on
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (42, 2)


def test_a_direct_derive_s_plan_goes_when_its_read_set_changes_in_place(
    sp: Space, sch: Scheduler
) -> None:
    # A read set of three or more documents changes in place (`Graph.replace_reads`): the
    # same object, so the kept plan must be dropped with it.
    a, b, c, extra, total = (sp.cell(n) for n in ("a", "b", "c", "extra", "total"))
    for cell in (a, b, c, extra):
        cell.set(1)
    node = sch.derive(total, [a, b, c], lambda x, y, z: x + y + z)
    seen: list[Any] = []
    sch.sink(total, seen.append)
    # A read set object of its own (not `declared`, which is copied instead): one that
    # also reads `extra`, then the transaction run's own.
    sch.graph.set_reads(node, {**node.reads, extra.doc_key: ((("value",),), ())})
    a.set(10)
    sch.settle()
    assert node.reads is not node.declared
    direct = sch.stats.direct_commits
    a.set(15)  # through the plan kept for that object
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (17, 1)
    before = node.reads
    sch.graph.replace_reads(node, {extra.doc_key: ((("value",),), ())})
    assert node.reads is before  # (changed in place)
    a.set(20)
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (22, 1)  # a transaction run
    a.set(30)
    sch.settle()
    assert (seen[-1], sch.stats.direct_commits - direct) == (32, 2)


def test_readers_alike_of_a_derive_follow_its_moves_read_set_changes_and_foreign_commits(
    sp: Space, sch: Scheduler
) -> None:
    # `mid`'s document is read whole by three readers (two derives and a node that
    # reads it or another cell): the reader index holds them as one `_Alike`, and each
    # direct commit of `mid` hands them over with no comparison (`match_moved`). A
    # reader whose read set leaves `mid`, a removed reader, and a foreign commit that
    # replaces `mid`'s document (compared as any integrated change) are followed.
    src, mid, flag, spare = sp.cell("src"), sp.cell("mid"), sp.cell("flag"), sp.cell("spare")
    src.set(1)
    flag.set(True)
    spare.set(0)
    nm = sch.derive(mid, [src], lambda v: v + 1)
    r1, r2, r3 = sp.cell("r1"), sp.cell("r2"), sp.cell("r3")
    n1 = sch.derive(r1, [mid], lambda v: v * 2)
    n2 = sch.derive(r2, [mid], lambda v: v * 3)

    def pick(tx: cells.Transaction) -> None:
        chosen = mid if cells.read_value(tx, flag.link()) else spare
        tx.write(r3.doc_key, ("value",), cells.read_value(tx, chosen.link()))

    n3 = sch.register(pick, identity=sp.identity, outputs=[(r3.doc_key, ("value",))])
    seen: list[Any] = []
    for out in (r1, r2, r3):
        sch.sink(out, seen.append)
    assert (4, 6, 2) == (r1.get(), r2.get(), r3.get())
    held = sch.index.deep[mid.doc_key]
    assert isinstance(held, _Alike) and {n1, n2, n3} == set(held.nodes)

    def runs() -> tuple[int, ...]:
        return (nm.runs, n1.runs, n2.runs, n3.runs)

    assert (1, 1, 1, 1) == runs()
    src.set(5)
    sch.settle()
    assert (6, 12, 18, 6) == (mid.get(), r1.get(), r2.get(), r3.get())
    assert (2, 2, 2, 2) == runs()
    # `pick` reads `spare` from now on: a move of `mid` no longer runs it.
    flag.set(False)
    sch.settle()
    assert (2, 2, 2, 3) == runs() and 0 == r3.get()
    src.set(7)
    sch.settle()
    assert (3, 3, 3, 3) == runs() and (16, 24) == (r1.get(), r2.get())
    # A foreign commit replacing `mid`'s document: its readers run on its value ...
    other = Space(cells.Replica(sp.replica.store), "d")
    tx = other.edit()
    tx.write(mid.doc_key, (), {"value": 100})
    tx.commit()
    other.replica.pump()
    sp.replica.sync([mid.doc_key])
    sch.settle()
    assert (3, 4, 4, 3) == runs() and (200, 300) == (r1.get(), r2.get())
    # ... and not when the value they read stays (another field of it changed).
    tx = other.edit()
    tx.write(mid.doc_key, (), {"value": 100, "note": "x"})
    tx.commit()
    other.replica.pump()
    sp.replica.sync([mid.doc_key])
    sch.settle()
    assert (3, 4, 4, 3) == runs()
    # A removed reader is not run; the one left is run alone.
    sch.remove(n2)
    src.set(9)
    sch.settle()
    assert (4, 5, 4, 3) == runs() and 20 == r1.get()


@pytest.mark.parametrize(("width", "moved"), [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2)])
def test_a_direct_join_whose_input_moves_while_it_computes_through_its_plan_reruns(
    sp: Space, sch: Scheduler, width: int, moved: int
) -> None:
    # A join of whole cells runs through its kept plan (`FieldPlan.pairs`: two inputs
    # written out, more in a loop); any one of its inputs changed under the running
    # function makes the run stale: its commit is not made, and the node runs again.
    ins = [sp.cell(f"in{i}") for i in range(width)]
    for cell in ins:
        cell.set(1)
    bumped: list[int] = []

    def fn(*vs: int) -> int:
        if vs[0] == 3 and not bumped:
            bumped.append(1)
            tx = sp.edit()
            tx.write(ins[moved].doc_key, ("value",), 10 + vs[moved])
            tx.commit()
        return sum(vs)

    out = sp.cell("out")
    node = sch.derive(out, ins, fn)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    ins[0].set(2)
    sch.settle()  # a direct run, which keeps the plan
    plan = node.fn.plan  # type: ignore[attr-defined]
    assert plan is not None and plan.pairs is not None
    runs, stale = node.runs, sch.stats.stale_reruns
    ins[0].set(3)
    sch.settle()
    assert [width, width + 1, width + 12] == seen  # (the moved input is 10 more)
    assert (2, 1) == (node.runs - runs, sch.stats.stale_reruns - stale)
    sp.replica.pump()
    assert {"value": seen[-1]} == sp.replica.store.read_durable(out.doc_key)


@pytest.mark.parametrize("at", [0, 2])
def test_a_direct_join_of_three_through_its_plan_gets_its_own_copy_of_a_container(
    sp: Space, sch: Scheduler, at: int
) -> None:
    # A container input of a join of three, read through its kept plan: the function
    # gets its own copy (nothing stored changes when it changes it), and a link inside
    # makes the run the transaction's, which follows it.
    ins = [sp.cell(f"in{i}") for i in range(3)]
    target = sp.cell("t")
    target.set(100)
    for i, cell in enumerate(ins):
        cell.set([1, 2] if i == at else 1)

    def fn(*vs: Any) -> int:
        box = vs[at]
        total: int = sum(box) + sum(v for i, v in enumerate(vs) if i != at)
        box.append(7)  # the function's own copy
        return total

    out = sp.cell("out")
    node = sch.derive(out, ins, fn)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    other = ins[1 if at == 0 else 0]
    other.set(2)
    sch.settle()  # a direct run, which keeps the plan
    assert node.fn.plan is not None  # type: ignore[attr-defined]
    direct = sch.stats.direct_commits
    other.set(3)
    sch.settle()
    assert [5, 6, 7] == seen
    assert 1 == sch.stats.direct_commits - direct
    assert [1, 2] == ins[at].get()
    ins[at].set([1, target.link()])  # a link inside: the transaction's
    sch.settle()
    assert 1 == sch.stats.direct_commits - direct
    assert 105 == seen[-1]
    sp.replica.pump()
    assert {"value": [1, target.link()]} == sp.replica.store.read_durable(ins[at].doc_key)


def test_a_derive_node_and_a_sink_hold_no_label_of_their_own(sp: Space, sch: Scheduler) -> None:
    # Neither keeps a label string: their classes say it (a derive: "derive", a sink
    # names itself), a label given to `derive` goes with its function. No slot for one
    # (8 bytes a node); each still says its label, and a labelled derive runs as any.
    a, b = sp.cell("a"), sp.cell("b")
    a.set(1)
    b.set(2)
    usual = sch.derive(sp.cell("usual"), [a], lambda x: x + 1)
    labelled = sch.derive(sp.cell("labelled"), [a, b], lambda x, y: x + y, label="sum")
    assert ("derive", "sum") == (usual.label, labelled.label)
    assert "'sum'" in repr(labelled) and "'derive'" in repr(usual)
    cancel = sch.sink(sp.cell("labelled"), lambda _v: None)
    sink = cancel.__self__  # type: ignore[attr-defined]
    assert f"sink {sp.cell('labelled').link()}" == sink.label
    for node in (usual, labelled, sink):
        slots = {s for t in type(node).__mro__ for s in getattr(t, "__slots__", ())}
        assert "_label" not in slots, type(node)
    assert sys.getsizeof(usual) == sys.getsizeof(labelled) == sys.getsizeof(object()) + 16 + 21 * 8
    assert [2, 3] == [sch.pull_now(sp.cell(n)) for n in ("usual", "labelled")]
    a.set(5)
    sch.settle()
    assert [6, 7] == [sch.pull_now(sp.cell(n)) for n in ("usual", "labelled")]


def test_a_join_s_read_set_and_kept_plan_hold_the_replica_s_key_objects(
    sp: Space, sch: Scheduler
) -> None:
    # A join of three or more documents keeps, in its read set (a dict) and in its kept
    # plan, the key objects the replica holds (`Replica.held_key`), not the equal copies
    # its links made: every update looks its documents up by them (the reader index,
    # the records, the store's heads), and a copy is compared field by field each time.
    a, b, c, total = (sp.cell(n) for n in ("a", "b", "c", "total"))
    for cell in (a, b, c):
        cell.set(1)
    node = sch.derive(total, [a, b, c], lambda x, y, z: x + y + z)
    seen: list[Any] = []
    sch.sink(total, seen.append)
    a.set(2)  # a direct run: the plan is made
    sch.settle()
    a.set(3)  # through the plan
    sch.settle()
    assert seen[-1] == 5
    held = sp.replica.held_key
    reads = node.reads
    assert type(reads) is dict and len(reads) == 3
    assert all(key is held(key) for key in reads)
    plan = node.fn.plan  # type: ignore[attr-defined]
    assert plan is not None and plan.tag is reads
    assert all(key is held(key) for key, _ in plan.places)
    assert [key for key, _ in plan.places] == [cell.doc_key for cell in (a, b, c)]

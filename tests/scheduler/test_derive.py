"""`Scheduler.derive`: the shorthand for a computation `out = fn(*input values)`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import cells
from cells import CellweaveError, Space
from scheduler import ManualClock, NodeError, Scheduler


@pytest.fixture
def sp() -> Space:
    return Space(cells.MemoryStore(), "d")


@pytest.fixture
def sch(sp: Space) -> Iterator[Scheduler]:
    s = Scheduler(sp.replica, clock=ManualClock())
    yield s
    s._check()
    sp.replica._check()


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

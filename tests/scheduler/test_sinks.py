"""Sinks: a sink's node is labelled by its sink ("sink <link>", "patches <link>")
without holding a string of its own, and a sink holds a materializer only while its
value has links to keep."""

from __future__ import annotations

from cells import MemoryStore, Space
from scheduler import Scheduler
from scheduler._sinks import Sink


def test_a_sink_node_is_labelled_by_the_place_it_reads() -> None:
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell, other = space.cell("a"), space.cell("b")
    cell.set(1)
    sch.sink(cell, lambda _v: None)
    sch.sink_patches(other, lambda _ops: None)
    out = space.cell("out")
    sch.derive(out, [cell], lambda v: v, label="copy")
    labels = sorted(n.label for n in sch.graph.nodes)
    assert labels == sorted(["copy", f"sink {cell.link()}", f"patches {other.link()}"])
    (sink_node,) = [n for n in sch.graph.nodes if n.label.startswith("sink ")]
    assert f"sink {cell.link()}" in repr(sink_node)
    sch.close()


def test_a_sink_holds_a_materializer_only_while_its_value_has_links() -> None:
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    box, a, b = space.cell("box"), space.cell("a"), space.cell("b")
    a.set("A")
    b.set("B")
    box.set({"x": 1})
    seen: list[object] = []
    cancel = sch.sink(box, seen.append)
    (node,) = sch.graph.nodes
    sink = node.fn
    assert isinstance(sink, Sink)
    assert sink.materializer is None  # a value without links: plain reads
    box.set({"x": a.link(), "y": b.link()})  # links: kept from the next read on
    sch.settle()
    assert sink.materializer is not None
    box.set({"x": a.link(), "y": b.link(), "z": 0})
    sch.settle()
    assert sink.materializer is not None and not sink.materializer.idle
    a.set("A2")
    sch.settle()
    assert seen == [
        {"x": 1},
        {"x": "A", "y": "B"},
        {"x": "A", "y": "B", "z": 0},
        {"x": "A2", "y": "B", "z": 0},
    ]
    box.set(5)  # no links again: dropped
    sch.settle()
    assert sink.materializer is None and seen[-1] == 5
    cancel()
    sch.close()


def test_a_sink_on_a_derived_cell_reads_the_key_its_writer_holds() -> None:
    # The sink reads what the derive node writes: its read set keeps the writer's key
    # object, not an equal one of its own (one key per document).
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    src, out = space.cell("src"), space.cell("out")
    src.set(1)
    node = sch.derive(out, [src], lambda v: v + 1)
    seen: list[object] = []
    cancel = sch.sink(out, seen.append)
    (sink,) = [n for n in sch.graph.nodes if n is not node]
    assert isinstance(sink, Sink) and sink.fn is sink
    ((written, _path),) = node.outputs
    (read,) = sink.reads
    assert read is written
    assert seen == [2]
    cancel()
    assert not sink.registered and list(sch.graph.nodes) == [node]


def test_a_pull_through_links_runs_once_after_the_value_it_leads_to_is_computed() -> None:
    # Issue 14: a pull of a mapped element's result follows links (the list's item to
    # the element's result, its field to a lift's output). Its node's first run used
    # to see only the pulled cell's own document, follow the links to a value whose
    # writer had not run yet, and run again once it had: two runs per pull. The
    # places the links lead to are declared, so the writer runs first and the pull
    # once. (Since then a pull runs no node at all: it holds demand on the writers of
    # what it reads and reads after the settle, so only the lift runs.) When a link
    # moves, the pull still reads where it leads now.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    x, doubled, card, board = (space.cell(n) for n in ("x", "doubled", "card", "board"))
    x.set(1)
    sch.derive(doubled, [x], lambda v: 2 * v, label="double")
    card.set({"label": doubled.link()})
    board.set({"out": [card.link()]})
    pulled = board.key("out", 0, "label")
    assert 2 == sch.pull_now(pulled)
    for value in (5, 7):
        x.set(value)
        runs = sch.stats.runs_effect, sch.stats.runs_computation
        assert 2 * value == sch.pull_now(pulled)
        assert (0, 1) == (sch.stats.runs_effect - runs[0], sch.stats.runs_computation - runs[1])
    # A link re-pointed after the walk: the pull reads where it leads when it runs.
    other = space.cell("other")
    other.set({"label": "plain"})
    board.set({"out": [other.link()]})
    assert "plain" == sch.pull_now(pulled)
    sch.close()


# ----------------------------------------------------------------------------- direct runs
# A sink whose last run read one plain value at its cell reads the next one from the
# replica with no transaction (`Sink.run_direct`). These pin that the shortcut is taken
# and that it sees every kind of change a transaction's read would.


def _sink_of(sch: Scheduler) -> Sink:
    (sink,) = [n for n in sch.graph.nodes if isinstance(n, Sink)]
    return sink


def test_a_sink_of_a_plain_value_runs_without_a_transaction() -> None:
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell = space.cell("a")
    cell.set(1)
    seen: list[object] = []
    sch.sink(cell, seen.append)
    sink = _sink_of(sch)
    assert sink.direct
    elided, runs = space.replica.stats.commits_elided, sch.stats.runs_effect
    for v in (2, "two", None, 2.5, True):
        cell.set(v)
        sch.settle()
    assert [1, 2, "two", None, 2.5, True] == seen
    # Five runs, none of them a transaction (each would have been an elided commit).
    assert (5, 0) == (sch.stats.runs_effect - runs, space.replica.stats.commits_elided - elided)
    sch.close()


def test_a_direct_sink_follows_a_link_that_appears_at_its_cell() -> None:
    # The cell goes from a plain value to a link: the direct read must not hand out the
    # link, and the sink must go on to hear the link's target.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell, target = space.cell("a"), space.cell("t")
    cell.set(1)
    target.set("T1")
    seen: list[object] = []
    sch.sink(cell, seen.append)
    assert _sink_of(sch).direct
    cell.set(target.link())
    sch.settle()
    assert not _sink_of(sch).direct
    target.set("T2")
    sch.settle()
    cell.set(3)  # plain again: direct from the next run on
    sch.settle()
    assert _sink_of(sch).direct
    target.set("T3")  # no longer read
    sch.settle()
    cell.set(4)
    sch.settle()
    assert [1, "T1", "T2", 3, 4] == seen
    sch.close()


def test_a_direct_sink_follows_links_inside_a_container_that_appears() -> None:
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell, target = space.cell("a"), space.cell("t")
    cell.set(1)
    target.set("T1")
    seen: list[object] = []
    sch.sink_patches(cell, seen.append)
    cell.set({"x": target.link()})
    sch.settle()
    target.set("T2")
    sch.settle()
    assert [
        [{"op": "replace", "path": "", "value": 1}],
        [{"op": "replace", "path": "", "value": {"x": "T1"}}],
        [{"op": "replace", "path": "/x", "value": "T2"}],
    ] == seen
    sch.close()


def test_a_direct_sink_hears_another_sessions_commit() -> None:
    # A foreign commit reaches the replica as an integrate notification, not through a
    # transaction of this session: the direct read must see the integrated value.
    store = MemoryStore()
    here, there = Space(store, "sp"), Space(store, "sp")
    sch = Scheduler(here.replica)
    here.cell("a").set(1)
    seen: list[object] = []
    sch.sink(here.cell("a"), seen.append)
    assert _sink_of(sch).direct
    for v in (2, 3):
        there.cell("a").set(v)
        there.replica.pump()
        sch.settle()
    assert [1, 2, 3] == seen
    sch.close()


def test_a_direct_sink_sees_a_rejected_commit_reverted() -> None:
    # This session's write is applied locally at once (the sink delivers it), then the
    # store refuses it: the revert puts the confirmed value back, and the direct read
    # must deliver that, not keep the dropped value.
    store = MemoryStore()
    space = Space(store, "sp")
    sch = Scheduler(space.replica)
    cell = space.cell("a")
    cell.set(1)
    seen: list[object] = []
    sch.sink(cell, seen.append)
    with store.testing.hold_verdicts() as gate:
        cell.set(5)
        sch.settle()
        assert [1, 5] == seen
        gate.reject(0)
        space.replica.pump()
        sch.settle()
    assert [1, 5, 1] == seen
    assert _sink_of(sch).direct
    sch.close()


def test_a_direct_sink_of_a_container_follows_a_link_that_appears_deep_inside() -> None:
    # A list or dict without links is read directly too; a link nested anywhere in it
    # sends the run through the transaction, which follows it and keeps a materializer.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell, target = space.cell("a"), space.cell("t")
    cell.set({"x": [1, {"y": 2}]})
    target.set("T1")
    seen: list[object] = []
    sch.sink(cell, seen.append)
    sink = _sink_of(sch)
    assert sink.direct
    elided = space.replica.stats.commits_elided
    cell.set({"x": [1, {"y": 3}]})
    sch.settle()
    assert space.replica.stats.commits_elided == elided  # read with no transaction
    cell.set({"x": [1, {"y": target.link()}]})
    sch.settle()
    assert not sink.direct and sink.materializer is not None
    target.set("T2")
    sch.settle()
    assert [
        {"x": [1, {"y": 2}]},
        {"x": [1, {"y": 3}]},
        {"x": [1, {"y": "T1"}]},
        {"x": [1, {"y": "T2"}]},
    ] == seen
    sch.close()


def test_a_direct_sink_of_a_list_follows_a_link_that_appears_in_it() -> None:
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    cell, target = space.cell("a"), space.cell("t")
    cell.set([1, 2])
    target.set("T1")
    seen: list[object] = []
    sch.sink(cell, seen.append)
    assert _sink_of(sch).direct
    cell.set([1, target.link()])
    sch.settle()
    target.set("T2")
    sch.settle()
    assert [[1, 2], [1, "T1"], [1, "T2"]] == seen
    sch.close()


def test_a_direct_sink_of_a_user_scoped_cell_reads_its_principals_instance() -> None:
    # The direct read takes the document its last run read (the read set's key, the
    # resolved instance), not one rebuilt from the link (a shared document's key).
    store = MemoryStore()
    alice, bob = Space(store, "sp", principal="alice"), Space(store, "sp", principal="bob")
    sch = Scheduler(alice.replica)
    alice.cell("u", scope="user").set(1)
    bob.cell("u", scope="user").set(100)
    seen: list[object] = []
    sch.sink(alice.cell("u", scope="user"), seen.append)
    assert _sink_of(sch).direct
    alice.cell("u", scope="user").set(2)
    bob.cell("u", scope="user").set(200)
    bob.replica.pump()
    sch.settle()
    assert [1, 2] == seen
    sch.close()


def test_a_direct_sink_of_a_computed_cell_runs_after_the_drain_without_a_heap_entry() -> None:
    # The computation's commit invalidates the sink during the drain: the sink is set
    # aside and read once the heap is empty (`Passes._read_sinks`), a counted run with
    # no heap entry and no transaction, and it delivers the computed value.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    src, out = space.cell("src"), space.cell("out")
    src.set(1)
    sch.derive(out, [src], lambda v: v * 10)
    seen: list[object] = []
    sch.sink(out, seen.append)
    sink = _sink_of(sch)
    assert sink.direct and [10] == seen
    pushes, runs, effects = sch.stats.heap_pushes, sink.runs, sch.stats.runs_effect
    elided = space.replica.stats.commits_elided
    for v in (2, 3, 4):
        src.set(v)
        sch.settle()
    assert [10, 20, 30, 40] == seen
    # Three waves: one heap entry each, the computation's; the sink ran three times,
    # never in a transaction (its run would have been an elided commit).
    assert (3, 3, 3) == (
        sch.stats.heap_pushes - pushes,
        sink.runs - runs,
        sch.stats.runs_effect - effects,
    )
    assert 0 == space.replica.stats.commits_elided - elided
    assert sink.status == "clean" and not sch.runnable()
    sch._check()
    sch.close()


def test_a_sink_set_aside_in_a_drain_follows_a_link_its_cell_now_holds() -> None:
    # The computation writes a link at the sink's cell in the drain: the sink, set aside
    # as direct, cannot read it directly any more and runs in a transaction (on the
    # heap), which follows the link; plain again, it is direct again.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    src, out, target = space.cell("src"), space.cell("out"), space.cell("t")
    src.set(0)
    target.set("T1")
    sch.derive(out, [src], lambda v: target.link() if v == 1 else v)
    seen: list[object] = []
    sch.sink(out, seen.append)
    sink = _sink_of(sch)
    assert sink.direct
    src.set(1)
    sch.settle()
    assert not sink.direct and [0, "T1"] == seen
    target.set("T2")
    sch.settle()
    src.set(2)
    sch.settle()
    assert sink.direct and [0, "T1", "T2", 2] == seen
    sch._check()
    sch.close()


def test_sinks_set_aside_in_a_drain_each_deliver_the_settled_value_once() -> None:
    # A sink per node of a chain with a fork: every sink is set aside in the drain and
    # delivers once, the value its cell holds when the pass ends (no intermediate one).
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    src = space.cell("src")
    src.set(1)
    a, b, c = space.cell("a"), space.cell("b"), space.cell("c")
    sch.derive(a, [src], lambda v: v + 1)
    sch.derive(b, [a], lambda v: v * 2)
    sch.derive(c, [a, b], lambda x, y: x + y)
    seen: dict[str, list[object]] = {"a": [], "b": [], "c": []}
    for name, cell in (("a", a), ("b", b), ("c", c)):
        sch.sink(cell, seen[name].append)
    src.set(5)
    sch.settle()
    assert {"a": [2, 6], "b": [4, 12], "c": [6, 18]} == seen
    assert all(n.status == "clean" for n in sch.graph.nodes)
    sch._check()
    sch.close()


def test_a_sink_set_aside_in_a_drain_and_cancelled_before_it_is_read_never_runs() -> None:
    # The sink on `out` is set aside when `out`'s writer commits; a node above it in
    # the same drain cancels it: a removed node never runs again.
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    src, out, after = space.cell("src"), space.cell("out"), space.cell("after")
    src.set(0)
    sch.derive(out, [src], lambda v: v + 1)
    seen: list[object] = []
    cancel = sch.sink(out, seen.append)
    sink = _sink_of(sch)

    def cancel_at(v: int) -> int:
        if v == 2:
            cancel()
        return v

    sch.derive(after, [out], cancel_at)
    sch.sink(after, lambda _v: None)  # (keeps the canceller live)
    assert sink.direct and [1] == seen
    runs = sink.runs
    src.set(1)
    sch.settle()
    assert not sink.registered and runs == sink.runs and [1] == seen
    sch._check()
    sch.close()

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
    # once. When a link moves, the pull still reads where it leads now.
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
        assert (1, 1) == (sch.stats.runs_effect - runs[0], sch.stats.runs_computation - runs[1])
    # A link re-pointed after the walk: the pull reads where it leads when it runs.
    other = space.cell("other")
    other.set({"label": "plain"})
    board.set({"out": [other.link()]})
    assert "plain" == sch.pull_now(pulled)
    sch.close()

"""A sink's node is labelled by its sink ("sink <link>", "patches <link>") without
holding a string of its own; other nodes keep the label they were given."""

from __future__ import annotations

from cells import MemoryStore, Space
from scheduler import Scheduler


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

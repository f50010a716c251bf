"""The small read sets answer as the dicts they stand for, and a two-document log is
checked against its read set exactly as compacting it would."""

from __future__ import annotations

import itertools

import pytest

from cells import DocKey, MemoryStore, Path, Space, Transaction
from scheduler import Scheduler
from scheduler import _readers as readers_module
from scheduler._node import OneRead, TwoReads, lean_reads, two_reads_match
from scheduler._passes import _same_two
from scheduler._readers import compact_reads


def test_a_one_document_read_set_answers_get_as_a_dict_does() -> None:
    key, other = DocKey("s", "a"), DocKey("s", "b")
    entry = ((("value",),), ())
    one = OneRead(key, entry)
    as_dict = {key: entry}
    for probe in (key, other):
        assert one.get(probe) == as_dict.get(probe)
        assert one.get(probe, "absent") == as_dict.get(probe, "absent")
        assert (probe in one) == (probe in as_dict)
    assert dict(one) == as_dict


def test_a_two_document_read_set_answers_as_a_dict_does() -> None:
    a, b, other = DocKey("s", "a"), DocKey("s", "b"), DocKey("s", "c")
    ea, eb = ((("value",),), ()), ((), (("value", 1),))
    two = lean_reads({a: ea, b: eb})
    assert type(two) is TwoReads
    as_dict = {a: ea, b: eb}
    for probe in (a, b, other):
        assert two.get(probe) == as_dict.get(probe)
        assert two.get(probe, "absent") == as_dict.get(probe, "absent")
        assert (probe in two) == (probe in as_dict)
    assert dict(two) == as_dict and len(two) == 2
    assert two.keys() - {a} == {b}
    try:
        two[other]
    except KeyError:
        pass
    else:
        raise AssertionError("a document not read must raise KeyError")


def test_two_reads_match_agrees_with_compacting_the_log() -> None:
    a, b = DocKey("s", "a"), DocKey("s", "b")
    paths: list[Path] = [("value",), ("value", 0), ("value", "x")]
    entries = [(k, p, s) for k in (a, b) for p in paths for s in (False, True)]
    # Every read set a two-document log can compact to, and every two-entry log.
    distinct: dict[str, TwoReads] = {}
    for e1, e2 in itertools.product(entries, repeat=2):
        reads = lean_reads(compact_reads([e1, e2]))
        if type(reads) is TwoReads:
            distinct.setdefault(repr(sorted(reads.items(), key=repr)), reads)
    sets = list(distinct.values())
    assert len(sets) == (len(paths) * 2) ** 2  # a path and its kind per document
    checked = 0
    for reads in sets:
        for e1, e2 in itertools.product(entries, repeat=2):
            log = [e1, e2]
            want = dict(compact_reads(log)) == dict(reads)
            assert two_reads_match(reads, log) == want, (reads, log)
            # `_run`'s one-call form of it (deep reads inline) answers the same.
            assert _same_two(reads, log) == want, (reads, log)
            checked += 1
    assert checked == len(sets) * len(entries) ** 2


def test_readers_of_the_same_field_path_share_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    # Entries of field-name paths are shared (every element's lift declares the same
    # read of its own argument document); a list index is data, not shared.
    monkeypatch.setattr(readers_module, "_ENTRIES", {})  # (bounded: start empty)
    a, b = DocKey("s", "a"), DocKey("s", "b")
    field: Path = ("value", "element")
    one, two = compact_reads([(a, field, False)]), compact_reads([(b, field, False)])
    assert one[a] == two[b] == (((field),), ()) and one[a] is two[b]
    index: Path = ("value", 3)
    three, four = compact_reads([(a, index, False)]), compact_reads([(b, index, False)])
    assert three[a] == four[b] and three[a] is not four[b]


def test_readers_of_the_same_field_path_shallowly_share_one_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every element's lift follows its argument's link: one shallow read of
    # ("value", "element"), shared; a shallow read of an element id is not.
    monkeypatch.setattr(readers_module, "_ENTRIES", {})
    a, b = DocKey("s", "a"), DocKey("s", "b")
    field: Path = ("value", "element")
    one, two = compact_reads([(a, field, True)]), compact_reads([(b, field, True)])
    assert one[a] == two[b] == ((), (field,)) and one[a] is two[b]
    named: Path = ("value", "#k1")
    three, four = compact_reads([(a, named, True)]), compact_reads([(b, named, True)])
    assert three[a] == four[b] and three[a] is not four[b]


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_a_node_answers_its_declared_outputs_as_declared(count: int) -> None:
    # One output is kept bare (no 1-tuple around it): `outputs` gives the same tuple
    # back for every count, including two outputs (a pair of pairs, not one pair).
    from cells import Identity
    from scheduler._node import FunctionNode

    declared = tuple((DocKey("s", f"o{i}"), ("value", i)) for i in range(count))
    node = FunctionNode(lambda _tx: None, "computation", 0, Identity("p", "s"), declared, label="n")
    assert node.outputs == declared


@pytest.mark.parametrize(
    "paths",
    [[("value",)], [("value", 0)], [("value",), ("value",)], [("value",), ("value", 1)], [()]],
)
def test_a_node_keeps_one_value_output_as_its_key_and_answers_it_as_declared(
    paths: list[Path],
) -> None:
    # One output at the cell's value is kept as the key alone (no pair around it); every
    # form reads back as the declared tuple, and `all_outputs` undoes `one_output`.
    from cells import Identity
    from scheduler._node import FunctionNode, all_outputs, one_output

    declared = tuple((DocKey("s", f"o{i}"), p) for i, p in enumerate(paths))
    node = FunctionNode(
        lambda _tx: None, "computation", 0, Identity("p", "s"), one_output(declared), label="n"
    )
    assert node.outputs == declared
    assert all_outputs(one_output(declared)) == declared
    if paths == [("value",)]:
        assert node._outs is declared[0][0]
    else:
        assert type(node._outs) is tuple


def _one_read_node(
    how: dict[str, object],
) -> tuple[Scheduler, Space, DocKey, list[object]]:
    """A node reading one place of document `d` (`how["path"]`, `how["shallow"]`: the
    test moves it between runs), with a sink on its output; the node's runs logged."""
    space = Space(MemoryStore(), "sp")
    sch = Scheduler(space.replica)
    doc, out = space.cell("d"), space.cell("out")
    doc.set({"x": 1, "y": 10})
    key = doc.doc_key
    runs: list[object] = []

    def fn(tx: Transaction) -> None:
        path = how["path"]
        assert isinstance(path, tuple)
        value = tx.read(key, path, shallow=bool(how["shallow"]))
        runs.append(path)
        tx.write(out.doc_key, ("value",), len(value) if how["shallow"] else value)

    sch.register(fn, identity=space.identity, outputs=[(out.doc_key, ("value",))])
    sch.sink(out, lambda _v: None)
    return sch, space, key, runs


def test_a_node_whose_one_read_moves_to_another_path_is_triggered_by_the_new_one() -> None:
    how: dict[str, object] = {"path": ("value", "x"), "shallow": False}
    sch, space, key, runs = _one_read_node(how)
    (node,) = [n for n in sch.graph.nodes if n.kind == "computation"]
    assert [("value", "x")] == runs
    how["path"] = ("value", "y")
    sch.invalidate(node)
    sch.settle()
    assert dict(node.reads) == {key: ((("value", "y"),), ())}
    space.cell("d").set({"x": 2, "y": 10})  # no longer read: no run
    sch.settle()
    space.cell("d").set({"x": 2, "y": 11})
    sch.settle()
    assert [("value", "x"), ("value", "y"), ("value", "y")] == runs
    sch._check()
    sch.close()


def test_a_node_whose_one_read_turns_shallow_is_triggered_by_the_shape_only() -> None:
    how: dict[str, object] = {"path": ("value",), "shallow": False}
    sch, space, key, runs = _one_read_node(how)
    (node,) = [n for n in sch.graph.nodes if n.kind == "computation"]
    how["shallow"] = True
    sch.invalidate(node)
    sch.settle()
    assert dict(node.reads) == {key: ((), (("value",),))}
    space.cell("d").set({"x": 5, "y": 50})  # the same keys: no run
    sch.settle()
    assert 2 == len(runs)
    space.cell("d").set({"x": 5})
    sch.settle()
    assert 3 == len(runs)
    sch._check()
    sch.close()

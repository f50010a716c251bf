"""`Scheduler.track_changes` / `take_changes` / `keep_reads`: a node told which of its
inputs changed, which updates its output from those alone and keeps its read set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import cells
from cells import DocKey, InvalidArgumentError, Space, Transaction
from scheduler import ManualClock, Node, Scheduler


@pytest.fixture
def sp() -> Iterator[Space]:
    yield Space(cells.MemoryStore(), "x")


class Summer:
    """Sums N input cells into `out`: the first run (or an unknown change) reads every
    input; later runs re-read only the changed inputs and keep the read set."""

    def __init__(self, sp: Space, sch: Scheduler, n: int) -> None:
        self.sp, self.sch = sp, sch
        self.inputs = [sp.cell(f"in{i}") for i in range(n)]
        tx = sp.edit()
        for i, c in enumerate(self.inputs):
            c.with_tx(tx).set(i)
        tx.commit()
        sp.replica.pump()
        self.out = sp.cell("sum")
        self.kept: dict[DocKey, int] = {}
        self.seen: list[frozenset[DocKey] | None] = []
        self.node: Node = sch.register(
            self.run,
            identity=sp.identity,
            outputs=[(self.out.doc_key, ("value",))],
            reads=[(c.doc_key, ("value",), False) for c in self.inputs],
            label="sum",
        )
        sch.track_changes(self.node)

    def run(self, tx: Transaction) -> None:
        changed = self.sch.take_changes(self.node)
        self.seen.append(changed)
        if changed is None or not self.kept:
            self.kept = {c.doc_key: tx.read(c.doc_key, ("value",)) for c in self.inputs}
        else:
            for key in changed:
                self.kept[key] = tx.read(key, ("value",), log=False)
            self.sch.keep_reads(self.node)
        tx.write(self.out.doc_key, ("value",), sum(self.kept.values()))


def test_take_changes_names_the_changed_inputs_and_keep_reads_keeps_the_read_set(
    sp: Space,
) -> None:
    sch = Scheduler(sp.replica, clock=ManualClock())
    s = Summer(sp, sch, 5)
    assert 10 == sch.pull_now(s.out)
    assert [None] == s.seen  # the first run: not known
    reads = s.node.reads
    s.inputs[3].set(100)
    sp.replica.pump()
    assert 107 == sch.pull_now(s.out)
    assert frozenset({s.inputs[3].doc_key}) == s.seen[-1]
    assert s.node.reads is reads  # kept: the run read only one input
    # Both changes before one run: both named.
    tx = sp.edit()
    s.inputs[0].with_tx(tx).set(50)
    s.inputs[4].with_tx(tx).set(40)
    tx.commit()
    sp.replica.pump()
    assert 50 + 1 + 2 + 100 + 40 == sch.pull_now(s.out)
    assert frozenset({s.inputs[0].doc_key, s.inputs[4].doc_key}) == s.seen[-1]
    # An input still read after the kept runs: its change still re-runs the node.
    s.inputs[1].set(11)
    sp.replica.pump()
    assert 50 + 11 + 2 + 100 + 40 == sch.pull_now(s.out)
    assert 4 == len(s.seen)
    sch._check()


def test_an_explicit_invalidate_makes_the_changes_unknown(sp: Space) -> None:
    sch = Scheduler(sp.replica, clock=ManualClock())
    s = Summer(sp, sch, 3)
    assert 3 == sch.pull_now(s.out)
    s.inputs[0].set(7)
    sp.replica.pump()
    sch.invalidate(s.node)
    assert 10 == sch.pull_now(s.out)
    assert s.seen[-1] is None


def test_a_write_equal_to_the_old_value_is_no_change(sp: Space) -> None:
    sch = Scheduler(sp.replica, clock=ManualClock())
    s = Summer(sp, sch, 3)
    assert 3 == sch.pull_now(s.out)
    s.inputs[2].set(2)  # the same value: the node is not invalidated, nothing recorded
    s.inputs[1].set(5)
    sp.replica.pump()
    assert 7 == sch.pull_now(s.out)
    assert frozenset({s.inputs[1].doc_key}) == s.seen[-1]


def test_a_run_whose_commit_fails_makes_the_changes_unknown(sp: Space) -> None:
    store = sp.replica.store
    assert isinstance(store, cells.MemoryStore)
    sch = Scheduler(sp.replica, clock=ManualClock())
    s = Summer(sp, sch, 3)
    got: list[int] = []
    sch.sink(s.out, got.append)  # keeps the sum live
    assert [3] == got
    before = len(s.seen)
    with store.testing.hold_verdicts() as gate:
        s.inputs[0].set(10)
        sp.replica.pump()
        sch.settle()
        assert frozenset({s.inputs[0].doc_key}) == s.seen[-1]
        # The sum's commit is refused: what its run took is not in its output.
        while gate.waiting():
            if s.out.doc_key in gate.held()[0].request.keys:
                gate.reject(0)
            else:
                gate.accept(0)
        sp.replica.pump()
        sch.settle()
    assert 13 == sch.pull_now(s.out)
    assert [None] == s.seen[before + 1 :]  # its run again: what changed is not known


def test_the_calls_check_their_node(sp: Space) -> None:
    sch = Scheduler(sp.replica, clock=ManualClock())
    node = sch.register(lambda tx: None, identity=sp.identity, label="plain")
    with pytest.raises(InvalidArgumentError, match="does not track"):
        sch.take_changes(node)
    with pytest.raises(InvalidArgumentError, match="is not running"):
        sch.keep_reads(node)
    sch.track_changes(node)
    sch.remove(node)
    sch._check()  # a removed node is no longer tracked


class ListSummer:
    """Sums the inputs a `which` cell names (indices into `inputs`, each input made by a
    computation doubling a source cell): a change of `which` reads only the inputs it
    added and keeps the rest of the read set, replacing the added and dropped inputs'
    reads (`keep_reads(node, replace)`)."""

    def __init__(self, sp: Space, sch: Scheduler, n: int) -> None:
        self.sp, self.sch = sp, sch
        self.sources = [sp.cell(f"src{i}") for i in range(n)]
        self.inputs = [sp.cell(f"in{i}") for i in range(n)]
        self.which = sp.cell("which")
        tx = sp.edit()
        for i, c in enumerate(self.sources):
            c.with_tx(tx).set(i)
        self.which.with_tx(tx).set([0, 1, 2])
        tx.commit()
        sp.replica.pump()
        self.runs = [0] * n
        for i in range(n):
            sch.derive(self.inputs[i], [self.sources[i]], self._double(i))
        self.out = sp.cell("sum")
        self.kept: dict[int, int] = {}
        self.node: Node = sch.register(
            self.run,
            identity=sp.identity,
            outputs=[(self.out.doc_key, ("value",))],
            reads=[(self.which.doc_key, ("value",), False)],
            label="sum of which",
        )
        sch.track_changes(self.node)

    def _double(self, i: int) -> Any:
        def double(v: int) -> int:
            self.runs[i] += 1
            return 2 * v

        return double

    def run(self, tx: Transaction) -> None:
        changed = self.sch.take_changes(self.node)
        which = tx.read(self.which.doc_key, ("value",))
        if changed is None or not self.kept or self.which.doc_key not in changed:
            self.kept = {i: tx.read(self.inputs[i].doc_key, ("value",)) for i in which}
        else:
            added = [i for i in which if i not in self.kept]
            dropped = [i for i in self.kept if i not in which]
            replace: dict[DocKey, list[tuple[tuple[str, ...], bool]]] = {}
            for i in dropped:
                del self.kept[i]
                replace[self.inputs[i].doc_key] = []
            for i in added:
                self.kept[i] = tx.read(self.inputs[i].doc_key, ("value",))
                replace[self.inputs[i].doc_key] = [(("value",), False)]
            self.sch.keep_reads(self.node, replace)
        tx.write(self.out.doc_key, ("value",), sum(self.kept.values()))


def test_keep_reads_replaces_the_reads_of_the_documents_it_names(sp: Space) -> None:
    sch = Scheduler(sp.replica, clock=ManualClock())
    s = ListSummer(sp, sch, 5)
    got: list[int] = []
    sch.sink(s.out, got.append)
    assert [0 + 2 + 4] == got
    assert [1, 1, 1, 0, 0] == s.runs  # only the named inputs are live
    s.which.set([1, 2, 4])  # input 0 dropped, input 4 added
    sp.replica.pump()
    sch.settle()
    # (With the replacement forgotten, input 4's writer never becomes live: the sum
    # fails on its absent value.)
    assert 2 + 4 + 8 == got[-1]
    keys = {c.doc_key for c in s.inputs}
    assert {s.inputs[i].doc_key for i in (1, 2, 4)} == keys & set(s.node.reads)
    # The dropped input's writer is not live any more: a change of its source runs
    # nothing; the added one's is, and a change of its source reaches the sum.
    sums = s.node.runs
    s.sources[0].set(100)
    s.sources[4].set(10)
    sp.replica.pump()
    sch.settle()
    assert [1, 1, 1, 0, 2] == s.runs
    assert 2 + 4 + 20 == got[-1]
    assert sums + 1 == s.node.runs
    sch._check()  # the index and the edges are what the read set says

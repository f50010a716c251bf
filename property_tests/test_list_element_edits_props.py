"""filter and flat_map under random element edits (issue 14 item 5): the incremental
output against a plain reference.

The machine keeps one list of notes (`{"v": int, "t": str}`), inline or as
links to note cells, under a filter and a flat_map each with a plain function
op and with a pattern op (a child run with a lift per element). It edits a
field of an inline note (a path write), a field of a linked note's cell,
replaces a whole inline note, re-points a link, inserts (a whole-list write, or
a splice: `Cell.insert`), removes (a splice) and moves elements, and holds
verdicts so that any commit can be accepted or rejected
(a reconcile's or a combine's for good too). After every step the runtime's
structures pass `_check()`. At quiescence each output equals the reference
applied to the list as it reads now, and the sink's value equals a full read.

With no verdict held, an edit inside an element (an inline field, a linked
cell's field) runs no reconcile and no whole combine: only the element's nodes
and, when its part of the output changed, one combiner update; and a splice of
the list combines no output whole (each combiner splices its output).
"""

from __future__ import annotations

import asyncio
from typing import Any

from held_verdicts import HeldVerdicts
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from cells import MISSING, Link, MemoryStore, VerdictGate, read_value
from runner import Runtime, lift, pattern
from scheduler import ManualClock

N_CELLS = 4
TITLES = ("a", "b", "c")


def keep(note: Any) -> bool:
    return isinstance(note, dict) and note.get("v", 0) % 2 == 0


def parts(note: Any) -> list[Any]:
    if not isinstance(note, dict):
        return []
    return [note.get("t")] * (note.get("v", 0) % 3)


@pattern
def Keep(element):  # type: ignore[no-untyped-def]
    return lift(keep)(element)


@pattern
def Parts(element):  # type: ignore[no-untyped-def]
    return lift(parts)(element)


@pattern
def Notes(items):  # type: ignore[no-untyped-def]
    return {
        "kept": items.filter(keep),
        "parts": items.flat_map(parts),
        "kept_children": items.filter(Keep),
        "parts_children": items.flat_map(Parts),
    }


def reference(values: list[Any]) -> dict[str, list[Any]]:
    kept = [v for v in values if keep(v)]
    flat = [x for v in values for x in parts(v)]
    return {"kept": kept, "parts": flat, "kept_children": kept, "parts_children": flat}


notes = st.fixed_dictionaries({"v": st.integers(0, 5), "t": st.sampled_from(TITLES)})


class ElementEditMachine(HeldVerdicts, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryStore()
        self.clock = ManualClock()
        self.rt = Runtime(self.store, clock=self.clock)
        self.gate: VerdictGate | None = None
        rt = self.rt
        self.cells = [rt.get_cell(("note", i)) for i in range(N_CELLS)]
        self.items = rt.get_cell("items")
        self.res = rt.get_cell("notes")
        tx = rt.edit()
        for i, c in enumerate(self.cells):
            c.with_tx(tx).set({"v": i, "t": TITLES[i % 3]})
        self.items.with_tx(tx).set([{"v": 0, "t": "a"}, self.cells[1].link(), {"v": 2, "t": "b"}])
        rt.run(tx, Notes, {"items": self.items}, self.res)
        self._wait(tx.commit())
        self.sunk: list[Any] = []
        self.cancel = self.res.sink(self.sunk.append)  # everything stays live
        self._settle()

    # ------------------------------------------------------------------ driving
    def _settle(self) -> None:
        try:
            self.rt.settle()
        except Exception as exc:  # the ops never raise
            raise AssertionError(f"settle raised {exc!r}") from exc

    def _list(self) -> list[Any]:
        doc = self.rt.replica.visible(self.items.doc_key)
        raw = doc.get("value", MISSING) if type(doc) is dict else MISSING
        return list(raw) if type(raw) is list else []

    def _counts(self) -> list[tuple[int, int]]:
        return [
            (c.reconciles, c.combiner.combines if c.combiner is not None else 0)
            for c in sorted(self.rt.runner.coordinators, key=lambda c: c.index)
        ]

    def _inside(self, edit: Any) -> None:
        """Make an edit inside an element; with nothing held, it must run no reconcile
        and no whole combine."""
        if self.gate is not None:
            edit()
            self._settle()
            return
        self.quiesce()
        before = self._counts()
        edit()
        self._settle()
        assert before == self._counts(), "an edit inside an element re-ran a list node"

    def _spliced(self, splice: Any) -> None:
        """Splice the list; with nothing held, no filter or flat_map output may be
        combined whole for it (its combiner splices the output: issue 14 item 5)."""
        if self.gate is not None:
            splice()
            self._settle()
            return
        self.quiesce()
        before = [combines for _r, combines in self._counts()]
        splice()
        self._settle()
        after = [combines for _r, combines in self._counts()]
        assert before == after, "a splice of the list combined an output whole"

    # ------------------------------------------------------------------ rules
    @rule(pos=st.integers(0, 8), linked=st.booleans(), note=notes, cell=st.integers(0, 3))
    def insert(self, pos: int, linked: bool, note: dict[str, Any], cell: int) -> None:
        items = self._list()
        items.insert(min(pos, len(items)), self.cells[cell].link() if linked else note)
        self.items.set(items)
        self._settle()

    @rule(pos=st.integers(0, 8), linked=st.booleans(), note=notes, cell=st.integers(0, 3))
    def splice_insert(self, pos: int, linked: bool, note: dict[str, Any], cell: int) -> None:
        at = min(pos, len(self._list()))
        self._spliced(lambda: self.items.insert(at, self.cells[cell].link() if linked else note))

    @rule(pos=st.integers(0, 8))
    def remove(self, pos: int) -> None:
        items = self._list()
        if items:
            self._spliced(lambda: self.items.remove(pos % len(items)))

    @rule(i=st.integers(0, 8), j=st.integers(0, 8))
    def move(self, i: int, j: int) -> None:
        items = self._list()
        if items:
            item = items.pop(i % len(items))
            items.insert(j % (len(items) + 1), item)
            self.items.set(items)
            self._settle()

    @rule(i=st.integers(0, 8), field=st.sampled_from(["v", "t"]), data=st.data())
    def inline_field(self, i: int, field: str, data: st.DataObject) -> None:
        items = self._list()
        inline = [k for k, x in enumerate(items) if type(x) is dict]
        if inline:
            k = inline[i % len(inline)]
            value = data.draw(st.integers(0, 5) if field == "v" else st.sampled_from(TITLES))
            self._inside(lambda: self.items.key(k, field).set(value))

    @rule(cell=st.integers(0, N_CELLS - 1), field=st.sampled_from(["v", "t"]), data=st.data())
    def linked_field(self, cell: int, field: str, data: st.DataObject) -> None:
        value = data.draw(st.integers(0, 5) if field == "v" else st.sampled_from(TITLES))
        self._inside(lambda: self.cells[cell].key(field).set(value))

    @rule(i=st.integers(0, 8), note=notes)
    def replace_inline(self, i: int, note: dict[str, Any]) -> None:
        items = self._list()
        inline = [k for k, x in enumerate(items) if type(x) is dict]
        if inline:
            self._inside(lambda: self.items.key(inline[i % len(inline)]).set(note))

    @rule(i=st.integers(0, 8), cell=st.integers(0, N_CELLS - 1))
    def repoint(self, i: int, cell: int) -> None:
        items = self._list()
        links = [k for k, x in enumerate(items) if type(x) is Link]
        if links:
            self.items.key(links[i % len(links)]).set(self.cells[cell].link())
            self._settle()

    # ------------------------------------------------------------------ checks
    @rule()
    def quiescent(self) -> None:
        self.check_quiescent()

    def check_quiescent(self) -> None:
        self.quiesce()
        rt = self.rt
        items = self._list()
        tx = rt.replica.edit(rt.identity)
        values = [read_value(tx, x) if type(x) is Link else x for x in items]
        got = self._wait(self.res.pull())
        assert reference(values) == {k: got[k] for k in reference([])}, (items, values, got)
        assert got == self.sunk[-1], (got, self.sunk[-1])
        rt._check()

    def teardown(self) -> None:
        try:
            self.check_quiescent()
        finally:
            self.cancel()
            self.loop.run_until_complete(self.rt.aclose())
            self.loop.close()


TestElementEdits = ElementEditMachine.TestCase

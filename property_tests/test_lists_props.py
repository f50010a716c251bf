"""Reactive lists under random edits, held and rejected verdicts: the coordinators
against a plain reference of map / filter / flat_map.

The machine edits one list (insert inline values, links to element cells, None,
by a whole-list write or a splice; remove; move; duplicate a link; re-scope a
link; path-write inside an element; make the list undefined; change an
element cell), opens element
children as pages, and holds verdicts so that any commit — a user's list
write, a reconcile, a child's computation — can be accepted or rejected as a
stale basis, for good, or aborted. After every step the runtime's structures
pass `_check()`. At quiescence (gates released, `await rt.idle()`):

- each output equals the reference applied to the list as it now reads;
- the registrations are exactly the parent, one child per element key per
  coordinator, and the pages opened (a page survives its element's removal);
- no start attempt, pending start, declined release or stray node is left.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from address_oracle import base_container, child_link, element_keys, whole
from held_verdicts import HeldVerdicts
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from cells import MISSING, Link, MemoryStore, VerdictGate, read_value
from runner import Runtime
from scheduler import ManualClock

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "runner"))
from pattern_defs import AllThree

N_CELLS = 4
OUTPUTS = {"doubled": (0, "map"), "evens": (1, "filter"), "repeated": (2, "flat_map")}


def reference(values: list[Any]) -> dict[str, list[Any]]:
    """map / filter / flat_map of the element values, in plain Python."""

    def double(v: Any) -> Any:
        return None if v is None else v * 2

    def even(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v % 2 == 0

    def repeat(v: Any) -> list[Any]:
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return [v] * v
        return [] if v is None else [v]

    return {
        "doubled": [double(v) for v in values],
        "evens": [v for v in values if even(v)],
        "repeated": [x for v in values for x in repeat(v)],
    }


class ListMachine(HeldVerdicts, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryStore()
        # A manual clock: work deferred behind backoff (a pass over budget) is let run
        # at quiescence by advancing it, never by sleeping.
        self.clock = ManualClock()
        self.rt = Runtime(self.store, clock=self.clock)
        self.gate: VerdictGate | None = None
        rt = self.rt
        self.cells = [rt.get_cell(("element", i)) for i in range(N_CELLS)]
        self.user_cells = [rt.get_cell(("element", i), scope="user") for i in range(N_CELLS)]
        self.items = rt.get_cell("items")
        self.res = rt.get_cell("board")
        self.pages: set[Any] = set()
        tx = rt.edit()
        for i, (c, u) in enumerate(zip(self.cells, self.user_cells, strict=True)):
            c.with_tx(tx).set(i)
            u.with_tx(tx).set(10 + i)
        self.items.with_tx(tx).set([0, self.cells[1].link()])
        rt.run(tx, AllThree, {"items": self.items}, self.res)
        self._wait(tx.commit())
        self.sunk: list[Any] = []
        self.cancel = self.res.sink(self.sunk.append)  # everything stays live
        self._settle()

    # ------------------------------------------------------------------ driving
    def _settle(self) -> None:
        try:
            self.rt.settle()
        except Exception as exc:  # a node raising is a bug here: the ops never raise
            raise AssertionError(f"settle raised {exc!r}") from exc

    def _raw(self) -> Any:
        doc = self.rt.replica.visible(self.items.doc_key)
        return doc.get("value", MISSING) if type(doc) is dict else MISSING

    def _edit(self, new: Any) -> None:
        if new is MISSING:
            self.items.delete()
        else:
            self.items.set(new)
        self._settle()

    def _list(self) -> list[Any]:
        raw = self._raw()
        return list(raw) if type(raw) is list else []

    # ------------------------------------------------------------------ rules
    @rule(
        pos=st.integers(0, 8), kind=st.sampled_from(["inline", "link", "none"]), v=st.integers(0, 3)
    )
    def insert(self, pos: int, kind: str, v: int) -> None:
        items = self._list()
        item: Any = v if kind == "inline" else None if kind == "none" else self.cells[v].link()
        items.insert(min(pos, len(items)), item)
        self._edit(items)

    @rule(pos=st.integers(0, 8))
    def remove(self, pos: int) -> None:
        items = self._list()
        if items:
            del items[pos % len(items)]
            self._edit(items)

    @rule(i=st.integers(0, 8), j=st.integers(0, 8))
    def move(self, i: int, j: int) -> None:
        items = self._list()
        if items:
            item = items.pop(i % len(items))
            items.insert(j % (len(items) + 1), item)
            self._edit(items)

    @rule(pos=st.integers(0, 8), v=st.integers(0, 3), user=st.booleans())
    def cell_insert(self, pos: int, v: int, user: bool) -> None:
        """`Cell.insert` (a splice) of a link: what the reconcile's middle diff sees."""
        link = (self.user_cells if user else self.cells)[v].link()
        self.items.insert(min(pos, len(self._list())), link)
        self._settle()

    @rule(pos=st.integers(0, 8), v=st.integers(0, 3), front=st.booleans())
    def cell_insert_inline(self, pos: int, v: int, front: bool) -> None:
        """`Cell.insert` (a splice) of an inline value, at the front or anywhere: the
        new element gets a new element id and child, every later element keeps its
        id (and child) at its new position."""
        self.items.insert(0 if front else min(pos, len(self._list())), v)
        self._settle()

    @rule(pos=st.integers(0, 8))
    def cell_remove(self, pos: int) -> None:
        items = self._list()
        if items:
            self.items.remove(pos % len(items))
            self._settle()

    @rule()
    def links_only(self) -> None:
        """Drop the inline elements: a list of links takes the reconcile's fast path."""
        items = self._list()
        self._edit([x for x in items if type(x) is Link])

    @rule(i=st.integers(0, 8))
    def duplicate(self, i: int) -> None:
        items = self._list()
        if items:
            items.append(items[i % len(items)])
            self._edit(items)

    @rule(i=st.integers(0, 8))
    def rescope(self, i: int) -> None:
        items = self._list()
        links = [k for k, x in enumerate(items) if type(x) is Link]
        if links:
            k = links[i % len(links)]
            link = items[k]
            items[k] = Link(link.space, link.id, "space" if link.scope == "user" else "user")
            self._edit(items)

    @rule(i=st.integers(0, 8), v=st.integers(0, 3))
    def path_write(self, i: int, v: int) -> None:
        items = self._list()
        inline = [k for k, x in enumerate(items) if type(x) is not Link]
        if inline:
            self.items.key(inline[i % len(inline)]).set(v)
            self._settle()

    @rule()
    def undefined(self) -> None:
        self._edit(MISSING)

    @rule(i=st.integers(0, N_CELLS - 1), v=st.integers(0, 3), user=st.booleans())
    def set_element_cell(self, i: int, v: int, user: bool) -> None:
        (self.user_cells if user else self.cells)[i].set(v)
        self._settle()

    @precondition(lambda self: self.gate is None)
    @rule(i=st.integers(0, 8), which=st.sampled_from(sorted(OUTPUTS)))
    def open_page(self, i: int, which: str) -> None:
        out = self.res.key(which).resolve()
        raw = self.rt.replica.visible(out.doc_key)
        value = raw.get("value") if type(raw) is dict else None
        if which != "doubled" or type(value) is not list or not value:
            return  # only map slots hold links to element results
        slot = out.key(i % len(value))

        async def start() -> bool:
            return await self.rt.start(slot)

        if self.loop.run_until_complete(start()):
            self.pages |= self.rt.lifetimes()

    # ------------------------------------------------------------------ checks
    @rule()
    def quiescent(self) -> None:
        """Everything settles, mid-run too: the outputs, the registrations and the
        sink's kept value (re-read only where it changed) are checked then."""
        self.check_quiescent()

    def check_quiescent(self) -> None:
        self.quiesce()
        rt = self.rt
        raw = self._raw()
        items = list(raw) if type(raw) is list else []
        tx = rt.replica.edit(rt.identity)
        values = [read_value(tx, x) if type(x) is Link else x for x in items]
        values = [None if v is MISSING else v for v in values]
        got = self._wait(self.res.pull())
        assert reference(values) == {k: got[k] for k in OUTPUTS}, (items, values, got)
        # The sink's kept, partly re-read value is what a full read gives.
        assert got == self.sunk[-1], (got, self.sunk[-1])
        # The oracle's keys (`address_oracle`): one child per element key per list node,
        # keyed from the output cell the result projects (read from the result document).
        expected = {rt.key(self.res)}
        result_doc = rt.replica.visible(self.res.doc_key)
        assert type(result_doc) is dict
        list_scope = self.items.link().scope
        for name, (_index, kind) in OUTPUTS.items():
            output = result_doc["value"][name]
            assert type(output) is Link, output
            container = base_container(whole(output), list_scope)
            for key in element_keys(items, rt.replica.visible(self.items.doc_key)):
                expected.add(child_link(kind, container, key).key(rt.identity))
        pages = self.pages & rt.lifetimes()
        assert self.pages == pages, "a page lost its lifetime without a stop"
        assert expected | pages == rt.registrations(), (
            sorted(map(str, rt.registrations() - expected - pages)),
            sorted(map(str, expected - rt.registrations())),
        )
        runner = rt.runner
        assert not runner.attempts.active and not runner.attempts.by_key
        assert not runner.attempts.generation and not rt.pending_starts()
        assert not runner._declined
        rt._check()

    def teardown(self) -> None:
        try:
            self.check_quiescent()
        finally:
            self.cancel()
            self.loop.run_until_complete(self.rt.aclose())
            self.loop.close()


TestLists = ListMachine.TestCase

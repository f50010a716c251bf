"""One element edited in a filter or flat_map runs only that element's nodes (issue 14 item 5).

Each test edits one element of a 40-element list — an inline scalar, a field of
an inline dict, a field of a linked element's cell — and records which
scheduler nodes ran: exactly the element's own node(s), and the list's combiner
only when the element's result changed, updating just that element's part
(`Combiner.updates`, never a whole `combines`). The coordinator's reconcile never
runs for such an edit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from note_boards import (
    Copied,
    CopiedChildren,
    OpenChildren,
    OpenOnes,
    copies,
    is_open,
)
from support import arun, coordinator, run_list

from cells import Link
from runner import Runtime, pattern
from runner._list_keys import ElementKey
from scheduler import Node

N = 40


def is_even(v: Any) -> bool:
    return isinstance(v, int) and v % 2 == 0


def repeat(v: Any) -> list[Any]:
    return [v] * (v % 3)


@pattern
def EvenOnes(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(is_even)}


@pattern
def Repeated(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(repeat)}


def note(i: int) -> dict[str, Any]:
    return {"open": i % 2 == 0, "t": f"note {i}", "n": i % 3}


def expected(kind: str, notes: list[dict[str, Any]]) -> list[Any]:
    if kind == "filter":
        return [x for x in notes if is_open(x)]
    return [y for x in notes for y in copies(x)]


async def ran_by(rt: Runtime, action: Callable[[], Awaitable[Any]]) -> list[Node]:
    """The scheduler nodes that ran while `action` was awaited (besides pulls' effects)."""
    nodes = list(rt.scheduler.graph.nodes)
    before = {n: n.runs for n in nodes}
    await action()
    return [n for n in rt.scheduler.graph.nodes if n.runs > before.get(n, 0)]


def element_nodes(rt: Runtime, key: ElementKey) -> set[Node]:
    """The scheduler nodes of one element: its function's computation, or every node of
    its child run."""
    coord = coordinator(rt)
    (state,) = coord.states.values()
    child_key = state.entries[key].child.key(rt.identity)
    if coord.functions is not None:
        node = coord.functions.elements[rt.identity, child_key].node
        assert node is not None
        return {node}
    reg = rt.runner.registrations.get(child_key)
    assert reg is not None
    return {n for held in reg.nodes.values() for n in held if isinstance(n, Node)}


def combiner_node(rt: Runtime) -> Node:
    combiner = coordinator(rt).combiner
    assert combiner is not None
    return combiner.nodes[rt.identity]


@pytest.mark.parametrize(
    ("pat", "kind", "new"),
    [
        (EvenOnes, "filter", 8),  # 17 -> 8: its verdict flips
        (EvenOnes, "filter", 19),  # 17 -> 19: still odd (no part changes)
        (Repeated, "flat_map", 20),  # 17 -> 20: [17, 17] -> [20, 20]
        (Repeated, "flat_map", 21),  # 17 -> 21: [17, 17] -> [] (a shorter part)
        (Repeated, "flat_map", 22),  # 17 -> 22: [17, 17] -> [22] (a shorter part)
    ],
)
def test_an_inline_scalar_edit_runs_its_element_and_updates_only_its_part(
    pat: Any, kind: str, new: int
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            values = list(range(N))
            items, res = await run_list(rt, pat, values)
            out = res.key("out")

            def want() -> list[Any]:
                if kind == "filter":
                    return [v for v in values if is_even(v)]
                return [y for v in values for y in repeat(v)]

            assert want() == await out.pull()
            coord = coordinator(rt)
            assert coord.combiner is not None
            reconciles, combines = coord.reconciles, coord.combiner.combines
            updates = coord.combiner.updates
            mine = element_nodes(rt, (17,))

            async def edit() -> None:
                await items.key(17).set(new)
                values[17] = new
                assert want() == await out.pull()

            ran = await ran_by(rt, edit)
            flips = kind == "filter" and is_even(new) != is_even(17)
            result_changed = flips or kind == "flat_map"
            assert set(ran) == mine | ({combiner_node(rt)} if result_changed else set())
            assert reconciles == coord.reconciles  # the coordinator did not run
            assert combines == coord.combiner.combines  # nor a whole combine
            assert updates + result_changed == coord.combiner.updates
            rt._check()

    arun(main)


@pytest.mark.parametrize(("pat", "kind"), [(OpenOnes, "filter"), (Copied, "flat_map")])
@pytest.mark.parametrize(
    ("field", "value"),
    [("t", "edited"), ("open", True), ("open", False), ("n", 2), ("n", 0)],
)
def test_an_inline_dict_field_edit_runs_its_element_and_updates_only_its_part(
    pat: Any, kind: str, field: str, value: Any
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(N)]
            items, res = await run_list(rt, pat, notes)
            out = res.key("out")
            assert expected(kind, notes) == await out.pull()
            coord = coordinator(rt)
            assert coord.combiner is not None
            reconciles, combines = coord.reconciles, coord.combiner.combines
            updates = coord.combiner.updates
            for i in (16, 17):  # a kept (open) note, then a dropped one
                mine = element_nodes(rt, (i,))
                old = expected(kind, notes)
                part_before = expected(kind, [notes[i]])

                async def edit(i: int = i) -> None:
                    await items.key(i, field).set(value)
                    notes[i] = {**notes[i], field: value}
                    assert expected(kind, notes) == await out.pull()

                ran = await ran_by(rt, edit)
                # The element's node always runs; the combiner runs only when the
                # element's part of the output changed (a filter's part is a link to
                # the element: an edit inside a kept element changes no part).
                part_after = expected(kind, [notes[i]])
                if kind == "filter":
                    moved = bool(part_before) != bool(part_after)
                else:
                    moved = part_before != part_after
                if notes[i] == note(i):
                    assert [] == ran, i  # the same value written again: nothing runs
                else:
                    assert set(ran) == mine | ({combiner_node(rt)} if moved else set()), i
                updates += moved
                assert updates == coord.combiner.updates
                assert expected(kind, notes) != old or not moved
            assert reconciles == coord.reconciles
            assert combines == coord.combiner.combines
            rt._check()

    arun(main)


@pytest.mark.parametrize(
    ("pat", "kind"),
    [
        (OpenOnes, "filter"),
        (Copied, "flat_map"),
        (OpenChildren, "filter"),  # a child run per element (a lift inside)
        (CopiedChildren, "flat_map"),
    ],
)
@pytest.mark.parametrize(("field", "value"), [("t", "edited"), ("open", False), ("n", 2)])
def test_a_linked_element_field_edit_runs_its_element_and_updates_only_its_part(
    pat: Any, kind: str, field: str, value: Any
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(N)]
            cells = [rt.get_cell(("note", i)) for i in range(N)]
            tx = rt.edit()
            for c, v in zip(cells, notes, strict=True):
                c.with_tx(tx).set(v)
            assert (await tx.commit()).ok
            links = [c.link() for c in cells]
            _items, res = await run_list(rt, pat, links)
            out = res.key("out")
            assert expected(kind, notes) == await out.pull()
            coord = coordinator(rt)
            assert coord.combiner is not None
            reconciles, combines = coord.reconciles, coord.combiner.combines
            updates = coord.combiner.updates
            i = 16  # open, "n" 1
            mine = element_nodes(rt, (links[i], 0))
            part_before = expected(kind, [notes[i]])

            async def edit() -> None:
                await cells[i].key(field).set(value)
                notes[i] = {**notes[i], field: value}
                assert expected(kind, notes) == await out.pull()

            ran = await ran_by(rt, edit)
            part_after = expected(kind, [notes[i]])
            if kind == "filter":
                moved = bool(part_before) != bool(part_after)
            else:
                moved = part_before != part_after
            # A child run may have nodes the edit does not reach (they need not run).
            assert set(ran) - mine == ({combiner_node(rt)} if moved else set())
            assert set(ran) & mine
            assert reconciles == coord.reconciles
            assert combines == coord.combiner.combines
            assert updates + moved == coord.combiner.updates
            rt._check()

    arun(main)


def test_a_filter_output_links_its_kept_elements() -> None:
    # The output holds links (into the list by element id for an inline element, so a
    # splice of the list changes no kept link), so an edit inside a kept element reaches
    # every reader of the output with no run of the list's nodes.
    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(4)]
            items, res = await run_list(rt, OpenOnes, notes)
            assert [notes[0], notes[2]] == await res.key("out").pull()
            combiner = coordinator(rt).combiner
            assert combiner is not None
            tx = rt.edit()
            place = tx.peek(combiner.container.key(rt.identity), ("value",))
            tx.abort()
            assert [items.link().child("#0"), items.link().child("#2")] == place
            assert all(type(x) is Link for x in place)

    arun(main)

"""Reactive lists: map, filter and flat_map coordinators (SCENARIOS.md H-K and the spec).

Element computations are counted with `pattern_defs.CALLS`; races hold
verdicts and loads with the store's test controls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pattern_defs import (
    CALLS,
    AllThree,
    Double,
    Filtered,
    Flattened,
    Indexed,
    Mapped,
    Titles,
    Window,
)
from support import arun, coordinator, run_list, turns

from cells import MemoryStore, Outcome
from runner import PatternError, Runtime, pattern
from runner import _docs as docs
from runner._lists import child_link, element_keys
from scheduler import NodeError

# --------------------------------------------------------------------------- identity


def test_element_keys_link_by_target_and_occurrence_inline_by_position() -> None:
    from cells import Link

    a, b = Link("s", "a"), Link("s", "b")
    user_a = Link("s", "a", "user")
    keys = element_keys([a, 7, b, a, user_a])
    assert [(a, 0), (1,), (b, 0), (a, 1), (user_a, 0)] == keys
    containers = {child_link("map", Link("s", "c"), k).id for k in keys}
    assert 5 == len(containers)  # every occurrence, position and scope: its own child


def test_S46_linked_elements_keep_their_child_when_they_move() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(n) for n in "ABCX"]
            tx = rt.edit()
            for cell, v in zip(cells, (1, 2, 3, 99), strict=True):
                cell.with_tx(tx).set(v)
            await tx.commit()
            a, b, c, x = (cell.link() for cell in cells)
            items, res = await run_list(rt, Mapped, [a, b, c])
            assert [2, 4, 6] == await res.key("out").pull()
            before = CALLS["double"]
            items.set([a, x, b, c])
            assert [2, 198, 4, 6] == await res.key("out").pull()
            assert 1 == CALLS["double"] - before  # only X's element computation ran

    arun(main)


def test_S47_inline_values_are_identified_by_position() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            before = CALLS["double"]
            items.set([1, 99, 2, 3])
            assert [2, 198, 4, 6] == await res.key("out").pull()
            assert 3 == CALLS["double"] - before  # positions 1, 2 changed; 3 is new

    arun(main)


@pytest.mark.parametrize(
    ("pat", "expect"),
    [
        (Mapped, lambda xs: [2 * x for x in xs]),
        (Filtered, lambda xs: [x for x in xs if x % 2 == 0]),
        (Flattened, lambda xs: [x for x in xs for _ in range(x)]),
    ],
)
def test_S49_a_shrink_releases_exactly_the_removed_elements(pat: Any, expect: Any) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            values = list(range(1, 21))
            items, res = await run_list(rt, pat, values)
            assert expect(values) == await res.key("out").pull()
            full = len(rt.registrations())
            items.set(values[:5])
            assert expect(values[:5]) == await res.key("out").pull()
            assert full - 15 == len(rt.registrations())
            items.set(values)
            assert expect(values) == await res.key("out").pull()
            assert full == len(rt.registrations())
            rt._check()

    arun(main)


def test_S50_coordinator_teardown_releases_everything_it_holds() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Mapped, [1, 2, 3, 4, 5])
            await res.key("out").pull()
            assert 6 == len(rt.registrations())
            rt.stop(res)
            assert frozenset() == rt.registrations()
            assert set() == rt.runner.coordinators
            assert 0 == rt.scheduler.statistics()["nodes"]

    arun(main)


def test_S51_an_undefined_list_empties_the_output_and_releases_every_child() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Mapped, [1, 2])
            assert [2, 4] == await res.key("out").pull()
            items.delete()
            assert [] == await res.key("out").pull()
            assert 1 == len(rt.registrations())
            before = CALLS["double"]
            items.set([3, 4])
            assert [6, 8] == await res.key("out").pull()
            assert 2 == CALLS["double"] - before
            assert 3 == len(rt.registrations())

    arun(main)


def test_an_edit_inside_an_element_runs_only_that_element() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [{"title": f"note {i}"} for i in range(50)]
            items, res = await run_list(rt, Titles, notes)
            await res.key("out").pull()
            reconciles = coordinator(rt).reconciles
            before = CALLS["upper"]
            items.key(17, "title").set("edited")  # a UI edit: a path write
            out = await res.key("out").pull()
            assert "EDITED" == out[17]
            assert 1 == CALLS["upper"] - before
            assert reconciles == coordinator(rt).reconciles  # the coordinator did not run

    arun(main)


def test_a_new_value_of_an_inline_scalar_runs_only_its_element_in_map_and_flat_map() -> None:
    # The coordinator reads an inline scalar's position only for its kind (issue 14):
    # a new value re-runs that element's child, never the coordinator's walk.
    async def main() -> None:
        async with Runtime() as rt:
            cases: list[tuple[Any, str, Callable[[list[int]], list[int]]]] = [
                (Mapped, "double", lambda xs: [2 * x for x in xs]),
                (Flattened, "repeat", lambda xs: [y for x in xs for y in [x] * x]),
            ]
            for pat, fn, expect in cases:
                values = list(range(1, 41))
                items, res = await run_list(rt, pat, values, name=fn)
                assert expect(values) == await res.key("out").pull()
                reconciles = {c: c.reconciles for c in rt.runner.coordinators}
                before = CALLS[fn]
                items.key(17).set(3)
                values[17] = 3
                assert expect(values) == await res.key("out").pull()
                assert 1 == CALLS[fn] - before
                if pat is Mapped:  # flat_map's runs again to rebuild its output
                    assert reconciles == {c: c.reconciles for c in rt.runner.coordinators}

    arun(main)


def test_an_inline_scalar_replaced_by_a_link_becomes_a_linked_element() -> None:
    # Same length, one position changes kind: the coordinator must key it anew.
    async def main() -> None:
        async with Runtime() as rt:
            e = rt.get_cell("e")
            e.set(10)
            items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            reconciles = coordinator(rt).reconciles
            items.key(1).set(e.link())
            assert [2, 20, 6] == await res.key("out").pull()
            assert reconciles + 1 == coordinator(rt).reconciles
            expected = {
                child_link("map", coordinator(rt).container, k).key(rt.identity)
                for k in element_keys([1, e.link(), 3])
            }
            assert expected <= rt.registrations()
            e.set(11)  # the element now follows its cell
            assert [2, 22, 6] == await res.key("out").pull()

    arun(main)


def test_an_insert_or_removal_over_inline_scalars_costs_the_same_at_any_length() -> None:
    # Issue 14 item 5: the coordinator reads the kinds of the elements once, not each
    # position, and keys inline scalars by element id: an insert at the front or a
    # removal from the middle runs one reconcile by id, sets up only the new element,
    # and compares as many readers at 500 elements as at 50. An inserted link is a
    # linked element (its kind is seen at the insert); an element that changes type
    # runs the coordinator again.
    async def main() -> None:
        costs = []
        for n in (50, 500):
            async with Runtime() as rt:
                e = rt.get_cell("e")
                e.set(10)
                values = list(range(n))
                items, res = await run_list(rt, Mapped, values)
                assert [2 * x for x in values] == await res.key("out").pull()
                index = rt.runner.scheduler.index
                start, before = index.comparisons, CALLS["double"]
                await items.insert(0, 7)
                await items.remove(n // 2)
                values.insert(0, 7)
                del values[n // 2]
                assert [2 * x for x in values] == await res.key("out").pull()
                assert 1 == CALLS["double"] - before  # the new element only
                costs.append(index.comparisons - start)
                reconciles = coordinator(rt).reconciles
                await items.insert(0, e.link())
                assert [20, *(2 * x for x in values)] == await res.key("out").pull()
                e.set(11)  # the inserted element follows its cell
                assert [22, *(2 * x for x in values)] == await res.key("out").pull()
                assert reconciles + 1 == coordinator(rt).reconciles
                await items.key(3).set(5)  # a new value of the same type
                assert 10 == (await res.key("out").pull())[3]
                assert reconciles + 1 == coordinator(rt).reconciles
                await items.key(3).set("5")  # a scalar becomes a scalar of another type
                assert "55" == (await res.key("out").pull())[3]
                assert reconciles + 2 == coordinator(rt).reconciles
        assert costs[0] == costs[1]

    arun(main)


def test_a_filter_over_inline_scalars_shows_their_new_values() -> None:
    # A filter's output holds the elements themselves: a new value whose verdict is
    # unchanged must still reach the output.
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Filtered, [2, 3, 4])
            assert [2, 4] == await res.key("out").pull()
            items.key(0).set(6)  # still even
            assert [6, 4] == await res.key("out").pull()

    arun(main)


def open_note(note: Any) -> bool:
    return bool(note["open"])


@pattern
def OpenNotes(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(open_note)}


def test_a_filter_over_inline_dicts_shows_an_edit_that_keeps_the_verdict() -> None:
    # The output holds the element itself: a field edited inside a kept element must
    # reach it although the element's verdict (its child's result) did not change.
    async def main() -> None:
        async with Runtime() as rt:
            notes = [{"open": True, "t": "a"}, {"open": False, "t": "b"}]
            items, res = await run_list(rt, OpenNotes, notes)
            assert [{"open": True, "t": "a"}] == await res.key("out").pull()
            items.key(0, "t").set("A")
            assert [{"open": True, "t": "A"}] == await res.key("out").pull()
            items.key(1, "open").set(True)
            assert [{"open": True, "t": "A"}, {"open": True, "t": "b"}] == await res.key(
                "out"
            ).pull()

    arun(main)


def test_reversing_a_list_of_links_runs_no_child_with_index_free_ops() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(("e", i)) for i in range(6)]
            tx = rt.edit()
            for i, c in enumerate(cells):
                c.with_tx(tx).set(i)
            await tx.commit()
            links = [c.link() for c in cells]
            items, res = await run_list(rt, Mapped, links)
            assert [0, 2, 4, 6, 8, 10] == await res.key("out").pull()
            before = CALLS["double"]
            items.set(list(reversed(links)))
            assert [10, 8, 6, 4, 2, 0] == await res.key("out").pull()
            assert 0 == CALLS["double"] - before

    arun(main)


def test_common_ends_finds_the_shared_prefix_and_suffix() -> None:
    from runner._lists import common_ends

    old = list(range(100))
    assert (100, 0) == common_ends(old, list(old))
    assert (0, 100) == common_ends(old, [-1, *old])  # insert at the front
    assert (37, 62) == common_ends(old, old[:37] + old[38:])  # remove one
    assert (0, 0) == common_ends(old, old[::-1])
    assert (3, 0) == common_ends([1, 2, 3], [1, 2, 3, 4])
    assert (1, 1) == common_ends([1, 1], [1, 9, 1])  # never overlapping


def test_cell_insert_and_remove_on_a_map_of_links_run_only_the_changed_element() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(("e", i)) for i in range(40)]
            tx = rt.edit()
            for i, c in enumerate(cells):
                c.with_tx(tx).set(i)
            await tx.commit()
            links = [c.link() for c in cells[:30]]
            items, res = await run_list(rt, Mapped, links)
            assert [2 * i for i in range(30)] == await res.key("out").pull()
            registrations = len(rt.registrations())
            before = CALLS["double"]
            items.insert(0, cells[35].link())
            items.insert(10, cells[36].link())
            assert [70] + [2 * i for i in range(9)] + [72] + [2 * i for i in range(9, 30)] == (
                await res.key("out").pull()
            )
            assert 2 == CALLS["double"] - before
            assert registrations + 2 == len(rt.registrations())
            items.remove(10)
            items.remove(0)
            items.remove(29)
            assert [2 * i for i in range(29)] == await res.key("out").pull()
            assert 2 == CALLS["double"] - before
            assert registrations - 1 == len(rt.registrations())
            rt._check()

    arun(main)


def test_a_repeated_link_renumbers_its_occurrences_after_an_insert() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            a, b = rt.get_cell("a"), rt.get_cell("b")
            tx = rt.edit()
            a.with_tx(tx).set(1)
            b.with_tx(tx).set(2)
            await tx.commit()
            la, lb = a.link(), b.link()
            items, res = await run_list(rt, Mapped, [la, lb, la, lb])
            assert [2, 4, 2, 4] == await res.key("out").pull()
            for index, link in ((1, la), (0, lb), (5, la), (2, lb)):
                items.insert(index, link)
                await res.key("out").pull()
                rt._check()
            items.remove(3)
            values = [1 if x == la else 2 for x in _raw(rt, items)]
            assert [2 * v for v in values] == await res.key("out").pull()
            container = docs.internal_link(res.link(), 0)
            expected = {rt.key(res)} | {
                child_link("map", container, k).key(rt.identity)
                for k in element_keys(_raw(rt, items))
            }
            assert expected == rt.registrations()

    arun(main)


def _raw(rt: Runtime, cell: Any) -> Any:
    return rt.replica.visible(cell.doc_key)["value"]


def test_an_op_that_reads_index_reruns_when_its_index_changes() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(("e", i)) for i in range(3)]
            tx = rt.edit()
            for i, cell in enumerate(cells):
                cell.with_tx(tx).set(i * 10)
            await tx.commit()
            a, b, c = (x.link() for x in cells)
            items, res = await run_list(rt, Indexed, [a, b, c])
            assert [[0, 0], [10, 1], [20, 2]] == await res.key("out").pull()
            before = CALLS["at"]
            items.set([b, a, c])
            assert [[10, 0], [0, 1], [20, 2]] == await res.key("out").pull()
            assert 2 == CALLS["at"] - before  # a and b moved; c kept its index

    arun(main)


def test_filter_is_dense_over_the_original_elements_and_flat_map_flattens() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            e = rt.get_cell("e")
            e.set(4)
            _items, res = await run_list(rt, AllThree, [1, e.link(), 3, 0, 2])
            out = await res.pull()
            assert [2, 8, 6, 0, 4] == out["doubled"]
            assert [4, 0, 2] == out["evens"]
            assert [1, 4, 4, 4, 4, 3, 3, 3, 2, 2] == out["repeated"]
            raw = res.key("evens").resolve().get()
            assert 3 == len(raw)
            e.set(5)  # the linked element stops being even
            assert [0, 2] == await res.key("evens").pull()

    arun(main)


def test_flat_map_counts_a_scalar_as_one_item() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Flattened, [2, "x", None, -1])
            assert [2, 2, "x", -1] == await res.key("out").pull()

    arun(main)


def test_S64_a_genuine_steady_state_shrink_converges() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(("s", i)) for i in range(3)]
            tx = rt.edit()
            for c in cells:
                c.with_tx(tx).set(2)
            await tx.commit()
            _items, res = await run_list(rt, Filtered, [c.link() for c in cells])
            assert [2, 2, 2] == await res.key("out").pull()
            cells[1].set(3)
            assert [2, 2] == await res.key("out").pull()

    arun(main)


def test_a_child_opened_as_a_page_survives_its_elements_removal() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Mapped, [1, 2, 3])
            await res.key("out").pull()
            # The container's slot 1 holds a link to the element's result: start follows it.
            # (Starting `res.key("out", 1)` would start `res` itself: a sub-path of a
            # result starts the whole result.)
            page = res.key("out").resolve().key(1)
            assert await rt.start(page) is True
            (key,) = rt.lifetimes()
            items.set([1, 3])
            assert [2, 6] == await res.key("out").pull()
            assert key in rt.registrations()
            rt.stop(res)
            assert {key} == rt.registrations()

    arun(main)


def test_a_rescoped_element_is_a_new_element() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            space = rt.get_cell("shared")
            user = rt.get_cell("shared", scope="user")
            tx = rt.edit()
            space.with_tx(tx).set(1)
            user.with_tx(tx).set(5)
            await tx.commit()
            items, res = await run_list(rt, Mapped, [space.link()])
            assert [2] == await res.key("out").pull()
            first = rt.registrations()
            items.set([user.link()])  # same id and path, another scope
            assert [10] == await res.key("out").pull()
            after = rt.registrations()
            assert 2 == len(after) and first != after  # the old child was released

    arun(main)


def test_element_children_are_the_same_on_another_runtime_and_after_restart() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one, Runtime(store) as two:
            _items, res = await run_list(one, Mapped, [1, 2, 3])
            await res.key("out").pull()
            await one.idle()
            other = two.get_cell("r")
            assert await two.start(other) is True
            assert [2, 4, 6] == await other.key("out").pull()
            assert one.registrations() == two.registrations()

    arun(main)


def test_ops_are_checked_when_the_pattern_is_traced() -> None:
    @pattern
    def TwoArgs(element, other):  # type: ignore[no-untyped-def]
        return element

    @pattern
    def BadOp(items):  # type: ignore[no-untyped-def]
        return items.map(TwoArgs)

    @pattern
    def NotAPattern(items):  # type: ignore[no-untyped-def]
        return items.filter("x")  # neither a pattern nor a function (issue 18 item 4)

    with pytest.raises(PatternError, match=r"must take `element` and optionally `index`"):
        BadOp.graph  # noqa: B018
    with pytest.raises(PatternError, match="the op must be a @pattern"):
        NotAPattern.graph  # noqa: B018


# --------------------------------------------------------------------------- setup debt
#
# These hold verdicts with only the coordinator demanded (its children are not live),
# so each structural change makes exactly two commits: the list write, then the
# reconcile. Rejections are delivered with `pump()` and the bookkeeping inspected
# before the coordinator runs again.


def entries(rt: Runtime) -> dict[Any, Any]:
    (state,) = coordinator(rt).states.values()
    return state.entries


def test_S57_a_stale_basis_keeps_the_bookkeeping_but_owes_the_writes() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            items, res = await run_list(rt, Mapped, [1])
            assert [2] == await res.key("out").pull()
            rt.scheduler.demand(coordinator(rt).node)
            with store.testing.hold_verdicts() as gate:
                items.set([1, 2])
                rt.settle()
                # held: the list write, the reconcile, the new child's first computation
                assert 3 == gate.waiting()
                gate.accept(0)  # the list write
                gate.reject(0, Outcome.STALE_BASIS)  # the reconcile that set up element 2
                rt.replica.pump()
                assert [False, True] == [e.owed for e in entries(rt).values()]
                assert 3 == len(rt.registrations())  # kept: the re-run reuses it
            await rt.idle()
            assert not any(e.owed for e in entries(rt).values())
            assert [2, 4] == await res.key("out").pull()
            rt._check()

    arun(main)


@pytest.mark.parametrize("durable", ["later", "earlier"])
def test_S58_only_the_latest_issuer_restores_the_debt(durable: str) -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            cells = [rt.get_cell(("e", i)) for i in range(2)]
            tx = rt.edit()
            for i, c in enumerate(cells):
                c.with_tx(tx).set(i)
            await tx.commit()
            a, b = (c.link() for c in cells)
            items, res = await run_list(rt, Indexed, [a, b])
            await res.key("out").pull()
            rt.scheduler.demand(coordinator(rt).node)
            with store.testing.hold_verdicts() as gate:
                items.set([b, a])
                rt.settle()  # X1 issues both elements again (their indices changed)
                items.set([a, b])
                rt.settle()  # X2 issues both again
                assert 4 == gate.waiting()  # list 1, X1, list 2, X2
                gate.accept(0)  # list 1
                if durable == "later":
                    gate.accept(1)  # list 2
                    gate.accept(1)  # X2 is durable ...
                    gate.reject(0, Outcome.PERMANENT)  # ... then X1 fails: nothing owed
                else:
                    gate.accept(0)  # X1 is durable ...
                    gate.accept(0)  # list 2
                    gate.reject(0, Outcome.PERMANENT)  # ... then X2, the latest, fails
                rt.replica.pump()
                owed = [e.owed for e in entries(rt).values()]
                assert ([False, False] if durable == "later" else [True, True]) == owed
            await rt.idle()
            assert [[0, 0], [1, 1]] == await res.key("out").pull()
            assert not any(e.owed for e in entries(rt).values())
            rt._check()

    arun(main)


def test_S31_a_mapped_element_survives_an_aborted_child_setup() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            items, res = await run_list(rt, Mapped, [])
            assert [] == await res.key("out").pull()
            rt.scheduler.demand(coordinator(rt).node)
            with store.testing.hold_verdicts() as gate:
                items.set([1])
                rt.settle()
                gate.accept(0)  # the list write
                gate.reject(0, Outcome.ABORTED)  # the first element setup fails for good
                rt.replica.pump()
                assert {} == entries(rt)  # created by the failed reconcile: undone
                assert 1 == len(rt.registrations())  # and its child released
            await rt.idle()
            assert [2] == await res.key("out").pull()
            rt._check()

    arun(main)


def test_S56_a_definitive_failure_undoes_only_its_own_bookkeeping() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            cells = [rt.get_cell(("e", i)) for i in range(3)]
            tx = rt.edit()
            for i, cell in enumerate(cells):
                cell.with_tx(tx).set(i)
            await tx.commit()
            a, b, c = (x.link() for x in cells)
            items, res = await run_list(rt, Indexed, [a, b])
            await res.key("out").pull()
            rt.scheduler.demand(coordinator(rt).node)
            count = len(rt.registrations())
            with store.testing.hold_verdicts() as gate:
                items.set([c, b, a])  # creates c; moves a from 0 to 2
                rt.settle()
                gate.accept(0)
                gate.reject(0, Outcome.PERMANENT)
                rt.replica.pump()
                by_target = {k[0].id: e for k, e in entries(rt).items()}
                assert {a.id, b.id} == set(by_target)  # c's entry dropped ...
                assert count == len(rt.registrations())  # ... and its child released
                assert 0 == by_target[a.id].index  # a's move undone
                assert 1 == by_target[b.id].index
            await rt.idle()
            assert [[2, 0], [1, 1], [0, 2]] == await res.key("out").pull()
            rt._check()

    arun(main)


def test_one_failing_release_does_not_keep_its_siblings_alive() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Mapped, [1, 2, 3])
            await res.key("out").pull()
            runner = rt.runner
            real = runner.release
            refusing: list[Any] = []

            def flaky(key: Any, token: Any = None, *, why: str = "release") -> bool:
                if not refusing:
                    refusing.append(key)
                if key == refusing[0]:
                    raise RuntimeError("this child refuses to go")
                return real(key, token, why=why)

            rt.scheduler.demand(coordinator(rt).node)
            runner.release = flaky  # type: ignore[method-assign]
            items.set([])
            rt.settle()  # the coordinator's failure is recorded, not raised at the caller
            (record,) = rt.errors()
            assert isinstance(record.error, NodeError) and "1 releases failed" in record.message
            runner.release = real  # type: ignore[method-assign]
            assert 2 == len(rt.registrations())  # the parent and the one that refused
            assert 1 == len(entries(rt))  # its entry stays, so a later reconcile retries
            items.set([5])
            assert [10] == await res.key("out").pull()
            assert 2 == len(rt.registrations())

    arun(main)


# --------------------------------------------------------------------------- cold resume


def test_S62_a_cold_runtime_never_clears_the_container_while_its_input_loads() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            items, res = await run_list(one, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            await one.idle()
        container = docs.internal_link(res.link(), 0)
        async with Runtime(store) as two:
            cold = two.get_cell("r")
            seen: list[Any] = []
            with store.testing.hold_loads(items.doc_key) as gate:
                started = two.start(cold)  # held at the list pre-sync: the input loads
                cancel = cold.key("out").sink(seen.append)
                for _ in range(10):
                    await asyncio.sleep(0)
                assert 1 <= gate.waiting() and not started.done()
                durable = store.read_durable(container.key(two.identity))
                assert 3 == len(durable["value"])  # not cleared while the input loads
            assert await started is True
            await two.idle()
            assert [2, 4, 6] == await cold.key("out").pull()
            assert all(v == [2, 4, 6] for v in seen), seen  # never [] on the way
            assert 4 == len(two.registrations())
            cancel()
            two._check()

    arun(main)


def test_S63_a_cold_filter_never_republishes_while_element_results_load() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            _items, res = await run_list(one, Filtered, [2, 3, 4])
            assert [2, 4] == await res.key("out").pull()
            await one.idle()
            container = one.runner.coordinators.copy().pop()
            children = [e.child for s in container.states.values() for e in s.entries.values()]
        async with Runtime(store) as two:
            cold = two.get_cell("r")
            held = [c.key(two.identity) for c in children]
            seen: list[Any] = []
            with store.testing.hold_loads(*held):
                started = two.start(cold)  # held while the element results load
                cancel = cold.key("out").sink(seen.append)
                for _ in range(10):
                    await asyncio.sleep(0)
                assert not started.done()
            assert await started is True
            await two.idle()
            assert [2, 4] == await cold.key("out").pull()
            assert seen and all(v == [2, 4] for v in seen), seen  # never partial or empty
            cancel()

    arun(main)


# --------------------------------------------------------------------------- identities


def test_each_principal_keeps_its_own_coordinator_and_children() -> None:
    async def main() -> None:
        async with Runtime(principal="service") as rt:
            alice, bob = rt.session("alice", "a1"), rt.session("bob", "b1")
            outs = []
            for who, values in ((alice, [1, 2]), (bob, [10, 20, 30])):
                items = who.get_cell("todo", scope="user")
                res = who.get_cell("board", scope="user")
                tx = who.edit()
                items.with_tx(tx).set(values)
                who.run(tx, Mapped, {"items": items}, res)
                assert (await tx.commit()).ok
                outs.append(res)
            assert [[2, 4], [20, 40, 60]] == [await r.key("out").pull() for r in outs]
            assert 2 + 2 + 3 == len(rt.registrations())  # per scope instance
            a_keys = {k for k in rt.registrations() if k.principal == "alice"}
            assert 3 == len(a_keys)
            rt._check()

    arun(main)


def test_S17_a_map_element_being_opened_survives_its_parents_teardown() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Mapped, [1, 2, 3])
            await res.key("out").pull()
            slot = res.key("out").resolve().key(1)
            started = rt.start(slot)  # in flight
            rt.stop(res)
            assert await started is True
            assert 1 == len(rt.registrations()) == len(rt.lifetimes())
            rt._check()

    arun(main)


def test_S17_an_element_start_held_at_its_pattern_load_claims_when_it_settles() -> None:
    """A start that found an element child unregistered, then waits on the child's pattern
    load while the list result's coordinator launches that child, has claimed nothing yet:
    "The lifetime is claimed when the start settles". In the gap the child runs for its
    coordinator alone, and "a release declines while one is in flight": the list dropping
    the element leaves the child to the start, which claims it when the load answers.
    (Found by the ownership machine, whose model claimed at once: it took the
    coordinator's launch before the load answer that preceded it.)"""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            slot = res.key("out").resolve().key(2)
            child = rt.key(slot.resolve())
            rt.stop(res)
            await rt.idle()
            assert frozenset() == rt.registrations()
            gate = store.testing.hold_loads(
                docs.pattern_link(rt.space, Double.identity).key(rt.identity)
            )
            started = rt.start(slot)  # finds the child unregistered; its pattern load waits
            await turns()
            assert 1 == gate.waiting()
            assert await rt.start(res) is True  # its coordinator launches the child
            assert [2, 4, 6] == await res.key("out").pull()
            # The gap: the coordinator's child, and a start in flight that claimed nothing.
            assert child in rt.registrations()
            assert frozenset({rt.key(res)}) == rt.lifetimes()
            assert not started.done()
            items.set([1, 2])  # the coordinator's release of the child declines
            assert [2, 4] == await res.key("out").pull()
            assert child in rt.registrations()
            assert child not in rt.lifetimes()
            gate.release()
            assert await started is True  # settled: it claims the lifetime now
            await rt.idle()
            assert {rt.key(res), child} == rt.lifetimes()
            assert child in rt.registrations()  # a page now: the list no longer holds it
            assert 1 + 3 == len(rt.registrations())  # the list result, two elements, the page
            rt._check()

    arun(main)


def test_S55_retained_children_stay_bounded_while_a_window_slides() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            rows, start, res = rt.get_cell("rows"), rt.get_cell("start"), rt.get_cell("w")
            tx = rt.edit()
            rows.with_tx(tx).set(list(range(20)))
            start.with_tx(tx).set(0)
            rt.run(tx, Window, {"rows": rows, "start": start}, res)
            assert (await tx.commit()).ok
            cancel = res.key("rows").sink(lambda _v: None)
            await rt.idle()
            settled = len(rt.registrations())
            nodes = rt.scheduler.statistics()["nodes"]
            assert 1 + 5 * 2 == settled  # the window, and a Row plus its Child per row
            for i in range(10):
                start.set(10 if i % 2 == 0 else 0)
                await rt.idle()
                assert settled == len(rt.registrations())
                assert nodes == rt.scheduler.statistics()["nodes"]
            assert [{"inner": {"doubled": 0}, "same": 0}] == (await res.key("rows").pull())[:1]
            cancel()
            rt._check()

    arun(main)


def test_a_cold_start_pre_syncs_every_element_child_as_setup_derives_it() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            _items, res = await run_list(one, Mapped, [1, 2])
            assert [2, 4] == await res.key("out").pull()
            await one.idle()
            (coord,) = one.runner.coordinators
            children = [e.child for s in coord.states.values() for e in s.entries.values()]
        async with Runtime(store) as two:
            arg = docs.argument_link(children[1]).key(two.identity)
            with store.testing.hold_loads(arg) as gate:
                started = two.start(two.get_cell("r"))
                for _ in range(10):
                    await asyncio.sleep(0)
                assert 1 == gate.waiting()  # held at the element pre-sync
                assert not started.done()
                two.stop(two.get_cell("r"))
            assert await started is False  # a stop reaches it there too
            assert frozenset() == two.registrations()
            assert await two.start(two.get_cell("r")) is True
            assert [2, 4] == await two.get_cell("r").key("out").pull()

    arun(main)


def test_a_reconcile_of_an_undefined_list_that_fails_for_good_runs_again() -> None:
    """Found by the lists soak (shrunk): hold; make the list undefined (twice); reject
    the first delete as stale; reject the map's reconcile (writing []) for good. The
    list stays undefined, so the map must run again and show [] (it showed [0, 2])."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            one = rt.get_cell("one")
            one.set(1)
            items, res = await run_list(rt, Mapped, [0, one.link()])
            cancel = res.key("out").sink(lambda _v: None)
            await rt.idle()
            with store.testing.hold_verdicts() as gate:
                items.delete()
                rt.settle()
                items.delete()  # a shadow delete: the first one is still pending
                rt.settle()
                gate.reject(0, Outcome.STALE_BASIS)  # the first delete
                gate.reject(0, Outcome.PERMANENT)  # the map's reconcile writing []
                rt.settle()
            await rt.idle()
            assert [] == await res.key("out").pull()
            cancel()

    arun(main)

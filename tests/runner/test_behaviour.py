"""The runner behaves as the reference system does (issue 15): element results named by
`resolve()`, setup switching a running pattern, computations returning many children,
sends that bring their stream up to date, open pages that compute and pin their element.

Races hold verdicts or loads; time comes from a `ManualClock`; nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest
from pattern_defs import Child, Counter, Double, Filtered, Mapped
from support import arun, run_list, turns

from cells import Cell, CellweaveError, MemoryStore
from runner import Runtime, handler, lift, navigate_to, pattern
from runner import _docs as docs


@handler
def open_slot(event, cards):  # type: ignore[no-untyped-def]
    return navigate_to(cards.key(event["i"]), follow=event.get("follow", False))


def size(xs: Any) -> int:
    return len(xs or [])


@pattern
def Shelf(items):  # type: ignore[no-untyped-def]
    return {"count": lift(size)(items), "rows": items.map(Double)}


@handler
def set_value(event, target):  # type: ignore[no-untyped-def]
    target.set(event["v"])


@pattern
def Settable(element):  # type: ignore[no-untyped-def]
    return {"value": element, "set": set_value(target=element)}


@pattern
def SettableList(items):  # type: ignore[no-untyped-def]
    return {"rows": items.map(Settable)}


def kids_of(values: Any) -> Any:
    return [Child(value=v) for v in values or []]


def named_kids(values: Any) -> Any:
    return {"first": Child(value=values[0]), "rest": [Child(value=v) for v in values[1:]]}


@pattern
def Fleet(items):  # type: ignore[no-untyped-def]
    return {"kids": lift(kids_of)(items), "named": lift(named_kids)(items)}


RUNS: dict[str, int] = {"old": 0, "new": 0}


def old_double(v: Any) -> Any:
    RUNS["old"] += 1
    return (v or 0) * 2


def new_triple(v: Any) -> Any:
    RUNS["new"] += 1
    return (v or 0) * 3


@pattern
def Before(value):  # type: ignore[no-untyped-def]
    doubled = lift(old_double)(value)
    kept, dropped = Child(value=value), Child(value=value)
    return {"a": doubled, "kept": kept, "dropped": dropped, "bump": open_slot(cards=value)}


@pattern
def After(value):  # type: ignore[no-untyped-def]
    return {"b": lift(new_triple)(value)}


@handler
def open_child_at(event, items):  # type: ignore[no-untyped-def]
    return navigate_to(Child(value=items.key(event["i"])), follow=event.get("follow", False))


@pattern
def ChildOpener(items):  # type: ignore[no-untyped-def]
    return {"open": open_child_at(items=items)}


@pattern
def SlotBoard(items):  # type: ignore[no-untyped-def]
    cards = items.map(Double)
    return {"out": cards, "open": open_slot(cards=cards)}


# --------------------------------------------------------------------------- item 1


def test_map_element_resolve_names_the_element_result_when_its_op_returns_a_bare_value() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            element = res.key("out", 1).resolve()
            assert 4 == element.get()
            # The element's result document (it runs the op), not the lift's output.
            doc = rt.replica.visible(element.doc_key)
            assert isinstance(doc, dict) and docs.PATTERN in doc
            assert () == element.path
            assert await rt.start(element) is True
            assert rt.key(element) in rt.lifetimes()
            assert await rt.open_page(element) is True
            assert [element] == rt.pages()

    arun(main)


# --------------------------------------------------------------------------- item 11


async def _linked_map(rt: Runtime) -> tuple[Any, Any, list[Any]]:
    """`Mapped` over a list of links to cells A, B, C (elements keyed by their target)."""
    cells = [rt.get_cell(f"v-{n}") for n in "ABC"]
    tx = rt.edit()
    for c, v in zip(cells, (1, 2, 3), strict=True):
        c.with_tx(tx).set(v)
    assert (await tx.commit()).ok
    items, res = await run_list(rt, Mapped, [c.link() for c in cells], name="pinned")
    assert [2, 4, 6] == await res.key("out").pull()
    return items, res, cells


def test_open_page_through_a_list_slot_pins_the_element_it_holds_also_after_a_restart(
    tmp_path: Any,
) -> None:
    from cells import SQLiteStore

    path = tmp_path / "pin.db"

    async def first() -> str:
        async with Runtime(SQLiteStore(path)) as rt:
            items, res, cells = await _linked_map(rt)
            slot = res.key("out").resolve().key(1)  # the container's slot 1: B's element
            element: Cell = slot.resolve()
            assert await rt.open_page(slot) is True
            assert [element] == rt.pages()
            await items.set([cells[0].link(), cells[2].link()])  # B leaves the list
            assert [2, 6] == await res.key("out").pull()
            assert 6 == slot.get()  # the slot holds C's element now ...
            (page,) = rt.pages()
            assert page == element  # ... and the page is still B's
            assert 4 == await page.pull()
            return element.id

    async def second(pinned: str) -> None:
        async with Runtime(SQLiteStore(path)) as rt:
            (resumed,) = await rt.resume()
            assert pinned == resumed.id
            assert 4 == await resumed.pull()

    arun(lambda: second(arun(first)))


def test_open_page_with_follow_runs_what_the_slot_holds() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res, cells = await _linked_map(rt)
            slot = res.key("out").resolve().key(1)
            assert await rt.open_page(slot, follow=True) is True
            assert [slot] == rt.pages()
            await items.set([cells[0].link(), cells[2].link()])
            await rt.idle()
            assert [slot] == rt.pages()
            assert 6 == await rt.pages()[0].pull()  # the slot's element now: C's
            rt.stop(slot)
            assert [] == rt.pages()

    arun(main)


def test_stopping_a_pinned_page_through_its_slot_closes_it() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res, _cells = await _linked_map(rt)
            slot = res.key("out").resolve().key(0)
            element = slot.resolve()
            assert await rt.open_page(slot) is True
            rt.stop(slot)
            assert [] == rt.pages()
            assert rt.key(element) not in rt.lifetimes()

    arun(main)


def test_navigate_to_a_list_slot_pins_the_element_and_follow_keeps_the_slot() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(f"w-{n}") for n in "ABC"]
            tx = rt.edit()
            for c, v in zip(cells, (1, 2, 3), strict=True):
                c.with_tx(tx).set(v)
            assert (await tx.commit()).ok
            items, res = await run_list(rt, SlotBoard, [c.link() for c in cells], name="nav")
            assert [2, 4, 6] == await res.key("out").pull()
            b_element = res.key("out", 1).resolve()
            rt.send(res.key("open"), {"i": 1})
            rt.send(res.key("open"), {"i": 1, "follow": True})
            await rt.idle()
            slot = res.key("out").resolve().key(1)
            assert {b_element, slot} == set(rt.pages())
            await items.set([cells[0].link(), cells[2].link()])
            await rt.idle()
            values = {str(page.link()): await page.pull() for page in rt.pages()}
            # The pinned page still runs B's element; the followed slot 1 holds C's now.
            assert {str(b_element.link()): 4, str(slot.link()): 6} == values

    arun(main)


# --------------------------------------------------------------------------- item 10


def test_an_open_page_is_demand_its_fields_and_list_rows_are_computed_while_it_is_open() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Shelf, [1, 2, 3], name="shelf")
            await rt.idle()
            assert {} == res.get()  # nothing reads it: nothing is computed
            assert await rt.open_page(res) is True
            await rt.idle()
            assert {"count": 3, "rows": [2, 4, 6]} == res.get()
            await items.set([5])
            await rt.idle()
            assert {"count": 1, "rows": [10]} == res.get()  # kept current while open
            rt.stop(res)
            assert {} == rt._pages_book.demand
            rt._check()

    arun(main)


def test_a_closed_page_is_no_longer_demand() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Shelf, [1, 2], name="shelf2")
            assert await rt.open_page(res) is True
            await rt.idle()
            assert {"count": 2, "rows": [2, 4]} == res.get()
            rt.stop(res)
            # Started again without a page: running, but read by nothing, so not computed.
            assert await rt.start(res) is True
            await items.set([7, 8, 9])
            await rt.idle()
            assert 2 == res.key("count").get()

    arun(main)


# --------------------------------------------------------------------------- items 4 and 6


async def _set_up_counter(rt: Runtime, name: str = "ctr") -> tuple[Any, Any]:
    count, res = rt.get_cell(f"{name}-count"), rt.get_cell(name)
    tx = rt.edit()
    count.with_tx(tx).set(0)
    rt.setup(tx, Counter, {"count": count}, res)
    assert (await tx.commit()).ok
    return count, res


def test_send_to_a_result_set_up_but_not_started_starts_it_and_delivers() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            count, res = await _set_up_counter(rt)
            assert rt.key(res) not in rt.registrations()
            rt.send(res.key("bump"), {})
            rt.send(res.key("bump"), {"by": 10})  # parked behind the same start, in order
            await rt.idle()
            assert 11 == count.get()
            assert rt.key(res) in rt.registrations()
            assert rt.key(res) in rt.lifetimes()  # started in its own right, as rt.start does
            rt._check()

    arun(main)


def test_send_to_a_list_element_handler_computes_the_path_to_its_stream() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(f"e-{n}") for n in "AB"]
            tx = rt.edit()
            for c, v in zip(cells, (1, 2), strict=True):
                c.with_tx(tx).set(v)
            assert (await tx.commit()).ok
            # Running, but nobody pulled its list: no element runs, no handler bound yet.
            _items, res = await run_list(rt, SettableList, [c.link() for c in cells], name="sl")
            assert {rt.key(res)} == rt.registrations()
            rt.send(res.key("rows", 1, "set"), {"v": 20})
            await rt.idle()
            assert 20 == cells[1].get()

    arun(main)


def test_send_to_a_list_element_handler_inside_a_page_opened_just_now() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(f"p-{n}") for n in "AB"]
            tx = rt.edit()
            for c, v in zip(cells, (1, 2), strict=True):
                c.with_tx(tx).set(v)
            page = rt.get_cell("sl-page")
            items = rt.get_cell("sl-page-items")
            items.with_tx(tx).set([c.link() for c in cells])
            rt.setup(tx, SettableList, {"items": items}, page)
            assert (await tx.commit()).ok
            assert await rt.open_page(page) is True
            rt.send(page.key("rows", 0, "set"), {"v": 10})  # before any pass computed rows
            await rt.idle()
            assert 10 == cells[0].get()

    arun(main)


def test_send_raises_only_when_there_really_is_no_handler() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            with pytest.raises(CellweaveError, match="no handler is bound"):
                rt.send(rt.get_cell("nothing here"), {})
            _count, res = await _set_up_counter(rt)
            with pytest.raises(CellweaveError, match="no handler is bound"):
                rt.send(res.key("count"), {})  # a run is there, but this is no stream
            await rt.idle()

    arun(main)


def test_send_after_the_run_stopped_is_dropped_like_the_events_queued_at_the_stop() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            count, res = await _set_up_counter(rt)
            assert await rt.start(res) is True
            rt.send(res.key("bump"), {})
            await rt.idle()
            assert 1 == count.get()
            queued = rt.scheduler.send(res.key("bump").resolve(), {})
            rt.stop(res)
            rt.send(res.key("bump"), {})  # no raise: dropped, as `queued` was
            await rt.idle()
            assert "dropped" == queued.status
            assert 1 == count.get()
            assert rt.key(res) not in rt.registrations()  # a send does not restart a stopped run

    arun(main)


def test_a_send_whose_result_cannot_start_fails_its_handle_and_is_recorded() -> None:
    """The error's homes are the send's handle and the runtime's record (issue 13 item
    9), not whoever awaits `idle()` next."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            _count, res = await _set_up_counter(rt)
        async with Runtime(store) as rt:
            res = rt.get_cell("ctr")
            await rt.replica.sync([res.doc_key])
            gate = store.testing.hold_loads(docs.argument_link(res.link()).key(rt.identity))
            sent = rt.send(res.key("bump"), {})
            assert "parked" == sent.status and sent.event_id is None
            await turns()
            gate.fail()
            await rt.idle()  # raises nothing
            with pytest.raises(CellweaveError, match="was dropped"):
                await sent
            (record,) = rt.errors()
            assert ("send", sent.error) == (record.kind, record.error)
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- item 3


def test_a_lift_returning_a_list_or_dict_of_pattern_instances_launches_each_as_a_child() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Fleet, [1, 2, 3], name="fleet")
            kids = [{"doubled": 2}, {"doubled": 4}, {"doubled": 6}]
            assert kids == await res.key("kids").pull()
            assert {"first": {"doubled": 2}, "rest": kids[1:]} == await res.key("named").pull()
            assert 1 + 3 + 3 == len(rt.registrations())
            third = res.key("kids", 2).resolve()
            assert 6 == third.key("doubled").get()
            assert await rt.open_page(third) is True  # a page on one child survives below
            second = rt.key(res.key("kids", 1).resolve())
            await items.set([5, 6])
            assert [{"doubled": 10}, {"doubled": 12}] == await res.key("kids").pull()
            await res.key("named").pull()
            # The child no longer returned at position 2 is released; its page keeps it.
            assert rt.key(third) in rt.registrations()
            assert 1 + 2 + 2 + 1 == len(rt.registrations())
            assert second in rt.registrations()  # position 1 still returned: kept
            rt.stop(res)
            assert {rt.key(third)} == rt.registrations()  # teardown released the others
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- item 2


def test_setup_with_another_pattern_on_a_running_result_switches_the_run() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            v, res = rt.get_cell("sw-v"), rt.get_cell("sw")
            tx = rt.edit()
            v.with_tx(tx).set(2)
            rt.run(tx, Before, {"value": v}, res)
            assert (await tx.commit()).ok
            assert await rt.open_page(res) is True  # a lifetime and a page of its own
            await rt.idle()
            assert 4 == res.key("a").get()
            kept = res.key("kept").resolve()
            dropped = rt.key(res.key("dropped").resolve())
            assert await rt.open_page(kept) is True  # a page on an old child
            reg = rt.registration(res)
            assert reg is not None
            tx = rt.edit()
            rt.setup(tx, After, {"value": v}, res)
            assert (await tx.commit()).ok
            await rt.idle()
            assert reg is rt.registration(res)  # the same registration (token, lifetime)
            assert After.identity == reg.pattern
            assert {"b": 6} == res.get()
            assert dropped not in rt.registrations()  # an old child: released
            assert rt.key(kept) in rt.registrations()  # ... unless a page holds it
            assert rt.key(res) in rt.lifetimes()
            assert {res, kept} == set(rt.pages())
            before = RUNS["old"]
            await v.set(5)
            await rt.idle()
            assert {"b": 15} == res.get()
            assert before == RUNS["old"]  # the old nodes are gone: they compute nothing
            with pytest.raises(CellweaveError, match="no handler is bound"):
                rt.send(res.key("bump"), {})  # After has no such stream
            rt._check()

    arun(main)


def test_setup_switch_between_list_patterns_releases_the_old_elements() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, Mapped, [1, 2, 3, 4], name="swl")
            assert [2, 4, 6, 8] == await res.key("out").pull()
            old_elements = rt.registrations() - {rt.key(res)}
            assert 4 == len(old_elements)
            tx = rt.edit()
            rt.setup(tx, Filtered, {"items": items}, res)
            assert (await tx.commit()).ok
            assert [2, 4] == await res.key("out").pull()
            assert not old_elements & rt.registrations()
            assert 1 + 4 == len(rt.registrations())  # the filter's own element runs
            rt._check()

    arun(main)


def test_navigate_to_a_new_page_on_a_list_slot_pins_its_argument_to_the_element() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            cells = [rt.get_cell(f"n-{n}") for n in "ABC"]
            tx = rt.edit()
            for c, v in zip(cells, (1, 2, 3), strict=True):
                c.with_tx(tx).set(v)
            assert (await tx.commit()).ok
            items, res = await run_list(rt, ChildOpener, [c.link() for c in cells], name="co")
            rt.send(res.key("open"), {"i": 1})
            rt.send(res.key("open"), {"i": 1, "follow": True})
            await rt.idle()
            assert [4, 4] == [await page.key("doubled").pull() for page in rt.pages()]
            await items.set([cells[0].link(), cells[2].link()])  # B leaves the list
            await rt.idle()
            pinned, followed = rt.pages()
            assert 4 == await pinned.key("doubled").pull()  # still B
            assert 6 == await followed.key("doubled").pull()  # position 1: C now

    arun(main)


def test_children_of_a_list_returning_lift_come_back_after_its_run_fails_for_good() -> None:
    from cells import Outcome

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            _items, res = await run_list(rt, Fleet, [1, 2], name="fleet-rb")
            await rt.idle()
            gate = store.testing.hold_verdicts()
            seen: list[Any] = []
            cancel = res.key("kids").sink(seen.append)  # the lift's first run: held
            assert gate.waiting() >= 1
            gate.reject(0, Outcome.ABORTED)  # its setup of the children never lands
            gate.release()
            await rt.idle()
            assert [{"doubled": 2}, {"doubled": 4}] == await res.key("kids").pull()
            kids = {rt.key(res.key("kids", i).resolve()) for i in (0, 1)}
            assert kids <= rt.registrations()
            assert any("rollback" in str(e) for e in rt.inspect()["trace"]["entries"])
            cancel()
            rt._check()

    arun(main)

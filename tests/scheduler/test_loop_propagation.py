"""Propagation on the running loop, first values, and what observers receive.

The loop is driven by hand: `await asyncio.sleep(0)` lets exactly the callbacks
queued so far run (a pass scheduled with `call_soon` among them); nothing sleeps
to synchronize.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

from cells import MISSING, MemoryStore, Space, read_value
from scheduler import NodeError, Scheduler


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def world(store: MemoryStore | None = None) -> tuple[Space, Scheduler]:
    sp = Space(store or MemoryStore(), "flow")
    return sp, Scheduler(sp.replica)


def doubler(sp: Space, sch: Scheduler, src: str, out: str) -> None:
    sch.derive(sp.cell(out), [sp.cell(src)], lambda v: (v or 0) * 2)


def test_a_write_reaches_sinks_after_the_current_callback_with_no_call() -> None:
    async def main() -> None:
        sp, sch = world()
        x = sp.cell("x")
        x.set(1)
        doubler(sp, sch, "x", "d")
        seen: list[Any] = []
        sch.sink(sp.cell("d"), seen.append)
        assert [2] == seen
        x.set(5)
        assert [2] == seen  # not inside the write: after the current callback
        await asyncio.sleep(0)
        assert [2, 10] == seen

    run(main)


def test_writes_in_one_callback_settle_in_one_pass_and_observers_see_only_the_last() -> None:
    async def main() -> None:
        sp, sch = world()
        x = sp.cell("x")
        x.set(1)
        doubler(sp, sch, "x", "d")
        seen: list[Any] = []
        sch.sink(sp.cell("d"), seen.append)
        passes, runs = sch.stats.passes, sch.stats.runs_computation
        for v in range(2, 12):
            x.set(v)
        await asyncio.sleep(0)
        assert [2, 22] == seen
        assert 1 == sch.stats.passes - passes
        assert 1 == sch.stats.runs_computation - runs  # zero unnecessary runs

    run(main)


def test_a_queued_event_is_handled_on_the_loop_with_no_call() -> None:
    async def main() -> None:
        sp, sch = world()
        items, add = sp.cell("items"), sp.cell("add")
        items.set([])

        def on_add(tx: Any, payload: Any) -> None:
            tx.write(items.doc_key, ("value",), [*read_value(tx, items.link()), payload])

        sch.add_handler(add, on_add, reads=[(items.doc_key, ("value",), False)])
        seen: list[Any] = []
        sch.sink(items, seen.append)
        sch.send(add, "milk")
        sch.send(add, "eggs")
        assert [[]] == seen
        await asyncio.sleep(0)
        # Each handling is its own settled state (handlers run one at a time).
        assert [[], ["milk"], ["milk", "eggs"]] == seen

    run(main)


def test_without_a_running_loop_settle_is_the_pump() -> None:
    sp, sch = world()
    x = sp.cell("x")
    x.set(1)
    seen: list[Any] = []
    sch.sink(x, seen.append)
    x.set(2)
    sp.replica.pump()
    assert [1] == seen
    sch.settle()
    assert [1, 2] == seen


def test_another_runtimes_commit_reaches_sinks_in_the_turn_it_is_integrated() -> None:
    async def main() -> None:
        store = MemoryStore()
        sp, sch = world(store)
        other = Space(store, "flow")
        sp.cell("x").set(1)
        await asyncio.sleep(0)
        doubler(sp, sch, "x", "d")
        seen: list[Any] = []
        sch.sink(sp.cell("d"), seen.append)
        assert [2] == seen
        other.cell("x").set(21)  # another session; its verdict and fan-out are posted
        await asyncio.sleep(0)  # the loop drains this replica's mailbox: one turn
        assert [2, 42] == seen

    run(main)


def test_a_failure_in_a_pass_on_the_loop_is_recorded_and_not_raised_into_the_loop() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        raised: list[Any] = []
        loop.set_exception_handler(lambda _loop, context: raised.append(context))
        sp, sch = world()
        x = sp.cell("x")
        x.set(1)
        out = sp.cell("out")
        sch.derive(out, [x], lambda v: 10 // v)
        seen: list[Any] = []
        sch.sink(out, seen.append)
        x.set(0)
        await asyncio.sleep(0)
        assert [] == raised
        assert ["computation"] == [r.kind for r in sch.errors()]
        assert isinstance(sch.errors()[0].error, NodeError)
        assert "ZeroDivisionError" in str(sch.errors()[0].error)
        assert [10, None] == seen  # the failing computation's output is absent

    run(main)


def test_a_sink_on_a_value_reached_through_a_link_gets_the_computed_value_first() -> None:
    # The sink's first run follows the link to a value whose writer was dormant:
    # the writer runs after it in the same pass; only the settled value is delivered.
    sp, sch = world()
    x, inner, outer = sp.cell("x"), sp.cell("inner"), sp.cell("outer")
    x.set(3)
    outer.set({"d": inner.link()})
    sch.derive(inner, [x], lambda v: v * 2)
    seen: list[Any] = []
    sch.sink(outer.key("d"), seen.append)
    assert [6] == seen
    shown: list[Any] = []
    sch.observe(outer).subscribe(shown.append)
    assert [{"d": 6}] == shown


def test_an_absent_value_is_delivered_as_none_and_absent_then_none_is_no_change() -> None:
    sp, sch = world()
    x = sp.cell("x")
    seen: list[Any] = []
    sch.sink(x, seen.append)
    x.set(None)
    sch.settle()
    x.set(4)
    sch.settle()
    x.delete()
    sch.settle()
    assert [None, 4, None] == seen
    assert all(v is not MISSING for v in seen)
    json.dumps(seen)


def test_a_value_that_changes_and_changes_back_in_one_pass_is_not_delivered() -> None:
    sp, sch = world()
    x = sp.cell("x")
    x.set(1)
    seen: list[Any] = []
    sch.sink(x, seen.append)
    x.set(2)
    x.set(1)
    sch.settle()
    assert [1] == seen


def test_a_sink_that_raises_is_recorded_and_the_rest_still_deliver() -> None:
    sp, sch = world()
    x = sp.cell("x")
    x.set(1)
    seen: list[Any] = []

    def bad(v: Any) -> None:
        if v == 2:
            raise ValueError("no twos")

    sch.sink(x, bad)
    sch.sink(x, seen.append)
    x.set(2)
    sch.settle()
    assert [1, 2] == seen
    assert ["effect"] == [r.kind for r in sch.errors()]
    assert "no twos" in str(sch.errors()[0].error)


def test_a_sink_created_inside_the_loop_attaches_the_replica_to_it() -> None:
    async def main() -> None:
        store = MemoryStore()
        sp = Space(store, "flow")  # made before any loop ran
        other = Space(store, "flow")
        sp.cell("x").set(1)
        sp.replica.pump()
        sch = Scheduler(sp.replica)  # made inside the loop: the mailbox drains here
        seen: list[Any] = []
        sch.sink(sp.cell("x"), seen.append)
        other.cell("x").set(2)
        await asyncio.sleep(0)
        assert [1, 2] == seen

    run(main)


def test_a_loop_closed_with_a_drain_queued_leaves_settle_the_pump_and_the_next_loop_works() -> None:
    # The loop the replica drained on is closed while a drain is queued on it (never
    # run): without a loop `settle()` is the pump again, and on the next loop another
    # session's commit reaches the sinks with no call, as on a replica that never had one.
    store = MemoryStore()
    sp, sch = world(store)
    other = Space(store, "flow")
    x = sp.cell("x")
    x.set(1)
    doubler(sp, sch, "x", "d")
    seen: list[Any] = []
    sch.sink(sp.cell("d"), seen.append)
    box = sp.replica.mailbox
    gone = asyncio.new_event_loop()
    box.attach(gone)
    x.set(2)  # its verdict is posted, and a drain queued on `gone`
    assert 1 == len(box)
    gone.close()
    x.set(3)
    assert [2] == seen
    sch.settle()
    assert [2, 6] == seen
    assert 0 == len(box)

    async def main() -> None:
        x.set(4)
        await asyncio.sleep(0)
        assert [2, 6, 8] == seen
        other.cell("x").set(21)  # reaches this replica through its mailbox only
        await asyncio.sleep(0)
        assert [2, 6, 8, 42] == seen

    run(main)

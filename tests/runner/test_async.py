"""Async lifts and handlers (issue 18 item 5).

An `async def` lift or handler does not hold up the pass: its result is
committed when its coroutine ends, in the transaction that holds what it read
when it started, so a result computed from inputs that changed meanwhile never
lands and the lift runs again. Stopping the run cancels its coroutines, a
stream's events are handled in order, `idle()` waits for the coroutines, and
errors go where a sync lift's or handler's go.

Every coroutine here waits at an `asyncio.Event` the test sets: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from support import arun, turns

from cells import MISSING
from runner import Runtime, handler, lift, pattern
from scheduler import HandlerError, NodeError

GATES: dict[Any, asyncio.Event] = {}
STARTED: list[Any] = []
CANCELLED: list[Any] = []


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    GATES.clear()
    STARTED.clear()
    CANCELLED.clear()
    log = logging.getLogger("cellweave")
    level = log.level
    log.setLevel(logging.CRITICAL)  # the error tests fail on purpose
    yield
    log.setLevel(level)


@contextlib.asynccontextmanager
async def opened() -> AsyncIterator[Runtime]:
    """A runtime closed at the end; every gate is opened first (a test that fails
    while a coroutine is held would otherwise wait for it until the watchdog)."""
    rt = Runtime()
    try:
        yield rt
    finally:
        GATES["all open"] = asyncio.Event()
        for event in GATES.values():
            event.set()
        await rt.aclose()


def gate(key: Any) -> asyncio.Event:
    if key not in GATES:
        GATES[key] = asyncio.Event()
        if "all open" in GATES:
            GATES[key].set()
    return GATES[key]


async def held_double(value: Any) -> Any:
    STARTED.append(value)
    try:
        await gate(value).wait()
    except asyncio.CancelledError:
        CANCELLED.append(value)
        raise
    if value == "boom":
        raise ValueError("the fetch failed")
    return None if value is None else value * 2


def plus_one(value: Any) -> Any:
    return None if value is None else value + 1


@pattern
def Slow(value):  # type: ignore[no-untyped-def]
    return {"double": lift(held_double)(value), "plus": lift(plus_one)(value)}


@handler
async def add_later(event, total):  # type: ignore[no-untyped-def]
    before = total.get() or []  # read at the start: the handling's basis
    STARTED.append(event["n"])
    await gate(("event", event["n"])).wait()
    if event.get("boom"):
        raise RuntimeError("handler blew up")
    total.set([*before, event["n"]])


@handler
def add_now(event, other):  # type: ignore[no-untyped-def]
    other.set(event["n"])


@pattern
def Adder(total, other):  # type: ignore[no-untyped-def]
    return {"total": total, "add": add_later(total=total), "now": add_now(other=other)}


async def run(rt: Runtime, value: Any) -> tuple[Any, Any]:
    source = rt.get_cell("value")
    res = rt.get_cell("res")
    tx = rt.edit()
    source.with_tx(tx).set(value)
    rt.run(tx, Slow, {"value": source}, res)
    assert (await tx.commit()).ok
    return source, res


async def run_adder(rt: Runtime) -> tuple[Any, Any, Any]:
    total = rt.get_cell("total")
    other = rt.get_cell("other")
    res = rt.get_cell("adder")
    tx = rt.edit()
    total.with_tx(tx).set([])
    other.with_tx(tx).set(0)
    rt.run(tx, Adder, {"total": total, "other": other}, res)
    assert (await tx.commit()).ok
    await res.pull()
    return res, total, other


# --------------------------------------------------------------------------- lifts


def test_an_async_lift_does_not_hold_up_the_pass_and_lands_when_it_ends() -> None:
    async def main() -> None:
        async with opened() as rt:
            _source, res = await run(rt, 3)
            doubles: list[Any] = []
            plus: list[Any] = []
            res.key("double").sink(doubles.append)
            res.key("plus").sink(plus.append)
            await turns()
            assert [3] == STARTED  # started, and waiting at its gate
            assert 4 == plus[-1]  # the sync lift beside it computed meanwhile
            assert 6 not in doubles  # nothing of it landed yet
            gate(3).set()
            await rt.idle()  # idle() waits for the coroutine and its commit
            assert 6 == res.key("double").get()
            assert 6 == doubles[-1]

    arun(main)


def test_an_async_lift_whose_input_changed_while_it_ran_is_discarded_and_runs_again() -> None:
    async def main() -> None:
        async with opened() as rt:
            source, res = await run(rt, 3)
            doubles: list[Any] = []
            res.key("double").sink(doubles.append)
            await turns()
            assert [3] == STARTED
            # It finishes with 6, computed from the old input, and the input changes while
            # it waits, in one callback: the coroutine resumes before the pass the change
            # schedules on the loop (settling first would cancel it instead: next test).
            gate(3).set()
            await source.set(5)
            await turns()  # ... before anything settles: its commit fails on its basis
            assert [] == CANCELLED  # it ended: discarded, not cancelled
            assert 1 == rt.scheduler.stats.stale_reruns  # its commit failed on its basis
            assert 6 not in doubles  # the stale result never landed
            assert [3, 5] == STARTED  # the lift ran again on the new input
            gate(5).set()
            await rt.idle()
            assert 6 not in doubles
            assert 10 == res.key("double").get() == doubles[-1]

    arun(main)


def test_an_async_lift_run_again_on_new_input_cancels_the_run_it_supersedes() -> None:
    async def main() -> None:
        async with opened() as rt:
            source, res = await run(rt, 3)
            doubles: list[Any] = []
            res.key("double").sink(doubles.append)
            await turns()
            await source.set(5)
            rt.settle()  # the lift runs again at once: the older coroutine is cancelled
            await turns()
            assert [3, 5] == STARTED and [3] == CANCELLED
            gate(3).set()
            gate(5).set()
            await rt.idle()
            assert 6 not in doubles
            assert 10 == res.key("double").get()

    arun(main)


def test_pull_waits_for_an_async_lift() -> None:
    async def main() -> None:
        async with opened() as rt:
            _source, res = await run(rt, 4)
            pulled = asyncio.ensure_future(res.key("double").pull())
            await turns()
            assert [4] == STARTED and not pulled.done()
            gate(4).set()
            assert 8 == await pulled

    arun(main)


def test_stopping_the_run_cancels_its_coroutine() -> None:
    async def main() -> None:
        async with opened() as rt:
            _source, res = await run(rt, 7)
            res.key("double").sink(lambda _v: None)
            await turns()
            assert [7] == STARTED and [] == CANCELLED
            await rt.stop(res)
            await rt.idle()
            assert [7] == CANCELLED
            assert not rt.scheduler.work  # nothing left in flight
            assert MISSING == res.key("double").get() or res.key("double").get() is None

    arun(main)


def test_closing_the_runtime_cancels_its_coroutines() -> None:
    async def main() -> None:
        rt = Runtime()
        _source, res = await run(rt, 2)
        res.key("double").sink(lambda _v: None)
        await turns()
        assert [2] == STARTED
        rt.close()
        await turns()
        assert [2] == CANCELLED

    arun(main)


def test_an_async_lift_that_raises_is_failing_and_its_pull_raises() -> None:
    async def main() -> None:
        async with opened() as rt:
            source, res = await run(rt, "boom")
            gate("boom").set()
            with pytest.raises(NodeError) as info:
                await res.key("double").pull()
            assert isinstance(info.value.__cause__, ValueError)
            assert "held_double" in str(info.value)
            (record,) = rt.errors()
            assert "computation" == record.kind
            await source.set(1)
            gate(1).set()
            assert 2 == await res.key("double").pull()  # it recovers on new input
            assert [] == rt.scheduler.failing()

    arun(main)


# --------------------------------------------------------------------------- handlers


def test_an_async_handler_keeps_its_streams_events_in_order_and_others_go_on() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, other = await run_adder(rt)
            first = rt.send(res.key("add"), {"n": 1})
            second = rt.send(res.key("add"), {"n": 2})
            now = rt.send(res.key("now"), {"n": 9})
            assert "done" == await now  # another stream is not held up by the first
            assert 9 == other.get()
            assert [1] == STARTED  # the second waits for the first's handling
            gate(("event", 2)).set()  # releasing the second first changes nothing
            await turns()
            assert [1] == STARTED
            gate(("event", 1)).set()
            assert "done" == await first
            assert "done" == await second
            assert [1, 2] == STARTED
            assert [1, 2] == total.get()

    arun(main)


def test_idle_waits_for_an_async_handler() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, _other = await run_adder(rt)
            rt.send(res.key("add"), {"n": 5})
            idle = asyncio.ensure_future(rt.idle())
            await turns()
            assert [5] == STARTED and not idle.done()
            gate(("event", 5)).set()
            await idle
            assert [5] == total.get()

    arun(main)


def test_an_async_handlers_read_that_changed_meanwhile_makes_it_run_again() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, _other = await run_adder(rt)
            sent = rt.send(res.key("add"), {"n": 1})
            rt.settle()  # dispatched: the coroutine starts
            await turns()
            assert [1] == STARTED  # it read `total` ([]) at its start, then waits
            await total.set([0])  # someone else writes what it read
            gate(("event", 1)).set()
            assert "done" == await sent
            assert [1, 1] == STARTED  # the stale handling was retried from the start
            assert [0, 1] == total.get()  # not [1]: the other write is kept

    arun(main)


def test_an_async_handler_error_goes_to_the_send_handle() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, _other = await run_adder(rt)
            sent = rt.send(res.key("add"), {"n": 3, "boom": True})
            gate(("event", 3)).set()
            await rt.idle()
            with pytest.raises(HandlerError, match="handler blew up"):
                await sent
            (record,) = rt.errors()
            assert "handler" == record.kind
            assert [] == total.get()
            ok = rt.send(res.key("add"), {"n": 4})
            gate(("event", 4)).set()
            assert "done" == await ok  # the stream goes on after a failure

    arun(main)


def test_stopping_the_run_cancels_its_handlers_coroutine_and_drops_the_event() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, _other = await run_adder(rt)
            sent = rt.send(res.key("add"), {"n": 6})
            rt.settle()
            await turns()
            assert [6] == STARTED
            await rt.stop(res)
            assert "dropped" == await sent
            assert [] == total.get()
            assert not rt.scheduler.work

    arun(main)


# --------------------------------------------------------------------------- edges


async def held_child(value: Any) -> Any:
    await gate(("child", value)).wait()
    return Slow(value=value)


@pattern
def AsyncChild(value):  # type: ignore[no-untyped-def]
    return {"child": lift(held_child)(value)}


@pattern
def AsyncMapped(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(held_double)}


def test_an_async_lift_run_without_an_event_loop_fails_saying_so() -> None:
    rt = Runtime()
    try:
        source, res = rt.get_cell("value"), rt.get_cell("res")
        tx = rt.edit()
        source.with_tx(tx).set(3)
        rt.run(tx, Slow, {"value": source}, res)
        tx.commit()
        res.key("double").sink(lambda _v: None)  # settles synchronously, outside a loop
        failure = rt.scheduler.failure(res.key("double"))
        assert failure is not None
        assert "is async: it runs only while an event loop runs" in str(failure)
        assert [] == STARTED  # the function was never called (no coroutine left behind)
    finally:
        rt.close()


def test_an_async_lift_returning_a_pattern_instance_fails_naming_the_rule() -> None:
    async def main() -> None:
        async with opened() as rt:
            source = rt.get_cell("value")
            res = rt.get_cell("res")
            tx = rt.edit()
            source.with_tx(tx).set(1)
            rt.run(tx, AsyncChild, {"value": source}, res)
            assert (await tx.commit()).ok
            gate(("child", 1)).set()
            with pytest.raises(NodeError, match="an async lift returns values"):
                await res.key("child").pull()
            assert 1 == len(rt.registrations())  # nothing was launched

    arun(main)


def test_an_async_function_list_op_computes_each_element_when_its_coroutine_ends() -> None:
    async def main() -> None:
        async with opened() as rt:
            items = rt.get_cell("items")
            res = rt.get_cell("res")
            tx = rt.edit()
            items.with_tx(tx).set([1, 2])
            rt.run(tx, AsyncMapped, {"items": items}, res)
            assert (await tx.commit()).ok
            outs: list[Any] = []
            res.key("out").sink(outs.append)
            await turns()
            assert [1, 2] == sorted(STARTED)
            gate(2).set()
            await turns()
            assert [None, 4] == res.key("out").get()  # element 2 landed, 1 still runs
            gate(1).set()
            await rt.idle()
            assert [2, 4] == res.key("out").get()

    arun(main)


RUNTIMES: list[Runtime] = []


@handler
async def relay(event, stream):  # type: ignore[no-untyped-def]
    RUNTIMES[-1].send(stream, {"n": event["n"]})
    await gate(("relay", event["n"])).wait()
    if event.get("boom"):
        raise RuntimeError("relay blew up")


@pattern
def Relay(other):  # type: ignore[no-untyped-def]
    now = add_now(other=other)
    return {"now": now, "relay": relay(stream=now)}


def test_events_an_async_handler_sends_wait_for_its_commit_and_drop_if_it_fails() -> None:
    async def main() -> None:
        async with opened() as rt:
            RUNTIMES.append(rt)
            other = rt.get_cell("other")
            res = rt.get_cell("relay")
            tx = rt.edit()
            other.with_tx(tx).set(0)
            rt.run(tx, Relay, {"other": other}, res)
            assert (await tx.commit()).ok
            await res.pull()
            failed = rt.send(res.key("relay"), {"n": 1, "boom": True})
            rt.settle()
            await turns()
            assert 0 == other.get()  # the relayed event waits for its origin's commit
            gate(("relay", 1)).set()
            with pytest.raises(HandlerError, match="relay blew up"):
                await failed
            await rt.idle()
            assert 0 == other.get()  # its origin failed: the relayed event was dropped
            ok = rt.send(res.key("relay"), {"n": 2})
            gate(("relay", 2)).set()
            assert "done" == await ok
            await rt.idle()
            assert 2 == other.get()

    arun(main)


def test_a_handling_cancelled_before_its_coroutine_started_is_dropped() -> None:
    async def main() -> None:
        async with opened() as rt:
            res, total, _other = await run_adder(rt)
            sent = rt.send(res.key("add"), {"n": 8})
            rt.settle()  # dispatched: its task is made but has not run a step yet
            await rt.stop(res)
            assert "dropped" == await sent
            assert [] == STARTED and not rt.scheduler.work
            assert [] == total.get()

    arun(main)


@pattern
def AsyncElement(element):  # type: ignore[no-untyped-def]
    return lift(held_double)(element)


@pattern
def AsyncChildren(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(AsyncElement)}


def test_releasing_a_child_run_cancels_its_coroutine() -> None:
    async def main() -> None:
        async with opened() as rt:
            items = rt.get_cell("items")
            res = rt.get_cell("res")
            tx = rt.edit()
            items.with_tx(tx).set([1, 2])
            rt.run(tx, AsyncChildren, {"items": items}, res)
            assert (await tx.commit()).ok
            res.key("out").sink(lambda _v: None)
            await turns()
            assert [1, 2] == sorted(STARTED)
            await items.set([1])  # element 2 leaves the list: its child is released
            rt.settle()
            await turns()
            assert [2] == CANCELLED
            gate(1).set()
            await rt.idle()
            assert [2] == res.key("out").get()

    arun(main)

"""Errors reach someone (issue 13 item 9, issue 15 item 7, issue 14 item 4).

A failing computation's value is absent while it fails and its `pull()`
raises; a handler's error belongs to the send's handle; every error is kept
in `rt.errors()` (and `inspect()`) and logged once on the `cellweave` logger;
`idle()` hands no one else's error to its caller; `aclose()` always closes;
an `on_navigate` that raises is contained. Loops are driven, never slept on.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from support import arun, turns

from cells import MISSING, MemoryStore
from runner import Runtime, Sent, handler, lift, navigate_to, pattern
from scheduler import MAX_ERRORS, CallbackError, HandlerError, Node, NodeError


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """These tests fail on purpose: keep their log lines out of the output (the test
    that checks the log raises the level back itself)."""
    log = logging.getLogger("cellweave")
    level = log.level
    log.setLevel(logging.CRITICAL)
    yield
    log.setLevel(level)


def checked_half(v: Any) -> Any:
    if v is None:
        return None
    if v % 2:
        raise ValueError(f"odd input {v}")
    return v // 2


@pattern
def Halver(value):  # type: ignore[no-untyped-def]
    return {"half": lift(checked_half)(value)}


@handler
def explode(event, value):  # type: ignore[no-untyped-def]
    if event.get("boom"):
        raise RuntimeError("handler blew up")
    value.set(event["value"])


@handler
def go(event, target):  # type: ignore[no-untyped-def]
    return navigate_to(target)


@pattern
def Target(value):  # type: ignore[no-untyped-def]
    return {"half": lift(checked_half)(value)}


@pattern
def WithHandler(value):  # type: ignore[no-untyped-def]
    return {"value": value, "set": explode(value=value)}


@pattern
def Navigator(value):  # type: ignore[no-untyped-def]
    target = Target(value=value)
    return {"target": target, "go": go(target=target)}


async def run(rt: Runtime, pat: Any, value: Any, name: str = "res") -> tuple[Any, Any]:
    source = rt.get_cell(f"{name}-value")
    res = rt.get_cell(name)
    tx = rt.edit()
    source.with_tx(tx).set(value)
    rt.run(tx, pat, {"value": source}, res)
    assert (await tx.commit()).ok
    return source, res


# --------------------------------------------------------------------------- computations


def test_a_failing_lift_is_absent_and_its_pull_raises_naming_pattern_and_cell() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await run(rt, Halver, 4)
            half = res.key("half")
            assert 2 == await half.pull()
            source.set(3)
            with pytest.raises(NodeError) as info:
                await half.pull()
            message = str(info.value)
            assert "Halver" in message and "checked_half" in message  # the node, its pattern
            assert repr(half) in message  # the cell pulled
            assert isinstance(info.value.__cause__, ValueError)
            assert MISSING == half.get()  # not the stale 2
            with pytest.raises(NodeError):
                await res.pull()  # a value holding the failing one is not whole either
            # It stays failed (no re-run, no second record) until an input changes.
            node = info.value.node
            assert isinstance(node, Node)
            runs = node.runs
            await rt.idle()
            with pytest.raises(NodeError):
                await half.pull()
            assert runs == node.runs and 1 == len(rt.errors())
            source.set(10)
            assert 5 == await half.pull()
            assert [] == rt.scheduler.failing()

    arun(main)


def test_errors_are_recorded_once_logged_once_and_shown_by_inspect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await run(rt, Halver, 4)
            half = res.key("half")
            half.sink(lambda _v: None)  # live: it computes without anyone pulling
            source.set(5)
            await rt.idle()  # raises nothing: the error is not this caller's
            await rt.idle()
            (record,) = rt.errors()
            assert "computation" == record.kind
            assert "Halver" in record.source and "checked_half" in record.source
            assert record.cell is not None and "odd input 5" in record.message
            assert isinstance(record.time, float)
            shown = rt.inspect()
            json.dumps(shown)
            assert [record.as_dict()] == shown["errors"]
            assert 1 == len(shown["failing"])

    with caplog.at_level(logging.ERROR, logger="cellweave"):
        arun(main)
    logged = [r for r in caplog.records if r.name.startswith("cellweave")]
    assert 1 == len(logged)
    assert logged[0].exc_info is not None and "odd input 5" in logged[0].getMessage()


def test_the_error_record_is_bounded() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await run(rt, Halver, 2)
            res.key("half").sink(lambda _v: None)
            for i in range(MAX_ERRORS + 5):
                source.set(2 * i + 1)
                rt.settle()
            assert MAX_ERRORS == len(rt.errors())
            assert f"odd input {2 * (MAX_ERRORS + 4) + 1}" in rt.errors()[-1].message
            assert MAX_ERRORS + 5 == rt.scheduler.errors_log.total

    arun(main)


# --------------------------------------------------------------------------- observe


class Recorder:
    def __init__(self) -> None:
        self.values: list[Any] = []
        self.errors: list[BaseException] = []
        self.completed = 0

    def subscribe(self, cell: Any) -> Any:
        return cell.observe().subscribe(self.next, self.errors.append, self.done)

    def next(self, value: Any) -> None:
        # (A value not computed yet may first arrive as MISSING; issue 14 item 3 is
        # another change: these tests are about errors and completion only.)
        if value is not MISSING:
            self.values.append(value)

    def done(self) -> None:
        self.completed += 1


def test_observe_gets_a_failing_lift_in_on_error() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await run(rt, Halver, 4)
            rec = Recorder()
            rec.subscribe(res.key("half"))
            await rt.idle()
            source.set(7)
            await rt.idle()
            assert [2] == rec.values
            (error,) = rec.errors
            assert isinstance(error, NodeError) and "checked_half" in str(error)
            assert isinstance(error.__cause__, ValueError)

    arun(main)


def test_stopping_the_run_completes_its_observers_and_closing_completes_the_rest() -> None:
    async def main() -> None:
        rt = Runtime()
        _source, res = await run(rt, Halver, 4)
        _other_source, other = await run(rt, Halver, 8, name="other")
        stopped, kept = Recorder(), Recorder()
        stopped.subscribe(res.key("half"))
        kept.subscribe(other.key("half"))
        await rt.idle()
        assert ([2], [4]) == (stopped.values, kept.values)
        nodes = rt.scheduler.statistics()["nodes"]
        rt.stop(res)
        assert (1, 0) == (stopped.completed, kept.completed)
        assert rt.scheduler.statistics()["nodes"] < nodes
        await rt.aclose()
        assert (1, 1) == (stopped.completed, kept.completed)
        assert [] == stopped.errors + kept.errors

    arun(main)


# --------------------------------------------------------------------------- handlers


def test_a_handler_error_goes_to_the_send_handle_not_to_idle() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await run(rt, WithHandler, 1, name="h")
            await res.pull()
            sent = rt.send(res.key("set"), {"boom": True})
            assert isinstance(sent, Sent)
            await rt.idle()  # unrelated code waiting is not handed the handler's error
            with pytest.raises(HandlerError, match="handler blew up") as info:
                await sent
            assert isinstance(info.value.__cause__, RuntimeError)
            assert "failed" == sent.status
            (record,) = rt.errors()
            assert ("handler", info.value) == (record.kind, record.error)
            ok = rt.send(res.key("set"), {"value": 7})
            assert "done" == await ok
            assert 7 == source.get()

    arun(main)


def test_an_event_still_queued_when_the_runtime_closes_is_dropped() -> None:
    async def main() -> None:
        rt = Runtime()
        _source, res = await run(rt, WithHandler, 1, name="q")
        await res.pull()
        sent = rt.session("bob", "s1").send(res.key("set"), {"value": 3})
        assert isinstance(sent, Sent) and "queued" == sent.status and not sent.done()
        rt.close()  # no wait: nothing handles it now
        assert "dropped" == await sent
        assert sent.error is not None  # (its handler went with the run)

    arun(main)


def test_sending_without_awaiting_warns_about_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _source, res = await run(rt, WithHandler, 1, name="f")
            await res.pull()
            rt.send(res.key("set"), {"value": 2})
            rt.send(res.key("set"), {"boom": True})
            await rt.idle()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arun(main)
        gc.collect()
    assert [] == [str(w.message) for w in caught]


# --------------------------------------------------------------------------- callbacks


def test_S_on_navigate_raising_is_contained_recorded_and_idle_resolves() -> None:
    """Issue 15 item 7: the callback's error escaped `await rt.idle()` from inside the
    replica's callbacks."""
    calls: list[Any] = []

    def on_navigate(cell: Any) -> None:
        calls.append(cell)
        raise KeyError("the UI is gone")

    async def main() -> None:
        async with Runtime(on_navigate=on_navigate) as rt:
            _source, res = await run(rt, Navigator, 4, name="nav")
            await res.pull()
            sent = rt.send(res.key("go"), {})
            await rt.idle()  # resolves; the callback's error does not escape
            assert "done" == await sent
            assert 1 == len(calls)
            assert 1 == len(rt.pages())  # the page opened all the same
            (record,) = rt.errors()
            assert ("callback", "on_navigate") == (record.kind, record.source)
            assert isinstance(record.error, CallbackError)
            assert isinstance(record.error.__cause__, KeyError)

    arun(main)


# --------------------------------------------------------------------------- closing


def test_aclose_closes_even_when_its_wait_is_cancelled() -> None:
    async def main() -> None:
        store = MemoryStore()
        rt = Runtime(store)
        cell = rt.get_cell("x")
        with store.testing.hold_verdicts():
            cell.set(1)  # its verdict is held: aclose waits for it
            closing = asyncio.ensure_future(rt.aclose())
            await turns(3)
            assert not closing.done()
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
        assert "closed" in repr(rt)
        assert rt.scheduler._closed and rt.replica.closed

    arun(main)


def test_close_finishes_even_when_a_cleanup_raises() -> None:
    async def main() -> None:
        rt = Runtime()

        def refuse() -> None:
            raise RuntimeError("cleanup refused")

        rt.runner.stop_all = refuse  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="cleanup refused"):
            await rt.aclose()
        assert rt.scheduler._closed and rt.replica.closed

    arun(main)

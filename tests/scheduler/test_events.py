"""Events: FIFO dispatch, preflight, receipts, retries and lineage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import cells
from cells import MISSING, Cell, Outcome, Replica, Space, Transaction, read_value
from scheduler import (
    CommitConvergenceError,
    HandlerError,
    ManualClock,
    OriginFailedError,
    QueuedEvent,
    Scheduler,
)
from scheduler._events import RETRY_WINDOW, retry_delay


class Env:
    def __init__(self) -> None:
        self.store = cells.MemoryStore()
        self.sp = Space(self.store, "x")
        self.clock = ManualClock()
        self.sch = Scheduler(self.sp.replica, clock=self.clock)

    def check(self) -> None:
        self.sch._check()
        self.sp.replica._check()
        self.store._check()


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.check()


def _append_handler(items: Cell, log: list[Any]) -> Any:
    def add(tx: Transaction, payload: Any) -> None:
        log.append(payload)
        current = read_value(tx, items.link())
        tx.write(items.doc_key, ("value",), [*(current or []), payload["item"]])

    return add


def test_handlers_dispatch_in_send_order(env: Env) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("add")
    log: list[Any] = []
    env.sch.add_handler(stream, _append_handler(items, log))
    for i in range(5):
        env.sch.send(stream, {"item": i})
    env.sch.settle()
    assert items.get() == [0, 1, 2, 3, 4]
    assert [{"item": i} for i in range(5)] == log


def test_one_handler_per_stream(env: Env) -> None:
    stream = env.sp.cell("s")
    env.sch.add_handler(stream, lambda tx, p: None)
    with pytest.raises(cells.CellweaveError, match="already has a handler"):
        env.sch.add_handler(stream, lambda tx, p: None)


def test_send_without_handler_names_the_stream(env: Env) -> None:
    with pytest.raises(cells.CellweaveError, match="no handler is bound"):
        env.sch.send(env.sp.cell("nowhere"), {})


def test_send_after_remove_handler_is_dropped_like_the_events_already_queued(env: Env) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("s")
    log: list[Any] = []
    items.set([])
    handler = env.sch.add_handler(stream, _append_handler(items, log))
    queued = env.sch.send(stream, {"item": 1})
    env.sch.remove_handler(handler)
    later = env.sch.send(stream, {"item": 2})  # no raise: dropped, as the queued one was
    env.sch.settle()
    assert ("dropped", "dropped") == (queued.status, later.status)
    assert "was removed" in str(later.error) and "was removed" in str(queued.error)
    assert [] == log and [] == items.get()
    assert 0 == len(env.sch.events.queue)
    # Bound again: events go to the new handler; a stream never bound still raises.
    env.sch.add_handler(stream, _append_handler(items, log))
    env.sch.send(stream, {"item": 3})
    env.sch.settle()
    assert [3] == items.get()
    with pytest.raises(cells.CellweaveError, match="no handler is bound"):
        env.sch.send(env.sp.cell("never bound"), {})


def test_removed_handlers_are_remembered_without_their_function(env: Env) -> None:
    from scheduler._events import MAX_RETIRED

    big = list(range(1000))

    def fn(tx: Transaction, payload: Any, big: list[int] = big) -> None:
        pass

    handler = env.sch.add_handler(env.sp.cell("s"), fn)
    env.sch.remove_handler(handler)
    (kept,) = env.sch.events.retired.values()
    assert kept.fn is not fn and not kept.registered
    for i in range(MAX_RETIRED + 5):
        env.sch.remove_handler(env.sch.add_handler(env.sp.cell(f"t{i}"), fn))
    assert MAX_RETIRED == len(env.sch.events.retired)
    with pytest.raises(cells.CellweaveError, match="no handler is bound"):
        env.sch.send(env.sp.cell("s"), {})  # the oldest was forgotten


def test_event_payload_is_checked_at_send(env: Env) -> None:
    stream = env.sp.cell("s")
    env.sch.add_handler(stream, lambda tx, p: None)
    with pytest.raises(cells.InvalidValueError, match="event for"):
        env.sch.send(stream, {"bad": {1, 2}})
    assert len(env.sch.events.queue) == 0


def test_handler_inputs_are_brought_up_to_date_before_it_runs(env: Env) -> None:
    # `count` is computed from `items` and read by nothing live: only the
    # preflight demands it, and each handler must see it current.
    items, count, stream = env.sp.cell("items"), env.sp.cell("count"), env.sp.cell("add")
    items.set([])

    def compute_count(tx: Transaction) -> None:
        v = read_value(tx, items.link())
        tx.write(count.doc_key, ("value",), len(v) if isinstance(v, list) else 0)

    node = env.sch.register(
        compute_count,
        identity=env.sp.identity,
        outputs=[(count.doc_key, ("value",))],
        reads=[(items.doc_key, ("value",), False)],
    )
    seen_counts: list[Any] = []

    def add(tx: Transaction, payload: Any) -> None:
        seen_counts.append(read_value(tx, count.link()))
        current = read_value(tx, items.link())
        tx.write(items.doc_key, ("value",), [*current, payload])

    env.sch.add_handler(stream, add, reads=[(count.doc_key, ("value",), False)])
    for i in range(3):
        env.sch.send(stream, i)
    env.sch.settle()
    assert seen_counts == [0, 1, 2]
    assert not node.is_live  # the preflight's demand ended with it


def test_duplicate_delivery_on_two_runtimes_is_handled_once(env: Env) -> None:
    items = env.sp.cell("items")
    items.set([])
    other = Space(Replica(env.store), "x", session="b")
    other_sch = Scheduler(other.replica, clock=ManualClock())
    log_a: list[Any] = []
    log_b: list[Any] = []
    env.sch.add_handler(env.sp.cell("add"), _append_handler(items, log_a))
    other_sch.add_handler(other.cell("add"), _append_handler(other.cell("items"), log_b))
    a = env.sch.send(env.sp.cell("add"), {"item": "x"}, event_id="order-17")
    b = other_sch.send(other.cell("add"), {"item": "x"}, event_id="order-17")
    assert a.id == b.id  # the same caller id on the same stream is the same invocation
    env.sch.settle()
    other_sch.settle()
    env.sch.settle()
    assert a.status == "done"
    assert b.status == "dropped"
    assert b.result is not None and b.result.outcome == Outcome.PERMANENT
    assert items.get() == ["x"]
    other_sch._check()


def test_sequential_duplicate_delivery_loses_and_is_not_retried(env: Env) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("add")
    log: list[Any] = []
    env.sch.add_handler(stream, _append_handler(items, log))
    first = env.sch.send(stream, {"item": 1}, event_id="e")
    env.sch.settle()
    second = env.sch.send(stream, {"item": 1}, event_id="e")
    env.sch.settle()
    assert (first.status, second.status) == ("done", "dropped")
    assert items.get() == [1]
    assert len(log) == 2  # it ran, and its commit lost the receipt: one durable effect


def test_stale_basis_is_retried_with_backoff_then_succeeds(env: Env) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("add")
    items.set([])
    env.sch.add_handler(stream, _append_handler(items, []))
    ev = env.sch.send(stream, {"item": 1})
    with env.store.testing.hold_verdicts() as gate:
        env.sch.settle()
        assert ev.status == "dispatched"
        gate.reject(0, Outcome.STALE_BASIS)
        env.sch.settle()
        # (mypy keeps `ev.status` narrowed to "dispatched" across settle())
        assert ev.status == "queued" and ev.attempts == 1  # type: ignore[comparison-overlap]
        assert retry_delay(1) == pytest.approx(ev.not_before - env.clock.now())
        env.sch.settle()  # not yet eligible
        assert ev.status == "queued"
        env.clock.advance(retry_delay(1))
        env.sch.settle()
        assert ev.status == "dispatched"
    env.sch.settle()
    assert ev.status == "done"
    assert items.get() == [1]


def test_stale_basis_past_the_window_fails_with_convergence_error(env: Env) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("add")
    items.set([])
    env.sch.add_handler(stream, _append_handler(items, []))
    ev = env.sch.send(stream, {"item": 1})
    with env.store.testing.hold_verdicts() as gate:
        env.sch.settle()
        gate.reject(0, Outcome.STALE_BASIS)
        env.sch.settle()
        env.clock.advance(RETRY_WINDOW)
        env.sch.settle()  # dispatched again
        gate.reject(0, Outcome.STALE_BASIS)
        env.sch.settle()  # the failure is the event's (and the log's), not the settle's
    assert ev.status == "failed"
    assert isinstance(ev.error, CommitConvergenceError)
    assert [("handler", CommitConvergenceError)] == [
        (e.kind, type(e.error)) for e in env.sch.errors()
    ]
    assert items.get() == []


@pytest.mark.parametrize("outcome", [Outcome.PERMANENT, Outcome.TERMINAL, Outcome.LIVENESS])
def test_other_rejections_are_not_retried(env: Env, outcome: Outcome) -> None:
    items, stream = env.sp.cell("items"), env.sp.cell("add")
    env.sch.add_handler(stream, _append_handler(items, []))
    ev = env.sch.send(stream, {"item": 1})
    with env.store.testing.hold_verdicts() as gate:
        env.sch.settle()
        gate.reject(0, outcome)
        env.sch.settle()
    assert ev.status == "dropped"
    assert ev.result is not None and outcome == ev.result.outcome
    assert len(env.sch.events.queue) == 0


def test_a_handler_that_sends_and_throws_drops_its_follow_up(env: Env) -> None:
    follow, boom = env.sp.cell("follow"), env.sp.cell("boom")
    got: list[Any] = []
    env.sch.add_handler(follow, lambda tx, p: got.append(p))
    sent: list[QueuedEvent] = []

    def explode(tx: Transaction, payload: Any) -> None:
        sent.append(env.sch.send(follow, {"from": "boom"}))
        raise RuntimeError("boom")

    env.sch.add_handler(boom, explode)
    ev = env.sch.send(boom, {})
    env.sch.settle()
    assert isinstance(ev.error, HandlerError) and "boom" in str(ev.error)
    assert ["explode"] == [e.source.rsplit(".", 1)[-1] for e in env.sch.errors()]
    assert got == []
    assert sent[0].status == "dropped"
    assert isinstance(sent[0].error, OriginFailedError)
    assert len(env.sch.events.queue) == 0  # dropped, not parked forever


def test_descendant_waits_for_its_origin_and_runs_after_it_commits(env: Env) -> None:
    first, second = env.sp.cell("first"), env.sp.cell("second")
    order: list[str] = []

    def start(tx: Transaction, payload: Any) -> None:
        order.append("first")
        env.sch.send(second, {})

    env.sch.add_handler(first, start)
    env.sch.add_handler(second, lambda tx, p: order.append("second"))
    with env.store.testing.hold_verdicts() as gate:
        env.sch.send(first, {})
        env.sch.settle()
        assert order == ["first"]  # the descendant waits while its origin is undecided
        assert len(env.sch.events.queue) == 1
        gate.accept(0)
        env.sch.settle()
        assert order == ["first", "second"]


def test_failed_origin_runs_recorded_stops(env: Env) -> None:
    stopped: list[str] = []
    tx = env.sp.edit()
    env.sch.lineage.record_stop(tx, lambda: stopped.append("piece"))
    tx.write(env.sp.cell("d").doc_key, ("value",), 1)
    tx.abort("changed my mind")
    assert stopped == ["piece"]
    ok = env.sp.edit()
    env.sch.lineage.record_stop(ok, lambda: stopped.append("never"))
    ok.write(env.sp.cell("d").doc_key, ("value",), 2)
    ok.commit()
    env.sch.settle()
    assert stopped == ["piece"]
    # No origin is remembered once its verdict is in (the lineage's own table).
    assert 0 == len(env.sch.lineage._records)


def test_on_result_sees_the_return_value_inside_the_transaction(env: Env) -> None:
    stream, out = env.sp.cell("s"), env.sp.cell("out")

    def on_result(tx: Transaction, ev: QueuedEvent, returned: Any) -> None:
        tx.write(out.doc_key, ("value",), {"returned": returned, "event": ev.id})

    env.sch.add_handler(stream, lambda tx, p: p * 2, on_result=on_result)
    ev = env.sch.send(stream, 21)
    env.sch.settle()
    assert {"returned": 42, "event": ev.id} == out.get()
    assert MISSING is not env.sp.replica.visible(ev.receipt_key())


def test_idle_waits_for_queued_events(env: Env) -> None:
    import asyncio

    items, stream = env.sp.cell("items"), env.sp.cell("add")
    env.sch.add_handler(stream, _append_handler(items, []))

    async def main() -> Any:
        env.sch.send(stream, {"item": 1})
        await env.sch.idle()
        return items.get()

    assert asyncio.run(main()) == [1]


def test_a_handling_runs_as_its_actor_and_a_follow_up_keeps_it(env: Env) -> None:
    first, second = env.sp.cell("first"), env.sp.cell("second")
    who: list[tuple[str, str]] = []
    alice = cells.Identity("alice", "a1")

    def hop(tx: Transaction, payload: Any) -> None:
        who.append(("first", tx.identity.principal))
        env.sch.send(second, {"hop": 2})  # no actor given: it inherits alice

    env.sch.add_handler(first, hop)
    env.sch.add_handler(second, lambda tx, p: who.append(("second", tx.identity.principal)))
    env.sch.send(first, {}, actor=alice)
    env.sch.settle()
    env.sp.replica.pump()
    env.sch.settle()
    assert [("first", "alice"), ("second", "alice")] == who

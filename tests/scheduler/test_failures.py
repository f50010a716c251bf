"""Failing nodes and `observe()`: absent outputs, recorded errors, a real Observable."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from cells import MISSING, Space, Transaction, read_value
from scheduler import CallbackError, NodeError, Scheduler


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """These tests fail nodes on purpose: keep their log lines out of the output."""
    log = logging.getLogger("cellweave")
    level = log.level
    log.setLevel(logging.CRITICAL)
    yield
    log.setLevel(level)


def inverse(v: Any) -> Any:
    return 100 // v


class Recorder:
    def __init__(self) -> None:
        self.values: list[Any] = []
        self.errors: list[BaseException] = []
        self.completed = 0

    def on_next(self, v: Any) -> None:
        self.values.append(v)

    def on_error(self, e: BaseException) -> None:
        self.errors.append(e)

    def on_completed(self) -> None:
        self.completed += 1


def subscribe(sch: Scheduler, cell: Any) -> tuple[Recorder, Any]:
    rec = Recorder()
    sub = sch.observe(cell).subscribe(rec.on_next, rec.on_error, rec.on_completed)
    return rec, sub


# --------------------------------------------------------------------------- failing nodes


def test_a_failure_is_not_recorded_if_the_node_succeeds_in_the_same_settle(
    sp: Space, sch: Scheduler
) -> None:
    """A never-ran node with no declared reads may run before its writer and raise
    on the absent input; it runs again in the same settle and succeeds: not an error."""
    a, b, c = sp.cell("a"), sp.cell("b"), sp.cell("c")
    a.set(2)
    sch.derive(b, [a], lambda v: v * 10)
    b_link = b.link()

    def strict(tx: Transaction) -> None:
        value = read_value(tx, b_link)
        if value is MISSING:
            raise LookupError("b is not computed yet")
        tx.write(c.doc_key, ("value",), value + 1)

    node = sch.register(strict, identity=sp.identity, outputs=[(c.doc_key, ("value",))])
    seen: list[Any] = []
    sch.sink(c, seen.append)
    assert node.runs == 2  # it did raise once
    assert 21 == c.get() and [] == sch.errors() and [] == sch.failing()


def test_a_failing_effect_is_recorded_as_an_effect(sp: Space, sch: Scheduler) -> None:
    a = sp.cell("a")
    a.set(1)

    def show(v: Any) -> None:
        if v == 2:
            raise RuntimeError("cannot show 2")

    sch.sink(a, show)
    a.set(2)
    sch.settle()
    (record,) = sch.errors()
    assert ("effect", None) == (record.kind, record.cell)
    assert record.source.startswith("sink ")
    assert isinstance(record.error, NodeError)
    assert isinstance(record.error.__cause__, RuntimeError)


# --------------------------------------------------------------------------- observe


def test_observe_delivers_the_value_then_every_settled_change(sp: Space, sch: Scheduler) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(4)
    sch.derive(out, [a], inverse)
    rec, sub = subscribe(sch, out)
    a.set(5)
    sch.settle()
    assert [25, 20] == rec.values and [] == rec.errors and 0 == rec.completed
    sub.dispose()


def test_two_subscriptions_share_one_node(sp: Space, sch: Scheduler) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(4)
    sch.derive(out, [a], inverse)
    nodes = len(sch.graph.nodes)
    first, sub1 = subscribe(sch, out)
    assert nodes + 1 == len(sch.graph.nodes)
    effects = sch.stats.runs_effect
    second, sub2 = subscribe(sch, out)  # through another observe() call, too
    assert nodes + 1 == len(sch.graph.nodes)
    assert effects == sch.stats.runs_effect  # the second got the last value, nothing ran
    assert [25] == first.values == second.values
    a.set(10)
    sch.settle()
    assert effects + 1 == sch.stats.runs_effect  # one run feeds both
    assert [25, 10] == first.values == second.values
    sub1.dispose()
    assert nodes + 1 == len(sch.graph.nodes)  # the other still observes
    a.set(20)
    sch.settle()
    assert [25, 10] == first.values and [25, 10, 5] == second.values
    sub2.dispose()
    assert nodes == len(sch.graph.nodes)  # the last one out removes the node
    sch._check()


def test_each_subscriber_gets_its_own_copy(sp: Space, sch: Scheduler) -> None:
    doc = sp.cell("doc")
    doc.set({"items": [1]})
    first, _s1 = subscribe(sch, doc)
    second, _s2 = subscribe(sch, doc)
    first.values[0]["items"].append(2)
    assert [{"items": [1]}] == second.values


def test_a_failing_computation_reaches_on_error_and_ends_the_subscription(
    sp: Space, sch: Scheduler
) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(4)
    node = sch.derive(out, [a], inverse)
    nodes = len(sch.graph.nodes)
    rec, _sub = subscribe(sch, out)
    a.set(0)
    sch.settle()
    assert [25] == rec.values  # no absent value was delivered as if it were one
    (error,) = rec.errors
    assert isinstance(error, NodeError) and error.node is node
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert "out" in str(error)
    assert nodes == len(sch.graph.nodes)  # ended: its node went
    a.set(5)
    sch.settle()
    assert [25] == rec.values and 1 == len(rec.errors) and 0 == rec.completed


def test_subscribing_to_a_value_already_failing_gets_on_error(sp: Space, sch: Scheduler) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(0)
    sch.derive(out, [a], inverse)
    sch.sink(out, lambda _v: None)
    assert 1 == len(sch.failing())
    rec, _sub = subscribe(sch, out)
    assert [] == rec.values and 1 == len(rec.errors)
    assert isinstance(rec.errors[0].__cause__, ZeroDivisionError)


def test_observers_of_a_value_containing_a_failing_one_get_on_error(
    sp: Space, sch: Scheduler
) -> None:
    a, doc = sp.cell("a"), sp.cell("doc")
    a.set(4)
    doc.set({"title": "t"})
    sch.derive(doc.key("inverse"), [a], inverse)
    rec, _sub = subscribe(sch, doc)
    assert [{"title": "t", "inverse": 25}] == rec.values
    a.set(0)
    sch.settle()
    assert 1 == len(rec.errors)
    with pytest.raises(NodeError, match="ZeroDivisionError"):
        sch.pull_now(doc)


def test_closing_the_scheduler_completes_every_observer(sp: Space, sch: Scheduler) -> None:
    a = sp.cell("a")
    a.set(1)
    rec, _s1 = subscribe(sch, a)
    rec2, _s2 = subscribe(sch, sp.cell("b"))
    sch.close()
    assert (1, 1) == (rec.completed, rec2.completed)
    late, _s3 = subscribe(sch, a)
    assert 1 == late.completed


def test_end_observations_completes_the_observers_of_that_document(
    sp: Space, sch: Scheduler
) -> None:
    a, b = sp.cell("a"), sp.cell("b")
    a.set({"x": 1})
    b.set(2)
    rec_a, _s1 = subscribe(sch, a.key("x"))
    rec_b, _s2 = subscribe(sch, b)
    assert 1 == sch.end_observations(a.doc_key)
    assert (1, 0) == (rec_a.completed, rec_b.completed)
    b.set(3)
    sch.settle()
    assert [2, 3] == rec_b.values


def test_an_observer_callback_that_raises_is_contained_and_recorded(
    sp: Space, sch: Scheduler
) -> None:
    a, out = sp.cell("a"), sp.cell("out")
    a.set(4)
    sch.derive(out, [a], inverse)

    def bad_on_error(_e: BaseException) -> None:
        raise RuntimeError("observer broke")

    sch.observe(out).subscribe(lambda _v: None, bad_on_error)
    a.set(0)
    sch.settle()  # raises nothing
    kinds = [(e.kind, type(e.error)) for e in sch.errors()]
    assert ("computation", NodeError) in kinds and ("callback", CallbackError) in kinds


def test_closing_drops_the_events_still_queued(sp: Space, sch: Scheduler) -> None:
    stream = sp.cell("stream")
    settled: list[str] = []
    sch.add_handler(stream, lambda tx, payload: None)
    ev = sch.send(stream, 1, on_settle=lambda e: settled.append(e.status))
    sch.close()
    assert ("dropped", ["dropped"]) == (ev.status, settled)
    assert "closed" in str(ev.error) and 0 == len(sch.events.queue)

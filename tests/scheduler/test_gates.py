"""Time gates: debounce, throttle and backoff share one `eligible_at` and one wake timer."""

from __future__ import annotations

from typing import Any

import pytest

import cells
from cells import Space, Transaction, read_value
from scheduler import ManualClock, Node, Scheduler


def _doubler(sp: Space, sch: Scheduler) -> tuple[cells.Cell, cells.Cell, Node]:
    src, out = sp.cell("src"), sp.cell("out")
    src.set(0)

    def run(tx: Transaction) -> None:
        tx.write(out.doc_key, ("value",), read_value(tx, src.link()) * 2)

    node = sch.register(
        run,
        identity=sp.identity,
        outputs=[(out.doc_key, ("value",))],
        reads=[(src.doc_key, ("value",), False)],
    )
    return src, out, node


def test_debounce_waits_for_quiet_inputs() -> None:
    sp, clock = Space(cells.MemoryStore(), "x"), ManualClock()
    sch = Scheduler(sp.replica, clock=clock)
    src, out, node = _doubler(sp, sch)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    assert [0] == seen
    sch.set_debounce(node, 1.0)
    for v in (1, 2, 3):
        src.set(v)
        sch.settle()
        clock.advance(0.5)  # never quiet for a whole second
    assert [0] == seen
    assert sch.deferred() == [node]
    clock.advance(0.5)
    sch.settle()
    assert [0, 6] == seen  # one run, with the last value
    assert 2 == node.runs
    sch._check()


def test_throttle_runs_at_most_once_per_window_and_coalesces() -> None:
    sp, clock = Space(cells.MemoryStore(), "x"), ManualClock()
    sch = Scheduler(sp.replica, clock=clock)
    src, out, node = _doubler(sp, sch)
    sch.set_throttle(node, 1.0)
    seen: list[Any] = []
    sch.sink(out, seen.append)  # first run at t=0 opens the window
    src.set(1)
    sch.settle()
    src.set(2)
    sch.settle()
    assert [0] == seen
    clock.advance(1.0)
    sch.settle()
    assert [0, 4] == seen  # the changes in between coalesced into one run
    assert 2 == node.runs
    sch.set_throttle(node, 0)
    src.set(5)
    sch.settle()
    assert [0, 4, 10] == seen


def test_gate_settings_reject_negative_seconds() -> None:
    sp = Space(cells.MemoryStore(), "x")
    sch = Scheduler(sp.replica, clock=ManualClock())
    _, _, node = _doubler(sp, sch)
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        sch.set_debounce(node, -1)
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        sch.set_throttle(node, -0.5)


def test_throttle_window_counts_from_a_run_made_before_it_was_set() -> None:
    # Two runs 0.1 s apart under a 1 s throttle: the second waits for the window that the
    # first run (made before the throttle was set) opened.
    sp, clock = Space(cells.MemoryStore(), "x"), ManualClock()
    sch = Scheduler(sp.replica, clock=clock)
    src, out, node = _doubler(sp, sch)
    seen: list[Any] = []
    sch.sink(out, seen.append)  # run at t=0, no throttle yet
    sch.set_throttle(node, 1.0)
    clock.advance(0.1)
    src.set(1)
    sch.settle()
    assert [0] == seen
    assert sch.deferred() == [node]
    clock.advance(0.9)
    sch.settle()
    assert [0, 2] == seen
    assert 2 == node.runs
    sch._check()


def test_throttle_set_on_a_node_that_never_ran_does_not_hold_its_first_run() -> None:
    sp, clock = Space(cells.MemoryStore(), "x"), ManualClock(start=5.0)
    sch = Scheduler(sp.replica, clock=clock)
    _src, out, node = _doubler(sp, sch)
    sch.set_throttle(node, 1.0)
    seen: list[Any] = []
    sch.sink(out, seen.append)
    assert [0] == seen


def test_deferred_lists_the_waiting_nodes_earliest_first_and_forgets_removed_ones() -> None:
    sp, clock = Space(cells.MemoryStore(), "x"), ManualClock()
    sch = Scheduler(sp.replica, clock=clock)
    late_src, late_out, late = _doubler(sp, sch)
    early_src, early_out = sp.cell("src2"), sp.cell("out2")
    early_src.set(0)

    def run(tx: Transaction) -> None:
        tx.write(early_out.doc_key, ("value",), read_value(tx, early_src.link()) + 1)

    early = sch.register(
        run,
        identity=sp.identity,
        outputs=[(early_out.doc_key, ("value",))],
        reads=[(early_src.doc_key, ("value",), False)],
    )
    sch.sink(late_out, lambda v: None)
    sch.sink(early_out, lambda v: None)
    sch.set_debounce(late, 3.0)
    sch.set_debounce(early, 1.0)
    late_src.set(1)
    early_src.set(1)
    sch.settle()
    assert [early, late] == sch.deferred()  # registered late first; the gate orders them
    sch._check()
    clock.advance(0.5)
    early_src.set(2)  # pushes `early` out to 1.5: still before `late` (3.0)
    sch.settle()
    assert [early, late] == sch.deferred()
    clock.advance(1.0)
    sch.settle()  # `early` ran at 1.5
    assert [late] == sch.deferred()
    sch._check()
    sch.remove(late)
    assert [] == sch.deferred()
    sch._check()  # the removed node left the ordered gates too

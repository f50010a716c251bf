"""Every error cellweave raises on purpose is a `CellweaveError`, also where a plain
`ValueError` used to come out (an `except ValueError` around those calls still works)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from cells import (
    CellweaveError,
    Identity,
    InvalidArgumentError,
    MemoryStore,
    Outcome,
    Replica,
    Space,
    SQLiteStore,
    edit_with_retry,
)
from runner._registrations import Registrations
from runner._trace import LifecycleTrace
from scheduler import ManualClock, Scheduler


def _scheduler() -> Scheduler:
    return Scheduler(Space(MemoryStore(), "x").replica, clock=ManualClock())


def _node_gate(setting: str) -> None:
    sch = _scheduler()
    node = sch.register(lambda tx: None, identity=Identity("local", "local"), kind="effect")
    getattr(sch, setting)(node, -1)


def _edit_with_retry() -> None:
    replica = Replica(MemoryStore())
    asyncio.run(edit_with_retry(replica, Identity("local", "local"), lambda tx: None, attempts=0))


def _registrations_twice() -> None:
    from cells import DocKey

    regs = Registrations()
    regs.install(DocKey("x", "r"), "run")
    regs.install(DocKey("x", "r"), "run")


def _gate_reject_ok() -> None:
    store = MemoryStore()
    with store.testing.hold_verdicts() as gate:
        gate.reject(0, Outcome.OK)


CALLS: dict[str, Callable[[Path], object]] = {
    "Scheduler.register(kind=...)": lambda tmp: _scheduler().register(
        lambda tx: None,
        identity=Identity("local", "local"),
        kind="sometimes",  # type: ignore[arg-type]
    ),
    "Scheduler.set_debounce": lambda tmp: _node_gate("set_debounce"),
    "Scheduler.set_throttle": lambda tmp: _node_gate("set_throttle"),
    "ManualClock.advance": lambda tmp: ManualClock().advance(-1),
    "SQLiteStore(synchronous=...)": lambda tmp: SQLiteStore(tmp / "a.db", synchronous="SOMETIMES"),
    "SQLiteStore(poll_interval=...)": lambda tmp: SQLiteStore(tmp / "b.db", poll_interval=-1),
    "SQLiteStore(':memory:')": lambda tmp: SQLiteStore(":memory:"),
    "edit_with_retry(attempts=0)": lambda tmp: _edit_with_retry(),
    "LifecycleTrace(capacity=0)": lambda tmp: LifecycleTrace(0),
    "Registrations.install twice": lambda tmp: _registrations_twice(),
    "VerdictGate.reject(OK)": lambda tmp: _gate_reject_ok(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_unusable_argument_raises_a_cellweave_error_that_is_also_a_value_error(
    call: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        CALLS[call](tmp_path)
    assert isinstance(caught.value, CellweaveError)
    assert isinstance(caught.value, ValueError)

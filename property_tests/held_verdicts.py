"""Rules that hold a list machine's verdicts and decide them one by one.

Shared by the list machines (`test_lists_props`, `test_list_element_edits_props`):
a machine mixes `HeldVerdicts` in before `RuleBasedStateMachine` and provides
`store`, `rt`, `gate` (None while nothing is held), `loop`, `clock` and `_settle()`.
The mixin also gives both machines their common driving (`_wait`, `quiesce`) and
the runtime's structural invariant.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from cells import MemoryStore, Outcome, VerdictGate
from runner import Runtime
from scheduler import BACKOFF_CAP, ManualClock

OUTCOMES = (Outcome.STALE_BASIS, Outcome.PERMANENT, Outcome.ABORTED)


class HeldVerdicts:
    store: MemoryStore
    rt: Runtime
    gate: VerdictGate | None
    loop: asyncio.AbstractEventLoop
    clock: ManualClock

    def _settle(self) -> None:
        raise NotImplementedError

    def _wait(self, awaitable: Any) -> Any:
        async def go() -> Any:
            return await awaitable

        return self.loop.run_until_complete(go())

    def quiesce(self) -> None:
        """Release what is held, then drain until nothing is deferred or running."""
        if self.gate is not None:
            self.gate.release()
            self.gate = None
        for _ in range(20):
            self._wait(self.rt.idle())
            self._settle()
            if self.rt.scheduler.deferred():
                self.clock.advance(BACKOFF_CAP + 1)
                continue
            if not self.rt.scheduler.busy():
                break

    @invariant()
    def structures_hold(self) -> None:
        self.rt._check()

    @precondition(lambda self: self.gate is None)
    @rule()
    def hold(self) -> None:
        self.gate = self.store.testing.hold_verdicts()

    @precondition(lambda self: self.gate is not None)
    @rule(data=st.data())
    def decide_one(self, data: st.DataObject) -> None:
        gate = self.gate
        assert gate is not None
        if not gate.waiting():
            return
        # A fixed range (then modulo): how many commits are held may differ between a
        # run and its replay, and a strategy must not depend on that.
        i = data.draw(st.integers(0, 255), label="held") % gate.waiting()
        if data.draw(st.booleans(), label="accept"):
            gate.accept(i)
        else:
            # Any commit may lose as a stale basis. Only owed writes (a user's list
            # write, a reconcile, a combine) are failed for good: a plain computation
            # whose commit fails for good is not retried by design (reference retry
            # table), so its output would legitimately stay stale until its inputs change.
            outcome = Outcome.STALE_BASIS
            if self._owed(gate.held()[i].request.local_seq):
                outcome = data.draw(st.sampled_from(OUTCOMES), label="outcome")
            gate.reject(i, outcome)
        self._settle()

    def _owed(self, local_seq: int) -> bool:
        """The held commit is a user's write, a reconcile's or a combine's."""
        tx = self.rt.replica._in_flight.get(local_seq)
        source = tx.source if tx is not None else None
        return source is None or any(
            c.node is source or (c.combiner is not None and source in c.combiner.nodes.values())
            for c in self.rt.runner.coordinators
        )

    @precondition(lambda self: self.gate is not None)
    @rule()
    def release(self) -> None:
        assert self.gate is not None
        self.gate.release()
        self.gate = None
        self._settle()

"""Async runs and handlings in the scheduler (issue 18 item 5).

A node function that returns an awaitable commits when it completes, on the
basis of what it read before returning: an input changed meanwhile fails the
commit as STALE_BASIS and the node runs again. A newer run and `remove()`
cancel the coroutine. Every coroutine waits at an `asyncio.Event` the test
sets: nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import cells
from cells import MISSING, Cell, Space, Transaction, read_value
from scheduler import Node, Scheduler


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


class Env:
    """One scheduler, an input `a` and a node writing `10 * a` into `b` asynchronously,
    each run waiting at the gate of the value it read."""

    def __init__(self) -> None:
        self.sp = Space(cells.MemoryStore(), "x")
        self.sch = Scheduler(self.sp.replica)
        self.gates: dict[Any, asyncio.Event] = {}
        self.started: list[Any] = []
        self.cancelled: list[Any] = []
        self.a = self.sp.cell("a")
        self.a.set(1)
        self.sp.replica.pump()
        self.b = self.sp.cell("b")
        self.node = self.register()

    def gate(self, key: Any) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    def register(self) -> Node:
        a, b = self.a, self.b

        def run(tx: Transaction) -> Any:
            value = read_value(tx, a.link())
            return self.finish(tx, value, b)

        return self.sch.register(
            run,
            identity=self.sp.identity,
            outputs=[(b.doc_key, ("value",))],
            reads=[(a.doc_key, ("value",), False)],
            label="async times ten",
        )

    async def finish(self, tx: Transaction, value: Any, b: Cell) -> None:
        self.started.append(value)
        try:
            await self.gate(value).wait()
        except asyncio.CancelledError:
            self.cancelled.append(value)
            raise
        tx.write(b.doc_key, ("value",), value * 10)

    def check(self) -> None:
        self.sch._check()
        self.sp.replica._check()


def test_an_async_run_whose_input_changed_fails_its_commit_on_its_basis_and_runs_again() -> None:
    async def main() -> None:
        env = Env()
        landed: list[Any] = []
        env.sch.sink(env.b, landed.append)
        await turns()
        assert [1] == env.started and env.node.status == "clean"
        # It completes with 10, computed from 1, and the input changes while it awaits,
        # in one callback: the run resumes before the pass the change schedules on the
        # loop (a change settling first would cancel the run instead: next test).
        env.gate(1).set()
        env.a.set(2)
        await turns()
        assert 1 == env.sch.stats.stale_reruns  # ... and its commit failed on its basis
        assert 10 not in landed and MISSING == env.b.get()
        assert [1, 2] == env.started  # it ran again on the new input
        env.gate(2).set()
        await env.sch.idle()
        assert 20 == env.b.get() == landed[-1]
        assert [] == env.cancelled
        env.check()
        env.sch.close()

    asyncio.run(main())


def test_a_newer_run_cancels_the_run_in_flight_and_remove_cancels_the_last() -> None:
    async def main() -> None:
        env = Env()
        env.sch.sink(env.b, lambda _v: None)
        await turns()
        env.a.set(2)
        env.sch.settle()  # runs again now: the older coroutine is superseded
        await turns()
        assert [1, 2] == env.started and [1] == env.cancelled
        env.check()
        env.sch.remove(env.node)
        await turns()
        assert [1, 2] == env.cancelled
        assert not env.sch.work
        env.gate(1).set()
        env.gate(2).set()
        await env.sch.idle()
        assert MISSING == env.b.get()  # nothing of a cancelled run ever lands
        env.check()
        env.sch.close()

    asyncio.run(main())


def test_idle_waits_for_an_async_run_and_close_cancels_it() -> None:
    async def main() -> None:
        env = Env()
        env.sch.sink(env.b, lambda _v: None)
        idle = asyncio.ensure_future(env.sch.idle())
        await turns()
        assert not idle.done() and env.sch.busy()
        env.gate(1).set()
        await idle
        assert 10 == env.b.get()
        env.a.set(3)
        env.sch.settle()
        await turns()
        env.sch.close()
        await turns()
        assert [3] == env.cancelled and not env.sch.work

    asyncio.run(main())

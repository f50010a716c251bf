"""Benchmarks of one result shared by k principals: what a pull costs as k grows.

Group ``pull principals``: a space-scoped result (a chain of two lifts) is set up
once and started by k principals (`rt.session(...)`), so it runs as k instances
that all write the same documents. One op is one ``await cell.pull()`` of that
result by one of the principals while nothing changed: the value is current, no
computation may run (``runs`` counts calls of the lifts' functions, and must be
0), and the cost is the demand the pull grants and withdraws. Rows: k = 1
(baseline), 10, 100, 300; a pull that costs O(1) in k keeps every row near 1.

Group ``principals up``: one op is one principal brought up: a session's
``start`` of that shared result and its first ``pull()`` (which runs that
principal's instance: ``runs`` 2 per op). A sample sets the result up on a fresh
runtime and brings k principals up one after the other (the runtime's own setup
is in the sample too, spread over its k ops); rows k = 10 (baseline), 100, 300.
Linear in k keeps every row near 1.

Counted work: ``runs`` (lift calls), ``edge_visits`` (graph edges the scheduler
walked granting and withdrawing demand, from `Graph.edge_visits`).

See docs/performance.md ("A result many principals started") for numbers.
"""

from __future__ import annotations

import asyncio
import atexit
from typing import Any

from bench.harness import BenchError, Counts, Run, bench
from runner import Runtime, lift, pattern

PULLS = 20
"""Pulls per sample."""
RUNS = [0]
"""Calls of the lifts' functions (a list: the lifts are module-level functions)."""
_open: list[tuple[asyncio.AbstractEventLoop, Runtime]] = []


def double(x: Any) -> Any:
    RUNS[0] += 1
    return (x or 0) * 2


def inc(x: Any) -> Any:
    RUNS[0] += 1
    return (x or 0) + 1


@pattern
def Shared(src):  # type: ignore[no-untyped-def]
    return {"out": lift(inc)(lift(double)(src))}


def _clean_up() -> None:
    while _open:
        loop, rt = _open.pop()
        loop.run_until_complete(rt.aclose())
        loop.close()


atexit.register(_clean_up)


def _pulls(k: int) -> Run:
    _clean_up()
    loop = asyncio.new_event_loop()
    rt = Runtime(space="bench")
    _open.append((loop, rt))

    async def setup() -> Any:
        src, res = rt.get_cell("src"), rt.get_cell("res")
        async with rt.edit() as tx:
            src.with_tx(tx).set(3)
            rt.setup(tx, Shared, {"src": src}, res)
        sessions = [rt.session(f"p{i}", "s") for i in range(k)]
        for s in sessions:
            await s.start(s.get_cell("res"))
        cell = sessions[0].get_cell("res")
        if await cell.pull() != {"out": 7}:
            raise BenchError(f"pull principals k={k}: wrong first value")
        return cell

    cell = loop.run_until_complete(setup())
    graph = rt.scheduler.graph

    async def pulls() -> None:
        for _ in range(PULLS):
            if await cell.pull() != {"out": 7}:
                raise BenchError(f"pull principals k={k}: wrong value")

    def run() -> Counts:
        runs, visits = RUNS[0], graph.edge_visits
        loop.run_until_complete(pulls())
        counts = {"runs": RUNS[0] - runs, "edge_visits": graph.edge_visits - visits}
        if counts["runs"]:
            raise BenchError(f"pull principals k={k}: {counts['runs']} runs, nothing changed")
        return counts

    return run


@bench(group="pull principals", name="pull, 1 principal", ops=PULLS, baseline=True)
def pull_1() -> Run:
    return _pulls(1)


@bench(group="pull principals", name="pull, 10 principals", ops=PULLS)
def pull_10() -> Run:
    return _pulls(10)


@bench(group="pull principals", name="pull, 100 principals", ops=PULLS)
def pull_100() -> Run:
    return _pulls(100)


@bench(group="pull principals", name="pull, 300 principals", ops=PULLS)
def pull_300() -> Run:
    return _pulls(300)


def _bring_up(k: int) -> Run:
    def run() -> Counts:
        loop = asyncio.new_event_loop()
        rt = Runtime(space="bench")

        async def main() -> None:
            src, res = rt.get_cell("src"), rt.get_cell("res")
            async with rt.edit() as tx:
                src.with_tx(tx).set(3)
                rt.setup(tx, Shared, {"src": src}, res)
            for i in range(k):
                session = rt.session(f"p{i}", "s")
                cell = session.get_cell("res")
                await session.start(cell)
                if await cell.pull() != {"out": 7}:
                    raise BenchError(f"principals up k={k}: wrong value")

        runs = RUNS[0]
        visits = rt.scheduler.graph.edge_visits
        try:
            loop.run_until_complete(main())
            return {"runs": RUNS[0] - runs, "edge_visits": rt.scheduler.graph.edge_visits - visits}
        finally:
            loop.run_until_complete(rt.aclose())
            loop.close()

    return run


@bench(group="principals up", name="bring up 10 principals", ops=10, baseline=True)
def up_10() -> Run:
    return _bring_up(10)


@bench(group="principals up", name="bring up 100 principals", ops=100)
def up_100() -> Run:
    return _bring_up(100)


@bench(group="principals up", name="bring up 300 principals", ops=300)
def up_300() -> Run:
    return _bring_up(300)

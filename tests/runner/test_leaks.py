"""Churn leaves no bookkeeping behind: after starts, stops and releases over many
results, through every path that creates an entry, nothing is left over.

"Nothing" is every table the runner and the runtime keep per result: start
attempts (active, by key, generations), pending starts, lifetimes, remembered
declined releases, registrations, page owners and scheduler nodes, and
`rt._check()` passes. Each test drives one family of paths (link documents,
commit-gated runs, failed loads, nested teardown, pages) over 64 results;
races are made by holding loads and verdicts, never by sleeping.
"""

from __future__ import annotations

from typing import Any

import pytest
from pattern_defs import Child, Parent
from support import arun, turns

from cells import CellweaveError, MemoryStore, Outcome, classify
from runner import Runtime

N = 64


def assert_nothing_left(rt: Runtime) -> None:
    runner = rt.runner
    attempts = runner.attempts
    assert (set(), {}, {}) == (attempts.active, attempts.by_key, attempts.generation)
    assert frozenset() == rt.pending_starts()
    assert frozenset() == rt.lifetimes()
    assert {} == runner._declined
    assert frozenset() == rt.registrations()
    assert ({}, {}) == (rt._pages_book.by_pid, rt._pages_book.by_key)
    assert 0 == rt.scheduler.statistics()["nodes"]
    rt._check()


async def set_up(rt: Runtime, name: str, n: int = N) -> list[Any]:
    results = [rt.get_cell((name, i)) for i in range(n)]
    tx = rt.edit()
    for i, res in enumerate(results):
        rt.setup(tx, Child, {"value": i}, res)
    assert (await tx.commit()).ok
    return results


async def run_parents(rt: Runtime, n: int = N) -> list[Any]:
    parents = []
    tx = rt.edit()
    for i in range(n):
        items, count = rt.get_cell(("items", i)), rt.get_cell(("count", i))
        items.with_tx(tx).set([])
        count.with_tx(tx).set(0)
        parent = rt.get_cell(("parent", i))
        rt.run(tx, Parent, {"value": i, "items": items, "count": count}, parent)
        parents.append(parent)
    assert (await tx.commit()).ok
    return parents


def test_starts_through_link_documents_leave_nothing_after_stop_or_release() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            targets = await set_up(rt, "target")
            pointers = [rt.get_cell(("pointer", i)) for i in range(N)]
            tx = rt.edit()
            for pointer, target in zip(pointers, targets, strict=True):
                pointer.with_tx(tx).set(target.link())
            assert (await tx.commit()).ok
            for i, (pointer, target) in enumerate(zip(pointers, targets, strict=True)):
                if i % 3 == 0:
                    # Settled through the link, then ended by the authoritative stop.
                    assert await rt.start(pointer) is True
                    rt.stop(target)
                elif i % 3 == 1:
                    # Stopped while the start waits on the link document: a tombstone.
                    gate = store.testing.hold_loads(pointer)
                    started = rt.start(pointer)
                    await turns()
                    assert 1 == gate.waiting()
                    rt.stop(target)
                    gate.release()
                    assert await started is False
                else:
                    # Stopped after the target is discovered, while its sync is held.
                    gate = store.testing.hold_loads(target)
                    started = rt.start(pointer)
                    await turns()
                    assert 1 == gate.waiting()
                    rt.stop(target)
                    gate.release()
                    assert await started is False
            await rt.idle()
            assert_nothing_left(rt)

    arun(main, timeout=60)


def test_commit_gated_runs_leave_nothing_whether_stopped_released_or_installed() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            results = [rt.get_cell(("gated", i)) for i in range(N)]
            for i, res in enumerate(results):
                tx = rt.edit(commit_gated=True)
                rt.run(tx, Child, {"value": i}, res)
                assert rt.key(res) in rt.pending_starts()
                kind = i % 4
                if kind == 0:
                    rt.stop(res)  # before the commit: the pending start is tombstoned
                elif kind == 1:
                    rt.release(res)  # before the commit: the pending start is cancelled
                if kind == 3:
                    # The commit fails: the pending start settles, nothing installs.
                    gate = store.testing.hold_verdicts()
                    pending = tx.commit()
                    gate.reject(0, Outcome.PERMANENT)
                    gate.release()
                    assert not (await pending).ok
                else:
                    assert (await tx.commit()).ok
                installed = rt.key(res) in rt.registrations()
                assert (kind == 2) == installed
                if installed:
                    if i % 8 == 2:
                        rt.release(res)  # no lifetime, no start in flight: it ends
                    else:
                        rt.stop(res)
            await rt.idle()
            assert_nothing_left(rt)

    arun(main, timeout=60)


def test_starts_whose_held_loads_fail_leave_no_attempts() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            results = await set_up(rt, "failing")
            await rt.idle()
            for res in results:
                gate = store.testing.hold_loads(res)
                started = rt.start(res)
                await turns()
                assert 1 == gate.waiting()
                assert rt.runner.attempts.in_flight(rt.key(res))
                gate.fail()
                with pytest.raises(CellweaveError) as info:
                    await started
                assert Outcome.LIVENESS is classify(info.value)
            await rt.idle()
            assert_nothing_left(rt)
            # And the same results start normally afterwards.
            assert await rt.start(results[0]) is True
            rt.stop(results[0])
            assert_nothing_left(rt)

    arun(main, timeout=60)


def test_parent_teardown_releases_nested_children_and_forgets_declined_releases() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            parents = await run_parents(rt)
            assert 2 * N == len(rt.registrations())
            for i, parent in enumerate(parents):
                child = parent.key("child").resolve()
                kind = i % 4
                if kind == 0:
                    rt.stop(parent)  # teardown releases the nested child
                    assert rt.key(child) not in rt.registrations()
                elif kind == 1:
                    # The child claimed its own lifetime: the teardown's release declines;
                    # a stop of the child ends it.
                    assert await rt.start(child) is True
                    rt.stop(parent)
                    assert {rt.key(child)} <= rt.lifetimes()
                    rt.stop(child)
                elif kind == 2:
                    # The teardown's release declines for a start in flight and is
                    # remembered; the start then fails, so the release applies.
                    gate = store.testing.hold_loads(child)
                    started = rt.start(child)
                    await turns()
                    rt.stop(parent)
                    assert rt.key(child) in rt.runner._declined
                    gate.fail()
                    with pytest.raises(CellweaveError):
                        await started
                    await turns()
                    assert rt.key(child) not in rt.registrations()
                else:
                    # Declined and remembered, then the start settles and claims: the
                    # remembered release is dropped with the registration's stop.
                    started = rt.start(child)
                    rt.stop(parent)
                    assert rt.key(child) in rt.runner._declined
                    assert await started is True
                    assert {rt.key(child)} <= rt.lifetimes()
                    rt.stop(child)
            await rt.idle()
            assert_nothing_left(rt)

    arun(main, timeout=60)


def test_opened_and_stopped_pages_leave_no_owner_or_lifetime() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            results = await set_up(rt, "page")
            for cycle in range(2):
                for res in results:
                    assert await rt.open_page(res) is True
                assert N == len(rt.pages()) == len(rt.lifetimes())
                for i, res in enumerate(results):
                    if cycle == 0 or i % 2 == 0:
                        rt.stop(res)
                    else:
                        # A release declines for a page (its lifetime is independent);
                        # the stop that follows ends it.
                        rt.release(res)
                        assert rt.key(res) in rt.registrations()
                        rt.stop(res)
                await rt.idle()
                assert [] == rt.pages()
                assert_nothing_left(rt)

    arun(main, timeout=60)


def test_start_stop_churn_on_one_result_leaves_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            (res,) = await set_up(rt, "one", n=1)
            for i in range(N):
                assert await rt.start(res) is True
                if i % 2:
                    rt.stop(res)
                else:
                    # A stop racing a second start: the second one claims nothing.
                    again = rt.start(res)
                    rt.stop(res)
                    assert await again is False
            await rt.idle()
            assert_nothing_left(rt)

    arun(main, timeout=60)


def test_an_open_page_that_fails_to_start_leaves_no_record_or_owner() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            never_set_up = rt.get_cell("never set up")
            with pytest.raises(CellweaveError, match="holds no pattern run"):
                await rt.open_page(never_set_up)
            await rt.idle()
            assert [] == rt.pages()
            assert_nothing_left(rt)

    arun(main, timeout=60)

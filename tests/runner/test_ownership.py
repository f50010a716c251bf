"""The ownership rules: stop vs release, lifetimes, rollback, pending starts, lineage, pages.

SCENARIOS.md sections B-G, each named after its id, plus DESIGN.md §4.3. Every
race holds the exact stage (a load, a verdict) with the store's test controls
and acts in the gap; nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest
from pattern_defs import Child, Parent, Spawner
from support import arun, turns
from support import parent_result as run_parent

from cells import MISSING, CellweaveError, MemoryStore, Outcome, classify
from runner import OwnershipError, Runtime
from runner import _docs as docs
from runner._ownership import PendingStart
from scheduler import CommitConvergenceError, ManualClock

# --------------------------------------------------------------------------- B


def test_S08_a_release_naming_a_replaced_registration_does_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("r")
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, res)
            await tx.commit()
            old = rt.registration(res)
            rt.stop(res)
            assert await rt.start(res) is True
            new = rt.registration(res)
            assert old is not None and new is not None and old is not new
            rt.stop(res)  # drops the lifetime the start claimed
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, res)
            await tx.commit()
            replacement = rt.registration(res)
            rt.release(res, old)
            assert replacement is rt.registration(res)
            decline = rt.inspect()["trace"]["entries"][-1]
            assert ("decline", "token mismatch") == (decline["event"], decline["reason"])

    arun(main)


def test_S09_releasing_nothing_is_harmless() -> None:
    rt = Runtime()
    res = rt.get_cell("never")
    rt.release(res)
    assert frozenset() == rt.registrations()
    rt._check()


def test_S10_a_launch_that_cannot_name_a_registration_releases_what_is_there() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            source = rt.get_cell("source")
            res = rt.get_cell("spawner")
            tx = rt.edit()
            source.with_tx(tx).set(1)
            rt.run(tx, Spawner, {"source": source}, res)
            await tx.commit()
            assert 2 == await res.key("child", "doubled").pull()
            count = len(rt.registrations())
            gate = store.testing.hold_verdicts()
            seen: list[Any] = []
            cancel = res.key("child", "doubled").sink(seen.append)
            source.set(2)
            rt.settle()  # run A (child re-driven for 2): its commit is held
            source.set(3)
            rt.settle()  # run B (for 3)
            # Held: source=2, run A, the child's recomputation, source=3, run B, ...
            gate.accept(0)  # source=2; run A is now the oldest
            while gate.waiting() > 1:
                gate.accept(1)  # everything after run A, run B included, commits
            gate.reject(0, Outcome.STALE_BASIS)  # run A loses as a conflict
            gate.release()
            await rt.idle()
            cancel()
            assert count == len(rt.registrations())
            assert 6 == await res.key("child", "doubled").pull()
            rt._check()

    arun(main)


def test_S11_stop_is_authoritative_over_the_result() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await run_parent(rt)
            child = res.key("child").resolve()
            assert await rt.start(child) is True
            assert rt.key(child) in rt.lifetimes()
            rt.stop(child)
            assert rt.key(child) not in rt.registrations()
            assert frozenset() == rt.lifetimes()
            # Re-launched by its parent (restart), then the parent's teardown releases it.
            rt.stop(res)
            assert await rt.start(res) is True
            rt.stop(res)  # the parent's own lifetime: stop it, releasing its children
            assert frozenset() == rt.registrations()

    arun(main)


def test_S12_a_stop_reaches_a_start_still_resolving_a_link() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            target = rt.get_cell("T")
            pointer = rt.get_cell("pointer")
            tx = rt.edit()
            rt.setup(tx, Parent, {"value": 1}, target)
            pointer.with_tx(tx).set(target.link())
            await tx.commit()
            gate = store.testing.hold_loads(pointer)
            started = rt.start(pointer)
            await turns()
            assert 1 == gate.waiting()
            rt.stop(target)  # T was never running: only a tombstone reaches the start
            gate.release()
            assert await started is False
            assert frozenset() == rt.registrations()
            assert 0 == rt.scheduler.statistics()["nodes"]  # T's instantiation never ran
            child_arg = docs.argument_link(docs.internal_link(target.link(), 0))
            assert store.read_durable(child_arg.key(rt.identity)) is MISSING
            assert await rt.start(target) is True  # the full path, not a "stopped" shortcut
            rt._check()

    arun(main)


@pytest.mark.parametrize("stage", ["root sync", "pattern load", "dependency pre-sync", "target"])
def test_S14_a_stop_invalidates_a_start_held_at_any_stage(stage: str) -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            target = rt.get_cell("T")
            pointer = rt.get_cell("pointer")
            tx = rt.edit()
            rt.setup(tx, Parent, {"value": 1}, target)
            pointer.with_tx(tx).set(target.link())
            await tx.commit()
            await rt.idle()
            link = target.link()
            held = {
                "root sync": target.doc_key,
                "pattern load": docs.pattern_link(link.space, Parent.identity).key(rt.identity),
                "dependency pre-sync": docs.argument_link(link).key(rt.identity),
                "target": target.doc_key,
            }[stage]
            gate = store.testing.hold_loads(held)
            started = rt.start(pointer if stage == "target" else target)
            await turns()
            assert 1 == gate.waiting()
            rt.stop(target)
            gate.release()
            assert await started is False
            assert frozenset() == rt.registrations()
            # No setup writes were staged after the stop: the child never got its argument.
            child_arg = docs.argument_link(docs.internal_link(link, 0)).key(rt.identity)
            assert store.read_durable(child_arg) is MISSING
            assert 0 == rt.scheduler.statistics()["nodes"]
            rt._check()

    arun(main)


def test_S15_runtime_wide_stop_invalidates_everything() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            page = await run_parent(rt, name="page")
            assert await rt.start(page) is True  # a lifetime
            held_target = rt.get_cell("held")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, held_target)
            await tx.commit()
            gate = store.testing.hold_loads(held_target)
            in_flight = rt.start(held_target)
            gated_tx = rt.edit(commit_gated=True)
            gated = rt.get_cell("gated")
            rt.run(gated_tx, Child, {"value": 2}, gated)
            assert {rt.key(gated)} == rt.pending_starts()
            rt.stop_all()
            assert frozenset() == rt.lifetimes() | rt.registrations() | rt.pending_starts()
            await gated_tx.commit()
            gate.release()
            assert await in_flight is False
            await rt.idle()
            assert frozenset() == rt.lifetimes() | rt.registrations() | rt.pending_starts()
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- C


def test_S16_a_page_being_opened_survives_its_parents_teardown() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = await run_parent(rt)
            child = res.key("child").resolve()
            started = rt.start(child)  # in flight
            rt.stop(res)  # the parent's release of the child declines
            assert rt.key(child) in rt.registrations()
            assert await started is True
            assert {rt.key(child)} == rt.registrations() == rt.lifetimes()
            reasons = [e.get("reason") for e in rt.inspect()["trace"]["entries"]]
            assert "start in flight" in reasons
            rt._check()

    arun(main)


def test_S18_a_settled_independent_start_survives_and_stays_reactive() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            value = rt.get_cell("value")
            value.set(2)
            items, count = rt.get_cell("i"), rt.get_cell("c")
            res = rt.get_cell("res")
            tx = rt.edit()
            rt.run(tx, Parent, {"value": value, "items": items, "count": count}, res)
            await tx.commit()
            child = res.key("child").resolve()
            assert await rt.start(child) is True
            rt.stop(res)
            value.set(5)
            assert {rt.key(child)} == rt.registrations()
            assert 10 == await child.key("doubled").pull()

    arun(main)


def test_S21_a_start_superseded_by_a_stop_claims_nothing() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("R")
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, res)
            await tx.commit()
            redundant = rt.start(res)
            rt.stop(res)
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, res)
            await tx.commit()
            assert await redundant is False
            assert rt.key(res) in rt.registrations()
            assert frozenset() == rt.lifetimes()
            rt.release(res)
            assert frozenset() == rt.registrations()

    arun(main)


def test_a_stop_of_an_intermediate_link_document_does_not_void_the_claim() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            target = rt.get_cell("T")
            pointer = rt.get_cell("pointer")
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, target)
            pointer.with_tx(tx).set(target.link())
            await tx.commit()
            gate = store.testing.hold_loads(target)
            started = rt.start(pointer)
            await turns()
            assert 1 == gate.waiting()  # the target was discovered, its sync is held
            gate.release()
            await turns(1)
            rt.stop(pointer)  # the link document, not the target
            assert await started is True
            assert {rt.key(target)} == rt.lifetimes()

    arun(main)


def test_no_zombie_after_a_declined_release() -> None:
    """DESIGN §4.3 item 4: a release that declined for an in-flight start applies if
    that start then fails."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            res = await run_parent(rt)
            child = res.key("child").resolve()
            gate = store.testing.hold_loads(child)
            started = rt.start(child)
            await turns()
            rt.stop(res)  # the release of the child declines: a start is in flight
            assert rt.key(child) in rt.registrations()
            gate.fail()
            with pytest.raises(CellweaveError) as info:
                await started
            assert Outcome.LIVENESS is classify(info.value)
            await turns()
            assert frozenset() == rt.registrations()
            rt._check()

    arun(main)


def test_no_orphaned_lifetime_and_generation_fences() -> None:
    """DESIGN §4.3 items 3 and 7."""

    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("r")
            tx = rt.edit()
            rt.setup(tx, Child, {"value": 1}, res)
            await tx.commit()
            assert await rt.start(res) is True
            reg = rt.registration(res)
            assert reg is not None
            rt.stop(res, generation=reg.generation + 1000)  # stale: nothing happens
            assert reg is rt.registration(res)
            rt.runner.stop_all()
            assert frozenset() == rt.lifetimes()
            assert await rt.start(res) is True
            reg2 = rt.registration(res)
            assert reg2 is not None
            rt.runner.registrations.end(rt.key(res))  # ended however: the record goes
            assert frozenset() == rt.lifetimes()
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- D


def test_S24_a_setup_that_never_lands_takes_its_registrations_with_it() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            tx = rt.edit()
            await run_parent(rt, tx=tx)
            assert 2 == len(rt.registrations())
            tx.abort("changed my mind")
            assert frozenset() == rt.registrations()
            assert 0 == rt.scheduler.statistics()["nodes"]
            rt._check()

    arun(main)


@pytest.mark.parametrize("outcome", [Outcome.PERMANENT, Outcome.TERMINAL])
def test_S24_a_rejected_setup_rolls_back_too(outcome: Outcome) -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            gate = store.testing.hold_verdicts()
            tx = rt.edit()
            await run_parent(rt, tx=tx)
            pending = tx.commit()
            assert 2 == len(rt.registrations())
            gate.reject(0, outcome)
            gate.release()
            assert not (await pending).ok
            assert frozenset() == rt.registrations()

    arun(main)


def test_S25_a_stale_basis_keeps_registrations() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            gate = store.testing.hold_verdicts()
            tx = rt.edit()
            res = await run_parent(rt, tx=tx)
            pending = tx.commit()
            regs = rt.registrations()
            gate.reject(0, Outcome.STALE_BASIS)
            gate.release()
            assert Outcome.STALE_BASIS is (await pending).outcome
            assert regs == rt.registrations()
            events = [e["event"] for e in rt.inspect()["trace"]["entries"]]
            assert "debt" in events
            # The re-run reuses the registrations and re-issues the owed setup writes.
            tx = rt.edit()
            await run_parent(rt, tx=tx)
            assert (await tx.commit()).ok
            assert regs == rt.registrations()
            assert 6 == await res.key("child", "doubled").pull()

    arun(main)


def test_S28_a_computation_produced_child_comes_back_after_a_failed_run() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            source = rt.get_cell("source")
            res = rt.get_cell("spawner")
            tx = rt.edit()
            source.with_tx(tx).set(2)
            rt.run(tx, Spawner, {"source": source}, res)
            await tx.commit()
            await rt.idle()
            gate = store.testing.hold_verdicts()
            cancel = res.key("child", "doubled").sink(lambda _v: None)  # run A materializes
            source.set(3)
            rt.settle()  # run B re-drives the same child
            # Held: run A, the child's first computation, source=3, run B, ...
            while gate.waiting() > 1:
                gate.accept(1)  # run B (and what followed) commits first
            gate.reject(0, Outcome.ABORTED)  # and now run A fails for good
            gate.release()
            await rt.idle()
            assert rt.key(res.key("child").resolve()) in rt.registrations()
            assert 6 == await res.key("child", "doubled").pull()
            source.set(4)
            assert 8 == await res.key("child", "doubled").pull()
            cancel()
            rt._check()

    arun(main)


def test_S29_an_abort_is_a_settle_outcome() -> None:
    rt = Runtime()
    tx = rt.edit()
    seen: list[Any] = []
    tx.add_settle_callback(lambda _tx, result: seen.append(result.outcome))
    tx.add_settle_callback(lambda _tx, result: seen.append(result.outcome))
    tx.abort("test")
    assert [Outcome.ABORTED, Outcome.ABORTED] == seen


# --------------------------------------------------------------------------- E


def test_S32_a_stop_before_the_commit_tombstones_the_pending_start() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("gated")
            tx = rt.edit(commit_gated=True)
            rt.run(tx, Child, {"value": 1}, res)
            assert {rt.key(res)} == rt.pending_starts()
            assert frozenset() == rt.registrations()
            rt.stop(res)
            assert frozenset() == rt.pending_starts()
            assert (await tx.commit()).ok
            await rt.idle()
            assert frozenset() == rt.registrations()

    arun(main)


def test_S33_a_release_before_the_commit_cancels_the_pending_start() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("gated")
            tx = rt.edit(commit_gated=True)
            rt.run(tx, Child, {"value": 1}, res)
            rt.release(res)
            assert frozenset() == rt.pending_starts()
            await tx.commit()
            await rt.idle()
            assert frozenset() == rt.registrations()

    arun(main)


def test_S35_an_installed_start_stops_being_pending() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("gated")
            tx = rt.edit(commit_gated=True)
            rt.run(tx, Child, {"value": 4}, res)
            await tx.commit()
            assert {rt.key(res)} == rt.registrations()
            assert frozenset() == rt.pending_starts()
            assert 8 == await res.key("doubled").pull()

    arun(main)


def test_S36_a_pending_start_settles_when_its_transaction_fails() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            res = rt.get_cell("gated")
            tx = rt.edit(commit_gated=True)
            rt.run(tx, Child, {"value": 1}, res)
            tx.abort("no")
            assert frozenset() == rt.pending_starts() | rt.registrations()
            # The navigation-bearing handler path: its commit fails.
            parent = await run_parent(rt)
            before = rt.registrations()
            gate = store.testing.hold_verdicts()
            rt.send(parent.key("open_new"), {"value": 9})
            rt.settle()
            assert 1 == len(rt.pending_starts())
            gate.reject(0, Outcome.PERMANENT)
            gate.release()
            await rt.idle()
            assert frozenset() == rt.pending_starts()
            assert before == rt.registrations()

    arun(main)


def test_S38_stopping_the_parent_tombstones_a_gated_handler_result() -> None:
    async def main() -> None:
        store = MemoryStore()
        opened: list[Any] = []
        async with Runtime(store, on_navigate=opened.append) as rt:
            parent = await run_parent(rt)
            gate = store.testing.hold_verdicts()
            rt.send(parent.key("open_new"), {"value": 9})
            rt.settle()
            assert 1 == len(rt.pending_starts())
            rt.stop(parent)
            gate.release()
            await rt.idle()
            assert frozenset() == rt.registrations() | rt.pending_starts()
            assert [] == opened

    arun(main)


def test_S39_a_retry_after_the_parent_stopped_launches_nothing() -> None:
    async def main() -> None:
        store = MemoryStore()
        clock = ManualClock()
        async with Runtime(store, clock=clock) as rt:
            parent = await run_parent(rt)
            gate = store.testing.hold_verdicts()
            rt.send(parent.key("open_new"), {"value": 9})
            rt.settle()
            gate.reject(0, Outcome.STALE_BASIS)  # a retry is scheduled
            rt.settle()
            rt.stop(parent)
            gate.release()
            clock.advance(5)
            await rt.idle()
            assert frozenset() == rt.registrations() | rt.pending_starts()

    arun(main)


def test_S40_deferred_ownership_after_installation_stops_only_its_own_registration() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("gated")
            tx = rt.edit(commit_gated=True)
            rt.run(tx, Child, {"value": 1}, res)
            (pending,) = list(rt.runner.pending)
            await tx.commit()
            r1 = rt.registration(res)
            assert r1 is not None and pending.installed is r1
            rt.stop(res)
            tx = rt.edit()
            rt.run(tx, Child, {"value": 1}, res)
            await tx.commit()
            r2 = rt.registration(res)
            assert r2 is not None and r2 is not r1
            rt.runner.cancel_pending(pending)
            assert r2 is rt.registration(res) and not r2.ended
            assert isinstance(pending, PendingStart)

    arun(main)


# --------------------------------------------------------------------------- F


def test_S41_pieces_launched_by_an_origin_that_never_commits_are_stopped() -> None:
    async def main() -> None:
        store = MemoryStore()
        clock = ManualClock()
        async with Runtime(store, clock=clock) as rt:
            parent = await run_parent(rt)
            before = rt.registrations()
            gate = store.testing.hold_verdicts()
            sent = rt.send(parent.key("spawn"), {"value": 1})
            for _ in range(500):
                rt.settle()
                if sent.done():
                    break
                while gate.waiting():
                    gate.reject(0, Outcome.STALE_BASIS)
                clock.advance(1.0)
            assert isinstance(sent.error, CommitConvergenceError)
            with pytest.raises(CommitConvergenceError):
                await sent
            gate.release()
            await rt.idle()
            assert before == rt.registrations()

    arun(main)


def test_S42_a_sequential_duplicate_delivery_never_stops_the_winner() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            parent = await run_parent(rt)
            before = rt.registrations()
            rt.send(parent.key("spawn"), {"value": 4}, event_id="order-1")
            await rt.idle()
            rt.send(parent.key("spawn"), {"value": 4}, event_id="order-1")
            await rt.idle()
            added = rt.registrations() - before
            assert 1 == len(added)

    arun(main)


def test_S42_a_concurrent_duplicate_on_another_runtime_never_stops_the_winner() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one, Runtime(store) as two:
            parent = await run_parent(one)
            await one.idle()
            assert await two.start(two.get_cell("res")) is True
            before_one, before_two = one.registrations(), two.registrations()
            gate = store.testing.hold_verdicts()
            one.send(parent.key("spawn"), {"value": 4}, event_id="order-7")
            one.settle()
            two.send(two.get_cell("res").key("spawn"), {"value": 4}, event_id="order-7")
            two.settle()
            gate.release()
            await one.idle()
            await two.idle()
            won = [len(one.registrations() - before_one), len(two.registrations() - before_two)]
            assert [1, 0] == won  # the first handling won; the loser stopped only its own

    arun(main)


@pytest.mark.parametrize("stream", ["open", "open_nested"])
def test_S43_a_gated_navigation_is_cancelled_with_its_parent(stream: str) -> None:
    async def main() -> None:
        store = MemoryStore()
        opened: list[Any] = []
        async with Runtime(store, on_navigate=opened.append) as rt:
            parent = await run_parent(rt)
            gate = store.testing.hold_verdicts()
            rt.send(parent.key(stream), {})
            rt.settle()
            assert 1 == len(rt.pending_starts())
            rt.stop(parent)
            gate.release()
            await rt.idle()
            assert [] == opened
            assert frozenset() == rt.registrations() | rt.pending_starts()
            assert [] == rt.pages()

    arun(main)


# --------------------------------------------------------------------------- G


def test_S44_navigation_happens_after_the_commit_once() -> None:
    async def main() -> None:
        store = MemoryStore()
        opened: list[Any] = []
        async with Runtime(store, on_navigate=opened.append) as rt:
            parent = await run_parent(rt)
            gate = store.testing.hold_verdicts()
            rt.send(parent.key("open"), {})
            rt.settle()
            gate.reject(0, Outcome.PERMANENT)  # the commit is rejected: no navigation
            gate.release()
            await rt.idle()
            assert [] == opened
            rt.send(parent.key("open"), {})  # a later run navigates
            rt.send(parent.key("open"), {})  # twice: one page, one claim
            await rt.idle()
            assert 2 == len(opened)  # each successful handling navigates once
            assert 1 == len(rt.pages())
            assert 1 == len(rt.lifetimes())

    arun(main)


def test_S45_a_deferred_start_keeps_the_firing_sessions_identity() -> None:
    async def main() -> None:
        async with Runtime(principal="service") as rt:
            parent = await run_parent(rt)  # a space-scoped piece the service runs
            alice, bob = rt.session("alice", "a1"), rt.session("bob", "b1")
            alice.send(parent.key("open_new"), {"value": 1})
            bob.send(parent.key("open_new"), {"value": 2})
            await rt.idle()
            # Each navigation lands with the principal that fired it, never the service.
            assert 1 == len(alice.pages()) == len(bob.pages())
            assert [] == rt.pages()
            assert alice.pages()[0].id != bob.pages()[0].id  # each event its own child
            assert [2, 4] == [await p.key("doubled").pull() for p in alice.pages() + bob.pages()]
            with pytest.raises(OwnershipError):
                bob.stop(alice.pages()[0])

    arun(main)

"""List coordinators: re-issued setup, cold resume and scope instances (SCENARIOS.md I-K:
S59, S60, S61, S65, S67).

Our containers differ from the reference's: a coordinator's container is its own
output spot (`docs.internal_link(result, index)`), rewritten by every reconcile, and
an element child's setup (pattern identity, argument) is staged by
`Runner.stage_setup`, stamped with the issuing reconcile. Each test says what the
scenario's requirement means here. Races hold verdicts and loads with the store's
test controls; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pattern_defs import Filtered, Flattened, Mapped
from support import arun, coordinator, run_list, turns

from cells import MISSING, DocKey, Identity, Link, MemoryStore, Outcome, element_position
from cells._address import instance_key
from cells._store import HeldCommit, VerdictGate
from cells.errors import LivenessError
from runner import Runtime
from runner import _docs as docs
from runner._lists import child_link
from scheduler import NodeError

PATTERNS = {"map": Mapped, "filter": Filtered, "flat_map": Flattened}
OPS = {"map": "Double", "filter": "IsEven", "flat_map": "Repeat"}


def entries(rt: Runtime) -> dict[Any, Any]:
    (state,) = coordinator(rt).states.values()
    return state.entries


def element(rt: Runtime, target: Link) -> Any:
    """The entry of the element that links to `target` (its first occurrence)."""
    return entries(rt)[(target, 0)]


def element_child(rt: Runtime, kind: str, target: Link) -> Link:
    """The child result the coordinator derives for the element linking to `target`."""
    return child_link(kind, coordinator(rt).container, (target, 0))


def writing(gate: VerdictGate, key: DocKey) -> list[int]:
    """Indices of the held commits that write `key`, oldest first."""
    return [i for i, held in enumerate(gate.held()) if key in held.request.keys]


def index_of(gate: VerdictGate, held: HeldCommit) -> int:
    return gate.held().index(held)


async def linked_values(rt: Runtime, values: list[int]) -> list[Link]:
    cells = [rt.get_cell(("e", i)) for i in range(len(values))]
    tx = rt.edit()
    for cell, value in zip(cells, values, strict=True):
        cell.with_tx(tx).set(value)
    assert (await tx.commit()).ok
    return [c.link() for c in cells]


def argument_key(rt: Runtime, child: Link) -> DocKey:
    """The document an element child's setup writes its argument to: its result document
    when its coordinator folds the argument (map: `docs.folds_argument`), else its
    argument document."""
    if coordinator(rt).fold:
        return child.key(rt.identity)
    return docs.argument_link(child).key(rt.identity)


def durable_setup(store: MemoryStore, child: Link, identity: Identity) -> tuple[Any, Any]:
    """(pattern identity, argument) the store holds for an element child."""
    doc = store.read_durable(child.key(identity))
    if doc is MISSING:
        return MISSING, MISSING
    folded = docs.folded(doc.get(docs.ARGUMENT, MISSING))
    if folded is not None:
        return doc.get(docs.PATTERN, MISSING), folded
    argument = store.read_durable(docs.argument_link(child).key(identity))
    return doc.get(docs.PATTERN, MISSING), (
        MISSING if argument is MISSING else argument.get(docs.VALUE, MISSING)
    )


# --------------------------------------------------------------------------- S59


@pytest.mark.parametrize("overlap", ["alone", "overlapped by a move"])
@pytest.mark.parametrize("kind", list(PATTERNS))
def test_S59_an_elements_setup_is_re_issued_after_a_stale_basis(kind: str, overlap: str) -> None:
    """An element b created by a reconcile X1 rejected on a stale basis: the retry writes
    b's child's pattern identity and argument again, alone or overlapped by a reconcile
    X2 that moved b while X1 was in flight (X2 issued nothing for b: X1 had). For map,
    X2 lands before X1 fails; filter and flat_map read b's result in X2, which X1 wrote,
    so X2 is rejected with it. Every kind writes the same setup here (`stage_setup`):
    the reference's split (flatMap writes only the pattern link) does not apply."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            a, b = await linked_values(rt, [2, 4])
            items, res = await run_list(rt, PATTERNS[kind], [a])
            await res.key("out").pull()
            rt.scheduler.demand(coordinator(rt).node)
            with store.testing.hold_verdicts() as gate:
                items.set([a, b])
                rt.settle()  # X1 creates b's entry and issues its setup
                child = element(rt, b)
                arg_key = argument_key(rt, child.child)
                (x1,) = [gate.held()[i] for i in writing(gate, arg_key)]
                if overlap == "alone":
                    gate.accept(writing(gate, items.doc_key)[0])
                else:
                    items.set([b, a])
                    rt.settle()  # X2 moves b to 0; b owes nothing now, so X2 issues nothing
                    assert [x1] == [gate.held()[i] for i in writing(gate, arg_key)]
                    assert 0 == child.index
                    while len(gate.held()) > 1:  # everything else is decided first
                        gate.accept(1 if gate.held()[0] is x1 else 0)
                        rt.replica.pump()
                    if kind == "map":  # X2 is durable: b's child first
                        out_key = coordinator(rt).container.key(rt.identity)
                        assert child.child == store.read_durable(out_key)["value"][0]
                gate.reject(index_of(gate, x1), Outcome.STALE_BASIS)
                rt.replica.pump()
                assert child.owed  # X1 was its latest issuer: the setup is owed again
                assert child is element(rt, b)  # kept
            await rt.idle()
            assert not any(e.owed for e in entries(rt).values())
            pattern_id, argument = durable_setup(store, child.child, rt.identity)
            assert f"pattern_defs:{OPS[kind]}" == pattern_id
            assert {"element": b} == argument
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- S60


async def empty_the_container(rt: Runtime) -> tuple[Link, DocKey]:
    """Run a map over [1, 2, 3] at "r" on `rt`, stop it and delete its container (the
    output spot) durably. Returns (the list cell's link, the container's key)."""
    items, res = await run_list(rt, Mapped, [1, 2, 3])
    assert [2, 4, 6] == await res.key("out").pull()
    out_key = coordinator(rt).container.key(rt.identity)
    rt.stop(res)
    tx = rt.edit()
    tx.delete(out_key)
    assert (await tx.commit()).ok
    await rt.idle()
    assert MISSING == rt.replica.store.read_durable(out_key)
    return items.link(), out_key


def test_S60_the_container_is_reachable_again_after_a_conflicting_first_reconcile() -> None:
    """Cold: the first reconcile of the resumed map (it writes the container) loses to a
    concurrent list write and is rejected as a conflict; a later reconcile commits the
    container (written more than once), and the aggregate is reachable again."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            items_link, out_key = await empty_the_container(one)
        async with Runtime(store) as two, Runtime(store) as other:
            cold = two.get_cell("r")
            with store.testing.hold_verdicts() as gate:
                started = two.start(cold)
                cancel = cold.key("out").sink(lambda _v: None)
                await turns(10)
                assert await started is True
                two.settle()
                (first,) = [gate.held()[i] for i in writing(gate, out_key)]
                other.get_cell("r-items").set([1, 2, 3, 4])  # a concurrent list write
                gate.accept(writing(gate, items_link.key(other.identity))[0])
                gate.accept(index_of(gate, first))  # evaluated now: the list moved since
                two.replica.pump()
                assert 1 == two.replica.stats.rejected
                assert MISSING == store.read_durable(out_key)
                gate.release()
            await two.idle()
            assert [2, 4, 6, 8] == await cold.key("out").pull()
            durable = store.read_durable(out_key)["value"]
            assert 4 == len(durable) and all(type(x) is Link for x in durable)
            assert 2 <= coordinator(two).reconciles
            cancel()
            two._check()

    arun(main)


def test_S60_on_a_warm_replica_the_first_reconcile_commits_the_container() -> None:
    """Warm (the runtime that emptied it, every document loaded): the first reconcile
    of the restarted map commits the container."""

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            _items_link, out_key = await empty_the_container(rt)
            res = rt.get_cell("r")
            with store.testing.hold_verdicts() as gate:
                started = rt.start(res)
                cancel = res.key("out").sink(lambda _v: None)
                await turns(10)
                assert await started is True
                rt.settle()
                (first,) = [gate.held()[i] for i in writing(gate, out_key)]
                gate.accept(index_of(gate, first))
                rt.replica.pump()
                assert 3 == len(store.read_durable(out_key)["value"])
                assert 1 == coordinator(rt).reconciles
            await rt.idle()
            assert [2, 4, 6] == await res.key("out").pull()
            assert 0 == rt.replica.stats.rejected
            cancel()

    arun(main)


# --------------------------------------------------------------------------- S61


async def drain(rt: Runtime, gate: VerdictGate) -> list[HeldCommit]:
    """Accept every held commit, oldest first, until nothing more is held; the commits
    accepted, in order."""
    accepted: list[HeldCommit] = []
    while True:
        rt.settle()
        await turns(5)
        if not gate.held():
            return accepted
        accepted.append(gate.held()[0])
        gate.accept(0)
        rt.replica.pump()


async def absent_container(store: MemoryStore, pat: Any, values: Any) -> tuple[Any, DocKey]:
    """A durable run of `pat` at "r" over `values` (None: over [1, 2], then the list is
    deleted) whose container document was then deleted, every element result computed.
    Returns (the list's key, the container's key)."""
    async with Runtime(store) as one:
        items, res = await run_list(one, pat, [1, 2] if values is None else values)
        await res.key("out").pull()
        out_key = coordinator(one).container.key(one.identity)
        one.stop(res)
        tx = one.edit()
        if values is None:
            items.with_tx(tx).delete()
        else:
            items.with_tx(tx).set(values)
        tx.delete(out_key)
        assert (await tx.commit()).ok
        await one.idle()
        return items.doc_key, out_key


@pytest.mark.parametrize(
    ("kind", "values", "expect"),
    [
        ("map", [1, 2, 3], [2, 4, 6]),
        ("map", [], []),
        ("map", None, []),
        ("filter", [1, 2, 4], [2, 4]),
        ("flat_map", [], []),
        ("flat_map", [1, 2], [1, 2, 2]),
    ],
)
def test_S61_an_absent_container_is_written_once_the_list_is_confirmed(
    kind: str, values: Any, expect: Any
) -> None:
    """A resumed coordinator whose container has no durable document: nothing is written
    while its list loads (the start holds the first run until the list has loaded, so the
    list is never read as absent or empty); once it is confirmed, the first reconcile
    writes the aggregate (`[]` for an empty or absent list) in exactly one commit, and
    `await rt.idle()` does not return before that commit lands (the reference's storage
    settle barrier: here the write is the reconcile's own transaction, and `idle` waits
    for every verdict in flight). The reference also stamps its seed as bookkeeping; we
    have no such change kind: the write is the coordinator's own output, made by its
    scheduler node like every other aggregate."""

    async def main() -> None:
        store = MemoryStore()
        list_key, out_key = await absent_container(store, PATTERNS[kind], values)
        async with Runtime(store) as two:
            cold = two.get_cell("r")
            with store.testing.hold_loads(list_key) as loads:
                started = two.start(cold)
                cancel = cold.key("out").sink(lambda _v: None)
                await turns(10)
                assert 1 <= loads.waiting() and not started.done()
                assert 0 == two.replica.in_flight()  # nothing written meanwhile
                with store.testing.hold_verdicts() as gate:
                    loads.release()
                    assert await started is True
                    two.settle()
                    await turns(5)
                    assert writing(gate, out_key)  # the first reconcile writes it ...
                    idle = asyncio.ensure_future(two.idle())
                    await turns(10)
                    assert not idle.done()  # ... and idle waits for it to land
                    accepted = await drain(two, gate)
                    await idle
            assert 1 == sum(out_key in h.request.keys for h in accepted)  # once
            durable = store.read_durable(out_key)["value"]
            if kind == "filter":
                # A filter's output holds links to its kept elements (by element id).
                held = []
                for x in durable:
                    doc = store.read_durable(x.key(two.identity))
                    at = element_position(doc, ("value",), doc["value"], x.path[-1])
                    assert at is not None, x
                    held.append(doc["value"][at])
                assert expect == held
            elif kind == "map":
                assert len(expect) == len(durable)
            else:
                assert expect == durable
            assert expect == await cold.key("out").pull()
            cancel()
            two._check()

    arun(main)


def test_S61_nothing_is_written_when_the_coordinator_is_torn_down_first() -> None:
    """The run is stopped while its list still loads: the start claims nothing, no
    coordinator ever runs, and the container stays absent."""

    async def main() -> None:
        store = MemoryStore()
        list_key, out_key = await absent_container(store, Mapped, [])
        async with Runtime(store) as two:
            cold = two.get_cell("r")
            with store.testing.hold_loads(list_key):
                started = two.start(cold)
                cancel = cold.key("out").sink(lambda _v: None)
                await turns(10)
                two.stop(cold)
            assert await started is False
            await two.idle()
            assert MISSING == store.read_durable(out_key)
            assert frozenset() == two.registrations()
            assert 0 == two.replica.stats.commits_sent
            cancel()

    arun(main)


def test_S61_a_start_whose_list_fails_to_load_fails_and_writes_nothing() -> None:
    """The rejected pull on a cold start: the start fails with the load's error (it
    reaches the caller; the list is not taken for empty), nothing is written or left
    registered, and a later start writes the container."""

    async def main() -> None:
        store = MemoryStore()
        list_key, out_key = await absent_container(store, Mapped, [1, 2])
        async with Runtime(store) as two:
            cold = two.get_cell("r")
            with store.testing.hold_loads(list_key) as loads:
                started = two.start(cold)
                await turns(10)
                loads.fail()
            with pytest.raises(LivenessError):
                await started
            await two.idle()
            assert MISSING == store.read_durable(out_key)
            assert frozenset() == two.registrations()
            assert await two.start(cold) is True
            assert [2, 4] == await cold.key("out").pull()
            await two.idle()
            assert 2 == len(store.read_durable(out_key)["value"])

    arun(main)


def test_S61_nothing_is_written_when_the_container_arrived_meanwhile() -> None:
    """Another runtime writes the container while this one's list loads: the aggregate
    this coordinator computes is the one that arrived (the container and its element
    children derive from the same addresses everywhere), so it commits nothing."""

    async def main() -> None:
        store = MemoryStore()
        list_key, out_key = await absent_container(store, Mapped, [1, 2, 3])
        async with Runtime(store) as other:
            await other.start(other.get_cell("r"))
            await other.get_cell("r").key("out").pull()
            await other.idle()
            arrived = store.read_durable(out_key)
            other.stop(other.get_cell("r"))
            tx = other.edit()
            tx.delete(out_key)
            assert (await tx.commit()).ok
        async with Runtime(store) as two, Runtime(store) as writer:
            cold = two.get_cell("r")
            with store.testing.hold_loads(list_key) as loads:
                started = two.start(cold)
                cancel = cold.key("out").sink(lambda _v: None)
                await turns(10)
                assert not started.done()
                tx = writer.edit()
                tx.write(out_key, (docs.VALUE,), arrived["value"])  # the container arrives
                assert (await tx.commit()).ok
                await turns(5)
                with store.testing.hold_verdicts() as gate:
                    loads.release()
                    assert await started is True
                    accepted = await drain(two, gate)
            mine = [h for h in accepted if h.request.session_id == two.replica.session_id]
            assert not [h for h in mine if out_key in h.request.keys]
            assert arrived == store.read_durable(out_key)
            assert [2, 4, 6] == await cold.key("out").pull()
            cancel()

    arun(main)


async def repoint_to_a_loading_list(
    store: MemoryStore, two: Runtime, cold: Any, out_key: DocKey
) -> Any:
    """On the running (resumed) map at `cold`: point its argument at a list "z" this
    replica has not loaded, and delete the container, in one transaction. The caller
    holds z's load. Returns the z cell."""
    z = two.get_cell("z")
    tx = two.edit()
    tx.write(docs.argument_link(cold.link()).key(two.identity), (docs.VALUE, "items"), z.link())
    tx.delete(out_key)
    assert (await tx.commit()).ok
    await turns(10)
    two.settle()
    assert MISSING == store.read_durable(out_key)  # not written while z loads
    assert 0 == two.replica.in_flight()
    return z


async def with_list_z(store: MemoryStore) -> tuple[Runtime, Any, DocKey, DocKey]:
    """A map at "r" over [1, 2] resumed on a fresh runtime (entered), a durable list "z"
    ([5, 6, 7]) it has not read; returns (runtime, result cell, z's key, container key)."""
    async with Runtime(store) as one:
        await one.get_cell("z").set([5, 6, 7])
        _items, res = await run_list(one, Mapped, [1, 2])
        await res.key("out").pull()
        out_key = coordinator(one).container.key(one.identity)
        await one.idle()
    two = Runtime(store)
    await two.__aenter__()
    cold = two.get_cell("r")
    assert await two.start(cold) is True
    assert [2, 4] == await cold.key("out").pull()
    await two.idle()
    return two, cold, two.get_cell("z").doc_key, out_key


@pytest.mark.parametrize("torn_down", [False, True])
def test_S61_a_running_coordinator_writes_nothing_while_its_list_loads(torn_down: bool) -> None:
    """The running coordinator's list is re-pointed at a document still loading, its
    container absent: nothing is written until the list is confirmed, then the aggregate
    is, once; if the run is torn down meanwhile, nothing is written at all."""

    async def main() -> None:
        store = MemoryStore()
        two, cold, z_key, out_key = await with_list_z(store)
        async with two:
            cancel = cold.key("out").sink(lambda _v: None)
            with store.testing.hold_loads(z_key) as loads:
                await repoint_to_a_loading_list(store, two, cold, out_key)
                assert 1 == loads.waiting()
                if torn_down:
                    two.stop(cold)
                with store.testing.hold_verdicts() as gate:
                    loads.release()
                    accepted = await drain(two, gate)
            writes = sum(out_key in h.request.keys for h in accepted)
            if torn_down:
                assert 0 == writes
                assert MISSING == store.read_durable(out_key)
                assert frozenset() == two.registrations()
            else:
                assert 1 == writes
                assert [10, 12, 14] == await cold.key("out").pull()
                assert 3 == len(store.read_durable(out_key)["value"])
            cancel()

    arun(main)


def test_S61_a_list_that_fails_to_load_is_reported_not_read_as_empty() -> None:
    """The reference seeds `[]` after a rejected pull, with a warning. We have no warnings
    channel (failures reach the owner) and never read a list that has not loaded as
    empty: the failed load reaches the runtime as the coordinator's node error, nothing
    is written, no child is released, and the list is loaded again; a load that fails
    again is only traced (no loop against a failing store) until a later reconcile."""

    async def main() -> None:
        store = MemoryStore()
        two, cold, z_key, out_key = await with_list_z(store)
        async with two:
            cancel = cold.key("out").sink(lambda _v: None)
            registered = two.registrations()
            with store.testing.hold_loads(z_key) as loads:
                await repoint_to_a_loading_list(store, two, cold, out_key)
                loads.fail()
            with store.testing.hold_loads(z_key) as again:
                two.settle()  # reported to the runtime's errors, not raised at the caller
                record = two.errors()[-1]
                assert isinstance(record.error, NodeError)
                assert "could not be loaded" in record.message
                assert isinstance(record.error.__cause__, LivenessError)
                assert 1 == again.waiting()  # loading again
                assert MISSING == store.read_durable(out_key)
                assert registered == two.registrations()  # the children are kept
                again.fail()
                two.settle()  # only traced this time
                await turns(10)
                two.settle()
                assert 0 == again.waiting() and 0 == two.replica.in_flight()
            failed = two.runner.trace.entries("load-failed")
            assert 2 == len(failed)
            with store.testing.hold_loads(z_key) as third:
                two.get_cell("r-items").set([1])  # unrelated: the coordinator does not run
                two.settle()
                assert 0 == third.waiting()
            await two.get_cell("z").set([5, 6, 7, 8])  # a change to the list: it runs again
            await two.idle()
            assert [10, 12, 14, 16] == await cold.key("out").pull()
            cancel()

    arun(main)


def test_a_list_re_pointed_at_another_document_rebinds_its_inline_children() -> None:
    """Found writing S61: an inline element's child reads its position in the list
    document; run again with another list, a kept position went on reading the old
    one (the output was [2, 4, 14] here, not [10, 12, 14])."""

    async def main() -> None:
        async with Runtime() as rt:
            a, b, res = rt.get_cell("a"), rt.get_cell("b"), rt.get_cell("res")
            tx = rt.edit()
            a.with_tx(tx).set([1, 2])
            b.with_tx(tx).set([5, 6, 7])
            rt.run(tx, Mapped, {"items": a}, res)
            assert (await tx.commit()).ok
            assert [2, 4] == await res.key("out").pull()
            tx = rt.edit()
            rt.run(tx, Mapped, {"items": b}, res)
            assert (await tx.commit()).ok
            assert [10, 12, 14] == await res.key("out").pull()
            await a.set([100, 200])  # the old list no longer reaches any child
            assert [10, 12, 14] == await res.key("out").pull()
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- S65


async def resumed(store: MemoryStore, kind: str) -> tuple[Runtime, Any, list[Link]]:
    """A run of `kind` over links [a, b] made on one runtime; returns a second runtime
    (entered) on which it was resumed cold, its result cell, and links [a, b, x, y]."""
    async with Runtime(store) as one:
        links = await linked_values(one, [2, 4, 6, 8])
        _items, res = await run_list(one, PATTERNS[kind], links[:2])
        await res.key("out").pull()
        await one.idle()
    two = Runtime(store)
    await two.__aenter__()
    cold = two.get_cell("r")
    assert await two.start(cold) is True
    return two, cold, links


@pytest.mark.parametrize("kind", list(PATTERNS))
def test_S65_an_owed_setup_waits_for_its_loading_result_document(kind: str) -> None:
    """Cold resume: x joins the list while its result document is still loading (the load
    is held). The reconcile keeps x's setup owed and skips only that write (x's child
    is not started on a document it has not seen), while y, new too, is set up; one
    load serves every reconcile meanwhile; when the load ends with the document absent,
    the coordinator runs again and pays the debt."""

    async def main() -> None:
        store = MemoryStore()
        two, cold, (a, b, x, y) = await resumed(store, kind)
        async with two:
            cancel = cold.key("out").sink(lambda _v: None)
            await two.idle()
            x_child = element_child(two, kind, x)
            with store.testing.hold_loads(x_child.key(two.identity)) as loads:
                two.get_cell("r-items").set([a, x, b])
                await turns(10)
                two.settle()
                assert element(two, x).owed  # kept: its document is still loading
                assert x_child.key(two.identity) not in two.registrations()
                two.get_cell("r-items").set([a, x, b, y])  # another reconcile meanwhile
                await turns(10)
                two.settle()
                assert not element(two, y).owed  # a new element is still attached
                assert element_child(two, kind, y).key(two.identity) in two.registrations()
                assert element(two, x).owed
                assert 1 == loads.waiting()  # one load of x's document for both reconciles
                assert MISSING == store.read_durable(x_child.key(two.identity))
            await two.idle()
            assert not element(two, x).owed  # re-armed: the debt is paid
            assert set() == coordinator(two).states[two.identity].syncing  # awaited no more
            assert x_child.key(two.identity) in two.registrations()
            pattern_id, argument = durable_setup(store, x_child, two.identity)
            assert f"pattern_defs:{OPS[kind]}" == pattern_id
            assert {"element": x} == argument
            expect = {"map": [4, 12, 8, 16], "filter": [2, 6, 4, 8], "flat_map": None}[kind]
            out = await cold.key("out").pull()
            if expect is not None:
                assert expect == out
            else:
                assert [2] * 2 + [6] * 6 + [4] * 4 + [8] * 8 == out
            cancel()
            two._check()

    arun(main)


@pytest.mark.parametrize("kind", ["filter", "flat_map"])
def test_S65_an_aggregate_held_for_a_loading_result_is_rebuilt_when_it_loads(kind: str) -> None:
    """filter and flat_map keep their aggregate while an element's result document loads
    (never a partial list); when the load ends the coordinator runs again and the
    aggregate includes that element (it is not pinned at the value it held)."""

    async def main() -> None:
        store = MemoryStore()
        two, cold, (a, b, x, _y) = await resumed(store, kind)
        async with two:
            seen: list[Any] = []
            cancel = cold.key("out").sink(seen.append)
            await two.idle()
            before = await cold.key("out").pull()
            x_child = element_child(two, kind, x)
            with store.testing.hold_loads(x_child.key(two.identity)):
                two.get_cell("r-items").set([a, x, b])
                await turns(10)
                two.settle()
                assert before == seen[-1]
            await two.idle()
            full = [2, 6, 4] if kind == "filter" else [2] * 2 + [6] * 6 + [4] * 4
            assert full == await cold.key("out").pull()
            assert all(v in (before, full) for v in seen), seen
            cancel()

    arun(main)


# --------------------------------------------------------------------------- S67


def test_S67_keys_are_per_scope_instance_and_embed_the_stores_scope_key() -> None:
    """One address at scope user or session: Alice's and Bob's registration keys differ,
    the space instance is shared, at one identity the keys partition as the scope names
    do, and each key is the store's own `DocKey` (its `scope_key` embedded): the
    registration of a run, and the document the store holds for it, are one key."""
    alice, alice2, bob = Identity("alice", "a1"), Identity("alice", "a2"), Identity("bob", "b1")
    for scope in ("user", "session"):
        link = Link("sp", "doc", scope)
        assert link.key(alice) != link.key(bob)
        assert instance_key("sp", "doc", scope, alice) == link.key(alice)
    space = Link("sp", "doc")
    assert space.key(alice) == space.key(bob) == space.key(alice2) == DocKey("sp", "doc")
    # One identity: one key per scope name; the same name, the same key.
    by_scope = {s: Link("sp", "doc", s).key(alice) for s in ("space", "user", "session")}
    assert 3 == len(set(by_scope.values()))
    assert {"space": "space", "user": "user:alice", "session": "session:alice:a1"} == {
        s: k.scope_key for s, k in by_scope.items()
    }
    # A second session of Alice shares her user instance, not her session instance.
    assert Link("sp", "doc", "user").key(alice2) == by_scope["user"]
    assert Link("sp", "doc", "session").key(alice2) != by_scope["session"]

    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store, principal="service") as rt:
            sessions = {"alice": rt.session("alice", "a1"), "bob": rt.session("bob", "b1")}
            for scope in ("user", "session"):
                keys = {}
                for who, sess in sessions.items():
                    items = sess.get_cell(("todo", scope), scope=scope)
                    res = sess.get_cell(("board", scope), scope=scope)
                    tx = sess.edit()
                    items.with_tx(tx).set([1, 2])
                    sess.run(tx, Mapped, {"items": items}, res)
                    assert (await tx.commit()).ok
                    assert [2, 4] == await res.key("out").pull()
                    keys[who] = rt.key(res)
                    assert keys[who] in rt.registrations()
                    session = sess.identity.session
                    expected = f"user:{who}" if scope == "user" else f"session:{who}:{session}"
                    assert expected == keys[who].scope_key
                    # The store holds the run's document under exactly the registration key.
                    assert "pattern_defs:Mapped" == store.read_durable(keys[who])[docs.PATTERN]
                assert keys["alice"] != keys["bob"]
                assert keys["alice"].id == keys["bob"].id  # one address, two instances
            # Each run keeps its own coordinator and children: 2 scopes x 2 principals x
            # (the run + 2 elements).
            assert 2 * 2 * 3 == len(rt.registrations())
            assert 4 == len(rt.runner.coordinators)
            # The space instance is shared: both principals running it name one registration.
            for sess in sessions.values():
                items = sess.get_cell("shared-todo")
                res = sess.get_cell("shared-board")
                tx = sess.edit()
                items.with_tx(tx).set([1, 2])
                sess.run(tx, Mapped, {"items": items}, res)
                assert (await tx.commit()).ok
                assert [2, 4] == await res.key("out").pull()
            assert rt.key(sessions["alice"].get_cell("shared-board")) == rt.key(
                sessions["bob"].get_cell("shared-board")
            )
            assert 2 * 2 * 3 + 3 == len(rt.registrations())  # Bob's run named Alice's
            rt._check()

    arun(main)

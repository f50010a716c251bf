"""Lists across scopes and principals (SCENARIOS.md S69, S70; spec "List setup across
serving instances").

S70: a space-scoped list holding user-scoped elements, run by two principals
(two runtimes on one store, each acting for its principal). S69: one serving
runtime whose root is demanded by two principals through their sessions.
"""

from __future__ import annotations

import collections
from typing import Any

from pattern_defs import Filtered, Flattened, Mapped
from support import arun

from cells import Link, MemoryStore, Outcome
from runner import Runtime, lift, pattern
from runner import _docs as docs
from runner._lists import child_link

# --------------------------------------------------------------------------- S70


async def two_principals(
    pat: Any, values: dict[str, list[Any]], shared: list[Any] | None = None
) -> tuple[Runtime, Runtime, Any, Any]:
    """Alice runs `pat` on a space-scoped list of links to user-scoped notes (plus the
    inline `shared` values); bob starts the same result. Each principal's note instances
    hold `values[principal]`. Returns (alice's runtime, bob's, alice's result, bob's)."""
    store = MemoryStore()
    alice = Runtime(store, principal="alice", session="a1")
    bob = Runtime(store, principal="bob", session="b1")
    n = len(values["alice"])
    for rt in (alice, bob):
        tx = rt.edit()
        for i, v in enumerate(values[rt.identity.principal]):
            rt.get_cell(f"note-{i}", scope="user", tx=tx).set(v)
        assert (await tx.commit()).ok
    notes = [alice.get_cell(f"note-{i}", scope="user").link() for i in range(n)]
    items = alice.get_cell("items")
    res = alice.get_cell("board")
    tx = alice.edit()
    items.with_tx(tx).set([*notes, *(shared or [])])
    alice.run(tx, pat, {"items": items}, res)
    assert (await tx.commit()).ok
    await alice.idle()
    theirs = bob.get_cell("board")
    assert await bob.start(theirs) is True
    return alice, bob, res, theirs


def container(rt: Runtime, res: Any) -> Link:
    """The run's own output cell of its only list node (at the run's scope)."""
    (coord,) = rt.runner.coordinators
    assert coord.container.scope == res.link().scope
    return coord.container


async def settle_both(*rts: Runtime) -> None:
    for _ in range(3):
        for rt in rts:
            await rt.idle()


def raw(rt: Runtime, link: Link) -> Any:
    doc = rt.replica.visible(link.key(rt.identity))
    return doc.get(docs.VALUE) if type(doc) is dict else None


def test_S70_map_keeps_the_list_scope_and_narrows_each_element_result() -> None:
    async def main() -> None:
        alice, bob, res, theirs = await two_principals(
            Mapped, {"alice": [1, 2], "bob": [10, 20]}, shared=[5]
        )
        try:
            assert [2, 4, 10] == await res.key("out").pull()
            assert [20, 40, 10] == await theirs.key("out").pull()
            await settle_both(alice, bob)
            # Neither principal's instance overwrote the other's.
            assert [2, 4, 10] == await res.key("out").pull()
            out = container(alice, res)
            assert "space" == out.scope
            # The container stays at the list's scope and holds the same links for both.
            links = raw(alice, out)
            assert links == raw(bob, out)
            assert ["user", "user", "space"] == [x.scope for x in links]
            # Each principal's runtime runs its own instance of the user-scoped children;
            # the inline (space) element's child is one shared instance.
            for rt in (alice, bob):
                principal = rt.identity.principal
                keys = {x.key(rt.identity) for x in links}
                assert keys <= rt.registrations()
                assert [principal, principal, ""] == [x.key(rt.identity).principal for x in links]
            assert alice.registrations() & bob.registrations() == {
                alice.key(res),
                links[2].key(alice.identity),
            }
            # An edit of alice's instance of a note reaches only alice's result.
            await alice.get_cell("note-0", scope="user").set(7)
            assert [14, 4, 10] == await res.key("out").pull()
            assert [20, 40, 10] == await theirs.key("out").pull()
            alice._check()
            bob._check()
        finally:
            await alice.aclose()
            await bob.aclose()

    arun(main)


def test_S70_filter_output_narrows_to_the_scope_that_controls_its_cardinality() -> None:
    async def main() -> None:
        alice, bob, res, theirs = await two_principals(
            Filtered, {"alice": [2, 3], "bob": [1, 4]}, shared=[6, 7]
        )
        try:
            # Which elements pass depends on each principal's notes: the aggregate is
            # user-scoped (alice keeps the first note, bob the second), and the run's
            # own output cell, at space scope, links to it.
            assert [2, 6] == await res.key("out").pull()
            assert [4, 6] == await theirs.key("out").pull()
            await settle_both(alice, bob)
            assert [2, 6] == await res.key("out").pull()
            out = container(alice, res)
            narrowed = Link(out.space, out.id, "user")
            assert narrowed == raw(alice, out) == raw(bob, out)
            assert 2 == len(raw(alice, narrowed)) == len(raw(bob, narrowed))
            # Only shared elements left: the output is the run's own (space) cell again.
            items = alice.get_cell("items")
            await items.set([6, 7, 8])
            assert [6, 8] == await res.key("out").pull()
            await bob.idle()
            # (It holds links to the kept elements: by the ids of positions 0 and 2.)
            kept = raw(alice, out)
            assert [("#0",), ("#2",)] == [x.path for x in kept] and kept == raw(bob, out)
            assert [6, 8] == await theirs.key("out").pull()
            alice._check()
            bob._check()
        finally:
            await alice.aclose()
            await bob.aclose()

    arun(main)


def test_S70_flat_map_output_narrows_to_the_scope_that_controls_its_cardinality() -> None:
    async def main() -> None:
        alice, bob, res, theirs = await two_principals(
            Flattened, {"alice": [1], "bob": [3]}, shared=[2]
        )
        try:
            assert [1, 2, 2] == await res.key("out").pull()
            assert [3, 3, 3, 2, 2] == await theirs.key("out").pull()
            await settle_both(alice, bob)
            assert [1, 2, 2] == await res.key("out").pull()
            out = container(alice, res)
            assert Link(out.space, out.id, "user") == raw(alice, out) == raw(bob, out)
            alice._check()
            bob._check()
        finally:
            await alice.aclose()
            await bob.aclose()

    arun(main)


def test_S70_a_list_that_changes_scope_changes_every_child() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            space = rt.get_cell("todo")
            user = rt.get_cell("todo", scope="user")
            tx = rt.edit()
            space.with_tx(tx).set([1, 2])
            user.with_tx(tx).set([1, 2])
            holder = rt.get_cell("holder")
            holder.with_tx(tx).set(space)
            res = rt.get_cell("r")
            rt.run(tx, Mapped, {"items": holder}, res)
            assert (await tx.commit()).ok
            assert [2, 4] == await res.key("out").pull()
            before = rt.registrations() - {rt.key(res)}
            out = container(rt, res)
            assert all(k.scope == "space" for k in before)
            # Same element keys (positions), but the list now lives at user scope: the
            # container moves there, and every child is released and set up anew.
            await holder.set(user)
            assert [2, 4] == await res.key("out").pull()
            after = rt.registrations() - {rt.key(res)}
            assert 2 == len(after) and not before & after
            assert all(k.scope == "user" for k in after)
            user_out = Link(out.space, out.id, "user")
            assert user_out == raw(rt, out)
            expected = {child_link("map", user_out, (i,)).key(rt.identity) for i in range(2)}
            assert expected == after
            rt._check()

    arun(main)


# --------------------------------------------------------------------------- S69

SEEN: collections.Counter[Any] = collections.Counter()
"""Every value an element derivation ran on (each principal's notes hold distinct values)."""


def seen_triple(v: Any) -> Any:
    SEEN[v] += 1
    return None if v is None else v * 3


def seen_odd(v: Any) -> bool:
    SEEN[v] += 1
    return isinstance(v, int) and v % 2 == 1


def seen_pair(v: Any) -> Any:
    SEEN[v] += 1
    return None if v is None else [v, v]


@pattern
def Triple(element):  # type: ignore[no-untyped-def]
    return lift(seen_triple)(element)


@pattern
def IsOdd(element):  # type: ignore[no-untyped-def]
    return lift(seen_odd)(element)


@pattern
def Pair(element):  # type: ignore[no-untyped-def]
    return lift(seen_pair)(element)


@pattern
def Tripled(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(Triple)}


@pattern
def Odds(items):  # type: ignore[no-untyped-def]
    return {"out": items.filter(IsOdd)}


@pattern
def Pairs(items):  # type: ignore[no-untyped-def]
    return {"out": items.flat_map(Pair)}


@pattern
def Nest(element):  # type: ignore[no-untyped-def]
    """An element op that nests a child."""
    return {"inner": Triple(element=element)}


@pattern
def Inner(element):  # type: ignore[no-untyped-def]
    """An element op that maps a list: its element (inline, shared) links a per-user list."""
    return {"out": element["rows"].map(Triple)}


@pattern
def TwoLevels(items, groups):  # type: ignore[no-untyped-def]
    return {"nested": items.map(Nest), "mapped": groups.map(Inner)}


NOTES = {"alice": [1, 2, 3], "bob": [10, 20, 31]}


async def serving(pat: Any, store: MemoryStore | None = None) -> tuple[Runtime, dict[str, Any]]:
    """A serving runtime (as "service") sets up `pat` on a space-scoped list of links to
    user-scoped notes; alice and bob each start the space-scoped root through their
    session. Returns the runtime and each principal's result cell."""
    SEEN.clear()
    rt = Runtime(store, principal="service")
    sessions = {"alice": rt.session("alice", "a1"), "bob": rt.session("bob", "b1")}
    for who, session in sessions.items():
        tx = session.edit()
        for i, v in enumerate(NOTES[who]):
            session.get_cell(f"note-{i}", scope="user", tx=tx).set(v)
            session.get_cell(f"rows-{i}", scope="user", tx=tx).set([v, v + 100])
        assert (await tx.commit()).ok
    n = len(NOTES["alice"])
    items = rt.get_cell("items")
    res = rt.get_cell("root")
    tx = rt.edit()
    items.with_tx(tx).set([rt.get_cell(f"note-{i}", scope="user").link() for i in range(n)])
    argument: dict[str, Any] = {"items": items}
    if "groups" in pat.params:
        groups = rt.get_cell("groups")
        rows = [{"rows": rt.get_cell(f"rows-{i}", scope="user")} for i in range(n)]
        groups.with_tx(tx).set(rows)
        argument["groups"] = groups
    rt.setup(tx, pat, argument, res)
    assert (await tx.commit()).ok
    results = {}
    for who, session in sessions.items():
        mine = session.get_cell("root")
        assert await session.start(mine) is True
        results[who] = mine
    await rt.idle()
    return rt, results


def node_identities(rt: Runtime) -> collections.Counter[str]:
    return collections.Counter(n.identity.principal for n in rt.scheduler.graph.nodes)


def assert_per_principal(rt: Runtime) -> None:
    """Every node and every registration runs for alice or bob, never as the service."""
    assert {"alice", "bob"} == set(node_identities(rt))
    for reg in rt.runner.registrations:
        assert {i.principal for i in reg.identities} <= {"alice", "bob"}, reg
    # Each element derivation ran exactly once per principal, on that principal's note.
    values = [*NOTES["alice"], *NOTES["bob"]]
    assert dict.fromkeys(values, 1) == {v: SEEN[v] for v in values}
    rt._check()


async def assert_stop_leaves_nothing(rt: Runtime, results: dict[str, Any]) -> None:
    rt.stop(results["alice"])  # authoritative over the one registration of the root
    await rt.idle()
    assert frozenset() == rt.registrations()
    assert {} == dict(node_identities(rt))
    assert not rt.runner.coordinators and not rt.runner.list_coordinators
    assert not rt.lifetimes()
    rt._check()


def test_S69_map_elements_run_once_per_demanding_principal_as_that_principal() -> None:
    async def main() -> None:
        rt, results = await serving(Tripled)
        async with rt:
            assert [3, 6, 9] == await results["alice"].key("out").pull()
            assert [30, 60, 93] == await results["bob"].key("out").pull()
            assert_per_principal(rt)
            # One registration for the shared root, running for both; one child per
            # element and principal, each running only for its principal.
            root = rt.registration(results["alice"])
            assert root is not None
            assert ["alice", "bob"] == [i.principal for i in root.identities]
            children = [r for r in rt.runner.registrations if r is not root]
            assert 6 == len(children)
            for reg in children:
                assert [reg.key.principal] == [i.principal for i in reg.identities]
            (coord,) = rt.runner.coordinators
            assert {"alice", "bob"} == {i.principal for i in coord.states}
            # An edit of bob's note reaches only bob's element derivation.
            await rt.session("bob", "b1").get_cell("note-0", scope="user").set(11)
            assert [33, 60, 93] == await results["bob"].key("out").pull()
            assert [3, 6, 9] == await results["alice"].key("out").pull()
            assert 1 == SEEN[11] and 1 == SEEN[1]
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def test_S69_filter_elements_run_once_per_demanding_principal_as_that_principal() -> None:
    async def main() -> None:
        rt, results = await serving(Odds)
        async with rt:
            assert [1, 3] == await results["alice"].key("out").pull()
            assert [31] == await results["bob"].key("out").pull()
            assert_per_principal(rt)
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def test_S69_flat_map_elements_run_once_per_demanding_principal_as_that_principal() -> None:
    async def main() -> None:
        rt, results = await serving(Pairs)
        async with rt:
            assert [1, 1, 2, 2, 3, 3] == await results["alice"].key("out").pull()
            assert [10, 10, 20, 20, 31, 31] == await results["bob"].key("out").pull()
            assert_per_principal(rt)
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def test_S69_two_levels_a_nested_child_and_a_mapped_list_per_principal() -> None:
    async def main() -> None:
        rt, results = await serving(TwoLevels)
        async with rt:
            alice = await results["alice"].pull()
            bob = await results["bob"].pull()
            assert [{"inner": 3}, {"inner": 6}, {"inner": 9}] == alice["nested"]
            assert [{"inner": 30}, {"inner": 60}, {"inner": 93}] == bob["nested"]
            assert [{"out": [3 * v, 3 * (v + 100)]} for v in NOTES["alice"]] == alice["mapped"]
            assert [{"out": [3 * v, 3 * (v + 100)]} for v in NOTES["bob"]] == bob["mapped"]
            assert {"alice", "bob"} == set(node_identities(rt))
            for reg in rt.runner.registrations:
                assert {i.principal for i in reg.identities} <= {"alice", "bob"}, reg
            # The groups' elements are inline in a space list: one shared child each,
            # run for both principals, whose own list maps each principal's rows.
            shared = [r for r in rt.runner.registrations if r.key.scope == "space" and r.chain]
            assert 3 == len(shared)
            for reg in shared:
                assert ["alice", "bob"] == [i.principal for i in reg.identities]
            values = [v + d for who in NOTES.values() for v in who for d in (0, 0, 100)]
            assert collections.Counter(values) == +SEEN
            rt._check()
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def shared_children(rt: Runtime) -> list[Any]:
    """The groups' element children (space-scoped, launched by the root)."""
    return [r for r in rt.runner.registrations if r.key.scope == "space" and r.chain]


def groups_coordinator(rt: Runtime) -> Any:
    (coord,) = [c for c in rt.runner.coordinators if c.op is Inner and not c.reg.chain]
    return coord


def test_S69_a_shared_child_is_released_when_its_element_leaves_for_every_principal() -> None:
    async def main() -> None:
        rt, results = await serving(TwoLevels)
        async with rt:
            await results["alice"].pull()
            await results["bob"].pull()
            assert 3 == len(shared_children(rt))
            groups = rt.get_cell("groups")
            await groups.set([{"rows": rt.get_cell(f"rows-{i}", scope="user")} for i in range(2)])
            await results["alice"].pull()
            await results["bob"].pull()
            # Each principal's bookkeeping let go; the last one released the shared child,
            # with every instance of it and each principal's grandchildren under it.
            assert 2 == len(shared_children(rt))
            rows = [r for r in rt.runner.registrations if r.launch.startswith("element of Inner")]
            assert 2 * 2 * 2 == len(rows)  # 2 groups x 2 rows x 2 principals
            rt._check()
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def test_S69_a_join_that_fails_for_good_is_undone_for_that_principal_only() -> None:
    async def main() -> None:
        rt, results = await serving(TwoLevels)
        store = rt.store
        assert isinstance(store, MemoryStore)
        async with rt:
            coord = groups_coordinator(rt)
            alice, bob = (rt.session(p, s).identity for p, s in (("alice", "a1"), ("bob", "b1")))
            # Alice's reconcile alone (demanding her node, not the shared container that
            # both nodes write) installs the three shared children.
            undemand = rt.scheduler.demand(coord.nodes[alice])
            rt.settle()
            undemand()
            assert 3 == len(shared_children(rt))
            # A fourth group, which alice's (now dormant) node has not seen: bob's first
            # reconcile then writes (the container, the new child's setup) and joins
            # alice's three children in the same transaction.
            groups = rt.get_cell("groups")
            await groups.set(
                [{"rows": rt.get_cell(f"rows-{i % 3}", scope="user")} for i in range(4)]
            )
            node = coord.nodes[bob]
            rt.scheduler.demand(node)
            with store.testing.hold_verdicts() as gate:
                rt.settle()
                assert 4 == len(shared_children(rt))
                assert all(bob in r.identities for r in shared_children(rt))
                rejected = 0
                while gate.waiting():
                    tx = rt.replica._in_flight.get(gate.held()[0].request.local_seq)
                    if tx is not None and tx.source is node:
                        gate.reject(0, Outcome.PERMANENT)
                        rejected += 1
                    else:
                        gate.accept(0)
                assert 1 == rejected
                rt.replica.pump()
                # Bob's reconcile is undone: the child it installed is released, and its
                # instances of alice's three are dropped (with bob's grandchildren under
                # them); alice's instances are untouched.
                assert 3 == len(shared_children(rt))
                for reg in shared_children(rt):
                    assert ["alice"] == [i.principal for i in reg.identities]
                assert not [r for r in rt.runner.registrations if r.key.principal == "bob"]
                assert not coord.states[bob].entries
                rt._check()
            # Bob's coordinator runs again (a reconcile that failed for good re-runs) and
            # joins anew.
            await rt.idle()
            bob_out = await results["bob"].key("mapped").pull()
            expected = [{"out": [3 * v, 3 * (v + 100)]} for v in NOTES["bob"]]
            assert [*expected, expected[0]] == bob_out
            for reg in shared_children(rt):
                assert {"alice", "bob"} == {i.principal for i in reg.identities}
            rt._check()
            await assert_stop_leaves_nothing(rt, results)

    arun(main)


def test_S69_a_restarted_serving_runtime_finds_the_same_instances() -> None:
    async def main() -> None:
        store = MemoryStore()
        first, results = await serving(TwoLevels, store)
        before = {who: await cell.pull() for who, cell in results.items()}
        keys = first.registrations()
        await first.aclose()
        # A new serving runtime on the same store: each principal starts the root again;
        # the pre-sync and the coordinators derive the same (narrowed) children.
        SEEN.clear()
        async with Runtime(store, principal="service") as rt:
            again = {}
            for who, session in (("alice", "a1"), ("bob", "b1")):
                mine = rt.session(who, session).get_cell("root")
                assert await rt.session(who, session).start(mine) is True
                again[who] = await mine.pull()
            assert before == again
            assert keys == rt.registrations()
            assert {"alice", "bob"} == set(node_identities(rt))
            rt._check()
            await assert_stop_leaves_nothing(rt, {"alice": rt.get_cell("root")})

    arun(main)

"""Lists across scopes and principals (SCENARIOS.md S69, S70; spec "List setup across
serving instances").

S70: a space-scoped list holding user-scoped elements, run by two principals
(two runtimes on one store, each acting for its principal). S69: one serving
runtime whose root is demanded by two principals through their sessions.
"""

from __future__ import annotations

from typing import Any

from pattern_defs import Filtered, Flattened, Mapped
from support import arun

from cells import Link, MemoryStore
from runner import Runtime
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
            assert [6, 8] == raw(alice, out) == raw(bob, out)
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

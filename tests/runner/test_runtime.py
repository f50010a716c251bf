"""The Runtime facade: transactions, reactive cells, sessions, lifecycle."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pattern_defs import Child

from cells import CellweaveError, MemoryStore, Outcome, read_value
from runner import OwnershipError, Runtime


def test_default_runtime_uses_a_memory_store_and_local_identity() -> None:
    rt = Runtime()
    assert isinstance(rt.store, MemoryStore)
    assert ("default", "local", "local") == (
        rt.space,
        rt.identity.principal,
        rt.identity.session,
    )


def test_get_cell_derives_the_id_from_the_cause_alone() -> None:
    rt = Runtime()
    a = rt.get_cell({"note": 1, "kind": "x"})
    b = rt.get_cell({"kind": "x", "note": 1})
    assert a.id == b.id
    user = rt.get_cell({"note": 1, "kind": "x"}, scope="user")
    assert (a.id, "space", "user") == (user.id, a.scope, user.scope)
    assert a.doc_key != user.doc_key
    with pytest.raises(CellweaveError, match="scope must be one of"):
        rt.get_cell("x", scope="planet")  # type: ignore[arg-type]


def test_cells_are_reactive_through_the_scheduler() -> None:
    rt = Runtime()
    c = rt.get_cell("counter")
    c.set(1)
    seen: list[Any] = []
    cancel = c.sink(seen.append)
    c.set(2)
    rt.settle()
    cancel()
    c.set(3)
    rt.settle()
    assert [1, 2] == seen
    observed: list[Any] = []
    sub = c.observe().subscribe(observed.append)
    c.set(4)
    rt.settle()
    sub.dispose()
    assert [3, 4] == observed


def test_pull_inside_a_running_loop() -> None:
    async def main() -> Any:
        async with Runtime() as rt:
            c = rt.get_cell("x")
            tx = rt.edit()
            c.with_tx(tx).set({"n": 1})
            result = await tx.commit()
            assert result.ok
            return await c.key("n").pull()

    assert 1 == asyncio.run(main())


def test_two_runtimes_on_one_store_conflict_for_real() -> None:
    store = MemoryStore()
    rt1, rt2 = Runtime(store), Runtime(store, session="s2")
    c1, c2 = rt1.get_cell("n"), rt2.get_cell("n")
    c1.set(0)
    rt1.settle()
    rt2.settle()
    t1, t2 = rt1.edit(), rt2.edit()
    v1 = read_value(t1, c1.link())
    v2 = read_value(t2, c2.link())
    c1.with_tx(t1).set(v1 + 1)
    c2.with_tx(t2).set(v2 + 1)
    p1, p2 = t1.commit(), t2.commit()
    rt1.settle()
    rt2.settle()
    assert (Outcome.OK, Outcome.STALE_BASIS) == (p1.result().outcome, p2.result().outcome)
    rt2.settle()
    assert 1 == c2.get()


def test_sessions_resolve_their_own_scoped_instances() -> None:
    rt = Runtime()
    alice, bob = rt.session("alice", "a1"), rt.session("bob", "b1")
    a_prefs = alice.get_cell("prefs", scope="user")
    b_prefs = bob.get_cell("prefs", scope="user")
    a_prefs.set({"theme": "dark"})
    rt.settle()
    assert {"theme": "dark"} == a_prefs.get()
    assert b_prefs.get() is None or b_prefs.get() != a_prefs.get()
    shared_a = alice.get_cell("board")
    shared_b = bob.get_cell("board")
    shared_a.set(["x"])
    rt.settle()
    assert ["x"] == shared_b.get()
    tx = alice.edit()
    assert tx.identity == alice.identity


def test_a_missing_identity_is_refused() -> None:
    with pytest.raises(OwnershipError, match="principal must be a non-empty str"):
        Runtime(principal="")
    rt = Runtime()
    with pytest.raises(OwnershipError, match="session must be a non-empty str"):
        rt.session("alice", "")


def test_commit_gated_flag_is_carried_on_the_transaction() -> None:
    rt = Runtime()
    assert rt.edit(commit_gated=True).meta.get("commit_gated") is True
    assert "commit_gated" not in rt.edit().meta


def test_closed_runtime_refuses_work() -> None:
    async def main() -> Runtime:
        async with Runtime() as rt:
            rt.get_cell("x").set(1)
        return rt

    rt = asyncio.run(main())
    with pytest.raises(CellweaveError, match="is closed"):
        rt.get_cell("x")
    rt.close()  # idempotent


CLOSED_CALLS: dict[str, Any] = {
    "edit": lambda rt, c: rt.edit(),
    "get_cell": lambda rt, c: rt.get_cell("x"),
    "session": lambda rt, c: rt.session("alice", "a1"),
    "key": lambda rt, c: rt.key(c),
    "registration": lambda rt, c: rt.registration(c),
    "registrations": lambda rt, c: rt.registrations(),
    "pending_starts": lambda rt, c: rt.pending_starts(),
    "lifetimes": lambda rt, c: rt.lifetimes(),
    "stop": lambda rt, c: rt.stop(c),
    "release": lambda rt, c: rt.release(c),
    "stop_all": lambda rt, c: rt.stop_all(),
    "send": lambda rt, c: rt.send(c, 1),
    "pages": lambda rt, c: rt.pages(),
    "settle": lambda rt, c: rt.settle(),
    "inspect": lambda rt, c: rt.inspect(),
    "errors": lambda rt, c: rt.errors(),
    "handler_label": lambda rt, c: rt.handler_label(c),
    "inspect_run": lambda rt, c: rt.inspect_run("default/space/of:x"),
}


@pytest.mark.parametrize("call", sorted(CLOSED_CALLS))
def test_every_call_on_a_closed_runtime_raises(call: str) -> None:
    rt = Runtime()
    cell = rt.get_cell("r")
    rt.close()
    with pytest.raises(CellweaveError, match="is closed"):
        CLOSED_CALLS[call](rt, cell)


def test_every_public_runtime_call_is_covered_by_the_closed_check() -> None:
    lifecycle = {"close", "aclose"}
    lookups = {"of"}  # Runtime.of(cell) names a cell's runtime, open or closed
    asynchronous = {"start", "open_page", "resume", "idle", "setup", "run", "serve_pages"}
    public = {
        name
        for name in dir(Runtime)
        if not name.startswith("_") and callable(getattr(Runtime, name))
    }
    assert set() == public - lifecycle - lookups - asynchronous - set(CLOSED_CALLS)


def test_starting_opening_and_running_on_a_closed_runtime_raise() -> None:
    async def main() -> None:
        rt = Runtime()
        cell = rt.get_cell("r")
        tx = rt.edit()
        tx.abort("only needed as an argument")
        rt.close()
        for call in (
            lambda: rt.start(cell),
            lambda: rt.open_page(cell),
            lambda: rt.setup(tx, Child, {}, cell),
            lambda: rt.run(tx, Child, {}, cell),
        ):
            with pytest.raises(CellweaveError, match="is closed"):
                call()
        for coro in (rt.resume(), rt.idle(), rt.serve_pages()):
            with pytest.raises(CellweaveError, match="is closed"):
                await coro

    asyncio.run(main())

"""Serving pages under claims (issue 19 items 3-5): one owner per page, fenced takeovers.

Several runtimes on one store stand for several processes (each has its own owner
nonce; same host and pid, so the liveness probe is lease-only unless a test gives
one). Time is a test clock each server reads; every tick is driven by the test, so
nothing sleeps.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest
from pattern_defs import Child, Parent, Spawner
from support import arun, turns

from cells import (
    MISSING,
    Cell,
    Fence,
    Link,
    MemoryStore,
    Owner,
    SQLiteStore,
    StoreBase,
    StoreError,
)
from runner import PageServer, RemoteHandlingError, Runtime
from runner import _docs as docs
from runner._remote_events import inbox_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store(kind: str, tmp_path: pathlib.Path) -> StoreBase:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "claims.db")


async def _open_from_ui(store: StoreBase, value: int = 1, name: str = "page") -> Any:
    """A UI process opens a page for alice, then goes away (its intent stays)."""
    async with Runtime(store, principal="alice") as ui:
        page = ui.get_cell(name)
        tx = ui.edit()
        ui.setup(tx, Child, {"value": value}, page)
        assert (await tx.commit()).ok
        assert await ui.open_page(page) is True
        await ui.idle()
        return page.link()


async def _set_input(store: StoreBase, link: Any, value: int) -> None:
    async with Runtime(store, principal="alice") as ui:
        page = Cell(ui.replica, ui.identity, link, host=None)
        argument = ui.inspect_run(page.id)  # the run exists
        assert argument["key"] == page.id
        tx = ui.edit()
        arg = tx.read(page.doc_key, ("argument",))
        tx.write(arg.key(ui.identity), ("value", "value"), value)
        assert (await tx.commit()).ok


def _doubled(store: StoreBase, page: Cell) -> Any:
    """The page's `doubled` as the store holds it (through the link to its node's output)."""
    value = store.read_durable(page.doc_key)["value"]["doubled"]
    if isinstance(value, Link):
        value = store.read_durable(value.key(page.identity))["value"]
    return value


async def _settle(store: StoreBase, *rts: Runtime) -> None:
    """Until quiet: every queued commit decided (a SQL store's writer thread posts the
    verdicts and the other sessions' changes), then every runtime idle."""
    for _ in range(4):
        flush = getattr(store, "flush", None)
        if flush is not None:
            assert flush(30.0)
        for rt in rts:
            await rt.idle()


async def _serve(store: StoreBase, clock: Clock, **kw: Any) -> tuple[Runtime, PageServer]:
    rt = Runtime(store, principal="server")
    await rt.__aenter__()
    server = await rt.serve_pages(lease=10.0, heartbeat=2.0, clock=clock, manual=True, **kw)
    await rt.idle()
    return rt, server


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_one_server_claims_an_open_page_and_keeps_it_computed(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert len(sa.held) == 1 and not sb.held
        rows = store.claims.rows("default")
        assert [(r.principal, r.fence, r.owner) for r in rows] == [("alice", 1, sa.owner)]
        await sb.tick()
        assert not sb.held  # owned elsewhere, lease fresh: not taken
        view = a.inspect()["claims"]
        assert view["claims"] == []  # the server's own principal has no pages
        await a.aclose()
        await b.aclose()

    arun(main)


async def _open_linked(ui: Runtime, name: str = "page") -> tuple[Cell, Cell]:
    """A page whose run doubles the value of an input cell (a change re-runs it)."""
    inp = ui.get_cell(f"{name}-input")
    page = ui.get_cell(name)
    tx = ui.edit()
    inp.set(1)
    ui.setup(tx, Child, {"value": inp}, page)
    assert (await tx.commit()).ok
    assert await ui.open_page(page) is True
    await ui.idle()
    return inp, page


async def _ui_intent(store: StoreBase) -> tuple[Runtime, Cell, Cell]:
    """A UI runtime of alice's that records a linked page's intent (`_open_linked`)
    and then runs nothing itself: a serving runtime is to run the page."""
    ui = Runtime(store, principal="alice")
    await ui.__aenter__()
    inp, page = await _open_linked(ui)
    ui.stop_all()  # the UI keeps its intent but runs nothing itself
    return ui, inp, page


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_paused_owner_is_taken_over_and_its_writes_are_fenced_out(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        ui, inp, page = await _ui_intent(store)
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert len(sa.held) == 1
        (held,) = sa.held.values()
        assert held.fence == 1
        inp.set(2)
        await _settle(store, ui, a, b)
        assert _doubled(store, page) == 4
        # A pauses (no heartbeat) past its lease; B takes the page over.
        clock.now += 11
        await sb.tick()
        await _settle(store, ui, a, b)
        assert len(sb.held) == 1 and next(iter(sb.held.values())).fence == 2
        (t,) = sb.takeovers
        assert t["reason"] == "lease-expired" and t["from"] == str(sa.owner)
        # A resumes, unaware: its run re-computes on the next input change and commits
        # under fence 1, which the store rejects; B's commit (fence 2) is accepted.
        with store.testing.hold_verdicts() as gate:
            inp.set(3)
            await turns()
            gate.accept(0)  # evaluated here: the change reaches both runtimes' mailboxes
            await turns()
            fences = {h.request.session_id: h.request.fence for h in gate.held()}
            assert fences == {
                a.replica.session_id: Fence("default", "alice", held.pid, 1),
                b.replica.session_id: Fence("default", "alice", held.pid, 2),
            }
            rejected_before = a.replica.stats.rejected
            gate.release()
        await _settle(store, ui, a, b)
        assert a.replica.stats.rejected == rejected_before + 1
        assert _doubled(store, page) == 6
        # A's next heartbeat finds the claim gone and stops running the page.
        await sa.tick()
        assert not sa.held and len(sa.lost) == 1
        assert not a.registrations()
        row = store.claims.rows("default")[0]
        assert (row.fence, row.owner, row.taken_reason) == (2, sb.owner, "lease-expired")
        for rt in (a, b, ui):
            await rt.aclose()

    arun(main)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_idle_served_pages_documents_are_packed_and_decoded_equal_on_a_change(
    kind: str, tmp_path: pathlib.Path
) -> None:
    """A heartbeat packs the documents of idle pages (`Replica.pack`); an input change
    from another process decodes what the page's run reads, and the run's result and
    the server's decoded copies equal the store's."""
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        ui, inp, page = await _ui_intent(store)
        a, sa = await _serve(store, clock)
        assert len(sa.held) == 1
        await _settle(store, ui, a)
        await sa.tick()
        replica = a.replica
        page_key = page.doc_key
        inp_key = inp.doc_key
        for value in (2, 3):
            packed = {k for k, rec in replica._docs.items() if type(rec.visible) is bytes}
            assert {page_key, inp_key} <= packed
            # The pages document and the inbox, read at every tick, stay decoded.
            assert not packed & sa._read_each_tick
            inp.set(value)
            await _settle(store, ui, a)
            assert _doubled(store, page) == 2 * value
            for key in (page_key, inp_key):
                assert replica.visible(key) == store.read_durable(key)
            replica._check()
            await sa.tick()
        # The pages document, read at every tick, stays decoded; a page opened now (a
        # change to it) is claimed at the next tick and runs beside the packed one.
        (pages_key,) = sa.watched
        assert type(replica._docs[pages_key].visible) is not bytes
        await _open_linked(ui, "second")
        ui.stop_all()
        await _settle(store, ui, a)
        await sa.tick()
        await _settle(store, ui, a)
        assert len(sa.held) == 2
        assert _doubled(store, ui.get_cell("second")) == 2
        assert _doubled(store, page) == 6
        for rt in (a, ui):
            await rt.aclose()

    arun(main)


def test_a_live_owner_on_this_host_is_refused_with_a_doubling_backoff() -> None:
    store = MemoryStore()
    clock = Clock()
    probed: list[float] = []

    def alive(owner: Owner) -> bool | None:
        probed.append(clock.now)
        return True

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        b = Runtime(store, principal="server")
        await b.__aenter__()
        sb = await b.serve_pages(lease=10.0, heartbeat=1.0, clock=clock, probe=alive, manual=True)
        assert probed == [1000.0]  # fresh lease, same host: probed once, refused
        for _ in range(40):  # A keeps renewing at the same stamp? no: A is silent here
            clock.now += 1.0
            await sb.tick()
            if clock.now >= 1009.0:
                break
        # Re-probed after 2, 4 (then the lease expired and it was taken without a probe).
        assert probed == [1000.0, 1002.0, 1006.0]
        assert not sb.held
        clock.now = 1011.0
        await sb.tick()
        assert len(sb.held) == 1 and sb.takeovers[0]["reason"] == "lease-expired"
        assert probed == [1000.0, 1002.0, 1006.0]  # an expired lease needs no probe
        await sa.tick()
        assert not sa.held
        await a.aclose()
        await b.aclose()

    arun(main)


def test_backoff_doubles_per_heartbeat_stamp_and_resets_when_the_stamp_moves() -> None:
    store = MemoryStore()
    clock = Clock()
    probed: list[float] = []

    def alive(owner: Owner) -> bool | None:
        probed.append(clock.now)
        return True

    async def main() -> None:
        await _open_from_ui(store)
        a = Runtime(store, principal="server")
        await a.__aenter__()
        sa = await a.serve_pages(lease=40.0, heartbeat=1.0, clock=clock, manual=True)
        b = Runtime(store, principal="server")
        await b.__aenter__()
        sb = await b.serve_pages(lease=40.0, heartbeat=1.0, clock=clock, probe=alive, manual=True)
        for _ in range(31):
            clock.now += 1.0
            await sb.tick()
        # A silent owner at one stamp: re-probed after 2, 4, 8, 16 s (two heartbeats,
        # doubling), not every tick.
        assert probed == [1000.0, 1002.0, 1006.0, 1014.0, 1030.0]
        await sa.tick()  # A pulses at 1031: a new stamp starts the ladder again
        for _ in range(3):
            clock.now += 1.0
            await sb.tick()
        assert probed[5:] == [1032.0, 1034.0]
        assert not sb.held and len(sa.held) == 1
        await a.aclose()
        await b.aclose()

    arun(main)


def test_an_owner_whose_process_is_gone_is_taken_over_before_its_lease_ends() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        b = Runtime(store, principal="server")
        await b.__aenter__()
        gone = sa.owner
        sb = await b.serve_pages(
            lease=10.0,
            heartbeat=2.0,
            clock=clock,
            probe=lambda owner: owner != gone,
            manual=True,
        )
        assert len(sb.held) == 1
        (t,) = sb.takeovers
        assert (t["reason"], t["from"], t["fence"]) == ("owner-gone", str(gone), 2)
        row = store.claims.rows("default")[0]
        assert (row.taken_reason, row.taken_from) == ("owner-gone", str(gone))
        claims = b.inspect(principal="server")["claims"]["serving"]
        assert claims["owner"] == str(sb.owner) and claims["held"] == 1
        await a.aclose()
        await b.aclose()

    arun(main)


def test_pages_are_claimed_in_bounded_batches_oldest_first() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        ui = Runtime(store, principal="alice")
        await ui.__aenter__()
        for i in range(10):
            await _open_linked(ui, f"page{i}")
        ui.stop_all()
        a = Runtime(store, principal="server")
        await a.__aenter__()
        sa = await a.serve_pages(lease=10.0, heartbeat=2.0, clock=clock, batch=4, manual=True)
        assert len(sa.held) == 4
        before = store.claims.statements
        await sa.tick()
        assert len(sa.held) == 8
        await sa.tick()
        assert len(sa.held) == 10
        # Each tick: one renew, one principal listing, one claim batch, one stale read.
        assert store.claims.statements - before <= 2 * 4
        await a.idle()
        for cell in [ui.get_cell(f"page{i}") for i in range(10)]:
            assert _doubled(store, cell) == 2
        await a.aclose()
        await ui.aclose()

    arun(main)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_page_opened_anywhere_is_picked_up_and_a_stop_anywhere_ends_it(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert not sa.held and not sb.held
        ui, _inp, page = await _ui_intent(store)
        await _settle(store, ui, a, b)
        await sa.tick()  # the next heartbeat finds it
        await sb.tick()
        assert len(sa.held) + len(sb.held) == 1
        owner, other = (sa, sb) if sa.held else (sb, sa)
        # A stop from the UI: the owner's next tick stops it and closes its claim;
        # nobody takes it over, at any time.
        assert await ui.open_page(page) is True  # (the UI must hold it to stop it)
        await ui.stop(page)
        # Acknowledged: the claim is closed already, so the owner's commits for the page
        # are rejected from now on, before its next tick notices the stop.
        (row,) = store.claims.rows("default")
        assert row.owner is None and row.fence == 1
        await _settle(store, ui, a, b)
        await owner.tick()
        assert not owner.held
        row = store.claims.rows("default")[0]
        assert row.owner is None
        clock.now += 100
        await other.tick()
        await owner.tick()
        assert not other.held and not owner.held
        assert not a.registrations() and not b.registrations()
        for rt in (a, b, ui):
            await rt.aclose()

    arun(main)


def test_a_shutdown_releases_its_claims_for_the_others_at_once() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert len(sa.held) == 1
        await a.aclose()  # releases: no lease to wait for
        assert store.claims.rows("default")[0].owner is None
        await sb.tick()
        assert len(sb.held) == 1 and not sb.takeovers  # a claim, not a takeover
        assert store.claims.rows("default")[0].fence == 2
        await b.aclose()

    arun(main)


def test_a_restarted_process_with_the_same_pid_does_not_take_its_old_claim_as_its_own() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        old = sa.owner
        # Killed: no release, no more heartbeats (the runtime goes without its server).
        sa.stopped = True
        a._server = None
        a.close()
        b, sb = await _serve(store, clock)  # same host, same pid, a new nonce
        assert sb.owner.pid == old.pid and sb.owner.nonce != old.nonce
        assert not sb.held  # the old claim is not its own, and its lease is fresh
        clock.now += 11
        await sb.tick()
        assert len(sb.held) == 1 and sb.takeovers[0]["from"] == str(old)
        await b.aclose()

    arun(main)


@pytest.mark.parametrize("shape", ["nested", "computed"])
def test_every_commit_of_a_served_pages_runs_carries_its_fence(shape: str) -> None:
    """A nested child's and a computed child's runs commit under the page's fence too."""
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        ui = Runtime(store, principal="alice")
        await ui.__aenter__()
        inp = ui.get_cell("input")
        page = ui.get_cell("page")
        tx = ui.edit()
        inp.with_tx(tx).set(1)
        if shape == "nested":
            ui.setup(tx, Parent, {"value": inp, "items": [], "count": 0}, page)
        else:
            ui.setup(tx, Spawner, {"source": inp}, page)
        assert (await tx.commit()).ok
        assert await ui.open_page(page) is True
        await ui.idle()
        ui.stop_all()
        a, sa = await _serve(store, clock)
        (held,) = sa.held.values()
        assert len(a.registrations()) == 2  # the page's run and its child's
        with store.testing.hold_verdicts() as gate:
            inp.set(5)
            await turns()
            gate.accept(0)
            await turns()
            mine = [h.request for h in gate.held() if h.request.session_id == a.replica.session_id]
            assert mine, "the input change made the served runs commit"
            assert {r.fence for r in mine} == {Fence("default", "alice", held.pid, 1)}
        await a.idle()
        await a.aclose()
        await ui.aclose()

    arun(main)


def test_sqlite_processes_on_one_host_share_pages_under_claims(tmp_path: pathlib.Path) -> None:
    """Three stores on one file stand for three processes (each its own connections;
    other writers' commits arrive only through `poll()`, called here)."""
    path = tmp_path / "shared.db"
    stores = [SQLiteStore(path, poll_interval=0) for _ in range(3)]
    ui_store, store_a, store_b = stores
    clock = Clock()

    async def settle(*rts: Runtime) -> None:
        for _ in range(4):
            for store in stores:
                assert store.flush(30.0)
                store.poll()
            for rt in rts:
                await rt.idle()

    async def main() -> None:
        ui = Runtime(ui_store, principal="alice")
        await ui.__aenter__()
        inp, page = await _open_linked(ui)
        ui.stop_all()
        a, sa = await _serve(store_a, clock)
        b, sb = await _serve(store_b, clock)
        assert len(sa.held) == 1 and not sb.held
        inp.set(2)
        await settle(ui, a, b)
        assert _doubled(ui_store, page) == 4
        clock.now += 11  # A misses its heartbeats past the lease
        await sb.tick()
        await settle(ui, a, b)
        assert len(sb.held) == 1 and sb.takeovers[0]["reason"] == "lease-expired"
        rejected, accepted = a.replica.stats.rejected, b.replica.stats.accepted
        inp.set(3)
        await settle(ui, a, b)
        assert a.replica.stats.rejected > rejected  # A's run wrote under fence 1: rejected
        assert b.replica.stats.accepted > accepted
        assert _doubled(ui_store, page) == 6
        await sa.tick()
        assert not sa.held and len(sa.lost) == 1
        for rt in (a, b, ui):
            await rt.aclose()

    try:
        arun(main)
    finally:
        for store in stores:
            store.close()


def test_a_page_lost_and_claimed_again_commits_under_its_new_fence() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        ui, inp, page = await _ui_intent(store)
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        inp.set(2)  # A's runs commit under fence 1
        await _settle(store, ui, a, b)
        assert _doubled(store, page) == 4
        clock.now += 11  # A lapses; B takes the page (fence 2)
        await sb.tick()
        await sa.tick()  # A sees the loss
        assert not sa.held and len(sb.held) == 1
        await b.aclose()  # B shuts down: released
        await sa.tick()  # A claims it again: fence 3
        (held,) = sa.held.values()
        assert held.fence == 3
        await _settle(store, ui, a)
        with store.testing.hold_verdicts() as gate:
            inp.set(7)
            await turns()
            gate.accept(0)
            await turns()
            mine = [h.request for h in gate.held() if h.request.session_id == a.replica.session_id]
            assert mine and {r.fence for r in mine} == {Fence("default", "alice", held.pid, 3)}
        await _settle(store, ui, a)
        assert _doubled(store, page) == 14
        await a.aclose()
        await ui.aclose()

    arun(main)


def test_a_stopped_page_is_not_claimed_again_by_a_server_that_still_sees_it_open() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        ui, _inp, page = await _ui_intent(store)
        a, sa = await _serve(store, clock)
        (held,) = sa.held.values()
        # The stop's claim close lands before A's replica heard of the record's removal
        # (what a stop in another process looks like to A for a moment).
        assert store.claims.close("default", "alice", held.pid, clock.now)
        await sa.tick()  # A's view still shows the page open
        assert not sa.held and len(sa.lost) == 1
        (row,) = store.claims.rows("default")
        assert row.owner is None and row.fence == 1  # not claimed again
        # Opened again: the open's record reopens the claim; A serves it (fence 2).
        await ui.stop(page)
        await _settle(store, ui, a)
        assert await ui.open_page(page) is True
        ui.stop_all()
        await _settle(store, ui, a)
        await sa.tick()
        assert [h.fence for h in sa.held.values()] == [2]
        await a.aclose()
        await ui.aclose()

    arun(main)


# --------------------------------------------------------------------------- a UI process


def _two_stores(kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> list[Any]:
    """Two store objects on one database: a UI process's and a serving process's."""
    if kind == "sqlite":
        return [SQLiteStore(tmp_path / "ui.db", poll_interval=0) for _ in range(2)]
    import uuid

    from cells import PostgresStore

    cluster = request.getfixturevalue("pg_cluster")
    schema = f"ui_{uuid.uuid4().hex[:12]}"
    return [PostgresStore(cluster.dsn, schema=schema, poll_interval=0) for _ in range(2)]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_ui_process_records_pages_and_a_serving_process_runs_them(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    stores = _two_stores(kind, tmp_path, request)
    ui_store, server_store = stores
    clock = Clock()

    async def settle(*rts: Runtime) -> None:
        for _ in range(4):
            for store in stores:
                assert store.flush(30.0)
                store.poll()
            for rt in rts:
                await rt.idle()

    async def main() -> None:
        a, sa = await _serve(server_store, clock)
        ui = Runtime(ui_store, principal="alice", pages="served")
        await ui.__aenter__()
        inp, page = await _open_linked(ui)
        # Recorded, not run here: no registration, nothing claimed by the UI's runtime.
        assert ui.registrations() == frozenset() and ui.lifetimes() == frozenset()
        assert [c.link() for c in ui.pages()] == [page.link()]
        assert store_rows(ui_store) == []
        await settle(ui, a)
        await sa.tick()  # the next heartbeat picks it up
        await settle(ui, a)
        (held,) = sa.held.values()
        assert held.link == page.link() and held.fence == 1
        inp.set(5)
        await settle(ui, a)
        # The UI reads the page's result: durable documents the serving process wrote.
        assert page.key("doubled").get() == 10
        assert ui.registrations() == frozenset()
        assert a.replica.stats.accepted > 0
        # A stop from the UI ends the record and the claim; the server's tick stops it.
        await ui.stop(page)
        assert ui.pages() == []
        (row,) = store_rows(ui_store)
        assert row.owner is None
        await settle(ui, a)
        await sa.tick()
        assert not sa.held and a.registrations() == frozenset()
        for rt in (a, ui):
            await rt.aclose()

    try:
        arun(main, timeout=60)
    finally:
        for store in stores:
            if kind == "postgres":
                store.drop_schema()
            store.close()


def store_rows(store: StoreBase) -> list[Any]:
    return store.claims.rows("default")


def test_a_serving_runtime_records_its_own_opens_for_a_claim() -> None:
    """An open in a serving process is claimed like any other (here by this process's
    own server, woken at once): it never runs unclaimed beside another server's run."""
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        a, sa = await _serve(store, clock)
        alice = a.session("alice", "s")
        page = alice.get_cell("page")
        tx = alice.edit()
        alice.setup(tx, Child, {"value": 4}, page)
        assert (await tx.commit()).ok
        assert await alice.open_page(page) is True
        assert a.registrations() == frozenset()  # recorded only, until a claim
        await sa.tick()
        await a.idle()
        (held,) = sa.held.values()
        assert held.fence == 1 and len(a.registrations()) == 1
        assert _doubled(store, page) == 8
        await a.aclose()

    arun(main)


def test_an_owner_whose_renewals_fail_stops_its_pages_before_the_lease_ends() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert len(sa.held) == 1 and len(a.registrations()) == 1
        real = sa.table

        class Unreachable(type(real)):  # type: ignore[misc]
            def renew(self, *args: Any) -> Any:
                raise StoreError("the store is unreachable (a test's partition)")

        sa.table = Unreachable.__new__(Unreachable)
        sa.table.__dict__.update(real.__dict__)
        clock.now += 2.0
        with pytest.raises(StoreError):
            await sa.tick()
        assert len(sa.held) == 1  # one failed renewal: still within its tolerance
        clock.now += 5.9  # 7.9 s since the last renewal: < lease - heartbeat (8 s)
        with pytest.raises(StoreError):
            await sa.tick()
        assert len(sa.held) == 1
        clock.now += 0.1  # 8 s: a heartbeat before the lease (10 s) ends
        with pytest.raises(StoreError):
            await sa.tick()
        assert not sa.held and sa.lapsed == 1 and sa.lost[-1]["why"] == "lapsed"
        assert a.registrations() == frozenset()  # nothing runs here any more
        await sb.tick()
        assert not sb.held  # the lease has not ended: B does not take it yet
        clock.now += 2.1
        await sb.tick()
        assert len(sb.held) == 1 and sb.takeovers[0]["reason"] == "lease-expired"
        # The store is back: A's next renew holds nothing, and it runs nothing.
        sa.table = real
        await sa.tick()
        assert not sa.held and a.registrations() == frozenset()
        await a.aclose()
        await b.aclose()

    arun(main)


def test_a_lapsed_owner_back_before_anyone_took_its_pages_releases_and_claims_them() -> None:
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        real = sa.table

        class Unreachable(type(real)):  # type: ignore[misc]
            def renew(self, *args: Any) -> Any:
                raise StoreError("the store is unreachable (a test's partition)")

        sa.table = Unreachable.__new__(Unreachable)
        sa.table.__dict__.update(real.__dict__)
        clock.now += 8.0
        with pytest.raises(StoreError):
            await sa.tick()
        assert not sa.held
        (row,) = store.claims.rows("default")
        assert row.owner == sa.owner  # still A's in the store (nobody took it)
        sa.table = real
        await sa.tick()  # renews, finds a claim it does not run: released, claimed again
        await a.idle()
        (held,) = sa.held.values()
        assert held.fence == 2 and len(a.registrations()) == 1
        await a.aclose()

    arun(main)


def test_claim_rows_stay_bounded_over_many_open_and_stop_cycles() -> None:
    store = MemoryStore()
    clock = Clock()
    # A stop in the UI closes the claim at the UI's (wall) time, the server sweeps on its
    # own clock: processes keep their clocks in step, so the test clock starts at the
    # wall time (and then only the test moves it).
    clock.now = time.time()

    async def main() -> None:
        ui = Runtime(store, principal="alice", pages="served")
        await ui.__aenter__()
        a, sa = await _serve(store, clock)
        sizes = []
        for cycle in range(30):
            page = ui.get_cell(f"page{cycle}")
            tx = ui.edit()
            ui.setup(tx, Child, {"value": cycle}, page)
            assert (await tx.commit()).ok
            assert await ui.open_page(page) is True
            await _settle(store, ui, a)
            clock.now += 2.0
            await sa.tick()
            assert len(sa.held) == 1
            await ui.stop(page)
            await _settle(store, ui, a)
            clock.now += 2.0
            await sa.tick()
            assert not sa.held
            sizes.append(len(store.claims.rows("default")))
        # Closed rows go once KEEP_CLOSED leases (60 s) old: about 60 / 4 s per cycle.
        assert max(sizes) <= 17 and sizes[-1] <= 17
        assert all(r.owner is None for r in store.claims.rows("default"))
        for rt in (a, ui):
            await rt.aclose()

    arun(main)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_rows_of_pages_whose_record_vanished_are_forgotten_and_stop_crowding_takeovers(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        await _open_from_ui(store)
        a, sa = await _serve(store, clock)
        assert len(sa.held) == 1
        # Six pages a process served and released at its shutdown long ago (fence 2
        # each), whose records are gone without a stop: nothing would claim or close
        # their rows, and they are older than any lease that runs out.
        table = store.claims
        ghost = Owner("gone-host", 1, "g" * 32)
        refs = [("alice", f"ghost{i}") for i in range(6)]
        for t in (clock.now - 200, clock.now - 100):
            assert len(table.claim("default", ghost, refs, t, 10.0)) == 6
            assert table.release_all("default", ghost, t) == 6
        # The page's owner is killed: no release, no heartbeat.
        sa.stopped = True
        a._server = None
        a.close()
        b, sb = await _serve(store, clock, batch=2)  # reads 2 * 2 stale rows per tick
        assert sb.forgotten == 2 and not sb.held  # its first tick: the lease still runs
        clock.now += 11  # the lease ran out
        held = []
        for _ in range(2):
            before = sb.forgotten
            await sb.tick()
            held.append((sb.forgotten - before, len(sb.held)))
        # Bounded (two per tick), oldest first: the ghosts fill the first tick's stale
        # rows, the takeover gets its turn at the next (without `forget`: never).
        assert held == [(2, 0), (2, 1)]
        assert sb.takeovers[0]["reason"] == "lease-expired"
        assert [r.page for r in table.rows("default")] == [next(iter(sb.held))[1]]
        # The fence floor covers the deleted fences: a fresh claim starts above 2.
        assert table.claim("default", ghost, [("alice", "ghost0")], clock.now, 10.0) == {
            ("alice", "ghost0"): 3
        }
        await b.aclose()

    arun(main)
    store.close()


async def _parent_page(store: StoreBase) -> Cell:
    """A Parent page alice opened from a local runtime (its intent stays)."""
    async with Runtime(store, principal="alice") as local:
        page = local.get_cell("parent")
        async with local.edit() as tx:
            local.setup(tx, Parent, {"value": 1, "items": [], "count": 0}, page)
        assert await local.open_page(page) is True
        return page


def _argument(store: StoreBase, page: Cell) -> Any:
    """The Parent page's argument as the store holds it."""
    return store.read_durable(docs.argument_link(page.link()).key(page.identity))["value"]


def _count(store: StoreBase, page: Cell) -> Any:
    return _argument(store, page)["count"]


def test_a_served_runtime_resumes_nothing_and_records_a_send_for_the_pages_owner() -> None:
    store = MemoryStore()

    async def main() -> None:
        page = await _parent_page(store)
        ui = Runtime(store, principal="alice", pages="served")
        await ui.__aenter__()
        assert await ui.resume() == []  # the workers run it, not this runtime
        assert not ui.registrations()
        # Its streams show as buttons: the handler is found in the page's pattern.
        label = ui.handler_label(ui.get_cell("parent").key("bump"))
        assert label == "Parent.n3 handler pattern_defs:increment"
        sent = ui.send(ui.get_cell("parent").key("bump"), {"by": 2})
        await ui.idle()
        assert not ui.registrations()  # the send started nothing here
        assert sent.status == "queued"  # recorded in alice's inbox, for the page's owner
        await ui.aclose()
        async with Runtime(store, principal="alice") as again:  # pages="local"
            assert [c.id for c in await again.resume()] == [page.id]

    arun(main)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_send_in_a_served_runtime_reaches_the_owners_handler_in_order_and_hears_the_outcome(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        page = await _parent_page(store)
        ui = Runtime(store, principal="alice", pages="served")
        await ui.__aenter__()
        a, sa = await _serve(store, clock)
        assert len(sa.held) == 1
        stream = ui.get_cell("parent")
        sends = [ui.send(stream.key("add"), {"item": f"i{n}"}) for n in range(5)]
        bumped = ui.send(stream.key("bump"), {"by": 2})
        failing = ui.send(stream.key("bump"), {"by": "two"})  # the handler raises
        await _settle(store, ui, a)  # (a change of the inbox wakes the owner's delivery)
        await sa.tick()  # and so does each heartbeat
        await _settle(store, ui, a)
        await _settle(store, ui, a)
        assert [s.status for s in sends] == ["done"] * 5
        assert await bumped == "done"
        with pytest.raises(RemoteHandlingError, match=r"HandlerError.*TypeError"):
            await failing
        value = _argument(store, page)
        assert value["count"] == 2
        items = value["items"]
        if isinstance(items, Link):
            items = store.read_durable(items.key(page.identity))["value"]
        assert items == [f"i{n}" for n in range(5)]  # in send order
        inbox = store.read_durable(inbox_key("default", "alice"))["value"]
        assert inbox["queue"] == [] and len(inbox["outcomes"]) == 7
        await sa.tick()
        await _settle(store, ui, a)
        assert _count(store, page) == 2  # delivered once: nothing left to deliver again
        for rt in (a, ui):
            await rt.aclose()

    arun(main)
    store.close()


def test_a_bad_event_is_refused_at_the_served_sender() -> None:
    from typed_defs import Todo

    from runner.errors import PatternError

    store = MemoryStore()

    async def main() -> None:
        async with Runtime(store, principal="alice") as local:
            page = local.get_cell("todo")
            async with local.edit() as tx:
                local.setup(tx, Todo, {"items": []}, page)
            assert await local.open_page(page) is True
        ui = Runtime(store, principal="alice", pages="served")
        await ui.__aenter__()
        with pytest.raises(PatternError, match=r"title"):
            ui.send(ui.get_cell("todo").key("add"), {"titel": "x"})
        await ui.idle()
        assert store.read_durable(inbox_key("default", "alice")) is MISSING  # not recorded
        await ui.aclose()

    arun(main)


def test_an_event_handled_before_a_takeover_is_neither_lost_nor_handled_twice() -> None:
    """The owner crashes after the handling committed and before its outcome was
    recorded: the new owner delivers the item again, its receipt refuses the second
    handling, and the sender hears "done". A second event the crashed owner had
    handled but not committed (its commit held) is handled once, by the new owner."""
    store = MemoryStore()
    clock = Clock()

    async def main() -> None:
        page = await _parent_page(store)
        ui = Runtime(store, principal="alice", pages="served")
        await ui.__aenter__()
        a, sa = await _serve(store, clock)
        (held_page,) = sa.held.values()
        first = ui.send(ui.get_cell("parent").key("bump"), {"by": 2})
        second = ui.send(ui.get_cell("parent").key("bump"), {"by": 5})
        await _settle(store, ui)
        with store.testing.hold_verdicts() as gate:
            await sa.tick()  # A delivers both; the handlings' commits wait at the gate
            await turns()
            mine = [h.request for h in gate.held() if h.request.session_id == a.replica.session_id]
            assert len(mine) == 2  # one handling each, under the page's fence
            assert {r.fence for r in mine} == {Fence("default", "alice", held_page.pid, 1)}
            gate.accept(0)  # the first handling commits (count 2, its receipt written) ...
            await turns()
            assert _count(store, page) == 2
            # ... and A dies before the second's verdict and before any outcome is recorded.
            sa.stopped = True
            a._server = None
            a.close()
        assert first.status == "queued" and second.status == "queued"
        clock.now += 11  # A's lease ran out
        b, sb = await _serve(store, clock)
        assert sb.takeovers and sb.takeovers[0]["reason"] == "lease-expired"
        await _settle(store, ui, b)
        await sb.tick()
        await _settle(store, ui, b)
        await _settle(store, ui, b)
        assert await first == "done" and await second == "done"
        assert _count(store, page) == 7  # each event handled exactly once
        assert store.read_durable(inbox_key("default", "alice"))["value"]["queue"] == []
        for rt in (b, ui):
            await rt.aclose()

    arun(main)


def test_runtime_pages_setting_is_checked() -> None:
    from runner.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"pages must be 'local'.*got 'elsewhere'"):
        Runtime(pages="elsewhere")

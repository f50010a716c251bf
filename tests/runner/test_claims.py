"""Serving pages under claims (issue 19 items 3-5): one owner per page, fenced takeovers.

Several runtimes on one store stand for several processes (each has its own owner
nonce; same host and pid, so the liveness probe is lease-only unless a test gives
one). Time is a test clock each server reads; every tick is driven by the test, so
nothing sleeps.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from pattern_defs import Child
from support import arun, turns

from cells import (
    Cell,
    Fence,
    Link,
    MemoryStore,
    SQLiteStore,
    StoreBase,
)
from runner import Runtime
from runner._claims import PageServer


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


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_paused_owner_is_taken_over_and_its_writes_are_fenced_out(
    kind: str, tmp_path: pathlib.Path
) -> None:
    store = _store(kind, tmp_path)
    clock = Clock()

    async def main() -> None:
        ui = Runtime(store, principal="alice")
        await ui.__aenter__()
        inp, page = await _open_linked(ui)
        ui.stop_all()  # the UI keeps its intent but runs nothing itself
        a, sa = await _serve(store, clock)
        b, sb = await _serve(store, clock)
        assert len(sa.held) == 1
        (held,) = sa.held.values()
        assert held.fence == 1
        inp.set(2)
        await ui.idle()
        await a.idle()
        assert _doubled(store, page) == 4
        # A pauses (no heartbeat) past its lease; B takes the page over.
        clock.now += 11
        await sb.tick()
        await b.idle()
        assert len(sb.held) == 1 and next(iter(sb.held.values())).fence == 2
        (t,) = sb.takeovers
        assert t["reason"] == "lease-expired" and t["from"] == str(sa.owner)
        # A resumes, unaware: its run re-computes on the next input change and commits
        # under fence 1, which the store rejects; B's commit (fence 2) is accepted.
        with store.testing.hold_verdicts() as gate:
            inp.set(3)
            await turns()
            gate.accept(0)  # the input change reaches both runtimes
            await turns()
            fences = {h.request.session_id: h.request.fence for h in gate.held()}
            assert fences == {
                a.replica.session_id: Fence("default", "alice", held.pid, 1),
                b.replica.session_id: Fence("default", "alice", held.pid, 2),
            }
            rejected_before = a.replica.stats.rejected
            gate.release()
        await a.idle()
        await b.idle()
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

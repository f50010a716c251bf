"""The page claims of every store: one-statement compare-and-set operations, and the
fence check inside the commit's transaction (issue 19 item 3).

Runs against MemoryStore, SQLiteStore and a throwaway PostgreSQL cluster. Times are
the numbers the tests pass (the store decides on them), so nothing sleeps.
"""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import Iterator

import pytest

from cells import (
    Fence,
    FencedError,
    MemoryStore,
    Outcome,
    Owner,
    SQLiteStore,
    StoreBase,
)

A = Owner("host-a", 11, "a" * 32)
B = Owner("host-b", 22, "b" * 32)
SPACE = "default"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreBase]:
    if request.param == "memory":
        made: StoreBase = MemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "claims.db")
    else:
        from cells import PostgresStore

        pg_cluster = request.getfixturevalue("pg_cluster")
        made = PostgresStore(pg_cluster.dsn, schema=f"t_{uuid.uuid4().hex}", poll_interval=0)
    try:
        yield made
    finally:
        made.close()


def test_a_claim_takes_only_unowned_pages_and_each_claim_grows_the_fence(
    store: StoreBase,
) -> None:
    t = store.claims
    assert t.claim(SPACE, A, [("p", "x"), ("p", "y")], 100.0, 10.0) == {
        ("p", "x"): 1,
        ("p", "y"): 1,
    }
    assert t.claim(SPACE, B, [("p", "x"), ("p", "z")], 101.0, 10.0) == {("p", "z"): 1}
    assert t.release(SPACE, A, [("p", "x", 1)], 102.0) == 1
    assert t.release(SPACE, A, [("p", "x", 1)], 102.0) == 0  # no longer A's
    assert t.claim(SPACE, B, [("p", "x")], 103.0, 10.0) == {("p", "x"): 2}
    rows = {r.page: r for r in t.rows(SPACE)}
    assert (rows["x"].owner, rows["x"].fence) == (B, 2)
    assert (rows["y"].owner, rows["y"].fence) == (A, 1)


def test_one_renew_statement_extends_every_claim_of_its_owner(store: StoreBase) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", str(i)) for i in range(50)], 100.0, 10.0)
    t.claim(SPACE, B, [("q", "0")], 100.0, 10.0)
    before = t.statements
    kept = t.renew(SPACE, A, 105.0, 10.0)
    assert t.statements == before + 1
    assert len(kept) == 50 and set(kept.values()) == {1}
    assert {r.expires_at for r in t.rows(SPACE) if r.owner == A} == {115.0}
    assert [r.expires_at for r in t.rows(SPACE) if r.owner == B] == [110.0]


def test_a_steal_needs_the_exact_row_and_an_expired_lease(store: StoreBase) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "x")], 100.0, 10.0)
    (row,) = t.stale(SPACE, 111.0, B, 10)
    assert row.owner == A
    # Fresh at 105: a lease-expired steal is refused by the store itself.
    assert t.steal(row, B, 105.0, 10.0, "lease-expired") is None
    # The owner pulses between B's read and B's steal: the steal loses.
    t.renew(SPACE, A, 108.0, 10.0)
    assert t.steal(row, B, 111.0, 10.0, "lease-expired") is None
    (row,) = t.stale(SPACE, 119.0, B, 10)
    assert t.steal(row, B, 119.0, 10.0, "lease-expired") == 2
    assert t.steal(row, B, 119.0, 10.0, "lease-expired") is None  # taken once
    (now,) = t.rows(SPACE)
    assert (now.owner, now.fence, now.takeovers) == (B, 2, 1)
    assert (now.taken_from, now.taken_reason) == (str(A), "lease-expired")
    # A's heartbeat no longer finds the page.
    assert t.renew(SPACE, A, 120.0, 10.0) == {}


def test_stale_offers_released_and_expired_rows_oldest_first_never_closed_ones(
    store: StoreBase,
) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "old")], 100.0, 10.0)
    t.claim(SPACE, A, [("p", "new")], 104.0, 10.0)
    t.claim(SPACE, A, [("p", "closed"), ("p", "shut")], 104.0, 10.0)
    t.release(SPACE, A, [("p", "closed", 1)], 105.0, closed=True)
    t.release(SPACE, A, [("p", "shut", 1)], 105.0)
    assert [r.page for r in t.stale(SPACE, 120.0, B, 10)] == ["shut", "old", "new"]
    assert [r.page for r in t.stale(SPACE, 120.0, B, 2)] == ["shut", "old"]
    # A owner on B's own host is offered while fresh (for the pid probe).
    same_host = Owner("host-b", 33, "c" * 32)
    t.claim(SPACE, same_host, [("p", "local")], 119.0, 10.0)
    assert "local" in [r.page for r in t.stale(SPACE, 120.0, B, 10)]
    assert "local" not in [r.page for r in t.stale(SPACE, 120.0, same_host, 10)]


async def _commit(store: StoreBase, fence: Fence | None) -> tuple[Outcome, BaseException | None]:
    from runner import Runtime

    async with Runtime(store, principal="p") as rt:
        rt.replica.fence_for = lambda _tx, _req: fence
        cell = rt.get_cell({"doc": str(uuid.uuid4())})
        cell.set({"n": 1})
        tx = rt.edit()
        tx.write(cell.doc_key, ("value", "n"), 2)
        result = await tx.commit()
        return result.outcome, result.error


def test_a_commit_is_accepted_only_under_the_current_claim(store: StoreBase) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "x")], 100.0, 10.0)
    current = Fence(SPACE, "p", "x", 1)
    assert asyncio.run(_commit(store, current)) == (Outcome.OK, None)
    (row,) = t.stale(SPACE, 111.0, B, 10)
    assert t.steal(row, B, 111.0, 10.0, "lease-expired") == 2
    outcome, error = asyncio.run(_commit(store, current))
    assert outcome is Outcome.PERMANENT
    assert isinstance(error, FencedError) and error.kind == "fenced"
    assert "fence 1 of page x of 'p'" in str(error) and "now fence 2" in str(error)
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "x", 2)))[0] is Outcome.OK
    # Released (the owner shut down): nobody's writes for the page are accepted.
    t.release_all(SPACE, B, 112.0)
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "x", 2)))[0] is Outcome.PERMANENT
    # A page never claimed: fenced out too; an unfenced commit is untouched.
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "nope", 1)))[0] is Outcome.PERMANENT
    assert asyncio.run(_commit(store, None)) == (Outcome.OK, None)


def test_many_steals_in_one_statement_take_only_rows_still_as_seen(store: StoreBase) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", str(i)) for i in range(5)], 100.0, 10.0)
    rows = {r.page: r for r in t.stale(SPACE, 111.0, B, 10)}
    assert len(rows) == 5
    t.renew(SPACE, A, 105.0, 10.0)  # A pulses: every snapshot above is now stale
    fresh = {r.page: r for r in t.stale(SPACE, 116.0, B, 10)}
    before = t.statements
    got = t.steal_many(
        [
            (rows["0"], "lease-expired"),  # moved since: refused
            (fresh["1"], "lease-expired"),  # as seen, expired at 116: taken
            (fresh["2"], "owner-gone"),  # as seen: taken
            (fresh["3"], "lease-expired"),
        ],
        B,
        116.0,
        10.0,
    )
    assert t.statements == before + 1
    assert got == {("p", "1"): 2, ("p", "2"): 2, ("p", "3"): 2}
    by_page = {r.page: r for r in t.rows(SPACE)}
    assert by_page["0"].owner == A and by_page["4"].owner == A
    assert (by_page["2"].owner, by_page["2"].taken_reason, by_page["2"].taken_from) == (
        B,
        "owner-gone",
        str(A),
    )
    # A fresh lease is not taken for "lease-expired".
    C = Owner("host-c", 5, "c" * 32)
    (row4,) = [r for r in t.stale(SPACE, 116.0, C, 10) if r.page == "4"]
    assert t.steal_many([(row4, "lease-expired")], C, 114.0, 10.0) == {}


def test_a_closed_claim_is_claimed_again_only_after_a_reopen(store: StoreBase) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "x")], 100.0, 10.0)
    assert t.close(SPACE, "p", "x", 101.0) is True
    assert t.close(SPACE, "p", "x", 101.0) is False  # nobody holds it any more
    assert t.claim(SPACE, B, [("p", "x")], 101.0, 10.0) == {}
    assert t.stale(SPACE, 200.0, B, 10) == []
    assert t.reopen(SPACE, "p", "x") is True
    assert t.reopen(SPACE, "p", "x") is False
    assert t.claim(SPACE, B, [("p", "x")], 102.0, 10.0) == {("p", "x"): 2}


def test_a_sweep_deletes_rows_closed_long_enough_and_fences_never_repeat(
    store: StoreBase,
) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "x"), ("p", "y"), ("p", "z")], 100.0, 10.0)
    (row,) = [r for r in t.stale(SPACE, 111.0, B, 10) if r.page == "x"]
    assert t.steal_many([(row, "lease-expired")], B, 111.0, 10.0) == {("p", "x"): 2}
    assert t.close(SPACE, "p", "x", 120.0) is True  # a stop anywhere (fence 2)
    assert t.release(SPACE, A, [("p", "y", 1)], 130.0, closed=True) == 1  # the owner's
    # Closed too recently: kept (a claim of a stopped page is refused meanwhile).
    assert t.sweep_closed(SPACE, 120.0, 10) == 0
    assert t.claim(SPACE, B, [("p", "x")], 125.0, 10.0) == {}
    # Bounded per call, oldest close first; an open claim ("z") is never swept.
    assert t.sweep_closed(SPACE, 200.0, 1) == 1
    assert [r.page for r in t.rows(SPACE)] == ["y", "z"]
    assert t.sweep_closed(SPACE, 200.0, 10) == 1
    assert t.sweep_closed(SPACE, 200.0, 10) == 0
    assert [r.page for r in t.rows(SPACE)] == ["z"]
    # Opened and claimed afresh: the fence starts above every fence a deleted row had
    # (x reached 2), so a process still holding fence 1 or 2 of "x" is fenced out.
    got = t.claim(SPACE, B, [("p", "x"), ("p", "new")], 210.0, 10.0)
    assert got == {("p", "x"): 3, ("p", "new"): 3}
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "x", 2)))[0] is Outcome.PERMANENT
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "x", 3)))[0] is Outcome.OK
    assert [(r.page, r.fence) for r in t.rows(SPACE)] == [("new", 3), ("x", 3), ("z", 1)]


def test_forget_deletes_only_rows_still_as_read_ownerless_or_expired_and_keeps_the_floor(
    store: StoreBase,
) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "gone"), ("p", "moved"), ("p", "dead"), ("p", "live")], 100.0, 10.0)
    (gone,) = [r for r in t.stale(SPACE, 111.0, B, 10) if r.page == "gone"]
    assert t.steal_many([(gone, "lease-expired")], B, 111.0, 10.0) == {("p", "gone"): 2}
    assert t.release_all(SPACE, B, 112.0) == 1  # "gone": fence 2, released (a shutdown)
    assert t.release(SPACE, A, [("p", "moved", 1)], 112.0) == 1
    rows = {r.page: r for r in t.stale(SPACE, 113.0, B, 10)}
    assert sorted(rows) == ["dead", "gone", "live", "moved"]  # A's leases ran out at 110
    t.renew(SPACE, A, 113.0, 10.0)  # "live" is A's again (and "dead" too: A renews all)
    assert t.claim(SPACE, B, [("p", "moved")], 113.0, 10.0) == {("p", "moved"): 2}
    later = t.stale(SPACE, 125.0, B, 10)
    # "moved" was claimed since it was read, "live" and "dead" renewed: only "gone" goes.
    assert t.forget(SPACE, list(rows.values()), 114.0) == 1
    assert sorted(r.page for r in t.rows(SPACE)) == ["dead", "live", "moved"]
    # An expired owner's row as read now goes; a lease that still runs at `now` stays.
    fresh = {r.page: r for r in later}
    assert t.forget(SPACE, [fresh["live"]], 120.0) == 0
    assert t.forget(SPACE, [fresh["live"], fresh["dead"]], 125.0) == 2
    assert [r.page for r in t.rows(SPACE)] == ["moved"]
    # A closed row is the closed sweep's, never forgotten.
    assert t.close(SPACE, "p", "moved", 126.0) is True
    (row,) = t.rows(SPACE)
    assert t.forget(SPACE, [row], 200.0) == 0
    # The floor covers every deleted fence ("gone" had 2): a fresh claim starts at 3.
    assert t.claim(SPACE, B, [("p", "gone"), ("p", "dead")], 130.0, 10.0) == {
        ("p", "gone"): 3,
        ("p", "dead"): 3,
    }
    assert asyncio.run(_commit(store, Fence(SPACE, "p", "gone", 2)))[0] is Outcome.PERMANENT


def test_a_stop_closes_a_released_claim_so_the_sweep_stops_offering_it(
    store: StoreBase,
) -> None:
    t = store.claims
    t.claim(SPACE, A, [("p", "x"), ("p", "y")], 100.0, 10.0)
    assert t.release_all(SPACE, A, 101.0) == 2  # a shutdown: both free for anyone
    assert [r.page for r in t.stale(SPACE, 102.0, B, 10)] == ["x", "y"]
    assert t.close(SPACE, "p", "x", 103.0) is True  # stopped while nobody held it
    assert t.close(SPACE, "p", "x", 104.0) is False
    assert [r.page for r in t.stale(SPACE, 105.0, B, 10)] == ["y"]
    assert t.claim(SPACE, B, [("p", "x")], 105.0, 10.0) == {}

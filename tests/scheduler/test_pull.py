"""Pulls: a pull holds the stale dormant nodes feeding what it reads, settles, and reads
the value itself (no node of its own; nothing made live). What it returns is what a
node reading the cell would have read as the last run of its pass: links the settle
moved and writers added meanwhile are followed, and once it returns the graph is as
dormant as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cells import (
    Cell,
    Identity,
    Link,
    MemoryStore,
    OwnershipError,
    Space,
    Transaction,
    read_value,
)
from scheduler import Scheduler


def _world() -> tuple[Space, Scheduler]:
    space = Space(MemoryStore(), "sp")
    return space, Scheduler(space.replica)


def _demand_and_liveness(sch: Scheduler) -> list[tuple[str, int, bool]]:
    return sorted((n.label, n.demand, n.is_live) for n in sch.graph.nodes)


def test_a_pull_leaves_no_node_no_demand_and_nothing_live() -> None:
    space, sch = _world()
    a, b, c = space.cell("a"), space.cell("b"), space.cell("c")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    sch.derive(c, [b], lambda v: v * 10, label="c")
    before = _demand_and_liveness(sch)
    assert before == [("b", 0, False), ("c", 0, False)]
    assert 20 == sch.pull_now(c)
    assert 20 == asyncio.run(sch.pull(c))
    assert _demand_and_liveness(sch) == before
    sch._check()
    # Dormant again: a write runs nothing until something reads it.
    runs = sch.stats.runs
    a.set(5)
    sch.settle()
    assert sch.stats.runs == runs
    assert 60 == sch.pull_now(c)
    assert sch.stats.runs == runs + 2  # b and c, once each
    sch.close()


def test_a_pull_runs_each_stale_node_once_and_reads_a_consistent_value() -> None:
    # A diamond: d reads b and c, both of a. One write, one pull: b, c and d run once
    # each, and d never reads a half-propagated wave.
    space, sch = _world()
    a, b, c, d = (space.cell(n) for n in "abcd")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    sch.derive(c, [a], lambda v: v * 2, label="c")
    seen: list[tuple[int, int]] = []

    def add(x: int, y: int) -> int:
        seen.append((x, y))
        return x + y

    sch.derive(d, [b, c], add, label="d")
    assert 4 == sch.pull_now(d)
    a.set(10)
    runs = sch.stats.runs_computation
    assert 31 == sch.pull_now(d)
    assert sch.stats.runs_computation - runs == 3
    assert seen[-1] == (11, 20) and len(seen) == 2
    sch.close()


def _chooser(space: Space, sch: Scheduler) -> tuple[Cell, Cell, Cell]:
    """`board` is a link to card a or card b (as `x` says); each card's label is a link
    to a derived cell of `y` (a: 10y, b: 100y)."""
    x, y = space.cell("x"), space.cell("y")
    label_a, label_b = space.cell("label_a"), space.cell("label_b")
    card_a, card_b, board = space.cell("card_a"), space.cell("card_b"), space.cell("board")
    x.set("a")
    y.set(1)
    sch.derive(label_a, [y], lambda v: 10 * v, label="label a")
    sch.derive(label_b, [y], lambda v: 100 * v, label="label b")
    card_a.set({"label": label_a.link()})
    card_b.set({"label": label_b.link()})
    sch.derive(board, [x], lambda v: card_a.link() if v == "a" else card_b.link(), label="choose")
    return x, y, board.key("label")


def test_a_pull_follows_a_link_its_settle_moved_to_a_writer_that_never_ran() -> None:
    # Before the settle the pulled place leads to card a (whose label's writer the
    # pull holds); the settle re-points it to card b, whose label's writer never ran
    # and is not live. The pull must hold that writer too and settle again: read at
    # once, it would return card b's label as absent (None).
    space, sch = _world()
    x, y, pulled = _chooser(space, sch)
    assert 10 == sch.pull_now(pulled)
    x.set("b")
    y.set(2)
    label_b = next(n for n in sch.graph.nodes if n.label == "label b")
    assert label_b.runs == 0
    assert 200 == sch.pull_now(pulled)
    assert label_b.runs == 1
    x.set("a")
    y.set(3)
    assert 30 == asyncio.run(sch.pull(pulled))
    assert all(n.demand == 0 and not n.is_live for n in sch.graph.nodes)
    sch._check()
    sch.close()


def test_a_pull_finds_a_writer_added_during_its_settle() -> None:
    # The pulled cell has no writer when the pull starts; its settle runs a sink whose
    # function registers one (dormant: registered outside any run). The value the pull
    # returns is that writer's, as a node reading the cell would have read it (the new
    # writer feeds it and runs): read at once, it would be absent.
    space, sch = _world()
    x, out = space.cell("x"), space.cell("out")
    x.set(1)
    added: list[object] = []

    def on_x(value: object) -> None:
        if value == 2 and not added:
            added.append(sch.derive(out, [x], lambda v: v * 7, label="seven"))

    cancel = sch.sink(x, on_x)
    x.set(2)  # the sink runs (and registers the writer) in the pull's settle
    assert 14 == sch.pull_now(out)
    assert len(added) == 1
    cancel()
    sch._check()
    sch.close()


def test_a_pull_of_an_observed_value_keeps_the_observer_live() -> None:
    space, sch = _world()
    a, b = space.cell("a"), space.cell("b")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    seen: list[object] = []
    cancel = sch.sink(b, seen.append)
    assert 2 == sch.pull_now(b)
    (writer,) = [n for n in sch.graph.nodes if n.label == "b"]
    assert writer.is_live and writer.demand == 0
    a.set(4)
    sch.settle()
    assert seen == [2, 5]
    cancel()
    assert not writer.is_live
    sch._check()
    sch.close()


def test_a_pull_whose_read_is_refused_raises_the_refusal_to_the_puller() -> None:
    # The pull reads the value itself, as its caller: a read the caller's identity may
    # not make raises to it. (A pull's node used to fail on it instead: the error went
    # to `errors()` only and the pull returned the MISSING sentinel.)
    space, sch = _world()
    pointer = space.cell("pointer")
    pointer.set(Link("sp", "cw:bookkeeping"))
    with pytest.raises(OwnershipError, match="cw:bookkeeping"):
        sch.pull_now(pointer)
    with pytest.raises(OwnershipError, match="cw:bookkeeping"):
        asyncio.run(sch.pull(pointer))
    assert sch.errors() == []
    assert all(n.demand == 0 for n in sch.graph.nodes)
    sch.close()


def test_a_pull_leaves_its_replica_quiet_so_the_store_may_prune() -> None:
    # A pull reads through a transaction it drops open: counted as an open transaction,
    # every pull kept the replica busy for good, and its store never pruned history.
    space, sch = _world()
    a, b = space.cell("a"), space.cell("b")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    replica = space.replica
    for i in range(3):
        a.set(i)
        assert i + 1 == sch.pull_now(b)
        assert i + 1 == asyncio.run(sch.pull(b))
        replica.pump()
        assert replica.low_water() is None  # quiet: no history needed
    store = space.replica.store
    assert isinstance(store, MemoryStore)
    assert store.low_water() == store.seq


# A pull holds only the stale dormant nodes feeding what it reads (`Graph.stale_region`):
# edits made while nothing demanded the value cost what they changed, not what feeds it.


def _combined(space: Space, sch: Scheduler, n: int) -> tuple[list[Cell], Cell, list[Any]]:
    """`n` sources, one derived element of each (10x), and a total reading every element
    (as a list's combiner reads every element's result). Returns the sources, the total,
    and the element values each run of the total read."""
    sources = [space.cell(f"s{i}") for i in range(n)]
    elements = [space.cell(f"e{i}") for i in range(n)]
    total = space.cell("total")
    for s, e in zip(sources, elements, strict=True):
        s.set(1)
        sch.derive(e, [s], lambda v: 10 * v, label="element")
    seen: list[Any] = []

    def add(*values: int) -> int:
        seen.append(values)
        return sum(values)

    sch.derive(total, elements, add, label="total")
    return sources, total, seen


def test_a_pull_after_edits_made_while_undemanded_runs_only_what_they_changed() -> None:
    space, sch = _world()
    sources, total, seen = _combined(space, sch, 50)
    assert 500 == sch.pull_now(total)
    for edits in ([3], [7, 40], [3, 7, 3]):
        for i in edits:
            sources[i].set(sources[i].get() + 1)
        sch.settle()  # nothing demands them: nothing runs
        stats = sch.statistics()
        expected = sum(10 * s.get() for s in sources)
        assert expected == sch.pull_now(total)
        after = sch.statistics()
        # Each edited element once, then the total once, reading the new values.
        assert len(set(edits)) + 1 == after["runs_computation"] - stats["runs_computation"]
        assert expected == sum(seen[-1])
        # Nothing was made live and dormant again (that was O(n) per pull).
        assert stats["liveness_writes"] == after["liveness_writes"]
        assert not any(n.is_live for n in sch.graph.nodes) and not sch.graph.pulled
        sch._check()
        assert expected == asyncio.run(sch.pull(total))  # nothing changed: nothing runs
        assert after["runs"] == sch.stats.runs
    sch.close()


def test_a_pull_holds_a_node_a_live_run_makes_stale_before_what_reads_it_runs() -> None:
    # src1 -> live (a sink keeps it live) -> mid (dormant) -> top (dormant), top also
    # reading src2. Both sources change before the pull: only `top` is known stale when
    # the pull starts; `live` runs first in its settle and makes `mid` stale, which `top`
    # reads: the pull holds `mid` then, and it runs before `top`. So `top` runs once, on
    # the new values (without it: once on mid's old value, then again).
    space, sch = _world()
    src1, src2, live, mid, top = (space.cell(n) for n in ("src1", "src2", "live", "mid", "top"))
    src1.set(1)
    src2.set(1)
    sch.derive(live, [src1], lambda v: v + 1, label="live")
    sch.derive(mid, [live], lambda v: 10 * v, label="mid")
    seen: list[tuple[int, int]] = []

    def add(x: int, y: int) -> int:
        seen.append((x, y))
        return x + y

    top_node = sch.derive(top, [mid, src2], add, label="top")
    shown: list[Any] = []
    cancel = sch.sink(live, shown.append)
    assert 21 == sch.pull_now(top)
    src1.set(2)
    src2.set(5)  # (no settle: `live` is stale and live, `top` stale and dormant)
    runs = top_node.runs
    assert 35 == sch.pull_now(top)
    assert [(20, 1), (30, 5)] == seen
    assert runs + 1 == top_node.runs
    assert [2, 3] == shown
    assert not sch.graph.pulled
    sch._check()
    cancel()
    sch.close()


def test_a_held_node_whose_run_reads_a_stale_input_it_did_not_read_before_waits_for_it() -> None:
    # `pick` reads `flag`, and `far` only when the flag is set; `far` (of `deep`) is stale
    # and dormant, and `pick` had no edge from it. The pull holds `pick`; its run reads
    # `far` for the first time: the pull then holds `far` too and settles again, so what
    # it returns is `far`'s new value, not the one it had before `deep` changed.
    space, sch = _world()
    flag, deep, far, out = (space.cell(n) for n in ("flag", "deep", "far", "out"))
    flag.set(False)
    deep.set(1)
    sch.derive(far, [deep], lambda v: 100 * v, label="far")
    assert 100 == sch.pull_now(far)

    def pick(tx: Transaction) -> None:
        on = read_value(tx, flag.link())
        tx.write(out.doc_key, ("value",), read_value(tx, far.link()) if on else 0)

    sch.register(pick, identity=space.identity, outputs=[(out.doc_key, ("value",))])
    assert 0 == sch.pull_now(out)
    deep.set(2)
    flag.set(True)
    assert 200 == sch.pull_now(out)
    assert 200 == sch.pull_now(out)
    sch._check()
    sch.close()


def test_a_node_gone_dormant_before_it_ran_runs_at_the_next_pull() -> None:
    # A sink keeps `b` live; `a` changes and the sink is cancelled before any settle:
    # `b` is dormant and stale, and `c` (clean) reads it. A pull of `c` runs both.
    space, sch = _world()
    a, b, c = space.cell("a"), space.cell("b"), space.cell("c")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    sch.derive(c, [b], lambda v: 10 * v, label="c")
    assert 20 == sch.pull_now(c)
    cancel = sch.sink(b, lambda v: None)
    a.set(4)
    cancel()
    sch._check()
    runs = sch.stats.runs_computation
    assert 50 == sch.pull_now(c)
    assert runs + 2 == sch.stats.runs_computation
    sch._check()
    sch.close()


def test_a_value_observed_for_a_while_then_edited_while_undemanded_is_current_at_a_pull() -> None:
    # `b` and `x` were registered dormant (filed as never run), then a sink on `x` made
    # them live (they leave the filed table: the pass keeps live nodes current) and
    # dormant again. An edit of `a` then makes `b` stale while dormant: it is filed anew,
    # with `x` (clean, reading it) after it, so a pull of `x` runs both.
    space, sch = _world()
    a, b, x = space.cell("a"), space.cell("b"), space.cell("x")
    a.set(1)
    sch.derive(b, [a], lambda v: v + 1, label="b")
    sch.derive(x, [b], lambda v: 10 * v, label="x")
    shown: list[Any] = []
    cancel = sch.sink(x, shown.append)
    cancel()
    assert [20] == shown and not any(n.is_live for n in sch.graph.nodes)
    a.set(2)
    sch.settle()
    runs = sch.stats.runs_computation
    assert 30 == sch.pull_now(x)
    assert runs + 2 == sch.stats.runs_computation
    sch._check()
    sch.close()


def _count_readers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many read transactions pulls open from now on (`Replica.reader` calls)."""
    from cells import Replica

    made = [0]
    reader = Replica.reader

    def counted(self: Replica, identity: Identity) -> Any:
        made[0] += 1
        return reader(self, identity)

    monkeypatch.setattr(Replica, "reader", counted)
    return made


def test_a_pull_whose_links_did_not_move_reads_the_place_without_a_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # board -> card a -> label a, a derived cell: a change of y reruns label a only.
    # The documents the links sit in keep their values, so the pull's walk still
    # describes the read: the value at its end is read directly.
    space, sch = _world()
    _, y, pulled = _chooser(space, sch)
    assert 10 == sch.pull_now(pulled)
    made = _count_readers(monkeypatch)
    y.set(2)
    assert 20 == sch.pull_now(pulled)
    y.set(3)
    assert 30 == asyncio.run(sch.pull(pulled))
    assert made == [0]
    # The whole card holds a link: it is read (and the link followed) in full.
    card = space.cell("card_a")
    assert {"label": 30} == sch.pull_now(card)
    assert made[0] > 0
    sch._check()
    sch.close()


def test_a_pull_follows_a_link_its_settle_wrote_inside_the_pulled_document() -> None:
    # The pulled place is card/info/n, with no link on the way when the pull starts;
    # the settle rewrites card so that info is a link to `other`. The pull must follow
    # it (to 7), not read the path through the new link as absent.
    space, sch = _world()
    x, other, card = space.cell("x"), space.cell("other"), space.cell("card")
    x.set(1)
    other.set({"n": 7})
    sch.derive(
        card, [x], lambda v: {"info": {"n": v}} if v == 1 else {"info": other.link()}, label="card"
    )
    pulled = card.key("info", "n")
    assert 1 == sch.pull_now(pulled)
    x.set(2)
    assert 7 == sch.pull_now(pulled)
    x.set(1)
    assert 1 == asyncio.run(sch.pull(pulled))
    sch._check()
    sch.close()


def test_a_pull_follows_a_link_its_settle_wrote_at_the_pulled_place() -> None:
    space, sch = _world()
    x, other, out = space.cell("x"), space.cell("other"), space.cell("out")
    x.set(1)
    other.set(99)
    sch.derive(out, [x], lambda v: 5 if v == 1 else other.link(), label="out")
    assert 5 == sch.pull_now(out)
    x.set(2)
    assert 99 == sch.pull_now(out)
    sch._check()
    sch.close()


def test_a_pull_reads_a_held_value_again_when_a_writer_was_added_during_its_settle() -> None:
    # As above, but the pulled cell holds a value already (written directly, no link on
    # the way): the walk still describes the read, yet the writer added meanwhile must
    # run first. Read at once, the pull would return the old value 1.
    space, sch = _world()
    x, out = space.cell("x"), space.cell("out")
    x.set(1)
    out.set(1)
    added: list[object] = []

    def on_x(value: object) -> None:
        if value == 2 and not added:
            added.append(sch.derive(out, [x], lambda v: v * 7, label="seven"))

    cancel = sch.sink(x, on_x)
    x.set(2)
    assert 14 == sch.pull_now(out)
    cancel()
    sch._check()
    sch.close()


def test_the_stale_table_is_replaced_once_every_filed_node_went_live() -> None:
    # 500 nodes registered dormant are filed for pulls; a sink on each makes it live and
    # unfiles it. The emptied table is a new dict: one emptied in place keeps the size it
    # grew to (about 37 bytes per node that was ever filed).
    import sys

    space, sch = _world()
    src = space.cell("src")
    src.set(1)
    outs = [space.cell(f"o{i}") for i in range(500)]
    for i, out in enumerate(outs):
        sch.derive(out, [src], lambda v: v + 1, label=f"o{i}")
    assert len(sch.graph.suspect) == 500
    cancels = [sch.sink(out, lambda v: None) for out in outs]
    sch.settle()
    assert sch.graph.suspect == {}
    assert sys.getsizeof(sch.graph.suspect) == sys.getsizeof({})
    for cancel in cancels:
        cancel()


def test_the_writers_a_pull_holds_are_those_of_its_read_log_compacted() -> None:
    # `Graph.writers_along` (a pull's walk, each document read at one place) against
    # `writers_feeding` of the compacted log, over every log of up to two places drawn
    # from documents with one writer, with several (spots, the instance rule), with
    # none, and a writer whose output in another document overlaps the place read.
    from itertools import product

    from cells import DocKey
    from scheduler._readers import compact_reads

    _space, sch = _world()
    alice, bob = Identity("alice", "s1"), Identity("bob", "s1")
    a, b, c, e, none = (DocKey("sp", x) for x in ("a", "b", "c", "e", "none"))

    def writer(identity: Identity, *outputs: tuple[DocKey, tuple[str, ...]]) -> None:
        sch.register(lambda tx: None, identity=identity, outputs=outputs)

    writer(alice, (a, ("value", "x")), (e, ("value", "y")))  # a's and e's only writer
    writer(alice, (b, ("value",)))
    writer(alice, (b, ("value", "q")))
    writer(bob, (b, ("value", "q")))  # b: several writers, by spot
    writer(bob, (c, ("value", "y", "z")))
    places = [
        (key, path, shallow)
        for key in (a, b, c, e, none)
        for path in (("value",), ("value", "x"), ("value", "y"), ("value", "y", "z", "w"))
        for shallow in (False, True)
    ]
    logs = [[p] for p in places] + [list(pair) for pair in product(places, repeat=2)]
    for log in logs:
        for identity in (alice, bob):
            expected = sch.graph.writers_feeding(compact_reads(log), identity)
            assert expected == sch.graph.writers_along(log, identity), (log, identity)
    sch._check()
    sch.close()


def test_the_writers_along_a_long_walk_cost_one_key_comparison_per_document() -> None:
    # A pull of a whole mapped list logs one place per element's document: checking that
    # no document repeats must not compare each key with every key before it (a list of
    # the keys seen: 5,000 elements made a restart's pull 7x slower, quadratic in N).
    compared = [0]

    class Key:
        """A document key that counts its comparisons (hashed like one)."""

        def __init__(self, i: int) -> None:
            self.i = i

        def __eq__(self, other: object) -> bool:
            compared[0] += 1
            return isinstance(other, Key) and other.i == self.i

        def __hash__(self) -> int:
            return hash(self.i)

    _space, sch = _world()
    n = 2_000
    log: Any = [(Key(i), ("value",), False) for i in range(n)]
    assert set() == sch.graph.writers_along(log, Identity("alice", "s1"))
    assert compared[0] <= n
    sch.close()


def test_a_pull_on_a_running_loop_queues_nothing_on_the_loop() -> None:
    # The pull settles at once: it asks the loop for no pass for the nodes it holds, and
    # the store's verdicts for the runs its settle sends are pumped by that settle, with
    # no drain queued on the loop for them (each cost an asyncio handle and a loop turn,
    # found nothing to do). Through links (the walk's own read) and at a plain cell.
    space, sch = _world()
    _, y, pulled = _chooser(space, sch)
    plain = space.cell("plain")
    sch.derive(plain, [y], lambda v: v + 1, label="plain")

    async def main() -> list[tuple[Any, int, int]]:
        loop = asyncio.get_running_loop()
        call_soon = loop.call_soon
        queued: list[object] = []

        def counted(*args: Any, **kwargs: Any) -> Any:
            queued.append(args)
            return call_soon(*args, **kwargs)

        seen: list[tuple[Any, int, int]] = []
        assert 10 == await sch.pull(pulled)  # (the mailbox is on this loop from now on)
        for value in (2, 3):
            y.set(value)
            await asyncio.sleep(0)  # (the edit's own verdict, drained on the loop)
            queued.clear()
            loop.call_soon = counted  # type: ignore[method-assign,assignment]
            try:
                runs = sch.stats.runs
                got = await sch.pull(pulled), await sch.pull(plain)
            finally:
                del loop.call_soon
            seen.append((got, len(queued), sch.stats.runs - runs))
        return seen

    assert [((20, 3), 0, 2), ((30, 4), 0, 2)] == asyncio.run(main())
    sch._check()
    sch.close()


def test_a_pull_that_starts_with_nothing_stale_holds_a_writer_its_settle_makes_stale() -> None:
    # Nothing is filed stale when the pull starts, so it looks for no writers then; a
    # live sink's delivery in its settle writes the input of the pulled value's dormant
    # writer. The pull must find that writer then, hold it and settle again: read at
    # once, it would return the old value 10.
    space, sch = _world()
    s, a, b = space.cell("s"), space.cell("a"), space.cell("b")
    s.set(0)
    a.set(1)
    b_node = sch.derive(b, [a], lambda v: 10 * v, label="b")
    assert 10 == sch.pull_now(b)

    def on_s(value: Any) -> None:
        if value:
            a.set(value)

    cancel = sch.sink(s, on_s)
    s.set(3)  # (no settle: the sink is stale and live, `b` clean and dormant)
    assert {} == sch.graph.suspect
    runs = b_node.runs
    assert 30 == sch.pull_now(b)
    assert runs + 1 == b_node.runs
    s.set(4)
    assert 40 == asyncio.run(sch.pull(b))
    assert not sch.graph.pulled
    sch._check()
    cancel()
    sch.close()

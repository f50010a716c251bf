"""What one run of a lift must keep, whichever way it runs (`runner._instantiate._Lift`).

A lift's run reads its bound inputs (links followed), calls the function and writes
its output; a run that returns a pattern instance (alone, or inside a list or dict)
launches children instead, and a later plain return lets them go. A run whose inputs
moved under it must not land. The reuse book must hear what every run wrote, so that a
restart after an edit still runs nothing. Each of these is a reason a run may not take
a shortcut (a transaction-free path, or a skipped check in `_put`): each test here pins
one of them.

Most lifts here read another lift's output (`same`): a plain value in a document of
its own, so after its first run the lift may run with no transaction
(`_instantiate._DirectLift`, `scheduler.ValueFunction`); a lift over the pattern's
argument (`same` itself) reads through the argument document's link (a link hop) and
may run so too. The tests say which runs took that path (`direct_commits`).
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import reuse_defs
from pattern_defs import Child
from support import arun
from typed_defs import Clicker

import cells
from cells import MISSING, MemoryStore
from runner import Runtime, lift, pattern
from runner import _docs as docs
from scheduler import NodeError

CALLS: collections.Counter[Any] = collections.Counter()


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()
    reuse_defs.CALLS.clear()


def child_or_value(v: Any) -> Any:
    """A child while `v` is positive, the value itself otherwise."""
    CALLS[("child_or_value", v)] += 1
    return Child(value=v) if isinstance(v, int) and v > 0 else v


def children_or_value(v: Any) -> Any:
    """A list of two children while `v` is positive, the value itself otherwise."""
    CALLS[("children_or_value", v)] += 1
    return [Child(value=v), {"second": Child(value=v + 1)}] if v > 0 else v


def described(v: Any) -> Any:
    """The input as the function saw it; it mutates a container it was handed."""
    CALLS[("described", repr(v))] += 1
    if isinstance(v, dict):
        v.setdefault("seen", []).append(1)  # the function's own copy: never stored
        return {"kind": "dict", "keys": sorted(v)}
    return v if v is None else v * 10


def same(v: Any) -> Any:
    return v


def doubled(v: Any) -> Any:
    CALLS[("doubled", v)] += 1
    return None if v is None else v * 2


@pattern
def OneOrChild(value):  # type: ignore[no-untyped-def]
    return {"out": lift(child_or_value)(lift(same)(value))}


@pattern
def ManyOrValue(value):  # type: ignore[no-untyped-def]
    return {"out": lift(children_or_value)(lift(same)(value))}


@pattern
def Described(value):  # type: ignore[no-untyped-def]
    return {"out": lift(described)(value)}


@pattern
def DescribedAfter(value):  # type: ignore[no-untyped-def]
    return {"out": lift(described)(lift(same)(value))}


@pattern
def Chain(value):  # type: ignore[no-untyped-def]
    return {"out": lift(doubled)(lift(same)(value))}


async def _run(rt: Runtime, pat: Any, value: Any) -> tuple[Any, Any]:
    source, res = rt.get_cell("value"), rt.get_cell("res")
    async with rt.edit() as tx:
        source.with_tx(tx).set(value)
        rt.run(tx, pat, {"value": source}, res)
    return source, res


def _output_doc(rt: Runtime, res: Any, index: int = 0) -> Any:
    """The document node `index` of the run (a lift) writes."""
    return rt.replica.visible(docs.internal_link(res.link(), index).key(rt.identity))


def _direct(rt: Runtime) -> int:
    return rt.scheduler.stats.direct_commits


def test_a_lift_over_a_lift_s_output_runs_with_no_transaction_after_its_first_run() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, Chain, 1)
            assert 2 == await res.key("out").pull()
            for v in (2, 3, 4):
                direct = _direct(rt)
                await source.set(v)
                assert 2 * v == await res.key("out").pull()
                assert 2 == _direct(rt) - direct  # `same`'s (through a link hop), `doubled`'s
            assert {("doubled", v): 1 for v in (1, 2, 3, 4)} == dict(CALLS)
            await rt.idle()
            out = docs.internal_link(res.link(), 1).key(rt.identity)
            assert 8 == rt.replica.store.read_durable(out)["value"]

    arun(main)


def test_a_lift_that_stops_returning_a_pattern_lets_its_child_go_and_writes_the_value() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, OneOrChild, 0)
            assert 0 == await res.key("out").pull()
            assert 1 == len(rt.registrations())
            await source.set(-5)
            assert -5 == await res.key("out").pull()
            direct = _direct(rt)
            await source.set(4)  # a direct run's result is a pattern instance
            assert {"doubled": 8} == await res.key("out").pull()
            assert 2 == len(rt.registrations())  # the child the lift launched
            assert 1 == _direct(rt) - direct  # `same`'s only: the instance by a transaction
            await source.set(-1)
            assert -1 == await res.key("out").pull()
            assert 1 == len(rt.registrations())  # let go
            assert docs.PATTERN not in _output_doc(rt, res, 1)
            direct = _direct(rt)
            await source.set(-2)  # a plain run after a plain run
            assert -2 == await res.key("out").pull()
            assert 1 == len(rt.registrations())
            assert 1 == _direct(rt) - direct  # `same`'s (it launched a child once: never)

    arun(main)


def test_a_lift_that_returned_children_in_a_list_lets_them_go_when_it_returns_a_scalar() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, ManyOrValue, 0)
            assert 0 == await res.key("out").pull()
            await source.set(-1)
            assert -1 == await res.key("out").pull()
            direct = _direct(rt)
            await source.set(3)  # a direct run's result holds children
            assert [{"doubled": 6}, {"second": {"doubled": 8}}] == await res.key("out").pull()
            assert 3 == len(rt.registrations())
            assert 1 == _direct(rt) - direct  # `same`'s only
            await source.set(0)  # a scalar: no child in it, and both must go
            assert 0 == await res.key("out").pull()
            assert 1 == len(rt.registrations())
            await source.set(5)
            assert [{"doubled": 10}, {"second": {"doubled": 12}}] == await res.key("out").pull()
            assert 3 == len(rt.registrations())

    arun(main)


def test_a_lift_follows_a_link_that_appears_at_its_input_and_leaves_it_when_it_goes() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            target = rt.get_cell("target")
            await target.set(40)
            source, res = await _run(rt, Described, 1)
            assert 10 == await res.key("out").pull()
            await source.set(target.link())
            assert 400 == await res.key("out").pull()
            await target.set(50)  # read through the link now: the lift must hear it
            assert 500 == await res.key("out").pull()
            await source.set(3)  # plain again
            assert 30 == await res.key("out").pull()
            calls = sum(CALLS.values())
            await target.set(60)  # no longer read: nothing runs
            assert 30 == await res.key("out").pull()
            assert calls == sum(CALLS.values())

    arun(main)


@pytest.mark.parametrize("pat", [Described, DescribedAfter])
def test_a_lift_whose_input_becomes_a_container_gets_its_own_copy_of_it(pat: Any) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, pat, 2)
            assert 20 == await res.key("out").pull()
            await source.set({"a": 1, "b": [1, 2]})
            assert {"kind": "dict", "keys": ["a", "b", "seen"]} == await res.key("out").pull()
            assert {"a": 1, "b": [1, 2]} == await source.pull()  # the copy was mutated
            await source.set(None)
            assert None is await res.key("out").pull()
            await source.set(7)
            assert 70 == await res.key("out").pull()

    arun(main)


def _writes_7_on_2(store: MemoryStore, where: list[Any], name: str) -> Any:
    """A lift function (`v * 10`) that, called with 2, has another replica write 7 at
    the document `where[0]` names, while it runs."""
    other = cells.Space(cells.Replica(store), "t")

    def fn(v: Any) -> Any:
        CALLS[(name, v)] += 1
        if v == 2:
            tx = other.edit()
            tx.write(where[0], ("value",), 7)
            tx.commit()
        return v * 10

    return fn


@pytest.mark.parametrize("direct", [False, True])
def test_a_lift_whose_input_another_replica_moves_while_it_computes_runs_again(
    direct: bool,
) -> None:
    # Another replica writes the lift's input while the function runs: the value it
    # computed is from a state that is gone, so it must not land, and the lift runs
    # again on the foreign value. Both run with no transaction: `direct`, the input is
    # `same`'s output (the foreign write goes there); else the pattern's argument, read
    # through the argument document's link (the foreign write goes to the source cell,
    # the place past the hop).
    store = MemoryStore()
    where: list[Any] = []
    racing = _writes_7_on_2(store, where, "racing")

    @pattern
    def Racing(value):  # type: ignore[no-untyped-def]
        return {"out": lift(racing)(lift(same)(value) if direct else value)}

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            source, res = await _run(rt, Racing, 0)
            moved = docs.internal_link(res.link(), 0).key(rt.identity) if direct else None
            where.append(moved or source.doc_key)
            await source.set(1)
            assert 10 == await res.key("out").pull()
            ran, stale = _direct(rt), rt.scheduler.stats.stale_reruns
            await source.set(2)
            assert 70 == await res.key("out").pull()
            assert 1 <= rt.scheduler.stats.stale_reruns - stale
            assert _direct(rt) > ran
            # (It may run on 2 again before the foreign commit reaches this replica.)
            assert 1 <= CALLS[("racing", 2)]
            assert 1 == CALLS[("racing", 7)]
            await rt.idle()
            out_key = docs.internal_link(res.link(), 1 if direct else 0).key(rt.identity)
            assert 70 == store.read_durable(out_key)["value"]

    arun(main)


@pytest.mark.parametrize("direct", [False, True])
def test_a_lift_overtaken_before_its_commit_reaches_the_store_is_rejected_and_reruns(
    direct: bool,
) -> None:
    # `plus` runs first in the drain, on x (3) and w; `racer`, later in the same drain,
    # has another replica write 7 at x's place before the drain's commits reach the
    # store. The store must reject `plus`'s commit (its basis is gone), and `plus` run
    # again on 7: a stale re-run, not only a re-run on the foreign change. `direct`: x
    # and w reach `plus` through `same`, so `plus` and `racer` run with no transaction.
    store = MemoryStore()
    where: list[Any] = []
    racer = _writes_7_on_2(store, where, "racer")

    def plus(v: Any, w: Any) -> Any:
        CALLS[("plus", v, w)] += 1
        return v + w

    def over(ref: Any) -> Any:
        return lift(same)(ref) if direct else ref

    @pattern
    def Pair(x, w, y):  # type: ignore[no-untyped-def]
        return {"a": lift(plus)(over(x), over(w)), "b": lift(racer)(over(y))}

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            x, w, y = rt.get_cell("x"), rt.get_cell("w"), rt.get_cell("y")
            res = rt.get_cell("res")
            async with rt.edit() as tx:
                x.with_tx(tx).set(3)
                w.with_tx(tx).set(0)
                y.with_tx(tx).set(0)
                rt.run(tx, Pair, {"x": x, "w": w, "y": y}, res)
            x_place = docs.internal_link(res.link(), 0).key(rt.identity) if direct else None
            where.append(x_place or x.doc_key)
            assert {"a": 3, "b": 0} == await res.pull()
            async with rt.edit() as tx:
                w.with_tx(tx).set(100)
                y.with_tx(tx).set(1)
            assert {"a": 103, "b": 10} == await res.pull()
            ran, stale = _direct(rt), rt.scheduler.stats.stale_reruns
            async with rt.edit() as tx:
                w.with_tx(tx).set(200)
                y.with_tx(tx).set(2)
            assert {"a": 207, "b": 20} == await res.pull()
            assert (2 if direct else 0) <= _direct(rt) - ran  # `plus` and `racer`
            assert 1 <= rt.scheduler.stats.stale_reruns - stale
            assert 1 == CALLS[("plus", 3, 200)]
            assert 1 == CALLS[("plus", 7, 200)]
            await rt.idle()
            out_key = docs.internal_link(res.link(), 2 if direct else 0).key(rt.identity)
            assert 207 == store.read_durable(out_key)["value"]

    arun(main)


@pytest.mark.parametrize("twice", [False, True])
def test_a_restart_after_an_edit_runs_no_lift_of_a_scalar(twice: bool) -> None:
    # Each run tells the reuse book what it wrote: the runtime that edited records the
    # edited output when it closes, so the next runtime calls nothing, and one that
    # edits again after a reused start records again.
    # `DoubledTwice`'s second lift reads the first's output: its runs after the first
    # are direct, and only `wrote` tells the book what they wrote.
    store = MemoryStore()
    pat, field, k = (
        (reuse_defs.DoubledTwice, "twice", 4) if twice else (reuse_defs.Doubled, "doubled", 2)
    )

    async def first() -> None:
        async with Runtime(store, space="t") as rt:
            source, res = await _run(rt, pat, 1)
            assert k == await res.key(field).pull()
            await source.set(5)
            assert 5 * k == await res.key(field).pull()
            await source.set(7)
            assert 7 * k == await res.key(field).pull()
            assert (4 if twice else 2) == _direct(rt)  # (the first lift's through a hop)

    async def again(edit_to: Any) -> Any:
        async with Runtime(store, space="t") as rt:
            res = rt.get_cell("res")
            await rt.start(res)
            got = await res.key(field).pull()
            if edit_to is not None:
                await rt.get_cell("value").set(edit_to)
                got = await res.key(field).pull()
                await rt.get_cell("value").set(edit_to + 1)
                got = await res.key(field).pull()
            return got

    arun(first)
    reuse_defs.CALLS.clear()
    assert 7 * k == arun(lambda: again(None))
    assert {} == dict(reuse_defs.CALLS)
    assert 9 * k == arun(lambda: again(8))  # reused first, then runs on two edits
    assert (4 if twice else 2) == sum(reuse_defs.CALLS.values())
    reuse_defs.CALLS.clear()
    assert 9 * k == arun(lambda: again(None))
    assert {} == dict(reuse_defs.CALLS)


def test_a_lift_writes_missing_as_absent() -> None:
    # `MISSING` returned by a function deletes the value (not a scalar the fast write
    # stores as it is).
    def gone(v: Any) -> Any:
        return MISSING if v == 0 else v

    @pattern
    def Gone(value):  # type: ignore[no-untyped-def]
        return {"out": lift(gone)(value)}

    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, Gone, 3)
            assert 3 == await res.key("out").pull()
            await source.set(0)
            assert MISSING is await res.key("out").pull()
            assert "value" not in _output_doc(rt, res)

    arun(main)


async def later_doubled(v: Any) -> Any:
    CALLS[("later_doubled", v)] += 1
    return None if v is None else v * 2


@pattern
def LaterChain(value):  # type: ignore[no-untyped-def]
    return {"out": lift(later_doubled)(lift(same)(value))}


def test_an_async_lift_over_a_lift_s_output_never_runs_directly() -> None:
    # Its value comes when its coroutine ends, committed by the transaction that holds
    # what it read: a direct run would have nothing to write.
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, LaterChain, 1)
            assert 2 == await res.key("out").pull()
            direct = _direct(rt)
            for v in (2, 3):
                await source.set(v)
                assert 2 * v == await res.key("out").pull()
            assert 2 == _direct(rt) - direct  # `same`'s (through a link hop) only
            assert {("later_doubled", v): 1 for v in (1, 2, 3)} == dict(CALLS)

    arun(main)


def test_a_plain_run_after_a_raising_first_run_lets_go_of_a_child_an_earlier_process_left() -> None:
    # A lift that may run directly, whose output document holds the pattern field of a
    # child an earlier runtime launched: its first run here raises, so nothing checked
    # that field yet. The run after it (on a plain value) must still see the field and
    # let the child go, which only a transaction run does (`_put`): a node that failed
    # never runs directly again.
    store = MemoryStore()

    async def first() -> None:
        async with Runtime(store, space="t") as rt:
            _source, res = await _run(rt, reuse_defs.LaunchAfter, 4)
            assert {"doubled": 8} == await res.key("child").pull()
            assert docs.PATTERN in _output_doc(rt, res, 1)

    async def between() -> None:
        async with Runtime(store, space="t") as rt:
            value = rt.get_cell("value")
            await value.pull()
            await value.set("boom")

    async def second() -> None:
        async with Runtime(store, space="t") as rt:
            res = rt.get_cell("res")
            await rt.start(res)
            with pytest.raises(NodeError):
                await res.key("child").pull()
            await rt.get_cell("value").set(-3)
            assert -3 == await res.key("child").pull()
            assert docs.PATTERN not in _output_doc(rt, res, 1)
            assert {rt.key(res)} == set(rt.registrations())

    arun(first)
    arun(between)
    arun(second)


def test_a_lift_over_a_state_cell_runs_directly_when_a_handler_changes_it() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("c")
            async with rt.edit() as tx:
                rt.run(tx, Clicker, {}, res)
            assert 0 == await res.key("doubled").pull()
            await rt.send(res.key("bump"), {"by": 1})
            assert 2 == await res.key("doubled").pull()
            direct = _direct(rt)
            await rt.send(res.key("bump"), {"by": 4})
            assert 10 == await res.key("doubled").pull()
            assert 1 == _direct(rt) - direct

    arun(main)


def pair_of(v: Any) -> Any:
    return {"a": v, "b": (v or 0) + 1}


def added(a: Any, b: Any) -> Any:
    CALLS[("added", a, b)] += 1
    return a + b


@pattern
def Fields(value):  # type: ignore[no-untyped-def]
    pair = lift(pair_of)(value)
    return {"out": lift(added)(pair["a"], pair["b"])}


def test_a_lift_over_two_fields_of_one_lift_s_output_runs_directly() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, Fields, 1)
            assert 3 == await res.key("out").pull()
            direct = _direct(rt)
            for v in (2, 5):
                await source.set(v)
                assert 2 * v + 1 == await res.key("out").pull()
            assert 2 == _direct(rt) - direct  # `added`: `pair_of` writes a dict
            assert {("added", 1, 2): 1, ("added", 2, 3): 1, ("added", 5, 6): 1} == dict(CALLS)

    arun(main)


def titled(title: Any, suffix: Any) -> Any:
    CALLS[("titled", title)] += 1
    return f"{title}{suffix}"


@pattern
def TitleCard(element):  # type: ignore[no-untyped-def]
    return {"t": lift(titled)(element["title"], "!")}


@pattern
def TitleBoard(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(TitleCard)}


@pytest.mark.parametrize("inline", [False, True])
def test_a_card_s_lift_runs_directly_through_its_element_and_follows_it(inline: bool) -> None:
    # The card's lift reads its element through the map child's argument link (and, for
    # inline elements, an element-id step): direct after its first run. An element
    # replaced by another (links: re-pointed) or moved by an insert is followed.
    async def main() -> None:
        async with Runtime() as rt:
            items, res = rt.get_cell("items"), rt.get_cell("res")
            tasks = [rt.get_cell(("task", i)) for i in range(3)]
            async with rt.edit() as tx:
                for i, c in enumerate(tasks):
                    c.with_tx(tx).set({"title": f"t{i}"})
                value = (
                    [{"title": f"t{i}"} for i in range(3)] if inline else [c.link() for c in tasks]
                )
                items.with_tx(tx).set(value)
                rt.run(tx, TitleBoard, {"items": items}, res)
            assert [{"t": f"t{i}!"} for i in range(3)] == await res.key("out").pull()

            def title(i: int) -> Any:
                return items.key(i, "title") if inline else tasks[i].key("title")

            direct = _direct(rt)
            await title(1).set("a")
            assert {"t": "a!"} == await res.key("out").key(1).pull()
            assert 1 == _direct(rt) - direct
            if inline:
                await items.insert(0, {"title": "new"})  # element 1 moves to position 2
                assert {"t": "a!"} == await res.key("out").key(2).pull()
                direct = _direct(rt)
                await items.key(2, "title").set("b")
                assert {"t": "b!"} == await res.key("out").key(2).pull()
                assert 1 == _direct(rt) - direct
            else:
                await items.key(1).set(tasks[2].link())  # element 1 is task 2 now
                assert {"t": "t2!"} == await res.key("out").key(1).pull()
                calls = sum(CALLS.values())
                await tasks[1].key("title").set("gone")  # no longer an element
                assert {"t": "t2!"} == await res.key("out").key(1).pull()
                assert calls == sum(CALLS.values())
                direct = _direct(rt)
                await tasks[2].key("title").set("b")  # both elements show task 2
                assert [{"t": "t0!"}, {"t": "b!"}, {"t": "b!"}] == await res.key("out").pull()
                assert 2 == _direct(rt) - direct

    arun(main)

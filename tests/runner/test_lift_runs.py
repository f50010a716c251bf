"""What one run of a lift must keep, whichever way it runs (`runner._instantiate._Lift`).

A lift's run reads its bound inputs (links followed), calls the function and writes
its output; a run that returns a pattern instance (alone, or inside a list or dict)
launches children instead, and a later plain return lets them go. A run whose inputs
moved under it must not land. The reuse book must hear what every run wrote, so that a
restart after an edit still runs nothing. Each of these is a reason a run may not take
a shortcut (a transaction-free path, or a skipped check in `_put`): each test here pins
one of them.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import reuse_defs
from pattern_defs import Child
from support import arun

import cells
from cells import MISSING, MemoryStore
from runner import Runtime, lift, pattern
from runner import _docs as docs

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


@pattern
def OneOrChild(value):  # type: ignore[no-untyped-def]
    return {"out": lift(child_or_value)(value)}


@pattern
def ManyOrValue(value):  # type: ignore[no-untyped-def]
    return {"out": lift(children_or_value)(value)}


@pattern
def Described(value):  # type: ignore[no-untyped-def]
    return {"out": lift(described)(value)}


async def _run(rt: Runtime, pat: Any, value: Any) -> tuple[Any, Any]:
    source, res = rt.get_cell("value"), rt.get_cell("res")
    async with rt.edit() as tx:
        source.with_tx(tx).set(value)
        rt.run(tx, pat, {"value": source}, res)
    return source, res


def _output_doc(rt: Runtime, res: Any) -> Any:
    """The document the run's first node (its lift) writes."""
    return rt.replica.visible(docs.internal_link(res.link(), 0).key(rt.identity))


def test_a_lift_that_stops_returning_a_pattern_lets_its_child_go_and_writes_the_value() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, OneOrChild, 0)
            assert 0 == await res.key("out").pull()
            assert 1 == len(rt.registrations())
            await source.set(4)
            assert {"doubled": 8} == await res.key("out").pull()
            assert 2 == len(rt.registrations())  # the child the lift launched
            await source.set(-1)
            assert -1 == await res.key("out").pull()
            assert 1 == len(rt.registrations())  # let go
            assert docs.PATTERN not in _output_doc(rt, res)
            await source.set(-2)  # a plain run after a plain run
            assert -2 == await res.key("out").pull()
            assert 1 == len(rt.registrations())

    arun(main)


def test_a_lift_that_returned_children_in_a_list_lets_them_go_when_it_returns_a_scalar() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, ManyOrValue, 3)
            assert [{"doubled": 6}, {"second": {"doubled": 8}}] == await res.key("out").pull()
            assert 3 == len(rt.registrations())
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


def test_a_lift_whose_input_becomes_a_container_gets_its_own_copy_of_it() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            source, res = await _run(rt, Described, 2)
            assert 20 == await res.key("out").pull()
            await source.set({"a": 1, "b": [1, 2]})
            assert {"kind": "dict", "keys": ["a", "b", "seen"]} == await res.key("out").pull()
            assert {"a": 1, "b": [1, 2]} == await source.pull()  # the copy was mutated
            await source.set(None)
            assert None is await res.key("out").pull()
            await source.set(7)
            assert 70 == await res.key("out").pull()

    arun(main)


def test_a_lift_whose_input_another_replica_moves_while_it_computes_runs_again() -> None:
    # Another replica writes the lift's input while the function runs: the run's
    # commit was computed from a value that is gone, so it must not land, and the lift
    # runs again on the foreign value.
    store = MemoryStore()
    other = cells.Space(cells.Replica(store), "t")
    where: list[Any] = []

    def racing(v: Any) -> Any:
        CALLS[("racing", v)] += 1
        if v == 2:
            tx = other.edit()
            tx.write(where[0], ("value",), 7)
            tx.commit()
        return v * 10

    @pattern
    def Racing(value):  # type: ignore[no-untyped-def]
        return {"out": lift(racing)(value)}

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            where.append(rt.get_cell("value").doc_key)
            source, res = await _run(rt, Racing, 1)
            assert 10 == await res.key("out").pull()
            await source.set(2)
            assert 70 == await res.key("out").pull()
            assert 7 == await source.pull()
            assert {("racing", 1): 1, ("racing", 2): 1, ("racing", 7): 1} == dict(CALLS)
            await rt.idle()
            out_key = docs.internal_link(res.link(), 0).key(rt.identity)
            assert 70 == store.read_durable(out_key)["value"]

    arun(main)


def test_a_lift_overtaken_before_its_commit_reaches_the_store_is_rejected_and_reruns() -> None:
    # `plus` runs first in the drain and commits on `x` = 3; `racer`, later in the same
    # drain, has another replica write `x` = 7 before the drain's commits reach the
    # store. The store must reject `plus`'s commit (its basis is gone), and `plus` run
    # again on 7: a stale re-run, not only a re-run on the foreign change.
    store = MemoryStore()
    other = cells.Space(cells.Replica(store), "t")
    where: list[Any] = []

    def plus(v: Any) -> Any:
        CALLS[("plus", v)] += 1
        return v + 100

    def racer(v: Any) -> Any:
        CALLS[("racer", v)] += 1
        if v == 2:
            tx = other.edit()
            tx.write(where[0], ("value",), 7)
            tx.commit()
        return v * 10

    @pattern
    def Pair(x, y):  # type: ignore[no-untyped-def]
        return {"a": lift(plus)(x), "b": lift(racer)(y)}

    async def main() -> None:
        async with Runtime(store, space="t") as rt:
            x, y, res = rt.get_cell("x"), rt.get_cell("y"), rt.get_cell("res")
            where.append(x.doc_key)
            async with rt.edit() as tx:
                x.with_tx(tx).set(1)
                y.with_tx(tx).set(1)
                rt.run(tx, Pair, {"x": x, "y": y}, res)
            assert {"a": 101, "b": 10} == await res.pull()
            stale = rt.scheduler.stats.stale_reruns
            async with rt.edit() as tx:
                x.with_tx(tx).set(3)
                y.with_tx(tx).set(2)
            assert {"a": 107, "b": 20} == await res.pull()
            assert 1 <= rt.scheduler.stats.stale_reruns - stale
            assert 1 == CALLS[("plus", 3)]
            assert 1 == CALLS[("plus", 7)]
            await rt.idle()
            out_key = docs.internal_link(res.link(), 0).key(rt.identity)
            assert 107 == store.read_durable(out_key)["value"]

    arun(main)


def test_a_restart_after_an_edit_runs_no_lift_of_a_scalar() -> None:
    # Each run tells the reuse book what it wrote: the runtime that edited records the
    # edited output when it closes, so the next runtime calls nothing, and one that
    # edits again after a reused start records again.
    store = MemoryStore()

    async def first() -> None:
        async with Runtime(store, space="t") as rt:
            source, res = await _run(rt, reuse_defs.Doubled, 1)
            assert 2 == await res.key("doubled").pull()
            await source.set(5)
            assert 10 == await res.key("doubled").pull()

    async def again(edit_to: Any) -> Any:
        async with Runtime(store, space="t") as rt:
            res = rt.get_cell("res")
            await rt.start(res)
            got = await res.key("doubled").pull()
            if edit_to is not None:
                await rt.get_cell("value").set(edit_to)
                got = await res.key("doubled").pull()
            return got

    arun(first)
    assert {("doubled", 1): 1, ("doubled", 5): 1} == dict(reuse_defs.CALLS)
    reuse_defs.CALLS.clear()
    assert 10 == arun(lambda: again(None))
    assert {} == dict(reuse_defs.CALLS)
    assert 12 == arun(lambda: again(6))  # reused first, then a run on the edit
    assert {("doubled", 6): 1} == dict(reuse_defs.CALLS)
    reuse_defs.CALLS.clear()
    assert 12 == arun(lambda: again(None))
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

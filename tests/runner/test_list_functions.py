"""Plain functions as list ops (issue 18 item 4): `items.map(fn)`, `.filter(fn)`,
`.flat_map(fn)`.

One computation per element, keyed and released exactly as a pattern op's
children are, with no child run: the counts below are element computations
(`CALLS`), registrations (one: the list's own run) and scheduler nodes.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from pattern_defs import Double
from support import arun, coordinator, run_list

from cells import MemoryStore
from runner import PatternError, Runtime, lift, pattern
from scheduler import NodeError

CALLS: collections.Counter[str] = collections.Counter()


def double(v: Any) -> Any:
    CALLS["double"] += 1
    return None if v is None else v * 2


def is_even(v: Any) -> bool:
    CALLS["even"] += 1
    return isinstance(v, int) and v % 2 == 0


def repeat(v: Any) -> Any:
    CALLS["repeat"] += 1
    return [v] * v if isinstance(v, int) and v >= 0 else v


def at(v: Any, i: int) -> Any:
    CALLS["at"] += 1
    return [v, i]


def upper_title(note: Any) -> Any:
    CALLS["upper"] += 1
    return note["title"].upper()


def child_of(v: Any) -> Any:
    return Double(element=v)


@pattern
def FnAll(items):  # type: ignore[no-untyped-def]
    return {
        "doubled": items.map(double),
        "evens": items.filter(is_even),
        "repeated": items.flat_map(repeat),
    }


@pattern
def FnMapped(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(double)}


@pattern
def FnLambda(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(lambda v: None if v is None else v + 100)}


@pattern
def FnIndexed(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(at)}


@pattern
def FnTitles(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(upper_title)}


@pattern
def FnChild(items):  # type: ignore[no-untyped-def]
    return {"out": items.map(child_of)}


async def linked(rt: Runtime, values: list[Any]) -> list[Any]:
    cells = [rt.get_cell(("e", i)) for i in range(len(values))]
    tx = rt.edit()
    for c, v in zip(cells, values, strict=True):
        c.with_tx(tx).set(v)
    assert (await tx.commit()).ok
    return [c.link() for c in cells]


def test_map_filter_and_flat_map_take_plain_functions_and_launch_no_child() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            e = rt.get_cell("e")
            await e.set(4)
            _items, res = await run_list(rt, FnAll, [1, e.link(), 3, 0, 2])
            out = await res.pull()
            assert [2, 8, 6, 0, 4] == out["doubled"]
            assert [4, 0, 2] == out["evens"]
            assert [1, 4, 4, 4, 4, 3, 3, 3, 2, 2] == out["repeated"]
            assert 1 == len(rt.registrations())  # the list's run only: no child runs
            await e.set(5)  # the linked element stops being even
            assert [0, 2] == await res.key("evens").pull()
            rt._check()

    arun(main)


def test_a_lambda_is_a_list_op() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            items, res = await run_list(rt, FnLambda, [1, 2])
            assert [101, 102] == await res.key("out").pull()
            items.set([5])
            assert [105] == await res.key("out").pull()

    arun(main)


def test_linked_elements_keep_their_computation_when_they_move() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            links = await linked(rt, [0, 1, 2, 3, 4, 5])
            items, res = await run_list(rt, FnMapped, links)
            assert [0, 2, 4, 6, 8, 10] == await res.key("out").pull()
            before = CALLS["double"]
            items.set(list(reversed(links)))
            assert [10, 8, 6, 4, 2, 0] == await res.key("out").pull()
            assert 0 == CALLS["double"] - before  # moved, not recomputed
            x = rt.get_cell("x")
            await x.set(50)
            items.set([*links[:3], x.link(), *links[3:]])
            assert [0, 2, 4, 100, 6, 8, 10] == await res.key("out").pull()
            assert 1 == CALLS["double"] - before  # only the new element computed

    arun(main)


def test_an_edit_inside_an_element_runs_only_that_elements_function() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [{"title": f"note {i}"} for i in range(30)]
            items, res = await run_list(rt, FnTitles, notes)
            await res.key("out").pull()
            reconciles = coordinator(rt).reconciles
            before = CALLS["upper"]
            items.key(17, "title").set("edited")
            out = await res.key("out").pull()
            assert "EDITED" == out[17]
            assert 1 == CALLS["upper"] - before
            assert reconciles == coordinator(rt).reconciles  # the list was not walked

    arun(main)


def test_a_function_taking_index_runs_again_when_its_index_changes() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            a, b, c = await linked(rt, [0, 10, 20])
            items, res = await run_list(rt, FnIndexed, [a, b, c])
            assert [[0, 0], [10, 1], [20, 2]] == await res.key("out").pull()
            before = CALLS["at"]
            items.set([b, a, c])
            assert [[10, 0], [0, 1], [20, 2]] == await res.key("out").pull()
            assert 2 == CALLS["at"] - before  # a and b moved; c kept its index

    arun(main)


def test_removed_elements_computations_go_and_a_stop_leaves_no_node() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            values = list(range(1, 11))
            items, res = await run_list(rt, FnMapped, values)
            assert [2 * v for v in values] == await res.key("out").pull()
            full = rt.scheduler.statistics()["nodes"]
            items.set(values[:4])
            assert [2, 4, 6, 8] == await res.key("out").pull()
            assert full - 6 == rt.scheduler.statistics()["nodes"]
            functions = coordinator(rt).functions
            assert functions is not None and 4 == len(functions.elements)
            functions._check()
            await rt.stop(res)
            assert 0 == rt.scheduler.statistics()["nodes"]
            assert set() == rt.runner.coordinators

    arun(main)


def test_a_function_op_is_found_again_on_another_runtime_and_after_restart() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            _items, res = await run_list(rt := one, FnLambda, [1, 2, 3])
            assert [101, 102, 103] == await res.key("out").pull()
            await rt.idle()
        async with Runtime(store) as two:
            other = two.get_cell("r")
            assert await two.start(other) is True
            assert [101, 102, 103] == await other.key("out").pull()
            two.get_cell("r-items").set([7])
            assert [107] == await other.key("out").pull()

    arun(main)


def test_a_function_op_returning_a_pattern_instance_fails_naming_the_rule() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, FnChild, [1])
            with pytest.raises(NodeError, match="use a pattern op") as info:
                await res.key("out").pull()
            assert isinstance(info.value.__cause__, PatternError)

    arun(main)


def test_a_list_op_must_be_a_pattern_or_a_plain_function() -> None:
    @pattern
    def WithLift(items):  # type: ignore[no-untyped-def]
        return {"out": items.map(lift(double))}

    @pattern
    def WithNumber(items):  # type: ignore[no-untyped-def]
        return {"out": items.map(3)}

    for bad in (WithLift, WithNumber):
        with pytest.raises(PatternError, match="a plain function of the element"):
            bad.graph  # noqa: B018

"""A map's element child keeps its argument in its result document (`docs.folds_argument`).

The argument `{"element": e}` is a function of the child's identity (a link element's
target, or a link through the coordinator's list input to an inline element's id), so
the child has no argument document and its lifts bind `e` itself. These tests pin what
must hold with that layout: nothing is stored as an argument document, another runtime
that opens the child as a page reads the argument from the result document, and a setup
that gives the child another argument re-instantiates it where it runs.
"""

from __future__ import annotations

from pattern_defs import Double, Mapped
from support import arun, coordinator, run_list

from cells import MISSING, Link, MemoryStore
from runner import Runtime
from runner import _docs as docs


def test_a_mapped_elements_child_keeps_its_argument_in_its_result_document() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            items, res = await run_list(rt, Mapped, [1, 2])
            target = rt.get_cell("target")
            await target.set(5)
            _linked, res2 = await run_list(rt, Mapped, [target], name="r2")
            assert [2, 4] == await res.key("out").pull()
            assert [10] == await res2.key("out").pull()
            await rt.idle()
            for out in (res, res2):
                for i in range(len(await out.key("out").pull())):
                    child = out.key("out", i).resolve().link()
                    doc = store.read_durable(child.key(rt.identity))
                    argument = doc[docs.ARGUMENT]
                    assert type(argument) is dict and type(argument["element"]) is Link
                    arg_doc = docs.argument_link(child).key(rt.identity)
                    assert MISSING == store.read_durable(arg_doc)
            # An inline element is reached through the list input's link (its id appended).
            first = res.key("out", 0).resolve().link()
            element = store.read_durable(first.key(rt.identity))[docs.ARGUMENT]["element"]
            assert element.path[:-1] == ("items",) and element.path[-1].startswith("#")
            # A link element is the link itself.
            child = res2.key("out", 0).resolve().link()
            assert {"element": target.link()} == store.read_durable(child.key(rt.identity))[
                docs.ARGUMENT
            ]
            await items.key(1).set(7)
            assert [2, 14] == await res.key("out").pull()
            rt._check()

    arun(main)


def test_a_folded_child_opened_as_a_page_on_another_runtime_reads_its_element() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as one:
            items, res = await run_list(one, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            await one.get_cell("pointer").set(res.key("out", 1).resolve())  # (a link)
            await one.idle()
            async with Runtime(store) as two:
                assert await two.open_page(two.get_cell("pointer")) is True
                page = two.get_cell("pointer").resolve()
                await two.idle()
                assert set() == two.runner.coordinators  # only the child runs here
                assert 4 == page.get()
                await items.key(1).set(20)
                await one.idle()
                await two.idle()
                assert 40 == page.get()
                two._check()

    arun(main)


def test_a_setup_that_gives_a_folded_child_another_argument_rebinds_it() -> None:
    """The child's lifts took its folded argument as constants: a setup with an argument
    document instead re-instantiates the running child (without that it went on
    reading its old element: 4, not 18)."""

    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            child = res.key("out", 1).resolve()
            assert coordinator(rt).fold
            other = rt.get_cell("other")
            await other.set(9)
            async with rt.edit() as tx:
                rt.setup(tx, Double, {"element": other}, child)
            await rt.idle()
            assert 18 == await child.pull()
            await other.set(10)
            assert 20 == await child.pull()
            rt._check()

    arun(main)

"""The runtime names cells by their cause: inspect(), start errors, node reprs (item 13)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pattern_defs import Child

from cells import Link, describe_id, entity_id
from runner import PatternError, Runtime
from runner import _docs as docs
from runner._list_keys import child_link, element_keys


def test_inspect_names_each_registration_and_page_by_its_cause() -> None:
    async def main() -> dict[str, object]:
        async with Runtime() as rt:
            board = rt.get_cell({"board": "kitchen"}, scope="user")
            async with rt.edit() as tx:
                rt.run(tx, Child, {"value": 2}, board)
            assert await rt.open_page(board) is True
            snapshot = rt.inspect()
            json.dumps(snapshot)  # still JSON-serialisable
            return snapshot

    snapshot = asyncio.run(main())
    regs = snapshot["registrations"]
    assert isinstance(regs, list)
    (reg,) = [r for r in regs if r["pattern"].endswith("Child")]
    assert "{'board': 'kitchen'}" == reg["cause"]
    causes = snapshot["causes"]
    assert isinstance(causes, dict)
    pages = snapshot["pages"]
    assert isinstance(pages, list)
    (page,) = pages
    assert "{'board': 'kitchen'}" == causes[page.split("/")[-1].rstrip(">")]


def test_starting_a_cell_with_no_run_names_it_by_its_cause() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            with pytest.raises(PatternError, match=r"\('nothing here'\) holds no pattern run"):
                await rt.start(rt.get_cell("nothing here"))

    asyncio.run(main())


def test_a_nodes_repr_names_the_cause_of_the_document_it_writes() -> None:
    rt = Runtime()
    out, src = rt.get_cell("total"), rt.get_cell("amount")
    node = rt.scheduler.derive(out, [src], lambda v: v)
    assert "('total')" in repr(node)
    rt.close()


def test_a_runs_argument_internal_and_page_ids_name_their_causes() -> None:
    # The runner remembers these causes as recalls of the result's link (not as bytes).
    async def main() -> tuple[str | None, str | None, str | None]:
        async with Runtime() as rt:
            board = rt.get_cell({"board": "hall"})
            async with rt.edit() as tx:
                rt.run(tx, Child, {"value": 2}, board)
            assert await rt.open_page(board) is True
            link = board.link()
            return (
                describe_id(docs.argument_link(link).id),
                describe_id(docs.internal_link(link, 0).id),
                describe_id(docs.page_id(link)),
            )

    argument, internal, page = asyncio.run(main())
    assert "{'argument': [<{'board': 'hall'}>, 'space']}" == argument
    assert "{'internal': [<{'board': 'hall'}>, 'space'], 'node': 0}" == internal
    assert page is not None and page.startswith("['default', <{'board': 'hall'}>, 'space', [")


def test_a_list_elements_child_id_names_its_container_and_element() -> None:
    container = Link("default", entity_id("cards of the hall board"), "space")
    element = Link("default", entity_id("card 7"), "space")
    (key,) = element_keys([element])
    child = child_link("map", container, key)
    assert child.id == entity_id(
        {"map": [container.id, "space"], "element": ["link", "default", element.id, "space", [], 0]}
    )
    assert (
        "{'element': ['link', 'default', <'card 7'>, 'space', [], 0], 'map': [<'cards of the hall"
        " board'>, 'space']}" == describe_id(child.id, limit=200)
    )

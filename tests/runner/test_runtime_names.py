"""The runtime names cells by their cause: inspect(), start errors, node reprs (item 13)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pattern_defs import Child

from runner import PatternError, Runtime


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
    (page,) = snapshot["pages"]  # type: ignore[misc]
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

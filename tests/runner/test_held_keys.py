"""A running program keeps one key object per document (`Replica.held_key`).

The runner makes a document's key anew wherever it needs it (`Link.key`); what it
keeps (a registration, a lift's output, a node's outputs and read set) is the object
the replica holds for the document, so a mapped element or an open page holds one
key per document instead of one per holder (56 bytes per copy).
"""

from __future__ import annotations

from typing import Any

from support import arun

from cells import DocKey
from runner import Runtime, lift, pattern


def card(x: Any) -> Any:
    return {"n": x}


@pattern
def Card(element):  # type: ignore[no-untyped-def]
    return lift(card)(element)


@pattern
def Board(items):  # type: ignore[no-untyped-def]
    return {"cards": items.map(Card)}


@pattern
def Page(n):  # type: ignore[no-untyped-def]
    return {"card": lift(card)(n)}


def _kept_keys(rt: Runtime, only: str = "") -> list[DocKey]:
    """Every document key the registrations and the scheduler's nodes (those whose label
    holds `only`) keep."""
    keys: list[DocKey] = [reg.key for reg in rt.runner.registrations if type(reg.key) is DocKey]
    for node in rt.scheduler.graph.nodes:
        if only not in node.label:
            continue
        keys += (key for key, _ in node.outputs)
        keys += node.reads
        keys += node.declared or ()
        out_key = getattr(node.fn, "out_key", None)  # a lift's own
        if out_key is not None:
            keys.append(out_key)
    return keys


def _not_held(rt: Runtime, keys: list[DocKey]) -> list[DocKey]:
    replica = rt.runner.replica
    return [key for key in keys if replica.is_loaded(key) and replica.held_key(key) is not key]


def test_a_mapped_board_keeps_the_replicas_key_objects() -> None:
    async def main() -> None:
        async with Runtime(space="t") as rt:
            items, board = rt.get_cell("items"), rt.get_cell("board")
            async with rt.edit() as tx:
                items.with_tx(tx).set([1, 2, 3])
                rt.run(tx, Board, {"items": items}, board)
            assert [c["n"] for c in (await board.pull())["cards"]] == [1, 2, 3]
            # (The board's own coordinator may keep a second key of its output: one per
            # board, registered before the document was made.)
            keys = _kept_keys(rt, only="Card.")
            assert len(keys) > 3 * 4  # every element's registration, node and reads
            assert [] == _not_held(rt, keys)

    arun(main)


def test_open_pages_keep_the_replicas_key_objects() -> None:
    async def main() -> None:
        async with Runtime(space="t") as rt:
            pages = [rt.get_cell(("page", i)) for i in range(3)]
            async with rt.edit() as tx:
                for i, res in enumerate(pages):
                    rt.setup(tx, Page, {"n": i}, res)
            for res in pages:
                await rt.open_page(res)
            assert (await pages[-1].pull())["card"] == {"n": 2}
            keys = _kept_keys(rt)
            assert len(keys) > 3 * 2
            assert [] == _not_held(rt, keys)

    arun(main)

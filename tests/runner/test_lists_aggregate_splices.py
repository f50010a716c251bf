"""A filter's or flat_map's output is spliced, not rewritten, when its list is (issue 14
item 5).

An insert at the front or a remove from the middle of the list — inline dicts or
links — runs the coordinator once, which splices its elements document, and the
combiner once, which splices the output: the removed element's part goes, the
inserted element's part comes (`Combiner.updates`, never a whole `combines`), and
its read set changes by those elements' results only (`Scheduler.keep_reads` with
`replace`). An edit of an inserted element then reaches the output (its result is
read), and one of a kept element after the splice lands at its new place.
"""

from __future__ import annotations

from typing import Any

import pytest
from note_boards import (
    Copied,
    CopiedChildren,
    OpenChildren,
    OpenOnes,
    copies,
    is_open,
)
from support import arun, coordinator, run_list

from runner import Runtime
from runner._list_combine import Combiner

N = 30


def note(i: int) -> dict[str, Any]:
    return {"t": f"n{i}", "open": i % 3 != 0, "n": i % 3}


def expected(board: Any, notes: list[dict[str, Any]]) -> list[Any]:
    if board in (OpenOnes, OpenChildren):
        return [x for x in notes if is_open(x)]
    return [y for x in notes for y in copies(x)]


BOARDS = [OpenOnes, Copied, OpenChildren, CopiedChildren]


def counts(combiner: Combiner, rt: Runtime) -> tuple[int, int, int]:
    return combiner.combines, combiner.updates, coordinator(rt).reconciles


def child_results(rt: Runtime, combiner: Combiner) -> set[Any]:
    """The documents the combiner's node reads, but for the elements document's."""
    (kept,) = combiner.kept.values()
    (node,) = combiner.nodes.values()
    return set(node.reads) - kept.fixed


@pytest.mark.parametrize("linked", [False, True], ids=["inline", "linked"])
@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.__qualname__)
def test_an_insert_at_the_front_and_a_remove_from_the_middle_splice_the_output(
    board: Any, linked: bool
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(N)]
            cells = [rt.get_cell(("note", i)) for i in range(N + 2)]
            if linked:
                tx = rt.edit()
                for c, x in zip(cells[:N], notes, strict=True):
                    c.with_tx(tx).set(x)
                assert (await tx.commit()).ok
            held: list[Any] = [c.link() for c in cells[:N]] if linked else list(notes)
            items, res = await run_list(rt, board, held)
            assert expected(board, notes) == await res.key("out").pull()
            seen: list[Any] = []
            cancel = res.key("out").sink(seen.append)  # the combiner stays live
            await rt.idle()
            combiner = coordinator(rt).combiner
            assert combiner is not None
            reads = child_results(rt, combiner)
            for step, (at, new) in enumerate([(0, note(40)), (N // 2, None), (0, note(41))]):
                before = counts(combiner, rt)
                if new is None:
                    await items.remove(at)
                    del notes[at], held[at]
                else:
                    if linked:
                        await cells[N + step // 2].set(new)
                    held.insert(at, cells[N + step // 2].link() if linked else new)
                    await items.insert(at, held[at])
                    notes.insert(at, new)
                await rt.idle()
                assert expected(board, notes) == seen[-1]
                combines, updates, reconciles = counts(combiner, rt)
                assert (before[0], before[1] + 1, before[2] + 1) == (
                    combines,
                    updates,
                    reconciles,
                ), "one reconcile, one combiner update, no whole combine"
                now = child_results(rt, combiner)
                if new is None:
                    assert now < reads  # the removed element's result is not read
                else:
                    assert now > reads  # the inserted one's is
                reads = now
                rt._check()
            # An edit of an inserted element reaches the output (its result is read);
            # one of a kept element lands at its place after the splices.
            for i, field, value in [(0, "n", 2), (0, "open", False), (N // 2 + 3, "n", 0)]:
                before = counts(combiner, rt)
                notes[i] = {**notes[i], field: value}
                if linked:
                    (cell,) = [c for c in cells if c.link() == held[i]]
                    await cell.key(field).set(value)
                else:
                    await items.key(i, field).set(value)
                await rt.idle()
                assert expected(board, notes) == seen[-1]
                assert before[0] == combiner.combines and before[2] == coordinator(rt).reconciles
            cancel()
            rt._check()

    arun(main)

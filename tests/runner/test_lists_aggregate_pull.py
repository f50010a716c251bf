"""A pull of a filter's or flat_map's output with no observer costs what changed (issue
14 item 5).

Nothing observes the output: its combiner and every element's node are dormant. Edits
made meanwhile (to two elements, each changing its result) leave those two elements'
nodes stale; the pull then runs exactly them and the combiner's update, returns the
current value, and makes nothing live: the other elements' nodes are neither run nor
made live and dormant again (the scheduler's liveness was O(N) per pull before).
"""

from __future__ import annotations

from typing import Any

import pytest
from note_boards import Copied, OpenOnes, copies, is_open, run_notes
from support import arun, coordinator

from runner import Runtime

N = 40


def note(i: int) -> dict[str, Any]:
    return {"t": f"n{i}", "open": i % 3 != 0, "n": i % 3}


def expected(board: Any, notes: list[dict[str, Any]]) -> list[Any]:
    if board is OpenOnes:
        return [x for x in notes if is_open(x)]
    return [y for x in notes for y in copies(x)]


@pytest.mark.parametrize("linked", [False, True], ids=["inline", "linked"])
@pytest.mark.parametrize("board", [OpenOnes, Copied], ids=lambda b: b.__qualname__)
def test_a_pull_after_edits_made_while_undemanded_runs_only_the_edited_elements(
    board: Any, linked: bool
) -> None:
    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(N)]
            cells, items, res = await run_notes(rt, board, notes, linked)
            out = res.key("out")
            assert expected(board, notes) == await out.pull()
            sch = rt.scheduler
            assert not any(n.is_live for n in sch.graph.nodes)  # nothing observes it
            combiner = coordinator(rt).combiner
            assert combiner is not None
            for rounds in range(3):
                before = sch.statistics()
                combines, reconciles = combiner.combines, coordinator(rt).reconciles
                field, flip = (
                    ("open", lambda v: not v) if board is OpenOnes else ("n", lambda v: (v + 1) % 3)
                )
                edited = [(5 + rounds) % N, (17 + 3 * rounds) % N]
                for i in edited:  # (each changes its element's result)
                    value = flip(notes[i][field])
                    notes[i] = {**notes[i], field: value}
                    if linked:
                        await cells[i].key(field).set(value)
                    else:
                        await items.key(i, field).set(value)
                await rt.idle()
                assert sch.stats.runs == before["runs"], "nothing ran before the pull"
                assert expected(board, notes) == await out.pull()
                after = sch.statistics()
                # The two elements' nodes and one update of the combiner: nothing else ran.
                assert before["runs_computation"] + 3 == after["runs_computation"]
                assert (combines, reconciles) == (combiner.combines, coordinator(rt).reconciles)
                # Nothing was made live (and dormant again): no liveness count changed.
                assert before["liveness_writes"] == after["liveness_writes"]
                assert not any(n.is_live for n in sch.graph.nodes)
                assert not sch.graph.pulled
                rt._check()
                # A second pull with nothing changed runs nothing.
                assert expected(board, notes) == await out.pull()
                assert after["runs"] == sch.stats.runs

    arun(main)

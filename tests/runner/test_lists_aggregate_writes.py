"""A flat_map element whose part keeps its length but changes several items writes the
output list once (issue 14 item 5).

The combiner writes only the changed items of such a part, each at its place. Written
one `Transaction.write` each, every item copied the whole output list again, in the
transaction, in the commit's new value and in the store's (six copies of a 400-item
list for a part of two items). `Transaction.write_items` writes them as one: one new
list per edit, which the commit and the memory store share. Counted here by the new
long lists `cells._values` makes (`_edge`, called once per list it makes from another).
"""

from __future__ import annotations

from typing import Any

import pytest
from note_boards import Copied, copies, run_notes
from support import arun, coordinator

import cells._values as values
from runner import Runtime

N = 200  # two copies each: a 400-item output, long enough to be reused (`_EDGE_MIN`)


def note(i: int) -> dict[str, Any]:
    return {"t": f"n{i}", "open": True, "n": 2}


@pytest.mark.parametrize("linked", [False, True], ids=["inline", "linked"])
def test_an_edit_changing_two_items_of_a_part_makes_one_output_list(
    linked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    edge = values._edge

    def counted(new: list[Any], old: list[Any], index: int, delete: int, added: int) -> None:
        made.append(len(new))
        edge(new, old, index, delete, added)

    monkeypatch.setattr(values, "_edge", counted)

    async def main() -> None:
        async with Runtime() as rt:
            notes = [note(i) for i in range(N)]
            cells, items, res = await run_notes(rt, Copied, notes, linked)
            out = res.key("out")
            assert await out.pull() == [y for x in notes for y in copies(x)]
            combiner = coordinator(rt).combiner
            assert combiner is not None
            for k in range(6):
                i = (37 * k + 11) % N
                notes[i] = {**notes[i], "t": f"edited {k}"}
                if linked:
                    await cells[i].key("t").set(f"edited {k}")
                else:
                    await items.key(i, "t").set(f"edited {k}")
                updates, combines = combiner.updates, combiner.combines
                del made[:]
                assert await out.pull() == [y for x in notes for y in copies(x)]
                assert (combiner.updates, combiner.combines) == (updates + 1, combines)
                # One new 400-item list: the transaction's; the commit's value and the
                # store's new head are that one (six before: two items, three copies).
                assert made == [2 * N]
                rt._check()

    arun(main)

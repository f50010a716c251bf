"""The runner behaves as the reference system does (issue 15): element results named by
`resolve()`, setup switching a running pattern, computations returning many children,
sends that bring their stream up to date, open pages that compute and pin their element.

Races hold verdicts or loads; time comes from a `ManualClock`; nothing sleeps.
"""

from __future__ import annotations

from typing import Any

from pattern_defs import Mapped
from support import arun, run_list

from runner import Runtime
from runner import _docs as docs

# --------------------------------------------------------------------------- item 1


def test_map_element_resolve_names_the_element_result_when_its_op_returns_a_bare_value() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            _items, res = await run_list(rt, Mapped, [1, 2, 3])
            assert [2, 4, 6] == await res.key("out").pull()
            element = res.key("out", 1).resolve()
            assert 4 == element.get()
            # The element's result document (it runs the op), not the lift's output.
            doc = rt.replica.visible(element.doc_key)
            assert isinstance(doc, dict) and docs.PATTERN in doc
            assert () == element.path
            assert await rt.start(element) is True
            assert rt.key(element) in rt.lifetimes()
            assert await rt.open_page(element) is True
            assert [element] == rt.pages()

    arun(main)

"""`when` / `unless` (issue 18 item 3): only the chosen branch computes; switching
releases the child of the branch left; races with commits, stale bases and stops are
reproduced by holding verdicts."""

from __future__ import annotations

from typing import Any

import pytest
from support import arun
from typed_defs import CALLS, Expander, Panel, Values

from cells import MemoryStore, Outcome
from runner import PatternError, Runtime, pattern, when
from runner import _docs as docs


async def _panel(rt: Runtime, open_: bool, name: str = "p") -> tuple[Any, Any]:
    flag = rt.get_cell(f"{name}-flag")
    res = rt.get_cell(name)
    tx = rt.edit()
    flag.with_tx(tx).set(open_)
    rt.run(tx, Panel, {"open": flag, "name": "n"}, res)
    assert (await tx.commit()).ok
    await rt.idle()
    return flag, res


async def _set(rt: Runtime, cell: Any, value: Any) -> None:
    tx = rt.edit()
    cell.with_tx(tx).set(value)
    assert (await tx.commit()).ok
    await rt.idle()


def _branch_child(res: Any, index: int) -> Any:
    """The result of Panel's branch child (node `index`: 0 then, 1 otherwise)."""
    return docs.internal_link(res.link(), index)


def _children(rt: Runtime, res: Any) -> set[int]:
    """Which of Panel's branch children are registered."""
    regs = rt.registrations()
    return {i for i in (0, 1) if _branch_child(res, i).key(rt.identity) in regs}


def test_value_and_reference_branches_follow_the_condition() -> None:
    async def main() -> None:
        CALLS.clear()
        async with Runtime() as rt:
            flag = rt.get_cell("flag")
            res = rt.get_cell("v")
            tx = rt.edit()
            flag.with_tx(tx).set(False)
            rt.run(tx, Values, {"flag": flag, "v": 5}, res)
            assert (await tx.commit()).ok
            assert {"picked": "no", "negated": "off", "ref": 0} == await res.pull()
            assert 0 == CALLS.get("expensive", 0)  # the reference not chosen never computed
            await _set(rt, flag, True)
            assert {"picked": "yes", "negated": None, "ref": 5} == await res.pull()
            assert 1 == CALLS["expensive"]

    arun(main)


def test_only_the_chosen_child_is_launched_and_computes() -> None:
    async def main() -> None:
        CALLS.clear()
        async with Runtime() as rt:
            _flag, res = await _panel(rt, True)
            assert {"shown": {"text": "details of n"}} == await res.pull()
            assert {0} == _children(rt, res)
            assert {"detail:n": 1} == CALLS

    arun(main)


def test_switching_releases_the_child_of_the_branch_left() -> None:
    async def main() -> None:
        CALLS.clear()
        async with Runtime() as rt:
            flag, res = await _panel(rt, True)
            await _set(rt, flag, False)
            assert {"shown": {"text": "details of closed"}} == await res.pull()
            assert {1} == _children(rt, res)
            await _set(rt, flag, True)
            assert {0} == _children(rt, res)
            assert {"shown": {"text": "details of n"}} == await res.pull()
            rt.stop(res)
            await rt.idle()
            assert frozenset() == rt.registrations()  # teardown releases the held child
            rt._check()

    arun(main)


def test_a_page_opened_on_a_branch_child_survives_the_switch() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            flag, res = await _panel(rt, True)
            page = res.key("shown").resolve()  # the then-branch child's result
            assert await rt.open_page(page) is True
            await _set(rt, flag, False)
            assert {0, 1} == _children(rt, res)  # the page keeps the left child running
            assert "details of n" == await page.key("text").pull()
            assert {"shown": {"text": "details of closed"}} == await res.pull()

    arun(main)


def test_a_stateful_toggle_shows_its_child_only_while_open() -> None:
    async def main() -> None:
        async with Runtime() as rt:
            res = rt.get_cell("e")
            tx = rt.edit()
            rt.run(tx, Expander, {"name": "ex"}, res)
            assert (await tx.commit()).ok
            assert {"open": False, "toggle": None, "detail": None} == await res.pull()
            assert 1 == len(rt.registrations())
            await rt.send(res.key("toggle"), {})
            assert {"text": "details of ex"} == await res.key("detail").pull()
            assert 2 == len(rt.registrations())
            await rt.send(res.key("toggle"), {})
            await rt.idle()
            assert None is await res.key("detail").pull()
            assert 1 == len(rt.registrations())

    arun(main)


def test_switch_racing_a_rejected_commit_ends_on_the_durable_branch() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            flag, res = await _panel(rt, True)
            with store.testing.hold_verdicts() as gate:
                tx = rt.edit()
                flag.with_tx(tx).set(False)
                pending = tx.commit()  # applied locally: the switch runs, its commit held
                rt.settle()
                assert {1} == _children(rt, res)
                assert gate.waiting() >= 2
                gate.reject(0, Outcome.PERMANENT)  # the flag's write never lands
                gate.release()
            assert not (await pending).ok
            await rt.idle()
            assert True is await flag.pull()
            assert {0} == _children(rt, res)  # switched back; the other child let go
            assert {"shown": {"text": "details of n"}} == await res.pull()
            rt._check()

    arun(main)


def test_switch_whose_own_commit_is_stale_runs_again_and_keeps_one_child() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            flag, res = await _panel(rt, True)
            with store.testing.hold_verdicts() as gate:
                tx = rt.edit()
                flag.with_tx(tx).set(False)
                pending = tx.commit()
                rt.settle()
                gate.accept(0)  # the flag lands
                gate.reject(0, Outcome.STALE_BASIS)  # the switch's setup: a stale basis
                gate.release()
            assert (await pending).ok
            await rt.idle()
            assert {1} == _children(rt, res)
            assert {"shown": {"text": "details of closed"}} == await res.pull()
            rt._check()

    arun(main)


def test_stop_while_a_switch_is_held_leaves_nothing_running() -> None:
    async def main() -> None:
        store = MemoryStore()
        async with Runtime(store) as rt:
            flag, res = await _panel(rt, True)
            with store.testing.hold_verdicts() as gate:
                tx = rt.edit()
                flag.with_tx(tx).set(False)
                pending = tx.commit()
                rt.settle()
                assert {1} == _children(rt, res)
                rt.stop(res)
                gate.release()
            await pending
            await rt.idle()
            assert frozenset() == rt.registrations()
            assert 0 == rt.scheduler.statistics()["nodes"]
            rt._check()

    arun(main)


def test_a_child_can_be_the_branch_of_one_when_only() -> None:
    from typed_defs import Detail

    def body(flag):  # type: ignore[no-untyped-def]
        child = Detail(name="x")
        return {"a": when(flag, child), "b": when(flag, child)}

    body.__qualname__ = "twice_a_branch"
    with pytest.raises(PatternError, match="already a branch of another when"):
        pattern(body).graph  # noqa: B018


def test_a_send_computes_the_way_to_a_handler_in_a_branch_child() -> None:
    from typed_defs import Editor

    async def main() -> None:
        async with Runtime() as rt:
            show = rt.get_cell("show")
            text = rt.get_cell("text")
            res = rt.get_cell("ed")
            tx = rt.edit()
            show.with_tx(tx).set(True)
            text.with_tx(tx).set("old")
            rt.run(tx, Editor, {"show": show, "text": text}, res)
            assert (await tx.commit()).ok
            # No pass ran yet: the send computes the when node, which launches the child.
            assert "done" == await rt.send(res.key("note", "edit"), {"text": "new"})
            assert "new" == await text.pull()

    arun(main)
